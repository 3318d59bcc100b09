//! Provider key expiry: the provider forgets an idempotency key some time after its lifetime.
//!
//! Stripe may prune keys "after they're at least 24 hours old" and treats a reused pruned key as
//! a new request; Qonto keeps keys 30 minutes, TrueLayer 6 hours. This model gives every stored
//! key a forget time of at least the documented lifetime plus a random delay, never earlier, so a
//! relay that honours the lifetime stays safe and one that does not is caught.
//!
//! Unlike the other models it keeps working after heal: key expiry is the provider's contract,
//! not a transient failure, and the retries it endangers typically happen right after an outage
//! heals.

use serde::{Deserialize, Serialize};

use super::{Fault, FaultContext, FaultKind, FaultModel, TimerAction, check_duration};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind::of::<KeyExpiry>();

impl Fault for KeyExpiry {
    const NAME: &'static str = "key-expiry";
    const DESCRIPTION: &'static str =
        "the provider forgets idempotency keys once they are older than its key lifetime";
    const DETAILS: &'static str =
        "at its lifetime plus up to one more lifetime, never earlier";
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
    /// The forget time is the lifetime plus up to this much.
    extra_delay_ms_max: i64,
}

struct KeyExpiry {
    settings: Settings,
    rng: SimRng,
}

fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
    let extra_delay_ms_max = *rng.pick(&[0, context.key_lifetime_ms / 10, context.key_lifetime_ms]);
    Settings { extra_delay_ms_max }
}

fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check_duration("extra_delay_ms_max", settings.extra_delay_ms_max, 0)?;
    Ok(Box::new(KeyExpiry { settings, rng }))
}

impl FaultModel for KeyExpiry {
    fn key_forget_at(&mut self, stored_at_ms: i64, key_lifetime_ms: i64) -> Option<i64> {
        Some(stored_at_ms + key_lifetime_ms + self.rng.between(0, self.settings.extra_delay_ms_max))
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}
