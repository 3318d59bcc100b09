//! SQL mutants of any system: how much of a system's own SQL the simulation really checks.
//!
//! The system runs a few seeds to learn its distinct statements and reads its schema back from
//! SQLite. Each statement and each rewrite that applies to it is a mutant: drop one conjunct of
//! the WHERE clause (or the whole clause), drop an `ON CONFLICT` clause or a `RETURNING`, turn
//! `BEGIN IMMEDIATE` into `BEGIN`, turn `INSERT OR IGNORE` into `INSERT`, drop the statement, turn
//! a `COMMIT` into a `ROLLBACK`; in the schema, drop one column from a multi-column `UNIQUE` or
//! `PRIMARY KEY`, or drop a single-column one. A mutant runs as a wrapper system whose `Env`
//! rewrites just that statement at run time (and whose set-up rebuilds just that table), and is
//! swept until an invariant fails or the budget is spent. A mutant that survives is either
//! equivalent (no observable behaviour changes; [`PATTERN_EQUIVALENT`] says why for the pattern's
//! statements over any system's tables, [`REFERENCE_EQUIVALENT`] for the reference's own, and a
//! team lists its own) or a gap in the simulation.
//!
//! The rewrites read SQL as text, with only the structure they need (clause keywords outside
//! parentheses and quotes); they must not run anything themselves. Everything here is decided by
//! the statements and the seeds, never by the clock, except the wall times reported.

use std::collections::BTreeSet;
use std::fmt;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};

use commitgap::env::{DbError, Env, LocalBoxFuture, Row, Value};
use commitgap::provider::{CallError, ProviderCall, ProviderReply};
use commitgap::receiver::{Answer, WebhookDelivery};
use commitgap::relay::RelaySettings;

use crate::db::Backend;
use crate::shape::WorkloadShape;
use crate::sweep::{SweepOptions, sweep};
use crate::system::{Fixtures, ObservedRow, System};

/// One way to change one statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewrite {
    /// Drop the n-th (from 1) `AND` conjunct of the WHERE clause.
    DropConjunct(usize),
    /// Drop the whole WHERE clause (it had one condition).
    DropWhere,
    /// Drop the `ON CONFLICT` clause.
    DropOnConflict,
    /// Drop the `RETURNING` clause.
    DropReturning,
    /// `BEGIN IMMEDIATE` becomes a deferred `BEGIN`.
    DeferredBegin,
    /// `INSERT OR IGNORE` becomes a plain `INSERT`.
    PlainInsert,
    /// The statement is not run at all (it changes nothing and returns no rows).
    DropStatement,
    /// `COMMIT` becomes `ROLLBACK`.
    CommitToRollback,
    /// Schema: drop this column from a multi-column `UNIQUE` or `PRIMARY KEY` (or drop the
    /// single-column constraint itself).
    DropKeyColumn(String),
}

impl fmt::Display for Rewrite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rewrite::DropConjunct(index) => write!(f, "drop WHERE conjunct {index}"),
            Rewrite::DropWhere => write!(f, "drop WHERE"),
            Rewrite::DropOnConflict => write!(f, "drop ON CONFLICT"),
            Rewrite::DropReturning => write!(f, "drop RETURNING"),
            Rewrite::DeferredBegin => write!(f, "BEGIN IMMEDIATE -> BEGIN"),
            Rewrite::PlainInsert => write!(f, "INSERT OR IGNORE -> INSERT"),
            Rewrite::DropStatement => write!(f, "drop the statement"),
            Rewrite::CommitToRollback => write!(f, "COMMIT -> ROLLBACK"),
            Rewrite::DropKeyColumn(column) => write!(f, "drop {column} from its key"),
        }
    }
}

/// One mutant: a statement (or a schema object), one rewrite, and the text it runs instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mutant {
    /// The statement as the system sends it, or the schema object's `CREATE` text.
    pub original: String,
    /// The change made to it.
    pub rewrite: Rewrite,
    /// What runs instead; `None` when the statement is dropped.
    pub replacement: Option<String>,
    /// True for a schema mutant, applied once at set-up.
    pub in_schema: bool,
}

impl Mutant {
    /// The statement, on one line, cut to `width` characters.
    pub fn short(&self, width: usize) -> String {
        let line = self.original.split_whitespace().collect::<Vec<_>>().join(" ");
        crate::files::clip(&line, width)
    }
}

