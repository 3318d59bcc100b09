//! The run's digest: every record fed to SHA-256 in a fixed binary encoding, a tag byte per
//! variant, integers little-endian, strings and lists prefixed with their length, so that two
//! runs of one seed agree on the digest exactly when they saw the same things.
//!
//! A statement's text is fed the first time a run runs it and its number after that, and bytes
//! are hashed in large pieces; neither changes the digest. The borrowed form of a statement's
//! record and the kept one feed the same bytes. Nothing here writes text or keeps a record:
//! that is the job of [`super::text`] and [`super::Trace`].

use std::collections::BTreeMap;
use std::sync::Arc;

use commitgap::env::{DbError, Value};
use commitgap::provider::ProviderReply;
use commitgap::receiver::Answer;
use sha2::{Digest, Sha256};

use super::{Actor, Arrival, CallOutcome, DeliveryHow, Happening, Observed, SqlOutcome};
use crate::db::StatementOutput;

/// Fed bytes are hashed once this many are pending.
pub(super) const PENDING_BYTES_MAX: usize = 4_096;

/// Feeds a record's fields to the hasher in a fixed encoding: a tag byte per variant, integers
/// little-endian, strings and lists prefixed with their length. Two records feed the same bytes
/// exactly when they are equal.
pub(super) struct Feed<'a> {
    pub(super) pending: &'a mut Vec<u8>,
    pub(super) hasher: &'a mut Sha256,
    pub(super) statements: &'a mut BTreeMap<Arc<str>, u64>,
}

impl Feed<'_> {
    /// A statement's text the first time the run feeds it, its number after that.
    fn statement(&mut self, statement: &Arc<str>) {
        match self.statements.get(statement) {
            Some(&number) => {
                self.tag(b'#');
                self.u64(number);
            }
            None => {
                let number = self.statements.len() as u64;
                self.statements.insert(Arc::clone(statement), number);
                self.tag(b'"');
                self.str(statement);
            }
        }
    }

    pub(super) fn tag(&mut self, tag: u8) {
        self.pending.push(tag);
    }

    pub(super) fn u64(&mut self, value: u64) {
        self.pending.extend_from_slice(&value.to_le_bytes());
    }

    pub(super) fn i64(&mut self, value: i64) {
        self.pending.extend_from_slice(&value.to_le_bytes());
    }

    /// Long byte strings go to the hasher at once, after what is pending, in the same order.
    fn bytes(&mut self, bytes: &[u8]) {
        if bytes.len() >= PENDING_BYTES_MAX {
            self.hasher.update(&*self.pending);
            self.pending.clear();
            self.hasher.update(bytes);
        } else {
            self.pending.extend_from_slice(bytes);
        }
    }

    fn usize(&mut self, value: usize) {
        self.u64(value as u64);
    }

    fn bool(&mut self, value: bool) {
        self.tag(u8::from(value));
    }

    fn str(&mut self, value: &str) {
        self.usize(value.len());
        self.bytes(value.as_bytes());
    }

    fn value(&mut self, value: &Value) {
        match value {
            Value::Null => self.tag(0),
            Value::Integer(number) => {
                self.tag(1);
                self.i64(*number);
            }
            Value::Real(number) => {
                self.tag(2);
                self.u64(number.to_bits());
            }
            Value::Text(text) => {
                self.tag(3);
                self.str(text);
            }
            Value::Blob(bytes) => {
                self.tag(4);
                self.usize(bytes.len());
                self.bytes(bytes);
            }
        }
    }

    fn values(&mut self, values: &[Value]) {
        self.usize(values.len());
        for value in values {
            self.value(value);
        }
    }

    fn reply(&mut self, reply: &Result<ProviderReply, String>) {
        match reply {
            Ok(ProviderReply::Accepted { effect_id, replayed }) => {
                self.tag(0);
                self.str(effect_id);
                self.bool(*replayed);
            }
            Ok(ProviderReply::Found { effect_id }) => {
                self.tag(1);
                self.str(effect_id);
            }
            Ok(ProviderReply::NotFound) => self.tag(2),
            Ok(ProviderReply::Conflict) => self.tag(3),
            Ok(ProviderReply::Rejected { status, reason }) => {
                self.tag(4);
                self.u64(u64::from(*status));
                self.str(reason);
            }
            Err(error) => {
                self.tag(5);
                self.str(error);
            }
            Ok(ProviderReply::RateLimited { retry_after_ms }) => {
                self.tag(6);
                self.i64(retry_after_ms.unwrap_or(-1));
            }
        }
    }

    fn answer(&mut self, answer: &Answer) {
        self.u64(u64::from(answer.status()));
        self.displayed(answer);
    }

    /// What `self.str(&value.to_string())` feeds, written in place without the string.
    fn displayed(&mut self, value: &dyn std::fmt::Display) {
        use std::io::Write as _;
        let at = self.pending.len();
        self.pending.extend_from_slice(&[0; 8]);
        write!(self.pending, "{value}").expect("writing to memory does not fail");
        let len = (self.pending.len() - at - 8) as u64;
        self.pending[at..at + 8].copy_from_slice(&len.to_le_bytes());
    }

    fn how(&mut self, how: &DeliveryHow) {
        match how {
            DeliveryHow::Attempt(attempt) => {
                self.tag(0);
                self.u64(u64::from(*attempt));
            }
            DeliveryHow::Copy => self.tag(1),
            DeliveryHow::Extra(reason) => {
                self.tag(2);
                self.str(reason);
            }
        }
    }

    fn arrival(&mut self, arrival: &Arrival) {
        match arrival {
            Arrival::To(process) => {
                self.tag(0);
                self.str(process);
            }
            Arrival::Lost => self.tag(1),
            Arrival::Refused => self.tag(2),
        }
    }

    fn option_i64(&mut self, value: Option<i64>) {
        match value {
            Some(value) => {
                self.tag(1);
                self.i64(value);
            }
            None => self.tag(0),
        }
    }
}

