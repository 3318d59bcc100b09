//! A service description: how to run and read a webhook service commitgap did not build, one a
//! team already has, in any language, on its own SQLite schema (docs/services.md).
//!
//! The description is a TOML file. It says which commands start the service's receiver, relay
//! worker, purge job and operator's requeue, with placeholders for what a live check decides
//! (ports, the database's path, the provider's URL, the process's name, the relay's settings);
//! the schema and the statements that load fixtures; how its tables read as the invariants'
//! rows (receipts, obligations, entities), with the columns it does not have declared absent;
//! and its domain. [`ServiceDescription::load`] reads and checks all of it, so that every mistake
//! is found before a process starts and said in one line that names the field.
//!
//! This module only reads the description and fills in commands ([`Launch`]); it must not
//! start processes (the live check does) or judge anything. The system it gives
//! ([`ServiceDescription::system`]) reads the service's rows and sets up its database, and never
//! handles a delivery: the service's own processes do.

mod system;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use commitgap_sim::domain::Domain;

pub use system::DescribedSystem;

/// The placeholders a command or an environment value may hold, and the roles that may use
/// each (`None`: every role).
const PLACEHOLDERS: &[(&str, Option<Role>, &str)] = &[
    (
        "port",
        Some(Role::Receiver),
        "the port this receiver listens on, on 127.0.0.1",
    ),
    ("listen", Some(Role::Receiver), "127.0.0.1:{port}"),
    ("database", None, "the database file's absolute path"),
    ("settings_file", None, "the receiver's settings as JSON"),
    ("provider_url", None, "the provider double's base URL"),
    ("process", None, "the process's name"),
    ("relay_settings_file", None, "the relay's settings as JSON"),
    ("call_timeout_ms", None, "the relay's call timeout"),
    ("lease_ms", None, "the relay's lease"),
    ("key_lifetime_ms", None, "the provider's key lifetime"),
    ("body_bytes_max", None, "the largest body a receiver accepts"),
    (
        "retention_ms",
        Some(Role::Purge),
        "how old a receipt this purge deletes is",
    ),
];

/// One of the service's processes, by what it does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// An HTTP receiver on its own port.
    Receiver,
    /// A relay worker.
    Relay,
    /// One run of the receipt purge.
    Purge,
    /// One run of the operator's requeue of dead obligations.
    Requeue,
}

impl Launch {
    /// Stands for the name of one start of the process in a [`Launch`]'s arguments and
    /// environment, until it starts: each start gets a name of its own (`relay-1`, after a
    /// restart `relay-1#2`), so that two incarnations of one worker are two processes to the
    /// journal and the lease rules, as the simulator's crashes make them.
    pub const PROCESS_NAME: &'static str = "\u{1}commitgap-process\u{1}";

    /// This launch for the start called `name`.
    pub fn named(&self, name: &str) -> Launch {
        let fill = |text: &String| text.replace(Launch::PROCESS_NAME, name);
        Launch {
            program: fill(&self.program),
            arguments: self.arguments.iter().map(fill).collect(),
            environment: self
                .environment
                .iter()
                .map(|(variable, value)| (variable.clone(), fill(value)))
                .collect(),
            directory: self.directory.clone(),
        }
    }
}

impl Role {
    /// The role's key in `[commands]`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Receiver => "receiver",
            Role::Relay => "relay",
            Role::Purge => "purge",
            Role::Requeue => "requeue",
        }
    }
}

/// A process to start: a program, its arguments and environment, and where it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The program, as the description names it (found on `PATH` when it has no slash).
    pub program: String,
    /// Its arguments, placeholders filled in.
    pub arguments: Vec<String>,
    /// Variables set for it besides the inherited environment.
    pub environment: Vec<(String, String)>,
    /// Its working directory: the description's own.
    pub directory: PathBuf,
}

/// The file as written; see docs/services.md for every field.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DescriptionFile {
    name: String,
    domain: String,
    database: DatabaseSection,
    commands: CommandsSection,
    #[serde(default)]
    environment: BTreeMap<String, String>,
    tables: TablesSection,
    #[serde(default)]
    journal: JournalSection,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DatabaseSection {
    schema: PathBuf,
    account: Option<String>,
    subject: Option<String>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct CommandsSection {
    receiver: Vec<String>,
    relay: Vec<String>,
    purge: Vec<String>,
    requeue: Option<Vec<String>>,
    #[serde(default = "default_ready_path")]
    ready_path: String,
    #[serde(default = "default_ready_timeout_s")]
    ready_timeout_s: u64,
}

fn default_ready_path() -> String {
    "/healthz".to_owned()
}

fn default_ready_timeout_s() -> u64 {
    20
}

/// `[tables]`: where the invariants' rows live.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TablesSection {
    /// `[tables.receipts]`.
    pub receipts: ReceiptColumns,
    /// `[tables.obligations]`.
    pub obligations: ObligationColumns,
    /// `[tables.entities]`.
    pub entities: EntityColumns,
}

