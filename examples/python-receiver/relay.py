"""The relay: owed shipments out to the provider, each under a fenced lease.

It models one outbox worker. It claims the earliest due job with one compare-and-set that takes a
lease (an owner, a token that only grows, an expiry that outlasts a stall and the provider's
processing bound), looks the key up once the provider may have forgotten it, sends the job's own
key and body outside any transaction, and records what came of it only while its token is still
current. It stops on SIGTERM after the step in hand.

It must not hold a transaction open across a provider call, send any key or body but the ones the
receiver persisted with the job, or write about a job whose lease it no longer holds.
"""

import http.client
import json
import os
import signal
import sqlite3
import threading
import time
import urllib.parse
import uuid

from common import DEAD, DELIVERED, PLANTED_BUG, QUEUED, Database, is_busy, log, now_ms, process_name

# --------------------------------------------------------------------------------------------
# The relay
# --------------------------------------------------------------------------------------------


class RelaySettings:
    """The relay's settings, as the checker (and commitgap's RelaySettings) write them. All
    durations are in milliseconds."""

    REQUIRED = (
        "call_timeout_ms",
        "lease_ms",
        "key_lifetime_ms",
        "backoff_base_ms",
        "backoff_cap_ms",
        "attempts_max",
        "clock_skew_ms_max",
        "stall_ms_max",
    )

    def __init__(self, values):
        missing = [name for name in self.REQUIRED if name not in values]
        if missing:
            raise ValueError(f"the relay settings lack {', '.join(missing)}")
        for name in self.REQUIRED:
            setattr(self, name, int(values[name]))
        self.provider_act_ms_max = int(values.get("provider_act_ms_max", 0))
        self.idle_poll_min_ms = int(values.get("idle_poll_min_ms", 50))
        self.idle_poll_max_ms = int(values.get("idle_poll_max_ms", 1_000))
        if self.backoff_base_ms <= 0 or self.call_timeout_ms <= 0:
            raise ValueError("backoff_base_ms and call_timeout_ms must be positive")

    @classmethod
    def load(cls, path):
        with open(path, encoding="utf-8") as file:
            return cls(json.load(file))

    def lease_held_ms(self):
        """How long a claim (and each extension before a send) lasts. A request may leave up to a
        stall after the lease was last written, and the provider may go on acting on it for its
        processing bound (the reply may take the call timeout): the lease outlasts both, and the
        clocks' skew, so no other worker claims the job while our request can still act."""
        return max(
            self.lease_ms,
            self.stall_ms_max + max(self.call_timeout_ms, self.provider_act_ms_max) + self.clock_skew_ms_max,
        )

    def in_flight_ms(self):
        """How long a request whose outcome we did not learn (a timeout, a 409) may go on acting
        at the provider: we send its key again no sooner."""
        return self.provider_act_ms_max

    def backoff_ms(self, attempts):
        """The wait after `attempts` failed attempts: fourfold each time, up to the cap."""
        exponent = min(max(attempts, 1), 16) - 1
        return min(self.backoff_base_ms * 4**exponent, self.backoff_cap_ms)


class Reply:
    """What came back from the provider: a status and body, or no reply at all (`status` None,
    with why). No reply is ambiguous: the request may or may not have been performed."""

    def __init__(self, status=None, body="", retry_after=None, error=None):
        self.status = status
        self.body = body
        self.retry_after = retry_after
        self.error = error

    def effect_id(self):
        try:
            value = json.loads(self.body).get("effect_id")
            return str(value) if value is not None else None
        except (ValueError, AttributeError):
            return None

    def retry_after_ms(self):
        try:
            return max(0, int(float(self.retry_after) * 1000)) if self.retry_after else None
        except ValueError:
            return None  # an HTTP date: we fall back to our own backoff

    def __str__(self):
        if self.status is None:
            return f"no reply ({self.error})"
        return f"{self.status} {self.body.strip()[:200]}"


