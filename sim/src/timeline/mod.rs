//! The timeline page: one run's trace drawn as a self-contained HTML file, for `replay --html`.
//!
//! It models what a person needs to see of a run: one lane per process (the sender, each
//! receiver, each relay worker, the provider, the purge job, the operator), every incarnation
//! of a process on its lane with each restart marked, and on those lanes every delivery,
//! answer, lost message, crash, pause, clock jump, lease claim, provider call and reply, purge
//! and key expiry, database commits, the end of the fault phase (`heal`) and the step where an
//! invariant failed, with its evidence. Every mark carries its full trace line and step number
//! as an SVG `<title>`, so hovering works without scripting.
//!
//! **The horizontal axis is the order of steps, not linear virtual time.** A run spans minutes
//! to days of virtual time, but the scheduler advances a millisecond per step inside a burst
//! and then jumps to the next timer: on a linear time axis a burst of a hundred steps would be
//! one pixel wide and the page would be mostly empty. Ordering by step keeps every
//! interleaving visible, which is what the invariants are about. Each step that carries
//! information gets one column of fixed width; idle steps (a task waking, sleeping, or polling
//! the database outside a transaction and going back to sleep, and sender timers that find
//! their attempt already settled) get no column of their own: each lane's consecutive idle steps
//! fold into one thin grey line whose hover text counts them. Where virtual time jumps by a
//! second or more between two columns, a shaded gap is drawn across all lanes, wider for longer
//! jumps, and labelled with the jump; the axis above the lanes gives the virtual time after each
//! jump and the axis below gives step numbers. Virtual time is therefore read off the labels,
//! never off distances. A few thousand steps make a page a few thousand columns wide that
//! scrolls sideways while the lane names stay put.
//!
//! Key expiry never appears in the trace by itself, because the provider forgets a key
//! silently. The page marks it where the trace shows it: at the first request for a key whose
//! reply could not have come from a stored result (a new effect, or a fresh failure) although an
//! earlier request had stored one.
//!
//! What it must not do: read the wall clock, the environment or anything but its arguments (the
//! same trace always gives the same bytes), reference any external resource (no URL, stylesheet,
//! font or script from elsewhere), panic on a line it does not understand (such a line is kept
//! as an "other" mark), or let trace text reach the page unescaped. It never runs or changes a
//! simulation; it only reads the lines a run left. The page's stylesheet and script are the files
//! `timeline/style.css` and `timeline/page.js` beside this one, compiled in and written inline, so
//! that the page still stands alone.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use commitgap::provider::ProviderReply;

use crate::run::Failure;
use crate::sql::{Statement, Verb};
use crate::trace::{Actor, Arrival, CallOutcome, Happening, Observed, SqlOutcome, TraceStep, format_time_ms};

/// A non-negative decimal number written with ASCII digits only.
fn parse_digits(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

// ----- Lanes -----

/// Lane groups in the order they appear on the page, top to bottom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum LaneGroup {
    Sender,
    Receiver,
    Relay,
    Provider,
    Purge,
    Operator,
    Faults,
    Other,
}

/// One lane: a process with all its incarnations.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Lane {
    group: LaneGroup,
    /// Orders `receiver-10` after `receiver-9`.
    number: u64,
    name: String,
}

impl Lane {
    fn new(group: LaneGroup, number: u64, name: &str) -> Lane {
        Lane {
            group,
            number,
            name: name.to_owned(),
        }
    }

    fn named(group: LaneGroup) -> Lane {
        let name = match group {
            LaneGroup::Sender => "sender",
            LaneGroup::Provider => "provider",
            LaneGroup::Purge => "purge",
            LaneGroup::Operator => "operator",
            LaneGroup::Faults => "faults",
            LaneGroup::Receiver | LaneGroup::Relay | LaneGroup::Other => "other",
        };
        Lane::new(group, 0, name)
    }

    /// What the lane is, for its hover text.
    fn description(&self) -> &'static str {
        match self.group {
            LaneGroup::Sender => "the upstream webhook sender: emits events, delivers and retries them",
            LaneGroup::Receiver => "a webhook receiver process, all its incarnations",
            LaneGroup::Relay => "an outbox relay worker, all its incarnations",
            LaneGroup::Provider => "the downstream provider: what it did with each request",
            LaneGroup::Purge => "the receipt purge job and the timer that starts it",
            LaneGroup::Operator => "the operator after heal: requeues and redeliveries",
            LaneGroup::Faults => "fault model timers",
            LaneGroup::Other => "lines from an actor or in a shape this page does not know",
        }
    }
}

/// The process name of `id` without its `#incarnation`.
fn process_name(id: &str) -> &str {
    match id.rsplit_once('#') {
        Some((name, incarnation)) if parse_digits(incarnation).is_some() => name,
        _ => id,
    }
}

/// The incarnation number of a `name#incarnation` id.
fn incarnation_of(id: &str) -> Option<u64> {
    let (_, incarnation) = id.rsplit_once('#')?;
    parse_digits(incarnation).and_then(|number| u64::try_from(number).ok())
}

/// The lane a step's actor belongs to; `None` for the world and an invariant, which are drawn
/// across every lane.
fn lane_of_actor(actor: &Actor) -> Option<Lane> {
    match actor {
        Actor::Process(id) => lane_of(id),
        Actor::Sender => Some(Lane::named(LaneGroup::Sender)),
        Actor::Provider => Some(Lane::named(LaneGroup::Provider)),
        Actor::Operator => Some(Lane::named(LaneGroup::Operator)),
        Actor::Fault(name) => lane_of(&format!("fault:{name}")),
        Actor::World | Actor::Invariant => None,
    }
}

/// The lane a process id (or an actor's name) belongs to; `None` for `world` and `invariant`,
/// which are drawn across every lane.
fn lane_of(actor: &str) -> Option<Lane> {
    let name = process_name(actor);
    let numbered = |prefix: &str| {
        name.strip_prefix(prefix)
            .and_then(parse_digits)
            .and_then(|number| u64::try_from(number).ok())
    };
    Some(match name {
        "world" | "invariant" => return None,
        "sender" => Lane::named(LaneGroup::Sender),
        "provider" => Lane::named(LaneGroup::Provider),
        "purge" | "fault:receipt-purge" => Lane::named(LaneGroup::Purge),
        "operator" => Lane::named(LaneGroup::Operator),
        _ if name.starts_with("fault:") => Lane::named(LaneGroup::Faults),
        _ => {
            if let Some(number) = numbered("receiver-") {
                Lane::new(LaneGroup::Receiver, number, name)
            } else if let Some(number) = numbered("relay-") {
                Lane::new(LaneGroup::Relay, number, name)
            } else {
                Lane::new(LaneGroup::Other, 0, name)
            }
        }
    })
}

// ----- What a line says -----

/// What a mark stands for. The order is irrelevant; [`Kind::rank`] decides which of several
/// things in one step a lane shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
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
    fn name(self) -> &'static str {
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
    fn rank(self) -> u8 {
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
    fn is_key_moment(self) -> bool {
        matches!(
            self,
            Kind::Crash | Kind::Restart | Kind::KeyExpiry | Kind::Dead | Kind::Purge | Kind::Operator
        )
    }
}

/// The colour of a mark: what the thing it stands for means for the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Tone {
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
    fn name(self) -> &'static str {
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
struct Fact {
    lane: Lane,
    kind: Kind,
    tone: Tone,
    /// A short text drawn next to the mark (an effect id, an incarnation).
    label: Option<String>,
    /// Part of a poll: a read outside a transaction, or a poll that failed and was logged.
    poll: bool,
    /// The piece of the line that says it, for the list of key moments.
    text: String,
}

/// A message drawn as a line between two lanes within one step.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Link {
    from: Lane,
    to: Lane,
    /// The reply to this request will not arrive.
    lost: bool,
}

/// Everything one step line says.
#[derive(Debug, Default)]
struct LineFacts {
    facts: Vec<Fact>,
    links: Vec<Link>,
    /// Rows written by commits in this step, on the actor's lane.
    commit_rows: Option<u64>,
    failed_sql: bool,
    /// A pause that ends at this virtual time, on this lane.
    pause: Option<(Lane, i64)>,
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
    fn is_idle(&self) -> bool {
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
struct ReadState {
    /// Lanes whose process has a transaction open.
    open_transactions: BTreeSet<Lane>,
}

/// Reads what one step's record says, happening by happening.
fn read_step(step: &TraceStep, state: &mut ReadState) -> LineFacts {
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
        Happening::Sleep { .. } => {
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
        Happening::KeyForgotten { key } => {
            let said = format!("the provider forgot key {key}: a request with it now counts as new");
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
        Ok(ProviderReply::Conflict) => Tone::Warn,
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

// ----- The run, read -----

/// The mark one lane gets in one column.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Glyph {
    lane: Lane,
    kind: Kind,
    tone: Tone,
    label: Option<String>,
    commit_rows: Option<u64>,
    key_expired: bool,
}

/// One column: a step that says something, or the heal line.
#[derive(Debug, Clone)]
struct Column {
    step: u64,
    time_ms: i64,
    /// The full trace line.
    text: String,
    glyphs: Vec<Glyph>,
    links: Vec<Link>,
    kinds: BTreeSet<Kind>,
    heal: bool,
    /// The line names something the failure's evidence names.
    related: bool,
}

/// A lane's consecutive idle steps, drawn as one thin line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct IdleRun {
    lane: Lane,
    /// The gap (between columns) the first and the last idle step fell into.
    first_gap: usize,
    last_gap: usize,
    first_line: String,
    last_line: String,
    steps: u64,
    failed_polls: u64,
}

/// A stretch of a lane where its process was down or paused.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Band {
    lane: Lane,
    paused: bool,
    first_column: usize,
    /// The column the stretch ends in; `None` runs to the end of the chart.
    last_column: Option<usize>,
    title: String,
}

/// A key moment, listed below the chart with a link to its column.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Moment {
    column: usize,
    lane: String,
    kind: Kind,
    text: String,
}

/// The invariant that failed, from the caller or from the trace's `FAILED` line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Verdict {
    invariant: String,
    kind: Option<String>,
    step: u64,
    time_ms: Option<i64>,
    evidence: String,
}

