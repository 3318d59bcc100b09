//! What a run reached, as the explorer reads it from the run's records: the features that make
//! a run worth keeping, and how close it came to each boundary.
//!
//! A feature is a short text naming something a run did, so that the explorer can tell a run
//! that reached something new from one that repeated what the corpus holds:
//! - per obligation, short stretches of what happened to it in order (its lease taken, extended
//!   or given up; the provider's answers to its requests: accepted, 409, 429, a timeout, a reply
//!   lost, its key forgotten; a crash, a pause or a clock step of the worker holding it), as
//!   `key: lease > 409 > crash`;
//! - per table, two statements of different tasks in a row where one writes, and whether the
//!   first task's transaction was still open: the interleavings SQLite's locking allows;
//! - where in a process's work each crash landed (after which statement);
//! - the coverage situations and the fault models that fired, and a team's own "sometimes"
//!   situations ([`super::Sometimes`]).
//!
//! A boundary measure is a distance in milliseconds from a rule's edge (0 is on it): a lease's
//! time left when its holder's call returned, a retry's distance from its key's forgetting, a
//! stall against the longest promised, a clock's offset against the skew tolerated, the
//! provider's late act against its processing bound, and a team's own
//! ([`super::BoundaryMeasure`]). A run that comes closer than any before is kept.
//!
//! Reading is all this module does: it draws nothing and changes no run. It works on the
//! records of any system, since it reads the trace and the obligation changes the system's own
//! row decoder reported, never a table by name.

use std::collections::BTreeMap;

use commitgap::provider::ProviderReply;

use crate::config::SimConfig;
use crate::run::RunOutcome;
use crate::sql::{Statement, Verb};
use crate::trace::{Actor, CallOutcome, Happening, Observed, TraceStep};

/// The longest stretch of an obligation's story one feature names. Stretches of two and three
/// give the explorer small steps to climb by; longer ones would make nearly every run new.
const STORY_STRETCH_MAX: usize = 3;

/// What one run reached.
#[derive(Debug, Clone, Default)]
pub struct RunFeedback {
    /// Each feature the run reached, with the first step it was reached at.
    pub features: BTreeMap<String, u64>,
    /// Each boundary the run came near, with its closest distance (milliseconds, 0 on the edge)
    /// and the step it came that close at.
    pub boundaries: BTreeMap<String, (i64, u64)>,
    /// The step at which the world healed, if it did: faults placed after it do nothing.
    pub heal_step: Option<u64>,
    /// Steps at which something's outcome was left uncertain (a call timed out, the provider
    /// was still working, a reply or an answer was lost, a key was forgotten, a process crashed
    /// or stalled): where a system's handling of uncertainty is tested, and where the explorer
    /// branches to test it again in other ways, each with what it was (a word of an
    /// obligation's story, `answer-lost`, `crashed` or `pause`). The first 64 only.
    pub hazards: Vec<(u64, &'static str)>,
}

/// Hazards a run keeps: enough places to branch from, bounded memory.
const HAZARDS_KEPT: usize = 64;

/// The words of an obligation's story that leave its outcome uncertain.
const HAZARD_WORDS: [&str; 10] = [
    "provider-busy",
    "timeout",
    "unavailable",
    "reply-lost",
    "409",
    "429",
    "key-forgotten",
    "holder-crashed",
    "holder-paused",
    "provider-acts-late",
];

impl RunFeedback {
    fn reach(&mut self, feature: String, step: u64) {
        self.features.entry(feature).or_insert(step);
    }

    fn hazard(&mut self, step: u64, kind: &'static str) {
        if self.hazards.len() < HAZARDS_KEPT && self.hazards.last() != Some(&(step, kind)) {
            self.hazards.push((step, kind));
        }
    }

    fn near(&mut self, boundary: &str, distance_ms: i64, step: u64) {
        let distance_ms = distance_ms.max(0);
        let closest = self
            .boundaries
            .entry(boundary.to_owned())
            .or_insert((distance_ms, step));
        if distance_ms < closest.0 {
            *closest = (distance_ms, step);
        }
    }
}

/// A process's role as features name it: `receiver-2#1` is `receiver`.
fn role(process: &str) -> &str {
    process.split(['-', '#']).next().unwrap_or(process)
}

/// What an obligation's story says for a provider reply.
fn reply_word(reply: &Result<ProviderReply, String>) -> &'static str {
    match reply {
        Ok(ProviderReply::Accepted { replayed: false, .. }) => "accepted",
        Ok(ProviderReply::Accepted { replayed: true, .. }) => "replayed",
        Ok(ProviderReply::Found { .. }) => "found",
        Ok(ProviderReply::NotFound) => "not-found",
        Ok(ProviderReply::Conflict) => "409",
        Ok(ProviderReply::RateLimited { .. }) => "429",
        Ok(ProviderReply::Rejected { .. }) => "rejected",
        Err(error) if error.contains("timed out") || error.contains("timeout") => "timeout",
        Err(_) => "unavailable",
    }
}

