//! The trace as text, for people: one line per step (`replay --trace`), each happening in words,
//! and the helpers that shorten statements and values and write virtual times and durations.
//!
//! Text is written only when someone prints a record; the digest never reads it (see
//! [`super::digest`]), so the wording may change without changing any run's digest. Nothing here
//! decides anything about a run.

use std::fmt;

use commitgap::env::Value;
use commitgap::provider::{CallError, ProviderReply};

use super::{Arrival, CallOutcome, DeliveryHow, Happening, SqlOutcome, TraceStep};

/// `    42  0:00:01.042 receiver-2#1/t9  sql INSERT ... | answer 200 Applied`: the step, the
/// virtual time, the actor (with its task, when a process's task acted), and what happened, parts joined by ` | `. The set-up is one line of its own.
impl fmt::Display for TraceStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let [setup @ Happening::Setup { .. }] = &self.happened[..] {
            return write!(f, "{setup}");
        }
        let actor = match self.task {
            Some(task) => format!("{}/t{task}", self.actor),
            None => self.actor.to_string(),
        };
        write!(
            f,
            "{:>6} {:>12} {:<16} ",
            self.step,
            format_time_ms(self.time_ms),
            actor
        )?;
        for (index, happening) in self.happened.iter().enumerate() {
            if index > 0 {
                f.write_str(" | ")?;
            }
            write!(f, "{happening}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Happening {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Happening::Setup {
                system,
                seed,
                rows,
                accounts,
                subjects,
                events,
                streams,
                receivers,
                relay_workers,
                sender,
            } => write!(
                f,
                "setup system={system} seed={seed} rows={rows} accounts={accounts} subjects={subjects} events={events} streams={streams} receivers={receivers} relay-workers={relay_workers} sender={sender}"
            ),
            Happening::Sql {
                statement,
                params,
                outcome,
                injected,
            } => write_sql(f, statement, params, outcome, *injected),
            Happening::Committed { rows, observed } => {
                write!(f, "commit {}", count(*rows, "row", "rows"))?;
                for (index, change) in observed.iter().enumerate() {
                    f.write_str(if index == 0 { ": " } else { ", " })?;
                    write!(f, "{change}")?;
                }
                Ok(())
            }
            Happening::LockWait { statement, until_ms } => write!(
                f,
                "sql {} waits for the lock (until {} at the latest)",
                summarize_sql(statement),
                format_time_ms(*until_ms)
            ),
            Happening::TaskEndedInTransaction => f.write_str("task ended inside a transaction; rolled back"),
            Happening::Sleep { duration_ms } => write!(f, "sleep {}", format_duration_ms(*duration_ms)),
            Happening::Wake => f.write_str("wake"),
            Happening::Call {
                send,
                key,
                outcome,
                reply_lost,
            } => {
                let verb = if *send { "send" } else { "lookup" };
                write!(f, "call {verb} key={key} -> ")?;
                match outcome {
                    CallOutcome::Replied(reply) => write!(f, "provider {}", Reply(reply))?,
                    CallOutcome::Busy { for_ms } => {
                        write!(f, "provider busy for {}", format_duration_ms(*for_ms))?
                    }
                }
                if *reply_lost {
                    f.write_str(", reply lost")?;
                }
                Ok(())
            }
            Happening::Reply(reply) => write!(f, "reply {}", Reply(reply)),
            Happening::ProviderFinishes { key, outcome } => {
                write!(
                    f,
                    "provider finishes key={key}: {} (the caller timed out)",
                    Reply(outcome)
                )
            }
            Happening::KeyForgotten { key, model } => {
                write!(f, "provider forgot key {key} (fault:{model})")
            }
            other => other.fmt_messages(f),
        }
    }
}

