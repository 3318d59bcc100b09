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
//! simulation; it only reads the lines a run left.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::run::Failure;
use crate::trace::format_time_ms;

// ----- Reading trace lines -----

/// A trace line of one step: `{step:>6} {virtual time:>12} {actor:<13} {action}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepLine {
    pub step: u64,
    pub time_ms: i64,
    /// `name#incarnation` of a process, or `sender`, `provider`, `operator`, `fault:<name>`,
    /// `world` or `invariant`.
    pub actor: String,
    /// Everything after the actor; several things that happened in the step are joined by ` | `.
    pub action: String,
}

/// One trace line, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceLine {
    /// The first line of a run: `setup system=... seed=...`.
    Setup { settings: String },
    /// One step of the run.
    Step(StepLine),
    /// `heal: ...`: the fault phase ends. Its step column repeats the last step.
    Heal(StepLine),
    /// `FAILED <invariant>: <evidence>`, written after the step that broke the invariant.
    Failed {
        line: StepLine,
        invariant: String,
        evidence: String,
    },
    /// A line in no known shape; the page still shows it.
    Unreadable,
}

/// Reads one trace line. Never fails: a line in no known shape is [`TraceLine::Unreadable`].
pub fn parse_line(line: &str) -> TraceLine {
    if let Some(settings) = line.strip_prefix("setup ") {
        return TraceLine::Setup {
            settings: settings.to_owned(),
        };
    }
    let Some(step_line) = parse_step_line(line) else {
        return TraceLine::Unreadable;
    };
    if step_line.actor == "world" && step_line.action.starts_with("heal:") {
        return TraceLine::Heal(step_line);
    }
    if step_line.actor == "invariant"
        && let Some(rest) = step_line.action.strip_prefix("FAILED ")
    {
        let (invariant, evidence) = rest.split_once(": ").unwrap_or((rest, ""));
        let (invariant, evidence) = (invariant.to_owned(), evidence.to_owned());
        return TraceLine::Failed {
            line: step_line,
            invariant,
            evidence,
        };
    }
    TraceLine::Step(step_line)
}

fn parse_step_line(line: &str) -> Option<StepLine> {
    let (step, rest) = split_token(line)?;
    let step = parse_digits(step)?;
    let (time, rest) = split_token(rest)?;
    let time_ms = parse_time_ms(time)?;
    let (actor, rest) = split_token(rest)?;
    Some(StepLine {
        step: u64::try_from(step).ok()?,
        time_ms,
        actor: actor.to_owned(),
        // The actor column is padded to 13 characters; the padding is not part of the action.
        action: rest.trim_start_matches(' ').to_owned(),
    })
}

/// The first space-separated token of `text` and what follows the space after it.
fn split_token(text: &str) -> Option<(&str, &str)> {
    let text = text.trim_start_matches(' ');
    if text.is_empty() {
        return None;
    }
    Some(match text.find(' ') {
        Some(index) => (&text[..index], &text[index + 1..]),
        None => (text, ""),
    })
}

/// A non-negative decimal number written with ASCII digits only.
fn parse_digits(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Reads `h:mm:ss.mmm` as written by [`format_time_ms`], with an optional minus sign.
fn parse_time_ms(text: &str) -> Option<i64> {
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (clock, millis) = text.split_once('.')?;
    let mut parts = clock.split(':');
    let hours = parse_digits(parts.next()?)?;
    let minutes = parse_digits(parts.next()?)?;
    let seconds = parse_digits(parts.next()?)?;
    if parts.next().is_some() || minutes >= 60 || seconds >= 60 || millis.len() != 3 {
        return None;
    }
    let millis = parse_digits(millis)?;
    let total_ms = hours
        .checked_mul(3_600_000)?
        .checked_add(minutes * 60_000 + seconds * 1_000 + millis)?;
    Some(if negative { -total_ms } else { total_ms })
}

/// Reads a duration as written by `format_duration_ms`: `250ms`, `1.500s`, `21m47.357s`, `2d3h`.
pub fn parse_duration_ms(text: &str) -> Option<i64> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total_ms: i64 = 0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|character: char| !(character.is_ascii_digit() || character == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(number_end);
        let (unit_ms, unit_length) = if after.starts_with("ms") {
            (1, 2)
        } else {
            match after.chars().next()? {
                'd' => (86_400_000, 1),
                'h' => (3_600_000, 1),
                'm' => (60_000, 1),
                's' => (1_000, 1),
                _ => return None,
            }
        };
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        let mut amount_ms = parse_digits(whole)?.checked_mul(unit_ms)?;
        if !fraction.is_empty() {
            // Only seconds carry a fraction, in milliseconds.
            if unit_ms != 1_000 || fraction.len() > 3 {
                return None;
            }
            let scale = 10_i64.pow(3 - fraction.len() as u32);
            amount_ms = amount_ms.checked_add(parse_digits(fraction)? * scale)?;
        }
        total_ms = total_ms.checked_add(amount_ms)?;
        rest = &after[unit_length..];
    }
    Some(total_ms)
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

/// The lane an actor or process id belongs to; `None` for `world` and `invariant`, which are
/// drawn across every lane.
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
    /// Idempotency keys the provider holds a stored result or cached error for, as far as the
    /// replies show.
    stored_keys: BTreeSet<String>,
}

/// Reads what one step line says, segment by segment.
fn read_step(line: &StepLine, state: &mut ReadState) -> LineFacts {
    let home = lane_of(&line.actor).unwrap_or_else(|| Lane::named(LaneGroup::Other));
    let mut facts = LineFacts::default();
    for segment in line.action.split(" | ") {
        read_segment(segment.trim(), line.time_ms, &home, &mut facts, state);
    }
    if facts.facts.is_empty() {
        facts.add(&home, Kind::Quiet, Tone::Neutral, "");
    }
    facts
}

