//! The CI service's check-run relay: creates each owed check run at the provider once in effect.
//!
//! A worker claims the earliest due build with one compare-and-set statement that takes a fenced
//! lease (owner `Env::process_id`, a token that only grows, an expiry that outlasts a call and
//! the provider's processing bound), calls the provider outside any transaction with the build's
//! operation key as the idempotency key and its persisted payload as the body, and records the
//! outcome only where the row still carries its token. Any failure to get an answer, and a 409,
//! may leave a request working at the provider, so the key is not sent again before the
//! provider's processing bound has passed; other failures back off as the settings say. A
//! permanent rejection, or attempts spent, makes the build dead with a reason, from which the
//! operator's requeue brings it back. Once a build's first attempt is nearly as old as the
//! provider's key lifetime, the key is looked up before any further send, since a forgotten key
//! would make the send a second check run.
//!
//! The relay must not hold a transaction open across a call, rebuild the payload or mint another
//! key, send a key that may still be in flight, or mark a build done before the provider
//! confirmed it.

use commitgap_sim::commitgap::env::{DbError, Env, Value, int, text};
use commitgap_sim::commitgap::provider::{CallError, ProviderCall, ProviderReply, ProviderRequest};
use commitgap_sim::commitgap::relay::RelaySettings;

/// A build this worker holds the lease on.
struct Lease {
    key: String,
    payload: String,
    token: i64,
    attempts: i64,
    first_attempt_ms: i64,
}

