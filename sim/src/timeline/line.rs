//! What one step's record says, for the timeline page: each happening read into facts (a mark
//! of some kind and tone on some lane) and links (a message drawn between two lanes), with what
//! earlier steps taught about open transactions, so that a poll can be told from real work.
//!
//! It reads one step at a time and keeps nothing but [`ReadState`]; arranging steps into
//! columns is [`super::reading`]'s job, and drawing is not its job at all. A happening it has no
//! better reading for becomes an `other` mark, never a panic.

use std::collections::BTreeSet;

use commitgap::provider::ProviderReply;

use super::lanes::{Lane, LaneGroup, incarnation_of, lane_of, lane_of_actor};
use crate::sql::{Statement, Verb};
use crate::trace::{Arrival, CallOutcome, Happening, Observed, SqlOutcome, TraceStep};

/// What a mark stands for. The order is irrelevant; [`Kind::rank`] decides which of several
/// things in one step a lane shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    Emit,
    Deliver,
    DeliveryLost,
    AttemptTimedOut,
    SenderGot,
    Answer,
    AnswerSent,
    AnswerLost,
    Transaction,
    Read,
    Write,
    Commit,
    Rollback,
    SqlError,
    LeaseClaim,
    LeaseExtend,
    Backoff,
    Done,
    Dead,
    Call,
    Reply,
    Provider,
    KeyExpiry,
    Crash,
    Restart,
    Pause,
    ClockJump,
    Purge,
    Operator,
    Log,
    Wake,
    Sleep,
    Quiet,
    Other,
}

impl Kind {
    /// The name used in CSS classes, `data-kinds` and the legend.
    pub(super) fn name(self) -> &'static str {
        match self {
            Kind::Emit => "emit",
            Kind::Deliver => "deliver",
            Kind::DeliveryLost => "delivery-lost",
            Kind::AttemptTimedOut => "attempt-timed-out",
            Kind::SenderGot => "sender-got",
            Kind::Answer => "answer",
            Kind::AnswerSent => "answer-sent",
            Kind::AnswerLost => "answer-lost",
            Kind::Transaction => "transaction",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Commit => "commit",
            Kind::Rollback => "rollback",
            Kind::SqlError => "sql-error",
            Kind::LeaseClaim => "lease-claim",
            Kind::LeaseExtend => "lease-extend",
            Kind::Backoff => "backoff",
            Kind::Done => "done",
            Kind::Dead => "dead",
            Kind::Call => "call",
            Kind::Reply => "reply",
            Kind::Provider => "provider",
            Kind::KeyExpiry => "key-expiry",
            Kind::Crash => "crash",
            Kind::Restart => "restart",
            Kind::Pause => "pause",
            Kind::ClockJump => "clock-jump",
            Kind::Purge => "purge",
            Kind::Operator => "operator",
            Kind::Log => "log",
            Kind::Wake => "wake",
            Kind::Sleep => "sleep",
            Kind::Quiet => "quiet",
            Kind::Other => "other",
        }
    }

    /// How much a kind matters when a lane has several things in one step: the highest is drawn.
    pub(super) fn rank(self) -> u8 {
        match self {
            Kind::Crash => 100,
            Kind::Restart => 96,
            Kind::Pause => 92,
            Kind::ClockJump => 90,
            Kind::Purge => 88,
            Kind::Provider => 86,
            Kind::Call => 84,
            Kind::Done => 82,
            Kind::Dead => 81,
            Kind::LeaseClaim => 80,
            Kind::Reply => 78,
            Kind::DeliveryLost => 76,
            Kind::AnswerLost => 75,
            Kind::Answer => 74,
            Kind::Deliver => 72,
            Kind::Emit => 70,
            Kind::AttemptTimedOut => 68,
            Kind::SenderGot => 66,
            Kind::Operator => 64,
            Kind::Commit => 60,
            Kind::LeaseExtend => 58,
            Kind::Backoff => 56,
            Kind::Rollback => 54,
            Kind::SqlError => 52,
            Kind::Write => 50,
            Kind::Log => 40,
            Kind::AnswerSent => 36,
            Kind::Transaction => 30,
            Kind::Read => 20,
            Kind::Other => 10,
            // Key expiry is drawn as a badge on the provider's mark, never as the mark itself.
            Kind::KeyExpiry => 5,
            Kind::Sleep => 4,
            Kind::Wake => 3,
            Kind::Quiet => 2,
        }
    }

    /// Kinds that say nothing on their own: a line made only of these is idle.
    fn is_idle(self) -> bool {
        matches!(self, Kind::Wake | Kind::Sleep | Kind::Quiet)
    }

    /// Kinds listed among the run's key moments, below the chart.
    pub(super) fn is_key_moment(self) -> bool {
        matches!(
            self,
            Kind::Crash | Kind::Restart | Kind::KeyExpiry | Kind::Dead | Kind::Purge | Kind::Operator
        )
    }
}

