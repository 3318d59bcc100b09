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
//! dead) or taken again by its own holder is not a second lease. The check reads only the step's
//! commits and the run's history.

use super::{Invariant, InvariantKind, Observation};
use crate::system::{ObligationStatus, ObservedRow};

pub struct OneLiveLeasePerObligation;

impl Invariant for OneLiveLeasePerObligation {
    fn name(&self) -> &'static str {
        "one-live-lease-per-obligation"
    }

    fn description(&self) -> &'static str {
        "no worker takes a lease on an obligation while another worker's lease on it is live (by true time, allowing clock skew)"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        let skew_ms = observation.history.clock_offset_max_ms;
        for commit in &observation.step.commits {
            for diff in &commit.diffs {
                let (Some(ObservedRow::Obligation(before)), Some(ObservedRow::Obligation(after))) =
                    (&diff.before, &diff.after)
                else {
                    continue;
                };
                let taken = after.lease_token > before.lease_token && after.lease_owner.is_some();
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
                if observation.now_ms.saturating_add(skew_ms) < expires_ms {
                    return Err(format!(
                        "{} took the lease on {} (token {} -> {}) while {}'s lease was live: it ends at {} by its holder's clock, and true time is {} with clocks so far at most {} ms off",
                        commit.process_id,
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
        }
        Ok(())
    }
}
