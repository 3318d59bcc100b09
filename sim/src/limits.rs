//! The bounds every configuration and schedule is held to, so that any seed file a user edits
//! runs in bounded memory and time, and no arithmetic on its values can overflow: every duration
//! is at most a year, so the sum of a few of them is far from the largest `i64`. The README lists
//! them. This module only states bounds and checks values against them; it decides nothing else.

use std::fmt::Display;

/// The longest duration any setting may have: a year, in milliseconds.
pub const DURATION_MS_MAX: i64 = 365 * 24 * 3_600_000;
/// Tenants are named `tenant-a` to `tenant-z`.
pub const TENANTS_MAX: u32 = 26;
/// Orders one tenant may place.
pub const ORDERS_PER_TENANT_MAX: u32 = 64;
/// Orders over all tenants. With at most five events an order and each event fanned out to
/// at most [`FAN_OUT_MAX`] subscriptions, any workload the simulator draws stays within the
/// stream limits below, so every seed file it writes can be read back.
pub const ORDERS_MAX: u64 = 64;
/// Receivers, and relay workers, each.
pub const PROCESSES_MAX: u32 = 16;
/// Subscriptions one event is delivered to.
pub const SUBSCRIPTIONS_MAX: u32 = 8;
/// Subscriptions a fault model may fan an event out to.
pub const FAN_OUT_MAX: u32 = 4;
/// Deliveries of one event outside the retry schedule.
pub const EXTRA_DELIVERIES_MAX: usize = 8;
/// Events in a workload: a few per order, plus what fault models add.
pub const EVENTS_MAX: usize = 512;
/// Streams (an event's delivery to one subscription) over the whole workload, and extra
/// deliveries over the whole workload. A hand-made schedule at these limits, with every event
/// at once, runs in about a minute on a 2-core machine; drawn workloads are far smaller.
pub const STREAMS_MAX: usize = 2_048;
/// Extra deliveries over the whole workload.
pub const ALL_EXTRA_DELIVERIES_MAX: usize = 2_048;
/// Delivery attempts the relay may make for one stream.
pub const ATTEMPTS_MAX: i64 = 1_000;
/// Steps the fault phase of a run may take.
pub const FAULT_PHASE_STEPS_MAX: u64 = 1_000_000;
/// Steps the liveness phase of a run may take.
pub const LIVENESS_STEPS_MAX: u64 = 5_000_000;
/// Lines in a schedule: one per step of the longest run.
pub const SCHEDULE_STEPS_MAX: usize = (FAULT_PHASE_STEPS_MAX + LIVENESS_STEPS_MAX) as usize;
/// Outage windows a fault model may list.
pub const WINDOWS_MAX: usize = 16;
/// Characters in a name (an account, a tenant, an order, an event id): the receiver's own limit,
/// which edge values (`SimConfig::edge_values`) reach.
pub const NAME_CHARS_MAX: usize = commitgap::receiver::NAME_CHARS_MAX;

/// `Ok` when `low <= value <= high`; otherwise one line naming `field`, the value and the
/// allowed range.
pub fn check<T: PartialOrd + Display>(field: &str, value: T, low: T, high: T) -> Result<(), String> {
    if value >= low && value <= high {
        Ok(())
    } else {
        Err(format!(
            "{field} is {}; allowed {low} to {high}",
            crate::files::clip(&value.to_string(), 80)
        ))
    }
}

/// Checks a list of `(start_ms, duration_ms)` windows: a few, each starting within a year and
/// lasting from a millisecond to a year.
pub fn check_windows(field: &str, windows: &[(i64, i64)]) -> Result<(), String> {
    check(
        &format!("{field} (the number of windows)"),
        windows.len(),
        0,
        WINDOWS_MAX,
    )?;
    for (index, (start_ms, duration_ms)) in windows.iter().enumerate() {
        check(
            &format!("{field}[{index}][0] (start)"),
            *start_ms,
            0,
            DURATION_MS_MAX,
        )?;
        check(
            &format!("{field}[{index}][1] (duration)"),
            *duration_ms,
            1,
            DURATION_MS_MAX,
        )?;
    }
    Ok(())
}