/// An equivalent mutant: the start of the statement on one line, the rewrite as displayed, and
/// why no behaviour a sender, the provider or an invariant can see changes.
pub type Equivalent = (&'static str, &'static str, &'static str);

/// Survivors of the reference that change nothing observable, or change only the answer to a
/// request no correct sender makes where either answer is correct. They are reported and not
/// counted.
/// A team lists its own with `App::equivalent_sql_mutant`.
pub const REFERENCE_EQUIVALENT: &[Equivalent] = &[
    (
        "BEGIN IMMEDIATE",
        "BEGIN IMMEDIATE -> BEGIN",
        "the transaction's first statement is the receipt's insert, a write, so a deferred BEGIN takes the write lock there, waiting for it as long as BEGIN IMMEDIATE would; no read comes first, so no upgrade can be refused, and a busy error on the insert is answered 503 like one on BEGIN",
    ),
    (
        "INSERT INTO outbox (operation_key, payload, status, next_attempt_ms, created_ms)",
        "drop ON CONFLICT",
        "the insert follows the payment transition in the same transaction, and that transition applies once per order, so a second insert of one key never happens",
    ),
    (
        "UPDATE orders SET amount_cents = ?3",
        "drop RETURNING",
        "RETURNING only tells the handler whether to say applied or no-transition; the sender gets 200 either way and the rows are the same",
    ),
    (
        "UPDATE orders SET status = 'cancelled'",
        "drop RETURNING",
        "RETURNING only tells the handler whether to say applied or no-transition; the sender gets 200 either way and the rows are the same",
    ),
    (
        "UPDATE orders SET status = 'refunded'",
        "drop RETURNING",
        "RETURNING only tells the handler whether to say applied or no-transition; the sender gets 200 either way and the rows are the same",
    ),
    (
        "CREATE TABLE accounts",
        "drop account from its key",
        "accounts are written once, at set-up, from fixtures with distinct accounts; nothing inserts one at run time",
    ),
];

/// Survivors of the pattern's own statements ([`commitgap::tables::Tables::statements`]) that
/// change nothing observable whatever tables they run on, since the code around them is the
/// pattern's too: by statement name, rewrite as displayed, and why. They apply to every system
/// whose relay, receiver or operator runs those statements, the reference's among them.
pub const PATTERN_EQUIVALENT: &[(&str, &str, &str)] = &[
    (
        "receipt-digest",
        "drop the statement",
        "the receiver then acknowledges an event id it already recorded as a duplicate whatever the body, instead of refusing another body with 422: deduplication by id alone, as Stripe advises; only a sender that reuses ids sees the difference, and the request still changes nothing (the reused-event-id attack checks that)",
    ),
    (
        "extend-lease",
        "drop WHERE conjunct 3",
        "the token check still admits only the current holder, which extends only while the obligation is owed; the expiry of a settled obligation is never read",
    ),
    (
        "complete",
        "drop WHERE conjunct 3",
        "the token check still admits only the current holder, and a holder settles an obligation once",
    ),
    (
        "retry",
        "drop WHERE conjunct 3",
        "the token check still admits only the current holder, and a holder never backs off an obligation it has just settled",
    ),
    (
        "retry",
        "drop the statement",
        "the relay itself leaves a failure unrecorded when its fenced write fails (the database busy four times, or full): the lease, which outlasts the provider's processing bound, then holds the obligation back and the next attempt comes at its expiry; without the statement that fallback is taken every time, so retries come on the lease's rhythm instead of the backoff's and the last error reaches the row only with the burial, and no outcome changes",
    ),
    (
        "bury",
        "drop WHERE conjunct 3",
        "the token check still admits only the current holder, and a holder settles an obligation once",
    ),
    (
        "dead-keys",
        "drop WHERE",
        "the requeue that follows updates only rows still dead, so reading every key only adds no-op updates",
    ),
    (
        "requeue",
        "drop WHERE conjunct 1",
        "the operator requeues every dead obligation in the same pass, so requeueing them all at the first is the same end state",
    ),
    (
        "requeue",
        "drop WHERE conjunct 2",
        "the operator requeues only keys it has just read as dead, and nothing else changes a dead obligation in between",
    ),
];

/// Whether `mutant` rewrites one of the pattern's statements over `tables` in a way
/// [`PATTERN_EQUIVALENT`] lists, and why.
pub fn pattern_equivalence(mutant: &Mutant, tables: &commitgap::tables::Tables) -> Option<&'static str> {
    let line = mutant.short(usize::MAX);
    let rewrite = mutant.rewrite.to_string();
    let name = tables
        .statements()
        .into_iter()
        .find(|(_, sql)| sql.split_whitespace().collect::<Vec<_>>().join(" ") == line)
        .map(|(name, _)| name)?;
    PATTERN_EQUIVALENT
        .iter()
        .find(|(statement, listed, _)| *statement == name && *listed == rewrite)
        .map(|(_, _, why)| *why)
}

