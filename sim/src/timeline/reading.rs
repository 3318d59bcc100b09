//! The whole trace, read: steps arranged into the columns of the timeline page, with idle steps
//! folded into one grey line per lane, the stretches where a process was down or paused, the
//! key moments, the heal line and the failing column, and the verdict the page opens with.
//!
//! It decides what the page shows but not where: pixels are [`super::layout`]'s job. It never
//! drops the failing step, even when the step looks idle.

use std::collections::{BTreeMap, BTreeSet};

use super::lanes::{Lane, LaneGroup, incarnation_of, lane_of, lane_of_actor};
use super::line::{Fact, Kind, LineFacts, Link, ReadState, Tone, read_step};
use super::parse_digits;
use crate::run::Failure;
use crate::trace::{Actor, Happening, TraceStep, format_time_ms};

/// The mark one lane gets in one column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Glyph {
    pub(super) lane: Lane,
    pub(super) kind: Kind,
    pub(super) tone: Tone,
    pub(super) label: Option<String>,
    pub(super) commit_rows: Option<u64>,
    pub(super) key_expired: bool,
}

/// One column: a step that says something, or the heal line.
#[derive(Debug, Clone)]
pub(super) struct Column {
    pub(super) step: u64,
    pub(super) time_ms: i64,
    /// The full trace line.
    pub(super) text: String,
    pub(super) glyphs: Vec<Glyph>,
    pub(super) links: Vec<Link>,
    pub(super) kinds: BTreeSet<Kind>,
    pub(super) heal: bool,
    /// The line names something the failure's evidence names.
    pub(super) related: bool,
}

/// A lane's consecutive idle steps, drawn as one thin line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct IdleRun {
    pub(super) lane: Lane,
    /// The gap (between columns) the first and the last idle step fell into.
    pub(super) first_gap: usize,
    pub(super) last_gap: usize,
    pub(super) first_line: String,
    pub(super) last_line: String,
    pub(super) steps: u64,
    pub(super) failed_polls: u64,
}

/// A stretch of a lane where its process was down or paused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Band {
    pub(super) lane: Lane,
    pub(super) paused: bool,
    pub(super) first_column: usize,
    /// The column the stretch ends in; `None` runs to the end of the chart.
    pub(super) last_column: Option<usize>,
    pub(super) title: String,
}

/// A key moment, listed below the chart with a link to its column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Moment {
    pub(super) column: usize,
    pub(super) lane: String,
    pub(super) kind: Kind,
    pub(super) text: String,
}

/// The invariant that failed, from the caller or from the trace's `FAILED` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Verdict {
    pub(super) invariant: String,
    pub(super) kind: Option<String>,
    pub(super) step: u64,
    pub(super) time_ms: Option<i64>,
    pub(super) evidence: String,
}

/// Per lane: the incarnations seen.
#[derive(Debug, Default, Clone)]
pub(super) struct LaneInfo {
    pub(super) incarnations: BTreeSet<u64>,
}

/// The whole trace, read and arranged in columns.
#[derive(Debug, Default)]
pub(super) struct Reading {
    pub(super) setup: Option<String>,
    pub(super) lanes: BTreeMap<Lane, LaneInfo>,
    pub(super) columns: Vec<Column>,
    pub(super) idle_runs: Vec<IdleRun>,
    pub(super) bands: Vec<Band>,
    pub(super) moments: Vec<Moment>,
    pub(super) heal_column: Option<usize>,
    pub(super) verdict: Option<Verdict>,
    pub(super) failure_column: Option<usize>,
    /// Identifiers the evidence names (keys, effect ids).
    pub(super) evidence_names: Vec<String>,
    pub(super) unreadable: Vec<String>,
    pub(super) counts: BTreeMap<Kind, u64>,
    pub(super) idle_steps: u64,
    pub(super) last_step: u64,
    pub(super) last_time_ms: i64,
}

pub(super) fn read_trace(steps: &[TraceStep], failure: Option<&Failure>) -> Reading {
    let mut reader = TraceReader::new(verdict_of(steps, failure));
    for step in steps {
        reader.read(step);
    }
    reader.finish()
}