impl Happening {
    fn fmt_messages(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Happening::Answer(answer) => write!(f, "answer {answer}"),
            Happening::AnswerSent => f.write_str("answer sent"),
            Happening::AnswerWritten => f.write_str("answer written (no sender waits for it)"),
            Happening::AnswerLostInCrash => {
                f.write_str("answer lost: the receiver crashed before writing it")
            }
            Happening::AnswerLost { answer, stream } => write!(f, "answer {answer} to stream {stream} lost"),
            Happening::SenderGot {
                answer,
                stream,
                attempt,
                how,
                next_attempt_in_ms,
            } => {
                write!(f, "sender got {answer} for stream {stream} attempt {attempt}")?;
                if *how == DeliveryHow::Copy {
                    f.write_str(" (a copy; ignored)")?;
                }
                if let Some(next_ms) = next_attempt_in_ms {
                    write!(f, "; next attempt in {}", format_duration_ms(*next_ms))?;
                }
                Ok(())
            }
            Happening::Emit {
                kind,
                event_id,
                account,
                tenant,
                subject,
                subscriptions,
            } => write!(
                f,
                "emit {kind} {event_id} ({account}, {tenant}/{subject}, {})",
                count(*subscriptions, "subscription", "subscriptions")
            ),
            Happening::Deliver {
                event_id,
                account,
                stream,
                how,
                arrival,
            } => {
                write!(f, "deliver {event_id} ({account}) stream {stream} ")?;
                match how {
                    DeliveryHow::Attempt(attempt) => write!(f, "attempt {attempt}")?,
                    DeliveryHow::Copy => f.write_str("(copy)")?,
                    DeliveryHow::Extra(reason) => write!(f, "({reason})")?,
                }
                write!(f, "{arrival}")
            }
            Happening::AttemptTimedOut {
                stream,
                attempt,
                next_attempt_in_ms,
                settled,
            } => match (settled, next_attempt_in_ms) {
                (true, _) => write!(
                    f,
                    "attempt {attempt} of stream {stream} settled before its timeout"
                ),
                (false, Some(next_ms)) => write!(
                    f,
                    "attempt {attempt} of stream {stream} timed out; next attempt in {}",
                    format_duration_ms(*next_ms)
                ),
                (false, None) => write!(
                    f,
                    "attempt {attempt} of stream {stream} timed out; the sender gave up"
                ),
            },
            other => other.fmt_faults(f),
        }
    }

    fn fmt_faults(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Happening::Crash {
                process,
                tasks,
                open_transactions,
                restart_in_ms,
            } => write!(
                f,
                "crash {process}: {} dropped, {} rolled back, restart in {}",
                count(*tasks, "task", "tasks"),
                count(*open_transactions, "open transaction", "open transactions"),
                format_duration_ms(*restart_in_ms)
            ),
            Happening::Restart { process } => write!(f, "restart as {process}"),
            Happening::RestartSkipped => f.write_str("restart skipped: already up"),
            Happening::Pause { process, duration_ms } => {
                write!(f, "{process} pauses for {}", format_duration_ms(*duration_ms))
            }
            Happening::ClockSet { process, offset_ms } => {
                write!(f, "{process} clock set {offset_ms:+} ms from true time")
            }
            Happening::SenderClockSet { offset_ms } => {
                write!(f, "sender clock set {offset_ms:+} ms from true time")
            }
            Happening::FaultTimer => f.write_str("timer"),
            Happening::Purge { older_than_ms } => {
                write!(
                    f,
                    "purge receipts received before {}",
                    format_time_ms(*older_than_ms)
                )
            }
            Happening::PurgeSkipped => f.write_str("purge skipped: the purge process is down"),
            Happening::Attack {
                attack,
                event_id,
                account,
                arrival,
            } => write!(
                f,
                "attacker sends {} copied from {event_id} ({account}){arrival}",
                attack.name()
            ),
            Happening::AttackSkipped { attack, stream } => {
                write!(
                    f,
                    "attack `{} {stream}` names nothing in this run; skipped",
                    attack.name()
                )
            }
            Happening::OperatorRequeue => f.write_str("operator requeues dead obligations"),
            Happening::OperatorRedeliver { streams, round } => write!(
                f,
                "operator redelivers {} (round {round})",
                count(*streams, "failed delivery", "failed deliveries")
            ),
            Happening::Log(message) => write!(f, "log: {message}"),
            Happening::Heal { restarting } => write!(
                f,
                "heal: faults stop, {} restart, clocks are set right",
                count(*restarting, "crashed process", "crashed processes")
            ),
            Happening::Failed { invariant, evidence } => write!(f, "FAILED {invariant}: {evidence}"),
            other => unreachable!("written by an earlier match: {other:?}"),
        }
    }
}

impl fmt::Display for Arrival {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arrival::To(process) => write!(f, " -> {process}"),
            Arrival::Lost => f.write_str(": lost on the way in"),
            Arrival::Refused => f.write_str(": connection refused, no receiver up"),
        }
    }
}

/// A provider's reply, or why there was none, for people.
struct Reply<'a>(&'a Result<ProviderReply, String>);

impl fmt::Display for Reply<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Ok(ProviderReply::Accepted {
                effect_id,
                replayed: false,
            }) => write!(f, "accepted {effect_id} (new effect)"),
            Ok(ProviderReply::Accepted {
                effect_id,
                replayed: true,
            }) => write!(f, "accepted {effect_id} (replayed)"),
            Ok(ProviderReply::Found { effect_id }) => write!(f, "found {effect_id}"),
            Ok(ProviderReply::NotFound) => f.write_str("not found"),
            Ok(ProviderReply::Conflict) => f.write_str("409 conflict"),
            Ok(ProviderReply::RateLimited {
                retry_after_ms: Some(ms),
            }) => write!(f, "429 rate limited, retry after {ms} ms"),
            Ok(ProviderReply::RateLimited { retry_after_ms: None }) => f.write_str("429 rate limited"),
            Ok(ProviderReply::Rejected { status, reason }) => write!(f, "rejected {status}: {reason}"),
            Err(error) => write!(f, "error: {error}"),
        }
    }
}

