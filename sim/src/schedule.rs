//! Schedules: a run written down as the decisions that made it, readable and editable.
//!
//! A schedule holds the run's fixtures and workload (which orders exist, which events the sender
//! emits and when) and one line per step: which ready item ran, named by its actor and what it
//! was about to do, followed by the choices made during that step, each `| kind value`:
//!
//! ```text
//! receiver-2#1 sql | fault crash crash 12000
//! sender attempt acct-a/evt-1 | to receiver-2 | copies 1
//! relay-1#1 call | provider-latency 35 | lose-reply
//! ```
//!
//! Replaying a schedule uses no randomness. A step line is matched to a ready item with the same
//! label, looking a few lines ahead, so a deleted or moved line does not shift everything after
//! it; a line that matches nothing is skipped and reported, and a step with no line takes the
//! default: the item that became ready first, no fault, the first receiver that is up, the
//! shortest latency. A choice that is never asked for is reported too. Nothing here may panic
//! on an edited schedule: every problem is a report line or an error message.

use std::collections::VecDeque;
use std::fmt;

use serde::{Deserialize, Serialize};

pub use crate::decision::{Decision, DecisionKind};
use crate::system::Fixtures;
use crate::workload::EventSpec;

/// One step: the item that ran and the decisions made while it ran.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StepLine {
    /// The ready item's label, as the world labels ready items (its actor and what it was about
    /// to do).
    pub run: String,
    /// The decisions made during the step, in the order they were made.
    pub decisions: Vec<Decision>,
    /// Parts of the line that are not decisions this build reads, with why; a run reports them
    /// and takes the default for what they meant to decide.
    pub unreadable: Vec<String>,
}

impl fmt::Display for StepLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.run)?;
        for decision in &self.decisions {
            write!(f, " | {decision}")?;
        }
        Ok(())
    }
}

impl StepLine {
    /// Parses a line written by `Display`. Empty parts are ignored, so trailing `|` is harmless;
    /// a part that is not a decision is kept in [`StepLine::unreadable`].
    pub fn parse(line: &str) -> StepLine {
        let mut parts = line.split('|').map(str::trim);
        let run = parts.next().unwrap_or("").to_owned();
        let mut step = StepLine {
            run,
            ..StepLine::default()
        };
        for part in parts.filter(|part| !part.is_empty()) {
            let (kind, value) = part.split_once(' ').unwrap_or((part, ""));
            let decision = DecisionKind::from_name(kind)
                .ok_or_else(|| format!("{kind:?} is not a kind of decision"))
                .and_then(|kind| Decision::parse(kind, value));
            match decision {
                Ok(decision) => step.decisions.push(decision),
                Err(why) => step.unreadable.push(format!("`{part}`: {why}")),
            }
        }
        step
    }

    /// How many of the line's decisions inject a fault.
    pub fn fault_count(&self) -> usize {
        self.decisions
            .iter()
            .filter(|decision| decision.is_fault())
            .count()
    }
}

/// A whole run written down: fixtures, workload and one line per step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// The system's fixtures the run starts from.
    pub fixtures: Fixtures,
    /// The events the sender emits, in workload order.
    pub events: Vec<EventSpec>,
    /// One line per step, as `StepLine` writes it.
    pub steps: Vec<String>,
}

impl Schedule {
    /// Checks every value a run takes from the schedule against the limits and the
    /// contracts of `config`: how many fixtures, events and lines there are, each event's times,
    /// subscriptions and extra deliveries, and every number a choice carries (a clock jump stays
    /// within the skew the relay tolerates). Labels are not checked: a line that names nothing is
    /// skipped when the schedule runs. The error names the field (`events[3].subscriptions`).
    pub fn validate(&self, config: &crate::config::SimConfig) -> Result<(), String> {
        self.validate_fixtures()?;
        self.validate_events(config)?;
        self.check_consistency()?;
        self.validate_steps(config)
    }

