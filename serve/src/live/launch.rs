//! How a live check starts each of the checked system's processes: copies of the served program
//! with its own flags, or a described service's own commands with their placeholders filled in
//! (docs/services.md). Everything a process is told (its port, the database, the settings files,
//! the provider's URL, its name) is decided here, once, for both kinds.
//!
//! This module must not start anything itself: it only says how ([`Launch`]); the fleet starts.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use commitgap_sim::commitgap::relay::RelaySettings;

use super::processes::Fleet;
use crate::service::{DescribedSystem, Launch, Role};

/// Under the crash fault, a served receiver or relay worker kills itself at one statement that
/// writes or ends a transaction in this many.
const CRASH_ONE_IN: u32 = 40;

/// What every process of one run is told, and how it is started.
pub struct Launcher {
    /// A described service, or `None` for copies of the served program.
    pub service: Option<Arc<DescribedSystem>>,
    /// The database file.
    pub database: String,
    /// The receiver's settings file (secrets, tolerance).
    pub settings_file: String,
    /// The relay's settings file.
    pub relay_settings_file: String,
    /// The relay's settings themselves.
    pub relay: RelaySettings,
    /// The provider double's base URL.
    pub provider_url: String,
    /// The largest body a receiver must accept.
    pub body_bytes_max: usize,
    /// The seed served processes draw their crash points from, when the crash fault is on.
    pub crash_seed: Option<u64>,
}

impl Launcher {
    /// A receiver listening at `address`.
    pub fn receiver(&self, fleet: &Fleet, address: SocketAddr) -> Result<Launch, String> {
        if let Some(service) = &self.service {
            let mut values = self.values();
            values.insert("port", address.port().to_string());
            values.insert("listen", address.to_string());
            return service.description().launch(Role::Receiver, &values);
        }
        let mut arguments = strings(&[
            "run",
            "--database",
            &self.database,
            "--settings",
            &self.settings_file,
            "--listen",
            &address.to_string(),
            "--relay-workers",
            "0",
            "--purge-every-s",
            "0",
        ]);
        arguments.extend(self.crash());
        Ok(fleet.copy(arguments))
    }

    /// A relay worker.
    pub fn relay(&self, fleet: &Fleet) -> Result<Launch, String> {
        if let Some(service) = &self.service {
            return service.description().launch(Role::Relay, &self.values());
        }
        let mut arguments = strings(&[
            "relay",
            "--database",
            &self.database,
            "--settings",
            &self.settings_file,
            "--provider-url",
            &self.provider_url,
            "--relay-settings",
            &self.relay_settings_file,
        ]);
        arguments.extend(self.crash());
        Ok(fleet.copy(arguments))
    }

    /// One run of the purge job, deleting receipts older than `retention_ms`.
    pub fn purge(&self, fleet: &Fleet, retention_ms: i64) -> Result<Launch, String> {
        if let Some(service) = &self.service {
            let mut values = self.values();
            values.insert("retention_ms", retention_ms.to_string());
            return service.description().launch(Role::Purge, &values);
        }
        Ok(fleet.copy(strings(&[
            "purge",
            "--database",
            &self.database,
            "--receipt-retention-ms",
            &retention_ms.to_string(),
        ])))
    }

    /// The operator's requeue, or `None` when the system has none.
    pub fn requeue(&self, fleet: &Fleet) -> Result<Option<Launch>, String> {
        match &self.service {
            Some(service) if !service.description().has(Role::Requeue) => Ok(None),
            Some(service) => service
                .description()
                .launch(Role::Requeue, &self.values())
                .map(Some),
            None => Ok(Some(fleet.copy(strings(&[
                "requeue",
                "--database",
                &self.database,
            ])))),
        }
    }

    /// The path a receiver answers 2xx on once it is ready, and how long it may take, in seconds.
    pub fn readiness(&self) -> (String, u64) {
        match &self.service {
            Some(service) => {
                let description = service.description();
                (description.ready_path.clone(), description.ready_timeout_s)
            }
            None => ("/healthz".to_owned(), 20),
        }
    }

    /// The placeholders' values every process of a described service may use.
    fn values(&self) -> BTreeMap<&'static str, String> {
        BTreeMap::from([
            ("database", self.database.clone()),
            ("settings_file", self.settings_file.clone()),
            ("relay_settings_file", self.relay_settings_file.clone()),
            ("provider_url", self.provider_url.clone()),
            ("call_timeout_ms", self.relay.call_timeout_ms.to_string()),
            ("lease_ms", self.relay.lease_ms.to_string()),
            ("key_lifetime_ms", self.relay.key_lifetime_ms.to_string()),
            ("body_bytes_max", self.body_bytes_max.to_string()),
        ])
    }

    fn crash(&self) -> Vec<String> {
        match self.crash_seed {
            Some(seed) => strings(&[
                "--crash-one-in",
                &CRASH_ONE_IN.to_string(),
                "--crash-seed",
                &seed.to_string(),
            ]),
            None => Vec::new(),
        }
    }
}

/// A path as a process is told it: absolute, so that a service that runs in its own directory
/// finds it.
pub fn absolute(path: &Path) -> Result<String, String> {
    std::path::absolute(path)
        .map(|path| path.display().to_string())
        .map_err(|error| format!("cannot make {} absolute: {error}", path.display()))
}

fn strings(arguments: &[&str]) -> Vec<String> {
    arguments.iter().map(|argument| (*argument).to_owned()).collect()
}
