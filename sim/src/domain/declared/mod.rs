//! A domain declared in a file rather than written in Rust: its states, the events that move an
//! entity between them, the fields events set, the operations a move owes with their payloads
//! and keys, and how a run's workload is drawn (docs/extending.md, "A domain in a file").
//!
//! A team whose receiver is not written in Rust, or one that wants its business rules read by
//! people who do not read Rust, writes its domain as TOML; [`DeclaredDomain::load`] reads and
//! checks it, and the result is a [`Domain`] like any other: a Rust system returns it from
//! `System::domain`, `commitgap-live --service` names its file, and `--domain FILE` puts it in
//! place of a system's own for a sweep.
//!
//! The model (`model`) is the events of each entity applied in every order they may arrive in:
//! an event that may move the entity from its current state does, one that may not is taken and
//! changes nothing, and a field an event sets "newest" keeps the value of the newest such event
//! by creation time whatever the arrival order. An operation a move owes is owed certainly when
//! every arrival order makes that move, possibly when some do. The draw (`draw`) follows the
//! file's weighted stories per entity. This module must decide nothing outside the seed (draws
//! come from [`SimRng`] streams) and must not look at any database.

mod draw;
mod model;
mod template;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{Domain, DomainWords, EntityState, Model, Refusal, WorkloadSettings};
use crate::rng::SimRng;
use crate::workload::{EventSpec, Fixtures, Workload};

pub use template::Template;

/// Written in a state's `from` list: the event may move an entity in any state.
pub const ANY_STATE: &str = "*";

/// The file as written.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct DomainFile {
    name: String,
    description: String,
    subject_key: String,
    states: Vec<String>,
    initial: String,
    #[serde(default)]
    rules: Vec<String>,
    #[serde(default)]
    fields: BTreeMap<String, FieldDeclaration>,
    events: BTreeMap<String, EventDeclaration>,
    #[serde(default)]
    operations: BTreeMap<String, OperationDeclaration>,
    draw: draw::DrawDeclaration,
}

/// A field the model predicts: where it starts, and which kind of value it holds.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldDeclaration {
    /// `integer` or `text`: how the field is written into a payload.
    pub kind: FieldKind,
    /// Whether the entity's fixture gives the field's starting value; otherwise it starts absent.
    #[serde(default)]
    pub from_fixture: bool,
}

/// The kinds of value a field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FieldKind {
    /// A whole number, written into a payload as a JSON number.
    Integer,
    /// Text, written as a JSON string.
    Text,
}

/// One kind of event: its wire type, the move it makes, what it sets and what it owes.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventDeclaration {
    /// The `type` the sender writes on the wire.
    #[serde(rename = "type")]
    pub wire_type: String,
    /// The states it moves an entity from (`"*"`: any); in any other state it changes nothing.
    #[serde(default)]
    pub from: Vec<String>,
    /// The state it moves to; absent: it keeps the state (and may still set fields).
    pub to: Option<String>,
    /// Fields set from the event's own value of the same name when it is newer, by creation
    /// time, than the value's last setter (wherever the entity stands).
    #[serde(default)]
    pub sets_newest: Vec<String>,
    /// The operation its move owes, by name.
    pub owes: Option<String>,
    /// The fields its body carries, besides the standard ones.
    #[serde(default)]
    pub carries: Vec<String>,
}

/// An operation owed to the provider: the payloads a correct relay may send and how the
/// provider reads its key from one.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct OperationDeclaration {
    payloads: Vec<BTreeMap<String, toml::Value>>,
    key: String,
}

/// An operation, checked: each allowed payload as a template per field, and the key's template
/// over the payload's own fields.
#[derive(Debug, Clone)]
pub struct Operation {
    /// Its name.
    pub name: String,
    /// Each payload a correct relay may send: the fields, each a template or a constant.
    pub payloads: Vec<BTreeMap<String, PayloadValue>>,
    /// The operation key, from the payload's fields (`{tenant}/{order}/fulfill/v{version}`).
    pub key: Template,
}

/// One field of a payload.
#[derive(Debug, Clone, PartialEq)]
pub enum PayloadValue {
    /// A fixed value, written as given.
    Constant(serde_json::Value),
    /// Text made from the event and the entity; a template of exactly one integer field's
    /// placeholder is written as a number.
    Made(Template),
}

/// A domain read from a file. See the module documentation.
#[derive(Debug, Clone)]
pub struct DeclaredDomain {
    name: String,
    description: String,
    subject_key: String,
    rules: Vec<String>,
    initial: String,
    states: BTreeSet<String>,
    fields: BTreeMap<String, FieldDeclaration>,
    events: BTreeMap<String, EventDeclaration>,
    operations: BTreeMap<String, Operation>,
    draw: draw::Draw,
}