/// Reads a trace line by line into a [`Reading`], keeping what one line needs of the earlier.
struct TraceReader {
    reading: Reading,
    state: ReadState,
    /// The failing step is never folded away, even when it looks idle.
    failing_step: Option<u64>,
    /// Per lane, the idle steps since its last column.
    open_idle: BTreeMap<Lane, IdleRun>,
    /// Per lane, the column of a crash not yet followed by a restart.
    open_down: BTreeMap<Lane, usize>,
    /// Pauses: lane, first column, virtual time they end, and the line that says so.
    pauses: Vec<(Lane, usize, i64, String)>,
    /// The step and time of the last line read, for a line that has neither.
    previous: (u64, i64),
}

impl TraceReader {
    fn new(verdict: Option<Verdict>) -> TraceReader {
        let mut reading = Reading {
            evidence_names: verdict
                .as_ref()
                .map(|verdict| evidence_names(&verdict.evidence))
                .unwrap_or_default(),
            verdict,
            ..Reading::default()
        };
        // These lanes exist in every run, so an empty one says its process never acted.
        for group in [
            LaneGroup::Sender,
            LaneGroup::Provider,
            LaneGroup::Purge,
            LaneGroup::Operator,
        ] {
            reading.lanes.insert(Lane::named(group), LaneInfo::default());
        }
        TraceReader {
            failing_step: reading.verdict.as_ref().map(|verdict| verdict.step),
            reading,
            state: ReadState::default(),
            open_idle: BTreeMap::new(),
            open_down: BTreeMap::new(),
            pauses: Vec::new(),
            previous: (0, 0),
        }
    }

    fn read(&mut self, step: &TraceStep) {
        let line = step.to_string();
        match step.happened.first() {
            Some(Happening::Setup {
                receivers,
                relay_workers,
                ..
            }) => {
                add_setup_lanes(&mut self.reading.lanes, *receivers, *relay_workers);
                self.reading.setup = Some(line);
                return;
            }
            // The failure is drawn from the verdict, on the column of its step.
            Some(Happening::Failed { .. }) => return,
            Some(Happening::Heal { .. }) => {
                self.reading.heal_column = Some(self.reading.columns.len());
                self.previous = (step.step, step.time_ms);
                self.reading.columns.push(Column {
                    step: step.step,
                    time_ms: step.time_ms,
                    text: line,
                    glyphs: Vec::new(),
                    links: Vec::new(),
                    kinds: BTreeSet::new(),
                    heal: true,
                    related: false,
                });
                return;
            }
            _ => {}
        }
        self.previous = (step.step, step.time_ms);
        let facts = read_step(step, &mut self.state);
        let actor = step.actor.to_string();
        if facts.is_idle() && self.failing_step != Some(step.step) {
            let home = lane_of_actor(&step.actor).unwrap_or_else(|| Lane::named(LaneGroup::Other));
            self.fold_idle(&line, home, facts.failed_sql);
        } else {
            self.add_column(&line, step.step, step.time_ms, &step.actor, &actor, facts);
        }
    }

    /// Adds an idle step to its lane's current idle run.
    fn fold_idle(&mut self, line: &str, lane: Lane, failed_poll: bool) {
        self.note_step(self.previous.0, self.previous.1);
        self.reading.idle_steps += 1;
        let gap = self.reading.columns.len();
        let run = self.open_idle.entry(lane.clone()).or_insert_with(|| IdleRun {
            lane,
            first_gap: gap,
            last_gap: gap,
            first_line: line.to_owned(),
            last_line: line.to_owned(),
            steps: 0,
            failed_polls: 0,
        });
        run.last_gap = gap;
        run.last_line = line.to_owned();
        run.steps += 1;
        run.failed_polls += u64::from(failed_poll);
    }