/// Where a happening is read: its step, the virtual time, and the task (process and task
/// number) that acted.
struct At {
    step: u64,
    now_ms: i64,
    task: (String, u64),
}

/// The state the reader keeps while it walks a trace.
#[derive(Default)]
struct Reader {
    feedback: RunFeedback,
    /// Each obligation's story so far, with repeats of one word folded together.
    stories: BTreeMap<String, Vec<&'static str>>,
    /// The obligation each task holds the lease on, by process and task, and since when.
    holding: BTreeMap<(String, u64), (String, i64)>,
    /// The obligation each idempotency key was last sent for.
    key_owner: BTreeMap<String, String>,
    /// The last statement each process ran, as `VERB table`.
    last_statement: BTreeMap<String, String>,
    /// Per table, the last task to touch it: its process, task, what it did, and whether it
    /// wrote.
    last_touch: BTreeMap<String, (String, u64, String, bool)>,
    /// The tasks with a transaction open, by process and task.
    open_transactions: std::collections::BTreeSet<(String, u64)>,
    /// When (and at which step) each key was sent, when the provider first performed its
    /// effect, and when it forgot it.
    sends_ms: BTreeMap<String, Vec<(i64, u64)>>,
    effect_ms: BTreeMap<String, i64>,
    forgotten_ms: BTreeMap<String, Vec<i64>>,
}

impl Reader {
    fn tell(&mut self, obligation: &str, word: &'static str, step: u64) {
        let story = self.stories.entry(obligation.to_owned()).or_default();
        if story.last() == Some(&word) {
            return;
        }
        story.push(word);
        if HAZARD_WORDS.contains(&word) {
            self.feedback.hazard(step, word);
        }
        let length = story.len();
        // The word alone too: where an obligation first met a 409 is a place to branch from.
        let mut stretches = vec![word.to_owned()];
        for stretch in 2..=STORY_STRETCH_MAX.min(length) {
            stretches.push(story[length - stretch..].join(" > "));
        }
        for stretch in stretches {
            self.feedback.reach(format!("obligation: {stretch}"), step);
        }
    }

    /// The obligations the tasks of `process` hold leases on.
    fn held_by(&self, process: &str) -> Vec<String> {
        self.holding
            .iter()
            .filter(|((holder, _), _)| holder == process)
            .map(|(_, (obligation, _))| obligation.clone())
            .collect()
    }

    fn read_step(&mut self, record: &TraceStep, config: &SimConfig) {
        let process = match &record.actor {
            Actor::Process(id) => Some(id.to_string()),
            _ => None,
        };
        let at = At {
            step: record.step,
            now_ms: record.time_ms,
            task: (process.clone().unwrap_or_default(), record.task.unwrap_or(0)),
        };
        for happening in &record.happened {
            match happening {
                Happening::Sql {
                    statement, outcome, ..
                } => {
                    if let Some(process) = &process {
                        self.read_statement(process, &at.task, statement, outcome, at.step);
                    }
                }
                Happening::Committed { observed, .. } => {
                    self.open_transactions.remove(&at.task);
                    for change in observed {
                        self.read_change(change, &at.task, at.now_ms, at.step);
                    }
                }
                Happening::TaskEndedInTransaction => {
                    self.open_transactions.remove(&at.task);
                }
                Happening::Call {
                    send,
                    key,
                    outcome,
                    reply_lost,
                } => self.read_call(&at, config, *send, key, outcome, *reply_lost),
                Happening::Reply(reply) => {
                    if let Some((obligation, since_ms)) = self.holding.get(&at.task).cloned() {
                        if reply.is_err() {
                            self.tell(&obligation, reply_word(reply), at.step);
                        }
                        let left_ms = config.relay.lease_held_ms() - (at.now_ms - since_ms);
                        self.feedback
                            .near("lease-left-when-call-returned", left_ms.abs(), at.step);
                    }
                }
                Happening::ProviderFinishes { key, outcome } => {
                    if let Ok(ProviderReply::Accepted { .. }) = outcome {
                        self.effect_ms.entry(key.clone()).or_insert(at.now_ms);
                    }
                    let obligation = self.key_owner.get(key).cloned().unwrap_or_else(|| key.clone());
                    self.tell(&obligation, "provider-acts-late", at.step);
                }
                Happening::KeyForgotten { key, .. } => {
                    self.forgotten_ms.entry(key.clone()).or_default().push(at.now_ms);
                    let obligation = self.key_owner.get(key).cloned().unwrap_or_else(|| key.clone());
                    self.tell(&obligation, "key-forgotten", at.step);
                }
                Happening::AnswerLost { .. } | Happening::AnswerLostInCrash => {
                    self.feedback.hazard(at.step, "answer-lost");
                }
                Happening::Heal { .. } => {
                    self.feedback.heal_step.get_or_insert(at.step);
                }
                Happening::Failed { invariant, .. } => {
                    self.feedback.reach(format!("failed: {invariant}"), at.step);
                }
                other => self.read_fault(&at, config, other),
            }
        }
    }

