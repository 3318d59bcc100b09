//! `claim-ignores-live-lease`: the claim checks that the obligation is still pending and due, but
//! not that the current lease has expired.
//!
//! The claim is a SELECT followed by an UPDATE fenced on the status alone, the way a relay is
//! often written when "the token protects us": a second worker takes an obligation whose lease is
//! still live, and both call the provider. Fencing keeps the stale worker's completion out, and a
//! provider that answers 409 to a concurrent request with the same key keeps the effect single,
//! so nothing downstream need break; only the lease itself shows it.
//!
//! Only [`RelaySteps::claim`] differs from the reference; it must not change any other step.

use commitgap::env::{DbError, Env, int, text};
use commitgap::receiver::ReceiverSteps;
use commitgap::relay::{Claim, RelaySettings, RelaySteps};

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct ClaimIgnoresLiveLease;

impl PlantedBug for ClaimIgnoresLiveLease {
    const NAME: &'static str = "claim-ignores-live-lease";
    const RULE_BROKEN: &'static str = "the claim checks that the obligation is still pending and due, but not that the current lease has expired";
}

impl ReceiverSteps for ClaimIgnoresLiveLease {}

impl RelaySteps for ClaimIgnoresLiveLease {
    async fn claim(
        &self,
        env: &dyn Env,
        settings: &RelaySettings,
        operation_key: &str,
    ) -> Result<Option<Claim>, DbError> {
        let now_ms = env.now_ms();
        let due = env
            .query(
                "SELECT lease_token FROM outbox WHERE operation_key = ?1 AND status = 'pending' \
                 AND next_attempt_ms <= ?2",
                &[text(operation_key), int(now_ms)],
            )
            .await?;
        if due.is_empty() {
            return Ok(None);
        }
        let rows = env
            .query(
                "UPDATE outbox SET lease_owner = ?1, lease_token = lease_token + 1, \
                 lease_expires_ms = ?3, attempts = attempts + 1, \
                 first_attempt_ms = coalesce(first_attempt_ms, ?2) \
                 WHERE operation_key = ?4 AND status = 'pending' \
                 RETURNING payload, lease_token, attempts, first_attempt_ms, last_error",
                &[
                    text(env.process_id()),
                    int(now_ms),
                    int(now_ms + self.lease_ms(settings)),
                    text(operation_key),
                ],
            )
            .await?;
        rows.first()
            .map(|row| Claim::from_row(operation_key, row))
            .transpose()
    }
}
