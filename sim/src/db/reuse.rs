//! The reuse of databases across one thread's runs: while [`reusing_databases`] runs, a run's
//! database, once the run is over, waits with its idle connections for the thread's next run of
//! the same system and backend, which gets it back set up as new.
//!
//! A reused database must look new to the run that gets it: the same rows, rowids, sequences,
//! header versions and schema as a new one, and connections rolled back and reset. Nothing is
//! reused across threads, and a database a test or a bare replay made is never reused. Putting
//! the rows back is [`super::reset`]'s job.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use commitgap::env::DbError;
use rusqlite::Connection;

use super::reset::{SchemaImage, SchemaSnapshot, header_value, read_copyable_rows, reset_plan};
use super::{Backend, Database, RowChange, Store, retire};
use crate::system::{Fixtures, System};

/// How many databases one thread keeps for reuse: one per system and backend it sweeps, and a
/// sweep has one of each.
const SPARE_STORES_KEPT: usize = 4;

thread_local! {
    /// Databases this thread's finished runs left for its next ones, while [`reusing_databases`]
    /// runs; `None` outside it, and then every run's database is dropped with the run.
    static SPARE_STORES: RefCell<Option<Vec<Store>>> = const { RefCell::new(None) };
}

/// Runs `work` with database reuse on for this thread: a run's database, once the run is over,
/// waits with its idle connections for the next run of the same system and backend, which
/// [`Database::reuse`] or [`Database::reuse_schema`] sets up again as new. A new database costs a
/// schema parse per connection and a statement cache filled again per connection, which was a
/// quarter of a sweep's time.
/// What a run sees is the same either way: the same rows, rowids, sequences and schema, and
/// connections that look new (see [`Database::open`]). When `work` returns or panics, the
/// databases kept are dropped, which removes their files.
pub fn reusing_databases<R>(work: impl FnOnce() -> R) -> R {
    struct Kept {
        outermost: bool,
    }
    impl Drop for Kept {
        fn drop(&mut self) {
            if self.outermost {
                let spares = SPARE_STORES.with(|spares| spares.borrow_mut().take());
                drop(spares);
            }
        }
    }
    let outermost = SPARE_STORES.with(|spares| {
        let mut spares = spares.borrow_mut();
        let outermost = spares.is_none();
        spares.get_or_insert_with(Vec::new);
        outermost
    });
    let _kept = Kept { outermost };
    work()
}

/// Takes out of this thread's spares a database of `backend` observing `observed_tables` for
/// which `fits` holds; `None` when there is none, or the thread does not reuse databases.
fn take_spare(backend: Backend, observed_tables: &[&str], fits: impl Fn(&Store) -> bool) -> Option<Store> {
    SPARE_STORES.with(|spares| {
        let mut spares = spares.borrow_mut();
        let spares = spares.as_mut()?;
        let position = spares.iter().position(|store| {
            store.backend == backend
                && store
                    .observed_tables
                    .iter()
                    .map(String::as_str)
                    .eq(observed_tables.iter().copied())
                && fits(store)
        })?;
        Some(spares.remove(position))
    })
}

impl Database {
    /// A database this thread used for an earlier run, set up again by `set_up` as if new, if
    /// this thread reuses databases (see [`reusing_databases`]) and one fits: same backend, same
    /// observed tables, and after `set_up` the same schema. Returns it with every row its
    /// observed tables hold, as [`Database::finish_setup`] does. `None` means: create one.
    ///
    /// `set_up` runs on a new, bare in-memory database, whose rows then replace the reused
    /// database's rows table by table, rowids and `sqlite_sequence` included (see
    /// `Store::reset_from`). If `set_up` fails there, or writes another schema, the caller sets
    /// up a new database, which runs `set_up` a second time and reports a failure as usual.
    pub fn reuse(
        backend: Backend,
        observed_tables: &[&str],
        set_up: &dyn Fn(&Connection) -> Result<(), DbError>,
    ) -> Option<(Database, Vec<RowChange>)> {
        let mut store = take_spare(backend, observed_tables, |_| true)?;
        let scratch = Connection::open_in_memory().ok()?;
        set_up(&scratch).ok()?;
        store.reset_from(&scratch).ok()?.then_some(())?;
        drop(scratch);
        Database::reused(store)
    }

    /// A database over `store`, set up again for a new run, with every row its observed tables
    /// hold, as [`Database::finish_setup`] returns them.
    fn reused(store: Store) -> Option<(Database, Vec<RowChange>)> {
        let mut database = Database::over(store);
        let rows = database.observed_rows().ok()?;
        database.reusable = true;
        Some((database, rows))
    }