/// Whether `mutant` is listed in `equivalent`, and why.
pub fn equivalence_of(mutant: &Mutant, equivalent: &[Equivalent]) -> Option<&'static str> {
    let line = mutant.short(usize::MAX);
    let rewrite = mutant.rewrite.to_string();
    equivalent
        .iter()
        .find(|(start, listed, _)| line.starts_with(start) && *listed == rewrite)
        .map(|(_, _, why)| *why)
}

/// Every mutant of `statements` (runtime SQL) and `schema` (`CREATE` texts), in a fixed order.
pub fn mutants_of(statements: &BTreeSet<String>, schema: &[String]) -> Vec<Mutant> {
    let mut mutants = Vec::new();
    for statement in statements {
        for (rewrite, replacement) in rewrites(statement) {
            mutants.push(Mutant {
                original: statement.clone(),
                rewrite,
                replacement,
                in_schema: false,
            });
        }
    }
    for object in schema {
        for (column, replacement) in key_rewrites(object) {
            mutants.push(Mutant {
                original: object.clone(),
                rewrite: Rewrite::DropKeyColumn(column),
                replacement: Some(replacement),
                in_schema: true,
            });
        }
    }
    mutants
}

/// The rewrites that apply to one runtime statement.
fn rewrites(statement: &str) -> Vec<(Rewrite, Option<String>)> {
    let upper = statement.to_ascii_uppercase();
    let verb = upper.split_whitespace().next().unwrap_or("");
    let mut found = Vec::new();
    match verb {
        "BEGIN" => {
            if upper.contains("IMMEDIATE") || upper.contains("EXCLUSIVE") {
                found.push((Rewrite::DeferredBegin, Some("BEGIN".to_owned())));
            }
            return found;
        }
        "COMMIT" | "END" => {
            found.push((Rewrite::CommitToRollback, Some("ROLLBACK".to_owned())));
            return found;
        }
        "ROLLBACK" => {
            found.push((Rewrite::DropStatement, None));
            return found;
        }
        _ => {}
    }
    if let Some(range) = clause(statement, "WHERE") {
        let body = &statement[range.start + "WHERE".len()..range.end];
        let conjuncts = split_top_level(body, " AND ");
        if conjuncts.len() == 1 {
            let mut text = statement.to_owned();
            text.replace_range(range.clone(), " ");
            found.push((Rewrite::DropWhere, Some(text)));
        } else {
            for index in 0..conjuncts.len() {
                let kept: Vec<&str> = conjuncts
                    .iter()
                    .enumerate()
                    .filter(|(other, _)| *other != index)
                    .map(|(_, conjunct)| conjunct.trim())
                    .collect();
                let mut text = statement.to_owned();
                text.replace_range(range.clone(), &format!("WHERE {} ", kept.join(" AND ")));
                found.push((Rewrite::DropConjunct(index + 1), Some(text)));
            }
        }
    }
    for (keyword, rewrite) in [
        ("ON CONFLICT", Rewrite::DropOnConflict),
        ("RETURNING", Rewrite::DropReturning),
    ] {
        if let Some(range) = clause(statement, keyword) {
            let mut text = statement.to_owned();
            text.replace_range(range, " ");
            found.push((rewrite, Some(text)));
        }
    }
    if let Some(at) = upper.find("INSERT OR IGNORE") {
        let mut text = statement.to_owned();
        text.replace_range(at..at + "INSERT OR IGNORE".len(), "INSERT");
        found.push((Rewrite::PlainInsert, Some(text)));
    }
    if matches!(verb, "INSERT" | "UPDATE" | "DELETE" | "SELECT" | "REPLACE") {
        found.push((Rewrite::DropStatement, None));
    }
    found
}

/// The clauses a clause ends at.
const CLAUSE_KEYWORDS: [&str; 9] = [
    "WHERE",
    "ON CONFLICT",
    "RETURNING",
    "ORDER BY",
    "GROUP BY",
    "LIMIT",
    "DO UPDATE",
    "DO NOTHING",
    "HAVING",
];

/// Where clause `keyword` starts and ends in `statement`, at the top level (outside parentheses
/// and quotes): from the keyword to the next clause keyword or the end.
fn clause(statement: &str, keyword: &str) -> Option<std::ops::Range<usize>> {
    let starts = top_level_keywords(statement);
    let (index, &(start, _)) = starts
        .iter()
        .enumerate()
        .find(|(_, (_, found))| *found == keyword)?;
    let end = starts
        .iter()
        .skip(index + 1)
        .find(|(_, found)| {
            // An ON CONFLICT clause runs through its DO part.
            !(keyword == "ON CONFLICT" && (*found == "DO UPDATE" || *found == "DO NOTHING"))
                && !(keyword == "WHERE" && *found == "WHERE")
        })
        .map_or(statement.len(), |(at, _)| *at);
    Some(start..end)
}