/// A statement's outcome, borrowed from the result it came from.
pub(super) enum SqlOutcomeRef<'a> {
    Done,
    Changed(usize),
    Rows {
        count: usize,
        first: Option<&'a [Value]>,
    },
    Failed(String),
}

impl<'a> SqlOutcomeRef<'a> {
    pub(super) fn of(result: &'a Result<StatementOutput, DbError>, changes_rows: bool) -> SqlOutcomeRef<'a> {
        match result {
            // SQLite's change count is stale after BEGIN, COMMIT and other non-DML statements.
            Ok(StatementOutput::Changed(_)) if !changes_rows => SqlOutcomeRef::Done,
            Ok(StatementOutput::Changed(count)) => SqlOutcomeRef::Changed(*count),
            Ok(StatementOutput::Rows(rows)) => SqlOutcomeRef::Rows {
                count: rows.len(),
                first: rows.first().map(|row| row.0.as_slice()),
            },
            Err(error) => SqlOutcomeRef::Failed(error.to_string()),
        }
    }

    fn of_owned(outcome: &'a SqlOutcome) -> SqlOutcomeRef<'a> {
        match outcome {
            SqlOutcome::Done => SqlOutcomeRef::Done,
            SqlOutcome::Changed(count) => SqlOutcomeRef::Changed(*count),
            SqlOutcome::Rows { count, first } => SqlOutcomeRef::Rows {
                count: *count,
                first: first.as_deref(),
            },
            SqlOutcome::Failed(message) => SqlOutcomeRef::Failed(message.clone()),
        }
    }

    pub(super) fn to_owned(&self) -> SqlOutcome {
        match self {
            SqlOutcomeRef::Done => SqlOutcome::Done,
            SqlOutcomeRef::Changed(count) => SqlOutcome::Changed(*count),
            SqlOutcomeRef::Rows { count, first } => SqlOutcome::Rows {
                count: *count,
                first: first.map(<[Value]>::to_vec),
            },
            SqlOutcomeRef::Failed(message) => SqlOutcome::Failed(message.clone()),
        }
    }
}

/// The encoding of a statement, shared by the borrowed and the kept form so that both feed the
/// same bytes.
pub(super) fn feed_sql(
    feed: &mut Feed<'_>,
    statement: &Arc<str>,
    params: &[Value],
    outcome: &SqlOutcomeRef<'_>,
    injected: bool,
) {
    feed.tag(b'q');
    feed.statement(statement);
    feed.values(params);
    match outcome {
        SqlOutcomeRef::Done => feed.tag(0),
        SqlOutcomeRef::Changed(count) => {
            feed.tag(1);
            feed.usize(*count);
        }
        SqlOutcomeRef::Rows { count, first } => {
            feed.tag(2);
            feed.usize(*count);
            match first {
                Some(first) => {
                    feed.tag(1);
                    feed.values(first);
                }
                None => feed.tag(0),
            }
        }
        SqlOutcomeRef::Failed(message) => {
            feed.tag(3);
            feed.str(message);
        }
    }
    feed.bool(injected);
}

impl Actor {
    pub(super) fn feed(&self, feed: &mut Feed<'_>) {
        match self {
            Actor::Process(id) => {
                feed.tag(0);
                feed.str(id);
            }
            Actor::Sender => feed.tag(1),
            Actor::Provider => feed.tag(2),
            Actor::Operator => feed.tag(3),
            Actor::Fault(name) => {
                feed.tag(4);
                feed.str(name);
            }
            Actor::World => feed.tag(5),
            Actor::Invariant => feed.tag(6),
        }
    }
}

impl Observed {
    fn feed(&self, feed: &mut Feed<'_>) {
        let (tag, key) = match self {
            Observed::LeaseTaken { operation_key, token } => {
                feed.tag(0);
                feed.i64(*token);
                return feed.str(operation_key);
            }
            Observed::LeaseExtended { operation_key } => (1, operation_key),
            Observed::LeaseReleased { operation_key } => (2, operation_key),
            Observed::Done { operation_key } => (3, operation_key),
            Observed::Dead { operation_key } => (4, operation_key),
        };
        feed.tag(tag);
        feed.str(key);
    }
}

impl Happening {
    pub(super) fn feed(&self, feed: &mut Feed<'_>) {
        match self {
            Happening::Sql {
                statement,
                params,
                outcome,
                injected,
            } => feed_sql(
                feed,
                statement,
                params,
                &SqlOutcomeRef::of_owned(outcome),
                *injected,
            ),
            other => other.feed_other(feed),
        }
    }

    /// The encoding of everything but statements.
    fn feed_other(&self, feed: &mut Feed<'_>) {
        match self {
            Happening::Sql { .. } => unreachable!("statements are fed by Happening::feed"),
            Happening::Setup {
                system,
                seed,
                rows,
                accounts,
                subjects,
                events,
                streams,
                receivers,
                relay_workers,
                sender,
            } => {
                feed.tag(b'a');
                feed.str(system);
                feed.u64(*seed);
                for count in [*rows, *accounts, *subjects, *events, *streams] {
                    feed.usize(count);
                }
                feed.u64(u64::from(*receivers));
                feed.u64(u64::from(*relay_workers));
                feed.str(sender);
            }
            Happening::Committed { rows, observed } => {
                feed.tag(b'c');
                feed.usize(*rows);
                feed.usize(observed.len());
                for change in observed {
                    change.feed(feed);
                }
            }
            Happening::LockWait { statement, until_ms } => {
                feed.tag(b'l');
                feed.str(statement);
                feed.i64(*until_ms);
            }
            Happening::TaskEndedInTransaction => feed.tag(b't'),
            Happening::Sleep { duration_ms } => {
                feed.tag(b's');
                feed.i64(*duration_ms);
            }
            Happening::Wake => feed.tag(b'w'),
            Happening::Call {
                send,
                key,
                outcome,
                reply_lost,
            } => {
                feed.tag(b'k');
                feed.bool(*send);
                feed.str(key);
                match outcome {
                    CallOutcome::Replied(reply) => {
                        feed.tag(0);
                        feed.reply(reply);
                    }
                    CallOutcome::Busy { for_ms } => {
                        feed.tag(1);
                        feed.i64(*for_ms);
                    }
                }
                feed.bool(*reply_lost);
            }
            Happening::Reply(reply) => {
                feed.tag(b'r');
                feed.reply(reply);
            }
            Happening::ProviderFinishes { key, outcome } => {
                feed.tag(b'f');
                feed.str(key);
                feed.reply(outcome);
            }
            Happening::KeyForgotten { key, model: _ } => {
                // The model is left out, as it was before the record named it: the key's
                // lifetime already depends on which model set it.
                feed.tag(b'x');
                feed.str(key);
            }
            other => other.feed_messages(feed),
        }
    }

    /// The encoding of deliveries, answers and the sender's side.
    fn feed_messages(&self, feed: &mut Feed<'_>) {
        match self {
            Happening::Answer(answer) => {
                feed.tag(b'A');
                feed.answer(answer);
            }
            Happening::AnswerSent => feed.tag(b'B'),
            Happening::AnswerWritten => feed.tag(b'C'),
            Happening::AnswerLostInCrash => feed.tag(b'D'),
            Happening::AnswerLost { answer, stream } => {
                feed.tag(b'F');
                feed.answer(answer);
                feed.usize(*stream);
            }
            Happening::SenderGot {
                answer,
                stream,
                attempt,
                how,
                next_attempt_in_ms,
            } => {
                feed.tag(b'G');
                feed.answer(answer);
                feed.usize(*stream);
                feed.u64(u64::from(*attempt));
                feed.how(how);
                feed.option_i64(*next_attempt_in_ms);
            }
            Happening::Emit {
                kind,
                event_id,
                account,
                tenant,
                subject,
                subscriptions,
            } => {
                feed.tag(b'H');
                feed.str(kind);
                for text in [event_id, account, tenant, subject] {
                    feed.str(text);
                }
                feed.usize(*subscriptions);
            }
            Happening::Deliver {
                event_id,
                account,
                stream,
                how,
                arrival,
            } => {
                feed.tag(b'I');
                feed.str(event_id);
                feed.str(account);
                feed.usize(*stream);
                feed.how(how);
                feed.arrival(arrival);
            }
            Happening::AttemptTimedOut {
                stream,
                attempt,
                next_attempt_in_ms,
                settled,
            } => {
                feed.tag(b'J');
                feed.usize(*stream);
                feed.u64(u64::from(*attempt));
                feed.option_i64(*next_attempt_in_ms);
                feed.bool(*settled);
            }
            other => other.feed_faults(feed),
        }
    }

    /// The encoding of faults, recovery and the rest.
    fn feed_faults(&self, feed: &mut Feed<'_>) {
        match self {
            Happening::Crash {
                process,
                tasks,
                open_transactions,
                restart_in_ms,
            } => {
                feed.tag(b'K');
                feed.str(process);
                feed.usize(*tasks);
                feed.usize(*open_transactions);
                feed.i64(*restart_in_ms);
            }
            Happening::Restart { process } => {
                feed.tag(b'L');
                feed.str(process);
            }
            Happening::RestartSkipped => feed.tag(b'M'),
            Happening::Pause { process, duration_ms } => {
                feed.tag(b'N');
                feed.str(process);
                feed.i64(*duration_ms);
            }
            Happening::ClockSet { process, offset_ms } => {
                feed.tag(b'O');
                feed.str(process);
                feed.i64(*offset_ms);
            }
            Happening::SenderClockSet { offset_ms } => {
                feed.tag(b'P');
                feed.i64(*offset_ms);
            }
            Happening::FaultTimer => feed.tag(b'Q'),
            Happening::Purge { older_than_ms } => {
                feed.tag(b'R');
                feed.i64(*older_than_ms);
            }
            Happening::PurgeSkipped => feed.tag(b'T'),
            Happening::Attack {
                attack,
                event_id,
                account,
                arrival,
            } => {
                feed.tag(b'U');
                feed.str(attack.name());
                feed.str(event_id);
                feed.str(account);
                feed.arrival(arrival);
            }
            Happening::AttackSkipped { attack, stream } => {
                feed.tag(b'V');
                feed.str(attack.name());
                feed.str(stream);
            }
            Happening::OperatorRequeue => feed.tag(b'W'),
            Happening::OperatorRedeliver { streams, round } => {
                feed.tag(b'X');
                feed.usize(*streams);
                feed.u64(u64::from(*round));
            }
            Happening::Log(message) => {
                feed.tag(b'Y');
                feed.str(message);
            }
            Happening::Heal { restarting } => {
                feed.tag(b'Z');
                feed.usize(*restarting);
            }
            Happening::Failed { invariant, evidence } => {
                feed.tag(b'!');
                feed.str(invariant);
                feed.str(evidence);
            }
            other => unreachable!("fed by an earlier match: {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Trace;
    use super::*;

    fn statement(sql: &str) -> Arc<str> {
        Arc::from(sql)
    }

    #[test]
    fn the_digest_is_the_same_whether_records_are_kept_or_not() {
        let run = |keep: bool| {
            let mut trace = Trace::new(keep);
            trace.begin(1, 5, Actor::Process("receiver-1#1".into()));
            trace.set_task(4);
            let rows = vec![commitgap::env::Row(vec![
                Value::Integer(7),
                Value::Text("a".into()),
            ])];
            trace.record_sql(
                &statement("SELECT a, b FROM t"),
                &[Value::Text("x".into())],
                &Ok(StatementOutput::Rows(rows)),
                false,
                false,
            );
            trace.record_sql(&statement("BEGIN"), &[], &Err(DbError::Busy), false, true);
            trace.record(Happening::Wake);
            trace.end(5);
            trace
        };
        let (kept, unkept) = (run(true), run(false));
        assert_eq!(kept.digest(), unkept.digest());
        // The kept records, fed again from their owned form, give the same digest.
        let mut again = Trace::new(false);
        for step in kept.steps() {
            again.begin(step.step, step.time_ms, step.actor.clone());
            for happening in &step.happened {
                again.record(happening.clone());
            }
            again.end(step.time_ms);
        }
        assert_eq!(again.digest(), kept.digest());
        assert_eq!(
            kept.steps()[0].to_string(),
            "     1  0:00:00.005 receiver-1#1/t4  sql SELECT a, b FROM t ['x'] -> 1 row (7, 'a') | sql BEGIN -> error: database is busy (injected) | wake"
        );
    }

    #[test]
    fn the_digest_depends_on_every_field() {
        let digest = |happening: Happening| {
            let mut trace = Trace::new(false);
            trace.push(3, 9, Actor::Sender, happening);
            trace.digest()
        };
        let sleeps: Vec<String> = [1, 2]
            .iter()
            .map(|&duration_ms| digest(Happening::Sleep { duration_ms }))
            .collect();
        assert_ne!(sleeps[0], sleeps[1]);
        assert_ne!(digest(Happening::Wake), digest(Happening::FaultTimer));
        assert_ne!(
            digest(Happening::Log("ab".into())),
            digest(Happening::Log("a".into())),
        );
        assert_eq!(digest(Happening::Wake).len(), 32);
    }
}
