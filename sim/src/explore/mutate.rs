//! Mutations: a new run made from a kept one by editing what it decided.
//!
//! A kept run is a configuration and a schedule (one line per step, with the decisions made in
//! it). A mutant keeps a prefix of those lines and draws the rest from a new seed (a branch),
//! or edits the lines: drops, moves or copies a fault decision, pushes a number to its model's
//! bound, swaps two steps, or joins one run's beginning to another's end. Every mutant runs as a
//! branch: once its lines run out, it draws, so an edit early in a run leads somewhere new.
//!
//! A mutant must stay a run the system is promised to survive when it is correct, or a correct
//! system would be judged failing: numbers stay within the bounds the configuration promises
//! (the network's and the provider's latency, the provider's processing bound, the clock skew
//! tolerated; the world caps stalls itself), a fault is copied only from a model the mutant's
//! configuration has on, and a fault the lines place after the heal is left out when the run
//! meets it (see `Decider::branching`). Nothing here runs anything: it only writes candidates.

use std::collections::BTreeMap;

use crate::config::SimConfig;
use crate::decision::Decision;
use crate::faults::PointAction;
use crate::rng::SimRng;
use crate::schedule::{Schedule, StepLine};

/// A run to try: what it starts from, and the seed its drawn part draws from.
#[derive(Debug, Clone)]
pub struct Mutant {
    /// The configuration it runs under.
    pub config: SimConfig,
    /// The lines it follows before it draws.
    pub schedule: Schedule,
    /// The seed the rest of the run draws from.
    pub seed: u64,
    /// How it was made, for the summary (`branch`, `move-fault`).
    pub how: &'static str,
}

/// What a kept run offers the mutator.
#[derive(Debug, Clone)]
pub struct Parent<'a> {
    /// The run's configuration.
    pub config: &'a SimConfig,
    /// The run, written down whole.
    pub schedule: &'a Schedule,
    /// Steps at which it reached its rarest features, rarest first: good places to branch after.
    pub landmarks: &'a [u64],
    /// The step the world healed at, if it did.
    pub heal_step: Option<u64>,
    /// The fault models of the program, and the shape its runs keep to, for turning models on.
    pub kinds: &'a [crate::faults::FaultKind],
    /// The shape sampled runs keep to: a model it leaves out stays off.
    pub shape: &'a crate::shape::WorkloadShape,
    /// A mutation the caller asks for, instead of one drawn.
    pub force: Option<Forced>,
    /// The run's family: runs with its configuration and workload.
    pub family: [u8; 8],
}

/// A mutation asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forced {
    /// A branch right after the first landmark.
    Branch,
    /// A number pushed toward its bound.
    Stretch,
}

/// The fault decisions seen in kept runs, by the runs' family (their configuration and workload)
/// and the kind of line they were made on, for copying onto lines of the same kind in runs of the
/// same family: a decision is copied only where the very same model settings made it, so that no
/// stall, delay or count goes beyond what those settings draw.
#[derive(Debug, Default)]
pub struct Pool {
    decisions: BTreeMap<([u8; 8], String), Vec<Decision>>,
}

/// How many decisions of one kind of line the pool keeps: enough variety, bounded memory.
const POOL_PER_KIND_MAX: usize = 32;

/// What kind of step a line is, apart from which process, task or obligation it names:
/// `relay-1#1 call tenant-a/order-1/fulfill/v1` is `relay call`, `receiver-2#1 sql INSERT
/// receipts` is `receiver sql INSERT receipts`.
pub fn line_kind(label: &str) -> String {
    let mut words = label.split_whitespace();
    let actor = words.next().unwrap_or("");
    let role = actor.split(['-', '#']).next().unwrap_or(actor);
    let mut kind = role.to_owned();
    for word in words {
        if word.contains('/') || word.starts_with('(') || word.contains('~') {
            continue;
        }
        kind.push(' ');
        kind.push_str(word);
    }
    kind
}