/// Where the service records the events it processed.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptColumns {
    /// The table.
    pub table: String,
    /// The column of the sender's account.
    pub account: String,
    /// The column of the event's id within its account.
    pub event_id: String,
    /// The column of when the receipt was written, in epoch ms; absent when not kept.
    pub received_ms: Option<String>,
}

/// Where the service keeps what it owes the provider.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObligationColumns {
    /// The table.
    pub table: String,
    /// The column of the operation key, sent as the idempotency key.
    pub operation_key: String,
    /// The column of the persisted payload.
    pub payload: String,
    /// The column of the status.
    pub status: String,
    /// The status value of an obligation still owed.
    pub owed: String,
    /// The status value of one the provider confirmed.
    pub done: String,
    /// The status value of one given up on.
    pub dead: String,
    /// The lease holder's process name; absent when the relay keeps no lease.
    pub lease_owner: Option<String>,
    /// The fencing token; absent when the relay keeps none.
    pub lease_token: Option<String>,
    /// When the lease runs out, in epoch ms.
    pub lease_expires_ms: Option<String>,
    /// The earliest time of the next attempt, in epoch ms.
    pub next_attempt_ms: Option<String>,
    /// Why the obligation was given up.
    pub dead_reason: Option<String>,
}

/// Where the service keeps its business entities.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntityColumns {
    /// The table.
    pub table: String,
    /// The column of the entity's tenant.
    pub tenant: String,
    /// The column of the entity's name within its tenant.
    pub subject: String,
    /// The column of its state.
    pub state: String,
    /// The domain's fields, by the domain's names, and the columns that hold them.
    #[serde(default)]
    pub fields: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JournalSection {
    #[serde(default)]
    labels: bool,
}

/// A service description, read and checked. See the module documentation.
#[derive(Clone)]
pub struct ServiceDescription {
    /// The file it was read from.
    pub path: PathBuf,
    /// The service's name.
    pub name: String,
    /// The directory commands run in and relative paths start from.
    pub directory: PathBuf,
    /// The schema's SQL.
    pub schema_sql: String,
    /// The statement run for each sender account, if any.
    pub account_sql: Option<String>,
    /// The statement run for each business entity, if any.
    pub subject_sql: Option<String>,
    /// How the tables read as the invariants' rows.
    pub tables: TablesSection,
    /// Whether the service's connections define the journal's SQL functions.
    pub journal_labels: bool,
    /// The path that answers 2xx once a receiver is ready.
    pub ready_path: String,
    /// How long a receiver may take to become ready, in seconds.
    pub ready_timeout_s: u64,
    commands: BTreeMap<Role, Vec<String>>,
    environment: BTreeMap<String, String>,
    domain: Arc<dyn Domain>,
}

impl std::fmt::Debug for ServiceDescription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceDescription")
            .field("path", &self.path)
            .field("name", &self.name)
            .field("domain", &self.domain.name())
            .finish_non_exhaustive()
    }
}

impl ServiceDescription {
    /// Reads and checks the description at `path`. `Err` is one line naming the file, the field
    /// and what to do.
    pub fn load(path: &Path) -> Result<ServiceDescription, String> {
        let shown = path.display();
        let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read {shown}: {error}"))?;
        let file: DescriptionFile =
            toml::from_str(&text).map_err(|error| format!("{shown}: {}", one_line(&error.to_string())))?;
        let directory = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let directory = directory
            .canonicalize()
            .map_err(|error| format!("{shown}: cannot resolve its directory: {error}"))?;
        let domain = domain_named(&file.domain, &directory)
            .map_err(|message| format!("{shown}: domain: {message}"))?;
        let schema_path = directory.join(&file.database.schema);
        let schema_sql = std::fs::read_to_string(&schema_path).map_err(|error| {
            format!(
                "{shown}: database.schema: cannot read {}: {error}",
                schema_path.display()
            )
        })?;
        let mut commands = BTreeMap::new();
        commands.insert(Role::Receiver, file.commands.receiver.clone());
        commands.insert(Role::Relay, file.commands.relay.clone());
        commands.insert(Role::Purge, file.commands.purge.clone());
        if let Some(requeue) = &file.commands.requeue {
            commands.insert(Role::Requeue, requeue.clone());
        }
        for (role, command) in &commands {
            check_command(*role, command).map_err(|message| format!("{shown}: {message}"))?;
        }
        for (name, value) in &file.environment {
            check_placeholders(value, None)
                .map_err(|message| format!("{shown}: environment.{name}: {message}"))?;
        }
        check_names(&file.tables).map_err(|message| format!("{shown}: {message}"))?;
        if !file.commands.ready_path.starts_with('/') {
            return Err(format!(
                "{shown}: commands.ready_path must be a path starting with /, such as \"/healthz\""
            ));
        }
        if file.commands.ready_timeout_s == 0 {
            return Err(format!("{shown}: commands.ready_timeout_s must be at least 1"));
        }
        if file.name.trim().is_empty() || file.name.contains(['/', '\\']) {
            return Err(format!(
                "{shown}: name must be a plain name (it names the run's directory), without slashes"
            ));
        }
        Ok(ServiceDescription {
            path: path.to_owned(),
            name: file.name,
            directory,
            schema_sql,
            account_sql: file.database.account,
            subject_sql: file.database.subject,
            tables: file.tables,
            journal_labels: file.journal.labels,
            ready_path: file.commands.ready_path,
            ready_timeout_s: file.commands.ready_timeout_s,
            commands,
            environment: file.environment,
            domain,
        })
    }

