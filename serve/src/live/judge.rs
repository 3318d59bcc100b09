//! Reads what a live run left, the database's rows, the provider double's ledger, the sender's
//! books, and hands them to the simulator's judging of a final state
//! ([`commitgap_sim::judge`]), so that a live run is judged by the same code as a
//! simulated one.
//!
//! It also reads the database while the run goes on, through a read-only connection (WAL lets a
//! reader in beside the writers): which receipts exist, which obligations are owed (the wait for
//! quiet) and which are dead (what the operator's requeue is about to move). A purge may delete a
//! receipt between two looks, and `every-event-processed` asks whether one ever existed, so the
//! database keeps a copy of every deleted row ([`keep_deleted_rows`]): the one thing this module
//! adds to the database, in tables and triggers of its own, before any process starts. It must
//! not otherwise write to the database.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use commitgap_sim::invariants::{Invariant, InvariantChoice};
use commitgap_sim::judge::{
    FinalJudgement, FinalRow, FinalState, judge_final_state, read_final_rows, read_table_columns,
};
use commitgap_sim::peers::LedgerEntry;
use commitgap_sim::peers::Sender;
use commitgap_sim::run::Workload;
use commitgap_sim::rusqlite::{Connection, OpenFlags};
use commitgap_sim::system::{
    ObligationStatus, ObservedRow, RowReader, System, observed_tables, table_columns,
};

use crate::provider_double::LedgerEffect;

/// The observed rows at one moment, and what the run's loop asks of them.
pub struct Snapshot {
    /// Every row of the system's observed tables.
    pub rows: Vec<FinalRow>,
    /// The observed tables' column names, in table order.
    pub columns: BTreeMap<String, Vec<String>>,
    /// `(account, event id)` of every receipt.
    pub receipts: BTreeSet<(String, String)>,
    /// Operation keys of the obligations still owed.
    pub owed: Vec<String>,
    /// Operation keys of the dead obligations.
    pub dead: BTreeSet<String>,
}

/// Reads the observed rows of the database at `path`, as `system` decodes them.
pub fn snapshot(path: &Path, system: &dyn System) -> Result<Snapshot, String> {
    let connection = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    connection
        .busy_timeout(Duration::from_secs(5))
        .map_err(|error| format!("{}: {error}", path.display()))?;
    let tables = observed_tables(system);
    let rows = read_final_rows(&connection, &tables)?;
    let reader = RowReader::new(system, &|table| table_columns(&connection, table))?;
    let mut snapshot = Snapshot {
        rows: Vec::new(),
        columns: read_table_columns(&connection, &tables)?,
        receipts: BTreeSet::new(),
        owed: Vec::new(),
        dead: BTreeSet::new(),
    };
    for row in &rows {
        match reader.read(system, &row.table, &row.values)? {
            ObservedRow::Receipt(receipt) => {
                snapshot.receipts.insert((receipt.account, receipt.event_id));
            }
            ObservedRow::Obligation(obligation) => match obligation.status {
                ObligationStatus::Owed => snapshot.owed.push(obligation.operation_key),
                ObligationStatus::Dead => {
                    snapshot.dead.insert(obligation.operation_key);
                }
                ObligationStatus::Done => {}
            },
            _ => {}
        }
    }
    snapshot.rows = rows;
    Ok(snapshot)
}

/// The prefix of the tables that keep what was deleted from each observed table.
const DELETED_PREFIX: &str = "live_deleted_";

/// Makes the database at `path` keep a copy of every row deleted from the system's observed
/// tables, in a table of the same columns (`live_deleted_<table>`) filled by a trigger in the
/// deleting transaction: a receipt the purge deletes was still received, and
/// `every-event-processed` must know it even when it lived shorter than the loop's look. Only
/// committed deletes leave a copy, as only committed receipts count. Nothing of the system's
/// reads these tables.
pub fn keep_deleted_rows(path: &Path, system: &dyn System) -> Result<(), String> {
    let connection =
        Connection::open(path).map_err(|error| format!("cannot open {}: {error}", path.display()))?;
    for table in observed_tables(system) {
        let columns = table_columns(&connection, table)?;
        let old: Vec<String> = columns.iter().map(|column| format!("OLD.\"{column}\"")).collect();
        let sql = format!(
            "CREATE TABLE \"{DELETED_PREFIX}{table}\" AS SELECT * FROM \"{table}\" WHERE 0;
             CREATE TRIGGER \"{DELETED_PREFIX}{table}_keep\" AFTER DELETE ON \"{table}\"
             BEGIN INSERT INTO \"{DELETED_PREFIX}{table}\" VALUES ({}); END;",
            old.join(", ")
        );
        connection
            .execute_batch(&sql)
            .map_err(|error| format!("cannot keep the rows deleted from {table}: {error}"))?;
    }
    Ok(())
}

/// `(account, event id)` of every receipt deleted so far (see [`keep_deleted_rows`]).
pub fn deleted_receipts(path: &Path, system: &dyn System) -> Result<BTreeSet<(String, String)>, String> {
    let connection = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let mut receipts = BTreeSet::new();
    let reader = RowReader::new(system, &|table| table_columns(&connection, table))?;
    for table in observed_tables(system) {
        let copies = format!("{DELETED_PREFIX}{table}");
        for row in read_final_rows(&connection, &[copies.as_str()])? {
            if let ObservedRow::Receipt(receipt) = reader.read(system, table, &row.values)? {
                receipts.insert((receipt.account, receipt.event_id));
            }
        }
    }
    Ok(receipts)
}

/// What the judging reads besides the final rows.
pub struct Evidence<'a> {
    /// The workload the sender delivered.
    pub workload: &'a Workload,
    /// The sender's books.
    pub sender: &'a Sender,
    /// The provider double's ledger.
    pub effects: Vec<LedgerEffect>,
    /// Keys the double was still working on at the end.
    pub keys_in_progress: Vec<String>,
    /// Every receipt seen during the run.
    pub ever_received: BTreeSet<(String, String)>,
    /// The obligations dead when the operator set out to requeue them.
    pub dead_at_requeue: BTreeSet<String>,
    /// When the run ended, in wall-clock milliseconds.
    pub now_ms: i64,
}

/// Judges the final rows `last` with the evidence, by the simulator's invariants and `added`,
/// those `choice` takes.
pub fn judge(
    system: &dyn System,
    added: &[Arc<dyn Invariant>],
    last: Snapshot,
    evidence: Evidence<'_>,
    choice: &InvariantChoice,
) -> Result<FinalJudgement, String> {
    let mut ever_received = evidence.ever_received;
    ever_received.extend(last.receipts);
    let state = FinalState {
        rows: last.rows,
        columns: last.columns,
        effects: evidence
            .effects
            .into_iter()
            .map(|effect| LedgerEntry {
                effect_id: effect.effect_id,
                idempotency_key: effect.idempotency_key,
                payload: effect.payload,
                at_ms: effect.at_ms,
            })
            .collect(),
        keys_in_progress: evidence.keys_in_progress,
        ever_received,
        dead_at_requeue: evidence.dead_at_requeue,
        now_ms: evidence.now_ms,
    };
    judge_final_state(system, evidence.workload, evidence.sender, state, added, choice)
}
