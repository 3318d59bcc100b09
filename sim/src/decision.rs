//! The decisions a run is made of, beyond which item runs at each step: where a delivery goes,
//! what a fault model does at a scheduling point, which message is lost, how long a reply takes.
//!
//! A seeded run draws each decision from its streams; a scheduled run reads it from its
//! schedule, where it is written as `kind value` after the step's item (`| fault crash crash
//! 1200`, `| deliver receiver-2`, `| lose-answer lost-ack`); a fault's value names the model that
//! made it. Every kind of decision is a variant here, read
//! and written by one exhaustive match each, so a new kind cannot be drawn without being
//! readable. This module turns decisions into text and back and checks their numbers; it draws
//! nothing and decides nothing.

use std::fmt;

use crate::config::SimConfig;
use crate::faults::{Attack, PointAction, ProviderFaults, ProviderPart};
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
    LoseAnswer {
        /// Name of the fault model that lost it.
        model: String,
    },
    /// The provider's reply is lost on its way to the caller (the provider did act).
    LoseReply {
        /// Name of the fault model that lost it.
        model: String,
    },
    /// The sender sends this many extra copies of an attempt at once.
    Copies {
        /// How many copies.
        count: u32,
        /// Name of the fault model that sent them.
        model: String,
    },
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
        /// Name of the fault model that decided it.
        model: String,
    },
    /// A hostile request of this kind, copied from the named stream's delivery.
    Attack {
        /// What is wrong with the hostile request.
        attack: Attack,
        /// Name of the stream whose delivery the request copies.
        stream: String,
        /// Name of the fault model that sent it.
        model: String,
    },
}