/// Each clause keyword's position at the top level of `statement`, in order.
fn top_level_keywords(statement: &str) -> Vec<(usize, &'static str)> {
    let upper = statement.to_ascii_uppercase();
    let bytes = upper.as_bytes();
    let mut found = Vec::new();
    let mut depth = 0_i32;
    let mut quote: Option<u8> = None;
    let mut at = 0;
    while at < bytes.len() {
        let byte = bytes[at];
        match quote {
            Some(open) if byte == open => quote = None,
            Some(_) => {}
            None => match byte {
                b'\'' | b'"' => quote = Some(byte),
                b'(' => depth += 1,
                b')' => depth -= 1,
                _ if depth == 0 && (at == 0 || !bytes[at - 1].is_ascii_alphanumeric()) => {
                    if let Some(keyword) = CLAUSE_KEYWORDS.iter().find(|keyword| {
                        upper[at..].starts_with(*keyword)
                            && bytes
                                .get(at + keyword.len())
                                .is_none_or(|next| !next.is_ascii_alphanumeric() && *next != b'_')
                    }) {
                        found.push((at, *keyword));
                        at += keyword.len();
                        continue;
                    }
                }
                _ => {}
            },
        }
        at += 1;
    }
    found
}

/// `text` split at `separator` outside parentheses and quotes (case-insensitive).
fn split_top_level<'a>(text: &'a str, separator: &str) -> Vec<&'a str> {
    let upper = text.to_ascii_uppercase();
    let bytes = upper.as_bytes();
    let mut parts = Vec::new();
    let (mut depth, mut quote, mut start, mut at) = (0_i32, None::<u8>, 0, 0);
    while at < bytes.len() {
        let byte = bytes[at];
        match quote {
            Some(open) if byte == open => quote = None,
            Some(_) => {}
            None => match byte {
                b'\'' | b'"' => quote = Some(byte),
                b'(' => depth += 1,
                b')' => depth -= 1,
                _ if depth == 0 && upper[at..].starts_with(separator) => {
                    parts.push(&text[start..at]);
                    at += separator.len();
                    start = at;
                    continue;
                }
                _ => {}
            },
        }
        at += 1;
    }
    parts.push(&text[start..]);
    parts
}

/// `object` with column `index` of the list `columns`, written between the parentheses at
/// `open` and `close`, left out.
fn without_column(object: &str, open: usize, close: usize, columns: &[&str], index: usize) -> String {
    let kept: Vec<&str> = columns
        .iter()
        .enumerate()
        .filter(|(other, _)| *other != index)
        .map(|(_, kept)| *kept)
        .collect();
    format!("{}{}{}", &object[..=open], kept.join(", "), &object[close..])
}

/// The key mutants of one `CREATE TABLE` or `CREATE UNIQUE INDEX` text: `(column, new text)`.
fn key_rewrites(object: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let upper = object.to_ascii_uppercase();
    if upper.starts_with("CREATE UNIQUE INDEX") {
        if let (Some(open), Some(close)) = (object.rfind('('), object.rfind(')')) {
            let columns: Vec<&str> = object[open + 1..close].split(',').map(str::trim).collect();
            for (index, column) in columns.iter().enumerate() {
                let text = if columns.len() == 1 {
                    object
                        .replacen("UNIQUE INDEX", "INDEX", 1)
                        .replacen("unique index", "index", 1)
                } else {
                    without_column(object, open, close, &columns, index)
                };
                found.push(((*column).to_owned(), text));
            }
        }
        return found;
    }
    if !upper.starts_with("CREATE TABLE") {
        return found;
    }
    // Table constraints: `UNIQUE (a, b)` and `PRIMARY KEY (a, b)`.
    for keyword in ["UNIQUE (", "UNIQUE(", "PRIMARY KEY (", "PRIMARY KEY("] {
        let mut from = 0;
        while let Some(position) = upper[from..].find(keyword) {
            let open = from + position + keyword.len() - 1;
            let Some(close) = object[open..].find(')').map(|offset| open + offset) else {
                break;
            };
            let columns: Vec<&str> = object[open + 1..close].split(',').map(str::trim).collect();
            for (index, column) in columns.iter().enumerate() {
                let text = if columns.len() == 1 {
                    // The whole constraint goes, with the comma before it.
                    let start = object[..from + position].rfind(',').unwrap_or(from + position);
                    format!("{}{}", &object[..start], &object[close + 1..])
                } else {
                    without_column(object, open, close, &columns, index)
                };
                found.push(((*column).to_owned(), text));
            }
            from = close;
        }
    }
    // Column constraints: `name TYPE ... UNIQUE` or `... PRIMARY KEY` on one column.
    for definition in split_top_level(&object[object.find('(').map_or(0, |open| open + 1)..], ",") {
        let definition_upper = definition.to_ascii_uppercase();
        let column = definition.split_whitespace().next().unwrap_or("");
        if ["UNIQUE", "PRIMARY", "CONSTRAINT", "CHECK", "FOREIGN"]
            .contains(&column.to_ascii_uppercase().as_str())
        {
            continue;
        }
        for keyword in [" UNIQUE", " PRIMARY KEY"] {
            if let Some(position) = definition_upper.find(keyword)
                && !definition_upper.contains("INTEGER PRIMARY KEY")
            {
                let start = object.find(definition).unwrap_or(0) + position;
                let mut text = object.to_owned();
                text.replace_range(start..start + keyword.len(), "");
                found.push((column.to_owned(), text));
            }
        }
    }
    found
}

