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
//! `timeline/style.css` and `timeline/page.js`, compiled in and written inline, so that the page
//! still stands alone.
//!
//! The work is split by job: `lanes` names the lane of each process, `line` reads what one
//! step says, `reading` arranges the whole trace into columns, `layout` places them in
//! pixels, `svg` draws the chart and `html` writes the page around it.

use std::fmt::Write as _;

use crate::run::Failure;
use crate::trace::TraceStep;

mod html;
mod lanes;
mod layout;
mod line;
mod reading;
mod svg;

use html::{
    SCRIPT, write_evidence_lines, write_header, write_legend, write_moments, write_style, write_unreadable,
    write_verdict,
};
use layout::Layout;
use reading::read_trace;
use svg::{escape, write_chart};

/// A non-negative decimal number written with ASCII digits only.
fn parse_digits(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
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

#[cfg(test)]
mod tests;
