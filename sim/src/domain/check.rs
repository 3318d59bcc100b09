//! A domain's own consistency, checked before any system runs: the properties every correct
//! receiver relies on the domain to keep, so that a sweep never blames a system for a domain's
//! mistake.
//!
//! Each property is checked on workloads the domain draws for seeds and sizes like a sweep's
//! (with proptest, which shrinks a failure towards the smallest workload that shows it):
//! - `draws-deterministically`: one seed draws the same fixtures and events every time, and the
//!   model of one workload is the same every time (operation keys included);
//! - `events-are-well-formed`: ids are non-empty and unique within their account, creation times
//!   are not before the run, bodies are JSON objects written the same every time, and an event
//!   the fixtures do not know is one the domain refuses;
//! - `model-ignores-arrival`: the model depends on creation order alone, so moving the events'
//!   delivery times around leaves it unchanged (a receiver sees arrival order; the model must
//!   not);
//! - `owed-payloads-name-their-operation`: the provider reads every payload the model allows as
//!   the operation it is owed under ([`Domain::operation_of`]), since effects are counted by it;
//! - `creation-order-path-is-allowed`: a receiver that gets every event in creation order walks
//!   the states the model gives after each of them, and [`Domain::may_become`] allows each step
//!   (otherwise `state-moves-along-allowed-transitions` would fail a correct system);
//! - `hostile-bodies-differ`: the bodies the attacker asks the domain for differ from the genuine
//!   one, and an unknown type is none the domain's own events have.
//!
//! It runs the domain's code only, never a system, and decides nothing from the clock.

use std::collections::{BTreeMap, BTreeSet};

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

use super::{Domain, EntityState, draw_workload};
use crate::rng::Ratio;
use crate::shape::WorkloadSettings;
use crate::workload::{EventSpec, Workload};

/// A minute of virtual time, in milliseconds.
const MINUTE_MS: i64 = 60_000;

/// How many drawn workloads [`check_domain`] checks by default: a second or so for a domain of
/// a few hundred lines.
pub const DEFAULT_CASES: u32 = 64;

/// The properties [`check_domain`] checks, by name, in the order it checks them.
pub const PROPERTIES: [&str; 6] = [
    "draws-deterministically",
    "events-are-well-formed",
    "model-ignores-arrival",
    "owed-payloads-name-their-operation",
    "creation-order-path-is-allowed",
    "hostile-bodies-differ",
];

/// Checks `domain`'s consistency ([`PROPERTIES`], see the module documentation) on
/// [`DEFAULT_CASES`] drawn workloads. `Err` names the property, the seed and configuration that
/// break it (shrunk), and what was wrong, in one line.
pub fn check_domain(domain: &dyn Domain) -> Result<(), String> {
    check_domain_with(domain, DEFAULT_CASES)
}

/// [`check_domain`] on `cases` drawn workloads.
pub fn check_domain_with(domain: &dyn Domain, cases: u32) -> Result<(), String> {
    let config = Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    };
    // Deterministic: the same domain is checked on the same workloads every time.
    let mut runner = TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    // Sizes and shares as a sweep draws them (1 to 3 tenants of 1 to 4 subjects, a window of a
    // minute or ten), a little wider, so a shrunk failure is as small as it can be.
    let updates = proptest::option::of((0_u32..=3).prop_map(|most| (0, most)));
    let cases = (
        0_u64..1_000_000,
        (1_u32..=4, 1_u32..=6),
        proptest::sample::select(vec![MINUTE_MS, 10 * MINUTE_MS]),
        updates,
        proptest::bool::ANY,
    )
        .prop_map(
            |(seed, (tenants, subjects), emit_window_ms, updates, edge_values)| {
                let settings = WorkloadSettings {
                    tenants,
                    subjects_per_tenant: subjects,
                    emit_window_ms,
                    completed_subjects: Ratio::new(4, 5),
                    updates_per_subject: updates,
                    racing_subjects: Ratio::new(1, 4),
                    edge_values,
                };
                (seed, settings)
            },
        );
    match runner.run(&cases, |(seed, settings)| check_case(domain, seed, &settings)) {
        Ok(()) => Ok(()),
        Err(TestError::Fail(why, (seed, settings))) => Err(format!(
            "domain {} breaks {why} (seed {seed}, {} tenants x {} subjects{})",
            domain.name(),
            settings.tenants,
            settings.subjects_per_tenant,
            if settings.edge_values { ", edge values" } else { "" }
        )),
        Err(TestError::Abort(why)) => Err(format!("domain {}: the check stopped: {why}", domain.name())),
    }
}

