//! The decisions a run is made of, beyond which item runs at each step: where a delivery goes,
//! what a fault model does at a scheduling point, which message is lost, how long a reply takes.
//!
//! A seeded run draws each decision from its streams; a scheduled run reads it from its
//! schedule, where it is written as `kind value` after the step's item (`| fault crash crash
//! 1200`, `| deliver receiver-2`, `| lose-answer`). Every kind of decision is a variant here, read
//! and written by one exhaustive match each, so a new kind cannot be drawn without being
//! readable. This module turns decisions into text and back and checks their numbers; it draws
//! nothing and decides nothing.

use std::fmt;

use crate::config::SimConfig;
use crate::faults::{Attack, PointAction, ProviderFaults};
use crate::limits::{DURATION_MS_MAX, check};

/// One decision made during a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The fault model `model` acts on the process about to run.
    Fault {
        /// Name of the fault model that acts.
        model: String,
        /// What the model does to the process.
        action: PointAction,
    },
    /// Where a delivery goes.
    Deliver(Destination),
    /// A receiver's answer is lost on its way to the sender.
    LoseAnswer,
    /// The provider's reply is lost on its way to the caller (the provider did act).
    LoseReply,
    /// The sender sends this many extra copies of an attempt at once.
    Copies(u32),
    /// A webhook answer's travel time.
    Latency {
        /// Travel time, in milliseconds.
        ms: i64,
    },
    /// The provider's reply time.
    ProviderLatency {
        /// Reply time, in milliseconds.
        ms: i64,
    },
    /// How the provider treats a request (failing, slow, its contract's quirks).
    Provider(ProviderFaults),
    /// When the provider will forget a key it stores in this step.
    Forget {
        /// Virtual time at which the key is forgotten, in milliseconds.
        at_ms: i64,
    },
    /// A hostile request of this kind, copied from the named stream's delivery.
    Attack {
        /// What is wrong with the hostile request.
        attack: Attack,
        /// Name of the stream whose delivery the request copies.
        stream: String,
    },
}

/// Where a delivery goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// To the receiver process with this name (`receiver-2`).
    Receiver(String),
    /// Lost on the way in.
    Lost,
}

/// The kinds of decision, as schedules name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DecisionKind {
    /// A fault model acting at a scheduling point (`fault`).
    Fault,
    /// Where a delivery goes (`deliver`).
    Deliver,
    /// A receiver's answer lost on its way to the sender (`lose-answer`).
    LoseAnswer,
    /// A provider reply lost on its way to the caller (`lose-reply`).
    LoseReply,
    /// Extra copies of a delivery attempt (`copies`).
    Copies,
    /// A webhook answer's travel time (`latency`).
    Latency,
    /// The provider's reply time (`provider-latency`).
    ProviderLatency,
    /// How the provider treats a request (`provider`).
    Provider,
    /// When the provider forgets a stored key (`forget`).
    Forget,
    /// A hostile request (`attack`).
    Attack,
}

impl DecisionKind {
    /// Every kind, in the order schedules list them.
    pub const ALL: [DecisionKind; 10] = [
        DecisionKind::Fault,
        DecisionKind::Deliver,
        DecisionKind::LoseAnswer,
        DecisionKind::LoseReply,
        DecisionKind::Copies,
        DecisionKind::Latency,
        DecisionKind::ProviderLatency,
        DecisionKind::Provider,
        DecisionKind::Forget,
        DecisionKind::Attack,
    ];

