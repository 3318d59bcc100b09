//! The faults a live check applies, and the seeded plan of when and to whom.
//!
//! Each fault is one that real deployments meet and the simulator models: a process that kills
//! itself at a statement (the crash points of [`crate::env::arm_crash_points`]), a process killed
//! from outside (SIGKILL, then started again), a process paused (SIGSTOP, then SIGCONT, shorter than the
//! relay's promised longest stall), connections to a receiver reset before the request arrives,
//! answers dropped after the receiver did its work, the purge job run early with a short
//! retention, and the provider's own misbehaviour (slow acts, lost replies, keys forgotten at
//! their lifetime) and the sender's concurrent duplicates, fan-out to several subscriptions and
//! twin events. The plan is drawn from the seed; when
//! each action lands among the processes' own work is the operating system's choice, so a run is
//! seeded, not deterministic. This module must not touch a process: it only decides.

use std::collections::BTreeSet;

use commitgap_sim::rng::SimRng;

/// One kind of fault, as `--faults` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LiveFault {
    /// A receiver or relay worker kills itself (SIGKILL) just before or after a statement.
    Crash,
    /// SIGKILL a receiver or relay worker, and start it again a moment later.
    Kill,
    /// SIGSTOP a receiver or relay worker, and SIGCONT it a moment later.
    Pause,
    /// Reset the sender's connections to a receiver for a moment.
    ConnectionReset,
    /// Drop the receiver's answers for a moment, after it did its work.
    LostAnswer,
    /// Run the purge job now, with a retention of a few seconds.
    EarlyPurge,
    /// The provider acts only after the relay's call timed out, on a share of sends.
    ProviderSlow,
    /// The provider acts and its reply is lost, on a share of sends.
    ProviderReplyLost,
    /// The provider forgets keys at the lifetime the relay was told.
    KeyExpiry,
    /// The sender posts a share of its attempts twice at once, to two receivers.
    DuplicateDelivery,
    /// A share of the events reach two or three subscriptions, each with its own `webhook-id`
    /// and retries.
    FanOut,
    /// A share of the events that owe work have a twin: the same fact under another event id.
    TwinEvents,
    /// The provider executes a request that arrives while another with its key is in progress,
    /// instead of answering 409. No relay can keep its requests apart across a stall past its
    /// lease, so with this fault on, pauses hit receivers only, and `all` leaves it out, as the
    /// simulator's `--all-faults` does.
    ProviderDoubleExecute,
}

impl LiveFault {
    /// Every fault, in the order `--faults all` lists them.
    pub const ALL: [LiveFault; 13] = [
        LiveFault::Crash,
        LiveFault::Kill,
        LiveFault::Pause,
        LiveFault::ConnectionReset,
        LiveFault::LostAnswer,
        LiveFault::EarlyPurge,
        LiveFault::ProviderSlow,
        LiveFault::ProviderReplyLost,
        LiveFault::KeyExpiry,
        LiveFault::DuplicateDelivery,
        LiveFault::FanOut,
        LiveFault::TwinEvents,
        LiveFault::ProviderDoubleExecute,
    ];

    /// The name `--faults` and the report use.
    pub fn name(self) -> &'static str {
        match self {
            LiveFault::Crash => "crash",
            LiveFault::Kill => "kill",
            LiveFault::Pause => "pause",
            LiveFault::ConnectionReset => "connection-reset",
            LiveFault::LostAnswer => "lost-answer",
            LiveFault::EarlyPurge => "early-purge",
            LiveFault::ProviderSlow => "provider-slow",
            LiveFault::ProviderReplyLost => "provider-reply-lost",
            LiveFault::KeyExpiry => "key-expiry",
            LiveFault::DuplicateDelivery => "duplicate-delivery",
            LiveFault::FanOut => "fan-out",
            LiveFault::TwinEvents => "twin-events",
            LiveFault::ProviderDoubleExecute => "provider-double-execute",
        }
    }

    /// Whether the fault is an action the plan places in time (the others are rates or
    /// contracts that hold for the whole fault phase).
    fn is_action(self) -> bool {
        matches!(
            self,
            LiveFault::Kill
                | LiveFault::Pause
                | LiveFault::ConnectionReset
                | LiveFault::LostAnswer
                | LiveFault::EarlyPurge
        )
    }
}

/// The faults `list` names: `none`, or names separated by commas, where `all` stands for every
/// one but `provider-double-execute` (so `all,provider-double-execute` is every one).
pub fn parse(list: &str) -> Result<BTreeSet<LiveFault>, String> {
    if matches!(list.trim(), "none" | "") {
        return Ok(BTreeSet::new());
    }
    let mut faults = BTreeSet::new();
    for name in list.split(',').map(str::trim) {
        if name == "all" {
            faults.extend(
                LiveFault::ALL
                    .into_iter()
                    .filter(|fault| *fault != LiveFault::ProviderDoubleExecute),
            );
            continue;
        }
        let fault = LiveFault::ALL
            .into_iter()
            .find(|fault| fault.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = LiveFault::ALL.iter().map(|fault| fault.name()).collect();
                format!(
                    "--faults: no fault called {name:?}; give all, none, or a comma-separated list of all and any of {}",
                    names.join(", ")
                )
            })?;
        faults.insert(fault);
    }
    Ok(faults)
}