/// Per lane: the incarnations seen.
#[derive(Debug, Default, Clone)]
struct LaneInfo {
    incarnations: BTreeSet<u64>,
}

/// The whole trace, read and arranged in columns.
#[derive(Debug, Default)]
struct Reading {
    setup: Option<String>,
    lanes: BTreeMap<Lane, LaneInfo>,
    columns: Vec<Column>,
    idle_runs: Vec<IdleRun>,
    bands: Vec<Band>,
    moments: Vec<Moment>,
    heal_column: Option<usize>,
    verdict: Option<Verdict>,
    failure_column: Option<usize>,
    /// Identifiers the evidence names (keys, effect ids).
    evidence_names: Vec<String>,
    unreadable: Vec<String>,
    counts: BTreeMap<Kind, u64>,
    idle_steps: u64,
    last_step: u64,
    last_time_ms: i64,
}

fn read_trace(steps: &[TraceStep], failure: Option<&Failure>) -> Reading {
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
fn evidence_names(evidence: &str) -> Vec<String> {
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
fn mentions_any(line: &str, names: &[String]) -> bool {
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

// ----- Layout -----

/// Width of one column, in pixels: room for a mark and a hover target.
const COLUMN_PX: i64 = 8;
/// A run with few columns spreads them over about this width.
const SHORT_RUN_PX: i64 = 480;
const LANE_PX: i64 = 32;
/// The lanes start below the marker row, the virtual-time axis and the jump labels.
const LANES_TOP_PX: i64 = 58;
const STEP_AXIS_PX: i64 = 28;
const LABELS_PX: i64 = 156;
const SIDE_PAD_PX: i64 = 16;
/// A jump in virtual time at least this long between two columns is drawn as a gap.
const JUMP_MIN_MS: i64 = 1_000;
/// Time and step labels keep at least this far apart.
const TIME_LABEL_SPACING_PX: i64 = 64;
const STEP_LABEL_SPACING_PX: i64 = 48;
/// A time label appears at least this often, jump or no jump.
const TIME_LABEL_EVERY_PX: i64 = 240;

/// A jump of virtual time between two columns.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Jump {
    before_column: usize,
    x: i64,
    width: i64,
    duration_ms: i64,
}

/// Where everything goes, in pixels.
#[derive(Debug)]
struct Layout {
    column_left: Vec<i64>,
    /// From one column's start to the next one's (without a jump between them).
    pitch: i64,
    jumps: Vec<Jump>,
    lane_index: BTreeMap<Lane, i64>,
    width: i64,
    height: i64,
}

impl Layout {
    fn new(reading: &Reading) -> Layout {
        let mut column_left = Vec::with_capacity(reading.columns.len());
        let mut jumps = Vec::new();
        // A short run spreads its columns, so that its step numbers have room to be read.
        let pitch = (SHORT_RUN_PX / reading.columns.len().max(1) as i64).clamp(COLUMN_PX, 6 * COLUMN_PX);
        let mut x = SIDE_PAD_PX;
        for (index, column) in reading.columns.iter().enumerate() {
            if index > 0 {
                let duration_ms = column.time_ms - reading.columns[index - 1].time_ms;
                if duration_ms >= JUMP_MIN_MS {
                    let width = jump_width(duration_ms);
                    jumps.push(Jump {
                        before_column: index,
                        x,
                        width,
                        duration_ms,
                    });
                    x += width;
                }
            }
            column_left.push(x);
            x += pitch;
        }
        let lane_index = reading
            .lanes
            .keys()
            .enumerate()
            .map(|(index, lane)| (lane.clone(), index as i64))
            .collect();
        // Wide enough for the failure's label, which a short run's chart could otherwise cut.
        let label_px = reading.verdict.as_ref().map_or(0, |verdict| {
            label_width_px(&failure_label(verdict)) + 2 * SIDE_PAD_PX
        });
        Layout {
            column_left,
            jumps,
            lane_index,
            pitch,
            width: (x + SIDE_PAD_PX).max(320).max(label_px),
            height: LANES_TOP_PX + reading.lanes.len() as i64 * LANE_PX + STEP_AXIS_PX,
        }
    }

    fn center_x(&self, column: usize) -> i64 {
        self.column_left[column] + COLUMN_PX / 2
    }

    /// Where the column after `column` would start.
    fn after(&self, column: usize) -> i64 {
        self.column_left[column] + self.pitch
    }

    /// The x of a gap between columns: where idle steps that fell into it are drawn.
    fn gap_x(&self, gap: usize) -> i64 {
        match (gap.checked_sub(1), self.column_left.get(gap)) {
            (None, Some(&left)) => left - 2,
            (Some(before), Some(&left)) => (self.after(before) + left) / 2,
            (Some(before), None) => self.after(before) + 2,
            (None, None) => SIDE_PAD_PX,
        }
    }

    fn lane_top(&self, lane: &Lane) -> i64 {
        LANES_TOP_PX + self.lane_index.get(lane).copied().unwrap_or(0) * LANE_PX
    }

    fn lane_center(&self, lane: &Lane) -> i64 {
        self.lane_top(lane) + 14
    }

    fn lanes_bottom(&self) -> i64 {
        LANES_TOP_PX + self.lane_index.len() as i64 * LANE_PX
    }
}

/// Longer jumps get wider gaps, so an hour of nothing looks unlike a second of it.
fn jump_width(duration_ms: i64) -> i64 {
    if duration_ms < 60_000 {
        5
    } else if duration_ms < 3_600_000 {
        10
    } else if duration_ms < 86_400_000 {
        16
    } else {
        22
    }
}

/// A jump's length, short enough for an axis label: `1.5s`, `21m47s`, `2h14m`, `3d2h`.
fn short_duration(duration_ms: i64) -> String {
    let seconds = duration_ms / 1_000;
    if duration_ms < 1_000 {
        format!("{duration_ms}ms")
    } else if seconds < 60 {
        let tenths = (duration_ms % 1_000) / 100;
        if tenths == 0 {
            format!("{seconds}s")
        } else {
            format!("{seconds}.{tenths}s")
        }
    } else if seconds < 3_600 {
        format!("{}m{:02}s", seconds / 60, seconds % 60)
    } else if seconds < 86_400 {
        format!("{}h{:02}m", seconds / 3_600, (seconds / 60) % 60)
    } else {
        format!("{}d{}h", seconds / 86_400, (seconds / 3_600) % 24)
    }
}

/// `h:mm:ss` of a virtual time, for axis labels (hover text has the milliseconds).
fn short_time(time_ms: i64) -> String {
    let full = format_time_ms(time_ms);
    match full.rsplit_once('.') {
        Some((clock, _)) => clock.to_owned(),
        None => full,
    }
}

// ----- Writing the page -----

/// The page's stylesheet. The file keeps a group of rules a line, for editing; the page carries
/// it on one line (see [`write_style`]).
const STYLE: &str = include_str!("style.css");

/// Scrolls the chart to the failing step when the page opens. Without scripting the page is
/// complete; the link in the verdict does the same.
const SCRIPT: &str = include_str!("page.js");

/// Escapes text for HTML and SVG, in element content and in quoted attributes alike: html-escape's
/// quoted-attribute encoder escapes `&`, `<`, `>` and both quotes, which is right in either place,
/// so no call site can pick the wrong one of two escapers. Control characters other than tab and
/// newline cannot appear in a document, so they become U+FFFD before escaping.
fn escape(text: &str) -> String {
    let unprintable = |character: char| character.is_control() && !matches!(character, '\t' | '\n');
    if text.contains(unprintable) {
        let printable: String = text
            .chars()
            .map(|character| {
                if unprintable(character) {
                    '\u{fffd}'
                } else {
                    character
                }
            })
            .collect();
        html_escape::encode_quoted_attribute(&printable).into_owned()
    } else {
        html_escape::encode_quoted_attribute(text).into_owned()
    }
}

/// Renders a run's trace as one self-contained HTML page.
///
/// `title` names the run (for example `reference, seed 17`); `lines` is the trace as
/// `replay --trace` prints it; `failure`, when given, is the invariant that failed (otherwise
/// the trace's own `FAILED` line, if any, is used). The same arguments always give the same
/// bytes.
pub fn render(title: &str, steps: &[TraceStep], failure: Option<&Failure>) -> String {
    let reading = read_trace(steps, failure);
    let layout = Layout::new(&reading);
    let mut page = String::with_capacity(4_096 + steps.len() * 512);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>commitgap timeline: {}</title>\n",
        escape(title)
    );
    write_style(&mut page);
    page.push_str("</head>\n<body>\n");
    write_header(&mut page, title, &reading);
    write_verdict(&mut page, &reading);
    write_chart(&mut page, &reading, &layout);
    write_legend(&mut page);
    write_moments(&mut page, &reading);
    write_evidence_lines(&mut page, &reading);
    write_unreadable(&mut page, &reading);
    let _ = write!(page, "<script>\n{SCRIPT}</script>\n");
    page.push_str("</body>\n</html>\n");
    page
}

/// The stylesheet inline, its lines joined: CSS means the same with or without line breaks
/// between rules, and the page keeps the one-line `<style>` it has always had.
fn write_style(page: &mut String) {
    page.push_str("<style>");
    for line in STYLE.lines() {
        page.push_str(line);
    }
    page.push_str("</style>\n");
}

fn write_header(page: &mut String, title: &str, reading: &Reading) {
    let _ = writeln!(page, "<header>\n<h1>commitgap timeline: {}</h1>", escape(title));
    if let Some(setup) = &reading.setup {
        let _ = writeln!(
            page,
            "<p class=\"setup\"><code>setup {}</code></p>",
            escape(setup)
        );
    }
    let count = |kind: Kind| reading.counts.get(&kind).copied().unwrap_or(0);
    let lost = count(Kind::DeliveryLost) + count(Kind::AnswerLost);
    let replies_lost: usize = reading
        .columns
        .iter()
        .map(|column| column.links.iter().filter(|link| link.lost).count())
        .sum();
    let effects = reading
        .moments
        .iter()
        .filter(|moment| moment.kind == Kind::Provider)
        .count();
    let _ = writeln!(
        page,
        "<p class=\"stats\">{} steps over {} of virtual time: {} columns, {} idle steps folded into \
         grey lines.</p>",
        reading.last_step,
        short_duration(reading.last_time_ms.max(0)),
        reading.columns.len(),
        reading.idle_steps
    );
    let tally = [
        ("deliveries", count(Kind::Deliver)),
        ("lost messages", lost + replies_lost as u64),
        ("commits", count(Kind::Commit)),
        ("lease claims", count(Kind::LeaseClaim)),
        ("provider calls", count(Kind::Call)),
        ("new effects", effects as u64),
        ("crashes", count(Kind::Crash)),
        ("restarts", count(Kind::Restart)),
        ("pauses", count(Kind::Pause)),
        ("clock jumps", count(Kind::ClockJump)),
        ("purges", count(Kind::Purge)),
        ("key expiries", count(Kind::KeyExpiry)),
    ];
    page.push_str("<ul class=\"tally\">");
    for (what, number) in tally {
        let _ = write!(page, "<li><b>{number}</b> {what}</li>");
    }
    page.push_str("</ul>\n</header>\n");
}

fn write_verdict(page: &mut String, reading: &Reading) {
    let heal = reading.heal_column.map(|index| &reading.columns[index]);
    let heal_text = match heal {
        Some(column) => format!(
            "The fault phase ended at step {} ({}): <a href=\"#heal\">heal</a>.",
            column.step,
            escape(&format_time_ms(column.time_ms))
        ),
        None => "The trace ends before the faults healed (no <code>heal</code> line).".to_owned(),
    };
    match &reading.verdict {
        Some(verdict) => {
            let time = verdict
                .time_ms
                .map(|time_ms| format!(" ({})", format_time_ms(time_ms)))
                .unwrap_or_default();
            let kind = verdict
                .kind
                .as_deref()
                .map(|kind| format!(" <span class=\"kind\">{}</span>", escape(kind)))
                .unwrap_or_default();
            let _ = writeln!(
                page,
                "<section id=\"verdict\" class=\"verdict failed\">\n<h2>FAILED <span class=\"invariant\">{}</span>{kind} at step {}{}</h2>\n\
                 <p class=\"evidence\">{}</p>",
                escape(&verdict.invariant),
                verdict.step,
                escape(&time),
                escape(&verdict.evidence)
            );
            let mut notes = Vec::new();
            if reading.failure_column.is_some() {
                notes.push(
                    "<a href=\"#failure\">Show the failing step on the timeline</a> (the red column)."
                        .to_owned(),
                );
            }
            if !reading.evidence_names.is_empty() {
                let names: Vec<String> = reading
                    .evidence_names
                    .iter()
                    .map(|name| format!("<code>{}</code>", escape(name)))
                    .collect();
                notes.push(format!(
                    "Marks whose line names {} are ringed in red.",
                    names.join(", ")
                ));
            }
            notes.push(heal_text);
            let _ = writeln!(page, "<p>{}</p>\n</section>", notes.join(" "));
        }
        None => {
            let _ = writeln!(
                page,
                "<section id=\"verdict\" class=\"verdict passed\">\n<h2>No invariant failed in this trace</h2>\n<p>{heal_text}</p>\n</section>"
            );
        }
    }
}

fn write_chart(page: &mut String, reading: &Reading, layout: &Layout) {
    page.push_str(
        "<section id=\"timeline\">\n<h2>Timeline</h2>\n<p class=\"how\">One lane per process; columns are \
         steps in order, left to right. A shaded gap means virtual time jumped (by the amount written \
         above it); the top axis gives virtual time after each jump, the bottom axis step numbers. Thin \
         grey lines are idle polls and wake-ups, folded. Hover any mark for its trace line.</p>\n\
         <div class=\"chart\">\n",
    );
    write_lane_labels(page, reading, layout);
    let _ = writeln!(
        page,
        "<div class=\"scroll\" id=\"chart-scroll\">\n<svg class=\"timeline\" width=\"{w}\" height=\"{h}\" \
         viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"timeline of {} steps\">",
        reading.last_step,
        w = layout.width,
        h = layout.height
    );
    write_backgrounds(page, reading, layout);
    write_idle_runs(page, reading, layout);
    for (index, column) in reading.columns.iter().enumerate() {
        if column.heal {
            write_heal(page, column, index, layout);
        } else {
            write_column(page, reading, column, index, layout);
        }
    }
    write_axes(page, reading, layout);
    page.push_str("</svg>\n</div>\n</div>\n</section>\n");
}

fn write_lane_labels(page: &mut String, reading: &Reading, layout: &Layout) {
    let _ = writeln!(
        page,
        "<svg class=\"labels\" width=\"{LABELS_PX}\" height=\"{h}\" viewBox=\"0 0 {LABELS_PX} {h}\">",
        h = layout.height
    );
    let _ = writeln!(
        page,
        "<text class=\"axis-name\" x=\"6\" y=\"30\">virtual time</text>\
         <text class=\"axis-name\" x=\"6\" y=\"48\">time jumped</text>\
         <text class=\"axis-name\" x=\"6\" y=\"{}\">step</text>",
        layout.lanes_bottom() + 16
    );
    for (index, (lane, info)) in reading.lanes.iter().enumerate() {
        let top = layout.lane_top(lane);
        let stripe = if index % 2 == 0 { "lane-even" } else { "lane-odd" };
        let incarnations = match (info.incarnations.first(), info.incarnations.last()) {
            (Some(first), Some(last)) if first != last => {
                format!("incarnations #{first}\u{2013}#{last}")
            }
            _ => String::new(),
        };
        let _ = write!(
            page,
            "<g class=\"lane-label\" data-lane=\"{name}\"><title>{name}: {what}</title>\
             <rect class=\"{stripe}\" x=\"0\" y=\"{top}\" width=\"{LABELS_PX}\" height=\"{LANE_PX}\"/>\
             <text class=\"lane-name\" x=\"8\" y=\"{}\">{name}</text>",
            top + 14,
            name = escape(&lane.name),
            what = lane.description(),
        );
        if !incarnations.is_empty() {
            let _ = write!(
                page,
                "<text class=\"lane-sub\" x=\"8\" y=\"{}\">{incarnations}</text>",
                top + 26
            );
        }
        page.push_str("</g>\n");
    }
    page.push_str("</svg>\n");
}

fn write_backgrounds(page: &mut String, reading: &Reading, layout: &Layout) {
    for (index, lane) in reading.lanes.keys().enumerate() {
        let stripe = if index % 2 == 0 { "lane-even" } else { "lane-odd" };
        let _ = write!(
            page,
            "<rect class=\"{stripe}\" x=\"0\" y=\"{}\" width=\"{}\" height=\"{LANE_PX}\"/>",
            layout.lane_top(lane),
            layout.width
        );
    }
    page.push('\n');
    if let Some(heal) = reading.heal_column {
        let x = layout.center_x(heal);
        let _ = writeln!(
            page,
            "<rect class=\"phase-liveness\" x=\"{x}\" y=\"{LANES_TOP_PX}\" width=\"{}\" height=\"{}\"><title>after heal: the liveness phase</title></rect>",
            layout.width - x,
            layout.lanes_bottom() - LANES_TOP_PX
        );
    }
    for jump in &layout.jumps {
        let before = &reading.columns[jump.before_column - 1];
        let after = &reading.columns[jump.before_column];
        let _ = writeln!(
            page,
            "<g class=\"jump\"><title>virtual time jumps {} from step {} ({}) to step {} ({}); only idle steps, if any, in between</title>\
             <rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/></g>",
            escape(&short_duration(jump.duration_ms)),
            before.step,
            format_time_ms(before.time_ms),
            after.step,
            format_time_ms(after.time_ms),
            jump.x,
            LANES_TOP_PX - 16,
            jump.width,
            layout.lanes_bottom() - LANES_TOP_PX + 16
        );
    }
    for band in &reading.bands {
        let left = layout.center_x(band.first_column);
        let right = band
            .last_column
            .map_or(layout.width - SIDE_PAD_PX, |column| layout.center_x(column));
        // A pause holds one task, not the whole process, so it is a strip along the lane's top
        // edge; a crash takes the whole process down, so it shades the whole lane.
        let (class, top, height) = if band.paused {
            ("band-paused", layout.lane_top(&band.lane) + 1, 4)
        } else {
            ("band-down", layout.lane_top(&band.lane) + 3, LANE_PX - 6)
        };
        let _ = writeln!(
            page,
            "<rect class=\"{class}\" x=\"{left}\" y=\"{top}\" width=\"{}\" height=\"{height}\"><title>{}</title></rect>",
            (right - left).max(2),
            escape(&band.title)
        );
    }
    if let (Some(column), Some(verdict)) = (reading.failure_column, &reading.verdict) {
        let _ = writeln!(
            page,
            "<rect id=\"failure\" class=\"failure-band\" data-x=\"{}\" data-step=\"{}\" x=\"{}\" y=\"0\" width=\"{}\" height=\"{}\">\
             <title>FAILED {}: {}</title></rect>",
            layout.center_x(column),
            verdict.step,
            layout.column_left[column] - 2,
            COLUMN_PX + 4,
            layout.lanes_bottom(),
            escape(&verdict.invariant),
            escape(&verdict.evidence)
        );
    }
}

fn write_idle_runs(page: &mut String, reading: &Reading, layout: &Layout) {
    for run in &reading.idle_runs {
        let left = layout.gap_x(run.first_gap);
        let right = layout.gap_x(run.last_gap).max(left + 4);
        let failed = if run.failed_polls > 0 {
            format!(", {} of them failed on a busy database", run.failed_polls)
        } else {
            String::new()
        };
        let class = if run.failed_polls > 0 {
            "idle idle-failing"
        } else {
            "idle"
        };
        let summary = format!(
            "{}: {} idle steps (polls, sleeps, wake-ups){failed}\nfirst: {}\nlast: {}",
            run.lane.name, run.steps, run.first_line, run.last_line
        );
        let _ = writeln!(
            page,
            "<g class=\"{class}\" data-lane=\"{}\" data-steps=\"{}\"><title>{}</title><rect x=\"{left}\" y=\"{}\" width=\"{}\" height=\"3\"/></g>",
            escape(&run.lane.name),
            run.steps,
            escape(&summary),
            layout.lane_center(&run.lane) - 1,
            right - left
        );
    }
}

fn write_heal(page: &mut String, column: &Column, index: usize, layout: &Layout) {
    let x = layout.center_x(index);
    let _ = writeln!(
        page,
        "<g id=\"heal\" class=\"heal\" data-step=\"{}\"><title>step {} ({}): {}</title>\
         <line x1=\"{x}\" y1=\"6\" x2=\"{x}\" y2=\"{}\"/><text x=\"{}\" y=\"12\">heal</text></g>",
        column.step,
        column.step,
        format_time_ms(column.time_ms),
        escape(&column.text),
        layout.lanes_bottom(),
        x + 3
    );
}

fn write_column(page: &mut String, reading: &Reading, column: &Column, index: usize, layout: &Layout) {
    let x = layout.center_x(index);
    let kinds: Vec<&str> = column.kinds.iter().map(|kind| kind.name()).collect();
    let lanes: BTreeSet<&str> = column
        .glyphs
        .iter()
        .map(|glyph| glyph.lane.name.as_str())
        .collect();
    let first_of_step = index == 0 || reading.columns[index - 1].step != column.step;
    let id = if first_of_step {
        format!(" id=\"step-{}\"", column.step)
    } else {
        String::new()
    };
    let related = if column.related { " related" } else { "" };
    let _ = write!(
        page,
        "<g class=\"m{related}\"{id} data-step=\"{}\" data-lanes=\"{}\" data-kinds=\"{}\"><title>step {} ({})\n{}</title>",
        column.step,
        escape(&lanes.into_iter().collect::<Vec<_>>().join(" ")),
        kinds.join(" "),
        column.step,
        format_time_ms(column.time_ms),
        escape(&column.text)
    );
    for link in &column.links {
        let from = layout.lane_center(&link.from);
        let to = layout.lane_center(&link.to);
        let class = if link.lost { "link lost" } else { "link" };
        let _ = write!(
            page,
            "<line class=\"{class}\" x1=\"{x}\" y1=\"{from}\" x2=\"{x}\" y2=\"{to}\"/><circle class=\"link-end\" cx=\"{x}\" cy=\"{to}\" r=\"1.5\"/>"
        );
    }
    for glyph in &column.glyphs {
        let y = layout.lane_center(&glyph.lane);
        if column.related {
            let _ = write!(page, "<circle class=\"ring\" cx=\"{x}\" cy=\"{y}\" r=\"6.5\"/>");
        }
        page.push_str(&glyph_svg(glyph.kind, glyph.tone, x, y));
        if glyph.commit_rows.is_some() && glyph.kind != Kind::Commit {
            let _ = write!(
                page,
                "<rect class=\"f t-db\" x=\"{}\" y=\"{}\" width=\"6\" height=\"3\"/>",
                x - 3,
                y + 8
            );
        }
        if glyph.key_expired {
            page.push_str(&glyph_svg(Kind::KeyExpiry, Tone::Bad, x, y - 10));
        }
        if let Some(label) = &glyph.label {
            let _ = write!(
                page,
                "<text class=\"mark-label\" x=\"{}\" y=\"{}\">{}</text>",
                x + 5,
                y - 5,
                escape(label)
            );
        }
    }
    page.push_str("</g>\n");
}

/// The SVG of one mark centred on (`x`, `y`): the shape says what it is, the colour how it went.
fn glyph_svg(kind: Kind, tone: Tone, x: i64, y: i64) -> String {
    let tone = tone.name();
    let fill = format!("f t-{tone}");
    let stroke = format!("s t-{tone}");
    let at = Centre { x, y };
    match kind {
        Kind::Emit => at.circle("3", &stroke),
        Kind::Deliver => at.triangle_down(&fill),
        Kind::DeliveryLost | Kind::AnswerLost => at.cross(3, "s t-bad x"),
        Kind::Crash => at.cross(4, "s t-bad crash"),
        Kind::AttemptTimedOut => at.circle("3", "s t-warn"),
        Kind::SenderGot | Kind::Reply => at.circle("2.5", &fill),
        Kind::Answer => at.square(3, &fill),
        Kind::AnswerSent => at.circle("1.5", &fill),
        Kind::Transaction | Kind::Read => at.circle("1.5", "f t-neutral"),
        Kind::Write => at.square(2, &fill),
        Kind::Commit => at.square(3, "f t-db"),
        Kind::Rollback => at.square(3, "s t-warn"),
        Kind::SqlError => at.triangle_up("f t-warn"),
        Kind::LeaseClaim => at.diamond(4, &fill),
        Kind::LeaseExtend | Kind::Backoff => at.diamond(3, &stroke),
        Kind::Done | Kind::Dead => at.diamond(4, &fill),
        Kind::Call => at.circle("3", &fill),
        Kind::Provider if tone == "effect" => at.square(4, &fill),
        Kind::Provider => at.square(3, &fill),
        Kind::KeyExpiry => at.hourglass("f t-bad expiry"),
        Kind::Restart => at.restart_bar(),
        Kind::Pause => at.pause_bars(),
        Kind::ClockJump => at.clock(),
        Kind::Purge => at.bin(),
        Kind::Operator => at.plus(),
        Kind::Log => at.circle("2", "s t-neutral"),
        Kind::Wake | Kind::Sleep | Kind::Quiet => at.circle("1", "f t-neutral"),
        Kind::Other => at.square(3, "s t-neutral"),
    }
}

/// The centre a mark is drawn around, in the chart's pixels. Each method draws one shape of the
/// legend there; `class` gives the shape its colour and whether it is filled or outlined. The
/// shapes whose colour never changes (restart, pause, clock, bin, plus) carry their own class.
#[derive(Clone, Copy)]
struct Centre {
    x: i64,
    y: i64,
}

impl Centre {
    fn circle(self, radius: &str, class: &str) -> String {
        let Centre { x, y } = self;
        format!("<circle class=\"{class}\" cx=\"{x}\" cy=\"{y}\" r=\"{radius}\"/>")
    }

    /// A square `2 * half` pixels wide.
    fn square(self, half: i64, class: &str) -> String {
        rect(
            class,
            self.x - half,
            self.y - half,
            &(2 * half).to_string(),
            &(2 * half).to_string(),
        )
    }

    /// An X whose arms reach `size` pixels from the centre each way.
    fn cross(self, size: i64, class: &str) -> String {
        let Centre { x, y } = self;
        format!(
            "<path class=\"{class}\" d=\"M{} {}L{} {}M{} {}L{} {}\"/>",
            x - size,
            y - size,
            x + size,
            y + size,
            x - size,
            y + size,
            x + size,
            y - size
        )
    }

    /// A diamond whose corners are `size` pixels from the centre.
    fn diamond(self, size: i64, class: &str) -> String {
        let Centre { x, y } = self;
        format!(
            "<path class=\"{class}\" d=\"M{x} {}L{} {y}L{x} {}L{} {y}Z\"/>",
            y - size,
            x + size,
            y + size,
            x - size
        )
    }

    /// A triangle pointing down, as a delivery arrives on a lane.
    fn triangle_down(self, class: &str) -> String {
        let Centre { x, y } = self;
        format!(
            "<path class=\"{class}\" d=\"M{} {}L{} {}L{x} {}Z\"/>",
            x - 4,
            y - 3,
            x + 4,
            y - 3,
            y + 4
        )
    }

    /// A triangle pointing up, the warning sign of a failed statement.
    fn triangle_up(self, class: &str) -> String {
        let Centre { x, y } = self;
        format!(
            "<path class=\"{class}\" d=\"M{x} {}L{} {}L{} {}Z\"/>",
            y - 3,
            x + 3,
            y + 3,
            x - 3,
            y + 3
        )
    }

    /// An hourglass: time ran out for a key.
    fn hourglass(self, class: &str) -> String {
        let Centre { x, y } = self;
        format!(
            "<path class=\"{class}\" d=\"M{} {}L{} {}L{} {}L{} {}Z\"/>",
            x - 3,
            y - 3,
            x + 3,
            y - 3,
            x - 3,
            y + 3,
            x + 3,
            y + 3
        )
    }

    /// A tall green bar across the lane, where a process came back.
    fn restart_bar(self) -> String {
        rect("f t-good", self.x - 1, self.y - 8, "3", "16")
    }

    /// Two upright bars, as on a pause button.
    fn pause_bars(self) -> String {
        let Centre { x, y } = self;
        rect("f t-warn", x - 3, y - 4, "2", "8") + &rect("f t-warn", x + 1, y - 4, "2", "8")
    }

    /// A clock face with its hands.
    fn clock(self) -> String {
        let Centre { x, y } = self;
        format!(
            "<circle class=\"s t-info\" cx=\"{x}\" cy=\"{y}\" r=\"3.5\"/><path class=\"s t-info\" d=\"M{x} {}L{x} {y}L{} {y}\"/>",
            y - 3,
            x + 2
        )
    }

    /// A bin with its lid, where receipts were purged.
    fn bin(self) -> String {
        let Centre { x, y } = self;
        rect("f t-purge", x - 3, y - 2, "6", "7") + &rect("f t-purge", x - 4, y - 4, "8", "1.5")
    }

    /// A plus, where the operator stepped in.
    fn plus(self) -> String {
        let Centre { x, y } = self;
        rect("f t-neutral", x - 4, y - 1, "8", "2") + &rect("f t-neutral", x - 1, y - 4, "2", "8")
    }
}

/// One SVG `<rect>` with its top left corner at (`x`, `y`); sizes are text because some are
/// fractional.
fn rect(class: &str, x: i64, y: i64, width: &str, height: &str) -> String {
    format!("<rect class=\"{class}\" x=\"{x}\" y=\"{y}\" width=\"{width}\" height=\"{height}\"/>")
}

fn write_axes(page: &mut String, reading: &Reading, layout: &Layout) {
    let mut last_time_x = i64::MIN / 2;
    let jump_starts: BTreeSet<usize> = layout.jumps.iter().map(|jump| jump.before_column).collect();
    for (index, column) in reading.columns.iter().enumerate() {
        let x = layout.center_x(index);
        // Every jump gets a label where there is room; long stretches without a jump get one
        // now and then, so that virtual time can always be read nearby.
        let wanted = index == 0 || jump_starts.contains(&index) || x - last_time_x >= TIME_LABEL_EVERY_PX;
        if wanted && x - last_time_x >= TIME_LABEL_SPACING_PX {
            let _ = write!(
                page,
                "<text class=\"time-label\" x=\"{x}\" y=\"30\">{}</text><line class=\"tick\" x1=\"{x}\" y1=\"33\" x2=\"{x}\" y2=\"{}\"/>",
                short_time(column.time_ms),
                LANES_TOP_PX
            );
            last_time_x = x;
        }
    }
    page.push('\n');
    let mut last_jump_x = i64::MIN / 2;
    for jump in &layout.jumps {
        let x = jump.x + jump.width / 2;
        if x - last_jump_x >= 44 {
            let _ = write!(
                page,
                "<text class=\"jump-label\" x=\"{x}\" y=\"48\">+{}</text>",
                short_duration(jump.duration_ms)
            );
            last_jump_x = x;
        }
    }
    page.push('\n');
    let bottom = layout.lanes_bottom();
    let mut last_step_x = i64::MIN / 2;
    let last = reading.columns.len().saturating_sub(1);
    for (index, column) in reading.columns.iter().enumerate() {
        let x = layout.center_x(index);
        // The last step is labelled too, where the labels leave it half their usual room.
        let room = if index == last {
            STEP_LABEL_SPACING_PX / 2
        } else {
            STEP_LABEL_SPACING_PX
        };
        if x - last_step_x >= room {
            let _ = write!(
                page,
                "<line class=\"tick\" x1=\"{x}\" y1=\"{bottom}\" x2=\"{x}\" y2=\"{}\"/><text class=\"step-label\" x=\"{x}\" y=\"{}\">{}</text>",
                bottom + 4,
                bottom + 16,
                column.step
            );
            last_step_x = x;
        }
    }
    page.push('\n');
    if let (Some(column), Some(verdict)) = (reading.failure_column, &reading.verdict) {
        let x = layout.center_x(column);
        let label = failure_label(verdict);
        let width = label_width_px(&label);
        // The label reads rightwards from its column when it fits, else leftwards, else from
        // the chart's left edge: it is never cut.
        let (anchor, at) = if x + 8 + width <= layout.width {
            ("start", x + 8)
        } else if x - 8 - width >= 0 {
            ("end", x - 8)
        } else {
            ("start", SIDE_PAD_PX)
        };
        let _ = writeln!(
            page,
            "<text class=\"failure-label\" text-anchor=\"{anchor}\" x=\"{at}\" y=\"12\">{}</text>",
            escape(&label)
        );
    }
}

/// `FAILED <invariant> at step <n>`, drawn over the failing column.
fn failure_label(verdict: &Verdict) -> String {
    format!("FAILED {} at step {}", verdict.invariant, verdict.step)
}

/// About how wide a label is drawn, in pixels: the page's bold 12px sans-serif averages under
/// seven pixels a character; rounded up so that a label is never cut.
fn label_width_px(label: &str) -> i64 {
    label.chars().count() as i64 * 8
}

/// The legend: each shape with what it stands for. Colours: green went well, amber was retried
/// or delayed, red failed or was lost, teal is a real effect, purple a lease, black a commit.
const LEGEND: [(Kind, Tone, &str); 26] = [
    (Kind::Emit, Tone::Info, "event created by the sender"),
    (
        Kind::Deliver,
        Tone::Info,
        "delivery to a receiver (line to its lane)",
    ),
    (
        Kind::DeliveryLost,
        Tone::Bad,
        "message lost: delivery, answer (or reply: red dashed line)",
    ),
    (Kind::AttemptTimedOut, Tone::Warn, "sender's attempt timed out"),
    (
        Kind::Answer,
        Tone::Good,
        "receiver's answer: green 2xx, amber 5xx, red 4xx",
    ),
    (Kind::AnswerSent, Tone::Neutral, "answer sent back"),
    (Kind::SenderGot, Tone::Good, "the sender got an answer"),
    (
        Kind::Transaction,
        Tone::Neutral,
        "BEGIN, read, or COMMIT with nothing written",
    ),
    (Kind::Write, Tone::Database, "database write"),
    (
        Kind::Commit,
        Tone::Database,
        "commit (a bar under another mark: that step committed)",
    ),
    (
        Kind::SqlError,
        Tone::Warn,
        "statement failed (busy, disk full, I/O error)",
    ),
    (Kind::Rollback, Tone::Warn, "rollback"),
    (
        Kind::LeaseClaim,
        Tone::Lease,
        "lease taken, as the system's rows show (its token grew)",
    ),
    (Kind::LeaseExtend, Tone::Lease, "lease extended"),
    (Kind::Backoff, Tone::Warn, "lease given up: retry later"),
    (Kind::Done, Tone::Good, "obligation done (green) or dead (red)"),
    (
        Kind::Call,
        Tone::Info,
        "provider call (line to the provider; red: its reply will be lost)",
    ),
    (
        Kind::Provider,
        Tone::Effect,
        "provider acted: teal new effect, green replayed, amber busy/409, red error",
    ),
    (Kind::Reply, Tone::Good, "reply received by the caller"),
    (
        Kind::KeyExpiry,
        Tone::Bad,
        "key expiry: the provider had forgotten the key",
    ),
    (
        Kind::Crash,
        Tone::Bad,
        "crash (the lane is shaded red until the restart)",
    ),
    (Kind::Restart, Tone::Good, "restart, with the new incarnation"),
    (
        Kind::Pause,
        Tone::Warn,
        "pause (an amber strip along the lane's top while a task is paused)",
    ),
    (Kind::ClockJump, Tone::Info, "clock jump"),
    (Kind::Purge, Tone::Neutral, "receipt purge"),
    (
        Kind::Operator,
        Tone::Neutral,
        "operator: requeue or manual redelivery",
    ),
];

fn write_legend(page: &mut String) {
    page.push_str("<section id=\"legend\">\n<h2>Legend</h2>\n<ul class=\"legend\">\n");
    for (kind, tone, meaning) in LEGEND {
        let _ = writeln!(
            page,
            "<li data-kind=\"{}\"><svg width=\"18\" height=\"18\" viewBox=\"0 0 18 18\">{}</svg> {}</li>",
            kind.name(),
            glyph_svg(kind, tone, 9, 9),
            escape(meaning)
        );
    }
    page.push_str(
        "<li><svg width=\"18\" height=\"18\" viewBox=\"0 0 18 18\"><rect class=\"idle-swatch\" x=\"1\" y=\"8\" width=\"16\" height=\"3\"/></svg> idle polls and wake-ups, folded</li>\n\
         <li><svg width=\"18\" height=\"18\" viewBox=\"0 0 18 18\"><circle class=\"ring\" cx=\"9\" cy=\"9\" r=\"6.5\"/></svg> the line names something the evidence names</li>\n\
         <li><svg width=\"18\" height=\"18\" viewBox=\"0 0 18 18\"><rect class=\"jump-swatch\" x=\"5\" y=\"0\" width=\"8\" height=\"18\"/></svg> virtual time jumped</li>\n\
         </ul>\n</section>\n",
    );
}

/// How many key moments the table lists before it says how many more there are.
const MOMENTS_MAX: usize = 400;

fn write_moments(page: &mut String, reading: &Reading) {
    let mut rows: Vec<(usize, String, String, String)> = reading
        .moments
        .iter()
        .map(|moment| {
            (
                moment.column,
                moment.lane.clone(),
                // The provider's key moments are its new effects.
                match moment.kind {
                    Kind::Provider => "new-effect".to_owned(),
                    kind => kind.name().to_owned(),
                },
                moment.text.clone(),
            )
        })
        .collect();
    if let Some(heal) = reading.heal_column {
        let text = reading.columns[heal].text.clone();
        let action = text
            .split_once("heal:")
            .map_or(text.clone(), |(_, rest)| format!("heal:{rest}"));
        rows.push((heal, "all".to_owned(), "heal".to_owned(), action));
    }
    if let (Some(column), Some(verdict)) = (reading.failure_column, &reading.verdict) {
        rows.push((
            column,
            "all".to_owned(),
            "failure".to_owned(),
            format!("FAILED {}: {}", verdict.invariant, verdict.evidence),
        ));
    }
    rows.sort_by_key(|row| row.0);
    page.push_str(
        "<section id=\"moments\">\n<h2>Key moments</h2>\n<table class=\"moments\">\n<thead><tr><th>step</th><th>virtual time</th><th>lane</th><th>what</th><th></th></tr></thead>\n<tbody>\n",
    );
    for (column_index, lane, kind, text) in rows.iter().take(MOMENTS_MAX) {
        let column = &reading.columns[*column_index];
        let _ = writeln!(
            page,
            "<tr class=\"moment-{kind}\"><td><a href=\"#{}\">{}</a></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if kind == "heal" {
                "heal".to_owned()
            } else if kind == "failure" {
                "failure".to_owned()
            } else {
                format!("step-{}", column.step)
            },
            column.step,
            format_time_ms(column.time_ms),
            escape(lane),
            escape(kind),
            escape(text)
        );
    }
    page.push_str("</tbody>\n</table>\n");
    if rows.len() > MOMENTS_MAX {
        let _ = writeln!(
            page,
            "<p>and {} more, on the timeline.</p>",
            rows.len() - MOMENTS_MAX
        );
    }
    page.push_str("</section>\n");
}

