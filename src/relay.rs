//! The outbox relay: delivers each owed obligation to the provider exactly once in effect.
//!
//! A worker claims one due obligation with a single compare-and-set statement that takes a lease
//! (owner, a token that only grows, an expiry), calls the provider outside any transaction with
//! the persisted key and the persisted payload, and records the outcome only if the row still
//! carries its token, so a worker whose lease was taken over cannot overwrite the new holder's
//! work. Transient failures (timeouts, 5xx, 409) back off, up to a bounded number of attempts; a
//! rate limit (429) waits as long as the provider's `Retry-After` says and spends no attempt;
//! after a timeout or a 409 the key is left alone for the provider's processing bound, and every
//! lease outlasts that bound, so two requests with one key are never at the provider at once (a
//! provider that executes concurrent requests twice would perform both); permanent rejections and exhausted attempts move the obligation to `dead` with a reason, from
//! which [`requeue`] brings it back. Once an obligation's first attempt is older than the
//! provider's key lifetime (less the call timeout and the clocks' possible skew), the worker looks
//! the key up before sending again, because a forgotten key would turn the retry into a second
//! effect.
//!
//! The relay is written as named steps, the default methods of [`RelaySteps`]: claim, choose the
//! key, reconcile with the provider, send, complete, with the lease they run under. [`run_worker`]
//! runs them as they are; [`run_worker_with`] runs a variant that overrides some of them, so that
//! a variant reads as a small change against this module. The steps run over the tables
//! [`RelaySteps::relay_tables`] declares ([`crate::tables`]): the reference's `outbox` unless a
//! system keeps its obligations elsewhere, which then gets every step without writing one. What a
//! step writes about its claim's outcome ([`bury`], [`retry_later`], [`retry_not_before`],
//! [`wait_out_rate_limit`], [`extend_lease`], [`fenced_write`]) is public, for a variant that
//! changes a step around it.
//!
//! The relay must not hold a transaction open across a provider call, must not rebuild the payload
//! or mint a new key, must not send a key while an earlier request with it may still be in flight,
//! and must not mark an obligation done before the provider confirmed the effect.

use crate::env::{DbError, Env, Row, Value, int, text};
use crate::provider::{CallError, ProviderCall, ProviderReply, ProviderRequest};
use crate::reference::Reference;
use crate::tables::Tables;

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
    /// The longest the provider may go on working on a request after receiving it (its documented
    /// processing bound). A request that timed out or met a 409 may still be in flight for that
    /// long, so the relay sends its key again no sooner, and a lease outlasts it; together they
    /// keep two requests with one key from ever being at the provider at once, which a provider
    /// that executes concurrent requests twice would turn into two effects. 0 (the value in seed
    /// files written before this setting existed) leaves retries to the backoff alone.
    #[serde(default)]
    pub provider_act_ms_max: i64,
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
            provider_act_ms_max: 40_000,
        }
    }
}

impl RelaySettings {
    /// The lease a worker holds: the configured lease, and at least the provider's processing
    /// bound and a call timeout more, so that a worker that dies mid-call leaves its request time
    /// to finish at the provider before another worker may send the key.
    pub fn lease_held_ms(&self) -> i64 {
        self.lease_ms
            .max(self.provider_act_ms_max.saturating_add(self.call_timeout_ms))
    }

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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub operation_key: String,
    /// The payload persisted with the obligation.
    pub payload: String,
    /// The fencing token of this worker's lease; every write about the outcome carries it.
    pub lease_token: i64,
    /// Attempts so far, this one included.
    pub attempts: i64,
    /// When the obligation was first claimed: no later than the provider's first sight of its key.
    pub first_attempt_ms: i64,
    /// Why the previous attempt failed, if one did.
    pub last_error: Option<String>,
}

impl Claim {
    /// The claim a claiming statement returned for `operation_key`: its row is `payload,
    /// lease_token, attempts, first_attempt_ms, last_error`, in that order.
    pub fn from_row(operation_key: &str, row: &Row) -> Result<Claim, DbError> {
        Ok(Claim {
            operation_key: operation_key.to_owned(),
            payload: row.text(0)?.to_owned(),
            lease_token: row.int(1)?,
            attempts: row.int(2)?,
            first_attempt_ms: row.int(3)?,
            last_error: row.opt_text(4)?.map(str::to_owned),
        })
    }
}

