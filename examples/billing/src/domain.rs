//! The subscription-billing domain: what the billing provider's webhooks mean, what a subscription
//! must end in, and which operations the provisioning API is owed.
//!
//! A SaaS bills each customer (a tenant, whose billing-provider account is the sender account
//! `acct-a`, `acct-b`, ...) for subscriptions (`sub-1`, `sub-2`, ...). The provider reports four
//! kinds of event:
//!
//! - `customer.subscription.updated`: a new plan version (an integer the provider numbers in
//!   creation order, so it only grows) with its number of seats;
//! - `invoice.payment_failed` and `invoice.paid`: the subscription's invoice failed or was paid;
//! - `customer.subscription.deleted`: the subscription is canceled, for good.
//!
//! Everything is decided by creation order, never by arrival: the highest plan version reported
//! (the newest) decides the seats; the newest billing event by creation time decides between
//! `active` and `past_due` (at equal times, the payment); a deletion makes the subscription
//! `canceled` whatever arrives before or after it. Each plan version reported owes one `set-seats`
//! operation (a late one too: the provisioning API orders them by the version in the payload), an
//! `invoice.payment_failed` followed in creation order by an `invoice.paid` owes one
//! `restore-access`, and a deletion owes one `deprovision`, each keyed by the business operation.
//!
//! This module is the simulator's ground truth for the receiver in `crate::business`: it must
//! not share that receiver's logic (its model is written over the whole story, the receiver folds
//! one event at a time, so each checks the other), must draw only from the seed's streams, and
//! must not look at any database. Only the operation keys and payloads are shared, since the
//! provider reads the receiver's payloads with [`Domain::operation_of`] here.

use std::collections::BTreeSet;

use commitgap_sim::commitgap::receiver::NAME_CHARS_MAX;
use commitgap_sim::domain::{
    Domain, DomainSituation, DomainWords, EntityState, Model, Owed, Owing, Refusal, SimRng, WorkloadSettings,
};
use commitgap_sim::domain::{EventSpec, Workload};
use commitgap_sim::rng::Ratio;
use commitgap_sim::serde_json::{self, Value as Json};
use commitgap_sim::system::{Fixtures, SubjectFixture};

/// Event kinds, as `EventSpec::kind` holds them; [`wire_type`] gives the provider's names.
pub const UPDATED: &str = "updated";
/// An invoice of the subscription failed to be paid.
pub const PAYMENT_FAILED: &str = "payment_failed";
/// An invoice of the subscription was paid.
pub const PAID: &str = "paid";
/// The subscription was deleted at the provider.
pub const DELETED: &str = "deleted";

/// The states a subscription is judged on.
pub const ACTIVE: &str = "active";
/// An invoice failed and no later payment has been reported.
pub const PAST_DUE: &str = "past_due";
/// Deleted at the provider; final.
pub const CANCELED: &str = "canceled";

/// The most seats a plan may carry; the receiver refuses more.
pub const SEATS_MAX: i64 = 1_000_000;
/// The highest plan version the receiver takes.
pub const PLAN_VERSION_MAX: i64 = 1_000_000_000;

/// The provider's `type` for an event kind.
pub fn wire_type(kind: &str) -> &'static str {
    match kind {
        UPDATED => "customer.subscription.updated",
        PAYMENT_FAILED => "invoice.payment_failed",
        PAID => "invoice.paid",
        // Only the four kinds are ever drawn; a deletion is the one left.
        _ => "customer.subscription.deleted",
    }
}

/// The kind of the provider's `type`, if the receiver takes it.
pub fn kind_of(wire: &str) -> Option<&'static str> {
    [UPDATED, PAYMENT_FAILED, PAID, DELETED]
        .into_iter()
        .find(|kind| wire_type(kind) == wire)
}

/// An operation owed to the provisioning API: its key (the business operation, never an event)
/// and the payload sent, as it is, on every attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// `<customer>/<subscription>/<operation>`.
    pub key: String,
    /// The request body, JSON.
    pub payload: String,
}

fn operation(name: &str, customer: &str, subscription: &str, key_tail: &str, mut body: Json) -> Operation {
    body["operation"] = name.into();
    body["customer"] = customer.into();
    body["subscription"] = subscription.into();
    Operation {
        key: format!("{customer}/{subscription}/{name}{key_tail}"),
        payload: body.to_string(),
    }
}

