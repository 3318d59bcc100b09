//! What the service's tests share: a router served on a free localhost port.

/// A router served on a free localhost port until [`Server::stop`].
pub struct Server {
    pub base: String,
    stop: tokio::sync::oneshot::Sender<()>,
    served: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    pub fn start(runtime: &tokio::runtime::Runtime, router: axum::Router) -> Server {
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stops) = tokio::sync::oneshot::channel::<()>();
        let served = runtime.spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async {
                    let _ = stops.await;
                })
                .await
        });
        Server { base, stop, served }
    }

    pub fn stop(self, runtime: &tokio::runtime::Runtime) {
        let _ = self.stop.send(());
        runtime.block_on(self.served).unwrap().unwrap();
    }
}