/// Every property on the workload `domain` draws for `seed` with `settings`.
fn check_case(domain: &dyn Domain, seed: u64, settings: &WorkloadSettings) -> Result<(), TestCaseError> {
    let fail = |property: &str, why: String| TestCaseError::fail(format!("{property}: {why}"));
    let workload = draw_workload(domain, seed, settings);
    draws_deterministically(domain, seed, settings, &workload).map_err(|why| fail(PROPERTIES[0], why))?;
    events_are_well_formed(domain, &workload).map_err(|why| fail(PROPERTIES[1], why))?;
    model_ignores_arrival(domain, &workload).map_err(|why| fail(PROPERTIES[2], why))?;
    owed_payloads_name_their_operation(domain, &workload).map_err(|why| fail(PROPERTIES[3], why))?;
    creation_order_path_is_allowed(domain, &workload).map_err(|why| fail(PROPERTIES[4], why))?;
    hostile_bodies_differ(domain, &workload).map_err(|why| fail(PROPERTIES[5], why))
}

fn draws_deterministically(
    domain: &dyn Domain,
    seed: u64,
    settings: &WorkloadSettings,
    workload: &Workload,
) -> Result<(), String> {
    if draw_workload(domain, seed, settings) != *workload {
        return Err("a second draw of the same seed gave another workload".to_owned());
    }
    if domain.model(workload) != domain.model(workload) {
        return Err("a second model of the same workload differs".to_owned());
    }
    Ok(())
}

fn events_are_well_formed(domain: &dyn Domain, workload: &Workload) -> Result<(), String> {
    let mut ids = BTreeSet::new();
    for event in &workload.events {
        let name = format!("event ({}, {:?})", event.account, event.event_id);
        if event.event_id.is_empty() {
            return Err(format!("an event of account {} has no id", event.account));
        }
        if !ids.insert((&event.account, &event.event_id)) {
            return Err(format!("{name} is drawn twice"));
        }
        if !(0..=crate::limits::DURATION_MS_MAX).contains(&event.created_ms) {
            return Err(format!(
                "{name} is created at {} ms, before the run or more than a year into it",
                event.created_ms
            ));
        }
        let body = domain.body(event);
        if !serde_json::from_str::<serde_json::Value>(&body).is_ok_and(|json| json.is_object()) {
            return Err(format!("{name}'s body is not a JSON object: {body}"));
        }
        if domain.body(event) != body {
            return Err(format!("{name}'s body differs from one writing to the next"));
        }
        if !workload.knows(&event.account, &event.tenant, &event.subject)
            && domain.refusal(workload, event).is_none()
        {
            return Err(format!(
                "{name} is about {}/{}, which the fixtures do not hold, yet the domain does not refuse it",
                event.tenant, event.subject
            ));
        }
    }
    Ok(())
}

fn model_ignores_arrival(domain: &dyn Domain, workload: &Workload) -> Result<(), String> {
    if workload.events.len() < 2 {
        return Ok(());
    }
    // Every event is delivered when another one was: the arrival order turned around.
    let mut events = workload.events.clone();
    let times: Vec<i64> = events.iter().rev().map(|event| event.deliver_at_ms).collect();
    for (event, deliver_at_ms) in events.iter_mut().zip(times) {
        event.deliver_at_ms = deliver_at_ms;
    }
    let arrived_otherwise = Workload::new(workload.fixtures.clone(), events);
    if domain.model(&arrived_otherwise) != domain.model(workload) {
        return Err("the model changed when the events arrived in another order".to_owned());
    }
    Ok(())
}

fn owed_payloads_name_their_operation(domain: &dyn Domain, workload: &Workload) -> Result<(), String> {
    for (key, owed) in &domain.model(workload).owed {
        for payload in &owed.payloads {
            match domain.operation_of(payload) {
                Ok(operation) if operation == *key => {}
                Ok(operation) => {
                    return Err(format!(
                        "a payload owed under {key} reads as operation {operation}: {payload}"
                    ));
                }
                Err(why) => {
                    return Err(format!(
                        "a payload owed under {key} does not read as an operation ({why}): {payload}"
                    ));
                }
            }
        }
    }
    Ok(())
}

fn creation_order_path_is_allowed(domain: &dyn Domain, workload: &Workload) -> Result<(), String> {
    let mut stories: BTreeMap<(&str, &str), Vec<&EventSpec>> = BTreeMap::new();
    for event in &workload.events {
        if workload.knows(&event.account, &event.tenant, &event.subject) {
            stories
                .entry((event.tenant.as_str(), event.subject.as_str()))
                .or_default()
                .push(event);
        }
    }
    for ((tenant, subject), story) in stories {
        let key = (tenant.to_owned(), subject.to_owned());
        let states_after = |events: usize| -> BTreeSet<EntityState> {
            let prefix = story[..events].iter().map(|event| (*event).clone()).collect();
            let model = domain.model(&Workload::new(workload.fixtures.clone(), prefix));
            model.final_states.get(&key).cloned().unwrap_or_default()
        };
        let mut before = states_after(0);
        // Every state the entity may have been in so far: where racing events arrived in
        // another order, a state of the next set may come from an earlier one than the last.
        let mut earlier = before.clone();
        for events in 1..=story.len() {
            let after = states_after(events);
            let allowed = |from: &EntityState, to: &EntityState| from == to || domain.may_become(from, to);
            let reached = after
                .iter()
                .all(|to| earlier.iter().any(|from| allowed(from, to)));
            let left = before.iter().all(|from| after.iter().any(|to| allowed(from, to)));
            earlier.extend(after.iter().cloned());
            if !(reached && left) {
                return Err(format!(
                    "after event {:?} the model moves {tenant}/{subject} from {} to {}, which may_become does not allow",
                    story[events - 1].event_id,
                    states(&before),
                    states(&after)
                ));
            }
            before = after;
        }
    }
    Ok(())
}

