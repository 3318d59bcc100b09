//! Request lost on the way in: the delivery never reaches the receiver.
//!
//! A dropped connection, a load balancer that sheds the request, a proxy restart: the receiver
//! never sees the attempt and the sender waits out its timeout before retrying. Nothing is
//! committed, so only the sender's retry schedule stands between the event and its loss.

use super::{Fault, FaultContext, FaultKind, FaultModel, RateSettings, TimerAction, draw_ratio};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind::of::<RequestLost>();

impl Fault for RequestLost {
    const NAME: &'static str = "request-lost";
    const DESCRIPTION: &'static str =
        "a delivery is lost before it reaches the receiver; the sender times out";
    type Settings = RateSettings;

    fn draw(rng: &mut SimRng, context: &FaultContext) -> RateSettings {
        draw(rng, context)
    }

    fn build(
        settings: RateSettings,
        rng: SimRng,
        context: &FaultContext,
    ) -> Result<Box<dyn FaultModel>, String> {
        build(settings, rng, context)
    }
}

struct RequestLost {
    settings: RateSettings,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> RateSettings {
    RateSettings {
        rate: draw_ratio(rng, &[(1, 20), (1, 5), (1, 2)]),
    }
}

fn build(
    settings: RateSettings,
    rng: SimRng,
    _context: &FaultContext,
) -> Result<Box<dyn FaultModel>, String> {
    Ok(Box::new(RequestLost {
        settings,
        rng,
        healed: false,
    }))
}

impl FaultModel for RequestLost {
    fn drops_request(&mut self, _now_ms: i64) -> bool {
        !self.healed && self.rng.chance(self.settings.rate)
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
