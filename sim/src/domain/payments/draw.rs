//! How the payments domain draws a run's orders and events from its seed.
//!
//! Per order a story (paid; paid then refunded; cancelled; or left unpaid), sometimes amount
//! updates, sometimes a race, sometimes an event for an order that does not exist, and in some
//! seeds values at the receiver's limits. Every draw comes from a stream of the seed, in the order
//! the seed files of earlier versions were drawn in, so they replay unchanged.

use super::{AMOUNT, CANCEL, PAYMENT, REFUND, UPDATE};
use crate::domain::WorkloadSettings;
use crate::rng::{Ratio, SimRng};
use crate::workload::{EventSpec, Workload};
use crate::workload::{Fixtures, SubjectFixture};

/// Draws the fixtures and events of `seed` for `config`. Event ids count per account, so
/// accounts share id strings.
pub(super) fn draw(seed: u64, config: &WorkloadSettings) -> (Fixtures, Vec<EventSpec>) {
    let mut rng = SimRng::stream(seed, "workload");
    let mut updates_rng = SimRng::stream(seed, "workload/updates");
    let window_ms = config.emit_window_ms;
    let mut accounts = Vec::new();
    let mut orders = Vec::new();
    let mut events = Vec::new();
    for tenant_index in 0..config.tenants {
        let letter = char::from(b'a' + tenant_index as u8);
        let tenant = format!("tenant-{letter}");
        let account = format!("acct-{letter}");
        accounts.push((account.clone(), tenant.clone()));
        for order_index in 1..=config.subjects_per_tenant {
            let order = format!("order-{order_index}");
            let amount_cents = rng.between(100, 100_000);
            orders.push(SubjectFixture::new(&tenant, &order).with(AMOUNT, amount_cents));
            let new_event =
                |kind: &str, created_ms| EventSpec::new(&account, &tenant, &order, kind, created_ms);
            let paid_at_ms = rng.between(0, window_ms - 1);
            let story = rng.below(20);
            if rng.chance(config.completed_subjects) && story < 14 {
                events.push(new_event(PAYMENT, paid_at_ms).with(AMOUNT, amount_cents));
                if story >= 11 {
                    events.push(new_event(
                        REFUND,
                        rng.between(paid_at_ms + 1, paid_at_ms + window_ms),
                    ));
                }
            } else if story < 17 {
                events.push(new_event(CANCEL, paid_at_ms));
            }
            let mut updates = Vec::new();
            if rng.chance(Ratio::new(1, 4)) {
                // Updates get distinct creation times, so "newest wins" is well defined.
                let first_ms = rng.between(0, window_ms - 1);
                updates.push(new_event(UPDATE, first_ms).with(AMOUNT, rng.between(100, 100_000)));
                if rng.chance(Ratio::new(1, 2)) {
                    let second_ms = first_ms + rng.between(1, window_ms);
                    updates.push(new_event(UPDATE, second_ms).with(AMOUNT, rng.between(100, 100_000)));
                }
            }
            if let Some((min, max)) = config.updates_per_subject {
                // The usual draws above are still made, so every other event of the workload
                // is what it would have been; only the updates come from their own stream.
                updates.clear();
                let count = updates_rng.between(i64::from(min), i64::from(max));
                let mut created_ms = updates_rng.between(0, window_ms - 1);
                for _ in 0..count {
                    let amount_cents = updates_rng.between(100, 100_000);
                    updates.push(new_event(UPDATE, created_ms).with(AMOUNT, amount_cents));
                    created_ms += updates_rng.between(1, window_ms);
                }
            }
            events.extend(updates);
        }
    }
    events.extend(draw_missing_order_event(&mut rng, &accounts, window_ms));
    let races = draw_races(seed, config, &orders, &events);
    events.extend(races);
    events.sort_by_key(|event| event.created_ms);
    Workload::number_events(&mut events);
    if config.edge_values {
        put_values_at_the_edges(seed, &mut orders, &mut events);
    }
    (
        Fixtures {
            accounts,
            subjects: orders,
        },
        events,
    )
}