impl Pool {
    /// Learns the fault decisions of a kept run of `family`.
    pub fn learn(&mut self, family: [u8; 8], schedule: &Schedule) {
        for line in &schedule.steps {
            let parsed = StepLine::parse(line);
            for decision in parsed.decisions.iter().filter(|decision| decision.is_fault()) {
                let kept = self
                    .decisions
                    .entry((family, line_kind(&parsed.run)))
                    .or_default();
                if kept.len() < POOL_PER_KIND_MAX && !kept.contains(decision) {
                    kept.push(decision.clone());
                }
            }
        }
    }
}

fn enabled(settings: &serde_json::Value) -> bool {
    settings.get("enabled") == Some(&serde_json::Value::Bool(true))
}

/// The model that made a fault decision, if it names one.
fn model_of(decision: &Decision) -> Option<&str> {
    match decision {
        Decision::Fault { model, .. }
        | Decision::LoseAnswer { model }
        | Decision::LoseReply { model }
        | Decision::Copies { model, .. }
        | Decision::Forget { model, .. }
        | Decision::Attack { model, .. } => Some(model),
        Decision::Deliver(crate::decision::Destination::Lost { model }) => Some(model),
        Decision::Provider(faults) => faults.credit.values().next().map(String::as_str),
        _ => None,
    }
}

/// `decision` with its numbers held within what `config` promises, or `None` when it cannot be.
pub fn within_promises(decision: Decision, config: &SimConfig) -> Option<Decision> {
    let relay = &config.relay;
    Some(match decision {
        Decision::Latency { ms } => Decision::Latency {
            ms: ms.clamp(0, config.network_latency_ms_max),
        },
        Decision::ProviderLatency { ms } => Decision::ProviderLatency {
            ms: ms.clamp(0, config.provider_latency_ms_max),
        },
        Decision::Fault {
            model,
            action: PointAction::ClockJump { offset_ms },
        } => Decision::Fault {
            model,
            action: PointAction::ClockJump {
                offset_ms: offset_ms.clamp(-relay.clock_skew_ms_max, relay.clock_skew_ms_max),
            },
        },
        Decision::Provider(mut faults) => {
            if let Some(act_after_ms) = faults.act_after_ms {
                // The provider works on a request no longer than its documented bound.
                if relay.provider_act_ms_max <= 0 {
                    return None;
                }
                faults.act_after_ms = Some(act_after_ms.min(relay.provider_act_ms_max));
            }
            Decision::Provider(faults)
        }
        other => other,
    })
}

/// What every mutation works on: the run being edited and where edits may go.
struct Edit<'a, 'b> {
    rng: &'a mut SimRng,
    parent: &'a Parent<'b>,
    config: SimConfig,
    schedule: Schedule,
    /// The parent's line count.
    lines: usize,
    /// Lines before the heal: faults placed after it do nothing, so edits aim before it.
    fault_lines: usize,
    /// Lines left alone: the parent's beginning up to its rarest landmark, so that the mutant
    /// still reaches what made the parent worth keeping (most of the time; else none).
    keep: usize,
}

impl Edit<'_, '_> {
    /// Keeps the lines up to `at` and a random number of those after it; the rest is drawn.
    fn cut_after(&mut self, at: usize) {
        let more = self.rng.below((self.lines - at) as u64) as usize;
        self.schedule.steps.truncate(at + 1 + more);
    }

