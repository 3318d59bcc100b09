//! The outbox relay: ships each owed fulfillment request to the provider, once in effect.
//!
//! A worker claims the next due request with one compare-and-set `UPDATE` that takes a lease (its
//! name, a token that only grows, an expiry), calls the provider with no transaction open, with
//! the persisted key and body, and records the outcome with a write that names its token, so a
//! worker whose lease was taken over writes nothing. A shipment confirmed is `shipped`; a
//! permanent refusal is `abandoned` with the provider's reason; anything transient backs off and
//! is tried again with the same key. After a request whose outcome is unknown (a timeout, a lost
//! connection, a 408 or 5xx that a gateway may have given while the provider still worked) or a
//! 409, the key is left alone for the provider's processing bound, so two
//! requests with one key are never at the provider at once; a 429 waits as long as Retry-After
//! says and costs no attempt. Once a key's first attempt is old enough that the provider may have
//! forgotten it by the time a retry lands, the worker looks it up before sending again, because a
//! forgotten key would turn the retry into a second shipment.
//!
//! The relay must not hold a transaction across a provider call, rebuild a body or mint a key
//! (but see [`crate::planted`]), or mark a request shipped before the provider confirmed it.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use crate::db;
use crate::planted::PlantedBug;
use crate::provider::{Provider, Reply};
use crate::settings::RelaySettings;

/// One relay worker: its connection, the provider and its settings.
pub struct Relay {
    connection: Connection,
    provider: Provider,
    settings: RelaySettings,
    worker: String,
    planted: Option<PlantedBug>,
}

/// A request this worker holds the lease on.
#[derive(Debug, Clone)]
struct Claim {
    key: String,
    body: String,
    token: i64,
    /// Attempts so far, this one included.
    attempts: i64,
    first_claimed_ms: i64,
}

/// What one pass achieved.
enum Pass {
    /// Claimed (or lost the race to claim) a request: look again at once.
    Worked,
    /// Nothing due; the earliest owed request is due in this many milliseconds, if any is owed.
    Idle(Option<i64>),
}

impl Relay {
    /// A worker named `worker` over the database at `database`.
    pub fn new(
        database: &Path,
        provider: Provider,
        settings: RelaySettings,
        worker: String,
        planted: Option<PlantedBug>,
    ) -> Result<Relay, String> {
        let connection = db::open(database, &db::process_name(&worker))
            .map_err(|error| format!("cannot open the database: {error}"))?;
        Ok(Relay {
            connection,
            provider,
            settings,
            worker,
            planted,
        })
    }

    /// Works until `stop` is set, then returns after the step in hand: a provider call is never
    /// abandoned half way, so its outcome is recorded before the process ends.
    pub fn run(&self, stop: &AtomicBool) {
        let settings = &self.settings;
        eprintln!(
            "{}: relaying with a lease of {} ms",
            self.worker,
            settings.lease_held_ms()
        );
        let mut idle_ms = settings.idle_poll_min_ms;
        while !stop.load(Ordering::SeqCst) {
            match self.pass() {
                Ok(Pass::Worked) => idle_ms = settings.idle_poll_min_ms,
                Ok(Pass::Idle(due_in_ms)) => {
                    nap(stop, idle_ms.min(due_in_ms.unwrap_or(i64::MAX)).max(1));
                    idle_ms = (idle_ms * 2).min(settings.idle_poll_max_ms);
                }
                Err(error) => {
                    eprintln!("{}: pass failed: {error}", self.worker);
                    nap(stop, settings.idle_poll_max_ms);
                }
            }
        }
        eprintln!("{}: stopped", self.worker);
    }