fn read_segment(segment: &str, time_ms: i64, home: &Lane, facts: &mut LineFacts, state: &mut ReadState) {
    let provider = Lane::named(LaneGroup::Provider);
    if segment.is_empty() {
        facts.add(home, Kind::Quiet, Tone::Neutral, segment);
    } else if segment == "wake" {
        facts.add(home, Kind::Wake, Tone::Neutral, segment);
    } else if segment.starts_with("sleep ") {
        facts.add(home, Kind::Sleep, Tone::Neutral, segment);
    } else if let Some(sql) = segment.strip_prefix("sql ") {
        read_sql(sql, segment, home, facts, state);
    } else if let Some(rest) = segment.strip_prefix("answer ") {
        if rest == "sent" {
            facts.add(home, Kind::AnswerSent, Tone::Neutral, segment);
        } else if rest.starts_with("lost") || rest.ends_with(" lost") {
            facts.add(home, Kind::AnswerLost, Tone::Bad, segment);
        } else {
            facts.add(home, Kind::Answer, status_tone(rest), segment);
        }
    } else if let Some(rest) = segment.strip_prefix("sender got ") {
        facts.add(home, Kind::SenderGot, status_tone(rest), segment);
    } else if segment.starts_with("emit ") {
        facts.add(home, Kind::Emit, Tone::Info, segment);
    } else if segment.starts_with("deliver ") {
        if segment.contains("lost on the way in") || segment.contains("connection refused") {
            facts.add(home, Kind::DeliveryLost, Tone::Bad, segment);
        } else {
            facts.add(home, Kind::Deliver, Tone::Info, segment);
            if let Some(target) = segment.rsplit_once(" -> ").and_then(|(_, to)| lane_of(to.trim())) {
                facts.links.push(Link {
                    from: home.clone(),
                    to: target,
                    lost: false,
                });
            }
        }
    } else if segment.starts_with("attempt ") && segment.contains("timed out") {
        facts.add(home, Kind::AttemptTimedOut, Tone::Warn, segment);
    } else if segment.starts_with("attempt ") && segment.contains("settled before its timeout") {
        facts.add(home, Kind::Quiet, Tone::Neutral, segment);
    } else if let Some(rest) = segment.strip_prefix("call ") {
        let (verb, rest) = rest.split_once(" key=").unwrap_or((rest, ""));
        let (key, outcome) = rest.split_once(" -> ").unwrap_or((rest, ""));
        let outcome = outcome.strip_prefix("provider ").unwrap_or(outcome);
        let (outcome, lost) = match outcome.strip_suffix(", reply lost") {
            Some(outcome) => (outcome, true),
            None => (outcome, false),
        };
        facts.add(
            home,
            Kind::Call,
            if lost { Tone::Bad } else { Tone::Info },
            segment,
        );
        provider_outcome(&provider, key, outcome, verb == "send", segment, facts, state);
        facts.links.push(Link {
            from: home.clone(),
            to: provider,
            lost,
        });
    } else if let Some(rest) = segment.strip_prefix("reply ") {
        let tone = if rest.contains("timed out") {
            Tone::Warn
        } else if rest.starts_with("error") || rest.starts_with("rejected") {
            Tone::Bad
        } else {
            Tone::Good
        };
        facts.add(home, Kind::Reply, tone, segment);
    } else if let Some(rest) = segment.strip_prefix("provider finishes key=") {
        let (key, outcome) = rest.split_once(": ").unwrap_or((rest, ""));
        let outcome = outcome.trim_end_matches(" (the caller timed out)");
        provider_outcome(&provider, key, outcome, true, segment, facts, state);
    } else if let Some(rest) = segment.strip_prefix("crash ") {
        let process = rest.split(':').next().unwrap_or(rest);
        let lane = lane_of(process).unwrap_or_else(|| home.clone());
        state.open_transactions.remove(&lane);
        facts.add(&lane, Kind::Crash, Tone::Bad, segment);
    } else if let Some(process) = segment.strip_prefix("restart as ") {
        let lane = lane_of(process).unwrap_or_else(|| home.clone());
        let label = incarnation_of(process).map(|number| format!("#{number}"));
        facts.add(&lane, Kind::Restart, Tone::Good, segment).label = label;
    } else if let Some((process, duration)) = segment.split_once(" pauses for ") {
        let lane = lane_of(process).unwrap_or_else(|| home.clone());
        if let Some(duration_ms) = parse_duration_ms(duration) {
            facts.pause = Some((lane.clone(), time_ms.saturating_add(duration_ms)));
        }
        facts.add(&lane, Kind::Pause, Tone::Warn, segment);
    } else if let Some((process, rest)) = segment.split_once(" clock set ") {
        let lane = lane_of(process).unwrap_or_else(|| home.clone());
        let (jump, after) = rest.split_once("from true time").unwrap_or((rest, ""));
        let text = format!("{process} clock set {jump}from true time");
        facts.add(&lane, Kind::ClockJump, Tone::Info, &text);
        // A step's next remark is sometimes written straight after this one, without ` | `.
        if !after.trim().is_empty() {
            read_segment(after.trim(), time_ms, home, facts, state);
        }
    } else if segment.starts_with("purge ") {
        facts.add(
            &Lane::named(LaneGroup::Purge),
            Kind::Purge,
            Tone::Neutral,
            segment,
        );
    } else if segment.starts_with("operator ") {
        facts.add(
            &Lane::named(LaneGroup::Operator),
            Kind::Operator,
            Tone::Neutral,
            segment,
        );
    } else if let Some(message) = segment.strip_prefix("log: ") {
        let fact = facts.add(home, Kind::Log, Tone::Neutral, segment);
        // A relay pass that failed on a busy database is one more poll, not news.
        fact.poll = message.starts_with("relay pass failed") && !state.open_transactions.contains(home);
    } else if segment.starts_with("task ended inside a transaction") {
        state.open_transactions.remove(home);
        facts.add(home, Kind::Rollback, Tone::Warn, segment);
    } else {
        facts.add(home, Kind::Other, Tone::Neutral, segment);
    }
}

/// The tone of a webhook answer by its HTTP status: 2xx good, 5xx retryable, others rejected.
fn status_tone(text: &str) -> Tone {
    match text.as_bytes().first() {
        Some(b'2') => Tone::Good,
        Some(b'5') => Tone::Warn,
        Some(b'4') => Tone::Bad,
        _ => Tone::Neutral,
    }
}