    /// The first steps followed, the rest drawn from a new seed; half the time with every fault
    /// model on that the shape allows, with the settings the configuration drew for it, as a
    /// sweep's `--all-faults` runs: a denser tail.
    fn branch(&mut self) -> Option<&'static str> {
        let cut = match self.parent.landmarks.first() {
            Some(&step) if self.parent.force == Some(Forced::Branch) => {
                (step as usize + self.rng.below(4) as usize).min(self.lines)
            }
            _ => branch_point(self.rng, self.parent),
        };
        self.schedule.steps.truncate(cut);
        if self.rng.below(2) == 0 {
            return Some("branch");
        }
        self.config
            .enable_faults_allowed_by(self.parent.shape, self.parent.kinds);
        Some(if self.config == *self.parent.config {
            "branch"
        } else {
            "branch-more-faults"
        })
    }

    /// One fault decision left out.
    fn drop_fault(&mut self) -> Option<&'static str> {
        let at = fault_line(self.rng, &self.schedule, self.keep, self.fault_lines)?;
        let mut line = StepLine::parse(&self.schedule.steps[at]);
        let faults = fault_indexes(&line);
        line.decisions.remove(*self.rng.pick(&faults));
        self.schedule.steps[at] = line.to_string();
        self.cut_after(at);
        Some("drop-fault")
    }

    /// A fault moved to a nearby line of the same kind: a crash one statement later, a lost
    /// reply one call earlier.
    fn move_fault(&mut self) -> Option<&'static str> {
        let from = fault_line(self.rng, &self.schedule, self.keep, self.fault_lines)?;
        let mut line = StepLine::parse(&self.schedule.steps[from]);
        let kind = line_kind(&line.run);
        let targets: Vec<usize> = (self.keep..self.fault_lines)
            .filter(|&index| index != from && from.abs_diff(index) <= 64)
            .filter(|&index| line_kind(&StepLine::parse(&self.schedule.steps[index]).run) == kind)
            .collect();
        if targets.is_empty() {
            return None;
        }
        let to = *self.rng.pick(&targets);
        let faults = fault_indexes(&line);
        let decision = line.decisions.remove(*self.rng.pick(&faults));
        let mut target = StepLine::parse(&self.schedule.steps[to]);
        if target
            .decisions
            .iter()
            .any(|other| other.kind() == decision.kind())
        {
            return None;
        }
        target.decisions.push(decision);
        self.schedule.steps[from] = line.to_string();
        self.schedule.steps[to] = target.to_string();
        Some("move-fault")
    }

    /// A fault seen in some kept run, on a line of the kind it was made on; its model turned on
    /// with the settings the configuration drew for it, if the shape allows it.
    fn copy_fault(&mut self, pool: &Pool) -> Option<&'static str> {
        if self.fault_lines <= self.keep {
            return None;
        }
        let at = self.keep + self.rng.below((self.fault_lines - self.keep) as u64) as usize;
        let mut line = StepLine::parse(&self.schedule.steps[at]);
        let choices = pool.decisions.get(&(self.parent.family, line_kind(&line.run)))?;
        let decision = self.rng.pick(choices).clone();
        if line.decisions.iter().any(|other| other.kind() == decision.kind()) {
            return None;
        }
        let model = model_of(&decision)?.to_owned();
        if !self.config.faults.get(&model).is_some_and(enabled) {
            if !self.parent.shape.allows_fault(&model) {
                return None;
            }
            let settings = self.config.faults.get_mut(&model)?;
            *settings.get_mut("enabled")? = serde_json::Value::Bool(true);
            crate::faults::after_all_on(self.parent.kinds, &mut self.config.faults);
        }
        line.decisions.push(within_promises(decision, &self.config)?);
        self.schedule.steps[at] = line.to_string();
        self.cut_after(at);
        Some("copy-fault")
    }

    /// A number pushed to its bound: the longest latency, the widest skew, the latest the
    /// provider may act, the earliest a key may be forgotten.
    fn stretch_number(&mut self) -> Option<&'static str> {
        let candidates: Vec<(usize, usize)> = (self.keep..self.fault_lines)
            .flat_map(|index| {
                let line = StepLine::parse(&self.schedule.steps[index]);
                (0..line.decisions.len())
                    .filter(|&decision| stretchable(&line.run, &line.decisions[decision]))
                    .map(move |decision| (index, decision))
                    .collect::<Vec<_>>()
            })
            .collect();
        if candidates.is_empty() {
            return None;
        }
        let (at, index) = *self.rng.pick(&candidates);
        let mut line = StepLine::parse(&self.schedule.steps[at]);
        let stretched = stretch(self.rng, line.decisions[index].clone(), &self.config);
        line.decisions[index] = within_promises(stretched, &self.config)?;
        self.schedule.steps[at] = line.to_string();
        self.cut_after(at);
        Some("stretch")
    }

    /// This run's beginning, then the partner's lines from the first that names the same step
    /// as the cut does.
    fn splice(&mut self, partner: &Schedule) -> Option<&'static str> {
        let cut = branch_point(self.rng, self.parent);
        let next = self.schedule.steps.get(cut).map(|line| StepLine::parse(line).run);
        let join = next
            .and_then(|label| {
                partner
                    .steps
                    .iter()
                    .position(|line| StepLine::parse(line).run == label)
            })
            .unwrap_or(cut.min(partner.steps.len()));
        self.schedule.steps.truncate(cut);
        self.schedule.steps.extend(partner.steps[join..].iter().cloned());
        Some("splice")
    }

    /// Two steps in a row run the other way round.
    fn swap(&mut self) -> Option<&'static str> {
        if self.lines < self.keep + 2 {
            return None;
        }
        let at = self.keep + self.rng.below((self.lines - self.keep - 1) as u64) as usize;
        self.schedule.steps.swap(at, at + 1);
        self.cut_after(at + 1);
        Some("swap")
    }
}

