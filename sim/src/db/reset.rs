//! Putting a reused database's rows back to what a new run's set-up writes: a plan worked out
//! once per database to copy every table with its rowids, `sqlite_sequence` and header versions,
//! from a bare database a system has just set up or from the image a two-part set-up's schema step
//! left.
//!
//! It changes rows only, never the schema, and does nothing when the schema no longer matches the
//! plan (the caller then sets up a new database). Triggers and foreign keys are switched off only
//! while rows are copied, and only when the schema has any. When a database is reused is
//! [`super::reuse`]'s business, not this module's.

use std::collections::BTreeMap;
use std::sync::Arc;

use commitgap::env::{DbError, Row, Value};
use commitgap::realtime::query_rows;
use rusqlite::Connection;
use rusqlite::config::DbConfig;

use super::Store;
use crate::system::System;

/// How to copy a new set-up's rows into a reused database, worked out once per database.
pub(super) struct ResetPlan {
    /// The schema the plan was made for, capture triggers left out; a set-up that writes another
    /// gets a new database.
    pub(super) schema: Vec<Row>,
    auto_vacuum: i64,
    /// Every table of the schema, `sqlite_sequence` last: copying rows with their rowids moves it.
    pub(super) tables: Vec<TableCopy>,
    /// Whether the schema has triggers of the system's own, which the copy must not fire.
    own_triggers: bool,
}

pub(super) struct TableCopy {
    pub(super) name: String,
    delete_sql: String,
    select_sql: String,
    insert_sql: String,
}

/// The schema as [`ResetPlan::schema`] holds it.
const SCHEMA_SQL: &str = "SELECT type, name, tbl_name, sql FROM main.sqlite_master \
                          WHERE name NOT LIKE 'commitgap\\_capture\\_%' ESCAPE '\\' ORDER BY rowid";

impl Store {
    /// Replaces every row of this database with the rows of `scratch`, a bare database a system
    /// has just set up: the same rowids, `sqlite_sequence` and header versions. `Ok(false)`, with
    /// nothing changed, when the two schemas differ (leaving aside the capture triggers) or the
    /// schema holds a table whose rows cannot be copied this way (a virtual table).
    ///
    /// Rows go through Rust rather than through `ATTACH`, and triggers and foreign keys are
    /// switched off only when the schema has any: both change the anchor's schema or flags, and
    /// either makes SQLite prepare every cached statement of the anchor again.
    pub(super) fn reset_from(&mut self, scratch: &Connection) -> Result<bool, DbError> {
        if self.reset_plan.is_none() {
            self.reset_plan = reset_plan(&self.anchor)?;
        }
        let Some(plan) = &self.reset_plan else {
            return Ok(false);
        };
        if query_rows(scratch, SCHEMA_SQL, &[])? != plan.schema
            || header_value(scratch, "auto_vacuum")? != plan.auto_vacuum
        {
            return Ok(false);
        }
        self.replace_rows(plan, RowSource::Scratch(scratch))
    }

    /// Replaces every row of this database with the rows of its schema image (see
    /// [`Database::reuse_schema`](super::Database::reuse_schema)). `Ok(false)`, with nothing
    /// changed, when there is no image.
    pub(super) fn reset_to_image(&self) -> Result<bool, DbError> {
        let (Some(plan), Some(image)) = (&self.reset_plan, &self.schema_image) else {
            return Ok(false);
        };
        self.replace_rows(plan, RowSource::Image(image))
    }

    /// Deletes every row of every table and inserts `source`'s instead, with its header versions.
    /// `Ok(false)`, with nothing changed, if a run changed this database's schema: the plan no
    /// longer fits it.
    fn replace_rows(&self, plan: &ResetPlan, source: RowSource<'_>) -> Result<bool, DbError> {
        let anchor = &self.anchor;
        if query_rows(anchor, SCHEMA_SQL, &[])? != plan.schema {
            return Ok(false);
        }
        let headers = match source {
            RowSource::Scratch(scratch) => [
                header_value(scratch, "user_version")?,
                header_value(scratch, "application_id")?,
            ],
            RowSource::Image(image) => [image.user_version, image.application_id],
        };
        let foreign_keys = anchor.db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_FKEY)?;
        if foreign_keys {
            anchor.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_FKEY, false)?;
        }
        if plan.own_triggers {
            anchor.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, false)?;
        }
        let run = |sql: &str| -> Result<(), DbError> {
            anchor.prepare_cached(sql)?.execute([])?;
            Ok(())
        };
        let copied = (|| -> Result<(), DbError> {
            run("BEGIN IMMEDIATE")?;
            for (index, table) in plan.tables.iter().enumerate() {
                run(&table.delete_sql)?;
                let mut insert = anchor.prepare_cached(&table.insert_sql)?;
                match source {
                    RowSource::Scratch(scratch) => {
                        for values in read_copyable_rows(scratch, table)? {
                            insert.execute(rusqlite::params_from_iter(values))?;
                        }
                    }
                    RowSource::Image(image) => {
                        for values in &image.rows[index] {
                            insert.execute(rusqlite::params_from_iter(values))?;
                        }
                    }
                }
            }
            for (name, wanted) in ["user_version", "application_id"].into_iter().zip(headers) {
                if header_value(anchor, name)? != wanted {
                    anchor.execute_batch(&format!("PRAGMA main.{name} = {wanted}"))?;
                }
            }
            run("COMMIT")
        })();
        if copied.is_err() && !anchor.is_autocommit() {
            let _ = anchor.execute_batch("ROLLBACK");
        }
        if foreign_keys {
            anchor.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_FKEY, true)?;
        }
        if plan.own_triggers {
            anchor.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_TRIGGER, true)?;
        }
        copied?;
        Ok(true)
    }
}