    /// A provider call: the word it adds to its obligation's story, and what it says of the
    /// key's effect and the provider's processing bound.
    fn read_call(
        &mut self,
        at: &At,
        config: &SimConfig,
        send: bool,
        key: &str,
        outcome: &CallOutcome,
        reply_lost: bool,
    ) {
        let obligation = self
            .holding
            .get(&at.task)
            .map_or_else(|| key.to_owned(), |(obligation, _)| obligation.clone());
        self.key_owner.insert(key.to_owned(), obligation.clone());
        if send {
            self.sends_ms
                .entry(key.to_owned())
                .or_default()
                .push((at.now_ms, at.step));
            if let CallOutcome::Replied(Ok(ProviderReply::Accepted { .. })) = outcome {
                self.effect_ms.entry(key.to_owned()).or_insert(at.now_ms);
            }
        }
        let word = match outcome {
            CallOutcome::Replied(reply) if send => reply_word(reply),
            CallOutcome::Replied(reply) => match reply_word(reply) {
                "found" => "lookup-found",
                "not-found" => "lookup-not-found",
                _ => "lookup-failed",
            },
            CallOutcome::Busy { for_ms } => {
                // The provider acts late: how near the end of its processing bound.
                let bound_ms = config.relay.provider_act_ms_max;
                if bound_ms > 0 {
                    self.feedback.near(
                        "provider-late-act-vs-processing-bound",
                        bound_ms - for_ms,
                        at.step,
                    );
                }
                "provider-busy"
            }
        };
        self.tell(&obligation, word, at.step);
        if reply_lost {
            self.tell(&obligation, "reply-lost", at.step);
        }
    }

    /// A crash, a pause or a clock step: where it landed, and the obligations it touched.
    fn read_fault(&mut self, at: &At, config: &SimConfig, happening: &Happening) {
        let after = |reader: &Self, process: &str| {
            reader
                .last_statement
                .get(process)
                .cloned()
                .unwrap_or_else(|| "nothing".to_owned())
        };
        match happening {
            Happening::Crash { process: crashed, .. } => {
                self.feedback.hazard(at.step, "crashed");
                let last = after(self, crashed);
                self.feedback
                    .reach(format!("crash: {} after {last}", role(crashed)), at.step);
                for obligation in self.held_by(crashed) {
                    self.tell(&obligation, "holder-crashed", at.step);
                }
                self.holding.retain(|(holder, _), _| holder != crashed);
                self.open_transactions.retain(|(holder, _)| holder != crashed);
            }
            Happening::Pause {
                process: paused,
                duration_ms,
            } => {
                self.feedback.hazard(at.step, "pause");
                self.feedback.near(
                    "stall-vs-longest-promised",
                    config.relay.stall_ms_max - duration_ms,
                    at.step,
                );
                let last = after(self, paused);
                self.feedback
                    .reach(format!("pause: {} after {last}", role(paused)), at.step);
                if let Some((obligation, _)) = self.holding.get(&at.task).cloned() {
                    self.tell(&obligation, "holder-paused", at.step);
                }
            }
            Happening::ClockSet {
                process: moved,
                offset_ms,
            } => {
                self.feedback.near(
                    "clock-offset-vs-skew-tolerated",
                    config.relay.clock_skew_ms_max - offset_ms.abs(),
                    at.step,
                );
                for obligation in self.held_by(moved) {
                    self.tell(&obligation, "holder-clock-moved", at.step);
                }
            }
            _ => {}
        }
    }