/// A system that runs `inner` with one mutant applied. Its name is the inner system's with the
/// mutant's number, so its runs and seed files are never taken for the original's.
pub struct MutatedSystem {
    inner: Arc<dyn System>,
    mutant: Arc<Mutant>,
    name: String,
    /// Set while learning: the system runs unchanged and every statement is noted here.
    learned: Option<Arc<Mutex<BTreeSet<String>>>>,
}

impl fmt::Debug for MutatedSystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MutatedSystem")
            .field("mutant", &self.mutant)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl MutatedSystem {
    /// Wraps `inner` with `mutant` applied, named with the mutant's `number`.
    pub fn new(inner: Arc<dyn System>, mutant: Mutant, number: usize) -> MutatedSystem {
        MutatedSystem {
            name: format!("{}~sql-mutant-{number}", inner.name()),
            inner,
            mutant: Arc::new(mutant),
            learned: None,
        }
    }

    /// `inner` unchanged, noting every statement it sends in `learned`.
    fn learning(inner: Arc<dyn System>, learned: Arc<Mutex<BTreeSet<String>>>) -> MutatedSystem {
        MutatedSystem {
            name: inner.name().to_owned(),
            inner,
            mutant: Arc::new(Mutant {
                original: String::new(),
                rewrite: Rewrite::DropStatement,
                replacement: None,
                in_schema: false,
            }),
            learned: Some(learned),
        }
    }

    fn env(&self, env: Rc<dyn Env>) -> Rc<dyn Env> {
        if self.mutant.in_schema {
            return env;
        }
        Rc::new(MutatingEnv {
            inner: env,
            mutant: Arc::clone(&self.mutant),
            learned: self.learned.clone(),
        })
    }
}

impl System for MutatedSystem {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        self.inner.description()
    }

    fn set_up(&self, connection: &rusqlite::Connection, fixtures: &Fixtures) -> Result<(), DbError> {
        self.inner.set_up(connection, fixtures)?;
        if self.mutant.in_schema {
            let replacement = self.mutant.replacement.as_deref().unwrap_or("");
            rebuild(connection, &self.mutant.original, replacement)?;
        }
        Ok(())
    }

    fn handle_delivery(
        &self,
        env: Rc<dyn Env>,
        delivery: WebhookDelivery,
    ) -> LocalBoxFuture<'static, Answer> {
        self.inner.handle_delivery(self.env(env), delivery)
    }

    fn run_relay_worker(&self, env: Rc<dyn Env>, settings: RelaySettings) -> LocalBoxFuture<'static, ()> {
        self.inner.run_relay_worker(self.env(env), settings)
    }

    fn purge_receipts(&self, env: Rc<dyn Env>, older_than_ms: i64) -> LocalBoxFuture<'static, ()> {
        self.inner.purge_receipts(self.env(env), older_than_ms)
    }

    fn requeue_dead_obligations(&self, env: Rc<dyn Env>) -> LocalBoxFuture<'static, ()> {
        self.inner.requeue_dead_obligations(self.env(env))
    }

    fn domain(&self) -> std::sync::Arc<dyn crate::domain::Domain> {
        self.inner.domain()
    }

    fn workflows(&self) -> crate::system::Workflows {
        self.inner.workflows()
    }

    fn commits_after_answer(&self) -> bool {
        self.inner.commits_after_answer()
    }

    fn busy_timeout_ms(&self) -> i64 {
        self.inner.busy_timeout_ms()
    }

    fn body_bytes_max(&self) -> usize {
        self.inner.body_bytes_max()
    }

    fn tables(&self) -> Option<commitgap::tables::Tables> {
        self.inner.tables()
    }

    fn observed_tables(&self) -> &[&'static str] {
        self.inner.observed_tables()
    }

    fn decode_row(&self, table: &str, values: &[Value]) -> Result<ObservedRow, String> {
        self.inner.decode_row(table, values)
    }
}