class Provider:
    """The shipping provider's HTTP API: POST /effects performs, GET /effects looks a key up."""

    def __init__(self, base_url, timeout_ms):
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"the provider URL {base_url!r} is not http://host:port")
        self.host = parsed.hostname
        self.port = parsed.port or 80
        self.prefix = parsed.path.rstrip("/")
        self.timeout_s = timeout_ms / 1000

    def send(self, key, body):
        return self._call("POST", key, body.encode("utf-8"))

    def lookup(self, key):
        return self._call("GET", key, None)

    def _call(self, method, key, body):
        """One request with a deadline over the whole exchange, not per socket operation: a reply
        that has not come within the call timeout is no reply."""
        deadline = time.monotonic() + self.timeout_s
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout_s)
        try:
            headers = {"Idempotency-Key": key, "Connection": "close"}
            if body is not None:
                headers["Content-Type"] = "application/json"
            connection.request(method, f"{self.prefix}/effects", body=body, headers=headers)
            # The response reads from this socket even after the connection lets go of it.
            sock = connection.sock
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            response = connection.getresponse()
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            text = response.read().decode("utf-8", "replace")
            return Reply(response.status, text, response.getheader("Retry-After"))
        except (OSError, http.client.HTTPException) as error:
            return Reply(error=f"{type(error).__name__}: {error}")
        finally:
            connection.close()


class Claim:
    """A job this worker holds the lease on, with the token every write about it carries."""

    def __init__(self, key, row):
        self.key = key
        (
            self.body,
            self.token,
            self.attempts,
            self.first_attempt_ms,
            self.last_sent_ms,
        ) = row


# Every write about a claim's outcome holds only while the row still carries our token and is
# still owed: zero rows changed means another worker took the lease over (or the operator moved
# the job), and our result is stale.
HELD = f"WHERE job_key = :key AND lease_token = :token AND state = '{QUEUED}'"