    fn validate_fixtures(&self) -> Result<(), String> {
        use crate::limits::{self, check};
        check(
            "fixtures.accounts (how many)",
            self.fixtures.accounts.len(),
            0,
            limits::TENANTS_MAX as usize,
        )?;
        for (index, (account, tenant)) in self.fixtures.accounts.iter().enumerate() {
            Self::check_name(format!("fixtures.accounts[{index}][0]"), account)?;
            Self::check_name(format!("fixtures.accounts[{index}][1]"), tenant)?;
        }
        check(
            "fixtures.subjects (how many)",
            self.fixtures.subjects.len() as u64,
            0,
            limits::ORDERS_MAX,
        )?;
        for (index, subject) in self.fixtures.subjects.iter().enumerate() {
            Self::check_name(format!("fixtures.subjects[{index}].tenant"), &subject.tenant)?;
            Self::check_name(format!("fixtures.subjects[{index}].subject"), &subject.subject)?;
        }
        Ok(())
    }

    fn validate_events(&self, config: &crate::config::SimConfig) -> Result<(), String> {
        use crate::limits::{self, check};
        check("events (how many)", self.events.len(), 0, limits::EVENTS_MAX)?;
        for (index, event) in self.events.iter().enumerate() {
            let field = |part: &str| format!("events[{index}].{part}");
            for (part, value) in [
                ("account", &event.account),
                ("event_id", &event.event_id),
                ("tenant", &event.tenant),
                ("subject", &event.subject),
                ("kind", &event.kind),
            ] {
                Self::check_name(field(part), value)?;
            }
            // Nothing scheduled after the run's last moment can happen in it, and an event
            // created at that moment could only be judged lost: half the liveness bound is left
            // to settle it in, as drawn workloads leave far more.
            let end_ms = config.fault_phase_ms.saturating_add(config.liveness_ms_max / 2);
            let within_run = "(within fault_phase_ms + liveness_ms_max / 2)";
            check(
                &field(&format!("created_ms {within_run}")),
                event.created_ms,
                0,
                end_ms,
            )?;
            check(
                &field(&format!("deliver_at_ms {within_run}")),
                event.deliver_at_ms,
                0,
                end_ms,
            )?;
            // The payments domain's event contract, which the reference receiver enforces: a
            // payment or an update carries a positive amount no larger than the receiver's
            // limit. The workload is the run's ground truth, so an event that breaks the
            // contract would make a correct receiver's 422 look like a lost event. (A seed file
            // is read before its system, and so its domain, is known; other domains' events
            // have no such kinds.)
            if crate::domain::payments::carries_amount(&event.kind) {
                check(
                    &field("amount_cents (of a payment or an update)"),
                    event.number(crate::domain::payments::AMOUNT).unwrap_or(0),
                    1,
                    commitgap::receiver::AMOUNT_CENTS_MAX,
                )?;
            }
            check(
                &field("subscriptions"),
                event.subscriptions,
                1,
                limits::SUBSCRIPTIONS_MAX,
            )?;
            check(
                &field("extra_deliveries (how many)"),
                event.extra_deliveries.len(),
                0,
                limits::EXTRA_DELIVERIES_MAX,
            )?;
            for (extra_index, extra) in event.extra_deliveries.iter().enumerate() {
                check(
                    &field(&format!("extra_deliveries[{extra_index}].at_ms {within_run}")),
                    extra.at_ms,
                    0,
                    end_ms,
                )?;
            }
        }
        let streams: usize = self.events.iter().map(|event| event.subscriptions as usize).sum();
        check(
            "events (their subscriptions added up)",
            streams,
            0,
            limits::STREAMS_MAX,
        )?;
        let extras: usize = self.events.iter().map(|event| event.extra_deliveries.len()).sum();
        check(
            "events (their extra deliveries added up)",
            extras,
            0,
            limits::ALL_EXTRA_DELIVERIES_MAX,
        )?;
        Ok(())
    }