    /// The domain the service serves.
    pub fn domain(&self) -> Arc<dyn Domain> {
        Arc::clone(&self.domain)
    }

    /// Whether the description has a command for `role`.
    pub fn has(&self, role: Role) -> bool {
        self.commands.contains_key(&role)
    }

    /// The system that reads this service's rows and sets up its database.
    pub fn system(&self) -> Arc<DescribedSystem> {
        Arc::new(DescribedSystem::new(self.clone()))
    }

    /// The process of `role`, with `values` for the placeholders; `{process}` and
    /// `COMMITGAP_PROCESS` stay [`Launch::PROCESS_NAME`] until a start names them
    /// ([`Launch::named`]). `Err` when the description has no command for the role or a value
    /// is missing.
    pub fn launch(&self, role: Role, values: &BTreeMap<&str, String>) -> Result<Launch, String> {
        let process = Launch::PROCESS_NAME;
        let command = self
            .commands
            .get(&role)
            .ok_or_else(|| format!("{}: has no commands.{}", self.path.display(), role.name()))?;
        let mut values = values.clone();
        values.insert("process", process.to_owned());
        let fill = |text: &str| fill_placeholders(text, &values);
        let mut filled = command
            .iter()
            .map(|part| fill(part))
            .collect::<Result<Vec<String>, String>>()?;
        let program = filled.remove(0);
        let mut environment = vec![("COMMITGAP_PROCESS".to_owned(), process.to_owned())];
        for (name, value) in &self.environment {
            environment.push((name.clone(), fill(value)?));
        }
        Ok(Launch {
            program,
            arguments: filled,
            environment,
            directory: self.directory.clone(),
        })
    }
}

/// The built-in domain called `name`, or the domain declared in the file `name` names (a path
/// ending in `.toml`, from `directory`).
fn domain_named(name: &str, directory: &Path) -> Result<Arc<dyn Domain>, String> {
    if name.ends_with(".toml") {
        let declared = commitgap_sim::domain::declared::DeclaredDomain::load(&directory.join(name))?;
        return Ok(Arc::new(declared));
    }
    let payments = commitgap_sim::domain::payments();
    if name == payments.name() {
        return Ok(payments);
    }
    Err(format!(
        "{name:?} is neither a built-in domain ({}) nor a domain file ending in .toml",
        payments.name()
    ))
}

fn check_command(role: Role, command: &[String]) -> Result<(), String> {
    let field = format!("commands.{}", role.name());
    let Some(program) = command.first() else {
        return Err(format!(
            "{field} is empty: give the program and its arguments, such as [\"python3\", \"service.py\"]"
        ));
    };
    if program.trim().is_empty() {
        return Err(format!("{field}: the program's name is empty"));
    }
    for part in command {
        check_placeholders(part, Some(role)).map_err(|message| format!("{field}: {message}"))?;
    }
    Ok(())
}

/// Checks that every `{name}` in `text` is a placeholder `role` may use.
fn check_placeholders(text: &str, role: Option<Role>) -> Result<(), String> {
    for name in placeholders_in(text)? {
        let Some((_, only, _)) = PLACEHOLDERS.iter().find(|(known, _, _)| *known == name) else {
            let known: Vec<String> = PLACEHOLDERS
                .iter()
                .map(|(known, _, _)| format!("{{{known}}}"))
                .collect();
            return Err(format!(
                "unknown placeholder {{{name}}}; the placeholders are {}",
                known.join(", ")
            ));
        };
        if let Some(only) = only
            && Some(*only) != role
        {
            return Err(format!("{{{name}}} is given only to the {} command", only.name()));
        }
    }
    Ok(())
}