/// What reconciling a claim with the provider decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reconciled {
    /// Go on and send the request.
    Send,
    /// The claim is settled (completed, rescheduled or lost to another worker): send nothing.
    Settled,
}

/// Runs a relay worker with the reference's steps forever. It only returns if the future is
/// dropped (a crash or shutdown).
pub async fn run_worker(env: &dyn Env, settings: &RelaySettings) {
    run_worker_with(&Reference, env, settings).await
}

/// Runs a relay worker with `steps` forever. It only returns if the future is dropped.
pub async fn run_worker_with<S: RelaySteps>(steps: &S, env: &dyn Env, settings: &RelaySettings) {
    let mut idle_poll_ms = settings.idle_poll_min_ms;
    loop {
        match relay_once_with(steps, env, settings).await {
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

/// One pass of the reference worker: finds the earliest due obligation and, if one is due now,
/// claims and processes it.
pub async fn relay_once(env: &dyn Env, settings: &RelaySettings) -> Result<Pass, DbError> {
    relay_once_with(&Reference, env, settings).await
}

/// One pass of a worker with `steps`: finds the earliest due obligation and, if one is due now,
/// claims it, chooses the key, reconciles, sends and records the outcome.
pub async fn relay_once_with<S: RelaySteps>(
    steps: &S,
    env: &dyn Env,
    settings: &RelaySettings,
) -> Result<Pass, DbError> {
    let now_ms = env.now_ms();
    let Some((operation_key, due_ms)) = steps.relay_tables().next_due(env).await? else {
        return Ok(Pass::Idle { next_due_ms: None });
    };
    if due_ms > now_ms {
        return Ok(Pass::Idle {
            next_due_ms: Some(due_ms),
        });
    }
    let Some(claim) = steps.claim(env, settings, &operation_key).await? else {
        return Ok(Pass::Worked);
    };
    let idempotency_key = steps.idempotency_key(&claim);
    if steps.reconcile(env, settings, &claim, &idempotency_key).await? == Reconciled::Send {
        let payload = steps.payload(env, &claim).await?;
        steps
            .send(env, settings, &claim, idempotency_key, payload)
            .await?;
    }
    Ok(Pass::Worked)
}

/// The relay's steps, in the order [`relay_once_with`] runs them. Every default method is the
/// reference; a variant overrides the steps it changes, and may call a step on [`Reference`] for
/// the reference's behaviour around its change.
// The futures run on the one thread of their `Env` (which is not `Send` either), so the
// auto-trait bounds `async fn` in a public trait cannot express are never needed.
#[allow(async_fn_in_trait)]
pub trait RelaySteps {
    /// Where the obligations live, and the pattern's statements over them: the reference's
    /// `outbox` unless overridden. Every other default step runs over these.
    fn relay_tables(&self) -> &Tables {
        Tables::reference()
    }

    /// How long a claim lasts: [`RelaySettings::lease_held_ms`], the configured lease (which
    /// exceeds the call timeout by a margin) stretched to outlast the provider's processing.
    fn lease_ms(&self, settings: &RelaySettings) -> i64 {
        settings.lease_held_ms()
    }

    /// How long to leave a key alone after a send whose outcome is unknown (a timeout) or that
    /// met another request with the key in progress (a 409): the provider may go on acting on
    /// either that long.
    fn in_flight_wait_ms(&self, settings: &RelaySettings) -> i64 {
        settings.provider_act_ms_max
    }

    /// Takes the lease on `operation_key` if it is still owed, due and unleased. One statement, so
    /// the check and the write cannot be separated by another worker.
    async fn claim(
        &self,
        env: &dyn Env,
        settings: &RelaySettings,
        operation_key: &str,
    ) -> Result<Option<Claim>, DbError> {
        let now_ms = env.now_ms();
        let lease_until_ms = now_ms + self.lease_ms(settings);
        let row = self
            .relay_tables()
            .claim(env, env.process_id(), now_ms, lease_until_ms, operation_key)
            .await?;
        row.map(|row| Claim::from_row(operation_key, &row)).transpose()
    }

    /// The idempotency key the provider sees: the persisted operation key, the same on every
    /// attempt, so the provider recognises a retry.
    fn idempotency_key(&self, claim: &Claim) -> String {
        claim.operation_key.clone()
    }

    /// Looks the key up before sending again once the provider may have forgotten it, because a
    /// forgotten key would turn the retry into a second effect. A key it still knows completes
    /// the obligation without a send.
    async fn reconcile(
        &self,
        env: &dyn Env,
        settings: &RelaySettings,
        claim: &Claim,
        idempotency_key: &str,
    ) -> Result<Reconciled, DbError> {
        // The key may be forgotten once its age reaches the lifetime; the age is counted from the
        // first claim, which is no later than the provider's first sight of the key. The worker
        // may stall before the request leaves, the provider may act on it until the call times
        // out, and this worker's clock may run behind the clock that stamped the first attempt:
        // all three widen the margin.
        let margin_ms = settings.stall_ms_max + settings.call_timeout_ms + settings.clock_skew_ms_max;
        if env.now_ms() + margin_ms < claim.first_attempt_ms + settings.key_lifetime_ms {
            return Ok(Reconciled::Send);
        }
        let lookup = ProviderRequest::Lookup {
            idempotency_key: idempotency_key.to_owned(),
        };
        match call(env, settings, lookup).await {
            Ok(ProviderReply::Found { effect_id }) => self.complete(env, claim, &effect_id).await?,
            // No effect was ever performed under this key, so sending it is the first effect. The
            // lookup used up part of the lease; extend it (a heartbeat, fenced by the token) so the
            // send runs under a full lease.
            Ok(ProviderReply::NotFound) => {
                if extend_lease(env, self.relay_tables(), self.lease_ms(settings), claim).await? {
                    return Ok(Reconciled::Send);
                }
            }
            Ok(ProviderReply::RateLimited { retry_after_ms }) => {
                wait_out_rate_limit(env, self.relay_tables(), settings, claim, retry_after_ms).await?;
            }
            Ok(other) => {
                let error = format!("lookup: {other:?}");
                retry_later(env, self.relay_tables(), settings, claim, &error).await?;
            }
            Err(error) => {
                let error = format!("lookup: {error}");
                retry_later(env, self.relay_tables(), settings, claim, &error).await?;
            }
        }
        Ok(Reconciled::Settled)
    }

    /// The request body: the payload persisted with the obligation, never one rebuilt from the
    /// current state.
    async fn payload(&self, env: &dyn Env, claim: &Claim) -> Result<String, DbError> {
        let _ = env;
        Ok(claim.payload.clone())
    }

    /// Calls the provider, outside any transaction, and records the outcome under the lease
    /// ([`RelaySteps::record_reply`]).
    async fn send(
        &self,
        env: &dyn Env,
        settings: &RelaySettings,
        claim: &Claim,
        idempotency_key: String,
        payload: String,
    ) -> Result<(), DbError> {
        let send = ProviderRequest::Send {
            idempotency_key,
            payload,
        };
        let reply = call(env, settings, send).await;
        self.record_reply(env, settings, claim, reply).await
    }

    /// Records, under the lease, what became of a send: complete on acceptance, bury on a
    /// permanent rejection, leave the key alone for the provider's processing bound after a 409
    /// or a timeout (the request may still be working), wait out a rate limit without spending
    /// the attempt, and retry later on anything else.
    async fn record_reply(
        &self,
        env: &dyn Env,
        settings: &RelaySettings,
        claim: &Claim,
        reply: Result<ProviderReply, CallError>,
    ) -> Result<(), DbError> {
        let in_flight_wait_ms = self.in_flight_wait_ms(settings);
        let tables = self.relay_tables();
        match reply {
            Ok(ProviderReply::Accepted { effect_id, .. }) => self.complete(env, claim, &effect_id).await,
            Ok(ProviderReply::Rejected { status, reason }) => {
                let reason = format!("provider rejected the request with {status}: {reason}");
                bury(env, tables, claim, &reason).await
            }
            Ok(ProviderReply::Conflict) => {
                let error = "provider is still processing this key (409)";
                retry_not_before(env, tables, settings, claim, error, in_flight_wait_ms).await
            }
            Ok(ProviderReply::RateLimited { retry_after_ms }) => {
                wait_out_rate_limit(env, tables, settings, claim, retry_after_ms).await
            }
            Ok(other) => {
                let error = format!("unexpected reply {other:?}");
                retry_later(env, tables, settings, claim, &error).await
            }
            Err(error @ CallError::Timeout) => {
                let error = error.to_string();
                retry_not_before(env, tables, settings, claim, &error, in_flight_wait_ms).await
            }
            Err(error) => retry_later(env, tables, settings, claim, &error.to_string()).await,
        }
    }

    /// Marks the obligation done with the provider's `effect_id`, if this worker still holds its
    /// lease.
    async fn complete(&self, env: &dyn Env, claim: &Claim, effect_id: &str) -> Result<(), DbError> {
        let params = [
            text(effect_id),
            int(env.now_ms()),
            text(&claim.operation_key),
            int(claim.lease_token),
        ];
        fenced_write(env, claim, self.relay_tables().complete_sql(), &params).await
    }
}

impl RelaySteps for Reference {}

/// The reference's relay over a system's own tables: every step as the reference takes it, with
/// the statements written for `self`.
impl RelaySteps for Tables {
    fn relay_tables(&self) -> &Tables {
        self
    }
}

/// Extends this worker's lease on `claim` in `tables` to `lease_ms` from now (a heartbeat,
/// fenced by the token), if it still holds it. Returns whether it does.
pub async fn extend_lease(
    env: &dyn Env,
    tables: &Tables,
    lease_ms: i64,
    claim: &Claim,
) -> Result<bool, DbError> {
    let params = [
        int(env.now_ms() + lease_ms),
        text(&claim.operation_key),
        int(claim.lease_token),
    ];
    let changed = env.execute(tables.extend_lease_sql(), &params).await?;
    Ok(changed == 1)
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

/// Releases the lease on `claim` in `tables` and schedules the next attempt after a transient
/// failure, after the backoff its attempts call for, or gives the obligation up once its
/// attempts are spent.
pub async fn retry_later(
    env: &dyn Env,
    tables: &Tables,
    settings: &RelaySettings,
    claim: &Claim,
    error: &str,
) -> Result<(), DbError> {
    retry_not_before(env, tables, settings, claim, error, 0).await
}

/// [`retry_later`], with the next attempt no sooner than `wait_ms_min` from now, whatever the
/// backoff says.
pub async fn retry_not_before(
    env: &dyn Env,
    tables: &Tables,
    settings: &RelaySettings,
    claim: &Claim,
    error: &str,
    wait_ms_min: i64,
) -> Result<(), DbError> {
    if claim.attempts >= settings.attempts_max {
        let reason = format!("gave up after {} attempts; last error: {error}", claim.attempts);
        return bury(env, tables, claim, &reason).await;
    }
    let wait_ms = settings.backoff_ms(claim.attempts).max(wait_ms_min);
    let params = [
        int(env.now_ms().saturating_add(wait_ms)),
        text(error),
        text(&claim.operation_key),
        int(claim.lease_token),
    ];
    fenced_write(env, claim, tables.retry_sql(), &params).await
}

/// Releases the lease on `claim` in `tables` after the provider answered 429: the next attempt
/// waits until the provider said it may come (`retry_after_ms`, at most the backoff's cap), or
/// for the backoff when it said nothing, and the attempt is given back, since the provider
/// refused it before looking at it. A limit, however long, never spends the attempts that bury
/// an obligation; only the provider's own answers do.
pub async fn wait_out_rate_limit(
    env: &dyn Env,
    tables: &Tables,
    settings: &RelaySettings,
    claim: &Claim,
    retry_after_ms: Option<i64>,
) -> Result<(), DbError> {
    let wait_ms = retry_after_ms
        .map_or_else(|| settings.backoff_ms(claim.attempts), |ms| ms.max(0))
        .min(settings.backoff_cap_ms.max(1));
    let error = match retry_after_ms {
        Some(ms) => format!("provider is rate limiting (429, retry after {ms} ms)"),
        None => "provider is rate limiting (429)".to_owned(),
    };
    let params = [
        int(env.now_ms().saturating_add(wait_ms)),
        text(&error),
        text(&claim.operation_key),
        int(claim.lease_token),
    ];
    fenced_write(env, claim, tables.rate_limited_sql(), &params).await
}

/// Moves the obligation of `claim` in `tables` to dead with a reason an operator can act on,
/// if this worker still holds its lease.
pub async fn bury(env: &dyn Env, tables: &Tables, claim: &Claim, reason: &str) -> Result<(), DbError> {
    let params = [text(reason), text(&claim.operation_key), int(claim.lease_token)];
    fenced_write(env, claim, tables.bury_sql(), &params).await
}

/// How many times a fenced write is retried when the database is busy. The provider has already
/// answered, so giving up early only costs a redundant (deduplicated) call after the lease ends.
const FENCED_WRITE_TRIES: i64 = 4;

/// Runs a write about `claim`'s outcome, which carries the lease token in its `WHERE` clause.
/// Zero rows changed means another worker took the lease over (or an operator moved the row):
/// this worker's result is stale and is dropped. A busy database is tried four times in all,
/// waiting 5 ms longer after each busy answer (5, 10, 15 ms).
pub async fn fenced_write(env: &dyn Env, claim: &Claim, sql: &str, params: &[Value]) -> Result<(), DbError> {
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

/// Operator action: moves a dead obligation of the reference's `outbox` back to owed, keeping
/// its key, payload and history, with a fresh budget of attempts. Returns whether a dead
/// obligation with this key existed. A system with an outbox of its own calls
/// [`Tables::requeue`] on its tables.
pub async fn requeue(env: &dyn Env, operation_key: &str) -> Result<bool, DbError> {
    Tables::reference().requeue(env, operation_key).await
}

/// Operator action: requeues every dead obligation of the reference's `outbox`, oldest first.
/// Returns how many it requeued. A busy database is waited out (an operator's tool has nobody
/// to hand the error to). See [`Tables::requeue_all_dead`] for an outbox of one's own.
pub async fn requeue_all_dead(env: &dyn Env) -> Result<usize, DbError> {
    Tables::reference().requeue_all_dead(env).await
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::env::LocalBoxFuture;

    /// An `Env` at a fixed time whose provider knows no key and whose database changes one row
    /// per statement, after answering "busy" to the first `busy_statements`: just enough to see
    /// which requests, statements and sleeps a step makes.
    struct FixedEnv {
        now_ms: i64,
        busy_statements: Cell<u32>,
        statements: Cell<u32>,
        sleeps_ms: RefCell<Vec<i64>>,
        requests: RefCell<Vec<ProviderRequest>>,
    }

    impl FixedEnv {
        fn at(now_ms: i64) -> FixedEnv {
            FixedEnv {
                now_ms,
                busy_statements: Cell::new(0),
                statements: Cell::new(0),
                sleeps_ms: RefCell::new(Vec::new()),
                requests: RefCell::new(Vec::new()),
            }
        }
    }

    impl Env for FixedEnv {
        fn process_id(&self) -> &str {
            "relay-1#1"
        }
        fn now_ms(&self) -> i64 {
            self.now_ms
        }
        fn execute<'a>(&'a self, _: &'a str, _: &'a [Value]) -> LocalBoxFuture<'a, Result<usize, DbError>> {
            self.statements.set(self.statements.get() + 1);
            assert!(self.statements.get() <= 100, "a step that never stops trying");
            let busy = self.busy_statements.get();
            self.busy_statements.set(busy.saturating_sub(1));
            Box::pin(async move { if busy > 0 { Err(DbError::Busy) } else { Ok(1) } })
        }
        fn query<'a>(&'a self, _: &'a str, _: &'a [Value]) -> LocalBoxFuture<'a, Result<Vec<Row>, DbError>> {
            Box::pin(async { Ok(Vec::new()) })
        }
        fn sleep_ms(&self, duration_ms: i64) -> LocalBoxFuture<'_, ()> {
            self.sleeps_ms.borrow_mut().push(duration_ms);
            Box::pin(async {})
        }
        fn call_provider<'a>(
            &'a self,
            call: &'a ProviderCall,
        ) -> LocalBoxFuture<'a, Result<ProviderReply, CallError>> {
            self.requests.borrow_mut().push(call.request.clone());
            Box::pin(async { Ok(ProviderReply::NotFound) })
        }
        fn log(&self, _: &str) {}
        fn setting(&self, _: &str) -> Option<String> {
            None
        }
    }

    fn claim(first_attempt_ms: i64) -> Claim {
        Claim {
            operation_key: "ship-1".to_owned(),
            payload: "{}".to_owned(),
            lease_token: 1,
            attempts: 2,
            first_attempt_ms,
            last_error: None,
        }
    }

    /// Runs a future of `FixedEnv`, which never has to wait, to its end.
    fn finish<T>(future: impl Future<Output = T>) -> T {
        let mut future = std::pin::pin!(future);
        match future.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(value) => value,
            Poll::Pending => panic!("FixedEnv never makes a step wait"),
        }
    }

    /// Whether the reference reconciles `claim`, first claimed at `first_attempt_ms`, by looking
    /// its key up at `now_ms`.
    fn looks_up(settings: &RelaySettings, first_attempt_ms: i64, now_ms: i64) -> bool {
        let env = FixedEnv::at(now_ms);
        let claim = claim(first_attempt_ms);
        let reconciled = finish(Reference.reconcile(&env, settings, &claim, "ship-1")).unwrap();
        // A key the provider does not know is sent either way; only the lookup differs.
        assert_eq!(reconciled, Reconciled::Send);
        let requests = env.requests.into_inner();
        assert!(requests.len() <= 1, "{requests:?}");
        requests
            .iter()
            .any(|request| matches!(request, ProviderRequest::Lookup { .. }))
    }

    #[test]
    fn a_key_is_looked_up_from_the_first_moment_a_late_request_could_meet_it_forgotten() {
        // A request decided at `now` may leave after a stall, be acted on until the call times
        // out, and be stamped by a clock that runs behind the one that stamped the first attempt.
        // From the moment all three together reach the key's lifetime, the key must be looked up
        // before it is sent; before that moment a lookup is a provider call wasted. The simulation
        // rarely lines up a stall at its maximum, a provider acting at the very end of the
        // timeout, the largest skew and a key forgotten on the millisecond, so this pins the
        // boundary itself.
        let settings = RelaySettings::default();
        let margin_ms = settings.stall_ms_max + settings.call_timeout_ms + settings.clock_skew_ms_max;
        let first_attempt_ms = 7_000_000;
        let first_unsafe_ms = first_attempt_ms + settings.key_lifetime_ms - margin_ms;
        assert!(!looks_up(&settings, first_attempt_ms, first_unsafe_ms - 1));
        assert!(looks_up(&settings, first_attempt_ms, first_unsafe_ms));
        assert!(looks_up(
            &settings,
            first_attempt_ms,
            first_attempt_ms + settings.key_lifetime_ms
        ));
        assert!(!looks_up(&settings, first_attempt_ms, first_attempt_ms));
    }

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

    #[test]
    fn a_fenced_write_waits_out_a_briefly_busy_database_and_gives_up_on_a_locked_one() {
        // The provider has answered; the outcome should reach the row if the database is free
        // within a few milliseconds, and a worker should not spin on a database that stays locked.
        let sql = "UPDATE outbox SET status = 'done' WHERE operation_key = ?1 AND lease_token = ?2";
        let env = FixedEnv::at(0);
        env.busy_statements.set(3);
        assert_eq!(finish(fenced_write(&env, &claim(0), sql, &[])), Ok(()));
        assert_eq!(env.statements.get(), 4);
        assert_eq!(*env.sleeps_ms.borrow(), [5, 10, 15]);

        let env = FixedEnv::at(0);
        env.busy_statements.set(u32::MAX);
        assert_eq!(
            finish(fenced_write(&env, &claim(0), sql, &[])),
            Err(DbError::Busy)
        );
        assert_eq!(env.statements.get(), FENCED_WRITE_TRIES as u32);
    }
}
