//! The outbox relay: delivers each owed obligation to the provider exactly once in effect.
//!
//! A worker claims one due obligation with a single compare-and-set statement that takes a lease
//! (owner, a token that only grows, an expiry), calls the provider outside any transaction with
//! the persisted key and the persisted payload, and records the outcome only if the row still
//! carries its token, so a worker whose lease was taken over cannot overwrite the new holder's
//! work. Transient failures back off; permanent rejections move the obligation to `dead` with a
//! reason, from which [`requeue`] brings it back. Once an obligation's first attempt is older than
//! the provider's key lifetime, the worker looks the key up before sending again, because a
//! forgotten key would turn the retry into a second effect.
//!
//! The relay must not hold a transaction open across a provider call, must not rebuild the payload
//! or mint a new key, and must not mark an obligation done before the provider confirmed the
//! effect.

use crate::env::{DbError, Env, Row, Value, int, text};
use crate::planted::PlantedBug;
use crate::provider::{CallError, ProviderCall, ProviderReply, ProviderRequest};

/// How a relay worker behaves. All durations are in milliseconds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RelaySettings {
    /// How long to wait for the provider before treating the outcome as unknown.
    pub call_timeout_ms: i64,
    /// How long a claim lasts. Must exceed `call_timeout_ms` by a margin, or a slow call lets a
    /// second worker claim the same obligation while the first is still waiting.
    pub lease_ms: i64,
    /// The provider's documented key lifetime: keys older than this may be forgotten.
    pub key_lifetime_ms: i64,
    /// First retry delay after a transient failure; each later retry waits four times longer.
    pub backoff_base_ms: i64,
    /// Upper bound on the retry delay.
    pub backoff_cap_ms: i64,
    /// Poll interval right after finding work.
    pub idle_poll_min_ms: i64,
    /// Poll interval after a long idle stretch (the interval doubles on every empty poll).
    pub idle_poll_max_ms: i64,
}

impl Default for RelaySettings {
    fn default() -> Self {
        RelaySettings {
            call_timeout_ms: 10_000,
            lease_ms: 60_000,
            key_lifetime_ms: 24 * 3_600_000,
            backoff_base_ms: 5_000,
            backoff_cap_ms: 3_600_000,
            idle_poll_min_ms: 1_000,
            idle_poll_max_ms: 300_000,
        }
    }
}

impl RelaySettings {
    /// The delay before attempt `attempts + 1`, after `attempts` failed attempts.
    pub fn backoff_ms(&self, attempts: i64) -> i64 {
        let exponent = attempts.clamp(1, 16) - 1;
        self.backoff_base_ms
            .saturating_mul(4_i64.saturating_pow(exponent as u32))
            .min(self.backoff_cap_ms)
    }
}

/// What one pass of the worker loop achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Claimed (or tried to claim) an obligation; look again at once.
    Worked,
    /// Nothing due. `next_due_ms` is when the earliest owed obligation becomes due, if any.
    Idle { next_due_ms: Option<i64> },
}

/// An obligation this worker holds the lease on.
#[derive(Debug, Clone)]
struct Claim {
    operation_key: String,
    payload: String,
    lease_token: i64,
    attempts: i64,
    first_attempt_ms: i64,
}

/// Runs a relay worker forever. It only returns if the future is dropped (a crash or shutdown).
pub async fn run_worker(env: &dyn Env, settings: &RelaySettings, planted_bug: Option<PlantedBug>) {
    let mut idle_poll_ms = settings.idle_poll_min_ms;
    loop {
        match relay_once(env, settings, planted_bug).await {
            Ok(Pass::Worked) => idle_poll_ms = settings.idle_poll_min_ms,
            Ok(Pass::Idle { next_due_ms }) => {
                let until_due_ms = next_due_ms.map_or(i64::MAX, |due| due - env.now_ms());
                env.sleep_ms(idle_poll_ms.min(until_due_ms).max(1)).await;
                idle_poll_ms = (idle_poll_ms * 2).min(settings.idle_poll_max_ms);
            }
            Err(error) => {
                env.log(&format!("relay pass failed: {error}"));
                env.sleep_ms(settings.idle_poll_min_ms).await;
            }
        }
    }
}

