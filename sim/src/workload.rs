//! The workload: which accounts and business entities exist and which events the sender emits,
//! when, and how each is delivered. It is the ground truth the invariants compare against, plain
//! data written to seed files and schedules, in no domain's words: what an event means is its
//! domain's business (see [`crate::domain`]). Drawing one from a seed is the domain's; this
//! module only holds and answers questions about it, and must not draw or decide anything.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The data every run starts with: the sender's accounts and the business entities that exist.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Fixtures {
    /// `(account, tenant)`: which tenant each sender account belongs to.
    pub accounts: Vec<(String, String)>,
    /// The entities events may be about (orders awaiting payment, branches of a repository).
    /// Seed files of the payments domain written before domains existed call them `orders`.
    #[serde(alias = "orders")]
    pub subjects: Vec<SubjectFixture>,
}

impl Fixtures {
    /// The fixture of entity `(tenant, subject)`, if it exists.
    pub fn subject(&self, tenant: &str, subject: &str) -> Option<&SubjectFixture> {
        self.subjects
            .iter()
            .find(|fixture| fixture.tenant == tenant && fixture.subject == subject)
    }
}

/// One business entity a run starts with.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SubjectFixture {
    /// The tenant the entity belongs to.
    pub tenant: String,
    /// The entity's name within its tenant (`order-1`, `repo-1/main`).
    #[serde(alias = "order")]
    pub subject: String,
    /// Its starting values in its domain's words (`amount_cents`).
    #[serde(flatten)]
    pub fields: std::collections::BTreeMap<String, serde_json::Value>,
}

impl SubjectFixture {
    /// An entity with no fields.
    pub fn new(tenant: &str, subject: &str) -> SubjectFixture {
        SubjectFixture {
            tenant: tenant.to_owned(),
            subject: subject.to_owned(),
            fields: std::collections::BTreeMap::new(),
        }
    }

    /// This entity with field `name` set to `value`.
    pub fn with(mut self, name: &str, value: impl Into<serde_json::Value>) -> SubjectFixture {
        self.fields.insert(name.to_owned(), value.into());
        self
    }

    /// The field `name` as a number, if it is one.
    pub fn number(&self, name: &str) -> Option<i64> {
        self.fields.get(name).and_then(serde_json::Value::as_i64)
    }

    /// The field `name` as text, if it is text.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.fields.get(name).and_then(serde_json::Value::as_str)
    }
}

/// A delivery beyond the sender's retry schedule: a spontaneous duplicate or an operator's
/// manual resend.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExtraDelivery {
    /// Virtual time of the delivery, in milliseconds.
    pub at_ms: i64,
    /// Why it happens, for the trace (`spontaneous duplicate`, `manual resend`).
    pub reason: String,
    /// The fault model that added it, credited when it goes out. Empty in seed files written
    /// before deliveries named their model: the built-in the reason names is credited then.
    #[serde(default)]
    pub fault: String,
}

impl ExtraDelivery {
    /// A delivery at `at_ms` for `reason`, added by fault model `fault`.
    pub fn new(at_ms: i64, reason: &str, fault: &str) -> ExtraDelivery {
        ExtraDelivery {
            at_ms,
            reason: reason.to_owned(),
            fault: fault.to_owned(),
        }
    }
}

/// One event the sender will emit, and how it will be delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventSpec {
    /// The upstream account that emits the event.
    pub account: String,
    /// Unique within the account only.
    pub event_id: String,
    /// The tenant the account belongs to.
    pub tenant: String,
    /// The business entity the event is about, in its tenant (an order, a branch). Seed files
    /// of the payments domain written before domains existed call it `order`.
    #[serde(alias = "order")]
    pub subject: String,
    /// What the event reports, in its domain's words (`payment`, `push`).
    pub kind: String,
    /// The event's other values, as its domain draws them and writes them into the body
    /// (`amount_cents`, `head_sha`).
    #[serde(flatten)]
    pub fields: BTreeMap<String, serde_json::Value>,
    /// When the sender created the event; the order of creation is the order of the facts.
    pub created_ms: i64,
    /// When the first attempt goes out (later than creation when delivery is late or reordered).
    pub deliver_at_ms: i64,
    /// How many subscriptions receive it; each delivers (and retries) on its own.
    pub subscriptions: u32,
    /// Deliveries outside the retry schedule.
    pub extra_deliveries: Vec<ExtraDelivery>,
}

impl EventSpec {
    /// An event of `kind` about `subject`, created (and first delivered) at `created_ms` to one
    /// subscription, with no fields and no id yet.
    pub fn new(account: &str, tenant: &str, subject: &str, kind: &str, created_ms: i64) -> EventSpec {
        EventSpec {
            account: account.to_owned(),
            event_id: String::new(),
            tenant: tenant.to_owned(),
            subject: subject.to_owned(),
            kind: kind.to_owned(),
            fields: BTreeMap::new(),
            created_ms,
            deliver_at_ms: created_ms,
            subscriptions: 1,
            extra_deliveries: Vec::new(),
        }
    }

    /// This event with field `name` set to `value`.
    pub fn with(mut self, name: &str, value: impl Into<serde_json::Value>) -> EventSpec {
        self.fields.insert(name.to_owned(), value.into());
        self
    }

    /// The field `name` as a number, if it is one.
    pub fn number(&self, name: &str) -> Option<i64> {
        self.fields.get(name).and_then(serde_json::Value::as_i64)
    }