/// How many trace lines the evidence section quotes, at most, in each list.
const QUOTED_LINES_MAX: usize = 60;
/// How many lines before the failing step the last list quotes.
const LINES_BEFORE_FAILURE: usize = 25;

fn write_evidence_lines(page: &mut String, reading: &Reading) {
    let Some(failure_column) = reading.failure_column else {
        return;
    };
    page.push_str("<section id=\"evidence-lines\">\n<h2>Trace lines behind the failure</h2>\n");
    let related: Vec<&Column> = reading.columns.iter().filter(|column| column.related).collect();
    if !related.is_empty() {
        let _ = writeln!(
            page,
            "<h3>Lines that name {}</h3>\n<pre class=\"lines\">",
            escape(&reading.evidence_names.join(", "))
        );
        let skipped = related.len().saturating_sub(QUOTED_LINES_MAX);
        if skipped > 0 {
            let _ = writeln!(page, "… {skipped} earlier lines …");
        }
        for column in &related[skipped..] {
            let _ = writeln!(page, "{}", escape(&column.text));
        }
        page.push_str("</pre>\n");
    }
    let first = (failure_column + 1).saturating_sub(LINES_BEFORE_FAILURE);
    page.push_str("<h3>The steps up to the failure (idle steps left out)</h3>\n<pre class=\"lines\">");
    for column in &reading.columns[first..=failure_column] {
        let _ = writeln!(page, "{}", escape(&column.text));
    }
    if let Some(verdict) = &reading.verdict {
        let _ = writeln!(
            page,
            "<b>FAILED {}: {}</b>",
            escape(&verdict.invariant),
            escape(&verdict.evidence)
        );
    }
    page.push_str("</pre>\n</section>\n");
}

