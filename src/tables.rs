//! Where a system keeps the pattern's rows, and the pattern's statements over them, written once.
//!
//! Whatever a system calls its tables, the webhook pattern does the same things to two of them:
//! it records a receipt per event and tells a duplicate from an id reused with another body, it
//! purges old receipts, it enqueues an obligation keyed by its operation, and its relay finds the
//! next due obligation, claims it under a fenced lease, extends the lease, completes it, backs it
//! off (or waits out a rate limit without spending an attempt), buries it with a reason, and lets
//! an operator requeue it. A system declares where those
//! rows live ([`ReceiptTable`], [`OutboxTable`]: a table name, its column names, the outbox's
//! status values) and [`Tables`] writes every statement from the declaration once; the
//! receiver's and relay's steps ([`crate::receiver::ReceiverSteps`],
//! [`crate::relay::RelaySteps`], [`crate::receiver::receive_business`]) run them. The reference's
//! tables are [`ReceiptTable::REFERENCE`] and [`OutboxTable::REFERENCE`], and the statements
//! written for them are the reference's own, text for text.
//!
//! What a declaration needs from the schema: a receipt table with a `UNIQUE` constraint on
//! `(account, event_id)`, and an outbox with one on its operation key, since the inserts resolve
//! conflicts on them ([`Tables::check_schema`] prepares every statement against a schema and
//! says which one does not fit). Names are written into SQL as declared, so
//! [`Tables::new`] accepts plain identifiers only; they come from the system's code, never from
//! input.

use std::sync::{Arc, LazyLock};

use crate::env::{DbError, Env, Row, int, text};

/// Where a system records that it processed an event: one row per `(account, event_id)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiptTable {
    /// The table's name.
    pub table: &'static str,
    /// The column of the sender's account the event came from.
    pub account: &'static str,
    /// The column of the event's id, unique within its account.
    pub event_id: &'static str,
    /// The column of when the receipt was written, in epoch milliseconds: what the purge
    /// compares with its cutoff.
    pub received_ms: &'static str,
    /// The column of a digest of the event's body, which tells an id reused with another body
    /// (refused) from a duplicate (acknowledged); `None`: every known id is a duplicate.
    pub body_digest: Option<&'static str>,
}

impl ReceiptTable {
    /// The reference's `receipts` table.
    pub const REFERENCE: ReceiptTable = ReceiptTable {
        table: "receipts",
        account: "account",
        event_id: "event_id",
        received_ms: "received_ms",
        body_digest: Some("body_digest"),
    };
}

/// Where a system keeps its obligations: one row per operation owed to the provider, with its
/// immutable payload, a fenced lease and its history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutboxTable {
    /// The table's name.
    pub table: &'static str,
    /// The column of the operation key, which is also the idempotency key the provider sees.
    pub operation_key: &'static str,
    /// The column of the payload sent on every attempt.
    pub payload: &'static str,
    /// The column of the obligation's status.
    pub status: &'static str,
    /// The status value of an obligation still owed.
    pub owed: &'static str,
    /// The status value of an obligation the provider confirmed.
    pub done: &'static str,
    /// The status value of an obligation given up, waiting for an operator.
    pub dead: &'static str,
    /// The column counting attempts (claims) since the obligation was last owed afresh.
    pub attempts: &'static str,
    /// The column of the lease holder's process id.
    pub lease_owner: &'static str,
    /// The column of the fencing token, which only grows.
    pub lease_token: &'static str,
    /// The column of when the lease runs out, in epoch milliseconds; `NULL` when none is held.
    pub lease_expires_ms: &'static str,
    /// The column of the earliest time of the next attempt, in epoch milliseconds.
    pub next_attempt_ms: &'static str,
    /// The column of when the obligation was first claimed: no later than the provider's first
    /// sight of its key, which the lookup before a late retry counts from.
    pub first_attempt_ms: &'static str,
    /// The column of why the last attempt failed.
    pub last_error: &'static str,
    /// The column of why the obligation was given up; it may be the `last_error` column.
    pub dead_reason: &'static str,
    /// The column of the provider's id for the effect, written on completion.
    pub effect_id: &'static str,
    /// The column of when the obligation became owed, which orders the operator's requeue;
    /// `None` leaves that to the operation key.
    pub created_ms: Option<&'static str>,
    /// The column of when the obligation was completed, if the table keeps it.
    pub completed_ms: Option<&'static str>,
}