/// Where [`Store::replace_rows`] takes its rows from.
#[derive(Clone, Copy)]
enum RowSource<'a> {
    /// A bare database a system has just set up.
    Scratch(&'a Connection),
    /// What a two-part set-up's schema step left.
    Image(&'a SchemaImage),
}

/// The rows a two-part set-up's schema step left (see [`System::sets_up_in_two_parts`]).
pub(super) struct SchemaImage {
    /// The system whose schema step this is: only its own runs reuse the database this way. Held
    /// so that no other system can be allocated at its address while the image lives.
    pub(super) system: Arc<dyn System>,
    /// Every table's rows, in the order of the reset plan's tables, as [`TableCopy::select_sql`]
    /// reads them.
    pub(super) rows: Vec<Vec<Vec<Value>>>,
    pub(super) user_version: i64,
    pub(super) application_id: i64,
}
// Written by hand: it holds connections, futures or closures that cannot print themselves.
impl std::fmt::Debug for SchemaSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaSnapshot").finish_non_exhaustive()
    }
}

/// What a set-up had written when
/// [`Database::schema_snapshot`](super::Database::schema_snapshot) looked.
pub struct SchemaSnapshot {
    pub(super) schema: Vec<Row>,
    /// Every table's rows, by table name.
    pub(super) tables: BTreeMap<String, Vec<Vec<Value>>>,
    pub(super) user_version: i64,
    pub(super) application_id: i64,
}

/// Every row of `table`, as its copy inserts them.
pub(super) fn read_copyable_rows(
    connection: &Connection,
    table: &TableCopy,
) -> Result<Vec<Vec<Value>>, DbError> {
    let mut select = connection.prepare(&table.select_sql)?;
    let column_count = select.column_count();
    let mut rows = select.query([])?;
    let mut copied = Vec::new();
    while let Some(row) = rows.next()? {
        copied.push(
            (0..column_count)
                .map(|index| row.get::<_, Value>(index))
                .collect::<Result<Vec<_>, _>>()?,
        );
    }
    Ok(copied)
}

/// A header value of the main database (`user_version`, `application_id`, `auto_vacuum`).
pub(super) fn header_value(connection: &Connection, name: &'static str) -> Result<i64, DbError> {
    let sql = match name {
        "user_version" => "PRAGMA main.user_version",
        "application_id" => "PRAGMA main.application_id",
        "auto_vacuum" => "PRAGMA main.auto_vacuum",
        other => return Err(DbError::Other(format!("no header value {other}"))),
    };
    Ok(connection.prepare_cached(sql)?.query_row([], |row| row.get(0))?)
}

/// Works out how to copy rows into every table of `anchor`'s main schema; `None` if a table
/// cannot be copied with plain SQL.
pub(super) fn reset_plan(anchor: &Connection) -> Result<Option<ResetPlan>, DbError> {
    let schema = query_rows(anchor, SCHEMA_SQL, &[])?;
    let mut own_triggers = false;
    for entry in &schema {
        own_triggers |= entry.text(0)? == "trigger";
    }
    let auto_vacuum = anchor.query_row("PRAGMA main.auto_vacuum", [], |row| row.get(0))?;
    let tables = query_rows(
        anchor,
        "SELECT name, type, wr FROM pragma_table_list WHERE schema = 'main' \
         AND name NOT IN ('sqlite_schema', 'sqlite_master') ORDER BY name = 'sqlite_sequence', name",
        &[],
    )?;
    let mut copies = Vec::new();
    for table in tables {
        let name = table.text(0)?;
        match table.text(1)? {
            "table" => {}
            "view" => continue,
            _ => return Ok(None),
        }
        let without_rowid = table.int(2)? != 0;
        let columns = query_rows(
            anchor,
            "SELECT name FROM pragma_table_xinfo(?1, 'main') WHERE hidden = 0 ORDER BY cid",
            &[Value::Text(name.to_owned())],
        )?;
        let mut column_list: Vec<String> = if without_rowid {
            Vec::new()
        } else {
            vec!["rowid".to_owned()]
        };
        for column in &columns {
            column_list.push(format!("\"{}\"", column.text(0)?.replace('"', "\"\"")));
        }
        let placeholders = vec!["?"; column_list.len()].join(", ");
        let columns = column_list.join(", ");
        let quoted = name.replace('"', "\"\"");
        copies.push(TableCopy {
            name: name.to_owned(),
            delete_sql: format!("DELETE FROM main.\"{quoted}\""),
            select_sql: format!("SELECT {columns} FROM main.\"{quoted}\""),
            insert_sql: format!("INSERT INTO main.\"{quoted}\" ({columns}) VALUES ({placeholders})"),
        });
    }
    Ok(Some(ResetPlan {
        schema,
        auto_vacuum,
        tables: copies,
        own_triggers,
    }))
}