/// Where a delivery goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// To the receiver process with this name (`receiver-2`).
    Receiver(String),
    /// Lost on the way in, by the fault model named.
    Lost {
        /// Name of the fault model that lost it.
        model: String,
    },
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
            Decision::LoseAnswer { .. } => DecisionKind::LoseAnswer,
            Decision::LoseReply { .. } => DecisionKind::LoseReply,
            Decision::Copies { .. } => DecisionKind::Copies,
            Decision::Latency { .. } => DecisionKind::Latency,
            Decision::ProviderLatency { .. } => DecisionKind::ProviderLatency,
            Decision::Provider(_) => DecisionKind::Provider,
            Decision::Forget { .. } => DecisionKind::Forget,
            Decision::Attack { .. } => DecisionKind::Attack,
        }
    }

    /// The value a schedule line writes after the kind. Every fault's value names the model
    /// that decided it, so a replay credits the same model and a shrunk file keeps it on.
    pub fn value(&self) -> String {
        match self {
            Decision::Fault { model, action } => action.encode(model),
            Decision::Deliver(Destination::Receiver(name)) => name.clone(),
            Decision::Deliver(Destination::Lost { model }) => format!("lost {model}"),
            Decision::LoseAnswer { model } | Decision::LoseReply { model } => model.clone(),
            Decision::Copies { count, model } => format!("{count} {model}"),
            Decision::Latency { ms } | Decision::ProviderLatency { ms } => ms.to_string(),
            Decision::Provider(faults) => faults.encode(),
            Decision::Forget { at_ms, model } => format!("{at_ms} {model}"),
            Decision::Attack {
                attack,
                stream,
                model,
            } => format!("{} {stream} {model}", attack.name()),
        }
    }

    /// The fault model this decision is the doing of, if it is one's (the models credited with
    /// a provider's faults, each once).
    pub fn models(&self) -> Vec<&str> {
        match self {
            Decision::Fault { model, .. }
            | Decision::Deliver(Destination::Lost { model })
            | Decision::LoseAnswer { model }
            | Decision::LoseReply { model }
            | Decision::Copies { model, .. }
            | Decision::Forget { model, .. }
            | Decision::Attack { model, .. } => vec![model.as_str()],
            Decision::Provider(faults) => {
                let mut models: Vec<&str> = faults.credit.values().map(String::as_str).collect();
                models.dedup();
                models
            }
            Decision::Deliver(Destination::Receiver(_))
            | Decision::Latency { .. }
            | Decision::ProviderLatency { .. } => Vec::new(),
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
        // A value written before decisions named their model (`lose-answer`, `copies 3`,
        // `forget MS`, `deliver lost`, `attack KIND STREAM`) credits the built-in model that alone
        // made that decision then.
        let model_or = |words: &[&str], legacy: &str| match words {
            [] => Ok(legacy.to_owned()),
            [model] => Ok((*model).to_owned()),
            _ => Err(format!("{value:?}: one model's name after the value, at most")),
        };
        let words: Vec<&str> = value.split_whitespace().collect();
        match kind {
            DecisionKind::Fault => {
                PointAction::decode(value).map(|(model, action)| Decision::Fault { model, action })
            }
            DecisionKind::Deliver => match words[..] {
                ["lost", ref rest @ ..] => Ok(Decision::Deliver(Destination::Lost {
                    model: model_or(rest, crate::faults::request_lost::KIND.name)?,
                })),
                [receiver] => Ok(Decision::Deliver(Destination::Receiver(receiver.to_owned()))),
                _ => Err(format!(
                    "{value:?} is neither `lost [MODEL]` nor a receiver's name"
                )),
            },
            DecisionKind::LoseAnswer => Ok(Decision::LoseAnswer {
                model: model_or(&words, crate::faults::lost_ack::KIND.name)?,
            }),
            DecisionKind::LoseReply => Ok(Decision::LoseReply {
                model: model_or(&words, crate::faults::lost_ack::KIND.name)?,
            }),
            DecisionKind::Copies => match words[..] {
                [count, ref rest @ ..] => Ok(Decision::Copies {
                    count: count
                        .parse::<u32>()
                        .map_err(|_| format!("{count:?} is not a count of copies"))?,
                    model: model_or(rest, crate::faults::duplicate_delivery::KIND.name)?,
                }),
                [] => Err("copies takes a count".to_owned()),
            },
            DecisionKind::Latency => number().map(|ms| Decision::Latency { ms }),
            DecisionKind::ProviderLatency => number().map(|ms| Decision::ProviderLatency { ms }),
            DecisionKind::Provider => ProviderFaults::decode(value).map(Decision::Provider),
            DecisionKind::Forget => match words[..] {
                [at_ms, ref rest @ ..] => Ok(Decision::Forget {
                    at_ms: at_ms
                        .parse::<i64>()
                        .map_err(|_| format!("{at_ms:?} is not a whole number"))?,
                    model: model_or(rest, crate::faults::key_expiry::KIND.name)?,
                }),
                [] => Err("forget takes a time".to_owned()),
            },
            DecisionKind::Attack => match words[..] {
                [name, stream, ref rest @ ..] => Ok(Decision::Attack {
                    attack: Attack::from_name(name)
                        .ok_or_else(|| format!("{name:?} is not an attack this build knows"))?,
                    stream: stream.to_owned(),
                    model: model_or(rest, crate::faults::attacker::KIND.name)?,
                }),
                _ => Err(format!("{value:?} is not `ATTACK STREAM [MODEL]`")),
            },
        }
    }

    /// Whether the decision injects a fault, rather than ordinary latency or routing. Provider
    /// conditions that are the provider's contract (cached errors, lenient replays, locks) are
    /// not faults on their own; a failure or slowness is.
    pub fn is_fault(&self) -> bool {
        match self {
            Decision::Fault { .. }
            | Decision::LoseAnswer { .. }
            | Decision::LoseReply { .. }
            | Decision::Copies { .. }
            | Decision::Forget { .. }
            | Decision::Attack { .. }
            | Decision::Deliver(Destination::Lost { .. }) => true,
            Decision::Deliver(Destination::Receiver(_))
            | Decision::Latency { .. }
            | Decision::ProviderLatency { .. } => false,
            Decision::Provider(faults) => {
                faults.conditions.fail_before_acting
                    || faults.act_after_ms.is_some()
                    || faults.answer.as_ref().is_some_and(|answer| !answer.is_ordinary())
            }
        }
    }

    /// A short name for a fault decision, for a schedule's shape: the fault model that made it,
    /// `attack:KIND` for a hostile request, and for the provider the model of its failure, its
    /// answer or its delay. `None` for a decision that is not a fault.
    pub fn fault_label(&self) -> Option<String> {
        if !self.is_fault() {
            return None;
        }
        Some(match self {
            // The kind of attack is the story; which delivery it copied is not.
            Decision::Attack { attack, .. } => format!("attack:{}", attack.name()),
            Decision::Provider(faults) => [ProviderPart::Fail, ProviderPart::Answer, ProviderPart::Slow]
                .into_iter()
                .find_map(|part| faults.credited(part))
                .unwrap_or("provider")
                .to_owned(),
            other => other
                .models()
                .first()
                .map_or_else(|| other.kind().name().to_owned(), |model| (*model).to_owned()),
        })
    }

    /// Checks the numbers the decision carries against the limits and `config`'s contracts:
    /// durations within a year (times within a few), copies within what a fault model may add,
    /// a clock jump within the skew the relay tolerates.
    pub fn check(&self, config: &SimConfig) -> Result<(), String> {
        match self {
            Decision::Fault { action, .. } => check_action(action, config),
            Decision::Copies { count, .. } => check("copies", *count, 0, COPIES_IN_A_DECISION_MAX),
            Decision::Latency { ms } | Decision::ProviderLatency { ms } => {
                check("milliseconds", *ms, 0, DURATION_MS_MAX)
            }
            Decision::Forget { at_ms, .. } => check("time in milliseconds", *at_ms, 0, 4 * DURATION_MS_MAX),
            Decision::Provider(faults) => {
                check("lock", faults.conditions.lock_after_ms, 0, DURATION_MS_MAX)?;
                if let Some(slow_ms) = faults.act_after_ms {
                    check("slow", slow_ms, 0, DURATION_MS_MAX)?;
                }
                match faults.answer.as_ref().and_then(|answer| answer.retry_after_ms) {
                    Some(retry_after_ms) => check("retry after", retry_after_ms, 0, DURATION_MS_MAX),
                    None => Ok(()),
                }
            }
            Decision::Deliver(_)
            | Decision::LoseAnswer { .. }
            | Decision::LoseReply { .. }
            | Decision::Attack { .. } => Ok(()),
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
            Decision::Deliver(Destination::Lost {
                model: "request-lost".into(),
            }),
            Decision::LoseAnswer {
                model: "lost-ack".into(),
            },
            Decision::LoseReply {
                model: "a-teams-fault".into(),
            },
            Decision::Copies {
                count: 3,
                model: "duplicate-delivery".into(),
            },
            Decision::Latency { ms: 35 },
            Decision::ProviderLatency { ms: 12 },
            Decision::Forget {
                at_ms: 3_600_000,
                model: "key-expiry".into(),
            },
            Decision::Attack {
                attack: Attack::StaleReplay,
                stream: "acct-a/evt-1~1".into(),
                model: "attacker".into(),
            },
            Decision::Provider(
                ProviderFaults::decode("answer=429/30000@rate-limit,slow=45000@provider-slow").unwrap(),
            ),
        ];
        for decision in decisions {
            let read = Decision::parse(decision.kind(), &decision.value());
            assert_eq!(read.as_ref(), Ok(&decision), "{decision}");
            let kind = DecisionKind::from_name(decision.kind().name());
            assert_eq!(kind, Some(decision.kind()));
        }
    }

    #[test]
    fn older_values_read_back_and_bad_ones_are_refused() {
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
        // Written before decisions named their model: the built-in that alone made them then.
        for (kind, old, model) in [
            (DecisionKind::LoseAnswer, "", "lost-ack"),
            (DecisionKind::LoseReply, "", "lost-ack"),
            (DecisionKind::Copies, "2", "duplicate-delivery"),
            (DecisionKind::Forget, "5000", "key-expiry"),
            (DecisionKind::Deliver, "lost", "request-lost"),
            (DecisionKind::Attack, "stale-replay acct-a/evt-1~1", "attacker"),
        ] {
            let decision = Decision::parse(kind, old).unwrap();
            assert_eq!(decision.models(), [model], "{} {old}", kind.name());
        }
        for (kind, bad) in [
            (DecisionKind::Fault, "crash explode 5"),
            (DecisionKind::Copies, "-1"),
            (DecisionKind::LoseAnswer, "yes please"),
            (DecisionKind::Attack, "teleport acct-a/evt-1~1"),
            (DecisionKind::Deliver, ""),
        ] {
            assert!(Decision::parse(kind, bad).is_err(), "{} {bad}", kind.name());
        }
    }

    #[test]
    fn faults_are_told_from_routing_and_latency() {
        assert!(!Decision::Latency { ms: 5 }.is_fault());
        assert!(
            Decision::Deliver(Destination::Lost {
                model: "request-lost".into()
            })
            .is_fault()
        );
        assert!(!Decision::Deliver(Destination::Receiver("receiver-1".into())).is_fault());
        let contract = Decision::parse(DecisionKind::Provider, "sticky,lock=3000").unwrap();
        assert!(!contract.is_fault());
        let failing = Decision::parse(DecisionKind::Provider, "sticky,fail").unwrap();
        assert_eq!(failing.fault_label().as_deref(), Some("provider-failure"));
        let slow = Decision::parse(DecisionKind::Provider, "slow=45000").unwrap();
        assert_eq!(slow.fault_label().as_deref(), Some("provider-slow"));
        let limited = Decision::parse(DecisionKind::Provider, "answer=429@rate-limit").unwrap();
        assert!(limited.is_fault());
        assert_eq!(limited.fault_label().as_deref(), Some("rate-limit"));
        let ordinary = Decision::parse(DecisionKind::Provider, "answer=200@rate-limit").unwrap();
        assert!(!ordinary.is_fault(), "a 2xx answer is the provider's own");
    }
}
