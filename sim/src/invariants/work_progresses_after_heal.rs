//! After heal, the work left makes progress: no owed obligation waits longer than the system's own
//! waits allow, nor is taken up again and again without being settled.
//!
//! A system that will never finish (a relay that retries a rejected request forever, a claim that
//! never matches a requeued row) would otherwise run to the liveness bound and end "did not
//! settle", thousands of steps long and never shrunk. The world watches the obligations owed after
//! heal (see `world::progress`) and, once one is stuck, this invariant fails at that step with what
//! is stuck and the pattern that repeats; the run is then as short as the stuck work allows, and
//! shrinks like any other failure. Only a run still making progress at its bound stays unsettled.

use super::{Invariant, InvariantKind, Layer, Observation};

/// The invariant that, after heal, owed work keeps making progress (see the module documentation).
#[derive(Debug)]
pub struct WorkProgressesAfterHeal;

/// The invariant's name, which the liveness phase looks for.
pub const NAME: &str = "work-progresses-after-heal";

impl Invariant for WorkProgressesAfterHeal {
    fn name(&self) -> &'static str {
        NAME
    }

    fn description(&self) -> &'static str {
        "after heal, no owed obligation waits longer than the relay's own waits allow, nor is taken up again and again for longer than a key's lifetime"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Liveness
    }

    // What is stuck is found by the simulated world watching owed work step by step
    // (`History::stuck`); a check over real processes has no such watch, and its own bound on
    // waiting for quiet is its verdict on progress.
    fn judges_final_state(&self) -> bool {
        false
    }

    fn layer(&self) -> Layer {
        Layer::Pattern
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        match &observation.history.stuck {
            Some(diagnosis) => Err(diagnosis.clone()),
            None => Ok(()),
        }
    }
}