/// Finds the earliest due obligation and, if one is due now, claims and processes it.
pub async fn relay_once(
    env: &dyn Env,
    settings: &RelaySettings,
    planted_bug: Option<PlantedBug>,
) -> Result<Pass, DbError> {
    let now_ms = env.now_ms();
    let due = env
        .query(
            "SELECT operation_key, max(next_attempt_ms, coalesce(lease_expires_ms, 0)) AS due_ms \
             FROM outbox WHERE status = 'pending' ORDER BY due_ms, operation_key LIMIT 1",
            &[],
        )
        .await?;
    let Some(row) = due.first() else {
        return Ok(Pass::Idle { next_due_ms: None });
    };
    let due_ms = row.int(1)?;
    if due_ms > now_ms {
        return Ok(Pass::Idle {
            next_due_ms: Some(due_ms),
        });
    }
    let operation_key = row.text(0)?.to_owned();
    if let Some(claim) = claim(env, settings, &operation_key).await? {
        process(env, settings, claim, planted_bug).await?;
    }
    Ok(Pass::Worked)
}

/// Takes the lease on `operation_key` if it is still owed, due and unleased. One statement, so
/// the check and the write cannot be separated by another worker.
async fn claim(
    env: &dyn Env,
    settings: &RelaySettings,
    operation_key: &str,
) -> Result<Option<Claim>, DbError> {
    let now_ms = env.now_ms();
    let params = [
        text(env.process_id()),
        int(now_ms),
        int(now_ms + settings.lease_ms),
        text(operation_key),
    ];
    let rows = env
        .query(
            "UPDATE outbox SET lease_owner = ?1, lease_token = lease_token + 1, \
             lease_expires_ms = ?3, attempts = attempts + 1, \
             first_attempt_ms = coalesce(first_attempt_ms, ?2) \
             WHERE operation_key = ?4 AND status = 'pending' AND next_attempt_ms <= ?2 \
             AND coalesce(lease_expires_ms, 0) <= ?2 \
             RETURNING payload, lease_token, attempts, first_attempt_ms",
            &params,
        )
        .await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    Ok(Some(Claim {
        operation_key: operation_key.to_owned(),
        payload: row.text(0)?.to_owned(),
        lease_token: row.int(1)?,
        attempts: row.int(2)?,
        first_attempt_ms: row.int(3)?,
    }))
}

/// Calls the provider for a claimed obligation and records the outcome under the lease.
async fn process(
    env: &dyn Env,
    settings: &RelaySettings,
    claim: Claim,
    planted_bug: Option<PlantedBug>,
) -> Result<(), DbError> {
    let idempotency_key = if planted_bug == Some(PlantedBug::KeyPerAttempt) {
        format!("{}#{}", claim.operation_key, claim.attempts)
    } else {
        claim.operation_key.clone()
    };
    // The key may be forgotten once its age reaches the lifetime; the age is counted from the
    // first claim, which is no later than the provider's first sight of the key, and the call
    // timeout is added because the provider may act on the request any time until then.
    let key_may_be_forgotten =
        env.now_ms() + settings.call_timeout_ms >= claim.first_attempt_ms + settings.key_lifetime_ms;
    if key_may_be_forgotten && planted_bug != Some(PlantedBug::BlindRetryAfterExpiry) {
        let lookup = ProviderRequest::Lookup {
            idempotency_key: idempotency_key.clone(),
        };
        match call(env, settings, lookup).await {
            Ok(ProviderReply::Found { effect_id }) => return complete(env, &claim, &effect_id).await,
            // No effect was ever performed under this key, so sending it is the first effect.
            Ok(ProviderReply::NotFound) => {}
            Ok(other) => return retry_later(env, settings, &claim, &format!("{other:?}")).await,
            Err(error) => return retry_later(env, settings, &claim, &error.to_string()).await,
        }
    }
    let send = ProviderRequest::Send {
        idempotency_key,
        payload: claim.payload.clone(),
    };
    match call(env, settings, send).await {
        Ok(ProviderReply::Accepted { effect_id, .. }) => complete(env, &claim, &effect_id).await,
        Ok(ProviderReply::Rejected { status, reason }) => {
            bury(
                env,
                &claim,
                &format!("provider rejected the request with {status}: {reason}"),
            )
            .await
        }
        Ok(ProviderReply::Conflict) => {
            retry_later(
                env,
                settings,
                &claim,
                "provider is still processing this key (409)",
            )
            .await
        }
        Ok(other) => retry_later(env, settings, &claim, &format!("unexpected reply {other:?}")).await,
        Err(error) => retry_later(env, settings, &claim, &error.to_string()).await,
    }
}

async fn call(
    env: &dyn Env,
    settings: &RelaySettings,
    request: ProviderRequest,
) -> Result<ProviderReply, CallError> {
    let call = ProviderCall {
        request,
        timeout_ms: settings.call_timeout_ms,
    };
    env.call_provider(&call).await
}