class Relay:
    """One relay worker: claim, reconcile, send outside any transaction, record under the lease."""

    def __init__(self, database, provider, settings, worker, stopping):
        self.db = database
        self.provider = provider
        self.settings = settings
        self.worker = worker
        self.stopping = stopping

    def run(self):
        idle_ms = self.settings.idle_poll_min_ms
        while not self.stopping.is_set():
            try:
                wait_ms = self.step()
            except sqlite3.Error as error:
                log(f"{self.worker}: relay step failed: {error}")
                wait_ms = self.settings.idle_poll_min_ms
            if wait_ms is None:
                idle_ms = self.settings.idle_poll_min_ms
                continue
            # Nothing due: poll again, less often the longer we stay idle, but never past the
            # moment the earliest job comes due.
            self.stopping.wait(max(min(wait_ms, idle_ms), 1) / 1000)
            idle_ms = min(idle_ms * 2, self.settings.idle_poll_max_ms)

    def step(self):
        """Processes the earliest due job, if one is due. Returns None after working, else how
        long until the earliest job comes due (in ms)."""
        rows = self.db.query(
            "SELECT job_key, max(next_attempt_ms, coalesce(lease_expires_ms, 0)) AS due_ms "
            f"FROM outbox_jobs WHERE state = '{QUEUED}' ORDER BY due_ms, job_key LIMIT 1"
        )
        if not rows:
            return self.settings.idle_poll_max_ms
        key, due_ms = rows[0]
        if due_ms > now_ms():
            return due_ms - now_ms()
        claim = self.claim(key)
        if claim is None:
            return None  # another worker was first, or the job moved: look again at once
        if self.reconcile(claim):
            self.send(claim)
        return None

    def claim(self, key):
        """Takes the lease if the job is still owed, due and unleased: one statement, so the check
        and the write cannot be split by another worker."""
        with self.db.write():
            now = now_ms()  # read once the write lock is ours
            rows = self.db.query(
                "UPDATE outbox_jobs SET lease_owner = :owner, lease_token = lease_token + 1, "
                "lease_expires_ms = :until, attempts = attempts + 1, "
                "first_attempt_ms = coalesce(first_attempt_ms, :now) "
                f"WHERE job_key = :key AND state = '{QUEUED}' AND next_attempt_ms <= :now "
                "AND coalesce(lease_expires_ms, 0) <= :now "
                "RETURNING request_body, lease_token, attempts, first_attempt_ms, last_sent_ms",
                {"owner": self.worker, "until": now + self.settings.lease_held_ms(), "now": now, "key": key},
            )
        return Claim(key, rows[0]) if rows else None

    def reconcile(self, claim):
        """Whether to send. Once the provider may have forgotten the key (its age nears the key
        lifetime), a send could perform the shipment a second time: look the key up first."""
        s = self.settings
        # The key's age is counted from the first claim. A request decided now may leave after a
        # stall, act until the call times out, and our clock may run behind the one that stamped
        # the first claim: all three widen the margin.
        margin_ms = s.stall_ms_max + s.call_timeout_ms + s.clock_skew_ms_max
        if now_ms() + margin_ms < claim.first_attempt_ms + s.key_lifetime_ms:
            return True
        reply = self.provider.lookup(claim.key)
        log(f"{self.worker}: {claim.key} is old enough to be forgotten; lookup: {reply}")
        if reply.status == 200:
            self.complete(claim, reply.effect_id())
            return False
        if reply.status == 404:
            # 404 says no effect was performed yet. An earlier request of ours may still act
            # (it may have left up to a stall after we stamped it, and the provider may act for
            # its processing bound), so the 404 means "never" only once that time has passed.
            if claim.last_sent_ms is not None:
                quiet_from = claim.last_sent_ms + s.stall_ms_max + s.call_timeout_ms + s.provider_act_ms_max
                if now_ms() < quiet_from:
                    self.postpone(claim, quiet_from, "lookup 404 while an earlier request may still act")
                    return False
            return True
        if reply.status == 429:
            self.wait_out_rate_limit(claim, reply.retry_after_ms())
            return False
        self.retry_later(claim, f"lookup: {reply}", 0)
        return False

    def send(self, claim):
        """Sends the persisted body under the persisted key, outside any transaction, then records
        what came of it under the lease."""
        # Renew the lease and stamp the send first, so that the lease covers this request for
        # its whole life and a later lookup knows when it left. If we lost the lease, we send
        # nothing.
        if not self.fenced(
            f"UPDATE outbox_jobs SET lease_expires_ms = :until, last_sent_ms = :now {HELD}",
            claim,
            until=now_ms() + self.settings.lease_held_ms(),
            now=now_ms(),
        ):
            return
        key = claim.key
        if PLANTED_BUG == "fresh-key-per-attempt":
            key = str(uuid.uuid4())  # PLANTED BUG: a new key per attempt
        reply = self.provider.send(key, claim.body)
        self.record_reply(claim, reply)

    def record_reply(self, claim, reply):
        status = reply.status
        if status is not None and 200 <= status < 300:
            self.complete(claim, reply.effect_id())
        elif status == 429:
            self.wait_out_rate_limit(claim, reply.retry_after_ms())
        elif status == 409:
            # Another request with our key is still in progress: not done, and it may still act,
            # so leave the key alone for the provider's processing bound.
            self.retry_later(claim, "provider is still processing this key (409)", self.settings.in_flight_ms())
        elif status is None:
            # No reply: the request may have been performed, or may still be. Retry later with
            # the same key, once it can no longer be acting.
            self.retry_later(claim, str(reply), self.settings.in_flight_ms())
        elif status in (408, 425) or status >= 500:
            self.retry_later(claim, f"provider answered {reply}", 0)
        elif 400 <= status < 500:
            self.bury(claim, f"provider refused the request for good: {reply}")
        else:
            self.retry_later(claim, f"unexpected answer {reply}", 0)

    # What we write about a claim's outcome. Each is fenced by the lease token.

    def complete(self, claim, effect_id):
        if self.fenced(
            f"UPDATE outbox_jobs SET state = '{DELIVERED}', effect_id = :effect, "
            f"completed_ms = :now, lease_expires_ms = NULL, last_error = NULL {HELD}",
            claim,
            effect=effect_id,
            now=now_ms(),
        ):
            log(f"{self.worker}: {claim.key} delivered ({effect_id})")

    def retry_later(self, claim, error, wait_ms_min):
        """Gives the lease up and schedules the next attempt after the backoff (and no sooner
        than `wait_ms_min`), or buries the job once its attempts are spent."""
        if claim.attempts >= self.settings.attempts_max:
            self.bury(claim, f"gave up after {claim.attempts} attempts; last error: {error}")
            return
        wait_ms = max(self.settings.backoff_ms(claim.attempts), wait_ms_min)
        self.fenced(
            "UPDATE outbox_jobs SET next_attempt_ms = :next, last_error = :error, "
            f"lease_expires_ms = NULL {HELD}",
            claim,
            next=now_ms() + wait_ms,
            error=error,
        )
        log(f"{self.worker}: {claim.key} attempt {claim.attempts} failed ({error}); again in {wait_ms} ms")

    def postpone(self, claim, not_before_ms, why):
        """Gives the lease up until `not_before_ms` without spending an attempt: nothing failed."""
        self.fenced(
            "UPDATE outbox_jobs SET next_attempt_ms = :next, last_error = :error, "
            f"lease_expires_ms = NULL, attempts = attempts - 1 {HELD}",
            claim,
            next=not_before_ms,
            error=why,
        )

    def wait_out_rate_limit(self, claim, retry_after_ms):
        """A 429 was refused before the provider looked at it: wait as long as it said (at most
        the backoff cap), and give the attempt back, so a long limit never buries a job."""
        if retry_after_ms is None:
            wait_ms = self.settings.backoff_ms(claim.attempts)
        else:
            wait_ms = min(retry_after_ms, max(self.settings.backoff_cap_ms, 1))
        self.fenced(
            "UPDATE outbox_jobs SET next_attempt_ms = :next, last_error = :error, "
            f"lease_expires_ms = NULL, attempts = attempts - 1 {HELD}",
            claim,
            next=now_ms() + wait_ms,
            error=f"provider is rate limiting (429), waiting {wait_ms} ms",
        )

    def bury(self, claim, reason):
        """Moves the job to dead with a reason an operator can act on (see `requeue`)."""
        self.fenced(
            f"UPDATE outbox_jobs SET state = '{DEAD}', dead_reason = :reason, lease_expires_ms = NULL {HELD}",
            claim,
            reason=reason,
        )
        log(f"{self.worker}: {claim.key} is dead: {reason}")

    def fenced(self, sql, claim, **params):
        """Runs one write about `claim` in its own transaction; whether it still held the lease.
        The provider has answered already, so a busy database is tried a few times: giving up
        only costs a redundant (deduplicated) call once the lease ends."""
        params.update(key=claim.key, token=claim.token)
        for attempt in range(1, 5):
            try:
                with self.db.write():
                    changed = self.db.change(sql, params)
                if changed == 0:
                    log(f"{self.worker}: fenced out of {claim.key} (token {claim.token} is no longer current)")
                return changed == 1
            except sqlite3.Error as error:
                if not is_busy(error) or attempt == 4:
                    raise
                time.sleep(0.005 * attempt)
        return False


def run_relay(args):
    settings = RelaySettings.load(args.relay_settings)
    worker = args.worker or process_name("relay")
    stopping = threading.Event()

    def stop(signum, frame):
        # The step in hand finishes (a provider call is bounded by its timeout); no new one starts.
        stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    database = Database(args.database, os.environ.get("COMMITGAP_PROCESS") or worker)
    provider = Provider(args.provider, settings.call_timeout_ms)
    log(
        f"{worker} relaying to {args.provider}, lease {settings.lease_held_ms()} ms"
        + (f" (planted bug: {PLANTED_BUG})" if PLANTED_BUG else "")
    )
    try:
        Relay(database, provider, settings, worker, stopping).run()
    finally:
        database.close()
    log(f"{worker} stopped")
    return 0
