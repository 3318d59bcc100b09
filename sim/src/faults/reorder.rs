//! Reordering: events about one entity arrive in a different order than they were created.
//!
//! Stripe does not guarantee delivery order; `updated` arrives before `created`, a refund before
//! its payment. This model delays the first delivery of some events by up to twice the emission
//! window, so a later event (a refund, a cancellation, an older update) can overtake the events
//! created before it. The receiver must end in the state the creation order gives, whatever the
//! arrival order.

use super::{Fault, FaultContext, FaultKind, FaultModel, RateSettings, TimerAction, draw_ratio};
use crate::rng::SimRng;
use crate::workload::EventSpec;

pub const KIND: FaultKind = FaultKind::of::<Reorder>();

impl Fault for Reorder {
    const NAME: &'static str = "reorder";
    const DESCRIPTION: &'static str =
        "events about one entity arrive out of creation order (an older update after a newer one)";
    const DETAILS: &'static str =
        "in payments also a refund before its payment";
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

struct Reorder {
    settings: RateSettings,
    rng: SimRng,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> RateSettings {
    RateSettings {
        rate: draw_ratio(rng, &[(1, 4), (1, 2), (1, 1)]),
    }
}

fn build(
    settings: RateSettings,
    rng: SimRng,
    _context: &FaultContext,
) -> Result<Box<dyn FaultModel>, String> {
    Ok(Box::new(Reorder { settings, rng }))
}

impl FaultModel for Reorder {
    fn shape_workload(
        &mut self,
        events: &mut Vec<EventSpec>,
        context: &FaultContext,
        _domain: &dyn crate::domain::Domain,
    ) {
        for event in events.iter_mut() {
            if self.rng.chance(self.settings.rate) {
                event.deliver_at_ms += self.rng.between(0, 2 * context.emit_window_ms);
            }
        }
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}