    /// Finds the request due first and, if it is due now, claims and works it.
    fn pass(&self) -> rusqlite::Result<Pass> {
        let now_ms = db::now_ms();
        // Due means past its retry time and not under a live lease.
        let next: Option<(String, i64)> = self
            .connection
            .query_row(
                "SELECT request_key, max(retry_at_ms, coalesce(claim_expires_ms, 0)) AS due_ms \
                 FROM fulfillment_requests WHERE delivery_state = 'owed' \
                 ORDER BY due_ms, request_key LIMIT 1",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        let Some((key, due_ms)) = next else {
            return Ok(Pass::Idle(None));
        };
        if due_ms > now_ms {
            return Ok(Pass::Idle(Some(due_ms - now_ms)));
        }
        if let Some(claim) = self.claim(&key, now_ms)? {
            self.work(&claim)?;
        }
        Ok(Pass::Worked)
    }

    /// Takes the lease on `key` if it is still owed, due and unleased at `now_ms`: the check and
    /// the write are one statement, so no other worker's claim can come between them.
    fn claim(&self, key: &str, now_ms: i64) -> rusqlite::Result<Option<Claim>> {
        self.connection
            .query_row(
                "UPDATE fulfillment_requests SET claimed_by = ?1, claim_token = claim_token + 1, \
                 claim_expires_ms = ?2 + ?3, attempt_count = attempt_count + 1, \
                 first_claimed_ms = coalesce(first_claimed_ms, ?2) \
                 WHERE request_key = ?4 AND delivery_state = 'owed' AND retry_at_ms <= ?2 \
                 AND coalesce(claim_expires_ms, 0) <= ?2 \
                 RETURNING request_json, claim_token, attempt_count, first_claimed_ms",
                params![self.worker, now_ms, self.settings.lease_held_ms(), key],
                |row| {
                    Ok(Claim {
                        key: key.to_owned(),
                        body: row.get(0)?,
                        token: row.get(1)?,
                        attempts: row.get(2)?,
                        first_claimed_ms: row.get(3)?,
                    })
                },
            )
            .optional()
    }

    /// Reconciles an old key with the provider if it must, sends the request, and records what
    /// came of it, all under the lease.
    fn work(&self, claim: &Claim) -> rusqlite::Result<()> {
        if self
            .settings
            .key_may_be_forgotten(claim.first_claimed_ms, db::now_ms())
        {
            // No earlier request with the key can still be acting now: every path that leaves
            // one in flight keeps the key alone past the provider's processing bound (the
            // in-flight wait, or a lease that outlasts a stall and the provider's work), so a 404
            // here means never shipped.
            let lookup = self.provider.look_up(&claim.key);
            eprintln!(
                "{}: {} was first tried {} ms ago, so it was looked up first: {lookup:?}",
                self.worker,
                claim.key,
                db::now_ms() - claim.first_claimed_ms
            );
            match lookup {
                Reply::Shipped { effect_id } => return self.shipped(claim, &effect_id),
                Reply::NotFound => {
                    if !self.extend(claim)? {
                        return Ok(());
                    }
                }
                Reply::RateLimited { after_ms } => return self.rate_limited(claim, after_ms),
                other => return self.retry(claim, &format!("lookup: {other:?}"), 0),
            }
        }
        let key = match self.planted {
            Some(PlantedBug::FreshKeyPerAttempt) => format!("{}#attempt-{}", claim.key, claim.token),
            None => claim.key.clone(),
        };
        let reply = self.provider.ship(&key, &claim.body);
        self.record(claim, reply)
    }

    /// Records, under the lease, what the provider said to a shipment.
    fn record(&self, claim: &Claim, reply: Reply) -> rusqlite::Result<()> {
        let in_flight_ms = self.settings.in_flight_wait_ms();
        match reply {
            Reply::Shipped { effect_id } => self.shipped(claim, &effect_id),
            Reply::Refused { status, reason } => {
                let reason = format!("the provider refused the request with {status}: {reason}");
                self.abandon(claim, &reason)
            }
            Reply::InProgress => self.retry(
                claim,
                "a request with this key is in progress (409)",
                in_flight_ms,
            ),
            Reply::RateLimited { after_ms } => self.rate_limited(claim, after_ms),
            // A 408, or a gateway's 502 or 504, may stand in front of a request that still acts.
            Reply::TryLater(why) => self.retry(claim, &why, in_flight_ms),
            Reply::Unknown(why) => self.retry(claim, &format!("no answer: {why}"), in_flight_ms),
            Reply::NotFound => self.retry(claim, "a 404 to a shipment", 0),
        }
    }

    /// The provider confirmed the shipment.
    fn shipped(&self, claim: &Claim, effect_id: &str) -> rusqlite::Result<()> {
        self.fenced(
            claim,
            "UPDATE fulfillment_requests SET delivery_state = 'shipped', shipment_ref = ?3, \
             finished_ms = ?4, claim_expires_ms = NULL, last_error = NULL \
             WHERE request_key = ?1 AND claim_token = ?2 AND delivery_state = 'owed'",
            params![claim.key, claim.token, effect_id, db::now_ms()],
        )
    }

    /// Gives the request up for an operator, with the reason.
    fn abandon(&self, claim: &Claim, reason: &str) -> rusqlite::Result<()> {
        eprintln!("{}: abandoning {}: {reason}", self.worker, claim.key);
        self.fenced(
            claim,
            "UPDATE fulfillment_requests SET delivery_state = 'abandoned', abandon_reason = ?3, \
             claim_expires_ms = NULL \
             WHERE request_key = ?1 AND claim_token = ?2 AND delivery_state = 'owed'",
            params![claim.key, claim.token, reason],
        )
    }

    /// Releases the lease and schedules the next attempt after the backoff, and no sooner than
    /// `wait_ms_min`; abandons the request once its attempts are spent.
    fn retry(&self, claim: &Claim, error: &str, wait_ms_min: i64) -> rusqlite::Result<()> {
        if claim.attempts >= self.settings.attempts_max {
            let reason = format!("gave up after {} attempts; the last: {error}", claim.attempts);
            return self.abandon(claim, &reason);
        }
        let wait_ms = self.settings.backoff_ms(claim.attempts).max(wait_ms_min);
        eprintln!(
            "{}: {} attempt {} failed ({error}); next in {wait_ms} ms",
            self.worker, claim.key, claim.attempts
        );
        self.fenced(
            claim,
            "UPDATE fulfillment_requests SET retry_at_ms = ?3, last_error = ?4, claim_expires_ms = NULL \
             WHERE request_key = ?1 AND claim_token = ?2 AND delivery_state = 'owed'",
            params![
                claim.key,
                claim.token,
                db::now_ms().saturating_add(wait_ms),
                error
            ],
        )
    }

    /// Waits out a 429 for as long as the provider asked (the backoff when it did not say), and
    /// gives the attempt back: the provider refused it before looking at it.
    fn rate_limited(&self, claim: &Claim, after_ms: Option<i64>) -> rusqlite::Result<()> {
        let wait_ms = after_ms.unwrap_or_else(|| self.settings.backoff_ms(claim.attempts));
        self.fenced(
            claim,
            "UPDATE fulfillment_requests SET retry_at_ms = ?3, last_error = ?4, claim_expires_ms = NULL, \
             attempt_count = attempt_count - 1 \
             WHERE request_key = ?1 AND claim_token = ?2 AND delivery_state = 'owed'",
            params![
                claim.key,
                claim.token,
                db::now_ms().saturating_add(wait_ms),
                format!("rate limited for {wait_ms} ms (429)")
            ],
        )
    }

    /// Extends the lease to a full one from now (after a lookup used part of it), if this worker
    /// still holds it. Returns whether it does.
    fn extend(&self, claim: &Claim) -> rusqlite::Result<bool> {
        let until_ms = db::now_ms().saturating_add(self.settings.lease_held_ms());
        let changed = self.connection.execute(
            "UPDATE fulfillment_requests SET claim_expires_ms = ?3 \
             WHERE request_key = ?1 AND claim_token = ?2 AND delivery_state = 'owed'",
            params![claim.key, claim.token, until_ms],
        )?;
        Ok(changed == 1)
    }

    /// Runs a write about `claim`'s outcome, which names its token. No row changed means another
    /// worker took the lease over, or an operator moved the request: this outcome is stale and
    /// is dropped (the new holder will find the same shipment under the same key).
    fn fenced(
        &self,
        claim: &Claim,
        sql: &str,
        values: impl rusqlite::Params + Clone,
    ) -> rusqlite::Result<()> {
        // The provider has answered; a briefly busy database should not lose that answer.
        let mut tries = 0;
        loop {
            tries += 1;
            match self.connection.execute(sql, values.clone()) {
                Ok(0) => {
                    eprintln!(
                        "{}: fenced out of {} (token {} is no longer current)",
                        self.worker, claim.key, claim.token
                    );
                    return Ok(());
                }
                Ok(_) => return Ok(()),
                Err(error) if db::is_busy(&error) && tries < 3 => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(error) => return Err(error),
            }
        }
    }
}

/// Sleeps `ms`, waking early when `stop` is set.
fn nap(stop: &AtomicBool, ms: i64) {
    let mut left_ms = ms.max(0);
    while left_ms > 0 && !stop.load(Ordering::SeqCst) {
        let slice_ms = left_ms.min(25);
        std::thread::sleep(Duration::from_millis(slice_ms.unsigned_abs()));
        left_ms -= slice_ms;
    }
}