/// Replaces schema object `original` by `replacement` in a set-up database, keeping its rows:
/// an index is dropped and created again; a table is renamed, created anew, refilled and the old
/// one dropped, with its indexes and triggers created again.
fn rebuild(connection: &rusqlite::Connection, original: &str, replacement: &str) -> Result<(), DbError> {
    let name: String = connection.query_row(
        "SELECT name FROM sqlite_master WHERE sql = ?1",
        [original],
        |row| row.get(0),
    )?;
    if original.to_ascii_uppercase().starts_with("CREATE UNIQUE INDEX") {
        connection.execute_batch(&format!("DROP INDEX \"{name}\"; {replacement};"))?;
        return Ok(());
    }
    let mut dependents = connection.prepare(
        "SELECT sql FROM sqlite_master WHERE tbl_name = ?1 AND type IN ('index', 'trigger') \
         AND sql IS NOT NULL ORDER BY name",
    )?;
    let dependents: Vec<String> = dependents
        .query_map([&name], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let mut batch = format!(
        "ALTER TABLE \"{name}\" RENAME TO \"{name}__before_mutant\"; {replacement}; \
         INSERT INTO \"{name}\" SELECT * FROM \"{name}__before_mutant\"; DROP TABLE \"{name}__before_mutant\";"
    );
    for dependent in dependents {
        batch.push_str(&dependent);
        batch.push(';');
    }
    connection.execute_batch(&batch)?;
    Ok(())
}

/// An `Env` that runs one statement rewritten, or, while learning, notes every statement.
struct MutatingEnv {
    inner: Rc<dyn Env>,
    mutant: Arc<Mutant>,
    learned: Option<Arc<Mutex<BTreeSet<String>>>>,
}

/// The highest parameter number a statement uses (`?3` is 3, each bare `?` counts one).
fn parameters_used(sql: &str) -> usize {
    let bytes = sql.as_bytes();
    let (mut highest, mut bare, mut at) = (0, 0, 0);
    while at < bytes.len() {
        if bytes[at] == b'?' {
            let digits: String = sql[at + 1..].chars().take_while(char::is_ascii_digit).collect();
            if digits.is_empty() {
                bare += 1;
            } else {
                highest = highest.max(digits.parse().unwrap_or(0));
            }
            at += 1 + digits.len();
        } else {
            at += 1;
        }
    }
    highest.max(bare)
}

impl MutatingEnv {
    /// What runs for `sql` and with how many of `params`: the statement itself with all of them,
    /// its rewrite, or nothing. A rewrite that drops a clause may drop the highest parameter;
    /// SQLite then expects fewer values, and the ones past it were only used by what was dropped.
    fn apply<'a>(&self, sql: &'a str, params: usize) -> Option<(std::borrow::Cow<'a, str>, usize)> {
        if let Some(learned) = &self.learned {
            learned
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(sql.to_owned());
            return Some((sql.into(), params));
        }
        if sql != self.mutant.original {
            return Some((sql.into(), params));
        }
        let replacement = self.mutant.replacement.clone()?;
        let used = params.min(parameters_used(&replacement));
        Some((replacement.into(), used))
    }
}

impl Env for MutatingEnv {
    fn process_id(&self) -> &str {
        self.inner.process_id()
    }

    fn now_ms(&self) -> i64 {
        self.inner.now_ms()
    }

    fn execute<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Value],
    ) -> LocalBoxFuture<'a, Result<usize, DbError>> {
        let Some((text, used)) = self.apply(sql, params.len()) else {
            return Box::pin(async { Ok(0) });
        };
        Box::pin(async move { self.inner.execute(&text, &params[..used]).await })
    }

    fn query<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Value],
    ) -> LocalBoxFuture<'a, Result<Vec<Row>, DbError>> {
        let Some((text, used)) = self.apply(sql, params.len()) else {
            return Box::pin(async { Ok(Vec::new()) });
        };
        Box::pin(async move { self.inner.query(&text, &params[..used]).await })
    }

    fn sleep_ms(&self, duration_ms: i64) -> LocalBoxFuture<'_, ()> {
        self.inner.sleep_ms(duration_ms)
    }

    fn call_provider<'a>(
        &'a self,
        call: &'a ProviderCall,
    ) -> LocalBoxFuture<'a, Result<ProviderReply, CallError>> {
        self.inner.call_provider(call)
    }

    fn log(&self, message: &str) {
        self.inner.log(message);
    }

    fn setting(&self, name: &str) -> Option<String> {
        self.inner.setting(name)
    }
}