/// The colour of a mark: what the thing it stands for means for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Tone {
    Neutral,
    Info,
    Good,
    Warn,
    Bad,
    /// A real side effect at the provider.
    Effect,
    Lease,
    Database,
}

impl Tone {
    pub(super) fn name(self) -> &'static str {
        match self {
            Tone::Neutral => "neutral",
            Tone::Info => "info",
            Tone::Good => "good",
            Tone::Warn => "warn",
            Tone::Bad => "bad",
            Tone::Effect => "effect",
            Tone::Lease => "lease",
            Tone::Database => "db",
        }
    }
}

/// One thing a line says happened, on one lane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Fact {
    pub(super) lane: Lane,
    pub(super) kind: Kind,
    pub(super) tone: Tone,
    /// A short text drawn next to the mark (an effect id, an incarnation).
    pub(super) label: Option<String>,
    /// Part of a poll: a read outside a transaction, or a poll that failed and was logged.
    poll: bool,
    /// The piece of the line that says it, for the list of key moments.
    pub(super) text: String,
}

/// A message drawn as a line between two lanes within one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Link {
    pub(super) from: Lane,
    pub(super) to: Lane,
    /// The reply to this request will not arrive.
    pub(super) lost: bool,
}

/// Everything one step line says.
#[derive(Debug, Default)]
pub(super) struct LineFacts {
    pub(super) facts: Vec<Fact>,
    pub(super) links: Vec<Link>,
    /// Rows written by commits in this step, on the actor's lane.
    pub(super) commit_rows: Option<u64>,
    pub(super) failed_sql: bool,
    /// A pause that ends at this virtual time, on this lane.
    pub(super) pause: Option<(Lane, i64)>,
}

impl LineFacts {
    fn add(&mut self, lane: &Lane, kind: Kind, tone: Tone, text: &str) -> &mut Fact {
        self.facts.push(Fact {
            lane: lane.clone(),
            kind,
            tone,
            label: None,
            poll: false,
            text: text.to_owned(),
        });
        self.facts.last_mut().expect("just pushed")
    }

    /// Idle: only waking, sleeping and polling, and at least one sleep or a lone wake, so that
    /// a poll that found work (and is followed by a claim) stays visible.
    pub(super) fn is_idle(&self) -> bool {
        let all_quiet = self.facts.iter().all(|fact| fact.kind.is_idle() || fact.poll);
        let rests = self
            .facts
            .iter()
            .any(|fact| matches!(fact.kind, Kind::Sleep | Kind::Quiet))
            || self.facts.iter().all(|fact| fact.kind == Kind::Wake);
        all_quiet && rests && self.commit_rows.is_none() && self.links.is_empty()
    }
}

/// What reading earlier lines taught about later ones.
#[derive(Debug, Default)]
pub(super) struct ReadState {
    /// Lanes whose process has a transaction open.
    open_transactions: BTreeSet<Lane>,
}

/// Reads what one step's record says, happening by happening.
pub(super) fn read_step(step: &TraceStep, state: &mut ReadState) -> LineFacts {
    let home = lane_of_actor(&step.actor).unwrap_or_else(|| Lane::named(LaneGroup::Other));
    let mut facts = LineFacts::default();
    for happening in &step.happened {
        read_happening(happening, step.time_ms, &home, &mut facts, state);
    }
    if facts.facts.is_empty() {
        facts.add(&home, Kind::Quiet, Tone::Neutral, "");
    }
    facts
}

/// The lane of a process id, or `home` when it names none.
fn lane_or(process: &str, home: &Lane) -> Lane {
    lane_of(process).unwrap_or_else(|| home.clone())
}