/// In one seed in four, a payment for an order that does not exist, which a receiver must
/// refuse without committing anything.
fn draw_missing_order_event(
    rng: &mut SimRng,
    accounts: &[(String, String)],
    window_ms: i64,
) -> Option<EventSpec> {
    if !rng.chance(Ratio::new(1, 4)) {
        return None;
    }
    let (account, tenant) = accounts[rng.below(accounts.len() as u64) as usize].clone();
    let created_ms = rng.between(0, window_ms - 1);
    Some(EventSpec::new(&account, &tenant, "order-missing", PAYMENT, created_ms).with(AMOUNT, 500))
}

/// Moves values to the receiver's limits, each just inside (see `SimConfig::edge_values`): one
/// order's name to exactly `NAME_CHARS_MAX` characters, the first update's amount to
/// `AMOUNT_CENTS_MAX`, and the first event's creation time to 0 (unless it is an update).
/// `events` are in creation order.
fn put_values_at_the_edges(seed: u64, orders: &mut [SubjectFixture], events: &mut [EventSpec]) {
    use commitgap::receiver::{AMOUNT_CENTS_MAX, NAME_CHARS_MAX};
    let mut rng = SimRng::stream(seed, "workload/edges");
    if !orders.is_empty() {
        let fixture = &mut orders[rng.below(orders.len() as u64) as usize];
        let mut longest = format!("{}-", fixture.subject);
        let padding = NAME_CHARS_MAX.saturating_sub(longest.len());
        longest.extend(std::iter::repeat_n('x', padding));
        for event in events.iter_mut() {
            if event.tenant == fixture.tenant && event.subject == fixture.subject {
                event.subject.clone_from(&longest);
            }
        }
        fixture.subject = longest;
    }
    if let Some(update) = events.iter_mut().find(|event| event.kind == UPDATE) {
        update.fields.insert(AMOUNT.to_owned(), AMOUNT_CENTS_MAX.into());
    }
    // Not an update: an order's amount is versioned from time 0, so an update created then
    // would be as old as the amount it replaces.
    if let Some(first) = events.first_mut().filter(|event| event.kind != UPDATE) {
        first.created_ms = 0;
        first.deliver_at_ms = 0;
    }
}

/// For a share of the orders (`config.racing_subjects`), an event that races with the order's
/// story: a cancellation of a paid order, or a refund of a cancelled one, created at any time
/// in the window, so it may be created (and arrive) before or after the event it races with.
/// A correct receiver lets whichever arrives first decide; the other makes no transition.
fn draw_races(
    seed: u64,
    config: &WorkloadSettings,
    orders: &[SubjectFixture],
    events: &[EventSpec],
) -> Vec<EventSpec> {
    if config.racing_subjects.numerator == 0 {
        return Vec::new();
    }
    let mut rng = SimRng::stream(seed, "workload/races");
    let mut races = Vec::new();
    for order in orders {
        if !rng.chance(config.racing_subjects) {
            continue;
        }
        let story: Vec<&EventSpec> = events
            .iter()
            .filter(|event| event.tenant == order.tenant && event.subject == order.subject)
            .collect();
        let Some(event) = story.first() else {
            continue;
        };
        let kinds: Vec<&str> = story.iter().map(|event| event.kind.as_str()).collect();
        let kind = if kinds.contains(&REFUND) {
            continue;
        } else if kinds.contains(&PAYMENT) {
            CANCEL
        } else if kinds.contains(&CANCEL) {
            REFUND
        } else {
            continue;
        };
        let created_ms = rng.between(0, config.emit_window_ms - 1);
        races.push(EventSpec::new(
            &event.account,
            &event.tenant,
            &event.subject,
            kind,
            created_ms,
        ));
    }
    races
}

/// The amount fields of `events` by kind: only payments and updates carry one on the wire.
pub(super) fn carries_amount(kind: &str) -> bool {
    kind == PAYMENT || kind == UPDATE
}
