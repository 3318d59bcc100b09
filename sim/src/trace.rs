//! The trace: one deterministic line per step, and a digest that identifies the run.
//!
//! A line reads `step  virtual-time  actor  action`, for example
//! `    42    0:00:01.042 receiver-2#1  sql INSERT INTO receipts ... -> 1 row`. The digest is a
//! SHA-256 over every line, so two runs of one seed agree on it exactly when their traces are
//! byte-identical. Lines are kept in memory only when asked (replay with `--trace`, determinism
//! checks); a sweep keeps the digest alone. Nothing here may read the wall clock or the
//! environment: a line must depend on the run alone.

use std::fmt::Write as _;

use commitgap::env::{DbError, Value};
use commitgap::provider::ProviderReply;
use sha2::{Digest, Sha256};

use crate::db::StatementOutput;

/// Collects trace lines of one run.
pub struct Trace {
    hasher: Sha256,
    lines: Option<Vec<String>>,
    line_count: u64,
    /// The line being written, kept so that a step's line costs no allocation of its own.
    buffer: String,
}

impl Trace {
    /// A trace that keeps its lines in memory when `keep_lines` is true.
    pub fn new(keep_lines: bool) -> Trace {
        Trace {
            hasher: Sha256::new(),
            lines: keep_lines.then(Vec::new),
            line_count: 0,
            buffer: String::new(),
        }
    }

    /// Appends the line of one step, `{step:>6} {time:>12} {actor:<13} {text}` with the time as
    /// [`format_time_ms`] writes it, for example
    /// `    42  0:00:01.042 receiver-2#1  sql INSERT ...`.
    pub fn push_step(&mut self, step: u64, time_ms: i64, actor: &str, text: &str) {
        let mut line = std::mem::take(&mut self.buffer);
        line.clear();
        write_step_line(&mut line, step, time_ms, actor, text);
        line.push('\n');
        self.hasher.update(line.as_bytes());
        self.line_count += 1;
        if let Some(lines) = &mut self.lines {
            lines.push(line[..line.len() - 1].to_owned());
        }
        self.buffer = line;
    }

    /// Appends one line (without its newline).
    pub fn push(&mut self, line: String) {
        self.hasher.update(line.as_bytes());
        self.hasher.update(b"\n");
        self.line_count += 1;
        if let Some(lines) = &mut self.lines {
            lines.push(line);
        }
    }

    pub fn line_count(&self) -> u64 {
        self.line_count
    }

    /// The digest so far: the first 16 bytes of the SHA-256, in hex.
    pub fn digest(&self) -> String {
        let full = self.hasher.clone().finalize();
        full[..16].iter().map(|byte| format!("{byte:02x}")).collect()
    }

    /// The lines kept so far (empty unless lines are kept).
    pub fn lines(&self) -> &[String] {
        self.lines.as_deref().unwrap_or(&[])
    }

    /// The kept lines, if any were kept.
    pub fn into_lines(self) -> Option<Vec<String>> {
        self.lines
    }
}

/// Writes the line of one step (see [`Trace::push_step`]) by hand: it is written for every step of
/// every run, and `format!` with padding cost a tenth of a sweep.
pub fn write_step_line(out: &mut String, step: u64, time_ms: i64, actor: &str, text: &str) {
    const STEP_WIDTH: usize = 6;
    const TIME_WIDTH: usize = 12;
    const ACTOR_WIDTH: usize = 13;
    let step_digits = decimal_digits(step);
    pad(out, STEP_WIDTH.saturating_sub(step_digits));
    push_decimal(out, step, 1);
    out.push(' ');
    let hours = time_ms.unsigned_abs() / 3_600_000;
    // `h:mm:ss.mmm`, a sign before it if negative.
    let time_length = usize::from(time_ms < 0) + decimal_digits(hours) + 10;
    pad(out, TIME_WIDTH.saturating_sub(time_length));
    write_time_ms(out, time_ms);
    out.push(' ');
    out.push_str(actor);
    pad(out, ACTOR_WIDTH.saturating_sub(actor.chars().count()));
    out.push(' ');
    out.push_str(text);
}

