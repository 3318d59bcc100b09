//! No worker takes an obligation before the retry time recorded on it.
//!
//! After a failure a relay writes when the obligation may be tried again: a backoff, so that a
//! failing provider is not hammered, or the wait for a request whose outcome is unknown to leave
//! the provider. A claim that ignores it (a claim that checks only the lease, or one that read the
//! obligation as due just before another worker wrote the time) retries early, and where the wait
//! was for a request still in flight, sends its key while that request may still act.
//!
//! Judged by true time, allowing for clock skew: a retry time `N` written by one clock and checked
//! by the claiming worker's clock, whose reading at its claim was at most `T + skew` at true time
//! `T`, was certainly not reached when `T + skew < N`, where `skew` is the furthest any clock has
//! been from true time so far in the run. Systems that record no retry time
//! (`ObligationRow::next_attempt_ms` is `None`) are not judged. The check reads only the step's
//! commits and the run's history.

use super::{Invariant, InvariantKind, Observation, changed_obligations, lease_taken};
use crate::system::ObligationStatus;

pub struct ClaimWaitsForRetryTime;

impl Invariant for ClaimWaitsForRetryTime {
    fn name(&self) -> &'static str {
        "claim-waits-for-retry-time"
    }

    fn description(&self) -> &'static str {
        "no worker takes an obligation before the retry time recorded on it (by true time, allowing clock skew)"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    // It reads the commit, its true time and how far clocks may be off: all a journal shows.
    fn judges_commits(&self) -> bool {
        true
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        let skew_ms = observation.history.clock_offset_max_ms;
        for (process_id, before, after) in changed_obligations(observation) {
            let Some(next_attempt_ms) = before.next_attempt_ms else {
                continue;
            };
            if lease_taken(before, after)
                && before.status == ObligationStatus::Owed
                && observation.now_ms.saturating_add(skew_ms) < next_attempt_ms
            {
                return Err(format!(
                    "{} took {} (token {} -> {}) before its retry time {}: true time is {} with clocks so far at most {} ms off",
                    process_id,
                    after.operation_key,
                    before.lease_token,
                    after.lease_token,
                    crate::trace::format_time_ms(next_attempt_ms),
                    crate::trace::format_time_ms(observation.now_ms),
                    skew_ms
                ));
            }
        }
        Ok(())
    }
}