fn read_happening(
    happening: &Happening,
    time_ms: i64,
    home: &Lane,
    facts: &mut LineFacts,
    state: &mut ReadState,
) {
    let text = happening.to_string();
    match happening {
        Happening::Sql {
            statement, outcome, ..
        } => read_sql(statement, outcome, &text, home, facts, state),
        Happening::Committed { rows, observed } => {
            *facts.commit_rows.get_or_insert(0) += *rows as u64;
            facts.add(home, Kind::Commit, Tone::Database, &text);
            for change in observed {
                read_observed(change, home, facts);
            }
        }
        Happening::TaskEndedInTransaction => {
            state.open_transactions.remove(home);
            facts.add(home, Kind::Rollback, Tone::Warn, &text);
        }
        // Waiting for a lock is a sleep the database imposed: drawn as one, with its text.
        Happening::Sleep { .. } | Happening::LockWait { .. } => {
            facts.add(home, Kind::Sleep, Tone::Neutral, &text);
        }
        Happening::Wake => {
            facts.add(home, Kind::Wake, Tone::Neutral, &text);
        }
        Happening::Call {
            key,
            outcome,
            reply_lost,
            ..
        } => {
            let tone = if *reply_lost { Tone::Bad } else { Tone::Info };
            facts.add(home, Kind::Call, tone, &text);
            let provider = Lane::named(LaneGroup::Provider);
            match outcome {
                CallOutcome::Replied(reply) => provider_outcome(&provider, reply, &text, facts),
                CallOutcome::Busy { .. } => {
                    facts.add(&provider, Kind::Provider, Tone::Warn, &text);
                }
            }
            let _ = key;
            facts.links.push(Link {
                from: home.clone(),
                to: provider,
                lost: *reply_lost,
            });
        }
        Happening::Reply(reply) => {
            facts.add(home, Kind::Reply, reply_tone(reply), &text);
        }
        Happening::ProviderFinishes { outcome, .. } => {
            provider_outcome(&Lane::named(LaneGroup::Provider), outcome, &text, facts);
        }
        Happening::KeyForgotten { key, model } => {
            let said = format!(
                "the provider forgot key {key} ({model} set its lifetime): a request with it now counts as new"
            );
            facts.add(
                &Lane::named(LaneGroup::Provider),
                Kind::KeyExpiry,
                Tone::Bad,
                &said,
            );
        }
        other => read_message(other, &text, time_ms, home, facts, state),
    }
}

/// Deliveries, answers and the sender's side of a step.
fn read_message(
    happening: &Happening,
    text: &str,
    time_ms: i64,
    home: &Lane,
    facts: &mut LineFacts,
    state: &mut ReadState,
) {
    match happening {
        Happening::Answer(answer) => {
            facts.add(home, Kind::Answer, status_tone(answer.status()), text);
        }
        Happening::AnswerSent | Happening::AnswerWritten => {
            facts.add(home, Kind::AnswerSent, Tone::Neutral, text);
        }
        Happening::AnswerLostInCrash | Happening::AnswerLost { .. } => {
            facts.add(home, Kind::AnswerLost, Tone::Bad, text);
        }
        Happening::SenderGot { answer, .. } => {
            facts.add(home, Kind::SenderGot, status_tone(answer.status()), text);
        }
        Happening::Emit { .. } => {
            facts.add(home, Kind::Emit, Tone::Info, text);
        }
        Happening::Deliver { arrival, .. } => read_arrival(arrival, Tone::Info, text, home, facts),
        Happening::Attack { arrival, .. } => read_arrival(arrival, Tone::Bad, text, home, facts),
        Happening::AttemptTimedOut { settled: true, .. }
        | Happening::FaultTimer
        | Happening::RestartSkipped => {
            facts.add(home, Kind::Quiet, Tone::Neutral, text);
        }
        Happening::AttemptTimedOut { settled: false, .. } => {
            facts.add(home, Kind::AttemptTimedOut, Tone::Warn, text);
        }
        other => read_fault(other, text, time_ms, home, facts, state),
    }
}

/// Faults, recovery, the operator and the system's own log.
fn read_fault(
    happening: &Happening,
    text: &str,
    time_ms: i64,
    home: &Lane,
    facts: &mut LineFacts,
    state: &mut ReadState,
) {
    match happening {
        Happening::Crash { process, .. } => {
            let lane = lane_or(process, home);
            state.open_transactions.remove(&lane);
            facts.add(&lane, Kind::Crash, Tone::Bad, text);
        }
        Happening::Restart { process } => {
            let label = incarnation_of(process).map(|number| format!("#{number}"));
            facts
                .add(&lane_or(process, home), Kind::Restart, Tone::Good, text)
                .label = label;
        }
        Happening::Pause { process, duration_ms } => {
            let lane = lane_or(process, home);
            facts.pause = Some((lane.clone(), time_ms.saturating_add(*duration_ms)));
            facts.add(&lane, Kind::Pause, Tone::Warn, text);
        }
        Happening::ClockSet { process, .. } => {
            facts.add(&lane_or(process, home), Kind::ClockJump, Tone::Info, text);
        }
        Happening::SenderClockSet { .. } => {
            facts.add(&Lane::named(LaneGroup::Sender), Kind::ClockJump, Tone::Info, text);
        }
        Happening::Purge { .. } | Happening::PurgeSkipped => {
            facts.add(&Lane::named(LaneGroup::Purge), Kind::Purge, Tone::Neutral, text);
        }
        Happening::OperatorRequeue | Happening::OperatorRedeliver { .. } => {
            facts.add(
                &Lane::named(LaneGroup::Operator),
                Kind::Operator,
                Tone::Neutral,
                text,
            );
        }
        Happening::Log(_) => {
            // A pass that logged a failed statement outside any transaction (a busy database
            // at a poll) is one more poll, not news.
            let poll = facts.failed_sql && !state.open_transactions.contains(home);
            facts.add(home, Kind::Log, Tone::Neutral, text).poll = poll;
        }
        _ => {
            facts.add(home, Kind::Other, Tone::Neutral, text);
        }
    }
}