    fn read_statement(
        &mut self,
        process: &str,
        task: &(String, u64),
        statement: &std::sync::Arc<str>,
        outcome: &crate::trace::SqlOutcome,
        step: u64,
    ) {
        let read = Statement::remembered(statement);
        let label = read.label();
        match read.verb {
            Verb::Begin => {
                self.open_transactions.insert(task.clone());
            }
            Verb::Commit | Verb::Rollback => {
                self.open_transactions.remove(task);
            }
            _ => {}
        }
        if matches!(outcome, crate::trace::SqlOutcome::Failed(_)) {
            self.feedback
                .reach(format!("statement failed: {} {label}", role(process)), step);
        }
        self.last_statement.insert(process.to_owned(), label.clone());
        let Some(table) = read.table.clone() else {
            return;
        };
        let writes = read.changes_rows();
        let here = format!("{} {}", role(process), label);
        if let Some((other_process, other_task, other, other_writes)) = self.last_touch.get(&table)
            && (other_process.as_str(), *other_task) != (task.0.as_str(), task.1)
            && (writes || *other_writes)
        {
            let open = self
                .open_transactions
                .contains(&(other_process.clone(), *other_task));
            let feature = format!(
                "table {table}: {other}{} then {here}",
                if open { " (open)" } else { "" }
            );
            self.feedback.reach(feature, step);
        }
        self.last_touch
            .insert(table, (task.0.clone(), task.1, here, writes));
    }

    fn read_change(&mut self, change: &Observed, task: &(String, u64), now_ms: i64, step: u64) {
        match change {
            Observed::LeaseTaken { operation_key, .. } => {
                self.holding.insert(task.clone(), (operation_key.clone(), now_ms));
                self.tell(operation_key, "lease", step);
            }
            Observed::LeaseExtended { operation_key } => {
                if let Some(held) = self.holding.get_mut(task) {
                    held.1 = now_ms;
                }
                self.tell(operation_key, "extended", step);
            }
            Observed::LeaseReleased { operation_key } => {
                self.holding.remove(task);
                self.tell(operation_key, "released", step);
            }
            Observed::Done { operation_key } => {
                self.holding.remove(task);
                self.tell(operation_key, "done", step);
            }
            Observed::Dead { operation_key } => {
                self.holding.remove(task);
                self.tell(operation_key, "dead", step);
            }
        }
    }

    fn finish(mut self) -> RunFeedback {
        // A key sent again after its effect exists is safe only while the provider remembers
        // the key: how close such a retry came to the moment it was forgotten, from before (a
        // retry after it is the second effect itself, on the edge).
        for (key, &effect_ms) in &self.effect_ms {
            // The forgetting that loses the effect: the first after it was performed (a key
            // stored before, by a request that performed nothing, may be forgotten earlier).
            let Some(&forgotten_ms) = self
                .forgotten_ms
                .get(key)
                .and_then(|times| times.iter().find(|&&at_ms| at_ms > effect_ms))
            else {
                continue;
            };
            for &(sent_ms, step) in self.sends_ms.get(key).into_iter().flatten() {
                if sent_ms > effect_ms {
                    self.feedback
                        .near("retry-before-key-forgotten", forgotten_ms - sent_ms, step);
                }
            }
        }
        self.feedback
    }
}

/// Reads what `outcome` reached; its trace must have been kept.
pub fn read(outcome: &RunOutcome) -> RunFeedback {
    let mut reader = Reader::default();
    for record in outcome.trace.iter().flatten() {
        reader.read_step(record, &outcome.config);
    }
    let end = outcome.steps;
    let mut feedback = reader.finish();
    for situation in outcome.situations.keys() {
        let step = outcome.situation_steps.get(situation).copied().unwrap_or(end);
        feedback.reach(format!("situation: {situation}"), step);
    }
    for (model, fired) in &outcome.faults_fired {
        if *fired > 0 {
            feedback.reach(format!("fault fired: {model}"), end);
        }
    }
    if outcome.unsettled.is_some() {
        feedback.reach("unsettled at the liveness bound".to_owned(), end);
    }
    feedback
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_story_names_its_stretches_and_folds_repeats() {
        let mut reader = Reader::default();
        for word in ["lease", "409", "409", "released", "lease", "accepted"] {
            reader.tell("k", word, 1);
        }
        let features: Vec<&String> = reader.feedback.features.keys().collect();
        assert!(
            features
                .iter()
                .any(|f| f.as_str() == "obligation: lease > 409 > released")
        );
        assert!(
            features
                .iter()
                .any(|f| f.as_str() == "obligation: 409 > released")
        );
        assert!(!features.iter().any(|f| f.contains("409 > 409")), "{features:?}");
        assert!(features.iter().any(|f| f.as_str() == "obligation: lease"));
    }

    #[test]
    fn a_boundary_keeps_the_closest_distance_and_never_goes_below_zero() {
        let mut feedback = RunFeedback::default();
        feedback.near("b", 500, 3);
        feedback.near("b", 200, 9);
        feedback.near("b", 700, 12);
        assert_eq!(feedback.boundaries["b"], (200, 9));
        feedback.near("b", -40, 20);
        assert_eq!(feedback.boundaries["b"], (0, 20));
    }
}
