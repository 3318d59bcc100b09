//! Waiting for SQLite's locks in virtual time, as a connection with a busy timeout does.
//!
//! Every simulated connection runs with SQLite's own busy timeout at zero, so a statement that
//! meets another connection's lock comes back `SQLITE_BUSY` at once and nothing ever blocks.
//! Production connections wait instead: rusqlite opens each one with a five-second timeout, and
//! SQLite's busy handler retries the lock until it is free or the timeout has passed. This module
//! gives the simulated connections that wait, in virtual time: a statement refused as busy parks
//! its task until some connection's transaction ends (which may free the lock) or its deadline
//! comes, then runs again; only at the deadline does the system see `busy`. A statement that
//! SQLite would not wait for (a read transaction asking to write, see
//! [`Database::busy_is_waited_for`]) fails at once as before, and so does one whose connection's
//! timeout is zero.
//!
//! The timeout is the connection's own: the system's [`System::busy_timeout_ms`] when the
//! connection is opened, changed by a `PRAGMA busy_timeout = N` the system runs through its Env,
//! which this module answers instead of SQLite (SQLite's own timeout must stay zero). An injected
//! busy (the `sqlite-busy` fault) is a failure after the wait and is never waited for again.
//!
//! Waking every waiter when any transaction ends may wake some for a lock still held; they find
//! it busy and park again with the deadline they had. That costs steps, never an outcome. Nothing
//! here may read the clock or block.
//!
//! [`Database::busy_is_waited_for`]: crate::db::Database::busy_is_waited_for
//! [`System::busy_timeout_ms`]: crate::system::System::busy_timeout_ms

use std::collections::{BTreeMap, BTreeSet};

use super::{Item, TaskId, World};
use crate::db::ConnectionId;

/// A statement refused as busy that waits for the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// When the wait ends at the latest: the first refusal plus the connection's timeout.
    pub until_ms: i64,
    /// Whether this refusal starts the wait (the trace shows only that one: SQLite's busy
    /// handler retries silently, and so do the statements woken early that find the lock held).
    pub first: bool,
}

/// The tasks waiting for a lock, and each connection's busy timeout.
#[derive(Debug)]
pub struct LockWaits {
    /// False replays a seed file recorded before statements waited: every timeout is zero.
    waits: bool,
    /// The busy timeout of a connection nobody set one on.
    default_timeout_ms: i64,
    /// Connections whose timeout a `PRAGMA busy_timeout` changed.
    timeouts_ms: BTreeMap<ConnectionId, i64>,
    /// Timeouts set by tasks before they had a connection, given to the one they get.
    before_connecting_ms: BTreeMap<TaskId, i64>,
    /// Tasks parked until a lock may be free (woken early when a transaction ends).
    waiting: BTreeSet<TaskId>,
    /// Waiters woken early and not yet run: once one of them (or anyone) takes a write lock,
    /// the rest go back to waiting, as SQLite's busy handler keeps sleeping for them.
    woken: BTreeSet<TaskId>,
    /// When each waiting statement gives up: its first refusal plus its connection's timeout.
    deadlines_ms: BTreeMap<TaskId, i64>,
    /// [`crate::db::Database::transactions_ended`] when the waiters were last woken.
    ended_seen: u64,
}

impl LockWaits {
    /// No task waiting; connections start with `default_timeout_ms`, or never wait unless
    /// `waits`.
    pub fn new(waits: bool, default_timeout_ms: i64) -> LockWaits {
        LockWaits {
            waits,
            default_timeout_ms: default_timeout_ms.max(0),
            timeouts_ms: BTreeMap::new(),
            before_connecting_ms: BTreeMap::new(),
            waiting: BTreeSet::new(),
            woken: BTreeSet::new(),
            deadlines_ms: BTreeMap::new(),
            ended_seen: 0,
        }
    }

    /// Whether refused statements wait (false replays a seed file recorded before they did).
    pub fn waits(&self) -> bool {
        self.waits
    }

    /// The busy timeout of `connection`, in milliseconds.
    pub fn timeout_ms(&self, connection: ConnectionId) -> i64 {
        if !self.waits {
            return 0;
        }
        self.timeouts_ms
            .get(&connection)
            .copied()
            .unwrap_or(self.default_timeout_ms)
    }

    /// A connection was opened: it starts with the default timeout. (A pooled connection handed
    /// out again keeps the timeout it was given, as a real pool's connection does.)
    pub fn opened(&mut self, connection: ConnectionId) {
        self.timeouts_ms.remove(&connection);
    }

    /// The busy timeout of a connection not yet opened.
    pub fn default_timeout_ms(&self) -> i64 {
        if self.waits { self.default_timeout_ms } else { 0 }
    }