    /// Gives a step that says something its column.
    fn add_column(
        &mut self,
        line: &str,
        step: u64,
        time_ms: i64,
        who: &Actor,
        actor: &str,
        mut facts: LineFacts,
    ) {
        self.note_step(step, time_ms);
        let column = self.reading.columns.len();
        let home = lane_of_actor(who).unwrap_or_else(|| Lane::named(LaneGroup::Other));
        for link in &facts.links {
            self.reading.lanes.entry(link.to.clone()).or_default();
        }
        for fact in &facts.facts {
            self.reading.lanes.entry(fact.lane.clone()).or_default();
            if fact.lane == home {
                note_incarnation(&mut self.reading.lanes, &home, actor);
            }
            // An idle run ends where its lane does something worth a column.
            if let Some(run) = self.open_idle.remove(&fact.lane) {
                self.reading.idle_runs.push(run);
            }
            *self.reading.counts.entry(fact.kind).or_default() += 1;
            self.note_fact(fact, column);
        }
        if let Some((lane, until_ms)) = facts.pause.take() {
            let what = line.to_owned();
            self.pauses.push((lane, column, until_ms, what));
        }
        let related = mentions_any(line, &self.reading.evidence_names);
        self.reading.columns.push(Column {
            step,
            time_ms,
            text: line.to_owned(),
            glyphs: glyphs_of(&facts, &home),
            kinds: facts.facts.iter().map(|fact| fact.kind).collect(),
            links: facts.links,
            heal: false,
            related,
        });
    }

    fn note_step(&mut self, step: u64, time_ms: i64) {
        self.reading.last_step = self.reading.last_step.max(step);
        self.reading.last_time_ms = self.reading.last_time_ms.max(time_ms);
    }

    /// Records what a fact means beyond its mark: a lane going down or coming back, a key moment.
    fn note_fact(&mut self, fact: &Fact, column: usize) {
        match fact.kind {
            Kind::Crash => {
                self.open_down.insert(fact.lane.clone(), column);
            }
            Kind::Restart => {
                if let Some(process) = fact.text.strip_prefix("restart as ") {
                    note_incarnation(&mut self.reading.lanes, &fact.lane, process);
                }
                if let Some(first_column) = self.open_down.remove(&fact.lane) {
                    self.reading.bands.push(Band {
                        lane: fact.lane.clone(),
                        paused: false,
                        first_column,
                        last_column: Some(column),
                        title: format!("{} is down from its crash to its restart", fact.lane.name),
                    });
                }
            }
            _ => {}
        }
        let new_effect = fact.kind == Kind::Provider && fact.tone == Tone::Effect;
        if fact.kind.is_key_moment() || new_effect {
            let text = if new_effect {
                format!("new effect: {}", fact.text)
            } else {
                fact.text.clone()
            };
            self.reading.moments.push(Moment {
                column,
                lane: fact.lane.name.clone(),
                kind: fact.kind,
                text,
            });
        }
    }

    /// Closes what is still open at the end of the trace and finds the failing column.
    fn finish(mut self) -> Reading {
        let reading = &mut self.reading;
        reading.idle_runs.extend(self.open_idle.into_values());
        reading
            .idle_runs
            .sort_by(|a, b| (a.first_gap, &a.lane).cmp(&(b.first_gap, &b.lane)));
        for (lane, first_column) in self.open_down {
            reading.bands.push(Band {
                title: format!("{} is down from its crash to the end of the trace", lane.name),
                lane,
                paused: false,
                first_column,
                last_column: None,
            });
        }
        for (lane, first_column, until_ms, what) in self.pauses {
            // A pause ends at a virtual time, so it ends at the first column at or after it.
            let later = &reading.columns[first_column..];
            let last_column = first_column + later.partition_point(|column| column.time_ms < until_ms);
            reading.bands.push(Band {
                lane,
                paused: true,
                first_column,
                last_column: (last_column < reading.columns.len()).then_some(last_column),
                title: format!("a task is paused until {}: {what}", format_time_ms(until_ms)),
            });
        }
        reading.failure_column = reading.verdict.as_ref().and_then(|verdict| {
            let steps = || reading.columns.iter().map(|column| (column.heal, column.step));
            // The failing step's own column; a liveness verdict may name a step after the last.
            let exact = steps().rposition(|(heal, step)| !heal && step == verdict.step);
            exact.or_else(|| steps().rposition(|(heal, step)| !heal && step <= verdict.step))
        });
        self.reading
    }
}