impl DeclaredDomain {
    /// Reads and checks the domain at `path`; `Err` is one line naming the file and the field.
    pub fn load(path: &Path) -> Result<DeclaredDomain, String> {
        let shown = path.display();
        let text = std::fs::read_to_string(path).map_err(|error| format!("cannot read {shown}: {error}"))?;
        DeclaredDomain::parse(&text).map_err(|message| format!("{shown}: {message}"))
    }

    /// Reads and checks a domain from its text.
    pub fn parse(text: &str) -> Result<DeclaredDomain, String> {
        let file: DomainFile = toml::from_str(text).map_err(|error| one_line(&error.to_string()))?;
        let states: BTreeSet<String> = file.states.iter().cloned().collect();
        if states.len() != file.states.len() || states.is_empty() {
            return Err("states: list each state once, at least one".to_owned());
        }
        if !states.contains(&file.initial) {
            return Err(format!("initial = {:?} is not one of the states", file.initial));
        }
        let mut operations = BTreeMap::new();
        for (name, declared) in &file.operations {
            let operation = check_operation(name, declared, &file.fields)
                .map_err(|message| format!("operations.{name}: {message}"))?;
            operations.insert(name.clone(), operation);
        }
        for (kind, event) in &file.events {
            check_event(event, &states, &file.fields, &operations)
                .map_err(|message| format!("events.{kind}: {message}"))?;
        }
        let kinds: BTreeSet<&str> = file.events.keys().map(String::as_str).collect();
        let draw = draw::Draw::check(&file.draw, &kinds, &file.fields, &file.events)
            .map_err(|message| format!("draw.{message}"))?;
        Ok(DeclaredDomain {
            name: file.name,
            description: file.description,
            subject_key: file.subject_key,
            rules: file.rules,
            initial: file.initial,
            states,
            fields: file.fields,
            events: file.events,
            operations,
            draw,
        })
    }

    /// The state every entity starts in, with the fields its fixture gives.
    fn starting_state(&self, fixture_fields: &BTreeMap<String, serde_json::Value>) -> EntityState {
        let mut state = EntityState::named(&self.initial);
        for (name, field) in &self.fields {
            if field.from_fixture
                && let Some(value) = fixture_fields.get(name)
            {
                state = state.with(name, json_text(value));
            }
        }
        state
    }
}

fn check_event(
    event: &EventDeclaration,
    states: &BTreeSet<String>,
    fields: &BTreeMap<String, FieldDeclaration>,
    operations: &BTreeMap<String, Operation>,
) -> Result<(), String> {
    for state in event.from.iter().chain(event.to.iter()) {
        if state != ANY_STATE && !states.contains(state) {
            return Err(format!("{state:?} is not one of the states"));
        }
    }
    if event.to.as_deref() == Some(ANY_STATE) {
        return Err("to names one state, not \"*\"".to_owned());
    }
    for field in &event.sets_newest {
        if !fields.contains_key(field) {
            return Err(format!(
                "sets_newest names {field:?}, which [fields] does not declare"
            ));
        }
        if !event.carries.contains(field) {
            return Err(format!(
                "sets_newest names {field:?}, which the event does not carry"
            ));
        }
    }
    if let Some(owes) = &event.owes
        && !operations.contains_key(owes)
    {
        return Err(format!("owes {owes:?}, which [operations] does not declare"));
    }
    if event.owes.is_some() && event.to.is_none() {
        return Err("an event that owes an operation must move the entity (give `to`)".to_owned());
    }
    Ok(())
}

fn check_operation(
    name: &str,
    declared: &OperationDeclaration,
    fields: &BTreeMap<String, FieldDeclaration>,
) -> Result<Operation, String> {
    if declared.payloads.is_empty() {
        return Err("give at least one payload".to_owned());
    }
    let mut payloads = Vec::new();
    for payload in &declared.payloads {
        let mut checked = BTreeMap::new();
        for (field, value) in payload {
            let value = match value {
                toml::Value::String(text) => {
                    let template =
                        Template::parse(text).map_err(|message| format!("payloads.{field}: {message}"))?;
                    template
                        .check_names(fields)
                        .map_err(|message| format!("payloads.{field}: {message}"))?;
                    if template.is_constant() {
                        PayloadValue::Constant(serde_json::Value::String(
                            text.replace("{{", "{").replace("}}", "}"),
                        ))
                    } else {
                        PayloadValue::Made(template)
                    }
                }
                toml::Value::Integer(number) => PayloadValue::Constant((*number).into()),
                toml::Value::Boolean(flag) => PayloadValue::Constant((*flag).into()),
                other => {
                    return Err(format!(
                        "payloads.{field}: {} is neither text, a whole number nor true/false",
                        other.type_str()
                    ));
                }
            };
            checked.insert(field.clone(), value);
        }
        payloads.push(checked);
    }
    let key = Template::parse(&declared.key).map_err(|message| format!("key: {message}"))?;
    for payload in &payloads {
        for placeholder in key.names() {
            if !payload.contains_key(placeholder) {
                return Err(format!(
                    "key names {{{placeholder}}}, which a payload does not have: the key is read from the payload's own fields"
                ));
            }
        }
    }
    Ok(Operation {
        name: name.to_owned(),
        payloads,
        key,
    })
}

