//! `shop-serve` as an operator runs it: `init` creates the database once and refuses to overwrite
//! it, `run` prints where it listens, answers its health check and a signed delivery, and exits 0
//! after SIGTERM, having finished what was in flight. Every process the test starts is stopped by
//! the test.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use commitgap_sim::commitgap::signature::{SigningSecret, sign};

fn scratch(name: &str) -> PathBuf {
    let directory = std::env::temp_dir().join(format!("shop-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    std::fs::create_dir_all(&directory).unwrap();
    directory
}

fn example(file: &str) -> String {
    format!("{}/{file}", env!("CARGO_MANIFEST_DIR"))
}

/// Kills the child if the test ends before it exits.
struct Stopped(Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Posts a payment for the fixture's order, signed now with the example secret; returns the
/// status.
fn post_payment(base: &str) -> u16 {
    let body = br#"{"account":"acct-a","amount_cents":1250,"created_ms":0,"id":"evt-1","order":"order-1","tenant":"shop-a","type":"payment.succeeded"}"#;
    let secret = SigningSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    let timestamp_s = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let signature = sign(&secret, "msg_1", i64::try_from(timestamp_s).unwrap(), body);
    let answer = ureq::post(&format!("{base}/webhooks/acct-a"))
        .set("webhook-id", "msg_1")
        .set("webhook-timestamp", &timestamp_s.to_string())
        .set("webhook-signature", &signature)
        .send_bytes(body);
    match answer {
        Ok(response) => response.status(),
        Err(ureq::Error::Status(status, response)) => {
            panic!("{status}: {}", response.into_string().unwrap_or_default())
        }
        Err(error) => panic!("{error}"),
    }
}

#[test]
fn init_refuses_to_overwrite_and_run_stops_cleanly_on_sigterm() {
    let directory = scratch("run");
    let database = directory.join("shop.db");
    let database = database.to_str().unwrap();
    let init = |extra: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_shop-serve"))
            .args(["init", "--database", database])
            .args(extra)
            .output()
            .unwrap()
    };
    let created = init(&["--fixtures", &example("fixtures.example.json")]);
    assert_eq!(
        created.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&created.stderr)
    );
    let again = init(&[]);
    assert_eq!(again.status.code(), Some(2));
    let message = String::from_utf8_lossy(&again.stderr);
    assert_eq!(message.lines().count(), 1, "{message}");
    assert!(message.contains("exists already"), "{message}");

    let child = Command::new(env!("CARGO_BIN_EXE_shop-serve"))
        .args(["run", "--database", database, "--listen", "127.0.0.1:0"])
        .args(["--settings", &example("settings.example.json")])
        .args(["--relay-workers", "0", "--purge-every-s", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Stopped(child);
    let mut first_line = String::new();
    BufReader::new(child.0.stdout.take().unwrap())
        .read_line(&mut first_line)
        .unwrap();
    let address = first_line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("the first line is {first_line:?}"))
        .to_owned();
    let base = format!("http://{address}");
    assert_eq!(
        ureq::get(&format!("{base}/healthz")).call().unwrap().status(),
        200
    );

    assert_eq!(post_payment(&base), 200);

    let killed = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(exit) = child.0.try_wait().unwrap() {
            break exit;
        }
        assert!(
            Instant::now() < deadline,
            "shop-serve did not stop within 20 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(exit.code(), Some(0));
    let _ = std::fs::remove_dir_all(&directory);
}
