//! Twin events: two event ids for one business fact.
//!
//! Stripe says "some actions trigger multiple events" (`checkout.session.completed` and
//! `payment_intent.succeeded` for one payment). Receipts cannot tell twins apart from two real
//! facts; only the business state can. This model gives some events a twin, as their domain
//! makes it ([`crate::domain::Domain::twin`]; payments: a second payment event for the same
//! order and amount), with an id of its own, created and first delivered 0 to 1,000 ms after
//! the original, as a second event object is (Stripe's two events for one payment carry
//! creation times of their own). A twin may so come after a later event about the same entity.
//! It makes up nothing the domain did not say its sender sends.

use super::{Fault, FaultContext, FaultKind, FaultModel, RateSettings, TimerAction, draw_ratio};
use crate::rng::SimRng;
use crate::workload::{EventSpec, Workload};

pub const KIND: FaultKind = FaultKind::of::<TwinEvents>();

impl Fault for TwinEvents {
    const NAME: &'static str = "twin-events";
    const DESCRIPTION: &'static str =
        "one fact is reported by two events with different ids, as the domain says its sender does";
    const DETAILS: &'static str =
        "the domain makes the twin (`Domain::twin`; payments: a second payment event); it is created and \
        first delivered 0–1,000 ms after the original, so it may follow a later event about the same \
        entity";
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

struct TwinEvents {
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
    Ok(Box::new(TwinEvents { settings, rng }))
}

impl FaultModel for TwinEvents {
    fn shape_workload(
        &mut self,
        events: &mut Vec<EventSpec>,
        _context: &FaultContext,
        domain: &dyn crate::domain::Domain,
    ) {
        let twins: Vec<(usize, EventSpec)> = (0..events.len())
            .filter_map(|index| Some((index, domain.twin(&events[index])?)))
            .collect();
        for (index, mut twin) in twins {
            if !self.rng.chance(self.settings.rate) {
                continue;
            }
            twin.event_id = Workload::next_event_id(events, &twin.account);
            let delay_ms = self.rng.between(0, 1_000);
            twin.created_ms = events[index].created_ms + delay_ms;
            twin.deliver_at_ms = events[index].deliver_at_ms + delay_ms;
            twin.extra_deliveries.clear();
            events.push(twin);
        }
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}
