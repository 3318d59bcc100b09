//! How a declared domain draws a run's entities and events from its seed: per entity, a story
//! picked by weight (its events in creation order), sometimes extra events (updates), sometimes
//! a racing event, in some seeds an event for an entity that does not exist, and in seeds with
//! edge values a name at the receiver's limit. Every value comes from a stream of the seed.

use std::collections::{BTreeMap, BTreeSet};

use super::{EventDeclaration, FieldDeclaration, stream};
use crate::domain::WorkloadSettings;
use crate::rng::{Ratio, SimRng};
use crate::workload::{EventSpec, Fixtures, SubjectFixture, Workload};

/// `[draw]` as written.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DrawDeclaration {
    #[serde(default = "default_subject")]
    subject: String,
    #[serde(default = "default_group_size")]
    group_size: u32,
    missing_subject: Option<String>,
    #[serde(default)]
    fixture: BTreeMap<String, ValueDeclaration>,
    #[serde(default)]
    values: BTreeMap<String, ValueDeclaration>,
    stories: Vec<StoryDeclaration>,
    #[serde(default)]
    extras: Vec<ExtraDeclaration>,
    #[serde(default)]
    races: Vec<RaceDeclaration>,
}

fn default_subject() -> String {
    "subject-{n}".to_owned()
}

fn default_group_size() -> u32 {
    1
}

/// How one value is drawn.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ValueDeclaration {
    /// A whole number in `[low, high]`.
    between: Option<(i64, i64)>,
    /// A fresh lowercase hexadecimal string of this many digits.
    hex: Option<u32>,
    /// With this chance (`[numerator, denominator]`), a value drawn before in the same tenant.
    reuse: Option<(u32, u32)>,
    /// The entity's fixture value of the same name.
    #[serde(default)]
    from_fixture: bool,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct StoryDeclaration {
    weight: u32,
    events: Vec<String>,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ExtraDeclaration {
    event: String,
    share: (u32, u32),
    most: u32,
}

#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RaceDeclaration {
    when: String,
    add: String,
    #[serde(default)]
    unless: Vec<String>,
}

/// The draw, checked.
#[derive(Debug, Clone)]
pub(super) struct Draw {
    declared: DrawDeclaration,
    weight_total: u64,
}

impl Draw {
    /// Checks `declared` against the domain's event kinds and fields; `Err` starts with the
    /// field's path under `draw.`.
    pub(super) fn check(
        declared: &DrawDeclaration,
        kinds: &BTreeSet<&str>,
        fields: &BTreeMap<String, FieldDeclaration>,
        events: &BTreeMap<String, EventDeclaration>,
    ) -> Result<Draw, String> {
        let known = |kind: &str, field: &str| {
            if kinds.contains(kind) {
                Ok(())
            } else {
                Err(format!("{field}: {kind:?} is not one of the events"))
            }
        };
        if declared.stories.is_empty() {
            return Err("stories: give at least one story".to_owned());
        }
        for story in &declared.stories {
            for kind in &story.events {
                known(kind, "stories")?;
            }
        }
        for extra in &declared.extras {
            known(&extra.event, "extras.event")?;
            check_ratio(extra.share, "extras.share")?;
        }
        for race in &declared.races {
            known(&race.when, "races.when")?;
            known(&race.add, "races.add")?;
            for kind in &race.unless {
                known(kind, "races.unless")?;
            }
        }
        if let Some(kind) = &declared.missing_subject {
            known(kind, "missing_subject")?;
        }
        if !declared.subject.contains("{n}") {
            return Err(format!(
                "subject = {:?} must hold {{n}}, which numbers the entities",
                declared.subject
            ));
        }
        if declared.group_size == 0 {
            return Err("group_size must be at least 1".to_owned());
        }
        for (name, value) in declared.fixture.iter().chain(&declared.values) {
            check_value(name, value, fields)?;
        }
        for (kind, event) in events {
            for field in &event.carries {
                if !declared.values.contains_key(field)
                    && !declared.values.contains_key(&format!("{kind}.{field}"))
                {
                    return Err(format!(
                        "values: events.{kind} carries {field:?}, which draw.values does not draw"
                    ));
                }
            }
        }
        let weight_total = declared.stories.iter().map(|story| u64::from(story.weight)).sum();
        if weight_total == 0 {
            return Err("stories: the weights add up to 0".to_owned());
        }
        Ok(Draw {
            declared: declared.clone(),
            weight_total,
        })
    }

