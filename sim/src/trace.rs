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
}

impl Trace {
    /// A trace that keeps its lines in memory when `keep_lines` is true.
    pub fn new(keep_lines: bool) -> Trace {
        Trace {
            hasher: Sha256::new(),
            lines: keep_lines.then(Vec::new),
            line_count: 0,
        }
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

/// Formats virtual milliseconds as `h:mm:ss.mmm` (hours are not wrapped at a day; times before
/// the start, such as a purge cutoff, get a minus sign).
pub fn format_time_ms(time_ms: i64) -> String {
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

/// Formats a duration for people: `250ms`, `12s`, `5m`, `21m47.357s`, `2d3h`.
pub fn format_duration_ms(duration_ms: i64) -> String {
    if duration_ms < 1_000 {
        return format!("{duration_ms}ms");
    }
    const UNITS: [(i64, &str); 3] = [(86_400_000, "d"), (3_600_000, "h"), (60_000, "m")];
    let mut rest = duration_ms;
    let mut text = String::new();
    for (size, unit) in UNITS {
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

// ----- How steps are described -----

/// Collapses whitespace and shortens `sql` for the trace.
pub fn summarize_sql(sql: &str, out: &mut String) {
    const LIMIT: usize = 96;
    let start = out.len();
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
            let _ = write!(out, "{number}");
        }
        Value::Real(number) => {
            let _ = write!(out, "{number}");
        }
        Value::Text(text) if text.len() > LIMIT => {
            let cut = (0..=LIMIT)
                .rev()
                .find(|&index| text.is_char_boundary(index))
                .unwrap_or(0);
            let _ = write!(out, "'{}…'", &text[..cut]);
        }
        Value::Text(text) => {
            let _ = write!(out, "'{text}'");
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
    summarize_sql(sql, out);
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
        Ok(StatementOutput::Changed(_)) if !changes_rows(sql) => out.push_str(" -> ok"),
        Ok(StatementOutput::Changed(count)) => {
            let _ = write!(out, " -> {count} changed");
        }
        Ok(StatementOutput::Rows(rows)) => {
            let _ = write!(out, " -> {} rows", rows.len());
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
