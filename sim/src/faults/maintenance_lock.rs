//! A maintenance job holds SQLite's write lock just as the operator's pass begins.
//!
//! Backups, migrations, `VACUUM` and long reports take SQLite's write lock for seconds at a time,
//! and they run when people run them: often while an operator is repairing the aftermath of an
//! incident. The operator's tool then meets a busy database. Its connection waits its busy
//! timeout (rusqlite's is 5 s) and is told busy; a tool that gives up there leaves every dead
//! obligation dead, and a redelivery the operator makes by hand is answered 503. This model
//! starts such a writer on the operator's process one second before the operator's pass, with a
//! connection of its own, and holds the lock for 6 to 12 s: longer than one busy timeout, shorter
//! than the three tries the reference's tool makes.
//!
//! It acts after heal, where other models must not, because that is the moment it models: the
//! lock is held for a bounded time and then given back, so a system that retries a busy database
//! settles as it would have; only one that gives up at its first busy answer does not. It acts
//! once per run and draws nothing during the run.

use std::rc::Rc;

use commitgap::env::{DbError, Env, LocalBoxFuture};
use serde::{Deserialize, Serialize};

use super::{Fault, FaultContext, FaultKind, FaultModel, TimerAction, check_duration};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind::of::<MaintenanceLock>();

/// How long before the operator's pass the maintenance job takes the lock, so that the lock is
/// held when the operator's first statement runs.
const LEAD_MS: i64 = 1_000;

impl Fault for MaintenanceLock {
    const NAME: &'static str = "maintenance-lock";
    const DESCRIPTION: &'static str =
        "a backup or migration holds the write lock for seconds just as the operator's pass begins";
    const DETAILS: &'static str =
        "6, 9 or 12 s (more than one 5 s busy timeout), from 1 s before the operator requeues or redelivers \
        after heal, on a connection of its own; once per run, so it is the one model that acts after heal";
    type Settings = Settings;

    fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
        draw(rng, context)
    }

    fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
        build(settings, rng, context)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    hold_ms: i64,
}

struct MaintenanceLock {
    settings: Settings,
    healed: bool,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> Settings {
    Settings {
        hold_ms: *rng.pick(&[6_000, 9_000, 12_000]),
    }
}

fn build(settings: Settings, _rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check_duration("hold_ms", settings.hold_ms, 1)?;
    Ok(Box::new(MaintenanceLock {
        settings,
        healed: false,
    }))
}

impl FaultModel for MaintenanceLock {
    fn on_timer(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        vec![TimerAction::HoldWriteLock {
            hold_ms: self.settings.hold_ms,
        }]
    }

    fn heal(&mut self, now_ms: i64) -> Vec<TimerAction> {
        if self.healed {
            return Vec::new();
        }
        self.healed = true;
        vec![TimerAction::WakeAt {
            at_ms: now_ms + super::OPERATOR_DELAY_MS - LEAD_MS,
        }]
    }
}

/// The writer's task: takes the write lock with `BEGIN IMMEDIATE` (waiting its turn behind
/// another writer, as any connection does), tells `on_begin` how that went, holds the lock for
/// `hold_ms` of virtual time and commits.
pub(crate) fn hold_write_lock(
    env: Rc<dyn Env>,
    hold_ms: i64,
    on_begin: impl FnOnce(&Result<usize, DbError>) + 'static,
) -> LocalBoxFuture<'static, ()> {
    Box::pin(async move {
        let began = env.execute("BEGIN IMMEDIATE", &[]).await;
        on_begin(&began);
        if began.is_ok() {
            env.sleep_ms(hold_ms).await;
            if let Err(error) = env.execute("COMMIT", &[]).await {
                env.log(&format!("lock holder's COMMIT failed: {error}"));
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_is_taken_once_a_second_before_the_operators_pass() {
        let mut model = MaintenanceLock {
            settings: Settings { hold_ms: 9_000 },
            healed: false,
        };
        let heal_ms = 3_600_000;
        assert_eq!(
            model.heal(heal_ms),
            vec![TimerAction::WakeAt {
                at_ms: heal_ms + super::super::OPERATOR_DELAY_MS - 1_000
            }]
        );
        assert_eq!(model.heal(heal_ms), Vec::new(), "once per run");
        assert_eq!(
            model.on_timer(heal_ms + 59_000),
            vec![TimerAction::HoldWriteLock { hold_ms: 9_000 }]
        );
    }
}
