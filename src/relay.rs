//! The outbox relay: delivers each owed obligation to the provider exactly once in effect.
//!
//! A worker claims one due obligation with a single compare-and-set statement that takes a lease
//! (owner, a token that only grows, an expiry), calls the provider outside any transaction with
//! the persisted key and the persisted payload, and records the outcome only if the row still
//! carries its token, so a worker whose lease was taken over cannot overwrite the new holder's
//! work. Transient failures (timeouts, 5xx, 409) back off, up to a bounded number of attempts;
//! permanent rejections and exhausted attempts move the obligation to `dead` with a reason, from
//! which [`requeue`] brings it back. Once an obligation's first attempt is older than the
//! provider's key lifetime (less the call timeout and the clocks' possible skew), the worker looks
//! the key up before sending again, because a forgotten key would turn the retry into a second
//! effect.
//!
//! The relay must not hold a transaction open across a provider call, must not rebuild the payload
//! or mint a new key, and must not mark an obligation done before the provider confirmed the
//! effect.

use crate::env::{DbError, Env, Row, Value, int, text};
use crate::planted::PlantedBug;
use crate::provider::{CallError, FulfillmentPayload, ProviderCall, ProviderReply, ProviderRequest};

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
    /// Attempts after which a still-failing obligation is given up as dead (an operator can
    /// requeue it).
    pub attempts_max: i64,
    /// How far the clocks of two workers may disagree; widens the reconciliation margin so a
    /// worker whose clock runs behind still looks a key up in time.
    pub clock_skew_ms_max: i64,
    /// The longest a worker may stall (a GC pause, a stopped VM) between deciding to send and
    /// sending. No check made before a stall can protect a request sent after it, so this widens
    /// the reconciliation margin too; a deployment must keep real stalls below it.
    pub stall_ms_max: i64,
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
            attempts_max: 30,
            clock_skew_ms_max: 300_000,
            stall_ms_max: 600_000,
        }
    }
}

impl RelaySettings {
    /// The delay before attempt `attempts + 1`, after `attempts` failed attempts.
    pub fn backoff_ms(&self, attempts: i64) -> i64 {
        debug_assert!(self.backoff_base_ms > 0);
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
    last_error: Option<String>,
}

/// The settings a worker actually runs with: the given ones, unless a planted bug overrides them.
fn effective(settings: &RelaySettings, planted_bug: Option<PlantedBug>) -> RelaySettings {
    let mut effective = settings.clone();
    if planted_bug == Some(PlantedBug::ShortLease) {
        // PLANTED BUG short-lease: a lease a tenth of the call timeout and no heartbeat, so a slow
        // call outlives it and a second worker claims the obligation mid-call.
        effective.lease_ms = (settings.call_timeout_ms / 10).max(1);
    }
    effective
}

/// Runs a relay worker forever. It only returns if the future is dropped (a crash or shutdown).
pub async fn run_worker(env: &dyn Env, settings: &RelaySettings, planted_bug: Option<PlantedBug>) {
    let settings = &effective(settings, planted_bug);
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
             RETURNING payload, lease_token, attempts, first_attempt_ms, last_error",
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
        last_error: row.opt_text(4)?.map(str::to_owned),
    }))
}