/// A call's failure as the records hold it.
pub fn call_error_text(error: &CallError) -> String {
    match error {
        CallError::Timeout => "timed out".to_owned(),
        CallError::Unavailable(reason) => format!("unavailable: {reason}"),
    }
}

/// `1 row`, `3 rows`.
fn count(number: usize, one: &str, many: &str) -> String {
    format!("{number} {}", if number == 1 { one } else { many })
}

/// `sql <statement, whitespace collapsed, cut at 96 bytes> [params] -> outcome`.
fn write_sql(
    f: &mut fmt::Formatter<'_>,
    statement: &str,
    params: &[Value],
    outcome: &SqlOutcome,
    injected: bool,
) -> fmt::Result {
    write!(f, "sql {}", summarize_sql(statement))?;
    if !params.is_empty() {
        let described: Vec<String> = params.iter().map(describe_value).collect();
        write!(f, " [{}]", described.join(", "))?;
    }
    match outcome {
        SqlOutcome::Done => f.write_str(" -> ok")?,
        SqlOutcome::Changed(changed) => write!(f, " -> {changed} changed")?,
        SqlOutcome::Rows { count: rows, first } => {
            write!(f, " -> {}", count(*rows, "row", "rows"))?;
            if let Some(first) = first {
                let described: Vec<String> = first.iter().map(describe_value).collect();
                write!(f, " ({})", described.join(", "))?;
            }
        }
        SqlOutcome::Failed(error) => write!(f, " -> error: {error}")?,
    }
    if injected {
        f.write_str(" (injected)")?;
    }
    Ok(())
}

/// Collapses whitespace and shortens `sql` for people: at most 96 bytes, then `…`.
pub fn summarize_sql(sql: &str) -> String {
    const LIMIT: usize = 96;
    let mut out = String::new();
    for word in sql.split_whitespace() {
        if !out.is_empty() {
            out.push(' ');
        }
        if out.len() + word.len() >= LIMIT {
            let room = LIMIT.saturating_sub(out.len()).max(1);
            let cut = (0..=room.min(word.len()))
                .rev()
                .find(|&index| word.is_char_boundary(index))
                .unwrap_or(0);
            out.push_str(&word[..cut.max(word.chars().next().map_or(0, char::len_utf8))]);
            out.push('…');
            return out;
        }
        out.push_str(word);
    }
    out
}

/// A parameter or column value for people: text quoted and cut at 40 bytes.
pub fn describe_value(value: &Value) -> String {
    const LIMIT: usize = 40;
    match value {
        Value::Null => "NULL".to_owned(),
        Value::Integer(number) => number.to_string(),
        Value::Real(number) => number.to_string(),
        Value::Text(text) if text.len() > LIMIT => {
            let cut = (0..=LIMIT)
                .rev()
                .find(|&index| text.is_char_boundary(index))
                .unwrap_or(0);
            format!("'{}…'", &text[..cut])
        }
        Value::Text(text) => format!("'{text}'"),
        Value::Blob(bytes) => format!("<{} bytes>", bytes.len()),
    }
}

/// Formats virtual milliseconds as `h:mm:ss.mmm` (hours are not wrapped at a day; times before
/// the start, such as a purge cutoff, get a minus sign). A time from the year 2000 on is a
/// wall-clock time in ms since the epoch, as a check over real processes records them (no
/// simulated run lasts thirty years), and is written as a UTC date and time.
pub fn format_time_ms(time_ms: i64) -> String {
    if time_ms >= WALL_CLOCK_FROM_MS {
        return format_wall_clock_ms(time_ms);
    }
    let sign = if time_ms < 0 { "-" } else { "" };
    let magnitude = time_ms.unsigned_abs();
    let (seconds, millis) = (magnitude / 1_000, magnitude % 1_000);
    format!(
        "{sign}{}:{:02}:{:02}.{millis:03}",
        seconds / 3_600,
        (seconds / 60) % 60,
        seconds % 60
    )
}

/// 2000-01-01T00:00:00Z in ms since the epoch: from here on a time is a wall-clock one.
const WALL_CLOCK_FROM_MS: i64 = 946_684_800_000;

/// Formats ms since the epoch as `YYYY-MM-DD hh:mm:ss.mmm UTC`, by the proleptic Gregorian
/// calendar (days to a civil date through 400-year eras of 146,097 days).
fn format_wall_clock_ms(time_ms: i64) -> String {
    let (days, day_ms) = (time_ms.div_euclid(86_400_000), time_ms.rem_euclid(86_400_000));
    // Days from 0000-03-01, so that a leap day ends its year.
    let shifted = days + 719_468;
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    let seconds = day_ms / 1_000;
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:03} UTC",
        seconds / 3_600,
        (seconds / 60) % 60,
        seconds % 60,
        day_ms % 1_000
    )
}