/// The `set-seats` a plan version owes: one per version, whatever order versions arrive in.
pub fn set_seats(customer: &str, subscription: &str, plan_version: i64, seats: i64) -> Operation {
    let body = serde_json::json!({"plan_version": plan_version, "seats": seats});
    operation(
        "set-seats",
        customer,
        subscription,
        &format!("/v{plan_version}"),
        body,
    )
}

/// The `restore-access` a failed invoice followed by a paid one owes.
pub fn restore_access(customer: &str, subscription: &str) -> Operation {
    operation(
        "restore-access",
        customer,
        subscription,
        "",
        serde_json::json!({}),
    )
}

/// The `deprovision` a deletion owes.
pub fn deprovision(customer: &str, subscription: &str) -> Operation {
    operation("deprovision", customer, subscription, "", serde_json::json!({}))
}

/// An `active` subscription's state: its plan version and seats are what the model predicts.
pub fn active(plan_version: i64, seats: i64) -> EntityState {
    EntityState::named(ACTIVE)
        .with("plan_version", plan_version)
        .with("seats", seats)
}

/// The billing provider's subscription events. See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Subscriptions;

impl Domain for Subscriptions {
    fn name(&self) -> &str {
        "subscriptions"
    }

    fn description(&self) -> &str {
        "a billing provider's subscription and invoice events; plan versions, past-due recovery and deletions owe provisioning calls"
    }

