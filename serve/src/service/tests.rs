//! The service description as a team writes it: a good one loads and fills its placeholders,
//! every bad one is said in one line that names the field, and the database it sets up reads back
//! as the invariants' rows.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Role, ServiceDescription};

/// A description every test starts from: it loads, and each bad case changes one thing.
const GOOD: &str = r#"
name = "tiny"
domain = "payments"

[database]
schema = "schema.sql"
account = "INSERT INTO accounts (account, tenant) VALUES (:account, :tenant)"
subject = "INSERT INTO orders (tenant, order_id, status, amount_cents) VALUES (:tenant, :subject, 'awaiting_payment', :amount_cents)"

[commands]
receiver = ["python3", "svc.py", "receiver", "--listen", "{listen}", "--db", "{database}"]
relay = ["python3", "svc.py", "relay", "--name", "{process}", "--provider", "{provider_url}"]
purge = ["python3", "svc.py", "purge", "--older-than-ms", "{retention_ms}"]

[environment]
SVC_SETTINGS = "{settings_file}"

[tables.receipts]
table = "seen"
account = "account"
event_id = "event_id"

[tables.obligations]
table = "jobs"
operation_key = "job_key"
payload = "body"
status = "state"
owed = "todo"
done = "sent"
dead = "failed"
lease_owner = "owner"
lease_token = "token"

[tables.entities]
table = "orders"
tenant = "tenant"
subject = "order_id"
state = "status"
fields = { amount_cents = "amount_cents" }
"#;

const SCHEMA: &str = "
CREATE TABLE accounts (account TEXT PRIMARY KEY, tenant TEXT NOT NULL);
CREATE TABLE seen (account TEXT, event_id TEXT, UNIQUE (account, event_id));
CREATE TABLE jobs (job_key TEXT UNIQUE, body TEXT, state TEXT, owner TEXT, token INTEGER);
CREATE TABLE orders (tenant TEXT, order_id TEXT, status TEXT, amount_cents INTEGER);
";

