//! What a run starts from: its database, set up by the system (or copied from an image an
//! earlier run of the same set-up left), and its workload as the fault models reshape it before
//! the first step. Nothing here runs a step or draws from a stream a step draws from.

use std::sync::Arc;

use super::Simulation;
use crate::config::SimConfig;
use crate::db::Database;
use crate::faults::ActiveFault;
use crate::system::System;
use crate::workload::Workload;

impl Simulation {
    /// Opens the run's database: a copy of the image kept from an earlier run of the same set-up
    /// when there is one, else a fresh database the system sets up (and whose image is kept).
    pub(super) fn set_up_database(
        system: &Arc<dyn System>,
        config: &SimConfig,
        workload: &Workload,
        observed_tables: &[&'static str],
    ) -> Result<(Database, Vec<crate::db::RowChange>), String> {
        let set_up = |connection: &rusqlite::Connection| system.set_up(connection, &workload.fixtures);
        let two_parts = system.sets_up_in_two_parts();
        let reused = if two_parts {
            Database::reuse_schema(config.backend, observed_tables, system, &workload.fixtures)
        } else {
            Database::reuse(config.backend, observed_tables, &set_up)
        };
        if let Some(reused) = reused {
            return Ok(reused);
        }
        let mut db = Database::create(config.backend, observed_tables)
            .map_err(|error| format!("could not create the database: {error}"))?;
        let failed =
            |error: commitgap::env::DbError| format!("system {} failed to set up: {error}", system.name());
        let schema_snapshot = if two_parts {
            system.set_up_schema(db.setup_connection()).map_err(failed)?;
            let snapshot = db.schema_snapshot().map_err(failed)?;
            system
                .load_fixtures(db.setup_connection(), &workload.fixtures)
                .map_err(failed)?;
            snapshot
        } else {
            set_up(db.setup_connection()).map_err(failed)?;
            None
        };
        let setup_changes = db
            .finish_setup()
            .map_err(|error| format!("system {}: {error}", system.name()))?;
        if let Some(snapshot) = schema_snapshot {
            db.keep_schema_image(system, snapshot)
                .map_err(|error| format!("system {}: {error}", system.name()))?;
        }
        db.allow_reuse();
        Ok((db, setup_changes))
    }

    /// Lets fault models that add events or change their delivery do it once, before the run,
    /// and counts per model how many events it delayed, fanned out or added.
    pub(super) fn shape_workload(
        workload: Workload,
        fault_models: &mut [ActiveFault],
        config: &SimConfig,
        domain: &dyn crate::domain::Domain,
    ) -> (Workload, Vec<(&'static str, u64)>) {
        let context = config.fault_context();
        let Workload {
            fixtures, mut events, ..
        } = workload;
        let mut reshaped = Vec::new();
        for fault in fault_models.iter_mut() {
            // Extra deliveries are counted when they go out; what a model changes here is
            // counted now.
            let before: Vec<(i64, u32)> = events
                .iter()
                .map(|event| (event.deliver_at_ms, event.subscriptions))
                .collect();
            fault.shape_workload(&mut events, &context, domain);
            let changed = before
                .iter()
                .zip(&events)
                .filter(|(before, event)| **before != (event.deliver_at_ms, event.subscriptions))
                .count();
            let added = events.len().saturating_sub(before.len());
            if changed + added > 0 {
                reshaped.push((fault.name(), (changed + added) as u64));
            }
        }
        (Workload::new(fixtures, events), reshaped)
    }
}