/// Runs one worker until the process stops (the future is then dropped).
pub async fn run_worker(env: &dyn Env, settings: &RelaySettings) {
    let mut idle_poll_ms = settings.idle_poll_min_ms;
    loop {
        match work_once(env, settings).await {
            Ok(Pass::Worked) => idle_poll_ms = settings.idle_poll_min_ms,
            Ok(Pass::Idle { next_due_ms }) => {
                // Sleep until the next build is due, but wake at the poll interval for new ones,
                // which doubles while nothing comes.
                let until_due_ms = next_due_ms.map_or(i64::MAX, |due_ms| due_ms - env.now_ms());
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

/// What one pass of a worker did.
enum Pass {
    /// Claimed, or tried to claim, a build: look again at once.
    Worked,
    /// Nothing was due; the earliest owed build will be at `next_due_ms`, if there is one.
    Idle { next_due_ms: Option<i64> },
}

/// One pass: the earliest due build, claimed, reconciled, sent and recorded.
async fn work_once(env: &dyn Env, settings: &RelaySettings) -> Result<Pass, DbError> {
    let due = env
        .query(
            "SELECT operation_key, max(next_attempt_ms, coalesce(lease_expires_ms, 0)) AS due_ms \
             FROM builds WHERE status = 'owed' ORDER BY due_ms, operation_key LIMIT 1",
            &[],
        )
        .await?;
    let Some(row) = due.first() else {
        return Ok(Pass::Idle { next_due_ms: None });
    };
    let due_ms = row.int(1)?;
    if due_ms > env.now_ms() {
        return Ok(Pass::Idle {
            next_due_ms: Some(due_ms),
        });
    }
    if let Some(lease) = claim(env, settings, row.text(0)?).await?
        && reconcile(env, settings, &lease).await?
    {
        send(env, settings, &lease).await?;
    }
    Ok(Pass::Worked)
}

/// Takes the lease on build `key` if it is still owed, due and unleased, in one statement so
/// that no other worker's claim can come between the check and the write.
async fn claim(env: &dyn Env, settings: &RelaySettings, key: &str) -> Result<Option<Lease>, DbError> {
    let now_ms = env.now_ms();
    let rows = env
        .query(
            "UPDATE builds SET lease_token = lease_token + 1, lease_owner = ?1, lease_expires_ms = ?3, \
             attempts = attempts + 1, first_attempt_ms = coalesce(first_attempt_ms, ?2) \
             WHERE operation_key = ?4 AND status = 'owed' AND next_attempt_ms <= ?2 \
             AND coalesce(lease_expires_ms, 0) <= ?2 \
             RETURNING payload, lease_token, attempts, first_attempt_ms",
            &[
                text(env.process_id()),
                int(now_ms),
                int(now_ms + settings.lease_held_ms()),
                text(key),
            ],
        )
        .await?;
    let Some(row) = rows.first() else {
        return Ok(None);
    };
    Ok(Some(Lease {
        key: key.to_owned(),
        payload: row.text(0)?.to_owned(),
        token: row.int(1)?,
        attempts: row.int(2)?,
        first_attempt_ms: row.int(3)?,
    }))
}

/// Whether to send: true unless the provider may have forgotten the key, in which case the key
/// is looked up first; a check run it finds completes the build, and a key it never saw is sent
/// under a renewed lease. Counted from the first claim (no later than the provider's first sight
/// of the key), widened by a stall before the send, the call's timeout and the clocks' skew.
async fn reconcile(env: &dyn Env, settings: &RelaySettings, lease: &Lease) -> Result<bool, DbError> {
    let margin_ms = settings.stall_ms_max + settings.call_timeout_ms + settings.clock_skew_ms_max;
    if env.now_ms() + margin_ms < lease.first_attempt_ms + settings.key_lifetime_ms {
        return Ok(true);
    }
    let lookup = ProviderRequest::Lookup {
        idempotency_key: lease.key.clone(),
    };
    match call(env, settings, lookup).await {
        Ok(ProviderReply::Found { effect_id }) => {
            finish(env, lease, Outcome::Done(&effect_id)).await?;
        }
        Ok(ProviderReply::NotFound) => {
            let renewed = fenced(
                env,
                lease,
                "UPDATE builds SET lease_expires_ms = ?1 WHERE operation_key = ?2 AND lease_token = ?3 \
                 AND status = 'owed'",
                &[
                    int(env.now_ms() + settings.lease_held_ms()),
                    text(&lease.key),
                    int(lease.token),
                ],
            )
            .await?;
            return Ok(renewed);
        }
        // A lookup performs nothing, so a failed one needs no wait beyond the backoff.
        Ok(other) => {
            retry(env, settings, lease, &format!("lookup: {other:?}"), 0).await?;
        }
        Err(error) => {
            retry(env, settings, lease, &format!("lookup: {error}"), 0).await?;
        }
    }
    Ok(false)
}

/// Sends the persisted payload under the operation key, outside any transaction, and records
/// what came of it.
async fn send(env: &dyn Env, settings: &RelaySettings, lease: &Lease) -> Result<(), DbError> {
    let request = ProviderRequest::Send {
        idempotency_key: lease.key.clone(),
        payload: lease.payload.clone(),
    };
    let in_flight_ms = settings.provider_act_ms_max;
    match call(env, settings, request).await {
        Ok(ProviderReply::Accepted { effect_id, .. }) => finish(env, lease, Outcome::Done(&effect_id)).await,
        Ok(ProviderReply::Rejected { status, reason }) => {
            let reason = format!("the provider refused the check run with {status}: {reason}");
            finish(env, lease, Outcome::Dead(&reason)).await
        }
        Ok(ProviderReply::Conflict) => {
            retry(
                env,
                settings,
                lease,
                "the key is still in progress (409)",
                in_flight_ms,
            )
            .await
        }
        Ok(other) => retry(env, settings, lease, &format!("unexpected reply {other:?}"), 0).await,
        // No answer: the request may still be working at the provider.
        Err(error) => retry(env, settings, lease, &error.to_string(), in_flight_ms).await,
    }
    .map(drop)
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

/// How a build ends.
enum Outcome<'a> {
    /// The provider created the check run with this id.
    Done(&'a str),
    /// Given up, for this reason.
    Dead(&'a str),
}

/// Records how the build ended, if this worker still holds its lease.
async fn finish(env: &dyn Env, lease: &Lease, outcome: Outcome<'_>) -> Result<bool, DbError> {
    let (sql, detail) = match outcome {
        Outcome::Done(check_run_id) => (
            "UPDATE builds SET status = 'done', check_run_id = ?1, lease_expires_ms = NULL, last_error = NULL \
             WHERE operation_key = ?2 AND lease_token = ?3 AND status = 'owed'",
            check_run_id,
        ),
        Outcome::Dead(reason) => (
            "UPDATE builds SET status = 'dead', dead_reason = ?1, lease_expires_ms = NULL \
             WHERE operation_key = ?2 AND lease_token = ?3 AND status = 'owed'",
            reason,
        ),
    };
    fenced(
        env,
        lease,
        sql,
        &[text(detail), text(&lease.key), int(lease.token)],
    )
    .await
}

/// Gives the build back for another attempt after the backoff, and no sooner than
/// `wait_ms_min`; or, its attempts spent, gives it up.
async fn retry(
    env: &dyn Env,
    settings: &RelaySettings,
    lease: &Lease,
    error: &str,
    wait_ms_min: i64,
) -> Result<bool, DbError> {
    if lease.attempts >= settings.attempts_max {
        let reason = format!("gave up after {} attempts; last: {error}", lease.attempts);
        return finish(env, lease, Outcome::Dead(&reason)).await;
    }
    let wait_ms = settings.backoff_ms(lease.attempts).max(wait_ms_min);
    fenced(
        env,
        lease,
        "UPDATE builds SET next_attempt_ms = ?1, last_error = ?2, lease_expires_ms = NULL \
         WHERE operation_key = ?3 AND lease_token = ?4 AND status = 'owed'",
        &[
            int(env.now_ms().saturating_add(wait_ms)),
            text(error),
            text(&lease.key),
            int(lease.token),
        ],
    )
    .await
}

/// Runs a write about `lease`'s build whose `WHERE` names the token. Returns whether the lease
/// still held: no row changed means another worker took the build over (or the operator moved
/// it), and this worker's news is stale. The provider has answered already, so a busy database
/// is tried a few times before the answer is dropped (a later worker asks again, under the same
/// key).
async fn fenced(env: &dyn Env, lease: &Lease, sql: &str, params: &[Value]) -> Result<bool, DbError> {
    for wait_ms in [5, 10, 15] {
        match env.execute(sql, params).await {
            Err(DbError::Busy) => env.sleep_ms(wait_ms).await,
            outcome => return held(env, lease, outcome),
        }
    }
    let outcome = env.execute(sql, params).await;
    held(env, lease, outcome)
}

fn held(env: &dyn Env, lease: &Lease, outcome: Result<usize, DbError>) -> Result<bool, DbError> {
    let changed = outcome?;
    if changed == 0 {
        env.log(&format!("fenced out of {} (token {})", lease.key, lease.token));
    }
    Ok(changed > 0)
}

/// The operator's recovery after an incident: every dead build owed again, with a fresh budget
/// of attempts, its key and payload kept. A busy database is waited out: an operator's tool has
/// nobody to hand the error to.
pub async fn requeue_dead(env: &dyn Env) -> Result<usize, DbError> {
    let mut wait_ms = 100;
    loop {
        let requeued = env
            .execute(
                "UPDATE builds SET status = 'owed', attempts = 0, next_attempt_ms = ?1, \
                 last_error = 'requeued after: ' || coalesce(dead_reason, ''), dead_reason = NULL \
                 WHERE status = 'dead'",
                &[int(env.now_ms())],
            )
            .await;
        match requeued {
            Err(DbError::Busy) if wait_ms <= 2_000 => env.sleep_ms(wait_ms).await,
            outcome => return outcome,
        }
        wait_ms += 100;
    }
}