/// Calls the provider for a claimed obligation and records the outcome under the lease.
async fn process(
    env: &dyn Env,
    settings: &RelaySettings,
    claim: Claim,
    planted_bug: Option<PlantedBug>,
) -> Result<(), DbError> {
    let idempotency_key = match planted_bug {
        // PLANTED BUG key-per-attempt: a fresh key on every attempt.
        Some(PlantedBug::KeyPerAttempt) => format!("{}#{}", claim.operation_key, claim.attempts),
        // PLANTED BUG new-key-after-error: a fresh key once an attempt has failed.
        Some(PlantedBug::NewKeyAfterError) if claim.last_error.is_some() => {
            format!("{}#retry{}", claim.operation_key, claim.attempts)
        }
        _ => claim.operation_key.clone(),
    };
    if planted_bug == Some(PlantedBug::MarkSentBeforeCall) {
        // PLANTED BUG mark-sent-before-call: the row says done before the provider has acted.
        complete(env, &claim, "pending-confirmation", planted_bug).await?;
    }
    // The key may be forgotten once its age reaches the lifetime; the age is counted from the
    // first claim, which is no later than the provider's first sight of the key. The worker may
    // stall before the request leaves, the provider may act on it until the call times out, and
    // this worker's clock may run behind the clock that stamped the first attempt: all three
    // widen the margin.
    let margin_ms = settings.stall_ms_max + settings.call_timeout_ms + settings.clock_skew_ms_max;
    let key_may_be_forgotten = env.now_ms() + margin_ms >= claim.first_attempt_ms + settings.key_lifetime_ms;
    if key_may_be_forgotten && planted_bug != Some(PlantedBug::BlindRetryAfterExpiry) {
        let lookup = ProviderRequest::Lookup {
            idempotency_key: idempotency_key.clone(),
        };
        match call(env, settings, lookup).await {
            Ok(ProviderReply::Found { effect_id }) => {
                return complete(env, &claim, &effect_id, planted_bug).await;
            }
            // No effect was ever performed under this key, so sending it is the first effect. The
            // lookup used up part of the lease; extend it (a heartbeat, fenced by the token) so the
            // send runs under a full lease.
            Ok(ProviderReply::NotFound) => {
                if !extend_lease(env, settings, &claim).await? {
                    return Ok(());
                }
            }
            Ok(other) => return retry_later(env, settings, &claim, &format!("lookup: {other:?}")).await,
            Err(error) => return retry_later(env, settings, &claim, &format!("lookup: {error}")).await,
        }
    }
    let payload = if planted_bug == Some(PlantedBug::RebuildPayload) {
        rebuild_payload(env, &claim.payload).await?
    } else {
        claim.payload.clone()
    };
    let send = ProviderRequest::Send {
        idempotency_key,
        payload,
    };
    match call(env, settings, send).await {
        Ok(ProviderReply::Accepted { effect_id, .. }) => complete(env, &claim, &effect_id, planted_bug).await,
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

/// Extends this worker's lease by a full lease from now, if it still holds it. Returns whether it
/// does.
async fn extend_lease(env: &dyn Env, settings: &RelaySettings, claim: &Claim) -> Result<bool, DbError> {
    let changed = env
        .execute(
            "UPDATE outbox SET lease_expires_ms = ?1 WHERE operation_key = ?2 AND lease_token = ?3 AND status = 'pending'",
            &[int(env.now_ms() + settings.lease_ms), text(&claim.operation_key), int(claim.lease_token)],
        )
        .await?;
    Ok(changed == 1)
}

/// PLANTED BUG rebuild-payload: the request body is rebuilt from the order as it is now, not the
/// snapshot persisted with the obligation.
async fn rebuild_payload(env: &dyn Env, persisted: &str) -> Result<String, DbError> {
    let mut payload = FulfillmentPayload::parse(persisted).map_err(DbError::Other)?;
    let rows = env
        .query(
            "SELECT amount_cents FROM orders WHERE tenant = ?1 AND id = ?2",
            &[text(&payload.tenant), text(&payload.order)],
        )
        .await?;
    if let Some(row) = rows.first() {
        payload.amount_cents = row.int(0)?;
    }
    Ok(payload.to_json())
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
async fn complete(
    env: &dyn Env,
    claim: &Claim,
    effect_id: &str,
    planted_bug: Option<PlantedBug>,
) -> Result<(), DbError> {
    let params = [
        text(effect_id),
        int(env.now_ms()),
        text(&claim.operation_key),
        int(claim.lease_token),
    ];
    let sql = if planted_bug == Some(PlantedBug::UnfencedCompletion) {
        // PLANTED BUG unfenced-completion: no token check, so a worker whose lease was taken over
        // still records its outcome over the new holder's.
        "UPDATE outbox SET status = 'done', provider_ref = ?1, completed_ms = ?2, \
         lease_expires_ms = NULL, last_error = NULL \
         WHERE operation_key = ?3 AND ?4 = ?4 AND status = 'pending'"
    } else {
        "UPDATE outbox SET status = 'done', provider_ref = ?1, completed_ms = ?2, \
         lease_expires_ms = NULL, last_error = NULL \
         WHERE operation_key = ?3 AND lease_token = ?4 AND status = 'pending'"
    };
    fenced_write(env, claim, sql, &params).await
}

/// Releases the lease and schedules the next attempt after a transient failure, or gives the
/// obligation up once its attempts are spent.
async fn retry_later(
    env: &dyn Env,
    settings: &RelaySettings,
    claim: &Claim,
    error: &str,
) -> Result<(), DbError> {
    if claim.attempts >= settings.attempts_max {
        let reason = format!("gave up after {} attempts; last error: {error}", claim.attempts);
        return bury(env, claim, &reason).await;
    }
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

/// Operator action: moves a dead obligation back to owed, keeping its key, payload and history,
/// with a fresh budget of attempts. Returns whether a dead obligation with this key existed.
pub async fn requeue(env: &dyn Env, operation_key: &str) -> Result<bool, DbError> {
    let changed = env
        .execute(
            "UPDATE outbox SET status = 'pending', next_attempt_ms = ?1, attempts = 0, \
             last_error = 'requeued by operator after: ' || coalesce(dead_reason, ''), \
             dead_reason = NULL WHERE operation_key = ?2 AND status = 'dead'",
            &[int(env.now_ms()), text(operation_key)],
        )
        .await?;
    Ok(changed == 1)
}

/// Operator action: requeues every dead obligation, oldest first. Returns how many it requeued.
/// A busy database is waited out (an operator's tool has nobody to hand the error to).
pub async fn requeue_all_dead(env: &dyn Env) -> Result<usize, DbError> {
    let mut tries = 0;
    loop {
        tries += 1;
        match requeue_all_dead_once(env).await {
            Err(DbError::Busy) if tries < OPERATOR_TRIES => env.sleep_ms(100 * tries).await,
            outcome => return outcome,
        }
    }
}

/// How many times an operator action is tried while the database is busy.
const OPERATOR_TRIES: i64 = 20;

async fn requeue_all_dead_once(env: &dyn Env) -> Result<usize, DbError> {
    let dead = env
        .query(
            "SELECT operation_key FROM outbox WHERE status = 'dead' ORDER BY created_ms, operation_key",
            &[],
        )
        .await?;
    let mut requeued = 0;
    for row in &dead {
        if requeue(env, row.text(0)?).await? {
            requeued += 1;
        }
    }
    Ok(requeued)
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