/// A delivery (or a hostile request): a line to the receiver it reached, or a loss.
fn read_arrival(arrival: &Arrival, tone: Tone, text: &str, home: &Lane, facts: &mut LineFacts) {
    match arrival {
        Arrival::To(process) => {
            facts.add(home, Kind::Deliver, tone, text);
            if let Some(target) = lane_of(process) {
                facts.links.push(Link {
                    from: home.clone(),
                    to: target,
                    lost: false,
                });
            }
        }
        Arrival::Lost | Arrival::Refused => {
            facts.add(home, Kind::DeliveryLost, Tone::Bad, text);
        }
    }
}

/// What a commit changed, as marks on the committing process's lane: the leases and outcomes
/// the simulator read from the system's own rows.
fn read_observed(change: &Observed, home: &Lane, facts: &mut LineFacts) {
    let (kind, tone) = match change {
        Observed::LeaseTaken { .. } => (Kind::LeaseClaim, Tone::Lease),
        Observed::LeaseExtended { .. } => (Kind::LeaseExtend, Tone::Lease),
        Observed::LeaseReleased { .. } => (Kind::Backoff, Tone::Warn),
        Observed::Done { .. } => (Kind::Done, Tone::Good),
        Observed::Dead { .. } => (Kind::Dead, Tone::Bad),
    };
    facts.add(home, kind, tone, &change.to_string());
}

/// The tone of a webhook answer by its HTTP status: 2xx good, 5xx retryable, others rejected.
fn status_tone(status: u16) -> Tone {
    match status {
        200..=299 => Tone::Good,
        500..=599 => Tone::Warn,
        400..=499 => Tone::Bad,
        _ => Tone::Neutral,
    }
}

/// The tone of what reached a caller of the provider.
fn reply_tone(reply: &Result<ProviderReply, String>) -> Tone {
    match reply {
        Err(error) if error.starts_with("timed out") => Tone::Warn,
        Err(_) | Ok(ProviderReply::Rejected { .. }) => Tone::Bad,
        Ok(ProviderReply::Conflict | ProviderReply::RateLimited { .. }) => Tone::Warn,
        Ok(_) => Tone::Good,
    }
}

/// Records what the provider did with a request: a new effect (labelled with its id), a stored
/// result replayed, a refusal.
fn provider_outcome(
    provider: &Lane,
    reply: &Result<ProviderReply, String>,
    text: &str,
    facts: &mut LineFacts,
) {
    let (tone, label) = match reply {
        Ok(ProviderReply::Accepted {
            effect_id,
            replayed: false,
        }) => (Tone::Effect, Some(effect_id.clone())),
        Ok(ProviderReply::NotFound) => (Tone::Neutral, None),
        other => (reply_tone(other), None),
    };
    facts.add(provider, Kind::Provider, tone, text).label = label;
}

fn read_sql(
    statement: &str,
    outcome: &SqlOutcome,
    text: &str,
    home: &Lane,
    facts: &mut LineFacts,
    state: &mut ReadState,
) {
    let failed = matches!(outcome, SqlOutcome::Failed(_));
    let in_transaction = state.open_transactions.contains(home);
    let verb = Statement::remembered(statement).verb.clone();
    let (kind, tone) = match verb {
        Verb::Begin => {
            if !failed {
                state.open_transactions.insert(home.clone());
            }
            (Kind::Transaction, Tone::Neutral)
        }
        Verb::Commit => {
            if !failed {
                state.open_transactions.remove(home);
            }
            (Kind::Transaction, Tone::Neutral)
        }
        Verb::Rollback => {
            state.open_transactions.remove(home);
            (Kind::Rollback, Tone::Warn)
        }
        Verb::Select => (Kind::Read, Tone::Neutral),
        _ => (Kind::Write, Tone::Database),
    };
    facts.failed_sql |= failed;
    let (kind, tone) = if failed {
        (Kind::SqlError, Tone::Warn)
    } else {
        (kind, tone)
    };
    let fact = facts.add(home, kind, tone, text);
    fact.poll = verb == Verb::Select && !in_transaction;
}