/// The failure to show: the caller's, or else the one the trace's failed-invariant record says.
fn verdict_of(steps: &[TraceStep], failure: Option<&Failure>) -> Option<Verdict> {
    if let Some(failure) = failure {
        return Some(Verdict {
            invariant: failure.invariant.clone(),
            kind: Some(failure.kind.clone()),
            step: failure.step,
            time_ms: Some(failure.time_ms),
            evidence: failure.message.clone(),
        });
    }
    steps.iter().find_map(|step| match step.happened.first() {
        Some(Happening::Failed { invariant, evidence }) => Some(Verdict {
            invariant: invariant.clone(),
            kind: None,
            step: step.step,
            time_ms: Some(step.time_ms),
            evidence: evidence.clone(),
        }),
        _ => None,
    })
}

/// Lanes the set-up promises, so that a process that never acted still has its lane.
fn add_setup_lanes(lanes: &mut BTreeMap<Lane, LaneInfo>, receivers: u32, relay_workers: u32) {
    for (prefix, count) in [("receiver-", receivers), ("relay-", relay_workers)] {
        for index in 1..=count {
            if let Some(lane) = lane_of(&format!("{prefix}{index}")) {
                lanes.entry(lane).or_default();
            }
        }
    }
}

fn note_incarnation(lanes: &mut BTreeMap<Lane, LaneInfo>, lane: &Lane, process_id: &str) {
    if let Some(incarnation) = incarnation_of(process_id) {
        lanes
            .entry(lane.clone())
            .or_default()
            .incarnations
            .insert(incarnation);
    }
}

/// One glyph per lane: the highest-ranked thing the line says about that lane, with the
/// step's commit and any key expiry as badges.
fn glyphs_of(facts: &LineFacts, home: &Lane) -> Vec<Glyph> {
    let mut by_lane: BTreeMap<&Lane, Glyph> = BTreeMap::new();
    for fact in &facts.facts {
        let glyph = by_lane.entry(&fact.lane).or_insert_with(|| Glyph {
            lane: fact.lane.clone(),
            kind: fact.kind,
            tone: fact.tone,
            label: None,
            commit_rows: None,
            key_expired: false,
        });
        if fact.kind.rank() > glyph.kind.rank() {
            glyph.kind = fact.kind;
            glyph.tone = fact.tone;
        }
        glyph.key_expired |= fact.kind == Kind::KeyExpiry;
        if glyph.label.is_none() {
            glyph.label = fact.label.clone();
        }
    }
    if let Some(glyph) = by_lane.get_mut(home) {
        glyph.commit_rows = facts.commit_rows;
    }
    by_lane.into_values().collect()
}

/// Identifiers in the evidence that trace lines also carry: operation and idempotency keys
/// (`tenant-a/order-1/fulfill/v1`) and effect ids (`shp-3`).
pub(super) fn evidence_names(evidence: &str) -> Vec<String> {
    let mut names = BTreeSet::new();
    let separators = |character: char| {
        character.is_whitespace() || matches!(character, ',' | ';' | '(' | ')' | '\'' | '"' | '[' | ']')
    };
    for token in evidence.split(separators) {
        let token = token.trim_end_matches([':', '.']);
        let is_key = token.matches('/').count() >= 2;
        let is_effect = token
            .strip_prefix("shp-")
            .is_some_and(|number| parse_digits(number).is_some());
        if is_key || is_effect {
            names.insert(token.to_owned());
        }
    }
    names.into_iter().collect()
}

/// Whether `line` contains one of `names` as a whole identifier (so `shp-1` does not match
/// `shp-12`, nor a key its `#retry` variant).
pub(super) fn mentions_any(line: &str, names: &[String]) -> bool {
    let continues = |character: Option<char>| {
        character.is_some_and(|character| {
            character.is_ascii_alphanumeric() || matches!(character, '-' | '#' | '/' | '_')
        })
    };
    names.iter().any(|name| {
        line.match_indices(name.as_str()).any(|(start, _)| {
            let before = line[..start].chars().next_back();
            let after = line[start + name.len()..].chars().next();
            !continues(before) && !continues(after)
        })
    })
}