fn write_unreadable(page: &mut String, reading: &Reading) {
    if reading.unreadable.is_empty() {
        return;
    }
    let _ = writeln!(
        page,
        "<section id=\"unreadable\">\n<h2>Lines in no known shape ({})</h2>\n<p>Drawn on the <code>other</code> lane where they stood.</p>\n<pre class=\"lines\">",
        reading.unreadable.len()
    );
    for line in &reading.unreadable {
        let _ = writeln!(page, "{}", escape(line));
    }
    page.push_str("</pre>\n</section>\n");
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use commitgap::env::Value;
    use commitgap::receiver::{Answer, SuccessKind};

    use super::*;
    use crate::trace::DeliveryHow;

    /// One step's record.
    fn step(step: u64, time_ms: i64, actor: Actor, happened: Vec<Happening>) -> TraceStep {
        TraceStep {
            step,
            time_ms,
            actor,
            happened,
        }
    }

    fn process(id: &str) -> Actor {
        Actor::Process(id.into())
    }

    fn setup(receivers: u32, relay_workers: u32) -> TraceStep {
        step(
            0,
            0,
            Actor::World,
            vec![Happening::Setup {
                system: "reference".into(),
                seed: 7,
                rows: 4,
                accounts: 1,
                subjects: 2,
                events: 2,
                streams: 2,
                receivers,
                relay_workers,
                sender: "svix",
            }],
        )
    }

    fn sql(statement: &str, outcome: SqlOutcome) -> Happening {
        Happening::Sql {
            statement: Arc::from(statement),
            params: Vec::new(),
            outcome,
            injected: false,
        }
    }

    fn crash(id: &str) -> Happening {
        Happening::Crash {
            process: id.into(),
            tasks: 1,
            open_transactions: 1,
            restart_in_ms: 3_000,
        }
    }

    fn send(key: &str, reply: Result<ProviderReply, String>, reply_lost: bool) -> Happening {
        Happening::Call {
            send: true,
            key: key.into(),
            outcome: CallOutcome::Replied(reply),
            reply_lost,
        }
    }

    fn accepted(effect_id: &str) -> Result<ProviderReply, String> {
        Ok(ProviderReply::Accepted {
            effect_id: effect_id.into(),
            replayed: false,
        })
    }

    fn failure(step: u64, message: &str) -> Failure {
        Failure {
            invariant: "one-effect-per-operation".to_owned(),
            kind: "safety".to_owned(),
            step,
            time_ms: 5_000,
            message: message.to_owned(),
        }
    }

    /// How many marks (one per column) carry `kind`.
    fn marks_with_kind(page: &str, kind: &str) -> usize {
        page.match_indices("data-kinds=\"")
            .filter(|(start, _)| {
                let rest = &page[start + "data-kinds=\"".len()..];
                let kinds = &rest[..rest.find('"').expect("attributes are closed")];
                kinds.split(' ').any(|name| name == kind)
            })
            .count()
    }

    #[test]
    fn a_process_keeps_one_lane_across_incarnations() {
        assert_eq!(lane_of("receiver-2#1"), lane_of("receiver-2#3"));
        assert_eq!(
            lane_of("receiver-2#1").map(|lane| lane.name),
            Some("receiver-2".to_owned())
        );
        assert_ne!(lane_of("receiver-2#1"), lane_of("receiver-1#1"));
        assert!(
            lane_of("relay-9#1") < lane_of("relay-10#1"),
            "numbers order lanes, not text"
        );
        assert!(lane_of("sender") < lane_of("receiver-1#1"));
        assert!(lane_of("relay-3#1") < lane_of("provider"));
        assert_eq!(lane_of("fault:receipt-purge"), lane_of("purge#4"));
        assert_eq!(lane_of("operator#1"), lane_of("operator"));
        assert_eq!(lane_of_actor(&Actor::World), None);
        assert_eq!(lane_of_actor(&Actor::Invariant), None);

        let begin = || sql("BEGIN IMMEDIATE", SqlOutcome::Done);
        let steps = [
            setup(2, 1),
            step(1, 0, process("receiver-2#1"), vec![begin()]),
            step(2, 1, process("receiver-2#1"), vec![crash("receiver-2#1")]),
            step(
                3,
                3_001,
                process("receiver-2#1"),
                vec![Happening::Restart {
                    process: "receiver-2#2".into(),
                }],
            ),
            step(4, 3_002, process("receiver-2#2"), vec![crash("receiver-2#2")]),
            step(
                5,
                4_002,
                process("receiver-2#2"),
                vec![Happening::Restart {
                    process: "receiver-2#3".into(),
                }],
            ),
            step(6, 4_003, process("receiver-2#3"), vec![begin()]),
        ];
        let page = render("lanes", &steps, None);
        assert_eq!(
            page.matches("class=\"lane-label\" data-lane=\"receiver-2\"")
                .count(),
            1
        );
        for lane in ["sender", "receiver-1", "relay-1", "provider", "purge", "operator"] {
            assert!(
                page.contains(&format!("class=\"lane-label\" data-lane=\"{lane}\"")),
                "{lane} has a lane"
            );
        }
        assert!(page.contains("incarnations #1\u{2013}#3"));
        assert_eq!(marks_with_kind(&page, "crash"), 2);
        assert_eq!(marks_with_kind(&page, "restart"), 2);
        assert_eq!(
            page.matches("class=\"band-down\"").count(),
            2,
            "down from each crash to its restart"
        );
        assert!(
            page.contains(">#3</text>"),
            "the restart is labelled with its incarnation"
        );
    }

    #[test]
    fn trace_text_is_escaped_everywhere() {
        let hostile = "<script>alert(\"x\")</script> & 'quoted' </title><b>";
        let steps = [
            setup(1, 1),
            step(
                1,
                0,
                process("receiver-1#1"),
                vec![Happening::Log(hostile.into())],
            ),
            step(
                2,
                1,
                process("<img src=x>"),
                vec![Happening::Log("what & why".into())],
            ),
        ];
        let evidence = Failure {
            message: "2 effects <b>&</b> \"quoted\"".to_owned(),
            ..failure(1, "")
        };
        let page = render("title <i>&</i>", &steps, Some(&evidence));
        for raw in ["<script>alert", "</title><b>", "<img src", "<b>&</b>", "<i>&</i>"] {
            assert!(!page.contains(raw), "{raw} reached the page unescaped");
        }
        assert!(page.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#x27;quoted&#x27;"));
        assert!(page.contains("2 effects &lt;b&gt;&amp;&lt;/b&gt; &quot;quoted&quot;"));
        assert!(page.contains("commitgap timeline: title &lt;i&gt;&amp;&lt;/i&gt;"));
        assert_eq!(escape("a\u{0}b\u{7}c\td\ne"), "a\u{fffd}b\u{fffd}c\td\ne");
        // The only script is the page's own.
        assert_eq!(page.matches("<script").count(), 1);
    }

    #[test]
    fn idle_polls_fold_into_one_grey_line_per_lane() {
        let poll = || {
            vec![
                sql(
                    "SELECT operation_key FROM outbox",
                    SqlOutcome::Rows {
                        count: 0,
                        first: None,
                    },
                ),
                Happening::Sleep { duration_ms: 1_000 },
            ]
        };
        let failed_poll = || {
            vec![
                sql(
                    "SELECT operation_key FROM outbox",
                    SqlOutcome::Failed("database is busy".into()),
                ),
                Happening::Log("the pass failed: database is busy".into()),
                Happening::Sleep { duration_ms: 1_000 },
            ]
        };
        let relay = || process("relay-1#1");
        let mut steps = vec![setup(1, 1)];
        let (mut number, mut time_ms) = (0, 0);
        for index in 0..300 {
            number += 1;
            time_ms += 1_000;
            steps.push(step(number, time_ms, relay(), vec![Happening::Wake]));
            number += 1;
            let happened = if index % 10 == 0 { failed_poll() } else { poll() };
            steps.push(step(number, time_ms + 1, relay(), happened));
        }
        let found = SqlOutcome::Rows {
            count: 1,
            first: Some(vec![Value::Text("k".into()), Value::Integer(5)]),
        };
        steps.push(step(
            number + 1,
            time_ms + 2,
            relay(),
            vec![sql("SELECT operation_key FROM outbox", found)],
        ));
        let claim = vec![
            sql("UPDATE outbox SET lease_owner = ?1", SqlOutcome::Changed(1)),
            Happening::Committed {
                rows: 1,
                observed: vec![Observed::LeaseTaken {
                    operation_key: "k".into(),
                    token: 1,
                }],
            },
        ];
        steps.push(step(number + 2, time_ms + 3, relay(), claim));
        let page = render("polls", &steps, None);
        assert_eq!(
            page.matches("<g class=\"m").count(),
            2,
            "only the find and the claim get columns"
        );
        assert!(page.contains("class=\"idle idle-failing\" data-lane=\"relay-1\" data-steps=\"600\""));
        assert!(
            page.contains("600 idle steps (polls, sleeps, wake-ups), 30 of them failed on a busy database")
        );
        assert_eq!(marks_with_kind(&page, "lease-claim"), 1);
        assert_eq!(marks_with_kind(&page, "commit"), 1);
    }

    #[test]
    fn reads_inside_a_transaction_are_not_idle() {
        let relay = || process("relay-1#1");
        let read = |count| {
            vec![
                sql(
                    "SELECT payload FROM outbox",
                    SqlOutcome::Rows { count, first: None },
                ),
                Happening::Sleep { duration_ms: 1_000 },
            ]
        };
        let steps = [
            setup(1, 1),
            step(1, 0, relay(), vec![sql("BEGIN IMMEDIATE", SqlOutcome::Done)]),
            step(2, 1, relay(), read(1)),
            step(3, 1_001, relay(), vec![sql("COMMIT", SqlOutcome::Done)]),
            step(4, 1_002, relay(), read(0)),
        ];
        let page = render("transaction", &steps, None);
        assert_eq!(page.matches("<g class=\"m").count(), 3);
        assert!(page.contains("data-steps=\"1\""), "the read after COMMIT is idle");
    }

    #[test]
    fn an_actor_of_no_known_lane_gets_a_lane_of_its_own() {
        let steps = [
            setup(1, 1),
            step(
                1,
                1,
                process("mystery-actor#2"),
                vec![Happening::Log("does something new".into())],
            ),
        ];
        let page = render("odd", &steps, None);
        assert!(page.contains("class=\"lane-label\" data-lane=\"mystery-actor\""));
        assert_eq!(marks_with_kind(&page, "log"), 1);
    }

    #[test]
    // One trace of messages, calls and faults and the marks it must give: one story, read top to bottom.
    #[allow(clippy::too_many_lines)]
    fn messages_calls_and_faults_get_their_marks() {
        let deliver = |how, arrival| Happening::Deliver {
            event_id: "evt-1".into(),
            account: "acct-a".into(),
            stream: 0,
            how,
            arrival,
        };
        let applied = Answer::Success(SuccessKind::Applied);
        let relay = || process("relay-1#1");
        let steps = [
            setup(2, 1),
            step(
                1,
                0,
                Actor::Sender,
                vec![
                    deliver(DeliveryHow::Attempt(1), Arrival::To("receiver-2#1".into())),
                    deliver(DeliveryHow::Copy, Arrival::Lost),
                ],
            ),
            step(
                2,
                1,
                process("receiver-2#1"),
                vec![
                    sql("COMMIT", SqlOutcome::Done),
                    Happening::Answer(applied.clone()),
                    Happening::Committed {
                        rows: 3,
                        observed: Vec::new(),
                    },
                ],
            ),
            step(
                3,
                2,
                process("receiver-2#1"),
                vec![Happening::AnswerLost {
                    answer: applied,
                    stream: 0,
                }],
            ),
            step(
                4,
                3,
                relay(),
                vec![
                    Happening::ClockSet {
                        process: "relay-1#1".into(),
                        offset_ms: 51_168,
                    },
                    Happening::Reply(Err("timed out".into())),
                ],
            ),
            step(
                5,
                4,
                relay(),
                vec![Happening::Pause {
                    process: "relay-1#1".into(),
                    duration_ms: 600_000,
                }],
            ),
            step(
                6,
                600_004,
                relay(),
                vec![send("tenant-a/order-1/fulfill/v1", accepted("shp-1"), true)],
            ),
            step(
                7,
                600_005,
                Actor::Provider,
                vec![Happening::ProviderFinishes {
                    key: "tenant-a/order-2/fulfill/v1".into(),
                    outcome: accepted("shp-2"),
                }],
            ),
            step(
                8,
                600_006,
                Actor::Fault("receipt-purge".into()),
                vec![Happening::Purge {
                    older_than_ms: 540_000,
                }],
            ),
            step(
                9,
                600_007,
                process("purge#1"),
                vec![
                    sql(
                        "DELETE FROM receipts WHERE received_ms < ?1",
                        SqlOutcome::Changed(2),
                    ),
                    Happening::Committed {
                        rows: 2,
                        observed: Vec::new(),
                    },
                ],
            ),
        ];
        let page = render("marks", &steps, None);
        assert_eq!(marks_with_kind(&page, "deliver"), 1);
        assert_eq!(marks_with_kind(&page, "delivery-lost"), 1);
        assert_eq!(marks_with_kind(&page, "answer"), 1);
        assert_eq!(marks_with_kind(&page, "answer-lost"), 1);
        assert_eq!(marks_with_kind(&page, "commit"), 2);
        assert_eq!(marks_with_kind(&page, "clock-jump"), 1);
        assert_eq!(marks_with_kind(&page, "reply"), 1);
        assert_eq!(marks_with_kind(&page, "pause"), 1);
        assert_eq!(marks_with_kind(&page, "call"), 1);
        assert_eq!(marks_with_kind(&page, "provider"), 2);
        assert_eq!(marks_with_kind(&page, "purge"), 1);
        assert!(
            page.contains("class=\"link lost\""),
            "the lost reply shows on the call's line"
        );
        assert!(page.contains(">shp-1</text>") && page.contains(">shp-2</text>"));
        assert!(page.contains("class=\"band-paused\""));
        assert!(
            page.contains("class=\"jump\""),
            "ten minutes pass between steps 5 and 6"
        );
        assert!(page.contains(">+10m00s</text>"));
    }

    #[test]
    fn leases_and_outcomes_come_from_the_rows_any_system_commits() {
        // A system with its own table and statements: the marks come from what its decoder read,
        // not from its SQL.
        let worker = || process("relay-1#1");
        let committed = |observed| Happening::Committed { rows: 1, observed };
        let key = || "shop/order-9/ship".to_owned();
        let steps = [
            setup(1, 1),
            step(
                1,
                0,
                worker(),
                vec![
                    sql(
                        "UPDATE jobs SET holder = ?1 WHERE id = ?2",
                        SqlOutcome::Changed(1),
                    ),
                    committed(vec![Observed::LeaseTaken {
                        operation_key: key(),
                        token: 1,
                    }]),
                ],
            ),
            step(
                2,
                1,
                worker(),
                vec![
                    sql("UPDATE jobs SET until_ms = ?1", SqlOutcome::Changed(1)),
                    committed(vec![Observed::LeaseExtended { operation_key: key() }]),
                ],
            ),
            step(
                3,
                2,
                worker(),
                vec![
                    sql("UPDATE jobs SET state = 'shipped'", SqlOutcome::Changed(1)),
                    committed(vec![Observed::Done { operation_key: key() }]),
                ],
            ),
            step(
                4,
                3,
                worker(),
                vec![
                    sql("UPDATE jobs SET state = 'failed'", SqlOutcome::Changed(1)),
                    committed(vec![Observed::Dead { operation_key: key() }]),
                ],
            ),
        ];
        let page = render("jobs", &steps, None);
        for kind in ["lease-claim", "lease-extend", "done", "dead"] {
            assert_eq!(marks_with_kind(&page, kind), 1, "{kind}");
        }
        assert!(page.contains("lease on shop/order-9/ship taken (token 1)"));
    }

    #[test]
    fn a_key_expiry_shows_where_the_provider_forgot_it() {
        let relay = || process("relay-1#1");
        let key = "tenant-a/order-1/fulfill/v1";
        let steps = [
            setup(1, 1),
            step(1, 1, relay(), vec![send(key, accepted("shp-1"), false)]),
            step(
                2,
                2,
                relay(),
                vec![Happening::KeyForgotten { key: key.into() }, Happening::Wake],
            ),
            step(3, 3, relay(), vec![send(key, accepted("shp-2"), false)]),
        ];
        let page = render("forgotten", &steps, None);
        assert_eq!(marks_with_kind(&page, "key-expiry"), 1);
        assert!(page.contains("the provider forgot key tenant-a/order-1/fulfill/v1"));
    }

    #[test]
    fn the_failing_step_is_highlighted_with_its_evidence() {
        let evidence = "operation tenant-a/order-1/fulfill/v1 has 2 effects: shp-1 under key tenant-a/order-1/fulfill/v1; shp-2";
        let relay = || process("relay-1#1");
        let steps = [
            setup(1, 1),
            step(
                1,
                0,
                relay(),
                vec![send("tenant-a/order-1/fulfill/v1", accepted("shp-1"), false)],
            ),
            step(
                2,
                1,
                relay(),
                vec![send("tenant-a/order-12/fulfill/v1", accepted("shp-12"), false)],
            ),
            step(
                3,
                2,
                relay(),
                vec![send(
                    "tenant-a/order-1/fulfill/v1#retry2",
                    accepted("shp-3"),
                    false,
                )],
            ),
            step(
                4,
                5_000,
                relay(),
                vec![send("tenant-a/order-1/fulfill/v1", accepted("shp-2"), false)],
            ),
            step(
                4,
                5_000,
                Actor::Invariant,
                vec![Happening::Failed {
                    invariant: "one-effect-per-operation".into(),
                    evidence: evidence.into(),
                }],
            ),
        ];
        for given in [Some(failure(4, evidence)), None] {
            let page = render("failed", &steps, given.as_ref());
            assert!(page.contains("<section id=\"verdict\" class=\"verdict failed\">"));
            assert!(page.contains("<span class=\"invariant\">one-effect-per-operation</span>"));
            assert!(page.contains(&format!("<p class=\"evidence\">{}</p>", escape(evidence))));
            let band = &page[page.find("id=\"failure\"").expect("the failing step is banded")..];
            assert!(band[..band.find('>').expect("closed")].contains("data-step=\"4\""));
            assert!(page.contains(">FAILED one-effect-per-operation at step 4</text>"));
            // Steps 1 and 4 name the operation and its effects; step 2 (order-12, shp-12) and
            // step 3 (another key) do not.
            assert_eq!(page.matches("<g class=\"m related\"").count(), 2);
        }
        assert!(evidence_names(evidence).contains(&"shp-2".to_owned()));
        assert!(mentions_any("accepted shp-1 (new", &["shp-1".to_owned()]));
        assert!(!mentions_any("accepted shp-12 (new", &["shp-1".to_owned()]));
    }

    #[test]
    fn a_liveness_failure_at_an_idle_step_still_gets_its_column() {
        let steps = [
            setup(1, 1),
            step(1, 0, process("relay-1#1"), vec![Happening::Wake]),
            step(1, 0, Actor::World, vec![Happening::Heal { restarting: 0 }]),
            step(2, 60_000, Actor::Operator, vec![Happening::OperatorRequeue]),
            step(3, 120_000, process("relay-1#1"), vec![Happening::Wake]),
        ];
        let liveness = Failure {
            invariant: "outbox-drains".to_owned(),
            kind: "liveness".to_owned(),
            step: 3,
            time_ms: 120_001,
            message: "tenant-a/order-1/fulfill/v1 is still pending".to_owned(),
        };
        let page = render("liveness", &steps, Some(&liveness));
        assert!(
            page.contains("data-step=\"3\" x="),
            "the failing step has the failure band"
        );
        assert!(page.contains("<g id=\"heal\" class=\"heal\" data-step=\"1\">"));
        assert!(page.contains("The fault phase ended at step 1"));
        assert_eq!(marks_with_kind(&page, "operator"), 1);
        assert!(page.contains("class=\"phase-liveness\""));
    }

    #[test]
    fn the_same_trace_gives_the_same_bytes() {
        let steps = [
            setup(2, 2),
            step(
                1,
                0,
                Actor::Sender,
                vec![Happening::Emit {
                    kind: "payment.succeeded".into(),
                    event_id: "evt-1".into(),
                    account: "acct-a".into(),
                    tenant: "tenant-a".into(),
                    subject: "order-1".into(),
                    subscriptions: 1,
                }],
            ),
            step(
                2,
                7_200_000,
                process("relay-2#1"),
                vec![
                    sql(
                        "SELECT x FROM outbox",
                        SqlOutcome::Rows {
                            count: 0,
                            first: None,
                        },
                    ),
                    Happening::Sleep { duration_ms: 1_000 },
                ],
            ),
            step(
                3,
                7_200_001,
                process("receiver-1#1"),
                vec![
                    sql("COMMIT", SqlOutcome::Done),
                    Happening::Committed {
                        rows: 2,
                        observed: Vec::new(),
                    },
                ],
            ),
        ];
        let first = render("same", &steps, Some(&failure(3, "why")));
        assert_eq!(first, render("same", &steps, Some(&failure(3, "why"))));
        assert!(first.contains(">+2h00m</text>"), "a two-hour jump is labelled");
    }

    #[test]
    fn degenerate_traces_still_render() {
        let failure_after_everything = failure(99, "nothing to see");
        let traces: Vec<Vec<TraceStep>> = vec![
            Vec::new(),
            vec![setup(0, 0)],
            vec![step(
                5,
                10_000,
                Actor::World,
                vec![Happening::Heal { restarting: 0 }],
            )],
            vec![step(
                3,
                9_000,
                Actor::Invariant,
                vec![Happening::Failed {
                    invariant: String::new(),
                    evidence: String::new(),
                }],
            )],
            vec![step(1, 0, process("relay-1#1"), Vec::new())],
            // Time that runs backwards, and a pause that never ends within the trace.
            vec![
                step(
                    1,
                    5_000,
                    process("relay-1#1"),
                    vec![Happening::Pause {
                        process: "relay-1#1".into(),
                        duration_ms: 2 * 86_400_000,
                    }],
                ),
                step(2, 1_000, process("relay-1#1"), vec![crash("relay-1#1")]),
                step(
                    3,
                    0,
                    process("relay-1#1"),
                    vec![Happening::Restart {
                        process: "relay-1#x".into(),
                    }],
                ),
            ],
        ];
        for trace in &traces {
            for given in [None, Some(&failure_after_everything)] {
                let page = render("odd", trace, given);
                assert!(page.ends_with("</html>\n"), "{trace:?}");
            }
        }
    }

    #[test]
    fn the_page_references_nothing_outside_itself() {
        let steps = [
            setup(1, 1),
            step(1, 0, Actor::Sender, vec![Happening::Log("x".into())]),
        ];
        let page = render("alone", &steps, None);
        for outside in ["http://", "https://", "src=", "@import", "<link", "url("] {
            assert!(!page.contains(outside), "{outside}");
        }
    }
}