impl OutboxTable {
    /// The reference's `outbox` table.
    pub const REFERENCE: OutboxTable = OutboxTable {
        table: "outbox",
        operation_key: "operation_key",
        payload: "payload",
        status: "status",
        owed: "pending",
        done: "done",
        dead: "dead",
        attempts: "attempts",
        lease_owner: "lease_owner",
        lease_token: "lease_token",
        lease_expires_ms: "lease_expires_ms",
        next_attempt_ms: "next_attempt_ms",
        first_attempt_ms: "first_attempt_ms",
        last_error: "last_error",
        dead_reason: "dead_reason",
        effect_id: "provider_ref",
        created_ms: Some("created_ms"),
        completed_ms: Some("completed_ms"),
    };
}

/// A system's receipt and outbox tables with the pattern's statements written for them. Cheap
/// to clone (the statements are shared), so a system may hand out copies freely.
#[derive(Debug, Clone)]
pub struct Tables {
    /// Where the receipts live.
    pub receipts: ReceiptTable,
    /// Where the obligations live.
    pub outbox: OutboxTable,
    sql: Arc<Statements>,
}

/// The pattern's statements over one pair of tables. Parameters are numbered as the reference
/// numbers them, so one call binds the same values whatever the tables are called.
#[derive(Debug)]
struct Statements {
    /// `(account, event_id, received_ms[, digest])` -> one row if new.
    insert_receipt: String,
    /// `(account, event_id)` -> the stored digest.
    receipt_digest: Option<String>,
    /// `(older_than_ms)` -> rows deleted.
    purge: String,
    /// `(operation_key, payload, created_ms)`.
    enqueue: String,
    /// `()` -> the earliest owed key and when it is due.
    due: String,
    /// `(owner, now_ms, lease_until_ms, key)` -> payload, token, attempts, first attempt, last error.
    claim: String,
    /// `(lease_until_ms, key, token)`.
    extend_lease: String,
    /// `(effect_id, now_ms, key, token)`.
    complete: String,
    /// `(next_attempt_ms, error, key, token)`.
    retry: String,
    /// `(next_attempt_ms, error, key, token)`, giving the attempt back.
    rate_limited: String,
    /// `(reason, key, token)`.
    bury: String,
    /// `()` -> every dead key, oldest first.
    dead_keys: String,
    /// `(now_ms, key)`.
    requeue: String,
}

impl Tables {
    /// The pattern's statements over `receipts` and `outbox`. Call [`Tables::check`] (the
    /// simulator does, before any run) to hear about a name that is not a plain identifier.
    pub fn new(receipts: ReceiptTable, outbox: OutboxTable) -> Tables {
        Tables {
            receipts,
            outbox,
            sql: Arc::new(Statements::new(&receipts, &outbox)),
        }
    }