    /// Lets this database serve a later run of this thread once this run drops it, when the
    /// thread reuses databases (see [`reusing_databases`]).
    pub fn allow_reuse(&mut self) {
        self.reusable = true;
    }

    /// A database this thread used for an earlier run of `system`, which sets up in two parts
    /// (see [`System::sets_up_in_two_parts`]), set up again for `fixtures` as if new: its rows go
    /// back to what `system`'s schema step left (kept by [`Database::keep_schema_image`] when the
    /// database was new), then [`System::load_fixtures`] runs on it. Returns it with every row its
    /// observed tables hold, as [`Database::finish_setup`] does. `None` means: create one. Only a
    /// database set up by this very `system` value qualifies, so a schema step runs once per
    /// database; the schema must still be the one the image was taken with, or the database is
    /// dropped. If `load_fixtures` fails here, the caller sets up a new database, which reports
    /// the failure as usual.
    pub fn reuse_schema(
        backend: Backend,
        observed_tables: &[&str],
        system: &Arc<dyn System>,
        fixtures: &Fixtures,
    ) -> Option<(Database, Vec<RowChange>)> {
        let store = take_spare(backend, observed_tables, |store| {
            store
                .schema_image
                .as_ref()
                .is_some_and(|image| Arc::ptr_eq(&image.system, system))
        })?;
        store.reset_to_image().ok()?.then_some(())?;
        system.load_fixtures(&store.anchor, fixtures).ok()?;
        if !store.anchor.is_autocommit() {
            return None;
        }
        Database::reused(store)
    }

    /// What the set-up has written so far, for [`Database::keep_schema_image`]: call it right
    /// after a two-part set-up's schema step. `None` when the schema holds a table whose rows
    /// cannot be copied with plain SQL (a virtual table); such a database is not reused.
    pub fn schema_snapshot(&self) -> Result<Option<SchemaSnapshot>, DbError> {
        let Some(plan) = reset_plan(&self.store.anchor)? else {
            return Ok(None);
        };
        let mut tables = BTreeMap::new();
        for table in &plan.tables {
            tables.insert(table.name.clone(), read_copyable_rows(&self.store.anchor, table)?);
        }
        Ok(Some(SchemaSnapshot {
            schema: plan.schema,
            tables,
            user_version: header_value(&self.store.anchor, "user_version")?,
            application_id: header_value(&self.store.anchor, "application_id")?,
        }))
    }

    /// Keeps `snapshot` (taken after `system`'s schema step) with this database once its set-up
    /// is over, so that [`Database::reuse_schema`] can go back to it. Nothing is kept if the
    /// fixtures changed the schema, which [`System::load_fixtures`] must not do.
    pub fn keep_schema_image(
        &mut self,
        system: &Arc<dyn System>,
        snapshot: SchemaSnapshot,
    ) -> Result<(), DbError> {
        let Some(plan) = reset_plan(&self.store.anchor)? else {
            return Ok(());
        };
        let SchemaSnapshot {
            schema,
            mut tables,
            user_version,
            application_id,
        } = snapshot;
        // The same schema has the same tables, so every snapshot table has its place in the plan.
        if schema != plan.schema {
            return Ok(());
        }
        let rows = plan
            .tables
            .iter()
            .map(|table| tables.remove(&table.name).unwrap_or_default())
            .collect();
        self.store.reset_plan = Some(plan);
        self.store.schema_image = Some(SchemaImage {
            system: Arc::clone(system),
            rows,
            user_version,
            application_id,
        });
        Ok(())
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let connections = std::mem::take(&mut self.connections);
        // SAFETY: `drop` runs once and is the only place that takes the store; nothing reads
        // `self.store` after this line.
        let mut store = unsafe { ManuallyDrop::take(&mut self.store) };
        let keep = self.reusable
            && store.anchor.is_autocommit()
            && SPARE_STORES.with(|spares| spares.borrow().is_some());
        if !keep {
            // Connections close before the store, whose drop removes the files.
            drop(connections);
            return;
        }
        // In id order, so that the pool's order depends on the run alone.
        for slot in connections.into_values() {
            if let Some(slot) = retire(slot) {
                store.pool.push(slot);
            }
        }
        SPARE_STORES.with(|spares| {
            if let Some(spares) = spares.borrow_mut().as_mut() {
                spares.push(store);
                if spares.len() > SPARE_STORES_KEPT {
                    spares.remove(0);
                }
            }
        });
    }
}