    /// The busy timeout the connection `task` is about to get will have.
    pub fn timeout_before_connecting_ms(&self, task: TaskId) -> i64 {
        match self.before_connecting_ms.get(&task) {
            Some(&timeout_ms) if self.waits => timeout_ms,
            _ => self.default_timeout_ms(),
        }
    }

    /// `task` got `connection`: a timeout it set before is now the connection's.
    pub fn connected(&mut self, task: TaskId, connection: ConnectionId) {
        if let Some(timeout_ms) = self.before_connecting_ms.remove(&task) {
            self.timeouts_ms.insert(connection, timeout_ms);
        }
    }

    /// The statement of `task`, on a connection with `timeout_ms`, was refused as busy at
    /// `now_ms`: how long it waits, or `None` when its wait is over (or it has no
    /// timeout) and the system must see busy.
    pub fn refused(&mut self, task: TaskId, timeout_ms: i64, now_ms: i64) -> Option<Refusal> {
        let first = !self.deadlines_ms.contains_key(&task);
        let deadline_ms = *self
            .deadlines_ms
            .entry(task)
            .or_insert_with(|| now_ms.saturating_add(timeout_ms));
        if now_ms < deadline_ms {
            Some(Refusal {
                until_ms: deadline_ms,
                first,
            })
        } else {
            self.deadlines_ms.remove(&task);
            None
        }
    }

    /// The statement of `task` ran (or failed for another reason): its wait, if any, is over.
    pub fn finished(&mut self, task: TaskId) {
        self.deadlines_ms.remove(&task);
    }

    /// `task` parked to wait for a lock.
    pub fn parked(&mut self, task: TaskId) {
        self.waiting.insert(task);
    }

    /// `task` is gone (finished, or killed with its process): nothing of it is kept.
    pub fn forget(&mut self, task: TaskId) {
        self.stop_waiting(task);
        self.deadlines_ms.remove(&task);
        self.before_connecting_ms.remove(&task);
    }

    /// `task` no longer waits for a lock to be woken (it was picked, paused or crashed).
    pub fn stop_waiting(&mut self, task: TaskId) {
        self.waiting.remove(&task);
        self.woken.remove(&task);
    }
}

impl World {
    /// Runs `PRAGMA busy_timeout` for `task`'s connection if `sql` is one, as SQLite would: a
    /// value sets the connection's timeout (negative values mean zero), and either form answers
    /// the timeout now in force. The pragma needs no lock, so a task whose connection cannot
    /// open yet (its schema read meets a lock) keeps the setting until it has one. `None` for
    /// any other statement.
    pub(super) fn busy_timeout_pragma(&mut self, task: TaskId, sql: &str) -> Option<i64> {
        let setting = busy_timeout_pragma(sql)?;
        let connection = self.tasks[&task].connection;
        let waits = &mut self.lock_waits;
        if let Some(timeout_ms) = setting {
            match connection {
                Some(connection) => waits.timeouts_ms.insert(connection, timeout_ms.max(0)),
                None => waits.before_connecting_ms.insert(task, timeout_ms.max(0)),
            };
        }
        Some(match connection {
            Some(connection) => waits.timeout_ms(connection),
            None => waits.timeout_before_connecting_ms(task),
        })
    }

    /// Moves the tasks waiting for a lock back to the ready queue if a transaction has ended
    /// since they parked and no other connection holds a write transaction: the lock they wait
    /// for may be free. While another connection still writes, none of them could get a lock
    /// (a writer's lock shuts out other writers, and in a rollback journal a committing
    /// writer's lock shuts out readers), so they stay parked rather than wake to be refused.
    pub(super) fn wake_lock_waiters(&mut self) {
        self.put_back_woken_waiters();
        let ended = self.db.transactions_ended();
        if ended == self.lock_waits.ended_seen || self.lock_waits.waiting.is_empty() {
            self.lock_waits.ended_seen = ended;
            return;
        }
        self.lock_waits.ended_seen = ended;
        let writers = self.db.writers();
        let waiting = std::mem::take(&mut self.lock_waits.waiting);
        for task in waiting {
            let Some(state) = self.tasks.get_mut(&task) else {
                continue;
            };
            if writers.iter().any(|writer| Some(*writer) != state.connection) {
                self.lock_waits.waiting.insert(task);
                continue;
            }
            // A waiter whose deadline came is on the ready queue already.
            if let Some(key) = state.timer.take() {
                self.timers.remove(&(key.0, key.1, Item::Task(task)));
                self.ready.push(Item::Task(task));
                self.lock_waits.woken.insert(task);
            }
        }
    }

