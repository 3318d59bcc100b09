//! Twin events: two event ids for one business fact.
//!
//! Stripe says "some actions trigger multiple events" (`checkout.session.completed` and
//! `payment_intent.succeeded` for one payment). Receipts cannot tell twins apart from two real
//! payments; only the business state can. This model gives some payment events a twin: a second
//! payment event, with an id of its own, for the same order and amount.

use super::{Fault, FaultContext, FaultKind, FaultModel, RateSettings, TimerAction, draw_ratio};
use crate::rng::SimRng;
use crate::workload::{EventSpec, Workload};

pub const KIND: FaultKind = FaultKind::of::<TwinEvents>();

impl Fault for TwinEvents {
    const NAME: &'static str = "twin-events";
    const DESCRIPTION: &'static str = "one payment produces two events with different ids";
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
        owes_work: &dyn Fn(&EventSpec) -> bool,
    ) {
        let payments: Vec<usize> = (0..events.len())
            .filter(|&index| owes_work(&events[index]))
            .collect();
        for index in payments {
            if !self.rng.chance(self.settings.rate) {
                continue;
            }
            let mut twin = events[index].clone();
            twin.event_id = Workload::next_event_id(events, &twin.account);
            let delay_ms = self.rng.between(0, 1_000);
            twin.created_ms += delay_ms;
            twin.deliver_at_ms += delay_ms;
            twin.extra_deliveries.clear();
            events.push(twin);
        }
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        Vec::new()
    }
}