/// Makes one mutant of `parent`, or `None` when the mutation drawn does not apply to it (no
/// fault to move, no partner to join). `partner` is another kept run with the same workload.
pub fn mutate(
    rng: &mut SimRng,
    parent: &Parent<'_>,
    partner: Option<&Schedule>,
    pool: &Pool,
) -> Option<Mutant> {
    let seed = rng.below(u64::MAX);
    let lines = parent.schedule.steps.len();
    let fault_lines = parent
        .heal_step
        .map_or(lines, |step| (step as usize).saturating_sub(1).min(lines));
    let keep = match parent.landmarks.first() {
        Some(&step) if rng.below(3) > 0 => (step as usize).min(fault_lines),
        _ => 0,
    };
    let mutation = match parent.force {
        Some(Forced::Branch) => 0,
        Some(Forced::Stretch) => 8,
        None => rng.below(10),
    };
    let mut edit = Edit {
        rng,
        parent,
        config: parent.config.clone(),
        schedule: parent.schedule.clone(),
        lines,
        fault_lines,
        keep,
    };
    let how = match mutation {
        0..=3 => edit.branch(),
        4 => edit.drop_fault(),
        5 => edit.move_fault(),
        6 | 7 => edit.copy_fault(pool),
        8 => edit.stretch_number(),
        _ => match partner.filter(|_| edit.rng.below(2) == 0) {
            Some(partner) => edit.splice(partner),
            None => edit.swap(),
        },
    }?;
    Some(Mutant {
        config: edit.config,
        schedule: edit.schedule,
        seed,
        how,
    })
}

/// The indexes of a line's fault decisions.
fn fault_indexes(line: &StepLine) -> Vec<usize> {
    (0..line.decisions.len())
        .filter(|&index| line.decisions[index].is_fault())
        .collect()
}

/// Where a branch leaves its parent: just after something it reached first (so the branch
/// starts from there), or anywhere.
fn branch_point(rng: &mut SimRng, parent: &Parent<'_>) -> usize {
    let lines = parent.schedule.steps.len();
    if !parent.landmarks.is_empty() && rng.below(3) > 0 {
        // The rarest first, half the time: the branch keeps what few runs have reached.
        let step = if rng.below(2) == 0 {
            parent.landmarks[0]
        } else {
            *rng.pick(parent.landmarks)
        } as usize;
        return (step + rng.below(16) as usize).min(lines);
    }
    rng.below(lines as u64 + 1) as usize
}

/// A line from `start` to before `end` that holds a fault decision.
fn fault_line(rng: &mut SimRng, schedule: &Schedule, start: usize, end: usize) -> Option<usize> {
    let lines: Vec<usize> = (start..end.min(schedule.steps.len()))
        .filter(|&index| StepLine::parse(&schedule.steps[index]).fault_count() > 0)
        .collect();
    (!lines.is_empty()).then(|| *rng.pick(&lines))
}

/// Whether a decision on the line labelled `label` has a number whose bound the configuration
/// promises. A stall has one only for a relay worker (`RelaySettings::stall_ms_max`, which the
/// world also holds it to); a receiver's or another process's stall is bounded by its fault
/// model's own settings alone, and stretched past them it could hold the database's write lock
/// across the heal, where no correct system is promised to get it back.
fn stretchable(label: &str, decision: &Decision) -> bool {
    match decision {
        Decision::Latency { .. } | Decision::ProviderLatency { .. } | Decision::Forget { .. } => true,
        Decision::Fault {
            action: PointAction::ClockJump { .. },
            ..
        } => true,
        Decision::Fault {
            action: PointAction::Pause { .. },
            ..
        } => label.starts_with("relay-"),
        Decision::Provider(faults) => faults.act_after_ms.is_some(),
        _ => false,
    }
}