/// A fresh directory holding `description` as service.toml and the schema as schema.sql.
fn written(description: &str, schema: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let directory = std::env::temp_dir().join(format!(
        "commitgap-service-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&directory).unwrap();
    std::fs::write(directory.join("service.toml"), description).unwrap();
    std::fs::write(directory.join("schema.sql"), schema).unwrap();
    directory.join("service.toml")
}

fn load(description: &str) -> Result<ServiceDescription, String> {
    ServiceDescription::load(&written(description, SCHEMA))
}

#[test]
fn a_good_description_fills_its_placeholders_for_each_role() {
    let description = load(GOOD).unwrap();
    assert_eq!(description.name, "tiny");
    assert!(!description.has(Role::Requeue));
    let values = BTreeMap::from([
        ("listen", "127.0.0.1:4000".to_owned()),
        ("database", "/tmp/x.sqlite".to_owned()),
        ("settings_file", "/tmp/settings.json".to_owned()),
        ("provider_url", "http://127.0.0.1:9".to_owned()),
    ]);
    let receiver = description
        .launch(Role::Receiver, &values)
        .map(|launch| launch.named("receiver-1"))
        .unwrap();
    assert_eq!(receiver.program, "python3");
    assert_eq!(
        receiver.arguments,
        [
            "svc.py",
            "receiver",
            "--listen",
            "127.0.0.1:4000",
            "--db",
            "/tmp/x.sqlite"
        ]
    );
    assert!(
        receiver
            .environment
            .contains(&("COMMITGAP_PROCESS".to_owned(), "receiver-1".to_owned()))
    );
    assert!(
        receiver
            .environment
            .contains(&("SVC_SETTINGS".to_owned(), "/tmp/settings.json".to_owned()))
    );
    let relay = description
        .launch(Role::Relay, &values)
        .map(|launch| launch.named("relay-2"))
        .unwrap();
    assert_eq!(relay.arguments[3], "relay-2");
    assert!(
        description
            .launch(Role::Requeue, &values)
            .map(|launch| launch.named("operator"))
            .is_err()
    );
}

#[test]
fn braces_doubled_stand_for_themselves() {
    let description =
        load(&GOOD.replace(r#""--name", "{process}""#, r#""--name", "{{x}}-{process}""#)).unwrap();
    let relay = description
        .launch(Role::Relay, &BTreeMap::new())
        .map(|launch| launch.named("relay-1"));
    // The relay also names {provider_url}, which this call gives no value: that is said.
    assert!(relay.unwrap_err().contains("{provider_url}"));
    let values = BTreeMap::from([
        ("provider_url", "u".to_owned()),
        ("settings_file", "s".to_owned()),
    ]);
    let relay = description
        .launch(Role::Relay, &values)
        .map(|launch| launch.named("relay-1"))
        .unwrap();
    assert_eq!(relay.arguments[3], "{x}-relay-1");
}

/// Every bad description: what it changes, and words its one-line error must hold.
fn bad_descriptions() -> Vec<(&'static str, String, &'static str)> {
    vec![
        ("not TOML", "name = \"x\n".to_owned(), "TOML parse error"),
        (
            "an unknown field",
            GOOD.replace("domain = \"payments\"", "domain = \"payments\"\ncolour = 1"),
            "colour",
        ),
        (
            "a missing command",
            GOOD.replace("purge = [", "# purge = ["),
            "purge",
        ),
        (
            "an unknown domain",
            GOOD.replace("domain = \"payments\"", "domain = \"parcels\""),
            "payments",
        ),
        (
            "a domain file that is not there",
            GOOD.replace("domain = \"payments\"", "domain = \"parcels.toml\""),
            "parcels.toml",
        ),
        (
            "an unknown placeholder",
            GOOD.replace("{retention_ms}", "{retention}"),
            "{retention}",
        ),
        (
            "a placeholder of another role",
            GOOD.replace("\"--name\", \"{process}\"", "\"--port\", \"{port}\""),
            "receiver command",
        ),
        (
            "an unclosed brace",
            GOOD.replace("{database}\"]", "{database\"]"),
            "without its }",
        ),
        (
            "an empty command",
            GOOD.replace(
                "purge = [\"python3\", \"svc.py\", \"purge\", \"--older-than-ms\", \"{retention_ms}\"]",
                "purge = []",
            ),
            "commands.purge is empty",
        ),
        (
            "a missing schema file",
            GOOD.replace("schema = \"schema.sql\"", "schema = \"nowhere.sql\""),
            "nowhere.sql",
        ),
        (
            "a column name that is not plain",
            GOOD.replace("payload = \"body\"", "payload = \"body; DROP TABLE x\""),
            "tables.obligations.payload",
        ),
        (
            "statuses that repeat",
            GOOD.replace("done = \"sent\"", "done = \"todo\""),
            "three different values",
        ),
        (
            "one table for two roles",
            GOOD.replace("table = \"jobs\"", "table = \"seen\""),
            "three different tables",
        ),
        (
            "a ready path that is not a path",
            GOOD.replace("[environment]", "ready_path = \"healthz\"\n\n[environment]"),
            "ready_path",
        ),
    ]
}

/// The rest of [`bad_descriptions`]: names and the environment.
fn bad_names() -> Vec<(&'static str, String, &'static str)> {
    vec![
        (
            "a name with a slash",
            GOOD.replace("name = \"tiny\"", "name = \"a/b\""),
            "name must be",
        ),
        (
            "a placeholder in the environment that is unknown",
            GOOD.replace("{settings_file}", "{secrets}"),
            "environment.SVC_SETTINGS",
        ),
    ]
}

#[test]
fn every_bad_description_is_said_in_one_line_that_names_what_to_fix() {
    for (what, text, says) in bad_descriptions().iter().chain(&bad_names()) {
        let error = load(text).expect_err(what);
        assert!(!error.contains('\n'), "{what}: more than one line: {error}");
        assert!(error.contains(says), "{what}: {error:?} does not say {says:?}");
        assert!(
            error.contains("service.toml"),
            "{what}: {error:?} does not name the file"
        );
    }
}

#[test]
fn a_missing_file_is_said_with_its_path() {
    let error = ServiceDescription::load(Path::new("/nowhere/service.toml")).unwrap_err();
    assert!(error.contains("cannot read /nowhere/service.toml"), "{error}");
}

/// The database's set-up: the schema, the fixtures through their statements, and a mapping that
/// names a column the schema lacks.
#[test]
fn set_up_loads_fixtures_and_refuses_a_mapped_column_the_schema_lacks() {
    use commitgap_sim::system::{Fixtures, ObservedRow, SubjectFixture, System};
    let fixtures = Fixtures {
        accounts: vec![("acct-a".to_owned(), "tenant-a".to_owned())],
        subjects: vec![SubjectFixture::new("tenant-a", "order-1").with("amount_cents", 1200)],
    };
    let system = load(GOOD).unwrap().system();
    let connection = commitgap_sim::rusqlite::Connection::open_in_memory().unwrap();
    system.set_up(&connection, &fixtures).unwrap();
    let amount: i64 = connection
        .query_row(
            "SELECT amount_cents FROM orders WHERE order_id = 'order-1'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(amount, 1200);
    let values = [
        commitgap_sim::commitgap::env::Value::Text("tenant-a".into()),
        commitgap_sim::commitgap::env::Value::Text("order-1".into()),
        commitgap_sim::commitgap::env::Value::Text("awaiting_payment".into()),
        commitgap_sim::commitgap::env::Value::Integer(1200),
    ];
    let ObservedRow::Entity(order) = system.decode_row("orders", &values).unwrap() else {
        panic!("an order reads as an entity");
    };
    assert_eq!(order.state.to_string(), "awaiting_payment amount_cents=1200");
    // Columns left out keep their invariants from judging, each with why.
    let not_judged = system.not_judged();
    assert!(
        not_judged
            .iter()
            .any(|(name, why)| name == "lease-outlives-call" && why.contains("lease_expires_ms"))
    );
    assert!(
        !not_judged
            .iter()
            .any(|(name, _)| name == "one-effect-per-operation")
    );

    let lacking = load(&GOOD.replace("lease_token = \"token\"", "lease_token = \"fence\""))
        .unwrap()
        .system();
    let connection = commitgap_sim::rusqlite::Connection::open_in_memory().unwrap();
    let error = lacking.set_up(&connection, &fixtures).unwrap_err().to_string();
    assert!(
        error.contains("tables.obligations.lease_token = \"fence\" is not a column of jobs"),
        "{error}"
    );
    assert!(
        error.contains("its columns: job_key, body, state, owner, token"),
        "{error}"
    );

    let bad_fixture = load(&GOOD.replace(":amount_cents)", ":amount)"))
        .unwrap()
        .system();
    let connection = commitgap_sim::rusqlite::Connection::open_in_memory().unwrap();
    let error = bad_fixture
        .set_up(&connection, &fixtures)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("database.subject: no value for :amount"),
        "{error}"
    );
}

#[test]
fn a_domain_declared_in_a_file_beside_the_description_is_the_services_domain() {
    let path = written(
        &GOOD.replace("domain = \"payments\"", "domain = \"shop-domain.toml\""),
        SCHEMA,
    );
    let declared = include_str!("../../../examples/domains/payments.toml");
    std::fs::write(path.with_file_name("shop-domain.toml"), declared).unwrap();
    let description = ServiceDescription::load(&path).unwrap();
    let domain = description.domain();
    assert_eq!(domain.name(), "payments");
    assert!(domain.rules().iter().any(|rule| {
        rule.contains("payment (payment.succeeded) moves awaiting_payment -> paid, owing fulfill")
    }));
}

/// The complete example in docs/services.md is a description that loads and sets up a
/// database whose rows read back, so the page a team copies from cannot rot.
#[test]
fn the_documented_example_loads_and_sets_up_its_database() {
    use commitgap_sim::system::{Fixtures, SubjectFixture, System};
    let page = include_str!("../../../docs/services.md");
    let example: String = page
        .lines()
        .skip_while(|line| *line != "```toml")
        .skip(1)
        .take_while(|line| !line.starts_with("```"))
        .map(|line| format!("{line}\n"))
        .collect();
    let schema = "
        CREATE TABLE accounts (account TEXT PRIMARY KEY, tenant TEXT NOT NULL);
        CREATE TABLE processed_events (account TEXT, event_id TEXT, received_ms INTEGER, UNIQUE (account, event_id));
        CREATE TABLE outbox (operation_key TEXT UNIQUE, payload TEXT, status TEXT, lease_owner TEXT,
            lease_token INTEGER, lease_expires_ms INTEGER, next_attempt_ms INTEGER, dead_reason TEXT);
        CREATE TABLE orders (tenant TEXT, order_id TEXT, status TEXT, amount_cents INTEGER);
    ";
    let description = ServiceDescription::load(&written(&example, schema)).unwrap();
    assert_eq!(description.name, "python-shop");
    assert!(description.has(Role::Requeue));
    let system = description.system();
    assert!(system.not_judged().is_empty(), "the example maps every column");
    let fixtures = Fixtures {
        accounts: vec![("acct-a".to_owned(), "tenant-a".to_owned())],
        subjects: vec![SubjectFixture::new("tenant-a", "order-1").with("amount_cents", 700)],
    };
    let connection = commitgap_sim::rusqlite::Connection::open_in_memory().unwrap();
    system.set_up(&connection, &fixtures).unwrap();
    let status: String = connection
        .query_row(
            "SELECT status FROM orders WHERE order_id = 'order-1'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(status, "awaiting_payment");
}