/// Formats a duration for people: `250ms`, `12s`, `5m`, `21m47.357s`, `2d3h`.
pub fn format_duration_ms(duration_ms: i64) -> String {
    if duration_ms < 1_000 {
        return format!("{duration_ms}ms");
    }
    let mut rest = duration_ms;
    let mut text = String::new();
    for (size, unit) in [(86_400_000, 'd'), (3_600_000, 'h'), (60_000, 'm')] {
        if rest >= size {
            text.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    match (rest / 1_000, rest % 1_000) {
        (0, 0) => {}
        (seconds, 0) => text.push_str(&format!("{seconds}s")),
        (seconds, millis) => text.push_str(&format!("{seconds}.{millis:03}s")),
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_collapse_whitespace_and_stop_at_the_limit() {
        assert_eq!(summarize_sql("SELECT  a,\n  b\tFROM t"), "SELECT a, b FROM t");
        let long = format!("SELECT {} FROM t", "x".repeat(200));
        let summary = summarize_sql(&long);
        assert!(summary.ends_with('…') && summary.len() <= 100, "{summary}");
        assert_eq!(
            describe_value(&Value::Text("x".repeat(41))),
            format!("'{}…'", "x".repeat(40))
        );
    }

    #[test]
    fn times_and_durations_read_naturally() {
        assert_eq!(format_time_ms(0), "0:00:00.000");
        assert_eq!(format_time_ms(27 * 3_600_000 + 61_042), "27:01:01.042");
        assert_eq!(format_time_ms(-30_000), "-0:00:30.000");
        // Wall-clock times, as a check over real processes records them.
        for (time_ms, written) in [
            (946_684_800_000, "2000-01-01 00:00:00.000 UTC"),
            (1_796_619_385_722, "2026-12-07 04:56:25.722 UTC"),
            (1_709_164_800_000, "2024-02-29 00:00:00.000 UTC"),
            (1_709_251_199_999, "2024-02-29 23:59:59.999 UTC"),
            (4_102_444_800_000, "2100-01-01 00:00:00.000 UTC"),
        ] {
            assert_eq!(format_time_ms(time_ms), written);
        }
        assert_eq!(format_duration_ms(300_000), "5m");
        assert_eq!(format_duration_ms(1_500), "1.500s");
        assert_eq!(format_duration_ms(250), "250ms");
        assert_eq!(format_duration_ms(1_307_357), "21m47.357s");
        assert_eq!(format_duration_ms(2 * 86_400_000 + 3 * 3_600_000), "2d3h");
    }

    #[test]
    fn counts_agree_with_their_number() {
        assert_eq!(count(1, "row", "rows"), "1 row");
        assert_eq!(count(0, "row", "rows"), "0 rows");
        let emit = Happening::Emit {
            kind: "payment.succeeded".into(),
            event_id: "evt-1".into(),
            account: "acct-a".into(),
            tenant: "tenant-a".into(),
            subject: "order-1".into(),
            subscriptions: 1,
        };
        assert!(emit.to_string().ends_with("1 subscription)"), "{emit}");
    }

    /// Seed 3 sends copies of one event to one receiver at once, so two of its handlers wait for
    /// the write lock side by side: their lines must say which handler each is.
    #[test]
    fn concurrent_handlers_of_one_process_are_told_apart() {
        let system = std::sync::Arc::clone(&crate::systems::by_name("reference").unwrap());
        let options = crate::run::RunOptions {
            keep_trace: true,
            ..crate::run::RunOptions::default()
        };
        let outcome = crate::run::run_seed(&system, 3, &options).unwrap();
        let trace = outcome.trace.unwrap();
        let mut tasks_of: std::collections::BTreeMap<String, std::collections::BTreeSet<u64>> =
            Default::default();
        for step in &trace {
            if let super::super::Actor::Process(process) = &step.actor
                && process.starts_with("receiver-")
                && step
                    .happened
                    .iter()
                    .any(|happening| matches!(happening, Happening::Sql { .. }))
            {
                let task = step
                    .task
                    .unwrap_or_else(|| panic!("a handler's statement names no task: {step}"));
                assert!(
                    step.to_string().contains(&format!("{process}/t{task} ")),
                    "{step}"
                );
                tasks_of.entry(process.to_string()).or_default().insert(task);
            }
        }
        assert!(
            tasks_of.values().any(|tasks| tasks.len() >= 2),
            "no receiver ran two handlers: {tasks_of:?}"
        );
    }
}
