"""What every process of the shop shares: the clock, the log, its name and its database.

It models one SQLite connection the way every process of ours uses it: WAL mode with a busy
timeout, `synchronous=FULL`, no implicit transactions (isolation_level=None) and explicit
BEGIN IMMEDIATE / COMMIT / ROLLBACK, with the two SQL functions of commitgap's commit journal
(see docs/services.md) and the one counter of journal transaction numbers for the whole process.
It also holds what more than one process reads: the outbox job states and the PLANTED_BUG switch,
read from the environment here once, so that the receiver, the relay and the command line see the
same value.

It must not know webhooks, the provider or the business's rules (those are receiver.py's and
relay.py's), and nothing else may hand out journal transaction numbers: two counters in one
process could give two commits the same number.
"""

import itertools
import os
import sqlite3
import sys
import threading
import time
from contextlib import contextmanager

# --------------------------------------------------------------------------------------------
# Constants of the contract
# --------------------------------------------------------------------------------------------

# Outbox job states, as the schema's CHECK names them.
QUEUED, DELIVERED, DEAD = "queued", "delivered", "dead_letter"

BUSY_TIMEOUT_MS = 5_000

# The planted bug switched on for this run, if any: service.py holds the table of them and refuses
# a name it does not know. Read once, here, so that every module acts on the same one.
PLANTED_BUG = os.environ.get("PLANTED_BUG", "").strip()


def now_ms():
    """The wall clock in milliseconds since the epoch: the clock every process of ours reads."""
    return time.time_ns() // 1_000_000


def process_name(default):
    """The name the checker gave this process (COMMITGAP_PROCESS), or `default` when run by hand."""
    return os.environ.get("COMMITGAP_PROCESS") or f"{default}-{os.getpid()}"


_log_lock = threading.Lock()


def log(message):
    """One line on stderr, stamped; the lock keeps lines of concurrent requests whole."""
    at_ms = now_ms()
    stamp = time.strftime("%H:%M:%S", time.gmtime(at_ms // 1000)) + f".{at_ms % 1000:03d}"
    with _log_lock:
        print(f"{stamp} {message}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# The database
# --------------------------------------------------------------------------------------------


# Transaction numbers for the commit journal, from one counter for the whole process: the journal
# tells one commit from the next by (process name, number), so two connections of one process
# (a receiver opens one per request) must never hand out the same number. Nor may two processes
# of one name: a worker restarted after a kill, or two runs of the purge, are named alike. The
# counter starts at the clock in microseconds, which no earlier process of the name can have
# reached (that would take a transaction a microsecond).
_transaction_numbers = itertools.count(time.time_ns() // 1_000)
_transaction_numbers_lock = threading.Lock()


def next_transaction_number():
    with _transaction_numbers_lock:
        return next(_transaction_numbers)


class Database:
    """One SQLite connection, used by one thread only, with explicit write transactions.

    It also defines the two functions the checker's journal triggers call. The transaction
    number must be the same for every statement of one transaction and new for the next one, so
    a new number is taken after every statement that leaves the connection outside a
    transaction (a COMMIT, a ROLLBACK, or a statement run on its own).
    """

    def __init__(self, path, name):
        # isolation_level=None: the sqlite3 module issues no BEGIN of its own; we say exactly
        # where each transaction starts and ends.
        self.connection = sqlite3.connect(path, isolation_level=None, timeout=BUSY_TIMEOUT_MS / 1000)
        self.transaction_number = next_transaction_number()
        self.connection.create_function("commitgap_journal_process", 0, lambda: name)
        self.connection.create_function(
            "commitgap_journal_transaction", 0, lambda: self.transaction_number
        )
        # The busy timeout first, so that switching to WAL waits for a lock instead of failing.
        self.query(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self.query("PRAGMA journal_mode = WAL")
        # FULL: a COMMIT that returned survives a power cut, which is what a 2xx promises.
        self.query("PRAGMA synchronous = FULL")

    def _run(self, sql, params):
        try:
            cursor = self.connection.execute(sql, params)
            # Fetching every row finishes the statement (a RETURNING statement writes as its rows
            # are stepped through).
            rows = cursor.fetchall()
            return rows, cursor.rowcount
        finally:
            if not self.connection.in_transaction:
                self.transaction_number = next_transaction_number()

    def query(self, sql, params=()):
        """Runs one statement and returns its rows."""
        return self._run(sql, params)[0]

    def change(self, sql, params=()):
        """Runs one statement and returns how many rows it changed."""
        return self._run(sql, params)[1]

    @contextmanager
    def write(self):
        """A write transaction. IMMEDIATE takes the write lock now, so two deliveries of one event
        queue here rather than both reading before either writes. An exception rolls back."""
        self.query("BEGIN IMMEDIATE")
        try:
            yield self
        except BaseException:
            self.rollback()
            raise
        self.query("COMMIT")

    def rollback(self):
        """Rolls back the open transaction, if any. A failure means there was none to roll back
        or the connection is gone: either way nothing of ours survives."""
        if self.connection.in_transaction:
            try:
                self.query("ROLLBACK")
            except sqlite3.Error:
                pass

    def close(self):
        self.rollback()
        self.connection.close()


def is_busy(error):
    """Whether an SQLite error only says another process holds the lock (worth a later try)."""
    return isinstance(error, sqlite3.OperationalError) and (
        "locked" in str(error) or "busy" in str(error)
    )