    fn validate_steps(&self, config: &crate::config::SimConfig) -> Result<(), String> {
        use crate::limits::{self, check};
        check(
            "steps (how many)",
            self.steps.len(),
            0,
            limits::SCHEDULE_STEPS_MAX,
        )?;
        for (index, line) in self.steps.iter().enumerate() {
            let step = StepLine::parse(line);
            if let Some(unreadable) = step.unreadable.first() {
                return Err(format!(
                    "steps[{index}]: {}",
                    crate::files::clip_quoted(unreadable, 80)
                ));
            }
            for decision in &step.decisions {
                decision.check(config).map_err(|error| {
                    format!(
                        "steps[{index}]: decision `{}`: {error}",
                        crate::files::clip(&decision.to_string(), 80)
                    )
                })?;
            }
        }
        Ok(())
    }

    /// Checks that a name from a seed file is neither empty nor longer than names may be.
    fn check_name(field: String, value: &str) -> Result<(), String> {
        crate::limits::check(
            &format!("{field} (its length)"),
            value.chars().count(),
            1,
            crate::limits::NAME_CHARS_MAX,
        )
    }

    /// Checks that the workload is one a sender could produce: accounts are named once, every
    /// event comes from a known account and names that account's tenant, and no account uses an
    /// event id twice. (An event may name an order that does not exist: the receiver must reject
    /// it, which is a story the simulator tells on purpose.)
    fn check_consistency(&self) -> Result<(), String> {
        let mut tenant_of = std::collections::BTreeMap::new();
        for (index, (account, tenant)) in self.fixtures.accounts.iter().enumerate() {
            if tenant_of.insert(account.as_str(), tenant.as_str()).is_some() {
                return Err(format!(
                    "fixtures.accounts[{index}][0] names account {account:?} a second time; each account is listed once"
                ));
            }
        }
        let mut seen = std::collections::BTreeSet::new();
        for (index, event) in self.events.iter().enumerate() {
            match tenant_of.get(event.account.as_str()) {
                None => {
                    return Err(format!(
                        "events[{index}].account is {:?}, which is not in fixtures.accounts; an event comes from a known account",
                        crate::files::clip(&event.account, 80)
                    ));
                }
                Some(tenant) if *tenant != event.tenant => {
                    return Err(format!(
                        "events[{index}].tenant is {:?}, but account {:?} belongs to tenant {tenant:?}",
                        crate::files::clip(&event.tenant, 80),
                        event.account
                    ));
                }
                Some(_) => {}
            }
            if !seen.insert((event.account.as_str(), event.event_id.as_str())) {
                return Err(format!(
                    "events[{index}].event_id {:?} is used twice by account {:?}; event ids are unique within an account",
                    crate::files::clip(&event.event_id, 80),
                    event.account
                ));
            }
        }
        Ok(())
    }

    /// Every fault model the schedule's decisions are the doing of, by name.
    pub fn fault_models(&self) -> std::collections::BTreeSet<String> {
        let mut models = std::collections::BTreeSet::new();
        for line in &self.steps {
            for decision in StepLine::parse(line).decisions {
                models.extend(decision.models().into_iter().map(str::to_owned));
            }
        }
        models
    }

    /// Refuses a schedule holding decisions of a fault model that `config` turns off: its
    /// actions would run, credited to a model the file says was off, and the file would no
    /// longer say which model made the failure. One line naming the model and the fix.
    pub fn check_fault_models_on(&self, config: &crate::config::SimConfig) -> Result<(), String> {
        for model in self.fault_models() {
            if config.faults.get(&model).is_some_and(crate::faults::turned_off) {
                return Err(format!(
                    "steps hold decisions of fault model {model:?}, which the configuration beside them turns off (faults.{model}.enabled); turn it on or remove its decisions"
                ));
            }
        }
        Ok(())
    }

    /// How many fault choices the schedule makes.
    pub fn fault_count(&self) -> usize {
        self.steps
            .iter()
            .map(|line| StepLine::parse(line).fault_count())
            .sum()
    }

    /// What kind of run this is, leaving out names, times and counts: the kinds of event in
    /// workload order, then the faults in the order they fired, a repeat of the same fault in a
    /// row written once. Two failures of one invariant with the same shape are the same story.
    pub fn shape(&self) -> String {
        let events: Vec<String> = self.events.iter().map(|event| event.kind.clone()).collect();
        let mut faults: Vec<String> = Vec::new();
        for line in &self.steps {
            for decision in StepLine::parse(line).decisions {
                if let Some(label) = decision.fault_label()
                    && faults.last() != Some(&label)
                {
                    faults.push(label);
                }
            }
        }
        format!("events {}; faults {}", or_none(&events), or_none(&faults))
    }
}

