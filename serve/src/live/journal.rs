//! The journal of commits a live check keeps in the system's own database: every row a
//! committed transaction wrote to or deleted from an observed table, in commit order, with the
//! served process whose connection committed it. It is what lets a live run be judged one commit
//! at a time ([`commitgap_sim::judge`]), as the simulator judges its steps, and not only
//! by where it ended.
//!
//! Triggers on the observed tables write the journal inside the writing transaction, so a
//! rolled-back transaction or a process killed before COMMIT leaves nothing in it, and SQLite's
//! one writer at a time keeps each transaction's rows together and in commit order. The triggers
//! call two SQL functions every served connection has ([`crate::connection_labels`]): the
//! process's name and the number of its connection's current transaction.
//!
//! Besides the tables of deleted rows ([`super::judge`]), these are the only tables and
//! triggers live adds to a system's database; nothing of the system reads them. This module must
//! not otherwise write to the database, and the functions must not fail a statement.

use std::collections::BTreeMap;
use std::path::Path;

use commitgap_sim::judge::{CommitJournal, JournalChange, JournalCommit};
use commitgap_sim::judge::{FinalRow, read_final_rows, read_table_columns};
use commitgap_sim::rusqlite::{Connection, OpenFlags};
use commitgap_sim::system::{System, observed_tables, table_columns};

use crate::connection_labels::{INDEX_TABLE, PROCESS_FUNCTION, TRANSACTION_FUNCTION};

/// The prefix of the tables that hold each journaled row's values, one per observed table.
const VALUES_PREFIX: &str = "live_journal_";

/// SQLite's wall clock in ms since the epoch, fixed for one statement: the clock a served
/// process reads, taken after the process read its own for what the statement writes.
const NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

/// How far a journaled time may be from a process's clock read at the same moment, in ms: both
/// read the one system clock, each rounded to the millisecond; the rest is a margin for a clock
/// the system adjusts, so that the rules judged by true time raise no false alarm.
pub const CLOCK_UNCERTAINTY_MS: i64 = 50;

/// Makes the database at `path` journal every commit to the system's observed tables (see the
/// module documentation), and returns the observed rows as they are now, where the journal
/// starts.
pub fn start_journal(path: &Path, system: &dyn System) -> Result<Vec<FinalRow>, String> {
    let connection =
        Connection::open(path).map_err(|error| format!("cannot open {}: {error}", path.display()))?;
    let mut sql = format!(
        "CREATE TABLE \"{INDEX_TABLE}\" (
             seq INTEGER PRIMARY KEY AUTOINCREMENT,
             process TEXT NOT NULL,
             txn INTEGER NOT NULL,
             observed_table TEXT NOT NULL,
             row_id INTEGER NOT NULL,
             deleted INTEGER NOT NULL,
             at_ms INTEGER NOT NULL
         );"
    );
    for table in observed_tables(system) {
        let columns = table_columns(&connection, table)?;
        let new: Vec<String> = columns.iter().map(|column| format!("NEW.\"{column}\"")).collect();
        let new = new.join(", ");
        let index = |row: &str, deleted: u8| {
            format!(
                "INSERT INTO \"{INDEX_TABLE}\" (process, txn, observed_table, row_id, deleted, at_ms)
                 SELECT {PROCESS_FUNCTION}(), {TRANSACTION_FUNCTION}(), '{table}', {row}, {deleted}, {NOW_MS}"
            )
        };
        // Inside a trigger, last_insert_rowid() is the index row the trigger just inserted.
        let values = format!("INSERT INTO \"{VALUES_PREFIX}{table}\" VALUES (last_insert_rowid(), {new})");
        let (insert_new, delete_old) = (index("NEW.rowid", 0), index("OLD.rowid", 1));
        sql.push_str(&format!(
            "CREATE TABLE \"{VALUES_PREFIX}{table}\" AS SELECT 0 AS journal_seq, * FROM \"{table}\" WHERE 0;
             CREATE TRIGGER \"{VALUES_PREFIX}{table}_insert\" AFTER INSERT ON \"{table}\"
             BEGIN {insert_new}; {values}; END;
             CREATE TRIGGER \"{VALUES_PREFIX}{table}_update\" AFTER UPDATE ON \"{table}\"
             BEGIN
                 {delete_old} WHERE OLD.rowid <> NEW.rowid;
                 {insert_new}; {values};
             END;
             CREATE TRIGGER \"{VALUES_PREFIX}{table}_delete\" AFTER DELETE ON \"{table}\"
             BEGIN {delete_old}; END;"
        ));
    }
    connection
        .execute_batch(&sql)
        .map_err(|error| format!("cannot start the commit journal: {error}"))?;
    read_final_rows(&connection, &observed_tables(system))
}