fn pad(out: &mut String, spaces: usize) {
    for _ in 0..spaces {
        out.push(' ');
    }
}

fn decimal_digits(mut value: u64) -> usize {
    let mut digits = 1;
    while value >= 10 {
        value /= 10;
        digits += 1;
    }
    digits
}

/// Writes `value` in decimal with at least `min_digits` digits, zeros in front.
fn push_decimal(out: &mut String, value: u64, min_digits: usize) {
    // Most numbers a trace line holds are clock fields and small counts: one to three digits.
    if value < 1_000 && min_digits <= 3 {
        let digits = [(value / 100) as u8, (value / 10 % 10) as u8, (value % 10) as u8];
        for digit in &digits[3 - decimal_digits(value).max(min_digits)..] {
            out.push(char::from(b'0' + digit));
        }
        return;
    }
    let mut digits = [b'0'; 20];
    let mut rest = value;
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    // The buffer starts as zeros, so padding to up to 20 digits is a wider slice of it.
    start = start.min(digits.len().saturating_sub(min_digits));
    out.push_str(std::str::from_utf8(&digits[start..]).unwrap_or_default());
}

/// Writes a step number in decimal.
pub fn write_step_number(out: &mut String, step: u64) {
    push_decimal(out, step, 1);
}

/// Writes virtual milliseconds as [`format_time_ms`] formats them.
pub fn write_time_ms(out: &mut String, time_ms: i64) {
    if time_ms < 0 {
        out.push('-');
    }
    let magnitude = time_ms.unsigned_abs();
    let (seconds, millis) = (magnitude / 1_000, magnitude % 1_000);
    push_decimal(out, seconds / 3_600, 1);
    out.push(':');
    push_decimal(out, (seconds / 60) % 60, 2);
    out.push(':');
    push_decimal(out, seconds % 60, 2);
    out.push('.');
    push_decimal(out, millis, 3);
}

/// Formats virtual milliseconds as `h:mm:ss.mmm` (hours are not wrapped at a day; times before
/// the start, such as a purge cutoff, get a minus sign).
pub fn format_time_ms(time_ms: i64) -> String {
    let mut text = String::new();
    write_time_ms(&mut text, time_ms);
    text
}

/// Formats a duration for people: `250ms`, `12s`, `5m`, `21m47.357s`, `2d3h`.
pub fn format_duration_ms(duration_ms: i64) -> String {
    let mut text = String::new();
    write_duration_ms(&mut text, duration_ms);
    text
}

/// Writes a duration as [`format_duration_ms`] formats it.
pub fn write_duration_ms(out: &mut String, duration_ms: i64) {
    if duration_ms < 1_000 {
        if duration_ms < 0 {
            out.push('-');
        }
        push_decimal(out, duration_ms.unsigned_abs(), 1);
        out.push_str("ms");
        return;
    }
    const UNITS: [(i64, char); 3] = [(86_400_000, 'd'), (3_600_000, 'h'), (60_000, 'm')];
    let mut rest = duration_ms;
    for (size, unit) in UNITS {
        if rest >= size {
            push_decimal(out, (rest / size) as u64, 1);
            out.push(unit);
            rest %= size;
        }
    }
    let (seconds, millis) = ((rest / 1_000) as u64, (rest % 1_000) as u64);
    if seconds == 0 && millis == 0 {
        return;
    }
    push_decimal(out, seconds, 1);
    if millis != 0 {
        out.push('.');
        push_decimal(out, millis, 3);
    }
    out.push('s');
}

// ----- How steps are described -----

