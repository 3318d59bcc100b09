//! Twin events: two event ids for one business fact.
//!
//! Stripe says "some actions trigger multiple events" (`checkout.session.completed` and
//! `payment_intent.succeeded` for one payment). Receipts cannot tell twins apart from two real
//! payments; only the business state can. This model gives some payment events a twin: a second
//! payment event, with an id of its own, for the same order and amount.

use super::{
    FaultContext, FaultKind, FaultModel, RateSettings, TimerAction, draw_ratio, from_json, swarm_enabled,
    to_json,
};
use crate::rng::SimRng;
use crate::workload::{EventSpec, Workload};

pub const KIND: FaultKind = FaultKind {
    name: "twin-events",
    description: "one payment produces two events with different ids",
    draw,
    build,
    acts_only_on_faulty_systems: false,
};

struct TwinEvents {
    settings: RateSettings,
    rng: SimRng,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> serde_json::Value {
    to_json(&RateSettings {
        enabled: swarm_enabled(rng),
        rate: draw_ratio(rng, &[(1, 4), (1, 2), (1, 1)]),
    })
}

fn build(
    value: &serde_json::Value,
    rng: SimRng,
    _context: &FaultContext,
) -> Result<Box<dyn FaultModel>, String> {
    Ok(Box::new(TwinEvents {
        settings: from_json(value)?,
        rng,
    }))
}

impl FaultModel for TwinEvents {
    fn name(&self) -> &'static str {
        KIND.name
    }

    fn settings(&self) -> serde_json::Value {
        to_json(&self.settings)
    }

    fn shape_workload(
        &mut self,
        events: &mut Vec<EventSpec>,
        _context: &FaultContext,
        owes_work: &dyn Fn(&EventSpec) -> bool,
    ) {
        if !self.settings.enabled {
            return;
        }
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
