//! A task's SQL statement, run as a scheduling point of the simulated Env: on the task's
//! connection (taken from its process's pool, or opened), failed without running when a fault
//! chose so, recorded in the trace, and its commit kept for the view.
//!
//! It also notes what makes a run depend on more than its seed (rows read without ORDER BY), and
//! the situations a result shows. It must not change the statement or its result.

use commitgap::env::{DbError, Value};

use super::{Origin, StepCommit, TaskId, TaskKind, World};
use crate::coverage::Situation;
use crate::db::{ConnectionId, StatementOutput};
use crate::trace::Happening;

/// How a statement's scheduling point ended.
#[derive(Debug)]
pub enum StatementStep {
    /// The statement ran, or failed, and this is what the system sees.
    Done(Result<StatementOutput, DbError>),
    /// SQLite refused a lock that the connection's busy timeout waits for: the task parks until
    /// a transaction ends or this virtual time, then runs the statement again.
    WaitForLock(i64),
}

impl World {
    /// Runs one SQL statement for `task`, or says how long it waits for a lock first.
    pub fn statement(
        &mut self,
        task: TaskId,
        sql: &str,
        params: &[Value],
        wants_rows: bool,
    ) -> StatementStep {
        self.lock_waits.stop_waiting(task);
        if self.tasks[&task].inject_failure.is_none()
            && let Some(timeout_ms) = self.busy_timeout_pragma(task, sql)
        {
            // SQLite's own timeout stays zero, so the pragma is answered here (see `locks`).
            self.lock_waits.finished(task);
            let result = Ok(if wants_rows {
                StatementOutput::Rows(vec![commitgap::env::Row(vec![Value::Integer(timeout_ms)])])
            } else {
                StatementOutput::Changed(0)
            });
            let statement = crate::sql::Statement::remembered(sql);
            self.trace
                .record_sql(&statement.text, params, &result, false, false);
            return StatementStep::Done(result);
        }
        let connection = match self.task_connection(task) {
            Ok(connection) => connection,
            // A new connection's first read of the schema met a lock: that read waits as any
            // other does, with the timeout the connection will have.
            Err(DbError::Busy) if self.tasks[&task].inject_failure.is_none() => {
                let timeout_ms = self.lock_waits.timeout_before_connecting_ms(task);
                if let Some(refusal) = self.lock_waits.refused(task, timeout_ms, self.now_ms) {
                    return self.wait_for_lock(sql, refusal);
                }
                self.purge_statement_failed(task);
                return StatementStep::Done(Err(DbError::Busy));
            }
            Err(error) => {
                self.purge_statement_failed(task);
                return StatementStep::Done(Err(error));
            }
        };
        let (result, injected) = self.run_statement(task, connection, sql, params, wants_rows);
        if !injected && matches!(result, Err(DbError::Busy)) && self.db.busy_is_waited_for(connection) {
            let timeout_ms = self.lock_waits.timeout_ms(connection);
            if let Some(refusal) = self.lock_waits.refused(task, timeout_ms, self.now_ms) {
                return self.wait_for_lock(sql, refusal);
            }
        }
        self.lock_waits.finished(task);
        if result.is_err() {
            self.purge_statement_failed(task);
        }
        let statement = crate::sql::Statement::remembered(sql);
        self.trace.record_sql(
            &statement.text,
            params,
            &result,
            statement.changes_rows(),
            injected,
        );
        self.observe_statement(task, sql, params, &result);
        self.note_unordered_rows(sql, &result);
        StatementStep::Done(result)
    }

    /// Parks the statement until its lock may be free, writing down when its wait begins.
    fn wait_for_lock(&mut self, sql: &str, refusal: super::locks::Refusal) -> StatementStep {
        if refusal.first {
            let statement = crate::sql::Statement::remembered(sql);
            self.record(Happening::LockWait {
                statement: std::sync::Arc::clone(&statement.text),
                until_ms: refusal.until_ms,
            });
        }
        StatementStep::WaitForLock(refusal.until_ms)
    }

    /// Notes a query whose several rows came back in no declared order.
    fn note_unordered_rows(&mut self, sql: &str, result: &Result<StatementOutput, DbError>) {
        if let Ok(StatementOutput::Rows(rows)) = result
            && rows.len() > 1
            && !crate::sql::Statement::remembered(sql).orders_rows
        {
            // Without ORDER BY the row order is whatever the query plan gives, which a SQLite
            // upgrade or a new index can change, and with it every decision taken from the rows.
            self.determinism_hazard.get_or_insert_with(|| {
                format!("a query returned {} rows without ORDER BY: {sql}", rows.len())
            });
        }
    }

    /// Runs `sql` on `connection`, or fails it as a fault chose (then `true`); writes nothing to
    /// the trace, so that a statement that goes on to wait for a lock leaves only its wait.
    fn run_statement(
        &mut self,
        task: TaskId,
        connection: ConnectionId,
        sql: &str,
        params: &[Value],
        wants_rows: bool,
    ) -> (Result<StatementOutput, DbError>, bool) {
        let state = self.tasks.get_mut(&task).expect("a running task is registered");
        if let Some((failure, rolled_back)) = state.inject_failure.take() {
            // Not running the statement at all is what a failure before SQLite touched the file
            // looks like: the transaction stays open, as SQLite leaves it for SQLITE_BUSY and may
            // for a full disk or an I/O error; when SQLite rolls it back instead, it goes.
            if rolled_back && self.db.in_transaction(connection) {
                self.db.roll_back(connection);
            }
            return (Err(failure.error()), true);
        }
        let (result, committed) = self.db.run(connection, sql, params, wants_rows);
        if !committed.is_empty() {
            let state = &self.tasks[&task];
            let hostile = match &state.kind {
                TaskKind::Handler {
                    origin: Origin::Hostile { attack },
                    ..
                } => Some(attack.clone()),
                _ => None,
            };
            let process_id = state.process_id.clone();
            self.step_commits.push(StepCommit {
                process_id: process_id.to_string(),
                hostile,
                changes: committed,
            });
        }
        (result, false)
    }

    /// Counts the situations a statement's result shows: a BEGIN refused as busy, and a
    /// lease-guarded update that a stale token made change nothing. Only the rare results are
    /// looked at further, so the common statement costs one match.
    fn observe_statement(
        &mut self,
        task: TaskId,
        sql: &str,
        params: &[Value],
        result: &Result<StatementOutput, DbError>,
    ) {
        match result {
            Err(DbError::Busy) if crate::sql::Statement::remembered(sql).verb == crate::sql::Verb::Begin => {
                self.probes.reach(Situation::BusyOnBegin);
            }
            Ok(StatementOutput::Changed(0)) => {
                let process_id = &self.tasks[&task].process_id;
                self.probes.changed_nothing(process_id, sql, params, &self.view);
            }
            Ok(StatementOutput::Rows(rows)) if rows.is_empty() => {
                let process_id = &self.tasks[&task].process_id;
                self.probes.changed_nothing(process_id, sql, params, &self.view);
            }
            _ => {}
        }
    }

    fn task_connection(&mut self, task: TaskId) -> Result<ConnectionId, DbError> {
        let state = self.tasks.get_mut(&task).expect("a running task is registered");
        if let Some(connection) = state.connection {
            return Ok(connection);
        }
        let connection = match self.processes[state.process].idle_connections.pop() {
            Some(connection) => connection,
            None => {
                let connection = self.db.open()?;
                self.lock_waits.opened(connection);
                connection
            }
        };
        self.lock_waits.connected(task, connection);
        self.tasks.get_mut(&task).expect("registered").connection = Some(connection);
        Ok(connection)
    }
}