/// What the plan does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Kill process `target` (an index among receivers then relay workers), and start it again
    /// after `down_ms`.
    Kill { target: usize, down_ms: u64 },
    /// Pause process `target` for `paused_ms`.
    Pause { target: usize, paused_ms: u64 },
    /// Reset connections to receiver `receiver` for `window_ms`.
    Reset { receiver: usize, window_ms: u64 },
    /// Drop answers of receiver `receiver` for `window_ms`.
    DropAnswers { receiver: usize, window_ms: u64 },
    /// Run the purge job with a retention of `retention_ms`.
    Purge { retention_ms: i64 },
}

/// The longest pause, in milliseconds. The relay is told that a stall may last
/// [`PAUSE_MS_MAX`] plus a margin (`stall_ms_max`), so a pause never breaks the promise a
/// correct relay relies on.
pub const PAUSE_MS_MAX: u64 = 3_000;

/// The seeded plan: the next action and how long to wait for it.
pub struct Plan {
    rng: SimRng,
    actions: Vec<LiveFault>,
    receivers: usize,
    workers: usize,
    /// Whether pauses may hit relay workers (not under `provider-double-execute`).
    pause_workers: bool,
}

impl Plan {
    /// The plan of `seed` over `faults`, for `receivers` receivers and `workers` relay workers.
    pub fn new(seed: u64, faults: &BTreeSet<LiveFault>, receivers: usize, workers: usize) -> Plan {
        Plan {
            rng: SimRng::stream(seed, "live/faults"),
            actions: faults.iter().copied().filter(|fault| fault.is_action()).collect(),
            receivers,
            workers,
            pause_workers: !faults.contains(&LiveFault::ProviderDoubleExecute),
        }
    }

    /// The wait before the next action, in milliseconds, and the action; `None` when no action
    /// fault is chosen.
    pub fn next(&mut self) -> Option<(u64, Action)> {
        if self.actions.is_empty() {
            return None;
        }
        let gap_ms = self.draw(300, 1_500);
        let processes = self.receivers + self.workers;
        let action = match *self.rng.pick(&self.actions) {
            LiveFault::Kill => Action::Kill {
                target: self.below(processes),
                down_ms: self.draw(100, 1_500),
            },
            LiveFault::Pause => Action::Pause {
                target: if self.pause_workers {
                    self.below(processes)
                } else {
                    self.below(self.receivers)
                },
                paused_ms: self.draw(200, PAUSE_MS_MAX),
            },
            LiveFault::ConnectionReset => Action::Reset {
                receiver: self.below(self.receivers),
                window_ms: self.draw(100, 1_000),
            },
            LiveFault::LostAnswer => Action::DropAnswers {
                receiver: self.below(self.receivers),
                window_ms: self.draw(100, 1_000),
            },
            _ => Action::Purge {
                retention_ms: i64::try_from(self.draw(200, 3_000)).unwrap_or(3_000),
            },
        };
        Some((gap_ms, action))
    }

    fn draw(&mut self, low: u64, high: u64) -> u64 {
        let (low, high) = (
            i64::try_from(low).unwrap_or(0),
            i64::try_from(high).unwrap_or(i64::MAX),
        );
        u64::try_from(self.rng.between(low, high)).unwrap_or(0)
    }

    fn below(&mut self, count: usize) -> usize {
        usize::try_from(self.rng.below(count.max(1) as u64)).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_an_unknown_one_is_refused_with_the_list() {
        let all = parse("all").unwrap();
        assert_eq!(all.len(), LiveFault::ALL.len() - 1);
        assert!(!all.contains(&LiveFault::ProviderDoubleExecute));
        assert!(parse("none").unwrap().is_empty());
        let some = parse("kill, lost-answer").unwrap();
        assert_eq!(
            some.into_iter().collect::<Vec<_>>(),
            [LiveFault::Kill, LiveFault::LostAnswer]
        );
        let every = parse("all,provider-double-execute").unwrap();
        assert_eq!(every.len(), LiveFault::ALL.len());
        let error = parse("kill,explode").unwrap_err();
        assert!(
            error.contains("\"explode\"") && error.contains("early-purge"),
            "{error}"
        );
    }

    #[test]
    fn a_plan_is_the_seeds_and_keeps_pauses_within_the_promise() {
        let faults = parse("all").unwrap();
        let draw = |seed| {
            let mut plan = Plan::new(seed, &faults, 2, 2);
            (0..50).map(|_| plan.next().unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        for (_, action) in draw(7) {
            match action {
                Action::Pause { target, paused_ms } => {
                    assert!(target < 4 && paused_ms <= PAUSE_MS_MAX);
                }
                Action::Kill { target, .. } => assert!(target < 4),
                Action::Reset { receiver, .. } | Action::DropAnswers { receiver, .. } => {
                    assert!(receiver < 2);
                }
                Action::Purge { retention_ms } => assert!(retention_ms >= 200),
            }
        }
        assert!(
            Plan::new(1, &parse("provider-slow").unwrap(), 2, 2)
                .next()
                .is_none()
        );
        // Under double execution no pause may stall a relay worker past its lease.
        let mut plan = Plan::new(7, &parse("pause,provider-double-execute").unwrap(), 2, 3);
        for _ in 0..100 {
            match plan.next().unwrap().1 {
                Action::Pause { target, .. } => assert!(target < 2, "paused worker {target}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
