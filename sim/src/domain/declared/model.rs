//! A declared domain's model: each entity's events applied in every order they may arrive in.
//!
//! Events split in two. A *mover* may change the entity's state or owe an operation; the order
//! movers arrive in can decide where the entity ends (a cancellation racing a payment), so every
//! order is tried, by dynamic programming over the set of movers that arrived so far. A *setter*
//! only sets fields "newest by creation time", which no arrival order changes, so setters are
//! applied apart: the final value of a field is its newest setter's (every newest one where
//! several share the millisecond), and a payload that snapshots a field at a move may hold the
//! value any setter newer than the movers' own gave it. It must depend on the workload alone.

use std::collections::{BTreeMap, BTreeSet};

use super::{DeclaredDomain, EventDeclaration, FieldKind, PayloadValue, json_text};
use crate::domain::{EntityState, Model, Owed, Owing};
use crate::workload::{EventSpec, Workload};

/// Past this many movers for one entity, only creation order is tried: the orders grow as 2^n.
/// No draw gives an entity this many; a hand-written seed file may.
pub const MOVERS_EXPLORED_MAX: usize = 14;

/// Where one arrival order has taken an entity so far.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Path {
    state: String,
    /// Fields movers set, each with the creation time of its setter.
    fields: BTreeMap<String, (String, i64)>,
    /// `(operation key, payload, index of the owing event)`.
    owed: BTreeSet<(String, String, usize)>,
}

/// The model of `workload` in `domain`. See the module documentation.
pub(super) fn model(domain: &DeclaredDomain, workload: &Workload) -> Model {
    let mut model = Model::default();
    for fixture in &workload.fixtures.subjects {
        let (tenant, subject) = (&fixture.tenant, &fixture.subject);
        let events: Vec<&EventSpec> = workload
            .events_for_subject(tenant, subject)
            .filter(|event| domain.events.contains_key(&event.kind))
            .filter(|event| workload.knows(&event.account, tenant, subject))
            .collect();
        let start = domain.starting_state(&fixture.fields);
        let entity = Entity {
            domain,
            tenant,
            subject,
            start: &start,
            events: &events,
        };
        let finals = entity.final_paths();
        let states: BTreeSet<EntityState> = finals
            .iter()
            .flat_map(|path| entity.final_states(&path.state))
            .collect();
        model
            .final_states
            .insert((tenant.clone(), subject.clone()), states);
        let every_key: BTreeSet<&String> = finals
            .iter()
            .flat_map(|path| path.owed.iter().map(|(key, _, _)| key))
            .collect();
        for key in every_key {
            let in_every_order = finals
                .iter()
                .all(|path| path.owed.iter().any(|(owed, _, _)| owed == key));
            let owed = model.owed.entry(key.clone()).or_insert_with(|| Owed {
                owing: Owing::Possibly,
                payloads: BTreeSet::new(),
                events: BTreeSet::new(),
            });
            if in_every_order {
                owed.owing = Owing::Certainly;
            }
            for path in &finals {
                for (_, payload, index) in path.owed.iter().filter(|(owed, _, _)| owed == key) {
                    owed.payloads.insert(payload.clone());
                    let event = events[*index];
                    owed.events
                        .insert((event.account.clone(), event.event_id.clone()));
                }
            }
        }
    }
    model
}

/// One entity and its events, as the model reads them.
struct Entity<'a> {
    domain: &'a DeclaredDomain,
    tenant: &'a str,
    subject: &'a str,
    start: &'a EntityState,
    events: &'a [&'a EventSpec],
}