    /// The reference's tables, shared.
    pub fn reference() -> &'static Tables {
        static REFERENCE: LazyLock<Tables> =
            LazyLock::new(|| Tables::new(ReceiptTable::REFERENCE, OutboxTable::REFERENCE));
        &REFERENCE
    }

    /// Checks that every name is a plain SQL identifier and every status value plain text, and
    /// that the three statuses differ. The error names the field and says what is allowed.
    pub fn check(&self) -> Result<(), String> {
        let r = &self.receipts;
        let o = &self.outbox;
        let names = [
            ("receipts.table", Some(r.table)),
            ("receipts.account", Some(r.account)),
            ("receipts.event_id", Some(r.event_id)),
            ("receipts.received_ms", Some(r.received_ms)),
            ("receipts.body_digest", r.body_digest),
            ("outbox.table", Some(o.table)),
            ("outbox.operation_key", Some(o.operation_key)),
            ("outbox.payload", Some(o.payload)),
            ("outbox.status", Some(o.status)),
            ("outbox.attempts", Some(o.attempts)),
            ("outbox.lease_owner", Some(o.lease_owner)),
            ("outbox.lease_token", Some(o.lease_token)),
            ("outbox.lease_expires_ms", Some(o.lease_expires_ms)),
            ("outbox.next_attempt_ms", Some(o.next_attempt_ms)),
            ("outbox.first_attempt_ms", Some(o.first_attempt_ms)),
            ("outbox.last_error", Some(o.last_error)),
            ("outbox.dead_reason", Some(o.dead_reason)),
            ("outbox.effect_id", Some(o.effect_id)),
            ("outbox.created_ms", o.created_ms),
            ("outbox.completed_ms", o.completed_ms),
        ];
        for (field, name) in names {
            let Some(name) = name else { continue };
            let mut chars = name.chars();
            let plain = chars
                .next()
                .is_some_and(|first| first.is_ascii_alphabetic() || first == '_')
                && chars.all(|rest| rest.is_ascii_alphanumeric() || rest == '_');
            if !plain {
                return Err(format!(
                    "{field} is {name:?}; a table or column name here is a plain identifier (letters, digits and _, not starting with a digit)"
                ));
            }
        }
        for (field, value) in [
            ("outbox.owed", o.owed),
            ("outbox.done", o.done),
            ("outbox.dead", o.dead),
        ] {
            if value.is_empty() || value.contains('\'') || value.chars().any(char::is_control) {
                return Err(format!(
                    "{field} is {value:?}; a status value is non-empty text without quotes or control characters"
                ));
            }
        }
        if o.owed == o.done || o.owed == o.dead || o.done == o.dead {
            return Err(format!(
                "outbox statuses {:?}, {:?} and {:?} must differ",
                o.owed, o.done, o.dead
            ));
        }
        Ok(())
    }

    /// Prepares every statement on `connection`, whose schema must hold the declared tables:
    /// the first one that does not fit (a missing column, no unique constraint for an insert's
    /// conflict target), with SQLite's reason.
    pub fn check_schema(&self, connection: &rusqlite::Connection) -> Result<(), String> {
        self.check()?;
        let s = &self.sql;
        let statements = [
            Some(&s.insert_receipt),
            s.receipt_digest.as_ref(),
            Some(&s.purge),
            Some(&s.enqueue),
            Some(&s.due),
            Some(&s.claim),
            Some(&s.extend_lease),
            Some(&s.complete),
            Some(&s.retry),
            Some(&s.rate_limited),
            Some(&s.bury),
            Some(&s.dead_keys),
            Some(&s.requeue),
        ];
        for sql in statements.into_iter().flatten() {
            connection
                .prepare(sql)
                .map_err(|error| format!("the declared tables do not fit the schema: {error}; in `{sql}`"))?;
        }
        Ok(())
    }

    /// Inserts the receipt of `(account, event_id)` received now, with `digest` of its body,
    /// unless the event already has one; returns whether it was new.
    pub async fn insert_receipt(
        &self,
        env: &dyn Env,
        account: &str,
        event_id: &str,
        digest: &str,
    ) -> Result<bool, DbError> {
        let mut params = vec![text(account), text(event_id), int(env.now_ms())];
        if self.receipts.body_digest.is_some() {
            params.push(text(digest));
        }
        Ok(env.execute(&self.sql.insert_receipt, &params).await? == 1)
    }

    /// Whether the receipt stored for `(account, event_id)` was made from another body than the
    /// one of `digest`: a reused id. False without a digest column, or without a receipt.
    pub async fn receipt_digest_differs(
        &self,
        env: &dyn Env,
        account: &str,
        event_id: &str,
        digest: &str,
    ) -> Result<bool, DbError> {
        let Some(sql) = &self.sql.receipt_digest else {
            return Ok(false);
        };
        let stored = env.query(sql, &[text(account), text(event_id)]).await?;
        match stored.first() {
            Some(row) => Ok(row.text(0)? != digest),
            None => Ok(false),
        }
    }

    /// Deletes every receipt received before `older_than_ms` and returns how many went. Nothing
    /// but receipts: business state is what keeps a late redelivery from owing work twice.
    pub async fn purge_receipts(&self, env: &dyn Env, older_than_ms: i64) -> Result<usize, DbError> {
        env.execute(&self.sql.purge, &[int(older_than_ms)]).await
    }

    /// Inserts an owed obligation inside the caller's transaction, due at once. A conflict on
    /// the key keeps the first row: the payload of an operation never changes.
    pub async fn enqueue(
        &self,
        env: &dyn Env,
        operation_key: &str,
        payload: &str,
        created_ms: i64,
    ) -> Result<(), DbError> {
        env.execute(
            &self.sql.enqueue,
            &[text(operation_key), text(payload), int(created_ms)],
        )
        .await?;
        Ok(())
    }

    /// The owed obligation due first (its next attempt and its lease both considered), as
    /// `(operation key, due at)`; `None` when nothing is owed.
    pub async fn next_due(&self, env: &dyn Env) -> Result<Option<(String, i64)>, DbError> {
        let rows = env.query(&self.sql.due, &[]).await?;
        rows.first()
            .map(|row| Ok((row.text(0)?.to_owned(), row.int(1)?)))
            .transpose()
    }

    /// Takes the lease on `operation_key` for `owner` until `lease_until_ms`, if the obligation
    /// is still owed, due at `now_ms` and unleased, in one statement, so that no other worker's
    /// claim comes between the check and the write. Returns the claimed row: payload, token,
    /// attempts, first attempt, last error, in that order.
    pub async fn claim(
        &self,
        env: &dyn Env,
        owner: &str,
        now_ms: i64,
        lease_until_ms: i64,
        operation_key: &str,
    ) -> Result<Option<Row>, DbError> {
        let params = [text(owner), int(now_ms), int(lease_until_ms), text(operation_key)];
        let rows = env.query(&self.sql.claim, &params).await?;
        Ok(rows.into_iter().next())
    }

    /// Every statement the pattern runs on these tables, each with its name (`claim`,
    /// `complete`, ...): what a tool that reasons about statements (SQL mutants) knows them by,
    /// whatever the tables are called.
    pub fn statements(&self) -> Vec<(&'static str, &str)> {
        let s = &self.sql;
        let mut named = vec![("insert-receipt", s.insert_receipt.as_str())];
        if let Some(digest) = &s.receipt_digest {
            named.push(("receipt-digest", digest));
        }
        named.extend([
            ("purge", s.purge.as_str()),
            ("enqueue", &s.enqueue),
            ("due", &s.due),
            ("claim", &s.claim),
            ("extend-lease", &s.extend_lease),
            ("complete", &s.complete),
            ("retry", &s.retry),
            ("rate-limited", &s.rate_limited),
            ("bury", &s.bury),
            ("dead-keys", &s.dead_keys),
            ("requeue", &s.requeue),
        ]);
        named
    }

    /// The statement that extends a lease: `(lease_until_ms, key, token)`.
    pub fn extend_lease_sql(&self) -> &str {
        &self.sql.extend_lease
    }

    /// The statement that completes an obligation: `(effect_id, now_ms, key, token)`.
    pub fn complete_sql(&self) -> &str {
        &self.sql.complete
    }

    /// The statement that schedules the next attempt: `(next_attempt_ms, error, key, token)`.
    pub fn retry_sql(&self) -> &str {
        &self.sql.retry
    }

    /// The statement that schedules the next attempt after a rate limit and gives the attempt
    /// back, since the provider refused it before looking at it: `(next_attempt_ms, error, key,
    /// token)`.
    pub fn rate_limited_sql(&self) -> &str {
        &self.sql.rate_limited
    }

    /// The statement that buries an obligation: `(reason, key, token)`.
    pub fn bury_sql(&self) -> &str {
        &self.sql.bury
    }

    /// Operator action: moves the dead obligation of `operation_key` back to owed, keeping its
    /// key, payload and history, with a fresh budget of attempts. Returns whether it was dead.
    pub async fn requeue(&self, env: &dyn Env, operation_key: &str) -> Result<bool, DbError> {
        let changed = env
            .execute(&self.sql.requeue, &[int(env.now_ms()), text(operation_key)])
            .await?;
        Ok(changed == 1)
    }

    /// Operator action: requeues every dead obligation, oldest first, and returns how many. A
    /// busy database is waited out (an operator's tool has nobody to hand the error to).
    pub async fn requeue_all_dead(&self, env: &dyn Env) -> Result<usize, DbError> {
        let mut tries = 0;
        loop {
            tries += 1;
            match self.requeue_all_dead_once(env).await {
                Err(DbError::Busy) if tries < OPERATOR_TRIES => env.sleep_ms(100 * tries).await,
                outcome => return outcome,
            }
        }
    }

    async fn requeue_all_dead_once(&self, env: &dyn Env) -> Result<usize, DbError> {
        let dead = env.query(&self.sql.dead_keys, &[]).await?;
        let mut requeued = 0;
        for row in &dead {
            if self.requeue(env, row.text(0)?).await? {
                requeued += 1;
            }
        }
        Ok(requeued)
    }
}