/// `decision` with its number moved to a bound of its range, or to the middle.
fn stretch(rng: &mut SimRng, decision: Decision, config: &SimConfig) -> Decision {
    let relay = &config.relay;
    let toward = |rng: &mut SimRng, low: i64, high: i64| match rng.below(3) {
        0 => high,
        1 => (high - 1).max(low),
        _ => low + (high - low) / 2,
    };
    match decision {
        Decision::Latency { .. } => Decision::Latency {
            ms: toward(rng, 0, config.network_latency_ms_max),
        },
        Decision::ProviderLatency { .. } => Decision::ProviderLatency {
            ms: toward(rng, 0, config.provider_latency_ms_max),
        },
        Decision::Fault {
            model,
            action: PointAction::ClockJump { offset_ms },
        } => {
            let size = toward(rng, 0, relay.clock_skew_ms_max);
            Decision::Fault {
                model,
                action: PointAction::ClockJump {
                    offset_ms: if offset_ms < 0 { -size } else { size },
                },
            }
        }
        Decision::Fault {
            model,
            action: PointAction::Pause { .. },
        } => Decision::Fault {
            model,
            action: PointAction::Pause {
                duration_ms: toward(rng, 1, relay.stall_ms_max.max(1)),
            },
        },
        // As early as the provider may forget (the world holds it to the key's lifetime after
        // it was stored), or later.
        Decision::Forget { at_ms, model } => Decision::Forget {
            at_ms: match rng.below(3) {
                0 | 1 => 0,
                _ => at_ms + relay.key_lifetime_ms / 8,
            },
            model,
        },
        Decision::Provider(mut faults) => {
            let low = relay.call_timeout_ms.min(relay.provider_act_ms_max);
            faults.act_after_ms = Some(toward(rng, low, relay.provider_act_ms_max));
            Decision::Provider(faults)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_kind_leaves_out_which_process_and_obligation() {
        assert_eq!(
            line_kind("relay-1#1 call tenant-a/order-1/fulfill/v1"),
            "relay call"
        );
        assert_eq!(
            line_kind("receiver-2#3 sql INSERT receipts (2)"),
            "receiver sql INSERT receipts"
        );
        assert_eq!(line_kind("sender attempt acct-a/evt-1~2"), "sender attempt");
    }

    #[test]
    fn only_a_relay_workers_stall_is_pushed_to_a_bound() {
        let pause = Decision::Fault {
            model: "worker-pause".to_owned(),
            action: PointAction::Pause { duration_ms: 5 },
        };
        // A receiver's stall is bounded by its model's settings alone: pushed to the relay's
        // promised stall it held the write lock across the heal, a false alarm on a crate
        // written from the docs.
        assert!(!stretchable("receiver-1#9 sql INSERT receipts", &pause));
        assert!(stretchable("relay-1#1 call tenant-a/order-1/fulfill/v1", &pause));
        assert!(stretchable("receiver-1#9 answer", &Decision::Latency { ms: 3 }));
    }

    #[test]
    fn numbers_stay_within_what_the_configuration_promises() {
        let config = SimConfig::draw(7, crate::db::Backend::Memdb);
        let latency = within_promises(Decision::Latency { ms: i64::MAX / 4 }, &config);
        assert_eq!(
            latency,
            Some(Decision::Latency {
                ms: config.network_latency_ms_max
            })
        );
        let skew = within_promises(
            Decision::Fault {
                model: "clock-jump".to_owned(),
                action: PointAction::ClockJump {
                    offset_ms: -i64::MAX / 4,
                },
            },
            &config,
        );
        assert_eq!(
            skew,
            Some(Decision::Fault {
                model: "clock-jump".to_owned(),
                action: PointAction::ClockJump {
                    offset_ms: -config.relay.clock_skew_ms_max
                },
            })
        );
    }
}