impl Entity<'_> {
    fn declaration(&self, index: usize) -> &EventDeclaration {
        &self.domain.events[&self.events[index].kind]
    }

    fn is_mover(&self, index: usize) -> bool {
        let declared = self.declaration(index);
        declared.to.is_some() || declared.owes.is_some()
    }

    /// Where every arrival order of the movers ends.
    fn final_paths(&self) -> BTreeSet<Path> {
        let movers: Vec<usize> = (0..self.events.len())
            .filter(|index| self.is_mover(*index))
            .collect();
        let start = Path {
            state: self.start.state.clone(),
            fields: BTreeMap::new(),
            owed: BTreeSet::new(),
        };
        if movers.len() > MOVERS_EXPLORED_MAX {
            // Creation order alone (the events are in creation order).
            let end = movers
                .iter()
                .fold(start, |path, index| self.apply(&path, *index).remove(0));
            return BTreeSet::from([end]);
        }
        let mut layer: BTreeMap<u32, BTreeSet<Path>> = BTreeMap::from([(0, BTreeSet::from([start]))]);
        for _ in 0..movers.len() {
            let mut next: BTreeMap<u32, BTreeSet<Path>> = BTreeMap::new();
            for (arrived, paths) in &layer {
                for (bit, index) in movers.iter().enumerate() {
                    if arrived & (1 << bit) != 0 {
                        continue;
                    }
                    let reached = next.entry(arrived | (1 << bit)).or_default();
                    for path in paths {
                        reached.extend(self.apply(path, *index));
                    }
                }
            }
            layer = next;
        }
        layer.into_values().next().unwrap_or_default()
    }

    /// The paths after mover `index` arrives on `path`: one, or one per payload its move may
    /// snapshot.
    fn apply(&self, path: &Path, index: usize) -> Vec<Path> {
        let event = self.events[index];
        let declared = self.declaration(index);
        let mut after = path.clone();
        for field in &declared.sets_newest {
            let newer = match after.fields.get(field) {
                Some((_, version_ms)) => event.created_ms > *version_ms,
                None => self.newer_than_start(field, event.created_ms),
            };
            if newer && let Some(value) = event.fields.get(field) {
                after
                    .fields
                    .insert(field.clone(), (json_text(value), event.created_ms));
            }
        }
        let moves = declared
            .from
            .iter()
            .any(|from| from == super::ANY_STATE || *from == path.state);
        if !moves {
            return vec![after];
        }
        if let Some(to) = &declared.to {
            after.state.clone_from(to);
        }
        let Some(operation) = declared
            .owes
            .as_ref()
            .and_then(|owes| self.domain.operations.get(owes))
        else {
            return vec![after];
        };
        for payload in &operation.payloads {
            for text in self.payloads(payload, event, &after) {
                let fields: BTreeMap<String, String> =
                    serde_json::from_str::<BTreeMap<String, serde_json::Value>>(&text)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(name, value)| (name, json_text(&value)))
                        .collect();
                if let Ok(key) = operation.key.fill(&|name| fields.get(name).cloned()) {
                    after.owed.insert((key, text, index));
                }
            }
        }
        vec![after]
    }

    /// Every payload `declared` may be at a move by `event` on `path`: one per value each
    /// snapshotted field may hold then.
    fn payloads(
        &self,
        declared: &BTreeMap<String, PayloadValue>,
        event: &EventSpec,
        path: &Path,
    ) -> Vec<String> {
        let mut payloads = vec![serde_json::Map::new()];
        for (name, value) in declared {
            let values: Vec<serde_json::Value> = match value {
                PayloadValue::Constant(constant) => vec![constant.clone()],
                PayloadValue::Made(template) => {
                    let snapshotted = template.names().find_map(|name| name.strip_prefix("state."));
                    let choices = match snapshotted {
                        Some(field) => self.field_values_at_move(field, path),
                        None => vec![None],
                    };
                    choices
                        .into_iter()
                        .filter_map(|choice| {
                            let text = template
                                .fill(&|placeholder| {
                                    self.value_of(placeholder, event, path, choice.as_deref())
                                })
                                .ok()?;
                            Some(self.typed(template.only_name(), text))
                        })
                        .collect()
                }
            };
            payloads = payloads
                .into_iter()
                .flat_map(|payload| {
                    values.iter().map(move |value| {
                        let mut payload = payload.clone();
                        payload.insert(name.clone(), value.clone());
                        payload
                    })
                })
                .collect();
        }
        payloads
            .into_iter()
            .map(|payload| serde_json::Value::Object(payload).to_string())
            .collect()
    }

    /// A payload field's value: a number when the template is one integer field's placeholder.
    fn typed(&self, only_name: Option<&str>, text: String) -> serde_json::Value {
        let field = only_name.and_then(|name| {
            name.strip_prefix("state.")
                .or_else(|| name.strip_prefix("event."))
        });
        let integer = field
            .and_then(|field| self.domain.fields.get(field))
            .is_some_and(|declared| declared.kind == FieldKind::Integer);
        match text.parse::<i64>() {
            Ok(number) if integer => number.into(),
            _ => text.into(),
        }
    }

    fn value_of(&self, name: &str, event: &EventSpec, path: &Path, snapshot: Option<&str>) -> Option<String> {
        match name {
            "tenant" => Some(self.tenant.to_owned()),
            "subject" => Some(self.subject.to_owned()),
            _ => {
                if let Some(field) = name.strip_prefix("event.") {
                    return event.fields.get(field).map(json_text);
                }
                let field = name.strip_prefix("state.")?;
                snapshot
                    .map(str::to_owned)
                    .or_else(|| path.fields.get(field).map(|(value, _)| value.clone()))
                    .or_else(|| self.start.field(field).map(str::to_owned))
            }
        }
    }

    /// Whether a setter created at `created_ms` replaces `field`'s starting value: a value the
    /// fixture gave dates from time 0 and only a newer one replaces it; an absent one is
    /// replaced by any.
    fn newer_than_start(&self, field: &str, created_ms: i64) -> bool {
        self.start.field(field).is_none() || created_ms > 0
    }

    /// Every value `field` may hold at a move on `path`: the movers' (or the starting) value,
    /// or any setter's that is newer, since any setter may have arrived before the move.
    fn field_values_at_move(&self, field: &str, path: &Path) -> Vec<Option<String>> {
        let current = path.fields.get(field);
        let mut values = BTreeSet::from([current
            .map(|(value, _)| value.clone())
            .or_else(|| self.start.field(field).map(str::to_owned))]);
        for (index, event) in self.events.iter().enumerate() {
            let newer = match current {
                Some((_, version_ms)) => event.created_ms > *version_ms,
                None => self.newer_than_start(field, event.created_ms),
            };
            if !self.is_mover(index)
                && self.declaration(index).sets_newest.iter().any(|set| set == field)
                && newer
                && let Some(value) = event.fields.get(field)
            {
                values.insert(Some(json_text(value)));
            }
        }
        values.into_iter().collect()
    }

    /// The states an entity in state `state` ends in, its fields each the newest setter's.
    fn final_states(&self, state: &str) -> Vec<EntityState> {
        let mut states = vec![EntityState {
            state: state.to_owned(),
            fields: self.start.fields.clone(),
        }];
        for field in self.domain.fields.keys() {
            let setters: Vec<&EventSpec> = self
                .events
                .iter()
                .enumerate()
                .filter(|(index, event)| {
                    self.newer_than_start(field, event.created_ms)
                        && self
                            .declaration(*index)
                            .sets_newest
                            .iter()
                            .any(|set| set == field)
                })
                .filter(|(_, event)| event.fields.contains_key(field))
                .map(|(_, event)| *event)
                .collect();
            let Some(newest_ms) = setters.iter().map(|event| event.created_ms).max() else {
                continue;
            };
            let values: BTreeSet<String> = setters
                .iter()
                .filter(|event| event.created_ms == newest_ms)
                .filter_map(|event| event.fields.get(field).map(json_text))
                .collect();
            states = states
                .into_iter()
                .flat_map(|state| values.iter().map(move |value| state.clone().with(field, value)))
                .collect();
        }
        states
    }
}