/// Collapses whitespace and shortens `sql` for the trace: at most 96 bytes, then `…`.
pub fn summarize_sql(sql: &str, out: &mut String) {
    const LIMIT: usize = 96;
    let start = out.len();
    if sql.is_ascii() {
        // Word by word rather than character by character: every statement of every run passes
        // through here. For ASCII, `char::is_whitespace` is tab to carriage return, and space.
        let is_space = |byte: u8| byte == b' ' || (b'\t'..=b'\r').contains(&byte);
        let bytes = sql.as_bytes();
        let mut at = 0;
        loop {
            while at < bytes.len() && is_space(bytes[at]) {
                at += 1;
            }
            if at == bytes.len() {
                return;
            }
            let word_start = at;
            while at < bytes.len() && !is_space(bytes[at]) {
                at += 1;
            }
            let word = &sql[word_start..at];
            if out.len() > start {
                out.push(' ');
            }
            let written = out.len() - start;
            if written + word.len() >= LIMIT {
                // The character loop below checks the limit after each character it writes, so
                // at least one is written after a space.
                let take = LIMIT.saturating_sub(written).max(1).min(word.len());
                out.push_str(&word[..take]);
                out.push('…');
                return;
            }
            out.push_str(word);
        }
    }
    let mut pending_space = false;
    for character in sql.chars() {
        if character.is_whitespace() {
            pending_space = out.len() > start;
            continue;
        }
        if pending_space {
            out.push(' ');
            pending_space = false;
        }
        out.push(character);
        if out.len() - start >= LIMIT {
            out.push('…');
            return;
        }
    }
}

pub fn describe_value(value: &Value, out: &mut String) {
    const LIMIT: usize = 40;
    match value {
        Value::Null => out.push_str("NULL"),
        Value::Integer(number) => {
            if *number < 0 {
                out.push('-');
            }
            push_decimal(out, number.unsigned_abs(), 1);
        }
        Value::Real(number) => {
            let _ = write!(out, "{number}");
        }
        Value::Text(text) if text.len() > LIMIT => {
            let cut = (0..=LIMIT)
                .rev()
                .find(|&index| text.is_char_boundary(index))
                .unwrap_or(0);
            out.push('\'');
            out.push_str(&text[..cut]);
            out.push_str("…'");
        }
        Value::Text(text) => {
            out.push('\'');
            out.push_str(text);
            out.push('\'');
        }
        Value::Blob(bytes) => {
            let _ = write!(out, "<{} bytes>", bytes.len());
        }
    }
}

pub fn describe_statement(
    out: &mut String,
    sql: &str,
    params: &[Value],
    result: &Result<StatementOutput, DbError>,
) {
    if !out.is_empty() {
        out.push_str(" | ");
    }
    out.push_str("sql ");
    let changes = summarize_sql_remembered(sql, out);
    if !params.is_empty() {
        out.push_str(" [");
        for (index, value) in params.iter().enumerate() {
            if index > 0 {
                out.push_str(", ");
            }
            describe_value(value, out);
        }
        out.push(']');
    }
    match result {
        // SQLite's change count is stale after BEGIN, COMMIT and other non-DML statements.
        Ok(StatementOutput::Changed(_)) if !changes => out.push_str(" -> ok"),
        Ok(StatementOutput::Changed(count)) => {
            out.push_str(" -> ");
            push_decimal(out, *count as u64, 1);
            out.push_str(" changed");
        }
        Ok(StatementOutput::Rows(rows)) => {
            out.push_str(" -> ");
            push_decimal(out, rows.len() as u64, 1);
            out.push_str(" rows");
            if let Some(first) = rows.first() {
                out.push_str(" (");
                for (index, value) in first.0.iter().enumerate() {
                    if index > 0 {
                        out.push_str(", ");
                    }
                    describe_value(value, out);
                }
                out.push(')');
            }
        }
        Err(error) => {
            let _ = write!(out, " -> error: {error}");
        }
    }
}

/// How many statement summaries one thread remembers; a system runs a few dozen statements.
const SUMMARIES_KEPT: usize = 256;