/// Records what the provider did with a request for `key`, and a key expiry where the reply
/// shows the provider no longer held the key an earlier request stored.
fn provider_outcome(
    provider: &Lane,
    key: &str,
    outcome: &str,
    is_send: bool,
    segment: &str,
    facts: &mut LineFacts,
    state: &mut ReadState,
) {
    let new_effect = outcome.contains("(new effect)");
    let tone = if new_effect {
        Tone::Effect
    } else if outcome.starts_with("busy") || outcome.starts_with("409") || outcome.contains("timed out") {
        Tone::Warn
    } else if outcome.starts_with("rejected") || outcome.starts_with("unavailable") {
        Tone::Bad
    } else if outcome.starts_with("not found") {
        Tone::Neutral
    } else {
        Tone::Good
    };
    let label = new_effect
        .then(|| {
            outcome
                .strip_prefix("accepted ")
                .and_then(|rest| rest.split(' ').next())
        })
        .flatten()
        .map(str::to_owned);
    facts.add(provider, Kind::Provider, tone, segment).label = label;
    // A slow request acts later ("provider finishes"), and a suspended account is refused
    // before the key store is consulted: neither says anything about the key yet.
    if !is_send || outcome.starts_with("busy") || outcome.starts_with("rejected 400") {
        return;
    }
    let cached = outcome.contains("(cached under this key)");
    let from_store = outcome.contains("(replayed)")
        || cached
        || outcome.starts_with("409")
        || outcome.starts_with("rejected 422");
    if state.stored_keys.contains(key) && !from_store {
        let text = format!("the provider had forgotten key {key}: this request counted as new");
        facts.add(provider, Kind::KeyExpiry, Tone::Bad, &text);
        state.stored_keys.remove(key);
    }
    if new_effect || cached {
        state.stored_keys.insert(key.to_owned());
    }
}

fn read_sql(sql: &str, segment: &str, home: &Lane, facts: &mut LineFacts, state: &mut ReadState) {
    let (statement, result) = sql.rsplit_once(" -> ").unwrap_or((sql, ""));
    let failed = result.starts_with("error");
    let keyword = statement
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_uppercase();
    let in_transaction = state.open_transactions.contains(home);
    let claims_nothing = result.starts_with("0 ");
    let (kind, tone) = match keyword.as_str() {
        "BEGIN" => {
            if !failed {
                state.open_transactions.insert(home.clone());
            }
            (Kind::Transaction, Tone::Neutral)
        }
        "COMMIT" | "END" => {
            if !failed {
                state.open_transactions.remove(home);
            }
            (Kind::Transaction, Tone::Neutral)
        }
        "ROLLBACK" => {
            state.open_transactions.remove(home);
            (Kind::Rollback, Tone::Warn)
        }
        "SELECT" => (Kind::Read, Tone::Neutral),
        _ if statement.starts_with("UPDATE outbox SET lease_owner") => (
            Kind::LeaseClaim,
            if claims_nothing {
                Tone::Neutral
            } else {
                Tone::Lease
            },
        ),
        _ if statement.starts_with("UPDATE outbox SET lease_expires_ms") => (Kind::LeaseExtend, Tone::Lease),
        _ if statement.contains("SET status = 'done'") => (Kind::Done, Tone::Good),
        _ if statement.contains("SET status = 'dead'") => (Kind::Dead, Tone::Bad),
        _ if statement.starts_with("UPDATE outbox SET next_attempt_ms") => (Kind::Backoff, Tone::Warn),
        _ => (Kind::Write, Tone::Database),
    };
    facts.failed_sql |= failed;
    let is_outbox_step = matches!(
        kind,
        Kind::LeaseClaim | Kind::LeaseExtend | Kind::Done | Kind::Dead | Kind::Backoff
    );
    if failed && is_outbox_step {
        // A claim or outcome that failed is still an attempt at one: it keeps its shape, in
        // amber, and counts as a failed statement too.
        facts.add(home, kind, Tone::Warn, segment);
    }
    let (kind, tone) = if failed {
        (Kind::SqlError, Tone::Warn)
    } else {
        (kind, tone)
    };
    let fact = facts.add(home, kind, tone, segment);
    fact.poll = keyword == "SELECT" && !in_transaction;
    if let Some(rows) = commit_rows(result) {
        *facts.commit_rows.get_or_insert(0) += rows;
        facts.add(home, Kind::Commit, Tone::Database, segment);
    }
}