/// The distinct statements `system` sends over `seeds` seeds (every fault model on, so that
/// recovery paths run too).
pub fn learn_statements(system: &Arc<dyn System>, seeds: u64, jobs: usize) -> BTreeSet<String> {
    let learned = Arc::new(Mutex::new(BTreeSet::new()));
    let learning: Arc<dyn System> =
        Arc::new(MutatedSystem::learning(Arc::clone(system), Arc::clone(&learned)));
    let options = SweepOptions {
        system: learning,
        first_seed: 0,
        seeds,
        jobs,
        backend: Backend::Memdb,
        check_determinism: false,
        every_fault: true,
        shape: WorkloadShape::default(),
        registry: Arc::default(),
    };
    sweep(&options, &|_, _| {});
    learned.lock().unwrap_or_else(PoisonError::into_inner).clone()
}

/// The `CREATE TABLE` and `CREATE UNIQUE INDEX` texts of `system`'s schema.
pub fn schema_of(system: &Arc<dyn System>) -> Result<Vec<String>, String> {
    let connection = rusqlite::Connection::open_in_memory().map_err(|error| error.to_string())?;
    let fixtures = Fixtures::default();
    system
        .set_up(&connection, &fixtures)
        .map_err(|error| format!("system {} failed to set up: {error}", system.name()))?;
    let mut statement = connection
        .prepare(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL \
             AND (type = 'table' OR (type = 'index' AND sql LIKE 'CREATE UNIQUE INDEX%')) ORDER BY name",
        )
        .map_err(|error| error.to_string())?;
    let texts = statement
        .query_map([], |row| row.get::<_, String>(0))
        .map_err(|error| error.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| error.to_string())?;
    Ok(texts)
}

/// What became of one mutant.
#[derive(Debug, Clone)]
pub struct MutantResult {
    /// The mutant that was applied.
    pub mutant: Mutant,
    /// The mutant's number, as in the mutated system's name.
    pub number: usize,
    /// `(invariant or verdict, seeds to the first failure)` when caught.
    pub caught: Option<(String, u64)>,
    /// Why it is equivalent, when it survived and is listed as such.
    pub equivalent: Option<&'static str>,
}

/// How `mutants --sql` runs.
#[derive(Debug, Clone)]
pub struct SqlMutantsOptions {
    /// How many seeds each mutant is given before it counts as surviving.
    pub budget: u64,
    /// The first seed of each mutant's sweep.
    pub first_seed: u64,
    /// How many seeds run at once.
    pub jobs: usize,
    /// The database backend every seed runs against.
    pub backend: Backend,
    /// The workload every seed is drawn within.
    pub shape: WorkloadShape,
    /// Seeds run to learn the statements.
    pub learning_seeds: u64,
    /// The mutants known to be equivalent for this system.
    pub equivalent: Vec<Equivalent>,
    /// The fault models, added invariants and replay command of the program.
    pub registry: Arc<crate::registry::Registry>,
}

/// Learns `system`'s statements and schema, then sweeps each mutant until it is caught or the
/// budget is spent. `on_result` is called as each mutant finishes.
pub fn run_sql_mutants(
    system: &Arc<dyn System>,
    options: &SqlMutantsOptions,
    on_result: &dyn Fn(&MutantResult),
) -> Result<Vec<MutantResult>, String> {
    let statements = learn_statements(system, options.learning_seeds, options.jobs);
    let schema = schema_of(system)?;
    // The pattern's statements the system may run: over its declared tables, or the reference's.
    let tables = system
        .tables()
        .unwrap_or_else(|| commitgap::tables::Tables::reference().clone());
    let mut results = Vec::new();
    for (index, mutant) in mutants_of(&statements, &schema).into_iter().enumerate() {
        let number = index + 1;
        let mutated: Arc<dyn System> =
            Arc::new(MutatedSystem::new(Arc::clone(system), mutant.clone(), number));
        let caught = hunt(&mutated, options);
        let equivalent = if caught.is_none() {
            equivalence_of(&mutant, &options.equivalent).or_else(|| {
                pattern_equivalence(&mutant, &tables)
                    .or_else(|| pattern_equivalence(&mutant, commitgap::tables::Tables::reference()))
            })
        } else {
            None
        };
        let result = MutantResult {
            mutant,
            number,
            caught,
            equivalent,
        };
        on_result(&result);
        results.push(result);
    }
    Ok(results)
}