/// States as a reader reads them: `paid amount_cents=100 | refunded amount_cents=100`.
fn states(states: &BTreeSet<EntityState>) -> String {
    let names: Vec<String> = states.iter().map(ToString::to_string).collect();
    if names.is_empty() {
        "no state".to_owned()
    } else {
        names.join(" | ")
    }
}

fn hostile_bodies_differ(domain: &dyn Domain, workload: &Workload) -> Result<(), String> {
    let Some(event) = workload.events.first() else {
        return Ok(());
    };
    let body: serde_json::Value = serde_json::from_str(&domain.body(event)).unwrap_or_default();
    if domain.tampered_body(&body) == body {
        return Err("tampered_body returns the genuine body unchanged".to_owned());
    }
    for rule in 0..8 {
        if domain.invalid_body(&body, rule) == body {
            return Err(format!(
                "invalid_body with rule {rule} returns the genuine body unchanged"
            ));
        }
    }
    if domain.cross_account_body(&body, "acct-elsewhere") == Some(body.clone()) {
        return Err("cross_account_body returns the genuine body unchanged".to_owned());
    }
    if let Some(unknown) = domain.unknown_type_body(&body) {
        let real: BTreeSet<String> = workload
            .events
            .iter()
            .map(|event| domain.event_type(event))
            .collect();
        let unknown_type = unknown.get("type").and_then(serde_json::Value::as_str);
        if unknown == body || unknown_type.is_some_and(|kind| real.contains(kind)) {
            return Err(format!(
                "unknown_type_body makes an event of a type the domain's own events have ({})",
                unknown_type.unwrap_or("the genuine body")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::payments::Payments;

    #[test]
    fn the_payments_domain_keeps_every_property() {
        assert_eq!(check_domain(&Payments), Ok(()));
    }

    /// Payments with one mistake a domain's author could make, to see each property fail.
    struct Broken(&'static str);

    impl Domain for Broken {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            "payments with one mistake"
        }
        fn rules(&self) -> Vec<String> {
            Payments.rules()
        }
        fn draw(
            &self,
            seed: u64,
            settings: &WorkloadSettings,
        ) -> (crate::workload::Fixtures, Vec<EventSpec>) {
            Payments.draw(seed, settings)
        }
        fn event_type(&self, event: &EventSpec) -> String {
            Payments.event_type(event)
        }
        fn model(&self, workload: &Workload) -> crate::domain::Model {
            let mut model = Payments.model(workload);
            if self.0 == "arrival-decides" {
                // The amount of whatever is delivered last, as a receiver that trusts arrival
                // would compute it.
                if let Some(last) = workload.events.iter().max_by_key(|event| event.deliver_at_ms) {
                    for states in model.final_states.values_mut() {
                        *states = states
                            .iter()
                            .map(|state| state.clone().with("last", &last.event_id))
                            .collect();
                    }
                }
            }
            model
        }
        fn may_become(&self, before: &EntityState, after: &EntityState) -> bool {
            // Forgets that a paid order may be refunded.
            if self.0 == "refund-forbidden" && after.state == "refunded" && before.state == "paid" {
                return false;
            }
            Payments.may_become(before, after)
        }
        fn refusal(&self, workload: &Workload, event: &EventSpec) -> Option<crate::domain::Refusal> {
            Payments.refusal(workload, event)
        }
        fn operation_of(&self, payload: &str) -> Result<String, String> {
            let operation = Payments.operation_of(payload)?;
            Ok(if self.0 == "key-of-another-shape" {
                operation.replace("/fulfill/", "/ship/")
            } else {
                operation
            })
        }
        fn unknown_type_body(&self, event: &serde_json::Value) -> Option<serde_json::Value> {
            let mut event = Payments.unknown_type_body(event)?;
            if self.0 == "unknown-type-is-real" {
                event["type"] = commitgap::receiver::PAYMENT_SUCCEEDED.into();
            }
            Some(event)
        }
    }

    #[test]
    fn each_mistake_is_named_with_its_property_and_a_seed() {
        for (mistake, property) in [
            ("arrival-decides", "model-ignores-arrival"),
            ("key-of-another-shape", "owed-payloads-name-their-operation"),
            ("refund-forbidden", "creation-order-path-is-allowed"),
            ("unknown-type-is-real", "hostile-bodies-differ"),
        ] {
            let error = check_domain_with(&Broken(mistake), 32).unwrap_err();
            assert!(
                error.starts_with(&format!("domain {mistake} breaks {property}: ")),
                "{error}"
            );
            assert!(error.contains("(seed "), "{error}");
            assert!(!error.contains('\n'), "{error}");
        }
    }
}