    /// Sends the waiters woken early back to waiting if another connection has taken a write
    /// lock since: they would only be refused again. Without this, every transaction's end
    /// would cost a step per waiter that lost the race for the lock, and a burst of deliveries
    /// queued for the lock would take steps in the square of its size.
    fn put_back_woken_waiters(&mut self) {
        if self.lock_waits.woken.is_empty() {
            return;
        }
        let writers = self.db.writers();
        if writers.is_empty() {
            return;
        }
        for task in std::mem::take(&mut self.lock_waits.woken) {
            let Some(state) = self.tasks.get(&task) else {
                continue;
            };
            if writers.iter().all(|writer| Some(*writer) == state.connection) {
                self.lock_waits.woken.insert(task);
                continue;
            }
            let Some(&deadline_ms) = self.lock_waits.deadlines_ms.get(&task) else {
                continue;
            };
            let Some(index) = self.ready.iter().position(|item| *item == Item::Task(task)) else {
                continue;
            };
            self.ready.remove(index);
            self.ready_label_cache.remove(&Item::Task(task));
            let key = self.schedule(Item::Task(task), deadline_ms);
            self.tasks.get_mut(&task).expect("registered").timer = key;
            self.lock_waits.waiting.insert(task);
        }
    }
}

/// Reads `PRAGMA [main.]busy_timeout [= N | (N)]`: `Some(None)` for the query form, `Some(Some(N))`
/// for a setting, `None` for any other statement.
fn busy_timeout_pragma(sql: &str) -> Option<Option<i64>> {
    // Every statement passes here: rule out all but pragmas before allocating anything.
    let is_pragma = sql
        .trim_start()
        .get(..6)
        .is_some_and(|verb| verb.eq_ignore_ascii_case("pragma"));
    if !is_pragma {
        return None;
    }
    let compact: String = sql
        .trim()
        .trim_end_matches(';')
        .chars()
        .filter(|character| !character.is_whitespace())
        .collect::<String>()
        .to_ascii_lowercase();
    let rest = compact.strip_prefix("pragma")?;
    let rest = rest.strip_prefix("main.").unwrap_or(rest);
    let rest = rest.strip_prefix("busy_timeout")?;
    if rest.is_empty() {
        return Some(None);
    }
    let value = rest
        .strip_prefix('=')
        .or_else(|| rest.strip_prefix('(').and_then(|inner| inner.strip_suffix(')')))?;
    value.parse::<i64>().ok().map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_timeout_pragma_is_read_in_each_of_its_forms() {
        assert_eq!(busy_timeout_pragma("PRAGMA busy_timeout"), Some(None));
        assert_eq!(busy_timeout_pragma("pragma busy_timeout = 250;"), Some(Some(250)));
        assert_eq!(busy_timeout_pragma("PRAGMA main.busy_timeout(0)"), Some(Some(0)));
        assert_eq!(busy_timeout_pragma("PRAGMA busy_timeout = -5"), Some(Some(-5)));
        assert_eq!(busy_timeout_pragma("PRAGMA journal_mode = WAL"), None);
        assert_eq!(busy_timeout_pragma("SELECT busy_timeout FROM t"), None);
        assert_eq!(busy_timeout_pragma("PRAGMA busy_timeout = x"), None);
    }

    #[test]
    fn a_refused_statement_waits_until_its_first_refusal_plus_the_timeout() {
        let mut waits = LockWaits::new(true, 5_000);
        let until = |until_ms, first| Some(Refusal { until_ms, first });
        assert_eq!(waits.refused(1, 5_000, 100), until(5_100, true));
        // Refused again later: the deadline stays the first one's.
        assert_eq!(waits.refused(1, 5_000, 3_000), until(5_100, false));
        assert_eq!(waits.refused(1, 5_000, 5_100), None);
        // The wait is over, so a new refusal starts a new one.
        assert_eq!(waits.refused(1, 5_000, 6_000), until(11_000, true));
        waits.finished(1);
        assert_eq!(waits.refused(2, 0, 10), None, "a zero timeout never waits");
        waits.timeouts_ms.insert(8, 0);
        assert_eq!(waits.timeout_ms(8), 0);
        waits.opened(8);
        assert_eq!(
            waits.timeout_ms(8),
            5_000,
            "a reopened connection has the default again"
        );
        let old_file = LockWaits::new(false, 5_000);
        assert_eq!(
            old_file.timeout_ms(8),
            0,
            "a file recorded before waits never waits"
        );
        assert_eq!(old_file.default_timeout_ms(), 0);
    }

    /// Scripted runs of the reference, where the test decides who holds SQLite's locks.
    mod scripted {
        use std::sync::Arc;

        use commitgap::env::DbError;
        use commitgap::receiver::{Answer, SuccessKind};

        use crate::db::Backend;
        use crate::domain::payments::{AMOUNT, PAYMENT, carries_amount};
        use crate::run::scenario::{Scenario, ScenarioSetup};
        use crate::system::{Fixtures, SubjectFixture};
        use crate::systems::ReferenceSystem;
        use crate::workload::EventSpec;

        fn scenario(backend: Backend) -> Scenario {
            let fixtures = Fixtures {
                accounts: vec![("account-a".to_owned(), "tenant-a".to_owned())],
                subjects: vec![SubjectFixture::new("tenant-a", "order-1").with(AMOUNT, 1250)],
            };
            let mut event = EventSpec::new("account-a", "tenant-a", "order-1", PAYMENT, 0);
            event.event_id = "evt-1".to_owned();
            if carries_amount(&event.kind) {
                event = event.with(AMOUNT, 1250);
            }
            let setup = ScenarioSetup {
                backend,
                ..ScenarioSetup::default()
            };
            Scenario::new(
                Arc::new(ReferenceSystem::reference()),
                fixtures,
                vec![event],
                setup,
            )
            .expect("the reference sets up")
        }

        fn waits_traced(scenario: &Scenario) -> usize {
            scenario
                .trace()
                .iter()
                .filter(|line| line.contains("waits for the lock"))
                .count()
        }

        #[test]
        fn a_delivery_behind_a_short_lock_waits_its_turn_and_is_applied() {
            let mut scenario = scenario(Backend::Memdb);
            scenario.hold_write_lock("operator", 3_000).unwrap();
            let task = scenario.deliver(1, "evt-1").unwrap();
            scenario.run_until_quiet().unwrap();
            assert_eq!(scenario.answer(task), Some(Answer::Success(SuccessKind::Applied)));
            assert_eq!(waits_traced(&scenario), 1, "{:#?}", scenario.trace());
            assert!(scenario.now_ms() >= 3_000, "it waited for the holder's commit");
        }

        #[test]
        fn a_delivery_behind_a_long_lock_is_answered_busy_after_the_timeout() {
            let mut scenario = scenario(Backend::Memdb);
            scenario.hold_write_lock("operator", 60_000).unwrap();
            let task = scenario.deliver(1, "evt-1").unwrap();
            scenario.run_until_quiet().unwrap();
            match scenario.answer(task) {
                Some(Answer::RetryLater(reason)) => assert!(reason.contains("busy"), "{reason}"),
                other => panic!("expected 503, got {other:?}"),
            }
            let trace = scenario.trace();
            let answered = trace
                .iter()
                .find(|line| line.contains("answer 503"))
                .expect("the answer is traced");
            // Trace lines read `step h:mm:ss.mmm actor text`: the 503 comes five seconds in.
            assert!(answered.contains(" 0:00:05."), "{answered}");
        }

        #[test]
        fn the_busy_timeout_pragma_sets_the_connections_own_wait() {
            let mut scenario = scenario(Backend::Memdb);
            scenario.hold_write_lock("operator", 60_000).unwrap();
            let at_once = scenario
                .start_statements(
                    "operator",
                    vec![("PRAGMA busy_timeout = 0", 0), ("BEGIN IMMEDIATE", 0)],
                )
                .unwrap();
            let after_a_second = scenario
                .start_statements(
                    "operator",
                    vec![("PRAGMA busy_timeout = 1000", 0), ("BEGIN IMMEDIATE", 0)],
                )
                .unwrap();
            scenario.run_until_quiet().unwrap();
            assert!(
                matches!(at_once.borrow()[1], Err(DbError::Busy)),
                "{:?}",
                at_once.borrow()
            );
            assert!(
                matches!(after_a_second.borrow()[1], Err(DbError::Busy)),
                "{:?}",
                after_a_second.borrow()
            );
            let trace = scenario.trace();
            let waits: Vec<&String> = trace
                .iter()
                .filter(|line| line.contains("waits for the lock"))
                .collect();
            assert_eq!(waits.len(), 1, "only the second waits: {trace:#?}");
            assert!(waits[0].contains("until 0:00:01."), "{}", waits[0]);
        }

        #[test]
        fn a_read_transaction_that_asks_to_write_is_refused_at_once() {
            // In WAL a reader runs beside the writer; its upgrade would deadlock with it, so SQLite
            // answers busy at once, whatever the timeout.
            let mut scenario = scenario(Backend::WalFile);
            scenario.hold_write_lock("operator", 60_000).unwrap();
            let results = scenario
                .start_statements(
                    "operator",
                    vec![
                        ("BEGIN", 0),
                        ("SELECT count(*) FROM receipts", 0),
                        ("INSERT INTO receipts (account, event_id, received_ms, body_digest) VALUES ('account-a', 'evt-9', 0, 'digest')", 0),
                        ("ROLLBACK", 0),
                    ],
                )
                .unwrap();
            scenario.run_until_quiet().unwrap();
            let results = results.borrow();
            assert!(results[1].is_ok(), "{results:?}");
            assert!(matches!(results[2], Err(DbError::Busy)), "{results:?}");
            assert_eq!(waits_traced(&scenario), 0, "{:#?}", scenario.trace());
        }
    }
}