/// How many times an operator action is tried while the database is busy. Each try already waits
/// out the connection's busy timeout (rusqlite's is 5 s), so three give a lock about 15 s to
/// clear before the operator is told, rather than a tool that seems to hang.
const OPERATOR_TRIES: i64 = 3;

impl Statements {
    fn new(r: &ReceiptTable, o: &OutboxTable) -> Statements {
        let (insert_receipt, receipt_digest, purge) = Statements::of_receipts(r);
        let (outbox, key, payload, status) = (o.table, o.operation_key, o.payload, o.status);
        let (owed, done, dead) = (o.owed, o.done, o.dead);
        let (owner, token, expires) = (o.lease_owner, o.lease_token, o.lease_expires_ms);
        let (next, attempts, first) = (o.next_attempt_ms, o.attempts, o.first_attempt_ms);
        let (last_error, dead_reason, effect) = (o.last_error, o.dead_reason, o.effect_id);
        let enqueue = match o.created_ms {
            Some(created) => format!(
                "INSERT INTO {outbox} ({key}, {payload}, {status}, {next}, {created}) \
                 VALUES (?1, ?2, '{owed}', ?3, ?3) ON CONFLICT ({key}) DO NOTHING"
            ),
            None => format!(
                "INSERT INTO {outbox} ({key}, {payload}, {status}, {next}) \
                 VALUES (?1, ?2, '{owed}', ?3) ON CONFLICT ({key}) DO NOTHING"
            ),
        };
        let completed = o
            .completed_ms
            .map_or_else(String::new, |completed| format!("{completed} = ?2, "));
        // One column for both the last error and the dead reason: the requeue keeps the reason
        // as the last error, and must not then clear it.
        let requeue_reason = if dead_reason == last_error {
            format!("{last_error} = 'requeued by operator after: ' || coalesce({dead_reason}, '')")
        } else {
            format!(
                "{last_error} = 'requeued by operator after: ' || coalesce({dead_reason}, ''), \
                 {dead_reason} = NULL"
            )
        };
        let oldest_first = o
            .created_ms
            .map_or_else(|| key.to_owned(), |created| format!("{created}, {key}"));
        let held = format!("WHERE {key} = ?3 AND {token} = ?4 AND {status} = '{owed}'");
        Statements {
            insert_receipt,
            receipt_digest,
            purge,
            enqueue,
            due: format!(
                "SELECT {key}, max({next}, coalesce({expires}, 0)) AS due_ms \
                 FROM {outbox} WHERE {status} = '{owed}' ORDER BY due_ms, {key} LIMIT 1"
            ),
            claim: format!(
                "UPDATE {outbox} SET {owner} = ?1, {token} = {token} + 1, \
                 {expires} = ?3, {attempts} = {attempts} + 1, \
                 {first} = coalesce({first}, ?2) \
                 WHERE {key} = ?4 AND {status} = '{owed}' AND {next} <= ?2 \
                 AND coalesce({expires}, 0) <= ?2 \
                 RETURNING {payload}, {token}, {attempts}, {first}, {last_error}"
            ),
            extend_lease: format!(
                "UPDATE {outbox} SET {expires} = ?1 WHERE {key} = ?2 AND {token} = ?3 AND {status} = '{owed}'"
            ),
            complete: format!(
                "UPDATE {outbox} SET {status} = '{done}', {effect} = ?1, {completed}\
                 {expires} = NULL, {last_error} = NULL \
                 {held}"
            ),
            retry: format!(
                "UPDATE {outbox} SET {next} = ?1, {last_error} = ?2, {expires} = NULL \
                 {held}"
            ),
            rate_limited: format!(
                "UPDATE {outbox} SET {next} = ?1, {last_error} = ?2, {expires} = NULL, \
                 {attempts} = {attempts} - 1 {held}"
            ),
            bury: format!(
                "UPDATE {outbox} SET {status} = '{dead}', {dead_reason} = ?1, {expires} = NULL \
                 WHERE {key} = ?2 AND {token} = ?3 AND {status} = '{owed}'"
            ),
            dead_keys: format!(
                "SELECT {key} FROM {outbox} WHERE {status} = '{dead}' ORDER BY {oldest_first}"
            ),
            requeue: format!(
                "UPDATE {outbox} SET {status} = '{owed}', {next} = ?1, {attempts} = 0, \
                 {requeue_reason} WHERE {key} = ?2 AND {status} = '{dead}'"
            ),
        }
    }