    /// The word a schedule line uses for the kind.
    pub fn name(self) -> &'static str {
        match self {
            DecisionKind::Fault => "fault",
            DecisionKind::Deliver => "deliver",
            DecisionKind::LoseAnswer => "lose-answer",
            DecisionKind::LoseReply => "lose-reply",
            DecisionKind::Copies => "copies",
            DecisionKind::Latency => "latency",
            DecisionKind::ProviderLatency => "provider-latency",
            DecisionKind::Provider => "provider",
            DecisionKind::Forget => "forget",
            DecisionKind::Attack => "attack",
        }
    }

    /// The kind a schedule line calls `name`, or `None` if there is none.
    pub fn from_name(name: &str) -> Option<DecisionKind> {
        DecisionKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

impl Decision {
    /// The kind of this decision.
    pub fn kind(&self) -> DecisionKind {
        match self {
            Decision::Fault { .. } => DecisionKind::Fault,
            Decision::Deliver(_) => DecisionKind::Deliver,
            Decision::LoseAnswer => DecisionKind::LoseAnswer,
            Decision::LoseReply => DecisionKind::LoseReply,
            Decision::Copies(_) => DecisionKind::Copies,
            Decision::Latency { .. } => DecisionKind::Latency,
            Decision::ProviderLatency { .. } => DecisionKind::ProviderLatency,
            Decision::Provider(_) => DecisionKind::Provider,
            Decision::Forget { .. } => DecisionKind::Forget,
            Decision::Attack { .. } => DecisionKind::Attack,
        }
    }

    /// The value a schedule line writes after the kind (empty for kinds without one).
    pub fn value(&self) -> String {
        match self {
            Decision::Fault { model, action } => action.encode(model),
            Decision::Deliver(Destination::Receiver(name)) => name.clone(),
            Decision::Deliver(Destination::Lost) => "lost".to_owned(),
            Decision::LoseAnswer | Decision::LoseReply => String::new(),
            Decision::Copies(copies) => copies.to_string(),
            Decision::Latency { ms } | Decision::ProviderLatency { ms } => ms.to_string(),
            Decision::Provider(faults) => faults.encode(),
            Decision::Forget { at_ms } => at_ms.to_string(),
            Decision::Attack { attack, stream } => format!("{} {stream}", attack.name()),
        }
    }

    /// Reads a decision of `kind` from its schedule value. The error says what is wrong with
    /// the value, in words a person editing a schedule can act on.
    pub fn parse(kind: DecisionKind, value: &str) -> Result<Decision, String> {
        let value = value.trim();
        let number = || {
            value
                .parse::<i64>()
                .map_err(|_| format!("{value:?} is not a whole number"))
        };
        let none = |decision: Decision| {
            if value.is_empty() {
                Ok(decision)
            } else {
                Err(format!("{} takes no value, found {value:?}", kind.name()))
            }
        };
        match kind {
            DecisionKind::Fault => {
                PointAction::decode(value).map(|(model, action)| Decision::Fault { model, action })
            }
            DecisionKind::Deliver if value == "lost" => Ok(Decision::Deliver(Destination::Lost)),
            DecisionKind::Deliver if !value.is_empty() && !value.contains(' ') => {
                Ok(Decision::Deliver(Destination::Receiver(value.to_owned())))
            }
            DecisionKind::Deliver => Err(format!("{value:?} is neither `lost` nor a receiver's name")),
            DecisionKind::LoseAnswer => none(Decision::LoseAnswer),
            DecisionKind::LoseReply => none(Decision::LoseReply),
            DecisionKind::Copies => value
                .parse::<u32>()
                .map(Decision::Copies)
                .map_err(|_| format!("{value:?} is not a count of copies")),
            DecisionKind::Latency => number().map(|ms| Decision::Latency { ms }),
            DecisionKind::ProviderLatency => number().map(|ms| Decision::ProviderLatency { ms }),
            DecisionKind::Provider => ProviderFaults::decode(value).map(Decision::Provider),
            DecisionKind::Forget => number().map(|at_ms| Decision::Forget { at_ms }),
            DecisionKind::Attack => {
                let (name, stream) = value
                    .split_once(' ')
                    .ok_or_else(|| format!("{value:?} is not `ATTACK STREAM`"))?;
                let attack = Attack::from_name(name)
                    .ok_or_else(|| format!("{name:?} is not an attack this build knows"))?;
                Ok(Decision::Attack {
                    attack,
                    stream: stream.trim().to_owned(),
                })
            }
        }
    }

    /// Whether the decision injects a fault, rather than ordinary latency or routing. Provider
    /// conditions that are the provider's contract (cached errors, lenient replays, locks) are
    /// not faults on their own; a failure or slowness is.
    pub fn is_fault(&self) -> bool {
        match self {
            Decision::Fault { .. }
            | Decision::LoseAnswer
            | Decision::LoseReply
            | Decision::Copies(_)
            | Decision::Forget { .. }
            | Decision::Attack { .. }
            | Decision::Deliver(Destination::Lost) => true,
            Decision::Deliver(Destination::Receiver(_))
            | Decision::Latency { .. }
            | Decision::ProviderLatency { .. } => false,
            Decision::Provider(faults) => {
                faults.conditions.fail_before_acting || faults.act_after_ms.is_some()
            }
        }
    }

    /// A short name for a fault decision, for a schedule's shape: the fault model for `fault`,
    /// `request-lost` for a delivery lost on the way in, `attack:KIND` for a hostile request,
    /// `provider-fail` or `provider-slow` for the provider, the kind otherwise. `None` for a
    /// decision that is not a fault.
    pub fn fault_label(&self) -> Option<String> {
        if !self.is_fault() {
            return None;
        }
        Some(match self {
            Decision::Fault { model, .. } => model.clone(),
            Decision::Deliver(_) => crate::faults::request_lost::KIND.name.to_owned(),
            // The kind of attack is the story; which delivery it copied is not.
            Decision::Attack { attack, .. } => format!("attack:{}", attack.name()),
            Decision::Provider(faults) if faults.conditions.fail_before_acting => "provider-fail".to_owned(),
            Decision::Provider(_) => crate::faults::provider_slow::KIND.name.to_owned(),
            other => other.kind().name().to_owned(),
        })
    }

    /// Checks the numbers the decision carries against the limits and `config`'s contracts:
    /// durations within a year (times within a few), copies within what a fault model may add,
    /// a clock jump within the skew the relay tolerates.
    pub fn check(&self, config: &SimConfig) -> Result<(), String> {
        match self {
            Decision::Fault { action, .. } => check_action(action, config),
            Decision::Copies(copies) => check("copies", *copies, 0, COPIES_IN_A_DECISION_MAX),
            Decision::Latency { ms } | Decision::ProviderLatency { ms } => {
                check("milliseconds", *ms, 0, DURATION_MS_MAX)
            }
            Decision::Forget { at_ms } => check("time in milliseconds", *at_ms, 0, 4 * DURATION_MS_MAX),
            Decision::Provider(faults) => {
                check("lock", faults.conditions.lock_after_ms, 0, DURATION_MS_MAX)?;
                match faults.act_after_ms {
                    Some(slow_ms) => check("slow", slow_ms, 0, DURATION_MS_MAX),
                    None => Ok(()),
                }
            }
            Decision::Deliver(_) | Decision::LoseAnswer | Decision::LoseReply | Decision::Attack { .. } => {
                Ok(())
            }
        }
    }
}

/// Checks the numbers of a fault model's action at a scheduling point.
fn check_action(action: &PointAction, config: &SimConfig) -> Result<(), String> {
    let skew_ms_max = config.relay.clock_skew_ms_max;
    match action {
        PointAction::Crash { restart_after_ms } => {
            check("restart in milliseconds", *restart_after_ms, 0, DURATION_MS_MAX)
        }
        PointAction::Pause { duration_ms } => {
            check("pause in milliseconds", *duration_ms, 1, DURATION_MS_MAX)
        }
        PointAction::ClockJump { offset_ms } => check(
            "clock offset in milliseconds (within relay.clock_skew_ms_max)",
            *offset_ms,
            -skew_ms_max,
            skew_ms_max,
        ),
        PointAction::FailStatement { .. } => Ok(()),
    }
}

/// The most copies one `copies` decision may send at once: more than any fault model draws.
const COPIES_IN_A_DECISION_MAX: u32 = 16;

/// `kind value`, or `kind` alone, as a schedule line writes it after a `|`.
impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = self.value();
        if value.is_empty() {
            f.write_str(self.kind().name())
        } else {
            write!(f, "{} {value}", self.kind().name())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::StatementFailure;

    #[test]
    fn every_decision_reads_back_as_written() {
        let decisions = [
            Decision::Fault {
                model: "crash".into(),
                action: PointAction::Crash {
                    restart_after_ms: 1200,
                },
            },
            Decision::Fault {
                model: "worker-pause".into(),
                action: PointAction::Pause { duration_ms: 90_000 },
            },
            Decision::Fault {
                model: "disk-full".into(),
                action: PointAction::FailStatement {
                    failure: StatementFailure::Full,
                    rolled_back: true,
                },
            },
            Decision::Fault {
                model: "sqlite-busy".into(),
                action: PointAction::FailStatement {
                    failure: StatementFailure::Busy,
                    rolled_back: false,
                },
            },
            Decision::Fault {
                model: "clock-jump".into(),
                action: PointAction::ClockJump { offset_ms: -5_000 },
            },
            Decision::Deliver(Destination::Receiver("receiver-2".into())),
            Decision::Deliver(Destination::Lost),
            Decision::LoseAnswer,
            Decision::LoseReply,
            Decision::Copies(3),
            Decision::Latency { ms: 35 },
            Decision::ProviderLatency { ms: 12 },
            Decision::Forget { at_ms: 3_600_000 },
            Decision::Attack {
                attack: Attack::StaleReplay,
                stream: "acct-a/evt-1~1".into(),
            },
        ];
        for decision in decisions {
            let read = Decision::parse(decision.kind(), &decision.value());
            assert_eq!(read.as_ref(), Ok(&decision), "{decision}");
            let kind = DecisionKind::from_name(decision.kind().name());
            assert_eq!(kind, Some(decision.kind()));
        }
        assert_eq!(
            Decision::parse(DecisionKind::Fault, "sqlite-busy busy"),
            Ok(Decision::Fault {
                model: "sqlite-busy".into(),
                action: PointAction::FailStatement {
                    failure: StatementFailure::Busy,
                    rolled_back: false
                }
            }),
            "files of format version 2 wrote `busy`"
        );
        for (kind, bad) in [
            (DecisionKind::Fault, "crash explode 5"),
            (DecisionKind::Copies, "-1"),
            (DecisionKind::LoseAnswer, "yes"),
            (DecisionKind::Attack, "teleport acct-a/evt-1~1"),
            (DecisionKind::Deliver, ""),
        ] {
            assert!(Decision::parse(kind, bad).is_err(), "{} {bad}", kind.name());
        }
    }

    #[test]
    fn faults_are_told_from_routing_and_latency() {
        assert!(!Decision::Latency { ms: 5 }.is_fault());
        assert!(Decision::Deliver(Destination::Lost).is_fault());
        assert!(!Decision::Deliver(Destination::Receiver("receiver-1".into())).is_fault());
        let contract = Decision::parse(DecisionKind::Provider, "sticky,lock=3000").unwrap();
        assert!(!contract.is_fault());
        let failing = Decision::parse(DecisionKind::Provider, "sticky,fail").unwrap();
        assert_eq!(failing.fault_label().as_deref(), Some("provider-fail"));
        let slow = Decision::parse(DecisionKind::Provider, "slow=45000").unwrap();
        assert_eq!(slow.fault_label().as_deref(), Some("provider-slow"));
    }
}