    /// The fixtures and events of `seed` with `settings`.
    pub(super) fn draw(
        &self,
        seed: u64,
        settings: &WorkloadSettings,
        events_declared: &BTreeMap<String, EventDeclaration>,
    ) -> (Fixtures, Vec<EventSpec>) {
        let mut rng = stream(seed, "workload");
        let mut extras_rng = stream(seed, "workload/updates");
        let window_ms = settings.emit_window_ms.max(2);
        let mut accounts = Vec::new();
        let mut subjects = Vec::new();
        let mut events = Vec::new();
        for tenant_index in 0..settings.tenants {
            let letter = char::from(b'a' + u8::try_from(tenant_index % 26).unwrap_or(0));
            let (tenant, account) = (format!("tenant-{letter}"), format!("acct-{letter}"));
            accounts.push((account.clone(), tenant.clone()));
            let mut drawn_before: BTreeMap<String, Vec<serde_json::Value>> = BTreeMap::new();
            for number in 1..=settings.subjects_per_tenant {
                let mut fixture = SubjectFixture::new(&tenant, &self.subject_name(number));
                for (name, value) in &self.declared.fixture {
                    let drawn = self.value(&mut rng, value, &fixture, &mut drawn_before, name);
                    fixture.fields.insert(name.clone(), drawn);
                }
                let mut story = Vec::new();
                if rng.chance(settings.completed_subjects) {
                    story.clone_from(&self.pick_story(&mut rng).events);
                }
                let mut created_ms = rng.between(0, window_ms - 1);
                for kind in &story {
                    events.push(self.event(
                        &mut rng,
                        kind,
                        &account,
                        &fixture,
                        created_ms,
                        events_declared,
                        &mut drawn_before,
                    ));
                    created_ms += rng.between(1, window_ms);
                }
                for extra in &self.declared.extras {
                    let count = match settings.updates_per_subject {
                        Some((low, high)) => extras_rng.between(i64::from(low), i64::from(high)),
                        None if extras_rng.chance(Ratio::new(extra.share.0, extra.share.1)) => {
                            extras_rng.between(1, i64::from(extra.most.max(1)))
                        }
                        None => 0,
                    };
                    let mut created_ms = extras_rng.between(0, window_ms - 1);
                    for _ in 0..count {
                        events.push(self.event(
                            &mut extras_rng,
                            &extra.event,
                            &account,
                            &fixture,
                            created_ms,
                            events_declared,
                            &mut drawn_before,
                        ));
                        created_ms += extras_rng.between(1, window_ms);
                    }
                }
                subjects.push(fixture);
            }
        }
        self.draw_missing(&mut rng, &accounts, window_ms, events_declared, &mut events);
        self.draw_races(seed, settings, &subjects, events_declared, &mut events);
        events.sort_by_key(|event| event.created_ms);
        Workload::number_events(&mut events);
        if settings.edge_values {
            put_a_name_at_the_edge(seed, &mut subjects, &mut events);
        }
        (Fixtures { accounts, subjects }, events)
    }

    fn subject_name(&self, number: u32) -> String {
        let group = (number - 1) / self.declared.group_size + 1;
        self.declared
            .subject
            .replace("{n}", &number.to_string())
            .replace("{group}", &group.to_string())
    }

    fn pick_story(&self, rng: &mut SimRng) -> &StoryDeclaration {
        let mut left = rng.below(self.weight_total);
        for story in &self.declared.stories {
            let weight = u64::from(story.weight);
            if left < weight {
                return story;
            }
            left -= weight;
        }
        &self.declared.stories[0]
    }

    #[allow(clippy::too_many_arguments)]
    fn event(
        &self,
        rng: &mut SimRng,
        kind: &str,
        account: &str,
        fixture: &SubjectFixture,
        created_ms: i64,
        declared: &BTreeMap<String, EventDeclaration>,
        drawn_before: &mut BTreeMap<String, Vec<serde_json::Value>>,
    ) -> EventSpec {
        let mut event = EventSpec::new(account, &fixture.tenant, &fixture.subject, kind, created_ms);
        for field in declared
            .get(kind)
            .map(|event| event.carries.as_slice())
            .unwrap_or_default()
        {
            // A value drawn for this kind of event alone comes first: `update.amount_cents`.
            let value = self
                .declared
                .values
                .get(&format!("{kind}.{field}"))
                .or_else(|| self.declared.values.get(field));
            if let Some(value) = value {
                let drawn = self.value(rng, value, fixture, drawn_before, field);
                event.fields.insert(field.clone(), drawn);
            }
        }
        event
    }

    fn value(
        &self,
        rng: &mut SimRng,
        value: &ValueDeclaration,
        fixture: &SubjectFixture,
        drawn_before: &mut BTreeMap<String, Vec<serde_json::Value>>,
        name: &str,
    ) -> serde_json::Value {
        if value.from_fixture {
            return fixture
                .fields
                .get(name)
                .cloned()
                .unwrap_or(serde_json::Value::Null);
        }
        let earlier = drawn_before.entry(name.to_owned()).or_default();
        if let Some((numerator, denominator)) = value.reuse
            && !earlier.is_empty()
            && rng.chance(Ratio::new(numerator, denominator))
        {
            return rng.pick(earlier).clone();
        }
        let drawn: serde_json::Value = match (value.between, value.hex) {
            (Some((low, high)), _) => rng.between(low, high).into(),
            (None, Some(digits)) => (0..digits)
                .map(|_| char::from_digit(u32::try_from(rng.below(16)).unwrap_or(0), 16).unwrap_or('0'))
                .collect::<String>()
                .into(),
            (None, None) => serde_json::Value::Null,
        };
        earlier.push(drawn.clone());
        drawn
    }