/// A statement's summary and whether it changes rows, as last worked out for its text.
struct Summary {
    sql: String,
    summary: String,
    changes_rows: bool,
}

std::thread_local! {
    /// Summaries by the address and length of the statement text they were made for. Systems pass
    /// the same constant texts again and again, so the address finds the entry and one
    /// comparison of the text confirms it; a text elsewhere in memory is summarized again.
    static SUMMARIES: std::cell::RefCell<std::collections::BTreeMap<(usize, usize), Summary>> =
        const { std::cell::RefCell::new(std::collections::BTreeMap::new()) };
}

/// Writes what [`summarize_sql`] writes and returns [`changes_rows`], both remembered for the
/// text: every statement of every run is described, and the text is usually one seen before.
fn summarize_sql_remembered(sql: &str, out: &mut String) -> bool {
    SUMMARIES.with(|summaries| {
        let mut summaries = summaries.borrow_mut();
        let key = (sql.as_ptr() as usize, sql.len());
        if let Some(known) = summaries.get(&key)
            && known.sql == sql
        {
            out.push_str(&known.summary);
            return known.changes_rows;
        }
        let start = out.len();
        summarize_sql(sql, out);
        let changes = changes_rows(sql);
        if summaries.len() >= SUMMARIES_KEPT {
            summaries.clear();
        }
        summaries.insert(
            key,
            Summary {
                sql: sql.to_owned(),
                summary: out[start..].to_owned(),
                changes_rows: changes,
            },
        );
        changes
    })
}

/// Whether `sql` is a statement whose change count means something.
pub fn changes_rows(sql: &str) -> bool {
    let keyword = sql.split_whitespace().next().unwrap_or("");
    ["INSERT", "UPDATE", "DELETE", "REPLACE", "WITH"]
        .iter()
        .any(|candidate| keyword.eq_ignore_ascii_case(candidate))
}