fn or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(",")
    }
}

/// How far ahead a step line may be matched when the next one names no ready item, unless a
/// run asks for another distance. A schedule a run wrote down matches at distance zero on every
/// step, so the distance matters only for edited schedules: far enough that a few lines left
/// behind by an edit do not hide the rest, near enough that a common label (`relay-1#1 wake`)
/// far ahead is not taken for one nearby. Measured on the planted bugs' shrinking, 24 did best
/// of 8, 24 and 64; the shrinker tries the others too.
pub const DEFAULT_LOOKAHEAD: usize = 24;

/// Where a run's decisions come from.
#[derive(Debug)]
pub enum Decider {
    /// Draw from the seeded streams; write each step down when `record` is on.
    Seeded {
        /// Whether each step is written down.
        record: bool,
        /// The steps written down so far.
        steps: Vec<StepLine>,
    },
    /// Follow a schedule, and write down what actually happened.
    Scheduled {
        /// Schedule lines not yet matched to a step, in order.
        pending: VecDeque<StepLine>,
        /// How many pending lines a step may look ahead to find a match (at least one).
        lookahead: usize,
        /// The line matched to the current step, less the decisions already taken from it.
        current: StepLine,
        /// The steps as they actually ran, written down so far.
        steps: Vec<StepLine>,
        /// Lines skipped and decisions unused so far, one message each.
        report: Vec<String>,
        /// Once every line is used, draw the rest of the run from the seeded streams instead of
        /// taking the defaults: a branch of a written run (see [`Decider::branching`]).
        draw_after: bool,
        /// Set from the first step that found no line left, in a branching run: from then on
        /// every decision is drawn.
        drawing: bool,
        /// Leave out a line's fault decisions once the world has healed (see
        /// [`Decider::ignores_fault`]).
        faults_end_at_heal: bool,
    },
}

impl Decider {
    /// Draws from the seeded streams, writing each step down when `record` is on.
    pub fn seeded(record: bool) -> Decider {
        Decider::Seeded {
            record,
            steps: Vec::new(),
        }
    }

    /// Follows `lines`, matching each within `lookahead` lines (at least one).
    pub fn scheduled(lines: &[String], lookahead: usize) -> Decider {
        Decider::Scheduled {
            pending: lines.iter().map(|line| StepLine::parse(line)).collect(),
            lookahead: lookahead.max(1),
            current: StepLine::default(),
            steps: Vec::new(),
            report: Vec::new(),
            draw_after: false,
            drawing: false,
            faults_end_at_heal: false,
        }
    }

    /// Follows `lines` as [`Decider::scheduled`] does, then draws every later step and decision
    /// from the seeded streams, writing everything down: a new run that starts as a written one
    /// did. A line's fault decision met after the heal is left out, as no fault model acts
    /// then; edited lines could otherwise carry a fault past the fault phase, and a system
    /// would be judged against faults its liveness is not promised to survive.
    pub fn branching(lines: &[String], lookahead: usize) -> Decider {
        let mut decider = Decider::scheduled(lines, lookahead);
        if let Decider::Scheduled {
            draw_after,
            faults_end_at_heal,
            ..
        } = &mut decider
        {
            *draw_after = true;
            *faults_end_at_heal = true;
        }
        decider
    }

    /// Whether decisions come from a schedule rather than the seeded streams (in a branching
    /// run, until its lines run out).
    pub fn is_scheduled(&self) -> bool {
        matches!(self, Decider::Scheduled { drawing: false, .. })
    }

    /// Whether `decision`, taken from a line after the world healed, is to be left out (in a
    /// branching run; a key's lifetime is the provider's contract, not a fault, so a `forget`
    /// stays).
    pub fn ignores_fault(&self, decision: &Decision, healed: bool) -> bool {
        healed
            && matches!(
                self,
                Decider::Scheduled {
                    faults_end_at_heal: true,
                    drawing: false,
                    ..
                }
            )
            && decision.is_fault()
            && !matches!(decision, Decision::Forget { .. })
    }

