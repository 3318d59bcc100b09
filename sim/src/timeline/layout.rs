//! Where everything on the timeline page's chart goes, in pixels: one fixed-width column per
//! step that says something, a shaded gap where virtual time jumps, one lane per process, and the
//! short labels of the axes.
//!
//! It measures and writes nothing: the chart is drawn by [`super::svg`]. Distances stand for the
//! order of steps, never for virtual time, which is read off the labels.

use std::collections::BTreeMap;

use super::lanes::Lane;
use super::reading::{Reading, Verdict};
use crate::trace::format_time_ms;

/// Width of one column, in pixels: room for a mark and a hover target.
pub(super) const COLUMN_PX: i64 = 8;
/// A run with few columns spreads them over about this width.
const SHORT_RUN_PX: i64 = 480;
pub(super) const LANE_PX: i64 = 32;
/// The lanes start below the marker row, the virtual-time axis and the jump labels.
pub(super) const LANES_TOP_PX: i64 = 58;
const STEP_AXIS_PX: i64 = 28;
pub(super) const LABELS_PX: i64 = 156;
pub(super) const SIDE_PAD_PX: i64 = 16;
/// A jump in virtual time at least this long between two columns is drawn as a gap.
const JUMP_MIN_MS: i64 = 1_000;
/// Time and step labels keep at least this far apart.
pub(super) const TIME_LABEL_SPACING_PX: i64 = 64;
pub(super) const STEP_LABEL_SPACING_PX: i64 = 48;
/// A time label appears at least this often, jump or no jump.
pub(super) const TIME_LABEL_EVERY_PX: i64 = 240;

/// A jump of virtual time between two columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Jump {
    pub(super) before_column: usize,
    pub(super) x: i64,
    pub(super) width: i64,
    pub(super) duration_ms: i64,
}

/// Where everything goes, in pixels.
#[derive(Debug)]
pub(super) struct Layout {
    pub(super) column_left: Vec<i64>,
    /// From one column's start to the next one's (without a jump between them).
    pitch: i64,
    pub(super) jumps: Vec<Jump>,
    lane_index: BTreeMap<Lane, i64>,
    pub(super) width: i64,
    pub(super) height: i64,
}

impl Layout {
    pub(super) fn new(reading: &Reading) -> Layout {
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

    pub(super) fn center_x(&self, column: usize) -> i64 {
        self.column_left[column] + COLUMN_PX / 2
    }

    /// Where the column after `column` would start.
    fn after(&self, column: usize) -> i64 {
        self.column_left[column] + self.pitch
    }

    /// The x of a gap between columns: where idle steps that fell into it are drawn.
    pub(super) fn gap_x(&self, gap: usize) -> i64 {
        match (gap.checked_sub(1), self.column_left.get(gap)) {
            (None, Some(&left)) => left - 2,
            (Some(before), Some(&left)) => (self.after(before) + left) / 2,
            (Some(before), None) => self.after(before) + 2,
            (None, None) => SIDE_PAD_PX,
        }
    }

    pub(super) fn lane_top(&self, lane: &Lane) -> i64 {
        LANES_TOP_PX + self.lane_index.get(lane).copied().unwrap_or(0) * LANE_PX
    }

    pub(super) fn lane_center(&self, lane: &Lane) -> i64 {
        self.lane_top(lane) + 14
    }

    pub(super) fn lanes_bottom(&self) -> i64 {
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
pub(super) fn short_duration(duration_ms: i64) -> String {
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
pub(super) fn short_time(time_ms: i64) -> String {
    let full = format_time_ms(time_ms);
    match full.rsplit_once('.') {
        Some((clock, _)) => clock.to_owned(),
        None => full,
    }
}

/// `FAILED <invariant> at step <n>`, drawn over the failing column.
pub(super) fn failure_label(verdict: &Verdict) -> String {
    format!("FAILED {} at step {}", verdict.invariant, verdict.step)
}

/// About how wide a label is drawn, in pixels: the page's bold 12px sans-serif averages under
/// seven pixels a character; rounded up so that a label is never cut.
pub(super) fn label_width_px(label: &str) -> i64 {
    label.chars().count() as i64 * 8
}