/// A JSON value as the text an entity's field holds.
fn json_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// The first and last lines of a parser's message, which hold its place and its reason.
fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .collect();
    match (lines.first(), lines.last()) {
        (Some(first), Some(last)) if first != last => format!("{first}: {last}"),
        (Some(first), _) => (*first).to_owned(),
        _ => message.to_owned(),
    }
}

impl Domain for DeclaredDomain {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn rules(&self) -> Vec<String> {
        let mut rules = self.rules.clone();
        for (kind, event) in &self.events {
            let sets = if event.sets_newest.is_empty() {
                String::new()
            } else {
                format!(
                    "; it sets {} when newer by creation time, wherever the entity stands",
                    event.sets_newest.join(", ")
                )
            };
            let owes = event
                .owes
                .as_ref()
                .map(|owes| format!(", owing {owes}"))
                .unwrap_or_default();
            let moves = match (&event.to, event.from.is_empty()) {
                (Some(to), false) => format!(
                    "moves {} -> {to}{owes}, and elsewhere is taken and changes no state",
                    event.from.join(" | ")
                ),
                _ => "moves no entity".to_owned(),
            };
            rules.push(format!("{kind} ({}) {moves}{sets}", event.wire_type));
        }
        rules.push(format!(
            "an event for an unknown account or {} is refused with 422 and leaves no receipt",
            self.subject_key
        ));
        rules
    }

    fn words(&self) -> DomainWords {
        DomainWords {
            subjects: format!("{}s", self.subject_key),
            ..DomainWords::default()
        }
    }

    fn draw(&self, seed: u64, settings: &WorkloadSettings) -> (Fixtures, Vec<EventSpec>) {
        self.draw.draw(seed, settings, &self.events)
    }

    fn event_type(&self, event: &EventSpec) -> String {
        self.events
            .get(&event.kind)
            .map_or_else(|| event.kind.clone(), |declared| declared.wire_type.clone())
    }

    fn body(&self, event: &EventSpec) -> String {
        event.standard_body(&self.event_type(event), &self.subject_key)
    }

    fn owes_work(&self, event: &EventSpec) -> bool {
        self.events
            .get(&event.kind)
            .is_some_and(|declared| declared.owes.is_some())
    }

    fn model(&self, workload: &Workload) -> Model {
        model::model(self, workload)
    }

    fn may_become(&self, before: &EntityState, after: &EntityState) -> bool {
        if before.state == after.state {
            return self.states.contains(&before.state);
        }
        self.events.values().any(|event| {
            event.to.as_deref() == Some(after.state.as_str())
                && event
                    .from
                    .iter()
                    .any(|from| from == ANY_STATE || *from == before.state)
        })
    }

    fn refusal(&self, workload: &Workload, event: &EventSpec) -> Option<Refusal> {
        if !self.events.contains_key(&event.kind) {
            Some(Refusal::permanent(format!(
                "its type is not one {} handles",
                self.name
            )))
        } else if workload.knows(&event.account, &event.tenant, &event.subject) {
            None
        } else {
            Some(Refusal::permanent(format!(
                "its account or {} does not exist",
                self.subject_key
            )))
        }
    }

    fn operation_of(&self, payload: &str) -> Result<String, String> {
        let value: serde_json::Value =
            serde_json::from_str(payload).map_err(|error| format!("unreadable payload: {error}"))?;
        let object = value.as_object().ok_or("a payload is a JSON object")?;
        for operation in self.operations.values() {
            let fits = operation.payloads.iter().any(|declared| {
                declared.len() == object.len()
                    && declared
                        .iter()
                        .all(|(field, value)| match (value, object.get(field)) {
                            (PayloadValue::Constant(constant), Some(found)) => constant == found,
                            (PayloadValue::Made(_), Some(found)) => {
                                found.as_str().is_some_and(|text| !text.is_empty()) || found.is_i64()
                            }
                            (_, None) => false,
                        })
            });
            if fits {
                let fields: BTreeMap<String, String> = object
                    .iter()
                    .map(|(name, value)| (name.clone(), json_text(value)))
                    .collect();
                return operation.key.fill(&|name| fields.get(name).cloned());
            }
        }
        Err(format!(
            "no operation of {} has a payload like {payload}",
            self.name
        ))
    }
}

/// Draws come from the seed's streams, as every domain's do.
fn stream(seed: u64, name: &str) -> SimRng {
    SimRng::stream(seed, name)
}

#[cfg(test)]
mod tests;
