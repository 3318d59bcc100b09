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

impl World {
    /// Runs one SQL statement for `task`.
    pub fn statement(
        &mut self,
        task: TaskId,
        sql: &str,
        params: &[Value],
        wants_rows: bool,
    ) -> Result<StatementOutput, DbError> {
        let connection = self.task_connection(task)?;
        let state = self.tasks.get_mut(&task).expect("a running task is registered");
        if let Some((failure, rolled_back)) = state.inject_failure.take() {
            // Not running the statement at all is what a failure before SQLite touched the file
            // looks like: the transaction stays open, as SQLite leaves it for SQLITE_BUSY and may
            // for a full disk or an I/O error; when SQLite rolls it back instead, it goes.
            if rolled_back && self.db.in_transaction(connection) {
                self.db.roll_back(connection);
            }
            let result = Err(failure.error());
            let statement = crate::sql::Statement::remembered(sql);
            self.trace
                .record_sql(&statement.text, params, &result, statement.changes_rows(), true);
            self.observe_statement(task, sql, params, &result);
            return result;
        }
        let (result, committed) = self.db.run(connection, sql, params, wants_rows);
        let statement = crate::sql::Statement::remembered(sql);
        self.trace
            .record_sql(&statement.text, params, &result, statement.changes_rows(), false);
        self.observe_statement(task, sql, params, &result);
        if let Ok(StatementOutput::Rows(rows)) = &result
            && rows.len() > 1
            && !statement.orders_rows
        {
            // Without ORDER BY the row order is whatever the query plan gives, which a SQLite
            // upgrade or a new index can change, and with it every decision taken from the rows.
            self.determinism_hazard.get_or_insert_with(|| {
                format!("a query returned {} rows without ORDER BY: {sql}", rows.len())
            });
        }
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
        result
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
            None => self.db.open()?,
        };
        self.tasks.get_mut(&task).expect("registered").connection = Some(connection);
        Ok(connection)
    }
}