/// The row count of a `[commit N rows]` remark.
fn commit_rows(result: &str) -> Option<u64> {
    let (_, rest) = result.split_once("[commit ")?;
    let count = rest.split(' ').next()?;
    parse_digits(count).and_then(|number| u64::try_from(number).ok())
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

fn read_trace(lines: &[String], failure: Option<&Failure>) -> Reading {
    let parsed: Vec<TraceLine> = lines.iter().map(|line| parse_line(line)).collect();
    let mut reader = TraceReader::new(verdict_of(&parsed, failure));
    for (line, parsed) in lines.iter().zip(parsed) {
        reader.read(line, parsed);
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

    fn read(&mut self, line: &str, parsed: TraceLine) {
        let step_line = match parsed {
            TraceLine::Setup { settings } => {
                add_setup_lanes(&mut self.reading.lanes, &settings);
                self.reading.setup = Some(settings);
                return;
            }
            // The failure is drawn from the verdict, on the column of its step.
            TraceLine::Failed { .. } => return,
            TraceLine::Heal(step_line) => {
                self.reading.heal_column = Some(self.reading.columns.len());
                self.previous = (step_line.step, step_line.time_ms);
                self.reading.columns.push(Column {
                    step: step_line.step,
                    time_ms: step_line.time_ms,
                    text: line.to_owned(),
                    glyphs: Vec::new(),
                    links: Vec::new(),
                    kinds: BTreeSet::new(),
                    heal: true,
                    related: false,
                });
                return;
            }
            TraceLine::Step(step_line) => step_line,
            TraceLine::Unreadable => {
                self.reading.unreadable.push(line.to_owned());
                // Kept where it stood, as an "other" mark, so nothing in the trace goes missing.
                let mut facts = LineFacts::default();
                facts.add(&Lane::named(LaneGroup::Other), Kind::Other, Tone::Neutral, line);
                let (step, time_ms) = self.previous;
                self.add_column(line, step, time_ms, "", facts);
                return;
            }
        };
        self.previous = (step_line.step, step_line.time_ms);
        let facts = read_step(&step_line, &mut self.state);
        if facts.is_idle() && self.failing_step != Some(step_line.step) {
            let home = lane_of(&step_line.actor).unwrap_or_else(|| Lane::named(LaneGroup::Other));
            self.fold_idle(line, home, facts.failed_sql);
        } else {
            self.add_column(line, step_line.step, step_line.time_ms, &step_line.actor, facts);
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
    fn add_column(&mut self, line: &str, step: u64, time_ms: i64, actor: &str, mut facts: LineFacts) {
        self.note_step(step, time_ms);
        let column = self.reading.columns.len();
        let home = lane_of(actor).unwrap_or_else(|| Lane::named(LaneGroup::Other));
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

/// The failure to show: the caller's, or else the one the trace's `FAILED` line reports.
fn verdict_of(parsed: &[TraceLine], failure: Option<&Failure>) -> Option<Verdict> {
    if let Some(failure) = failure {
        return Some(Verdict {
            invariant: failure.invariant.clone(),
            kind: Some(failure.kind.clone()),
            step: failure.step,
            time_ms: Some(failure.time_ms),
            evidence: failure.message.clone(),
        });
    }
    parsed.iter().find_map(|line| match line {
        TraceLine::Failed {
            line,
            invariant,
            evidence,
        } => Some(Verdict {
            invariant: invariant.clone(),
            kind: None,
            step: line.step,
            time_ms: Some(line.time_ms),
            evidence: evidence.clone(),
        }),
        _ => None,
    })
}

/// Lanes the setup line promises, so that a process that never acted still has its lane.
fn add_setup_lanes(lanes: &mut BTreeMap<Lane, LaneInfo>, settings: &str) {
    for setting in settings.split(' ') {
        let Some((name, value)) = setting.split_once('=') else {
            continue;
        };
        let prefix = match name {
            "receivers" => "receiver-",
            "relay-workers" => "relay-",
            _ => continue,
        };
        // A bound keeps a damaged setup line from asking for millions of lanes.
        let count = parse_digits(value).unwrap_or(0).min(64);
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
    jumps: Vec<Jump>,
    lane_index: BTreeMap<Lane, i64>,
    width: i64,
    height: i64,
}

impl Layout {
    fn new(reading: &Reading) -> Layout {
        let mut column_left = Vec::with_capacity(reading.columns.len());
        let mut jumps = Vec::new();
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
            x += COLUMN_PX;
        }
        let lane_index = reading
            .lanes
            .keys()
            .enumerate()
            .map(|(index, lane)| (lane.clone(), index as i64))
            .collect();
        Layout {
            column_left,
            jumps,
            lane_index,
            width: (x + SIDE_PAD_PX).max(320),
            height: LANES_TOP_PX + reading.lanes.len() as i64 * LANE_PX + STEP_AXIS_PX,
        }
    }

    fn center_x(&self, column: usize) -> i64 {
        self.column_left[column] + COLUMN_PX / 2
    }

    /// The x of a gap between columns: where idle steps that fell into it are drawn.
    fn gap_x(&self, gap: usize) -> i64 {
        match (gap.checked_sub(1), self.column_left.get(gap)) {
            (None, Some(&left)) => left - 2,
            (Some(before), Some(&left)) => (self.column_left[before] + COLUMN_PX + left) / 2,
            (Some(before), None) => self.column_left[before] + COLUMN_PX + 2,
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

/// Escapes text for HTML and SVG, in element content and in quoted attributes alike. Control
/// characters other than tab and newline cannot appear in a document and become U+FFFD.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            '\t' | '\n' => escaped.push(character),
            _ if character.is_control() => escaped.push('\u{fffd}'),
            _ => escaped.push(character),
        }
    }
    escaped
}

/// Renders a run's trace as one self-contained HTML page.
///
/// `title` names the run (for example `reference, seed 17`); `lines` is the trace as
/// `replay --trace` prints it; `failure`, when given, is the invariant that failed (otherwise
/// the trace's own `FAILED` line, if any, is used). The same arguments always give the same
/// bytes.
pub fn render(title: &str, lines: &[String], failure: Option<&Failure>) -> String {
    let reading = read_trace(lines, failure);
    let layout = Layout::new(&reading);
    let mut page = String::with_capacity(4_096 + lines.len() * 512);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>commitgap timeline: {}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n",
        escape(title)
    );
    write_header(&mut page, title, &reading);
    write_verdict(&mut page, &reading);
    write_chart(&mut page, &reading, &layout);
    write_legend(&mut page);
    write_moments(&mut page, &reading);
    write_evidence_lines(&mut page, &reading);
    write_unreadable(&mut page, &reading);
    page.push_str(SCRIPT);
    page.push_str("</body>\n</html>\n");
    page
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
    let cross = |size: i64, class: &str| {
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
    };
    let square = |half: i64, class: &str| {
        format!(
            "<rect class=\"{class}\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>",
            x - half,
            y - half,
            2 * half,
            2 * half
        )
    };
    let diamond = |size: i64, class: &str| {
        format!(
            "<path class=\"{class}\" d=\"M{x} {}L{} {y}L{x} {}L{} {y}Z\"/>",
            y - size,
            x + size,
            y + size,
            x - size
        )
    };
    let circle = |radius: &str, class: &str| {
        format!("<circle class=\"{class}\" cx=\"{x}\" cy=\"{y}\" r=\"{radius}\"/>")
    };
    match kind {
        Kind::Emit => circle("3", &stroke),
        Kind::Deliver => format!(
            "<path class=\"{fill}\" d=\"M{} {}L{} {}L{x} {}Z\"/>",
            x - 4,
            y - 3,
            x + 4,
            y - 3,
            y + 4
        ),
        Kind::DeliveryLost | Kind::AnswerLost => cross(3, "s t-bad x"),
        Kind::Crash => cross(4, "s t-bad crash"),
        Kind::AttemptTimedOut => circle("3", "s t-warn"),
        Kind::SenderGot | Kind::Reply => circle("2.5", &fill),
        Kind::Answer => square(3, &fill),
        Kind::AnswerSent => circle("1.5", &fill),
        Kind::Transaction | Kind::Read => circle("1.5", "f t-neutral"),
        Kind::Write => square(2, &fill),
        Kind::Commit => square(3, "f t-db"),
        Kind::Rollback => square(3, "s t-warn"),
        Kind::SqlError => format!(
            "<path class=\"f t-warn\" d=\"M{x} {}L{} {}L{} {}Z\"/>",
            y - 3,
            x + 3,
            y + 3,
            x - 3,
            y + 3
        ),
        Kind::LeaseClaim => diamond(4, &fill),
        Kind::LeaseExtend | Kind::Backoff => diamond(3, &stroke),
        Kind::Done | Kind::Dead => diamond(4, &fill),
        Kind::Call => circle("3", &fill),
        Kind::Provider if tone == "effect" => square(4, &fill),
        Kind::Provider => square(3, &fill),
        Kind::KeyExpiry => format!(
            "<path class=\"f t-bad expiry\" d=\"M{} {}L{} {}L{} {}L{} {}Z\"/>",
            x - 3,
            y - 3,
            x + 3,
            y - 3,
            x - 3,
            y + 3,
            x + 3,
            y + 3
        ),
        Kind::Restart => format!(
            "<rect class=\"f t-good\" x=\"{}\" y=\"{}\" width=\"3\" height=\"16\"/>",
            x - 1,
            y - 8
        ),
        Kind::Pause => format!(
            "<rect class=\"f t-warn\" x=\"{}\" y=\"{}\" width=\"2\" height=\"8\"/><rect class=\"f t-warn\" x=\"{}\" y=\"{}\" width=\"2\" height=\"8\"/>",
            x - 3,
            y - 4,
            x + 1,
            y - 4
        ),
        Kind::ClockJump => format!(
            "<circle class=\"s t-info\" cx=\"{x}\" cy=\"{y}\" r=\"3.5\"/><path class=\"s t-info\" d=\"M{x} {}L{x} {y}L{} {y}\"/>",
            y - 3,
            x + 2
        ),
        Kind::Purge => format!(
            "<rect class=\"f t-purge\" x=\"{}\" y=\"{}\" width=\"6\" height=\"7\"/><rect class=\"f t-purge\" x=\"{}\" y=\"{}\" width=\"8\" height=\"1.5\"/>",
            x - 3,
            y - 2,
            x - 4,
            y - 4
        ),
        Kind::Operator => format!(
            "<rect class=\"f t-neutral\" x=\"{}\" y=\"{}\" width=\"8\" height=\"2\"/><rect class=\"f t-neutral\" x=\"{}\" y=\"{}\" width=\"2\" height=\"8\"/>",
            x - 4,
            y - 1,
            x - 1,
            y - 4
        ),
        Kind::Log => circle("2", "s t-neutral"),
        Kind::Wake | Kind::Sleep | Kind::Quiet => circle("1", "f t-neutral"),
        Kind::Other => square(3, "s t-neutral"),
    }
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
    for (index, column) in reading.columns.iter().enumerate() {
        let x = layout.center_x(index);
        if x - last_step_x >= STEP_LABEL_SPACING_PX {
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
        // Near the right edge the label reads leftwards, so it stays on the page.
        let anchor = if x > layout.width - 260 { "end" } else { "start" };
        let _ = writeln!(
            page,
            "<text class=\"failure-label\" text-anchor=\"{anchor}\" x=\"{}\" y=\"12\">FAILED {} at step {}</text>",
            if anchor == "end" { x - 8 } else { x + 8 },
            escape(&verdict.invariant),
            verdict.step
        );
    }
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
    (Kind::SqlError, Tone::Warn, "statement failed (SQLITE_BUSY)"),
    (Kind::Rollback, Tone::Warn, "rollback"),
    (
        Kind::LeaseClaim,
        Tone::Lease,
        "lease claim (UPDATE outbox SET lease_owner); grey: claimed nothing, amber: failed",
    ),
    (Kind::LeaseExtend, Tone::Lease, "lease extended"),
    (Kind::Backoff, Tone::Warn, "outcome recorded: retry later"),
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

const STYLE: &str = "\
body{font:14px/1.45 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0 1.5em 2em;color:#1f2937;background:#fff}\
h1{font-size:1.35em;margin:.8em 0 .2em}h2{font-size:1.1em;margin:1.2em 0 .4em}h3{font-size:1em;margin:.8em 0 .3em}\
code,pre{font:12px/1.4 ui-monospace,'SFMono-Regular',Menlo,Consolas,monospace}\
.setup{margin:.2em 0;color:#4b5563}.stats{margin:.2em 0}\
.tally{list-style:none;padding:0;margin:.3em 0;display:flex;flex-wrap:wrap;gap:.3em 1.2em}\
.verdict{border-left:6px solid #16a34a;background:#f0fdf4;padding:.4em 1em;margin:1em 0}\
.verdict.failed{border-color:#dc2626;background:#fef2f2}.verdict h2{margin:.3em 0}\
.verdict .invariant{color:#b91c1c}.verdict .kind{font-weight:normal;color:#6b7280;font-size:.85em}\
.evidence{font:13px/1.4 ui-monospace,Menlo,Consolas,monospace;background:#fff;border:1px solid #fecaca;padding:.5em .7em;white-space:pre-wrap;word-break:break-word}\
.how{color:#4b5563;max-width:70em}\
.chart{display:flex;border:1px solid #d1d5db;background:#fff}\
.labels{flex:none;border-right:1px solid #d1d5db}\
.scroll{overflow-x:auto;flex:1 1 auto}\
.lane-even{fill:#f9fafb}.lane-odd{fill:#f1f5f9}\
.lane-name{font:600 12px system-ui,sans-serif;fill:#111827}.lane-sub{font:10px system-ui,sans-serif;fill:#6b7280}\
.axis-name{font:10px system-ui,sans-serif;fill:#6b7280}\
.phase-liveness{fill:#0ea5e9;opacity:.06}\
.jump rect,.jump-swatch{fill:#e2e8f0;opacity:.8}\
.band-down{fill:#dc2626;opacity:.13}.band-paused{fill:#f59e0b;opacity:.55}\
.failure-band{fill:#dc2626;opacity:.22}\
.idle rect,.idle-swatch{fill:#cbd5e1}.idle-failing rect{fill:#fca5a5}\
.heal line{stroke:#0891b2;stroke-width:2;stroke-dasharray:5 3}.heal text{font:600 11px system-ui,sans-serif;fill:#0e7490}\
.failure-label{font:700 11px system-ui,sans-serif;fill:#b91c1c}\
.link{stroke:#93c5fd;stroke-width:1}.link.lost{stroke:#ef4444;stroke-dasharray:2 2}.link-end{fill:#60a5fa}\
.ring{fill:none;stroke:#dc2626;stroke-width:1.5}\
.time-label,.step-label,.jump-label{font:10px system-ui,sans-serif;fill:#374151;text-anchor:middle}\
.jump-label{fill:#6b7280}.tick{stroke:#9ca3af;stroke-width:1}\
.mark-label{font:600 9px system-ui,sans-serif;fill:#0f766e}\
.m:hover{opacity:.6}\
.f{stroke:none}.s{fill:none;stroke-width:1.5}.x{stroke-width:2}.crash{stroke-width:2.5}\
.f.t-neutral{fill:#6b7280}.s.t-neutral{stroke:#6b7280}\
.f.t-info{fill:#2563eb}.s.t-info{stroke:#2563eb}\
.f.t-good{fill:#16a34a}.s.t-good{stroke:#16a34a}\
.f.t-warn{fill:#d97706}.s.t-warn{stroke:#d97706}\
.f.t-bad{fill:#dc2626}.s.t-bad{stroke:#dc2626}\
.f.t-effect{fill:#0d9488}.s.t-effect{stroke:#0d9488}\
.f.t-lease{fill:#7c3aed}.s.t-lease{stroke:#7c3aed}\
.f.t-db{fill:#111827}.s.t-db{stroke:#111827}\
.f.t-purge{fill:#92400e}.expiry{fill:#9333ea}\
.legend{list-style:none;padding:0;columns:2 26em}.legend li{margin:.15em 0}.legend svg{vertical-align:middle}\
.moments{border-collapse:collapse}.moments td,.moments th{padding:.15em .7em;border-bottom:1px solid #e5e7eb;text-align:left;vertical-align:top}\
.moments td:last-child{font:12px ui-monospace,Menlo,Consolas,monospace;word-break:break-word}\
.moment-failure td{background:#fee2e2}.moment-heal td{background:#ecfeff}\
.lines{background:#f8fafc;border:1px solid #e5e7eb;padding:.5em;overflow-x:auto}\
";

/// Scrolls the chart to the failing step when the page opens. Without scripting the page is
/// complete; the link in the verdict does the same.
const SCRIPT: &str = "<script>\n(function () {\n  var scroller = document.getElementById('chart-scroll');\n  var failure = document.getElementById('failure');\n  if (scroller && failure) {\n    var x = Number(failure.getAttribute('data-x'));\n    scroller.scrollLeft = Math.max(0, x - scroller.clientWidth * 0.6);\n  }\n})();\n</script>\n";

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace line as the simulator writes it.
    fn line(step: u64, time_ms: i64, actor: &str, action: &str) -> String {
        format!("{step:>6} {:>12} {actor:<13} {action}", format_time_ms(time_ms))
    }

    fn setup(receivers: u32, relays: u32) -> String {
        format!(
            "setup system=reference seed=7 rows=4 accounts=1 orders=2 events=2 streams=2 receivers={receivers} relay-workers={relays} sender=svix"
        )
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
    fn step_lines_are_read_field_by_field() {
        let text = line(
            42,
            63_008,
            "relay-1#1",
            "call send key=k -> provider accepted shp-1 (new effect)",
        );
        assert_eq!(
            parse_line(&text),
            TraceLine::Step(StepLine {
                step: 42,
                time_ms: 63_008,
                actor: "relay-1#1".to_owned(),
                action: "call send key=k -> provider accepted shp-1 (new effect)".to_owned(),
            })
        );
        // An actor longer than its 13-character column is followed by a single space.
        let purge = line(
            1338,
            1_800_000,
            "fault:receipt-purge",
            "purge receipts received before 0:29:00.000",
        );
        let TraceLine::Step(purge) = parse_line(&purge) else {
            panic!("a purge timer line is a step");
        };
        assert_eq!(purge.actor, "fault:receipt-purge");
        assert_eq!(purge.action, "purge receipts received before 0:29:00.000");
        // A fault timer with nothing to do leaves an empty action.
        let TraceLine::Step(empty) = parse_line(&line(2069, 5_400_000, "fault:receipt-purge", "")) else {
            panic!("an empty action is still a step");
        };
        assert_eq!(empty.action, "");
    }

    #[test]
    fn setup_heal_and_failed_lines_are_recognised() {
        assert_eq!(
            parse_line("setup system=reference seed=1"),
            TraceLine::Setup {
                settings: "system=reference seed=1".to_owned()
            }
        );
        let heal = line(
            1973,
            3_600_001,
            "world",
            "heal: faults stop, 0 crashed processes restart",
        );
        assert!(matches!(parse_line(&heal), TraceLine::Heal(step) if step.step == 1973));
        let failed = line(
            563,
            5_638_117,
            "invariant",
            "FAILED one-effect-per-operation: 2 effects: a: b",
        );
        let TraceLine::Failed {
            line,
            invariant,
            evidence,
        } = parse_line(&failed)
        else {
            panic!("a FAILED line is recognised");
        };
        assert_eq!((line.step, line.time_ms), (563, 5_638_117));
        assert_eq!(invariant, "one-effect-per-operation");
        assert_eq!(evidence, "2 effects: a: b");
    }

    #[test]
    fn lines_in_no_known_shape_are_unreadable_never_a_panic() {
        for text in [
            "",
            "   ",
            "replay: seed 1 on reference: passed every invariant",
            "12",
            "12 0:00:00.000",
            "12 noon sender deliver",
            "-3 0:00:00.000 sender emit",
            "99999999999999999999999 0:00:00.000 sender emit",
            "1 99999999999999:00:00.000 sender emit",
            "1 0:61:00.000 sender emit",
            "1 0:00:00.0000 sender emit",
            "1 0:00:00 sender emit",
            "1 +0:00:00.000 sender emit",
            "1 0:0é:00.000 sender emit",
            "\u{1f4a5} 0:00:00.000 sender emit",
        ] {
            assert_eq!(parse_line(text), TraceLine::Unreadable, "{text:?}");
        }
    }

    #[test]
    fn times_and_durations_read_back_what_the_trace_writes() {
        for time_ms in [
            0,
            1,
            999,
            61_042,
            27 * 3_600_000 + 61_042,
            400 * 3_600_000,
            -30_000,
        ] {
            assert_eq!(parse_time_ms(&format_time_ms(time_ms)), Some(time_ms));
        }
        for duration_ms in [
            0,
            250,
            1_000,
            1_500,
            300_000,
            1_307_357,
            2 * 86_400_000 + 3 * 3_600_000,
        ] {
            let text = crate::trace::format_duration_ms(duration_ms);
            assert_eq!(parse_duration_ms(&text), Some(duration_ms), "{text}");
        }
        for text in ["", "5", "5x", "1.5m", "1.5555s", "m", "99999999999999999999d"] {
            assert_eq!(parse_duration_ms(text), None, "{text:?}");
        }
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
        assert_eq!(lane_of("world"), None);
        assert_eq!(lane_of("invariant"), None);

        let lines = [
            setup(2, 1),
            line(1, 0, "receiver-2#1", "sql BEGIN IMMEDIATE -> ok"),
            line(
                2,
                1,
                "receiver-2#1",
                "crash receiver-2#1: 1 tasks dropped, 1 open transactions rolled back, restart in 3s",
            ),
            line(3, 3_001, "receiver-2#1", "restart as receiver-2#2"),
            line(
                4,
                3_002,
                "receiver-2#2",
                "crash receiver-2#2: 0 tasks dropped, 0 open transactions rolled back, restart in 1s",
            ),
            line(5, 4_002, "receiver-2#2", "restart as receiver-2#3"),
            line(6, 4_003, "receiver-2#3", "sql BEGIN IMMEDIATE -> ok"),
        ];
        let page = render("lanes", &lines, None);
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
        let hostile = "log: <script>alert(\"x\")</script> & 'quoted' </title><b>";
        let lines = [
            setup(1, 1),
            line(1, 0, "receiver-1#1", hostile),
            line(2, 1, "<img src=x>", "what & why"),
            "<svg onload=alert(1)> not a trace line".to_owned(),
        ];
        let evidence = Failure {
            message: "2 effects <b>&</b> \"quoted\"".to_owned(),
            ..failure(1, "")
        };
        let page = render("title <i>&</i>", &lines, Some(&evidence));
        for raw in [
            "<script>alert",
            "</title><b>",
            "<img src",
            "<svg onload",
            "<b>&</b>",
            "<i>&</i>",
        ] {
            assert!(!page.contains(raw), "{raw} reached the page unescaped");
        }
        assert!(page.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;quoted&#39;"));
        assert!(page.contains("2 effects &lt;b&gt;&amp;&lt;/b&gt; &quot;quoted&quot;"));
        assert!(page.contains("commitgap timeline: title &lt;i&gt;&amp;&lt;/i&gt;"));
        assert_eq!(escape("a\u{0}b\u{7}c\td\ne"), "a\u{fffd}b\u{fffd}c\td\ne");
        // The only script is the page's own.
        assert_eq!(page.matches("<script").count(), 1);
    }

    #[test]
    fn idle_polls_fold_into_one_grey_line_per_lane() {
        let poll = "sql SELECT operation_key, max(next_attempt_ms, coalesce(lease_expires_ms, 0)) AS due_ms FROM outbox W… -> 0 rows | sleep 1s";
        let failed_poll = "sql SELECT operation_key FROM outbox -> error: database is busy | log: relay pass failed: database is busy | sleep 1s";
        let mut lines = vec![setup(1, 1)];
        let mut step = 0;
        let mut time_ms = 0;
        for index in 0..300 {
            step += 1;
            time_ms += 1_000;
            lines.push(line(step, time_ms, "relay-1#1", "wake"));
            step += 1;
            let action = if index % 10 == 0 { failed_poll } else { poll };
            lines.push(line(step, time_ms + 1, "relay-1#1", action));
        }
        step += 1;
        lines.push(line(
            step,
            time_ms + 2,
            "relay-1#1",
            "sql SELECT operation_key FROM outbox -> 1 rows ('k', 5)",
        ));
        step += 1;
        lines.push(line(
            step,
            time_ms + 3,
            "relay-1#1",
            "sql UPDATE outbox SET lease_owner = ?1, lease_token = lease_token + 1 ['relay-1#1', 'k'] -> 1 rows ('{}') [commit 1 rows]",
        ));
        let page = render("polls", &lines, None);
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
        let lines = [
            setup(1, 1),
            line(1, 0, "relay-1#1", "sql BEGIN IMMEDIATE -> ok"),
            line(
                2,
                1,
                "relay-1#1",
                "sql SELECT payload FROM outbox -> 1 rows ('p') | sleep 1s",
            ),
            line(3, 1_001, "relay-1#1", "sql COMMIT -> ok"),
            line(
                4,
                1_002,
                "relay-1#1",
                "sql SELECT payload FROM outbox -> 0 rows | sleep 1s",
            ),
        ];
        let page = render("transaction", &lines, None);
        assert_eq!(page.matches("<g class=\"m").count(), 3);
        assert!(page.contains("data-steps=\"1\""), "the read after COMMIT is idle");
    }

    #[test]
    fn an_unparseable_line_becomes_an_other_mark() {
        let lines = [
            setup(1, 1),
            line(
                1,
                0,
                "sender",
                "emit payment.succeeded evt-1 (acct-a, order tenant-a/order-1, 1 subscriptions)",
            ),
            "garbage that is not a trace line".to_owned(),
            line(2, 1, "mystery-actor#2", "does something new"),
        ];
        let page = render("odd", &lines, None);
        assert!(page.contains("class=\"lane-label\" data-lane=\"other\""));
        assert!(page.contains("class=\"lane-label\" data-lane=\"mystery-actor\""));
        assert_eq!(marks_with_kind(&page, "other"), 2);
        assert!(page.contains("<section id=\"unreadable\">"));
        assert!(page.contains("garbage that is not a trace line"));
    }

    #[test]
    fn messages_calls_and_faults_get_their_marks() {
        let lines = [
            setup(2, 1),
            line(
                1,
                0,
                "sender",
                "deliver evt-1 (acct-a) stream 0 attempt 1 -> receiver-2#1 | deliver evt-1 (acct-a) stream 0 (copy): lost on the way in",
            ),
            line(
                2,
                1,
                "receiver-2#1",
                "sql COMMIT -> ok [commit 3 rows] | answer 200 Applied",
            ),
            line(3, 2, "receiver-2#1", "answer 200 Applied to stream 0 lost"),
            line(
                4,
                3,
                "relay-1#1",
                "relay-1#1 clock set +51168 ms from true timereply error: provider call timed out",
            ),
            line(5, 4, "relay-1#1", "relay-1#1 pauses for 10m"),
            line(
                6,
                600_004,
                "relay-1#1",
                "call send key=tenant-a/order-1/fulfill/v1 -> provider accepted shp-1 (new effect), reply lost",
            ),
            line(
                7,
                600_005,
                "provider",
                "provider finishes key=tenant-a/order-2/fulfill/v1: accepted shp-2 (new effect) (the caller timed out)",
            ),
            line(
                8,
                600_006,
                "fault:receipt-purge",
                "purge receipts received before 0:09:00.000",
            ),
            line(
                9,
                600_007,
                "purge#1",
                "sql DELETE FROM receipts WHERE received_ms < ?1 [540000] -> 2 changed [commit 2 rows]",
            ),
        ];
        let page = render("marks", &lines, None);
        assert_eq!(marks_with_kind(&page, "deliver"), 1);
        assert_eq!(marks_with_kind(&page, "delivery-lost"), 1);
        assert_eq!(marks_with_kind(&page, "answer"), 1);
        assert_eq!(marks_with_kind(&page, "answer-lost"), 1);
        assert_eq!(marks_with_kind(&page, "commit"), 2);
        assert_eq!(marks_with_kind(&page, "clock-jump"), 1);
        assert_eq!(
            marks_with_kind(&page, "reply"),
            1,
            "a remark written straight after a clock jump"
        );
        assert_eq!(marks_with_kind(&page, "pause"), 1);
        assert_eq!(marks_with_kind(&page, "call"), 1);
        assert_eq!(marks_with_kind(&page, "provider"), 2);
        assert_eq!(marks_with_kind(&page, "purge"), 1);
        let busy_claim = [
            setup(1, 1),
            line(
                1,
                0,
                "relay-2#2",
                "sql UPDATE outbox SET lease_owner = ?1 ['relay-2#2', 'k'] -> error: database is busy | log: relay pass failed: database is busy | sleep 1s",
            ),
        ];
        let busy = render("busy claim", &busy_claim, None);
        assert_eq!(
            marks_with_kind(&busy, "lease-claim"),
            1,
            "a failed claim is still a claim"
        );
        assert_eq!(marks_with_kind(&busy, "sql-error"), 1);
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
    fn a_key_expiry_shows_where_a_stored_key_acts_anew() {
        let send = |step: u64, outcome: &str| {
            line(
                step,
                step as i64,
                "relay-1#1",
                &format!("call send key=tenant-a/order-1/fulfill/v1 -> provider {outcome}"),
            )
        };
        let replayed = [
            setup(1, 1),
            send(1, "accepted shp-1 (new effect)"),
            send(2, "accepted shp-1 (replayed)"),
        ];
        assert_eq!(marks_with_kind(&render("kept", &replayed, None), "key-expiry"), 0);
        let forgotten = [
            setup(1, 1),
            send(1, "accepted shp-1 (new effect)"),
            send(2, "409 conflict"),
            send(3, "accepted shp-2 (new effect)"),
        ];
        let page = render("forgotten", &forgotten, None);
        assert_eq!(marks_with_kind(&page, "key-expiry"), 1);
        assert!(page.contains("the provider had forgotten key tenant-a/order-1/fulfill/v1"));
        let sticky = [
            setup(1, 1),
            send(1, "unavailable: 500 internal error (cached under this key)"),
            send(2, "unavailable: 500 internal error (cached under this key)"),
            send(3, "accepted shp-1 (new effect)"),
        ];
        assert_eq!(marks_with_kind(&render("sticky", &sticky, None), "key-expiry"), 1);
    }

    #[test]
    fn the_failing_step_is_highlighted_with_its_evidence() {
        let evidence = "operation tenant-a/order-1/fulfill/v1 has 2 effects: shp-1 under key tenant-a/order-1/fulfill/v1; shp-2";
        let lines = [
            setup(1, 1),
            line(
                1,
                0,
                "relay-1#1",
                "call send key=tenant-a/order-1/fulfill/v1 -> provider accepted shp-1 (new effect)",
            ),
            line(
                2,
                1,
                "relay-1#1",
                "call send key=tenant-a/order-12/fulfill/v1 -> provider accepted shp-12 (new effect)",
            ),
            line(
                3,
                2,
                "relay-1#1",
                "call send key=tenant-a/order-1/fulfill/v1#retry2 -> provider accepted shp-3 (new effect)",
            ),
            line(
                4,
                5_000,
                "relay-1#1",
                "call send key=tenant-a/order-1/fulfill/v1 -> provider accepted shp-2 (new effect)",
            ),
            line(
                4,
                5_000,
                "invariant",
                &format!("FAILED one-effect-per-operation: {evidence}"),
            ),
        ];
        for given in [Some(failure(4, evidence)), None] {
            let page = render("failed", &lines, given.as_ref());
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
        let lines = [
            setup(1, 1),
            line(1, 0, "relay-1#1", "wake"),
            line(
                1,
                0,
                "world",
                "heal: faults stop, 0 crashed processes restart, clocks are set right",
            ),
            line(2, 60_000, "operator", "operator requeues dead obligations"),
            line(3, 120_000, "relay-1#1", "wake"),
        ];
        let liveness = Failure {
            invariant: "outbox-drains".to_owned(),
            kind: "liveness".to_owned(),
            step: 3,
            time_ms: 120_001,
            message: "tenant-a/order-1/fulfill/v1 is still pending".to_owned(),
        };
        let page = render("liveness", &lines, Some(&liveness));
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
        let lines = [
            setup(2, 2),
            line(
                1,
                0,
                "sender",
                "emit payment.succeeded evt-1 (acct-a, order tenant-a/order-1, 1 subscriptions)",
            ),
            line(
                2,
                7_200_000,
                "relay-2#1",
                "sql SELECT x FROM outbox -> 0 rows | sleep 1s",
            ),
            line(
                3,
                7_200_001,
                "receiver-1#1",
                "sql COMMIT -> ok [commit 2 rows] | answer 200 Applied",
            ),
        ];
        let first = render("same", &lines, Some(&failure(3, "why")));
        assert_eq!(first, render("same", &lines, Some(&failure(3, "why"))));
        assert!(first.contains(">+2h00m</text>"), "a two-hour jump is labelled");
    }

    #[test]
    fn degenerate_traces_still_render() {
        let failure_after_everything = failure(99, "nothing to see");
        let traces: Vec<Vec<String>> = vec![
            Vec::new(),
            vec![setup(0, 0)],
            vec!["setup receivers=99999999999999999999999 relay-workers=-1".to_owned()],
            vec!["not a line".to_owned(), "\u{0}\u{7f}".to_owned()],
            vec![line(5, 10_000, "world", "heal: faults stop")],
            vec![line(3, 9_000, "invariant", "FAILED")],
            // Time that runs backwards, and a pause that never ends within the trace.
            vec![
                line(1, 5_000, "relay-1#1", "relay-1#1 pauses for 2d3h"),
                line(2, 1_000, "relay-1#1", "crash relay-1#1: 0 tasks dropped"),
                line(3, 0, "relay-1#1", "restart as relay-1#x"),
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
        let lines = [setup(1, 1), line(1, 0, "sender", "emit x")];
        let page = render("alone", &lines, None);
        for outside in ["http://", "https://", "src=", "@import", "<link", "url("] {
            assert!(!page.contains(outside), "{outside}");
        }
    }
}