    /// In a branching run, moves to drawing once no line is left; called before each step picks
    /// its item. Every decision of a step comes from one source, so the switch is made only here.
    pub fn start_drawing_if_done(&mut self) {
        if let Decider::Scheduled {
            pending,
            draw_after: true,
            drawing,
            ..
        } = self
            && pending.is_empty()
        {
            *drawing = true;
        }
    }

    /// Whether steps are written down.
    pub fn records(&self) -> bool {
        !matches!(self, Decider::Seeded { record: false, .. })
    }

    /// In a scheduled run, picks which of the ready items (given by label) runs this step: the
    /// first pending line that names one of them, within the look-ahead. Lines passed over are
    /// reported as skipped. Returns the index into `labels`, or `None` for the default.
    pub fn pick_scheduled(&mut self, labels: &[String], step: u64) -> Option<usize> {
        let Decider::Scheduled {
            pending,
            lookahead,
            current,
            report,
            ..
        } = self
        else {
            return None;
        };
        let window = pending.len().min(*lookahead);
        let found = (0..window).find_map(|offset| {
            labels
                .iter()
                .position(|label| *label == pending[offset].run)
                .map(|index| (offset, index))
        });
        let Some((offset, index)) = found else {
            *current = StepLine::default();
            return None;
        };
        for skipped in pending.drain(..offset) {
            report.push(format!(
                "step {step}: skipped `{skipped}`: nothing it names was ready"
            ));
        }
        *current = pending.pop_front().expect("the window held this line");
        Some(index)
    }

    /// Starts writing down a step whose item has `label`.
    pub fn begin_step(&mut self, label: String) {
        match self {
            Decider::Seeded { record: true, steps } | Decider::Scheduled { steps, .. } => {
                steps.push(StepLine {
                    run: label,
                    ..StepLine::default()
                });
            }
            Decider::Seeded { record: false, .. } => {}
        }
    }

    /// In a scheduled run, takes the current step's first decision of `kind`, if it has one.
    pub fn take_scheduled(&mut self, kind: DecisionKind) -> Option<Decision> {
        let Decider::Scheduled {
            current,
            drawing: false,
            ..
        } = self
        else {
            return None;
        };
        let position = current
            .decisions
            .iter()
            .position(|decision| decision.kind() == kind)?;
        Some(current.decisions.remove(position))
    }

    /// Writes down a decision of the current step.
    pub fn note(&mut self, decision: &Decision) {
        let steps = match self {
            Decider::Seeded { record: true, steps } | Decider::Scheduled { steps, .. } => steps,
            Decider::Seeded { record: false, .. } => return,
        };
        if let Some(step) = steps.last_mut() {
            step.decisions.push(decision.clone());
        }
    }

    /// Reports the decisions of the step that just ended that nothing asked for, and the parts
    /// of its line that could not be read.
    pub fn end_step(&mut self, step: u64) {
        if let Decider::Scheduled { current, report, .. } = self {
            for decision in current.decisions.drain(..) {
                report.push(format!("step {step}: decision `{decision}` no longer applies"));
            }
            for unreadable in current.unreadable.drain(..) {
                report.push(format!("step {step}: skipped {unreadable}"));
            }
        }
    }

