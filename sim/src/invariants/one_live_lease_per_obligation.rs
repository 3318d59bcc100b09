//! No worker takes a lease on an obligation while another worker's lease on it is still live.
//!
//! Fencing tokens make a stale worker's writes harmless, but they do not make a second live
//! lease harmless: two workers holding one obligation at once both call the provider, and only a
//! provider that serialises requests per key keeps that from doing the work twice. A correct
//! claim takes a lease only once the current one has expired by the claiming worker's clock.
//!
//! Judged by true time, allowing for clock skew: a lease written to expire at `E` by its holder's
//! clock, taken over by another worker in a commit at true time `T`, was certainly still live
//! when `T + skew < E`, where `skew` is the furthest any process's clock has been from true time
//! so far in the run (never more than `relay.clock_skew_ms_max`): the claiming worker's clock
//! read at most `T + skew` when its claim was decided, since the claim was decided before it
//! committed. Taking the skew the run actually had, rather than the bound, keeps the check sharp
//! in the many runs whose clocks never move. A lease given up (owner cleared), settled (done or
//! dead) or taken again by its own holder is not a second lease.
//!
//! Nor may another worker change a live lease it does not hold: extend it, give it up, or move the
//! obligation's retry time under it. Such a write (a heartbeat or a backoff whose token check is
//! missing) lets a third worker claim while the holder is still calling the provider, or keeps a
//! crashed holder's obligation from ever coming due. The holder of a token is the process that
//! committed it (`History::lease_holders`); a write that changes the expiry or the owner without
//! taking a new token, by anyone else, while the lease is live by the rule above, is the failure.
//! A lease that has certainly expired may be cleared by anyone (a reaper is a legitimate design),
//! but not extended: a new expiry written by a worker that does not hold the token makes the
//! obligation look held by one that never asked, and keeps every worker from it.
//! The check reads only the step's commits and the run's history.

use super::{Invariant, InvariantKind, Observation, changed_obligations, lease_taken};
use crate::system::{ObligationRow, ObligationStatus};

pub struct OneLiveLeasePerObligation;

impl Invariant for OneLiveLeasePerObligation {
    fn name(&self) -> &'static str {
        "one-live-lease-per-obligation"
    }

    fn description(&self) -> &'static str {
        "no worker takes or changes a lease on an obligation while another worker's lease on it is live (by true time, allowing clock skew)"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    // It reads the commit, who took each lease, the commit's true time and how far clocks may be off: all a journal shows.
    fn judges_commits(&self) -> bool {
        true
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        let skew_ms = observation.history.clock_offset_max_ms;
        for (process_id, before, after) in changed_obligations(observation) {
            let taken = lease_taken(before, after);
            let live = before
                .lease_expires_ms
                .is_some_and(|expires_ms| observation.now_ms.saturating_add(skew_ms) < expires_ms);
            if !taken {
                check_change_by_holder(observation, process_id, before, after, live)?;
            }
            let (Some(previous_owner), Some(expires_ms)) =
                (before.lease_owner.as_deref(), before.lease_expires_ms)
            else {
                continue;
            };
            if !taken
                || before.status != ObligationStatus::Owed
                || after.lease_owner.as_deref() == Some(previous_owner)
            {
                continue;
            }
            if live {
                return Err(format!(
                    "{} took the lease on {} (token {} -> {}) while {}'s lease was live: it ends at {} by its holder's clock, and true time is {} with clocks so far at most {} ms off",
                    process_id,
                    after.operation_key,
                    before.lease_token,
                    after.lease_token,
                    previous_owner,
                    crate::trace::format_time_ms(expires_ms),
                    crate::trace::format_time_ms(observation.now_ms),
                    skew_ms
                ));
            }
        }
        Ok(())
    }
}

/// Fails when `process_id`, which does not hold `before`'s lease, changed it (its expiry or owner)
/// without taking a new token, while the lease was `live`, or gave it an expiry it did not have
/// (an extension, which makes the obligation look held by a worker that never asked). Clearing a
/// lease that has certainly expired is allowed. Settling the obligation is judged by
/// `completion-by-lease-holder`.
fn check_change_by_holder(
    observation: &Observation<'_>,
    process_id: &str,
    before: &ObligationRow,
    after: &ObligationRow,
    live: bool,
) -> Result<(), String> {
    let changed =
        after.lease_expires_ms != before.lease_expires_ms || after.lease_owner != before.lease_owner;
    if !changed || before.status != ObligationStatus::Owed || after.status != ObligationStatus::Owed {
        return Ok(());
    }
    let holder = observation
        .history
        .lease_holders
        .get(&(before.operation_key.clone(), before.lease_token));
    if holder.map(String::as_str) == Some(process_id) {
        return Ok(());
    }
    let extended = after.lease_expires_ms.is_some() && after.lease_expires_ms != before.lease_expires_ms;
    if !live && !extended {
        return Ok(());
    }
    let expiry =
        |expires_ms: Option<i64>| expires_ms.map_or_else(|| "none".to_owned(), crate::trace::format_time_ms);
    let what = if live {
        "changed the live lease"
    } else {
        "set the expiry of the lease"
    };
    Err(format!(
        "{} {what} on {} (token {}) that {} holds: expiry {} -> {}, while true time is {} with clocks so far at most {} ms off",
        process_id,
        before.operation_key,
        before.lease_token,
        holder.map_or("nobody", String::as_str),
        expiry(before.lease_expires_ms),
        expiry(after.lease_expires_ms),
        crate::trace::format_time_ms(observation.now_ms),
        observation.history.clock_offset_max_ms
    ))
}