    /// The field `name` as text, if it is text.
    pub fn text(&self, name: &str) -> Option<&str> {
        self.fields.get(name).and_then(serde_json::Value::as_str)
    }

    /// The JSON body most domains deliver: an object with `account`, `created_ms`, `id`, the
    /// subject under `subject_key`, `type` and every field for which `keep` is true, its keys in
    /// sorted order as `serde_json` writes a map. Written field by field because the sender
    /// writes one on every attempt, and building a `serde_json::Value` first cost a thirtieth of
    /// a sweep.
    pub fn standard_body_with(
        &self,
        type_name: &str,
        subject_key: &str,
        keep: impl Fn(&str) -> bool,
    ) -> String {
        let mut entries: Vec<(&str, BodyValue<'_>)> = vec![
            ("account", BodyValue::Text(&self.account)),
            ("created_ms", BodyValue::Number(self.created_ms)),
            ("id", BodyValue::Text(&self.event_id)),
            (subject_key, BodyValue::Text(&self.subject)),
            ("type", BodyValue::Text(type_name)),
        ];
        for (name, value) in &self.fields {
            if keep(name) {
                entries.push((name, BodyValue::Json(value)));
            }
        }
        entries.sort_by(|a, b| a.0.cmp(b.0));
        let mut body = Vec::with_capacity(160);
        for (name, value) in entries {
            match value {
                BodyValue::Text(text) => push_json_field(&mut body, name, text),
                BodyValue::Number(number) => push_json_field(&mut body, name, &number),
                BodyValue::Json(json) => push_json_field(&mut body, name, json),
            }
        }
        body.push(b'}');
        // serde_json writes UTF-8 only.
        String::from_utf8(body).unwrap_or_default()
    }

    /// [`EventSpec::standard_body_with`] keeping every field.
    pub fn standard_body(&self, type_name: &str, subject_key: &str) -> String {
        self.standard_body_with(type_name, subject_key, |_| true)
    }
}

/// A value of a standard body, borrowed.
enum BodyValue<'a> {
    Text(&'a str),
    Number(i64),
    Json(&'a serde_json::Value),
}

/// Appends `"name":value` to an object being written, opening it first if `body` is empty.
fn push_json_field<T: serde::Serialize + ?Sized>(body: &mut Vec<u8>, name: &str, value: &T) {
    body.push(if body.is_empty() { b'{' } else { b',' });
    body.push(b'"');
    body.extend_from_slice(name.as_bytes());
    body.extend_from_slice(b"\":");
    // Writing a string or a number to a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *body, value);
}

/// The ground truth of a run: fixtures and the events that will be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// The accounts and business entities the run starts with.
    pub fixtures: Fixtures,
    /// Sorted by creation time.
    pub events: Vec<EventSpec>,
    events_by_key: BTreeMap<(String, String), usize>,
    events_by_subject: BTreeMap<(String, String), Vec<usize>>,
}

impl Workload {
    /// A workload from explicit parts (scenarios, tests, and fault models that reshape it).
    pub fn new(fixtures: Fixtures, mut events: Vec<EventSpec>) -> Workload {
        events.sort_by_key(|event| event.created_ms);
        let mut events_by_key = BTreeMap::new();
        let mut events_by_subject: BTreeMap<(String, String), Vec<usize>> = BTreeMap::new();
        for (index, event) in events.iter().enumerate() {
            events_by_key.insert((event.account.clone(), event.event_id.clone()), index);
            events_by_subject
                .entry((event.tenant.clone(), event.subject.clone()))
                .or_default()
                .push(index);
        }
        Workload {
            fixtures,
            events,
            events_by_key,
            events_by_subject,
        }
    }

    /// The next unused event id of `account` (for events added after drawing).
    pub fn next_event_id(events: &[EventSpec], account: &str) -> String {
        let used = events.iter().filter(|event| event.account == account).count();
        format!("evt-{}", used + 1)
    }

    /// Gives `events`, in the order given, ids that count per account: `evt-1`, `evt-2`, ...
    pub fn number_events(events: &mut [EventSpec]) {
        let mut next_id: BTreeMap<String, u32> = BTreeMap::new();
        for event in events {
            let counter = next_id.entry(event.account.clone()).or_insert(0);
            *counter += 1;
            event.event_id = format!("evt-{counter}");
        }
    }

    /// The event with id `event_id` in `account`.
    pub fn event(&self, account: &str, event_id: &str) -> Option<&EventSpec> {
        self.events_by_key
            .get(&(account.to_owned(), event_id.to_owned()))
            .map(|&index| &self.events[index])
    }

    /// The events about entity `(tenant, subject)`, in creation order.
    pub fn events_for_subject(&self, tenant: &str, subject: &str) -> impl Iterator<Item = &EventSpec> {
        self.events_by_subject
            .get(&(tenant.to_owned(), subject.to_owned()))
            .into_iter()
            .flatten()
            .map(|&index| &self.events[index])
    }

    /// Whether entity `(tenant, subject)` is among the fixtures, and its account `account`
    /// belongs to `tenant`: the usual test of whether an event names something that exists.
    pub fn knows(&self, account: &str, tenant: &str, subject: &str) -> bool {
        let account_known = self
            .fixtures
            .accounts
            .iter()
            .any(|(known, owner)| known == account && owner == tenant);
        account_known && self.fixtures.subject(tenant, subject).is_some()
    }
}