pub fn describe_reply(reply: &ProviderReply) -> String {
    match reply {
        ProviderReply::Accepted {
            effect_id,
            replayed: false,
        } => format!("accepted {effect_id} (new effect)"),
        ProviderReply::Accepted {
            effect_id,
            replayed: true,
        } => format!("accepted {effect_id} (replayed)"),
        ProviderReply::Found { effect_id } => format!("found {effect_id}"),
        ProviderReply::NotFound => "not found".to_owned(),
        ProviderReply::Conflict => "409 conflict".to_owned(),
        ProviderReply::Rejected { status, reason } => format!("rejected {status}: {reason}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_depends_on_every_line() {
        let digest = |lines: &[&str]| {
            let mut trace = Trace::new(false);
            for line in lines {
                trace.push((*line).to_owned());
            }
            trace.digest()
        };
        assert_eq!(digest(&["a", "b"]), digest(&["a", "b"]));
        assert_ne!(digest(&["a", "b"]), digest(&["a", "c"]));
        assert_ne!(digest(&["ab"]), digest(&["a", "b"]));
        assert_eq!(digest(&["a"]).len(), 32);
    }

    #[test]
    fn step_lines_are_what_format_writes() {
        let mut rng = crate::rng::SimRng::stream(3, "trace-test");
        let actors = [
            "",
            "sender",
            "receiver-2#1",
            "relay-10#12",
            "invariant",
            "a-very-long-actor-name",
            "é",
        ];
        let mut cases = vec![
            (0u64, 0i64),
            (999_999, -30_000),
            (1_000_000, 27 * 3_600_000 + 61_042),
            (7, i64::MIN + 1),
        ];
        for _ in 0..2_000 {
            let step = rng.below(10_000_000);
            let time_ms = rng.below(400 * 3_600_000) as i64 - 3_600_000;
            cases.push((step, time_ms));
        }
        for (index, (step, time_ms)) in cases.into_iter().enumerate() {
            let actor = actors[index % actors.len()];
            let text = if index % 3 == 0 {
                ""
            } else {
                "sql SELECT 1 -> 1 rows"
            };
            // The time as `format_time_ms` wrote it with `format!`, kept here to compare with.
            let sign = if time_ms < 0 { "-" } else { "" };
            let (seconds, millis) = (time_ms.unsigned_abs() / 1_000, time_ms.unsigned_abs() % 1_000);
            let time = format!(
                "{sign}{}:{:02}:{:02}.{millis:03}",
                seconds / 3_600,
                (seconds / 60) % 60,
                seconds % 60
            );
            assert_eq!(format_time_ms(time_ms), time);
            let expected = format!("{:>6} {:>12} {:<13} {}", step, time, actor, text);
            let mut written = String::new();
            write_step_line(&mut written, step, time_ms, actor, text);
            assert_eq!(written, expected);
            let mut by_line = Trace::new(true);
            by_line.push(expected.clone());
            let mut by_step = Trace::new(true);
            by_step.push_step(step, time_ms, actor, text);
            assert_eq!(by_step.digest(), by_line.digest());
            assert_eq!(by_step.lines(), by_line.lines());
        }
    }

    /// What `summarize_sql` did character by character before its word-by-word path.
    fn summarize_by_character(sql: &str) -> String {
        let mut out = String::new();
        let mut pending_space = false;
        for character in sql.chars() {
            if character.is_whitespace() {
                pending_space = !out.is_empty();
                continue;
            }
            if pending_space {
                out.push(' ');
                pending_space = false;
            }
            out.push(character);
            if out.len() >= 96 {
                out.push('…');
                break;
            }
        }
        out
    }

    #[test]
    fn summaries_collapse_whitespace_and_stop_at_the_limit() {
        let mut rng = crate::rng::SimRng::stream(5, "summary-test");
        let pieces = [
            "SELECT",
            "x",
            " ",
            "  ",
            "\n",
            "\t",
            "\u{b}",
            "\r\n",
            "abcdefghij",
            "é",
            "\u{85}",
            ",",
        ];
        for case in 0..5_000 {
            let mut sql = String::new();
            for _ in 0..rng.below(80) {
                let piece = pieces[rng.below(pieces.len() as u64) as usize];
                // Half the cases ASCII only, to exercise the word-by-word path.
                if case % 2 == 0 && !piece.is_ascii() {
                    continue;
                }
                sql.push_str(piece);
            }
            let mut summary = String::from("prefix ");
            summarize_sql(&sql, &mut summary);
            assert_eq!(
                summary,
                format!("prefix {}", summarize_by_character(&sql)),
                "{sql:?}"
            );
        }
    }

    #[test]
    fn values_and_statements_are_described_as_format_described_them() {
        // The descriptions as they were written with `write!`, kept here to compare with.
        let old_value = |value: &Value| -> String {
            match value {
                Value::Null => "NULL".to_owned(),
                Value::Integer(number) => format!("{number}"),
                Value::Real(number) => format!("{number}"),
                Value::Text(text) if text.len() > 40 => {
                    let cut = (0..=40)
                        .rev()
                        .find(|&index| text.is_char_boundary(index))
                        .unwrap_or(0);
                    format!("'{}…'", &text[..cut])
                }
                Value::Text(text) => format!("'{text}'"),
                Value::Blob(bytes) => format!("<{} bytes>", bytes.len()),
            }
        };
        let mut rng = crate::rng::SimRng::stream(8, "value-test");
        let mut values = vec![
            Value::Null,
            Value::Integer(0),
            Value::Integer(-7),
            Value::Integer(i64::MIN),
            Value::Integer(i64::MAX),
            Value::Real(1.5),
            Value::Text(String::new()),
            Value::Text("é".repeat(30)),
            Value::Text("x".repeat(41)),
            Value::Blob(vec![1, 2, 3]),
        ];
        for _ in 0..3_000 {
            let bits = rng.below(63);
            let magnitude = rng.below(1 << bits) as i64;
            values.push(Value::Integer(if rng.below(2) == 0 {
                magnitude
            } else {
                -magnitude
            }));
        }
        for value in &values {
            let mut described = String::from("[");
            describe_value(value, &mut described);
            assert_eq!(described, format!("[{}", old_value(value)), "{value:?}");
        }
        let statements: [(&str, Result<StatementOutput, DbError>); 4] = [
            ("INSERT INTO t VALUES (?1)", Ok(StatementOutput::Changed(1_234))),
            ("BEGIN IMMEDIATE", Ok(StatementOutput::Changed(3))),
            ("SELECT a,\n  b FROM t", Ok(StatementOutput::Rows(Vec::new()))),
            ("DELETE FROM t", Err(DbError::Busy)),
        ];
        for (sql, result) in &statements {
            let mut described = String::from("earlier");
            describe_statement(&mut described, sql, &values[..3], result);
            let mut summary = String::new();
            summarize_sql(sql, &mut summary);
            let params = values[..3].iter().map(old_value).collect::<Vec<_>>().join(", ");
            let outcome = match result {
                Ok(StatementOutput::Changed(_)) if !changes_rows(sql) => " -> ok".to_owned(),
                Ok(StatementOutput::Changed(count)) => format!(" -> {count} changed"),
                Ok(StatementOutput::Rows(rows)) => format!(" -> {} rows", rows.len()),
                Err(error) => format!(" -> error: {error}"),
            };
            assert_eq!(described, format!("earlier | sql {summary} [{params}]{outcome}"));
        }
    }

    #[test]
    fn a_remembered_summary_is_never_another_texts() {
        // Texts built at run time may reuse the memory of an earlier text of the same length.
        for round in 0..200 {
            let sql = format!("SELECT {} FROM t{}", round % 7, round % 3);
            let mut remembered = String::new();
            let changes = summarize_sql_remembered(&sql, &mut remembered);
            let mut summary = String::new();
            summarize_sql(&sql, &mut summary);
            assert_eq!(remembered, summary);
            assert!(!changes);
        }
        let update = "UPDATE t SET a = 1";
        for _ in 0..2 {
            let mut remembered = String::from("x");
            assert!(summarize_sql_remembered(update, &mut remembered));
            assert_eq!(remembered, "xUPDATE t SET a = 1");
        }
    }

    #[test]
    fn durations_are_what_they_were_with_format() {
        let old = |duration_ms: i64| -> String {
            if duration_ms < 1_000 {
                return format!("{duration_ms}ms");
            }
            let mut rest = duration_ms;
            let mut text = String::new();
            for (size, unit) in [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m")] {
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
        };
        let mut rng = crate::rng::SimRng::stream(6, "duration-test");
        let mut cases = vec![-5, 0, 999, 1_000, 60_000, 86_400_000, 90_061_001];
        cases.extend((0..3_000).map(|_| rng.below(10 * 86_400_000) as i64));
        cases.extend((0..1_000).map(|_| rng.below(120_000) as i64));
        for duration_ms in cases {
            assert_eq!(format_duration_ms(duration_ms), old(duration_ms), "{duration_ms}");
        }
    }

    #[test]
    fn times_and_durations_read_naturally() {
        assert_eq!(format_time_ms(0), "0:00:00.000");
        assert_eq!(format_time_ms(27 * 3_600_000 + 61_042), "27:01:01.042");
        assert_eq!(format_time_ms(-30_000), "-0:00:30.000");
        assert_eq!(format_duration_ms(300_000), "5m");
        assert_eq!(format_duration_ms(1_500), "1.500s");
        assert_eq!(format_duration_ms(250), "250ms");
        assert_eq!(format_duration_ms(1_307_357), "21m47.357s");
        assert_eq!(format_duration_ms(2 * 86_400_000 + 3 * 3_600_000), "2d3h");
    }
}