    /// The receipt's insert, the digest's lookup (with a digest column) and the purge.
    fn of_receipts(r: &ReceiptTable) -> (String, Option<String>, String) {
        let (receipts, account, event_id, received) = (r.table, r.account, r.event_id, r.received_ms);
        let insert = match r.body_digest {
            Some(digest) => format!(
                "INSERT INTO {receipts} ({account}, {event_id}, {received}, {digest}) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT ({account}, {event_id}) DO NOTHING"
            ),
            None => format!(
                "INSERT INTO {receipts} ({account}, {event_id}, {received}) VALUES (?1, ?2, ?3) \
                 ON CONFLICT ({account}, {event_id}) DO NOTHING"
            ),
        };
        let digest = r.body_digest.map(|digest| {
            format!("SELECT {digest} FROM {receipts} WHERE {account} = ?1 AND {event_id} = ?2")
        });
        let purge = format!("DELETE FROM {receipts} WHERE {received} < ?1");
        (insert, digest, purge)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference's statements as its relay, receiver and purge wrote them before they were
    /// generated: the text is part of what SQL mutants, equivalence lists and recorded traces
    /// name, so the reference's declaration must give it back exactly.
    #[test]
    fn the_reference_declaration_writes_the_reference_statements_text_for_text() {
        let sql = &Tables::reference().sql;
        let expected = [
            (
                &sql.insert_receipt,
                "INSERT INTO receipts (account, event_id, received_ms, body_digest) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (account, event_id) DO NOTHING",
            ),
            (
                sql.receipt_digest.as_ref().unwrap(),
                "SELECT body_digest FROM receipts WHERE account = ?1 AND event_id = ?2",
            ),
            (&sql.purge, "DELETE FROM receipts WHERE received_ms < ?1"),
            (
                &sql.enqueue,
                "INSERT INTO outbox (operation_key, payload, status, next_attempt_ms, created_ms) \
                 VALUES (?1, ?2, 'pending', ?3, ?3) ON CONFLICT (operation_key) DO NOTHING",
            ),
            (
                &sql.due,
                "SELECT operation_key, max(next_attempt_ms, coalesce(lease_expires_ms, 0)) AS due_ms \
                 FROM outbox WHERE status = 'pending' ORDER BY due_ms, operation_key LIMIT 1",
            ),
            (
                &sql.claim,
                "UPDATE outbox SET lease_owner = ?1, lease_token = lease_token + 1, \
                 lease_expires_ms = ?3, attempts = attempts + 1, \
                 first_attempt_ms = coalesce(first_attempt_ms, ?2) \
                 WHERE operation_key = ?4 AND status = 'pending' AND next_attempt_ms <= ?2 \
                 AND coalesce(lease_expires_ms, 0) <= ?2 \
                 RETURNING payload, lease_token, attempts, first_attempt_ms, last_error",
            ),
            (
                &sql.extend_lease,
                "UPDATE outbox SET lease_expires_ms = ?1 WHERE operation_key = ?2 AND lease_token = ?3 AND status = 'pending'",
            ),
            (
                &sql.complete,
                "UPDATE outbox SET status = 'done', provider_ref = ?1, completed_ms = ?2, \
                 lease_expires_ms = NULL, last_error = NULL \
                 WHERE operation_key = ?3 AND lease_token = ?4 AND status = 'pending'",
            ),
            (
                &sql.retry,
                "UPDATE outbox SET next_attempt_ms = ?1, last_error = ?2, lease_expires_ms = NULL \
                 WHERE operation_key = ?3 AND lease_token = ?4 AND status = 'pending'",
            ),
            (
                &sql.bury,
                "UPDATE outbox SET status = 'dead', dead_reason = ?1, lease_expires_ms = NULL \
                 WHERE operation_key = ?2 AND lease_token = ?3 AND status = 'pending'",
            ),
            (
                &sql.dead_keys,
                "SELECT operation_key FROM outbox WHERE status = 'dead' ORDER BY created_ms, operation_key",
            ),
            (
                &sql.requeue,
                "UPDATE outbox SET status = 'pending', next_attempt_ms = ?1, attempts = 0, \
                 last_error = 'requeued by operator after: ' || coalesce(dead_reason, ''), \
                 dead_reason = NULL WHERE operation_key = ?2 AND status = 'dead'",
            ),
        ];
        for (generated, reference) in expected {
            assert_eq!(generated, reference);
        }
    }

    /// A job queue of another shape: other names, other statuses, one column for the last error
    /// and the dead reason, no creation or completion time, no body digest.
    fn jobs() -> Tables {
        Tables::new(
            ReceiptTable {
                table: "inbox",
                account: "sender",
                event_id: "message_id",
                received_ms: "seen_ms",
                body_digest: None,
            },
            OutboxTable {
                table: "jobs",
                operation_key: "job_key",
                payload: "body",
                status: "state",
                owed: "queued",
                done: "sent",
                dead: "failed",
                attempts: "tries",
                lease_owner: "holder",
                lease_token: "fence",
                lease_expires_ms: "held_until",
                next_attempt_ms: "due_at",
                first_attempt_ms: "first_try_at",
                last_error: "error",
                dead_reason: "error",
                effect_id: "shipment",
                created_ms: None,
                completed_ms: None,
            },
        )
    }

    const JOBS_SCHEMA: &str = "
        CREATE TABLE inbox (sender TEXT NOT NULL, message_id TEXT NOT NULL, seen_ms INTEGER NOT NULL,
            PRIMARY KEY (sender, message_id));
        CREATE TABLE jobs (job_key TEXT PRIMARY KEY, body TEXT NOT NULL, state TEXT NOT NULL,
            fence INTEGER NOT NULL DEFAULT 0, holder TEXT, held_until INTEGER, due_at INTEGER NOT NULL,
            first_try_at INTEGER, error TEXT, shipment TEXT, tries INTEGER NOT NULL DEFAULT 0);";

    #[test]
    fn another_schema_gets_every_statement_and_each_fits_it() {
        let tables = jobs();
        let connection = rusqlite::Connection::open_in_memory().unwrap();
        connection.execute_batch(JOBS_SCHEMA).unwrap();
        assert_eq!(tables.check_schema(&connection), Ok(()));
        // One column for the error and the reason: the requeue writes it once.
        assert_eq!(
            tables.sql.requeue,
            "UPDATE jobs SET state = 'queued', due_at = ?1, tries = 0, \
             error = 'requeued by operator after: ' || coalesce(error, '') \
             WHERE job_key = ?2 AND state = 'failed'"
        );
        assert!(tables.sql.receipt_digest.is_none());
        assert!(tables.sql.dead_keys.ends_with("ORDER BY job_key"));
        // The completion binds the same four parameters, the time left unused.
        connection
            .execute(&tables.sql.enqueue, rusqlite::params!["k", "{}", 5])
            .unwrap();
        connection
            .execute(&tables.sql.complete, rusqlite::params!["fx-1", 9, "k", 0])
            .unwrap();
        let (state, shipment): (String, String) = connection
            .query_row("SELECT state, shipment FROM jobs", [], |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
            .unwrap();
        assert_eq!((state.as_str(), shipment.as_str()), ("sent", "fx-1"));
    }

    #[test]
    fn a_schema_that_does_not_fit_and_a_name_that_is_not_plain_are_refused_in_one_line() {
        let connection = rusqlite::Connection::open_in_memory().unwrap();
        // No unique constraint on the operation key: the enqueue's conflict target fails.
        connection
            .execute_batch(&JOBS_SCHEMA.replace("job_key TEXT PRIMARY KEY", "job_key TEXT"))
            .unwrap();
        let error = jobs().check_schema(&connection).unwrap_err();
        assert!(error.contains("ON CONFLICT"), "{error}");
        assert!(!error.contains('\n'), "{error}");
        let mut outbox = OutboxTable::REFERENCE;
        outbox.status = "status; DROP TABLE outbox";
        let error = Tables::new(ReceiptTable::REFERENCE, outbox).check().unwrap_err();
        assert!(error.starts_with("outbox.status is "), "{error}");
        outbox = OutboxTable::REFERENCE;
        outbox.dead = "pending";
        assert!(Tables::new(ReceiptTable::REFERENCE, outbox).check().is_err());
    }
}