    /// The steps written down, and (for a scheduled run) what was skipped.
    pub fn finish(self) -> (Vec<String>, Vec<String>) {
        match self {
            Decider::Seeded { steps, .. } => (steps.iter().map(ToString::to_string).collect(), Vec::new()),
            Decider::Scheduled {
                pending,
                steps,
                mut report,
                ..
            } => {
                for line in pending {
                    report.push(format!("end: `{line}` was never reached"));
                }
                (steps.iter().map(ToString::to_string).collect(), report)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_branch_leaves_out_faults_after_the_heal_and_draws_once_its_lines_run_out() {
        let lose = Decision::LoseAnswer {
            model: "lost-ack".to_owned(),
        };
        let forget = Decision::Forget {
            at_ms: 5,
            model: "key-expiry".to_owned(),
        };
        let lines = ["sender emit acct-a/evt-1 | lose-answer lost-ack".to_owned()];
        let mut branch = Decider::branching(&lines, DEFAULT_LOOKAHEAD);
        assert!(branch.ignores_fault(&lose, true));
        assert!(!branch.ignores_fault(&lose, false));
        assert!(
            !branch.ignores_fault(&forget, true),
            "a key's lifetime is no fault"
        );
        assert!(!Decider::scheduled(&lines, DEFAULT_LOOKAHEAD).ignores_fault(&lose, true));
        branch.start_drawing_if_done();
        assert!(branch.is_scheduled(), "a line is left");
        assert_eq!(
            branch.pick_scheduled(&["sender emit acct-a/evt-1".to_owned()], 1),
            Some(0)
        );
        branch.begin_step("sender emit acct-a/evt-1".to_owned());
        assert_eq!(
            branch.take_scheduled(DecisionKind::LoseAnswer),
            Some(lose.clone())
        );
        branch.end_step(1);
        branch.start_drawing_if_done();
        assert!(!branch.is_scheduled(), "no line is left: the rest is drawn");
        assert!(branch.records(), "and written down");
        assert_eq!(branch.take_scheduled(DecisionKind::LoseAnswer), None);
    }

    #[test]
    fn step_lines_round_trip_and_tolerate_edits() {
        let line = StepLine::parse("relay-1#1 call | provider-latency 35 | lose-reply lost-ack");
        assert_eq!(line.run, "relay-1#1 call");
        assert_eq!(line.decisions.len(), 2);
        assert_eq!(
            line.to_string(),
            "relay-1#1 call | provider-latency 35 | lose-reply lost-ack"
        );
        assert_eq!(line.fault_count(), 1);
        // A line written before decisions named their model credits the built-in that alone
        // made them then, and is written back with its name.
        let old = StepLine::parse("relay-1#1 call | lose-reply");
        assert_eq!(old.to_string(), "relay-1#1 call | lose-reply lost-ack");
        let edited = StepLine::parse("  sender emit acct-a/evt-1 |  | copies 2 |");
        assert_eq!(edited.run, "sender emit acct-a/evt-1");
        assert_eq!(
            edited.decisions,
            vec![Decision::Copies {
                count: 2,
                model: "duplicate-delivery".to_owned()
            }]
        );
        assert_eq!(StepLine::parse("").run, "");
        let typo = StepLine::parse("a | copiez 2 | lose-answer my-fault");
        assert_eq!(
            typo.decisions,
            vec![Decision::LoseAnswer {
                model: "my-fault".to_owned()
            }]
        );
        assert_eq!(typo.unreadable.len(), 1);
        assert!(typo.unreadable[0].contains("copiez"), "{:?}", typo.unreadable);
    }

    #[test]
    fn scheduled_picks_match_by_label_within_the_lookahead() {
        let lines: Vec<String> = ["a", "b | fault crash crash 5", "c"]
            .iter()
            .map(|line| (*line).to_owned())
            .collect();
        let mut decider = Decider::scheduled(&lines, DEFAULT_LOOKAHEAD);
        let labels = ["x".to_owned(), "b".to_owned()];
        assert_eq!(
            decider.pick_scheduled(&labels, 1),
            Some(1),
            "a is skipped, b matches"
        );
        assert_eq!(
            decider
                .take_scheduled(DecisionKind::Fault)
                .map(|decision| decision.value()),
            Some("crash crash 5".to_owned())
        );
        assert_eq!(decider.take_scheduled(DecisionKind::Fault), None);
        assert_eq!(
            decider.pick_scheduled(&["y".to_owned()], 2),
            None,
            "c waits: y is not c"
        );
        let (_, report) = decider.finish();
        assert_eq!(report.len(), 2, "{report:?}");
        assert!(report[0].contains("skipped `a`"));
        assert!(report[1].contains("`c` was never reached"));
    }
}