/// The journal of the database at `path`, from `start` (what [`start_journal`] returned) to
/// `end` (the final rows, read apart from it).
pub fn read_journal(
    path: &Path,
    system: &dyn System,
    start: Vec<FinalRow>,
    end: Vec<FinalRow>,
) -> Result<CommitJournal, String> {
    let connection = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let read_error =
        |error: commitgap_sim::rusqlite::Error| format!("cannot read the commit journal: {error}");
    let mut values: BTreeMap<i64, Vec<commitgap_sim::commitgap::env::Value>> = BTreeMap::new();
    let tables = observed_tables(system);
    for table in &tables {
        let copies = format!("{VALUES_PREFIX}{table}");
        for row in read_final_rows(&connection, &[copies.as_str()])? {
            let mut row_values = row.values;
            let seq = match row_values.first() {
                Some(commitgap_sim::commitgap::env::Value::Integer(seq)) => *seq,
                _ => return Err(format!("a row of {copies} has no journal sequence number")),
            };
            row_values.remove(0);
            values.insert(seq, row_values);
        }
    }
    let mut statement = connection
        .prepare(&format!(
            "SELECT seq, process, txn, observed_table, row_id, deleted, at_ms FROM \"{INDEX_TABLE}\" ORDER BY seq"
        ))
        .map_err(read_error)?;
    let mut rows = statement.query([]).map_err(read_error)?;
    let mut commits: Vec<JournalCommit> = Vec::new();
    let mut current: Option<(String, i64)> = None;
    while let Some(row) = rows.next().map_err(read_error)? {
        let seq: i64 = row.get(0).map_err(read_error)?;
        let process: String = row.get(1).map_err(read_error)?;
        let transaction: i64 = row.get(2).map_err(read_error)?;
        let table: String = row.get(3).map_err(read_error)?;
        let rowid: i64 = row.get(4).map_err(read_error)?;
        let deleted: bool = row.get(5).map_err(read_error)?;
        let at_ms: i64 = row.get(6).map_err(read_error)?;
        let change_values = if deleted {
            None
        } else {
            Some(
                values
                    .remove(&seq)
                    .ok_or_else(|| format!("journal entry {seq} of {table} has no values"))?,
            )
        };
        let key = (process, transaction);
        if current.as_ref() != Some(&key) {
            commits.push(JournalCommit {
                process_id: key.0.clone(),
                at_ms,
                changes: Vec::new(),
            });
            current = Some(key);
        }
        if let Some(commit) = commits.last_mut() {
            // The commit's time is its last change's: no later than the commit itself.
            commit.at_ms = commit.at_ms.max(at_ms);
            commit.changes.push(JournalChange {
                table,
                rowid,
                values: change_values,
            });
        }
    }
    Ok(CommitJournal {
        start,
        commits,
        end,
        columns: read_table_columns(&connection, &tables)?,
        clock_uncertainty_ms: CLOCK_UNCERTAINTY_MS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::{Connections, NoProvider, Stop};
    use commitgap_sim::commitgap::env::{Env, Value};
    use commitgap_sim::commitgap::realtime::{block_on, create_database};

    fn receipt(event_id: &str) -> String {
        format!(
            "INSERT INTO receipts (account, event_id, received_ms, body_digest) VALUES ('acct-a', '{event_id}', 1, 'd')"
        )
    }

    #[test]
    fn the_journal_holds_each_committed_transaction_once_and_nothing_rolled_back() {
        let directory = std::env::temp_dir().join(format!("commitgap-journal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&directory);
        std::fs::create_dir_all(&directory).unwrap();
        let path = directory.join("journal.sqlite");
        create_database(&path).unwrap();
        let reference = commitgap_sim::systems::by_name("reference").unwrap();
        let start = start_journal(&path, &*reference).unwrap();
        let connections = Connections {
            database: path.clone(),
            busy_timeout_ms: 1_000,
            settings: Vec::new(),
        };
        let env = connections
            .open("receiver-1", Box::new(NoProvider), &Stop::new())
            .unwrap();
        let run = |sql: &str| block_on(env.execute(sql, &[])).unwrap();
        let began_ms = env.now_ms();
        run("BEGIN IMMEDIATE");
        run(&receipt("evt-1"));
        run(&receipt("evt-2"));
        run("COMMIT");
        run("BEGIN IMMEDIATE");
        run(&receipt("evt-lost"));
        run("ROLLBACK");
        run(&receipt("evt-3"));
        run("UPDATE receipts SET received_ms = 2 WHERE event_id = 'evt-3'");
        run("DELETE FROM receipts WHERE event_id = 'evt-1'");
        let ended_ms = env.now_ms();
        drop(env);

        let reader = Connection::open(&path).unwrap();
        let end = read_final_rows(&reader, reference.observed_tables()).unwrap();
        let journal = read_journal(&path, &*reference, start, end).unwrap();
        for commit in &journal.commits {
            // Timed by the clock the process reads, within the journal's uncertainty.
            assert!(
                began_ms - CLOCK_UNCERTAINTY_MS <= commit.at_ms
                    && commit.at_ms <= ended_ms + CLOCK_UNCERTAINTY_MS,
                "{} not within {began_ms}..{ended_ms}",
                commit.at_ms
            );
        }
        let process = format!("receiver-1#{}", std::process::id());
        let shape: Vec<(String, Vec<(String, bool)>)> = journal
            .commits
            .iter()
            .map(|commit| {
                let changes = commit
                    .changes
                    .iter()
                    .map(|change| {
                        let event = match &change.values {
                            Some(values) => match &values[1] {
                                Value::Text(event) => event.clone(),
                                other => format!("{other:?}"),
                            },
                            None => format!("rowid {}", change.rowid),
                        };
                        (event, change.values.is_none())
                    })
                    .collect();
                (commit.process_id.clone(), changes)
            })
            .collect();
        let row = |event: &str, deleted: bool| (event.to_owned(), deleted);
        assert_eq!(
            shape,
            vec![
                (process.clone(), vec![row("evt-1", false), row("evt-2", false)]),
                (process.clone(), vec![row("evt-3", false)]),
                (process.clone(), vec![row("evt-3", false)]),
                (process, vec![row("rowid 1", true)]),
            ]
        );
        let _ = std::fs::remove_dir_all(&directory);
    }
}
