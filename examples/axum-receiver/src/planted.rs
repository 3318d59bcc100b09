//! The planted bug: a mistake a real relay could ship, switched on by `PLANTED_BUG=<name>`, so
//! that a check of this service can be shown to catch it.
//!
//! `fresh-key-per-attempt`: the relay sends every attempt of a fulfillment under a new
//! Idempotency-Key (the request's key with the attempt's lease token after it) instead of the
//! persisted one. The provider can then no longer tell a retry from a new order: a request whose
//! answer was lost or late is performed again on the retry, and the order ships twice. No
//! database row shows it; the provider's ledger does (two shipments for one operation).
//!
//! This module must not change anything unless the variable names the bug, and must refuse a
//! name it does not know, so that a misspelt bug is not a silently correct run.

/// The bugs this service can plant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedBug {
    /// Each attempt is sent under a new idempotency key.
    FreshKeyPerAttempt,
}

impl PlantedBug {
    /// The bug `PLANTED_BUG` names, if it names one; an error for a name it does not know.
    pub fn from_environment() -> Result<Option<PlantedBug>, String> {
        match std::env::var("PLANTED_BUG") {
            Err(_) => Ok(None),
            Ok(name) if name.trim().is_empty() => Ok(None),
            Ok(name) if name == "fresh-key-per-attempt" => Ok(Some(PlantedBug::FreshKeyPerAttempt)),
            Ok(name) => Err(format!(
                "PLANTED_BUG={name:?} is not a bug this service plants; the one it knows is fresh-key-per-attempt"
            )),
        }
    }
}