    fn rules(&self) -> Vec<String> {
        [
            "a subscription is active (plan version, seats), past_due or canceled; canceled is final",
            "the highest plan version reported decides the seats; an older version arriving late changes nothing, and within active the version only grows",
            "the newest invoice event by creation time decides active or past_due (a payment wins a tie)",
            "each plan version owes one set-seats <customer>/<sub>/set-seats/v<version>, a late one too",
            "an invoice.payment_failed followed in creation order by an invoice.paid owes one restore-access <customer>/<sub>/restore-access, once both arrived",
            "a deletion owes one deprovision <customer>/<sub>/deprovision",
            "an event for an unknown account or subscription, or of a type not taken, is refused with 422",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    fn words(&self) -> DomainWords {
        DomainWords {
            subjects: "subscriptions per customer".to_owned(),
            updates: "customer.subscription.updated events (plan versions) per subscription, on top of its invoice story"
                .to_owned(),
            edge_values: "a 128-character subscription id, an event created at time 0, a body at the configured limit, 1,000,000 seats and plan version 1,000,000,000".to_owned(),
        }
    }

    fn draw(&self, seed: u64, settings: &WorkloadSettings) -> (Fixtures, Vec<EventSpec>) {
        draw(seed, settings)
    }

    fn event_type(&self, event: &EventSpec) -> String {
        wire_type(&event.kind).to_owned()
    }

    fn body(&self, event: &EventSpec) -> String {
        event.standard_body(&self.event_type(event), "subscription")
    }

    fn model(&self, workload: &Workload) -> Model {
        let mut model = Model::default();
        for fixture in &workload.fixtures.subjects {
            let (customer, subscription) = (&fixture.tenant, &fixture.subject);
            let story: Vec<&EventSpec> = workload.events_for_subject(customer, subscription).collect();
            let state = final_state(fixture, &story);
            model
                .final_states
                .insert((customer.clone(), subscription.clone()), BTreeSet::from([state]));
            for (operation, owers) in owed(customer, subscription, &story) {
                let owed = model.owed.entry(operation.key).or_insert_with(|| Owed {
                    owing: Owing::Certainly,
                    payloads: BTreeSet::new(),
                    events: BTreeSet::new(),
                });
                owed.payloads.insert(operation.payload);
                owed.events.extend(
                    owers
                        .iter()
                        .map(|event| (event.account.clone(), event.event_id.clone())),
                );
            }
        }
        model
    }

    fn may_become(&self, before: &EntityState, after: &EntityState) -> bool {
        let known = |state: &EntityState| [ACTIVE, PAST_DUE, CANCELED].contains(&state.state.as_str());
        if !known(before) || !known(after) {
            return false;
        }
        match (before.state.as_str(), after.state.as_str()) {
            (CANCELED, _) => before == after,
            (_, CANCELED) => true,
            // The plan version only grows, and a version's seats never change.
            (ACTIVE, ACTIVE) => before == after || plan_version(before) < plan_version(after),
            _ => true,
        }
    }

    fn refusal(&self, workload: &Workload, event: &EventSpec) -> Option<Refusal> {
        let known = workload.knows(&event.account, &event.tenant, &event.subject);
        (!known).then(|| Refusal::permanent("the customer or the subscription does not exist"))
    }

    fn operation_of(&self, payload: &str) -> Result<String, String> {
        let json: Json = serde_json::from_str(payload).map_err(|error| error.to_string())?;
        let text = |name: &str| json[name].as_str().ok_or(format!("the payload has no {name}"));
        let number = |name: &str| json[name].as_i64().ok_or(format!("the payload has no {name}"));
        let (customer, subscription) = (text("customer")?, text("subscription")?);
        let operation = match text("operation")? {
            "set-seats" => set_seats(customer, subscription, number("plan_version")?, number("seats")?),
            "restore-access" => restore_access(customer, subscription),
            "deprovision" => deprovision(customer, subscription),
            other => return Err(format!("unknown operation {other:?}")),
        };
        Ok(operation.key)
    }

    fn invalid_body(&self, event: &Json, rule: u64) -> Json {
        let mut event = event.clone();
        let is_update = event["type"] == wire_type(UPDATED);
        match rule % 8 {
            0 => event["id"] = "".into(),
            1 => event["id"] = "i".repeat(NAME_CHARS_MAX + 1).into(),
            2 => event["created_ms"] = (-1).into(),
            3 => event["subscription"] = "".into(),
            4 => event["subscription"] = "s".repeat(NAME_CHARS_MAX + 1).into(),
            5 => event["subscription"] = "sub\u{7}1".into(),
            6 if is_update => event["seats"] = (SEATS_MAX + 1).into(),
            7 if is_update => event["plan_version"] = 0.into(),
            _ => event["account"] = "".into(),
        }
        event
    }

    fn tampered_body(&self, event: &Json) -> Json {
        // What an attacker wants: more seats than were bought, or a new event id otherwise.
        let mut event = event.clone();
        match event["seats"].as_i64() {
            Some(seats) => event["seats"] = (seats + 100).into(),
            None => event["id"] = format!("{}-x", event["id"].as_str().unwrap_or("evt")).into(),
        }
        event
    }

    fn unknown_type_body(&self, event: &Json) -> Option<Json> {
        // The provider really sends invoice.upcoming; this receiver takes only its four types and
        // refuses every other with a 422 (`crate::business::Billing::parse`).
        let mut event = event.clone();
        event["type"] = "invoice.upcoming".into();
        Some(event)
    }

    fn twin(&self, event: &EventSpec) -> Option<EventSpec> {
        // The provider re-reports a plan, a payment and a deletion (a second event object for the
        // same fact); a failed payment attempt is reported once, since another report would be
        // another attempt.
        (event.kind != PAYMENT_FAILED).then(|| event.clone())
    }

    fn situations(&self) -> Vec<DomainSituation> {
        vec![
            DomainSituation::new(
                "recovered-from-past-due",
                "a past-due subscription became active again",
                &[],
            ),
            DomainSituation::new(
                "canceled-while-past-due",
                "a past-due subscription was canceled",
                &[],
            ),
        ]
    }

    fn situation_of_move(&self, before: &EntityState, after: &EntityState) -> Option<&str> {
        match (before.state.as_str(), after.state.as_str()) {
            (PAST_DUE, ACTIVE) => Some("recovered-from-past-due"),
            (PAST_DUE, CANCELED) => Some("canceled-while-past-due"),
            _ => None,
        }
    }
}

fn plan_version(state: &EntityState) -> Option<i64> {
    state.field("plan_version")?.parse().ok()
}

/// What a subscription ends in, from its whole story in creation order.
fn final_state(fixture: &SubjectFixture, story: &[&EventSpec]) -> EntityState {
    if story.iter().any(|event| event.kind == DELETED) {
        return EntityState::named(CANCELED);
    }
    let newest_invoice_event = story
        .iter()
        .filter(|event| event.kind == PAID || event.kind == PAYMENT_FAILED)
        .max_by_key(|event| (event.created_ms, event.kind == PAID));
    if newest_invoice_event.is_some_and(|event| event.kind == PAYMENT_FAILED) {
        return EntityState::named(PAST_DUE);
    }
    let plans = story.iter().filter(|event| event.kind == UPDATED);
    match plans
        .filter_map(|event| Some((event.number("plan_version")?, event.number("seats")?)))
        .max()
    {
        Some((version, seats)) => active(version, seats),
        None => active(0, fixture.number("seats").unwrap_or(1)),
    }
}

/// Every operation a subscription's story owes, with the events that owe it.
fn owed<'a>(
    customer: &str,
    subscription: &str,
    story: &[&'a EventSpec],
) -> Vec<(Operation, Vec<&'a EventSpec>)> {
    let of_kind = |kind: &str| {
        story
            .iter()
            .copied()
            .filter(|event| event.kind == kind)
            .collect::<Vec<_>>()
    };
    let mut owed = Vec::new();
    for update in of_kind(UPDATED) {
        if let (Some(version), Some(seats)) = (update.number("plan_version"), update.number("seats")) {
            owed.push((set_seats(customer, subscription, version, seats), vec![update]));
        }
    }
    let (failures, payments) = (of_kind(PAYMENT_FAILED), of_kind(PAID));
    let first_failure = failures.iter().map(|event| event.created_ms).min();
    let last_payment = payments.iter().map(|event| event.created_ms).max();
    if let (Some(failed_ms), Some(paid_ms)) = (first_failure, last_payment) {
        if failed_ms < paid_ms {
            // Every failure some payment follows, and every payment that follows some failure:
            // the operation is demanded once all of them have arrived.
            let mut owers: Vec<&EventSpec> = failures
                .into_iter()
                .filter(|event| event.created_ms < paid_ms)
                .collect();
            owers.extend(payments.into_iter().filter(|event| event.created_ms > failed_ms));
            owed.push((restore_access(customer, subscription), owers));
        }
    }
    let deletions = of_kind(DELETED);
    if !deletions.is_empty() {
        owed.push((deprovision(customer, subscription), deletions));
    }
    owed
}

/// A subscription id of exactly the receiver's longest name.
fn longest_name(number: u32) -> String {
    let head = format!("sub-{number}-");
    format!("{head}{}", "x".repeat(NAME_CHARS_MAX - head.len()))
}

/// The fixtures and events of one run: per customer its subscriptions, each with an invoice
/// story, plan changes and sometimes a deletion after everything else.
fn draw(seed: u64, settings: &WorkloadSettings) -> (Fixtures, Vec<EventSpec>) {
    let mut stories = SimRng::stream(seed, "billing/stories");
    let mut plans = SimRng::stream(seed, "billing/plans");
    let window_ms = settings.emit_window_ms.max(8);
    let (mut fixtures, mut events) = (Fixtures::default(), Vec::new());
    for index in 0..settings.tenants.min(26) {
        let letter = char::from(b'a' + index as u8);
        let (account, customer) = (format!("acct-{letter}"), format!("cust-{letter}"));
        fixtures.accounts.push((account.clone(), customer.clone()));
        for number in 1..=settings.subjects_per_tenant {
            let edge = settings.edge_values && index == 0 && number == 1;
            let subscription = if edge {
                longest_name(number)
            } else {
                format!("sub-{number}")
            };
            let seats = stories.between(1, 10);
            fixtures
                .subjects
                .push(SubjectFixture::new(&customer, &subscription).with("seats", seats));
            let at = |kind: &str, created_ms: i64| {
                EventSpec::new(&account, &customer, &subscription, kind, created_ms)
            };
            let mut story = invoice_story(&mut stories, settings, window_ms, &at);
            story.extend(plan_changes(&mut plans, settings, window_ms, edge, &at));
            // A deletion comes last, as the provider reports nothing about a deleted
            // subscription: by more than the 1,000 ms a twin may trail its original, so twins
            // precede it too. (The model would hold either way: canceled is final whenever the
            // deletion was created, and every fact reported still owes its operation.)
            if stories.chance(Ratio::new(1, 4)) {
                let last_ms = story.iter().map(|event| event.created_ms).max().unwrap_or(0);
                story.push(at(DELETED, last_ms + 1_001 + stories.between(0, window_ms / 4)));
            }
            events.extend(story);
        }
    }
    let mut strangers = SimRng::stream(seed, "billing/strangers");
    if strangers.chance(Ratio::new(1, 4)) {
        if let Some((account, customer)) = fixtures.accounts.first() {
            // sub-0 is never a fixture: the receiver must refuse it.
            let kind = *strangers.pick(&[UPDATED, PAYMENT_FAILED, PAID, DELETED]);
            let created_ms = strangers.between(0, window_ms - 1);
            let event = EventSpec::new(account, customer, "sub-0", kind, created_ms);
            events.push(if kind == UPDATED {
                event.with("plan_version", 1).with("seats", 1)
            } else {
                event
            });
        }
    }
    events.sort_by_key(|event| event.created_ms);
    if settings.edge_values {
        if let Some(first) = events.first_mut() {
            // The earliest event of its story too, so moving it to 0 keeps every story's order.
            first.created_ms = 0;
            first.deliver_at_ms = 0;
        }
    }
    Workload::number_events(&mut events);
    (fixtures, events)
}

/// The invoice stories besides the usual end: none, a failure alone, a payment alone, or a
/// payment then a failure (which owes nothing and ends past due).
const OTHER_INVOICE_STORIES: [&[&str]; 4] = [&[], &[PAYMENT_FAILED], &[PAID], &[PAID, PAYMENT_FAILED]];

/// A subscription's invoices: failed then paid (the usual end, which owes restore-access), or
/// nothing, a failure alone, a payment alone, or a payment then a failure. Racing stories create
/// the two events milliseconds apart, so their deliveries overlap.
fn invoice_story(
    rng: &mut SimRng,
    settings: &WorkloadSettings,
    window_ms: i64,
    at: &dyn Fn(&str, i64) -> EventSpec,
) -> Vec<EventSpec> {
    let gap_ms = if rng.chance(settings.racing_subjects) {
        rng.between(1, 20)
    } else {
        rng.between(1, window_ms / 2)
    };
    let first_ms = rng.between(0, window_ms - 1);
    let kinds: &[&str] = if rng.chance(settings.completed_subjects) {
        &[PAYMENT_FAILED, PAID]
    } else {
        let other: &&[&str] = rng.pick(&OTHER_INVOICE_STORIES);
        other
    };
    kinds
        .iter()
        .enumerate()
        .map(|(index, kind)| at(kind, first_ms + gap_ms * index as i64))
        .collect()
}

/// A subscription's plan changes: versions that grow with creation time, each with its seats.
fn plan_changes(
    rng: &mut SimRng,
    settings: &WorkloadSettings,
    window_ms: i64,
    edge: bool,
    at: &dyn Fn(&str, i64) -> EventSpec,
) -> Vec<EventSpec> {
    let mut count = match settings.updates_per_subject {
        Some((least, most)) => rng.between(i64::from(least), i64::from(most)),
        None if rng.chance(Ratio::new(1, 2)) => rng.between(1, 3),
        None => 0,
    };
    if edge {
        count = count.max(1);
    }
    let racing = rng.chance(settings.racing_subjects);
    let (mut created_ms, mut version) = (rng.between(0, window_ms - 1), 0);
    let mut changes = Vec::new();
    for index in 0..count {
        // Strictly later each time, so the newest version is also the highest.
        created_ms += if racing {
            rng.between(1, 20)
        } else {
            rng.between(1, window_ms / 3)
        };
        version += rng.between(1, 3);
        let mut seats = rng.between(1, 50);
        if edge && index == 0 {
            seats = SEATS_MAX;
        }
        if edge && index == count - 1 {
            version = PLAN_VERSION_MAX;
        }
        changes.push(
            at(UPDATED, created_ms)
                .with("plan_version", version)
                .with("seats", seats),
        );
    }
    changes
}