/// Marks the obligation done, if this worker still holds its lease.
async fn complete(env: &dyn Env, claim: &Claim, effect_id: &str) -> Result<(), DbError> {
    let params = [
        text(effect_id),
        int(env.now_ms()),
        text(&claim.operation_key),
        int(claim.lease_token),
    ];
    fenced_write(
        env,
        claim,
        "UPDATE outbox SET status = 'done', provider_ref = ?1, completed_ms = ?2, \
         lease_expires_ms = NULL, last_error = NULL \
         WHERE operation_key = ?3 AND lease_token = ?4 AND status = 'pending'",
        &params,
    )
    .await
}

/// Releases the lease and schedules the next attempt after a transient failure.
async fn retry_later(
    env: &dyn Env,
    settings: &RelaySettings,
    claim: &Claim,
    error: &str,
) -> Result<(), DbError> {
    let params = [
        int(env.now_ms() + settings.backoff_ms(claim.attempts)),
        text(error),
        text(&claim.operation_key),
        int(claim.lease_token),
    ];
    fenced_write(
        env,
        claim,
        "UPDATE outbox SET next_attempt_ms = ?1, last_error = ?2, lease_expires_ms = NULL \
         WHERE operation_key = ?3 AND lease_token = ?4 AND status = 'pending'",
        &params,
    )
    .await
}

/// Moves the obligation to `dead` with a reason an operator can act on.
async fn bury(env: &dyn Env, claim: &Claim, reason: &str) -> Result<(), DbError> {
    let params = [text(reason), text(&claim.operation_key), int(claim.lease_token)];
    fenced_write(
        env,
        claim,
        "UPDATE outbox SET status = 'dead', dead_reason = ?1, lease_expires_ms = NULL \
         WHERE operation_key = ?2 AND lease_token = ?3 AND status = 'pending'",
        &params,
    )
    .await
}

/// How many times a fenced write is retried when the database is busy. The provider has already
/// answered, so giving up early only costs a redundant (deduplicated) call after the lease ends.
const FENCED_WRITE_TRIES: i64 = 4;

/// Runs a write that carries the lease token. Zero rows changed means another worker took the
/// lease over (or an operator moved the row): this worker's result is stale and is dropped.
async fn fenced_write(env: &dyn Env, claim: &Claim, sql: &str, params: &[Value]) -> Result<(), DbError> {
    let mut tries = 0;
    loop {
        tries += 1;
        match env.execute(sql, params).await {
            Ok(0) => {
                env.log(&format!(
                    "fenced out of {} (token {} is no longer current)",
                    claim.operation_key, claim.lease_token
                ));
                return Ok(());
            }
            Ok(_) => return Ok(()),
            Err(DbError::Busy) if tries < FENCED_WRITE_TRIES => env.sleep_ms(5 * tries).await,
            Err(error) => return Err(error),
        }
    }
}

/// Operator action: moves a dead obligation back to owed, keeping its key, payload and history.
/// Returns whether a dead obligation with this key existed.
pub async fn requeue(env: &dyn Env, operation_key: &str) -> Result<bool, DbError> {
    let changed = env
        .execute(
            "UPDATE outbox SET status = 'pending', next_attempt_ms = ?1, \
             last_error = 'requeued by operator after: ' || coalesce(dead_reason, ''), \
             dead_reason = NULL WHERE operation_key = ?2 AND status = 'dead'",
            &[int(env.now_ms()), text(operation_key)],
        )
        .await?;
    Ok(changed == 1)
}

/// Reads one obligation's status, for tools and tests: `(status, attempts, last_error)`.
pub async fn obligation_status(
    env: &dyn Env,
    operation_key: &str,
) -> Result<Option<(String, i64, Option<String>)>, DbError> {
    let rows: Vec<Row> = env
        .query(
            "SELECT status, attempts, last_error FROM outbox WHERE operation_key = ?1",
            &[text(operation_key)],
        )
        .await?;
    rows.first()
        .map(|row| {
            Ok((
                row.text(0)?.to_owned(),
                row.int(1)?,
                row.opt_text(2)?.map(str::to_owned),
            ))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_fourfold_and_stops_at_the_cap() {
        let settings = RelaySettings {
            backoff_base_ms: 5_000,
            backoff_cap_ms: 3_600_000,
            ..RelaySettings::default()
        };
        assert_eq!(settings.backoff_ms(1), 5_000);
        assert_eq!(settings.backoff_ms(2), 20_000);
        assert_eq!(settings.backoff_ms(3), 80_000);
        assert_eq!(settings.backoff_ms(9), 3_600_000);
        assert_eq!(settings.backoff_ms(1_000), 3_600_000);
    }
}