    /// In one seed in four, an event for an entity that does not exist.
    fn draw_missing(
        &self,
        rng: &mut SimRng,
        accounts: &[(String, String)],
        window_ms: i64,
        declared: &BTreeMap<String, EventDeclaration>,
        events: &mut Vec<EventSpec>,
    ) {
        let Some(kind) = &self.declared.missing_subject else {
            return;
        };
        if accounts.is_empty() || !rng.chance(Ratio::new(1, 4)) {
            return;
        }
        let (account, tenant) = rng.pick(accounts).clone();
        let ghost = SubjectFixture::new(&tenant, &self.subject_name(1).replace('1', "missing"));
        let created_ms = rng.between(0, window_ms - 1);
        let mut drawn_before = BTreeMap::new();
        events.push(self.event(
            rng,
            kind,
            &account,
            &ghost,
            created_ms,
            declared,
            &mut drawn_before,
        ));
    }

    /// For a share of the entities, one event racing with the story (`draw.races`), created
    /// anywhere in the window.
    fn draw_races(
        &self,
        seed: u64,
        settings: &WorkloadSettings,
        subjects: &[SubjectFixture],
        declared: &BTreeMap<String, EventDeclaration>,
        events: &mut Vec<EventSpec>,
    ) {
        if settings.racing_subjects.numerator == 0 || self.declared.races.is_empty() {
            return;
        }
        let mut rng = stream(seed, "workload/races");
        let mut races = Vec::new();
        for fixture in subjects {
            if !rng.chance(settings.racing_subjects) {
                continue;
            }
            let story: Vec<&EventSpec> = events
                .iter()
                .filter(|event| event.tenant == fixture.tenant && event.subject == fixture.subject)
                .collect();
            let Some(first) = story.first() else { continue };
            let kinds: BTreeSet<&str> = story.iter().map(|event| event.kind.as_str()).collect();
            let race = self.declared.races.iter().find(|race| {
                kinds.contains(race.when.as_str())
                    && !kinds.contains(race.add.as_str())
                    && !race.unless.iter().any(|kind| kinds.contains(kind.as_str()))
            });
            let Some(race) = race else { continue };
            let account = first.account.clone();
            let created_ms = rng.between(0, settings.emit_window_ms.max(2) - 1);
            let mut drawn_before = BTreeMap::new();
            races.push(self.event(
                &mut rng,
                &race.add,
                &account,
                fixture,
                created_ms,
                declared,
                &mut drawn_before,
            ));
        }
        events.extend(races);
    }
}

fn check_ratio((numerator, denominator): (u32, u32), field: &str) -> Result<(), String> {
    if denominator == 0 || numerator > denominator {
        return Err(format!(
            "{field}: [{numerator}, {denominator}] is not a chance (a share of at most 1)"
        ));
    }
    Ok(())
}

fn check_value(
    name: &str,
    value: &ValueDeclaration,
    fields: &BTreeMap<String, FieldDeclaration>,
) -> Result<(), String> {
    // `kind.field` draws the field for one kind of event only.
    let field = name.rsplit_once('.').map_or(name, |(_, field)| field);
    let ways = usize::from(value.between.is_some())
        + usize::from(value.hex.is_some())
        + usize::from(value.from_fixture);
    if ways != 1 {
        return Err(format!(
            "values.{name}: give exactly one of between, hex and from_fixture"
        ));
    }
    if let Some((low, high)) = value.between
        && low > high
    {
        return Err(format!("values.{name}: between [{low}, {high}] is empty"));
    }
    if let Some(reuse) = value.reuse {
        check_ratio(reuse, &format!("values.{name}.reuse"))?;
    }
    if value.from_fixture && !fields.get(field).is_some_and(|declared| declared.from_fixture) {
        return Err(format!(
            "values.{name}: from_fixture needs [fields.{field}] with from_fixture = true"
        ));
    }
    Ok(())
}

/// One entity's name padded to the receiver's longest, and the first event created at time 0.
fn put_a_name_at_the_edge(seed: u64, subjects: &mut [SubjectFixture], events: &mut [EventSpec]) {
    use commitgap::receiver::NAME_CHARS_MAX;
    let mut rng = stream(seed, "workload/edges");
    if subjects.is_empty() {
        return;
    }
    let fixture = &mut subjects[usize::try_from(rng.below(subjects.len() as u64)).unwrap_or(0)];
    let mut longest = format!("{}-", fixture.subject);
    longest.extend(std::iter::repeat_n(
        'x',
        NAME_CHARS_MAX.saturating_sub(longest.len()),
    ));
    for event in events.iter_mut() {
        if event.tenant == fixture.tenant && event.subject == fixture.subject {
            event.subject.clone_from(&longest);
        }
    }
    fixture.subject = longest;
}