/// The names of the placeholders in `text`; `{{` and `}}` stand for braces themselves.
fn placeholders_in(text: &str) -> Result<Vec<&str>, String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(['{', '}']) {
        let after = &rest[start + 1..];
        if rest[start..].starts_with("{{") || rest[start..].starts_with("}}") {
            rest = &after[1..];
            continue;
        }
        if rest[start..].starts_with('}') {
            return Err(format!(
                "{text:?} has a }} without its {{ (write }}}} for a brace)"
            ));
        }
        let Some(end) = after.find('}') else {
            return Err(format!(
                "{text:?} has a {{ without its }} (write {{{{ for a brace)"
            ));
        };
        names.push(&after[..end]);
        rest = &after[end + 1..];
    }
    Ok(names)
}

fn fill_placeholders(text: &str, values: &BTreeMap<&str, String>) -> Result<String, String> {
    let mut filled = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(['{', '}']) {
        filled.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        if rest[start..].starts_with("{{") || rest[start..].starts_with("}}") {
            filled.push(rest.as_bytes()[start] as char);
            rest = &after[1..];
            continue;
        }
        let end = after
            .find('}')
            .ok_or_else(|| format!("{text:?} has a {{ without its }}"))?;
        let name = &after[..end];
        let value = values
            .get(name)
            .ok_or_else(|| format!("{{{name}}} has no value for this process"))?;
        filled.push_str(value);
        rest = &after[end + 1..];
    }
    filled.push_str(rest);
    Ok(filled)
}

/// Checks that the tables' and columns' names are plain identifiers (they are written into
/// SQL) and the status values differ.
fn check_names(tables: &TablesSection) -> Result<(), String> {
    let r = &tables.receipts;
    let o = &tables.obligations;
    let e = &tables.entities;
    let mut names: Vec<(String, &str)> = vec![
        ("tables.receipts.table".into(), r.table.as_str()),
        ("tables.receipts.account".into(), &r.account),
        ("tables.receipts.event_id".into(), &r.event_id),
        ("tables.obligations.table".into(), &o.table),
        ("tables.obligations.operation_key".into(), &o.operation_key),
        ("tables.obligations.payload".into(), &o.payload),
        ("tables.obligations.status".into(), &o.status),
        ("tables.entities.table".into(), &e.table),
        ("tables.entities.tenant".into(), &e.tenant),
        ("tables.entities.subject".into(), &e.subject),
        ("tables.entities.state".into(), &e.state),
    ];
    let optional = [
        ("tables.receipts.received_ms", &r.received_ms),
        ("tables.obligations.lease_owner", &o.lease_owner),
        ("tables.obligations.lease_token", &o.lease_token),
        ("tables.obligations.lease_expires_ms", &o.lease_expires_ms),
        ("tables.obligations.next_attempt_ms", &o.next_attempt_ms),
        ("tables.obligations.dead_reason", &o.dead_reason),
    ];
    for (field, column) in optional {
        if let Some(column) = column {
            names.push((field.to_owned(), column));
        }
    }
    for (field, column) in &e.fields {
        names.push((format!("tables.entities.fields.{field}"), column));
    }
    for (field, name) in &names {
        let plain = name
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !plain {
            return Err(format!(
                "{field} = {name:?} is not a plain SQL name (letters, digits and _, not starting with a digit)"
            ));
        }
    }
    let tables_named = [&r.table, &o.table, &e.table];
    if tables_named[0] == tables_named[1]
        || tables_named[0] == tables_named[2]
        || tables_named[1] == tables_named[2]
    {
        return Err(
            "tables.receipts, tables.obligations and tables.entities must name three different tables"
                .to_owned(),
        );
    }
    if o.owed == o.done || o.owed == o.dead || o.done == o.dead {
        return Err(format!(
            "tables.obligations: owed, done and dead must be three different values (got {:?}, {:?}, {:?})",
            o.owed, o.done, o.dead
        ));
    }
    Ok(())
}

/// The first line of a possibly long message, with its location kept.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    // toml's errors read "TOML parse error at line L, column C", the source line, a caret line
    // and then the reason: the first and the last line say everything.
    match (lines.first(), lines.last()) {
        (Some(first), Some(last)) if first != last => format!("{first}: {last}"),
        (Some(first), _) => (*first).to_owned(),
        _ => message.to_owned(),
    }
}

#[cfg(test)]
mod tests;
