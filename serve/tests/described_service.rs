//! `commitgap-live --service FILE` as a team with a service of its own runs it. The reference's
//! own served binary, described by a service file as if it were a stranger's program, passes a
//! short run with every fault on; the same description over a planted bug's binary and schema
//! fails; a description that cannot run exits 2 with one line; a killed check leaves no process
//! behind. Every process a test starts is stopped by the test.

#[path = "../../sim/tests/scratch/mod.rs"]
mod scratch;

mod processes;

use processes::{Stopped, processes_mentioning};

use scratch::Scratch;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use commitgap_sim::commitgap::schema::SCHEMA_SQL;

const CHECK: &str = env!("CARGO_BIN_EXE_commitgap-live");
const SERVED: &str = env!("CARGO_BIN_EXE_reference-serve");

/// A description of the served reference running `system`, in the words of a service file: its
/// commands are the served binary's, its tables are mapped column by column.
fn description(system: &str) -> String {
    let command = |arguments: &str| format!("[\"{SERVED}\", \"--system\", \"{system}\", {arguments}]");
    format!(
        r#"
name = "described-{system}"
domain = "payments"

[database]
schema = "schema.sql"
account = "INSERT INTO accounts (account, tenant) VALUES (:account, :tenant)"
subject = "INSERT INTO orders (tenant, id, status, amount_cents, updated_ms) VALUES (:tenant, :subject, 'awaiting_payment', :amount_cents, 0)"

[commands]
receiver = {receiver}
relay = {relay}
purge = {purge}
requeue = {requeue}

[tables.receipts]
table = "receipts"
account = "account"
event_id = "event_id"
received_ms = "received_ms"

[tables.obligations]
table = "outbox"
operation_key = "operation_key"
payload = "payload"
status = "status"
owed = "pending"
done = "done"
dead = "dead"
lease_owner = "lease_owner"
lease_token = "lease_token"
lease_expires_ms = "lease_expires_ms"
next_attempt_ms = "next_attempt_ms"
dead_reason = "dead_reason"

[tables.entities]
table = "orders"
tenant = "tenant"
subject = "id"
state = "status"
fields = {{ amount_cents = "amount_cents" }}

[journal]
labels = true
"#,
        receiver = command(
            r#""run", "--database", "{database}", "--settings", "{settings_file}", "--listen", "{listen}", "--relay-workers", "0", "--purge-every-s", "0""#
        ),
        relay = command(
            r#""relay", "--database", "{database}", "--settings", "{settings_file}", "--provider-url", "{provider_url}", "--relay-settings", "{relay_settings_file}""#
        ),
        purge = command(r#""purge", "--database", "{database}", "--receipt-retention-ms", "{retention_ms}""#),
        requeue = command(r#""requeue", "--database", "{database}""#),
    )
}

/// Writes `text` as service.toml and `schema` as schema.sql in `directory`; the description's path.
fn write(directory: &Path, text: &str, schema: &str) -> PathBuf {
    std::fs::write(directory.join("schema.sql"), schema).unwrap();
    let path = directory.join("service.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn check(service: &Path, arguments: &[&str], out: &Path) -> Output {
    Command::new(CHECK)
        .arg("--service")
        .arg(service)
        .args(arguments)
        .arg("--out")
        .arg(out)
        .output()
        .expect("commitgap-live runs")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn the_reference_described_as_a_service_passes_a_short_run_with_every_fault_on() {
    let directory = Scratch::new("service", "reference");
    let service = write(&directory, &description("reference"), SCHEMA_SQL);
    let output = check(
        &service,
        &["--seed", "3", "--seconds", "10"],
        &directory.join("runs"),
    );
    let printed = text(&output);
    assert_eq!(output.status.code(), Some(0), "{printed}");
    assert!(printed.contains("verdict: pass"), "{printed}");
    // Every fault but the in-process crash applies to a service.
    assert!(printed.contains("kill, pause, connection-reset"), "{printed}");
    assert!(!printed.contains("crash,"), "{printed}");
    assert!(printed.contains("commits judged one by one"), "{printed}");
}

#[test]
fn a_described_planted_bug_fails_with_the_evidence_and_the_command() {
    let directory = Scratch::new("service", "no-receipt-dedup");
    // The planted bug's own schema: no unique receipt per event, no unique operation key.
    let schema = SCHEMA_SQL
        .replace("    UNIQUE (account, event_id)\n", "    CHECK (account <> '')\n")
        .replace(
            "operation_key    TEXT    NOT NULL UNIQUE,",
            "operation_key    TEXT    NOT NULL,",
        );
    let service = write(&directory, &description("no-receipt-dedup"), &schema);
    let output = check(
        &service,
        &["--seed", "1", "--seconds", "15"],
        &directory.join("runs"),
    );
    let printed = text(&output);
    assert_eq!(output.status.code(), Some(1), "{printed}");
    assert!(printed.contains("verdict: FAIL"), "{printed}");
    assert!(
        printed.contains("one-obligation-per-operation") || printed.contains("one-receipt-per-event"),
        "{printed}"
    );
    assert!(
        printed.contains(&format!("reproduce: {CHECK} --service {}", service.display())),
        "{printed}"
    );
}

/// A description that cannot run, by what it changes in the good one, and what its one line says.
#[test]
fn a_service_that_cannot_run_exits_2_with_one_line() {
    let good = description("reference");
    let receiver_line = good
        .lines()
        .find(|line| line.starts_with("receiver = "))
        .unwrap()
        .to_owned();
    let cases: Vec<(&str, String, String, &[&str], &str)> = vec![
        (
            "a receiver that exits while starting",
            good.replace(
                &receiver_line,
                r#"receiver = ["sh", "-c", "echo starting; echo 'no module named flask' >&2; exit 3"]"#,
            ),
            SCHEMA_SQL.to_owned(),
            &[],
            "receiver-1 did not start (exit status: 3): no module named flask | starting | no module named flask | starting | no module named flask (3 tries, each on a new port)",
        ),
        (
            "a receiver that never answers",
            good.replace(
                &receiver_line,
                "receiver = [\"sleep\", \"30\"]\nready_timeout_s = 1",
            ),
            SCHEMA_SQL.to_owned(),
            &[],
            "receiver-1 did not answer /healthz with 2xx within 1 s",
        ),
        (
            "a program that does not exist",
            good.replace(
                &receiver_line,
                r#"receiver = ["no-such-program-of-the-shop", "{port}"]"#,
            ),
            SCHEMA_SQL.to_owned(),
            &[],
            "cannot start receiver-1 (no-such-program-of-the-shop",
        ),
        (
            "a schema that does not run",
            good.clone(),
            "CREATE TABLE receipts (".to_owned(),
            &[],
            "database.schema",
        ),
        (
            "a mapped column the schema lacks",
            good.replace("subject = \"id\"", "subject = \"order_id\""),
            SCHEMA_SQL.to_owned(),
            &[],
            "tables.entities.subject = \"order_id\" is not a column of orders",
        ),
        (
            "the in-process crash fault",
            good.clone(),
            SCHEMA_SQL.to_owned(),
            &["--faults", "crash,kill"],
            "--faults crash needs crash points inside the process",
        ),
    ];
    for (what, text, schema, arguments, says) in cases {
        let directory = Scratch::new("service", "bad");
        let service = write(&directory, &text, &schema);
        let mut all = vec!["--seconds", "5"];
        all.extend_from_slice(arguments);
        let output = check(&service, &all, &directory.join("runs"));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{what}: {}", self::text(&output));
        assert_eq!(stderr.trim_end().lines().count(), 1, "{what}: {stderr}");
        assert!(stderr.contains(says), "{what}: {stderr:?} does not say {says:?}");
    }
}

#[test]
fn a_killed_check_leaves_none_of_the_services_processes_behind() {
    let directory = Scratch::new("service", "killed");
    let service = write(&directory, &description("reference"), SCHEMA_SQL);
    let out = directory.join("runs");
    let child = Command::new(CHECK)
        .arg("--service")
        .arg(&service)
        .args(["--seconds", "60", "--out"])
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = Stopped(child);
    // The service's processes name the run's database, under `out`.
    let marker = out.display().to_string();
    let started = Instant::now();
    while processes_mentioning(&marker).len() < 5 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the service's processes did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // SIGKILL: the check gets no chance to stop anything itself.
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<String> = processes_mentioning(&marker)
            .into_iter()
            .filter(|command| !command.contains("--service"))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "processes left behind: {left:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_contract_names_what_judges_the_service_and_checks_its_domain() {
    let directory = Scratch::new("service", "contract");
    let service = write(&directory, &description("reference"), SCHEMA_SQL);
    let output = Command::new(CHECK)
        .arg("--service")
        .arg(&service)
        .arg("--contract")
        .output()
        .unwrap();
    let printed = text(&output);
    assert_eq!(output.status.code(), Some(0), "{printed}");
    assert!(
        printed.contains("contract of described-reference (payments domain"),
        "{printed}"
    );
    assert!(printed.contains("one-effect-per-operation"), "{printed}");
    assert!(printed.contains("domain check: payments keeps"), "{printed}");
    let missing = Command::new(CHECK)
        .args(["--service", "/nowhere/service.toml", "--contract"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
}
