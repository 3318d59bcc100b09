//! The chart of the timeline page as inline SVG: lane labels and stripes, the liveness phase,
//! jumps of virtual time, the stretches where a process was down or paused, folded idle steps,
//! each column's marks and links, the heal line, the axes and the failing column's label.
//!
//! Every mark carries its full trace line as an SVG `<title>`, so hovering needs no script. It
//! draws what [`super::reading`] and [`super::layout`] decided and decides nothing itself; every
//! piece of trace text goes through [`escape`] on its way to the page. The page around the
//! drawing (`super::html`) builds on this module and never the other way round.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::layout::{
    COLUMN_PX, LABELS_PX, LANE_PX, LANES_TOP_PX, Layout, SIDE_PAD_PX, STEP_LABEL_SPACING_PX,
    TIME_LABEL_EVERY_PX, TIME_LABEL_SPACING_PX, failure_label, label_width_px, short_duration, short_time,
};
use super::line::{Kind, Tone};
use super::reading::{Column, Reading};
use crate::trace::format_time_ms;

/// Escapes text for HTML and SVG, in element content and in quoted attributes alike: html-escape's
/// quoted-attribute encoder escapes `&`, `<`, `>` and both quotes, which is right in either place,
/// so no call site can pick the wrong one of two escapers. Control characters other than tab and
/// newline cannot appear in a document, so they become U+FFFD before escaping.
pub(super) fn escape(text: &str) -> String {
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

pub(super) fn write_chart(page: &mut String, reading: &Reading, layout: &Layout) {
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
pub(super) fn glyph_svg(kind: Kind, tone: Tone, x: i64, y: i64) -> String {
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
