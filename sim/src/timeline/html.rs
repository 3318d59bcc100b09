//! The HTML of the timeline page around its chart: the inline stylesheet and script, the header
//! with the run's tally, the verdict, the legend, the table of key moments and the trace lines
//! behind a failure.
//!
//! Trace text reaches the page only through [`escape`]. The page must stand alone, so the
//! stylesheet and script are compiled in from the files beside this one and written inline, and
//! nothing links to a resource elsewhere.

use std::fmt::Write as _;

use super::layout::short_duration;
use super::line::{Kind, Tone};
use super::reading::{Column, Reading};
use super::svg::{escape, glyph_svg};
use crate::trace::format_time_ms;

/// The page's stylesheet. The file keeps a group of rules a line, for editing; the page carries
/// it on one line (see [`write_style`]).
const STYLE: &str = include_str!("style.css");

/// Scrolls the chart to the failing step when the page opens. Without scripting the page is
/// complete; the link in the verdict does the same.
pub(super) const SCRIPT: &str = include_str!("page.js");

/// The stylesheet inline, its lines joined: CSS means the same with or without line breaks
/// between rules, and the page keeps the one-line `<style>` it has always had.
pub(super) fn write_style(page: &mut String) {
    page.push_str("<style>");
    for line in STYLE.lines() {
        page.push_str(line);
    }
    page.push_str("</style>\n");
}

pub(super) fn write_header(page: &mut String, title: &str, reading: &Reading) {
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

pub(super) fn write_verdict(page: &mut String, reading: &Reading) {
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

pub(super) fn write_legend(page: &mut String) {
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

pub(super) fn write_moments(page: &mut String, reading: &Reading) {
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

pub(super) fn write_evidence_lines(page: &mut String, reading: &Reading) {
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

pub(super) fn write_unreadable(page: &mut String, reading: &Reading) {
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