/// Sweeps a mutated system batch by batch until a seed does not pass.
fn hunt(system: &Arc<dyn System>, options: &SqlMutantsOptions) -> Option<(String, u64)> {
    let batch = (options.jobs.max(1) as u64) * 4;
    let mut offset = 0;
    while offset < options.budget {
        let seeds = batch.min(options.budget - offset);
        let report = sweep(
            &SweepOptions {
                system: Arc::clone(system),
                first_seed: options.first_seed.wrapping_add(offset),
                seeds,
                jobs: options.jobs,
                backend: options.backend,
                check_determinism: false,
                every_fault: false,
                shape: options.shape.clone(),
                registry: Arc::clone(&options.registry),
            },
            &|_, _| {},
        );
        let mut found: Vec<(u64, String)> = report
            .failures
            .iter()
            .map(|result| {
                let verdict = match (&result.outcome.failure, &result.outcome.unsettled) {
                    (Some(failure), _) => failure.invariant.clone(),
                    (None, Some(_)) => "did-not-settle".to_owned(),
                    (None, None) => "nondeterminism".to_owned(),
                };
                (result.outcome.seed, verdict)
            })
            .chain(
                report
                    .errors
                    .iter()
                    .map(|(seed, _)| (*seed, "run-error".to_owned())),
            )
            .collect();
        found.sort();
        if let Some((seed, verdict)) = found.into_iter().next() {
            return Some((verdict, seed.wrapping_sub(options.first_seed) + 1));
        }
        offset += seeds;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_conjuncts_are_dropped_one_at_a_time_at_the_top_level() {
        let statement =
            "UPDATE outbox SET a = ?1 WHERE k = ?4 AND (s = 'x' AND t = 1) AND d <= ?2 RETURNING p";
        let texts: Vec<(Rewrite, Option<String>)> = rewrites(statement);
        let dropped: Vec<String> = texts
            .iter()
            .filter(|(rewrite, _)| matches!(rewrite, Rewrite::DropConjunct(_)))
            .map(|(_, text)| text.clone().unwrap())
            .collect();
        assert_eq!(dropped.len(), 3, "{dropped:?}");
        assert_eq!(
            dropped[0],
            "UPDATE outbox SET a = ?1 WHERE (s = 'x' AND t = 1) AND d <= ?2 RETURNING p"
        );
        assert!(
            texts
                .iter()
                .any(|(rewrite, text)| *rewrite == Rewrite::DropReturning
                    && text.as_deref()
                        == Some(
                            "UPDATE outbox SET a = ?1 WHERE k = ?4 AND (s = 'x' AND t = 1) AND d <= ?2  "
                        ))
        );
        assert!(texts.contains(&(Rewrite::DropStatement, None)));
    }

    #[test]
    fn on_conflict_runs_through_its_do_clause_and_transactions_get_their_own_rewrites() {
        let statement = "INSERT INTO r VALUES (?1, ?2) ON CONFLICT (a, b) DO NOTHING RETURNING x";
        let texts = rewrites(statement);
        assert!(texts.contains(&(
            Rewrite::DropOnConflict,
            Some("INSERT INTO r VALUES (?1, ?2)  RETURNING x".to_owned())
        )));
        assert_eq!(
            rewrites("BEGIN IMMEDIATE"),
            vec![(Rewrite::DeferredBegin, Some("BEGIN".to_owned()))]
        );
        assert_eq!(
            rewrites("COMMIT"),
            vec![(Rewrite::CommitToRollback, Some("ROLLBACK".to_owned()))]
        );
        assert!(
            rewrites("INSERT OR IGNORE INTO t VALUES (1)")
                .contains(&(Rewrite::PlainInsert, Some("INSERT INTO t VALUES (1)".to_owned())))
        );
    }

    #[test]
    fn key_columns_are_dropped_from_table_and_index_constraints() {
        let table = "CREATE TABLE r (\n    a TEXT NOT NULL,\n    b TEXT NOT NULL,\n    UNIQUE (a, b)\n)";
        let found = key_rewrites(table);
        assert_eq!(found.len(), 2);
        assert!(found[0].1.contains("UNIQUE (b)"), "{}", found[0].1);
        let single = "CREATE TABLE o (\n    k TEXT NOT NULL UNIQUE,\n    p TEXT\n)";
        assert_eq!(
            key_rewrites(single),
            vec![(
                "k".to_owned(),
                "CREATE TABLE o (\n    k TEXT NOT NULL,\n    p TEXT\n)".to_owned()
            )]
        );
        let index = "CREATE UNIQUE INDEX i ON t (a)";
        assert_eq!(
            key_rewrites(index),
            vec![("a".to_owned(), "CREATE INDEX i ON t (a)".to_owned())]
        );
    }

    #[test]
    fn parameters_are_counted_as_sqlite_counts_them() {
        assert_eq!(parameters_used("SELECT ?1, ?3"), 3);
        assert_eq!(parameters_used("SELECT ?, ?"), 2);
        assert_eq!(parameters_used("SELECT 1"), 0);
    }
}
