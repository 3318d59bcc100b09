"""Hand tests of the example service, standard library only.

Run from the repository root:  python3 -m unittest discover examples/python-receiver/tests

They check the pieces one at a time (signatures, bodies, the receiver's transaction, the relay's
answers to each provider reply, the purge, the requeue, the journal functions) and the HTTP
receiver as a process. commitgap-live checks the whole under faults; these say quickly which
piece broke.
"""

import base64
import hashlib
import hmac
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
SERVICE_DIR = os.path.dirname(HERE)
sys.path.insert(0, SERVICE_DIR)

import common  # noqa: E402
import receiver  # noqa: E402
import relay  # noqa: E402
import service  # noqa: E402

# The service's log lines say nothing a failing assertion does not. Each module took its own
# reference to common.log when it imported it, so each one's is silenced.
for module in (common, receiver, relay, service):
    module.log = lambda message: None


def sim_secret(account, generation):
    """The secret commitgap's simulated sender uses (sim/src/signing.rs): SHA-256 of a fixed
    text, written as `whsec_<base64>`. Generation 2 is current, 1 previous, 0 retired."""
    key = hashlib.sha256(f"commitgap-sim endpoint secret/{account}/{generation}".encode()).digest()
    return "whsec_" + base64.b64encode(key).decode()


def sign(secret, webhook_id, timestamp, body):
    key = base64.b64decode(secret[len("whsec_") :])
    tag = hmac.new(key, f"{webhook_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(tag).decode()


def event_body(event_id, kind, order, created_ms, amount=None, account="acct-a"):
    event = {"account": account, "created_ms": created_ms, "id": event_id, "order": order, "type": kind}
    if amount is not None:
        event["amount_cents"] = amount
    return json.dumps(event, separators=(",", ":"), sort_keys=True).encode()


def signed_headers(body, account="acct-a", generation=2, webhook_id="msg_1", timestamp=None):
    timestamp = str(int(time.time()) if timestamp is None else timestamp)
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": timestamp,
        "webhook-signature": sign(sim_secret(account, generation), webhook_id, timestamp, body),
    }


class Fixture:
    """A new database from schema.sql with two accounts and three orders, and a settings file."""

    def __init__(self):
        self.directory = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.directory.name, "shop.sqlite")
        connection = sqlite3.connect(self.path)
        with open(os.path.join(SERVICE_DIR, "schema.sql"), encoding="utf-8") as file:
            connection.executescript(file.read())
        connection.executemany(
            "INSERT INTO sender_accounts (account_id, tenant_id) VALUES (?, ?)",
            [("acct-a", "tenant-a"), ("acct-b", "tenant-b")],
        )
        connection.executemany(
            "INSERT INTO shop_orders (tenant_id, order_ref, status, amount_cents) VALUES (?, ?, 'awaiting_payment', ?)",
            [("tenant-a", "order-1", 1000), ("tenant-a", "order-2", 2000), ("tenant-b", "order-1", 3000)],
        )
        connection.commit()
        connection.close()
        self.settings = os.path.join(self.directory.name, "settings.json")
        with open(self.settings, "w", encoding="utf-8") as file:
            json.dump(
                {
                    "webhook-secrets/acct-a": f"{sim_secret('acct-a', 2)} {sim_secret('acct-a', 1)}",
                    "webhook-secrets/acct-b": f"{sim_secret('acct-b', 2)} {sim_secret('acct-b', 1)}",
                    "webhook-tolerance-s": "300",
                },
                file,
            )

    def rows(self, sql, params=()):
        connection = sqlite3.connect(self.path)
        try:
            return connection.execute(sql, params).fetchall()
        finally:
            connection.close()

    def close(self):
        self.directory.cleanup()


class SignatureAndBodyTest(unittest.TestCase):
    def verify(self, body, headers, account="acct-a", now_s=None):
        keys = [receiver.parse_secret(sim_secret(account, 2)), receiver.parse_secret(sim_secret(account, 1))]
        receiver.verify_signature(
            keys,
            headers["webhook-id"],
            headers["webhook-timestamp"],
            headers["webhook-signature"],
            body,
            time.time() if now_s is None else now_s,
            300,
        )

    def test_current_and_previous_secrets_verify_and_others_do_not(self):
        body = event_body("evt-1", "payment.succeeded", "order-1", 5, 1000)
        self.verify(body, signed_headers(body, generation=2))
        self.verify(body, signed_headers(body, generation=1))
        for headers, tampered in [
            (signed_headers(body, generation=0), body),
            (signed_headers(body), body.replace(b"1000", b"1001")),
            (signed_headers(body, timestamp=int(time.time()) - 301), body),
            (signed_headers(body, timestamp=int(time.time()) + 301), body),
            (dict(signed_headers(body), **{"webhook-signature": ""}), body),
        ]:
            with self.assertRaises(receiver.Refusal) as refused:
                self.verify(tampered, headers)
            self.assertEqual(refused.exception.status, 401)

    def test_a_clock_ahead_within_the_tolerance_is_fine(self):
        body = event_body("evt-1", "order.cancelled", "order-1", 5)
        self.verify(body, signed_headers(body, timestamp=int(time.time()) + 299))

    def test_bodies_are_validated(self):
        good = json.loads(event_body("evt-1", "payment.succeeded", "order-1", 5, 100))
        self.assertEqual(receiver.parse_event(json.dumps(good).encode())["id"], "evt-1")
        bad = [
            dict(good, id=""),
            dict(good, order="o\u0007"),
            dict(good, id="i" * 129),
            dict(good, created_ms=-1),
            dict(good, amount_cents=10**12 + 1),
            dict(good, amount_cents=True),
            dict(good, type="invoice.paid"),
            {k: v for k, v in good.items() if k != "amount_cents"},
        ]
        for event in bad:
            with self.assertRaises(receiver.Refusal, msg=event) as refused:
                receiver.parse_event(json.dumps(event).encode())
            self.assertEqual(refused.exception.status, 422)
        for text in [b"{", b"[]", b'{"amount_cents": NaN}', b"\xff"]:
            with self.assertRaises(receiver.Refusal):
                receiver.parse_event(text)
        # Refunds and cancellations need no amount; the longest names are fine.
        refund = {k: v for k, v in dict(good, type="charge.refunded", order="o" * 128).items() if k != "amount_cents"}
        receiver.parse_event(json.dumps(refund).encode())


class ReceiverTest(unittest.TestCase):
    def setUp(self):
        self.fixture = Fixture()
        self.receiver = receiver.Receiver(self.fixture.path, receiver.ReceiverSettings(self.fixture.settings), "receiver-t")

    def tearDown(self):
        self.fixture.close()

    def deliver(self, body, account="acct-a", **headers):
        return self.receiver.handle(account, signed_headers(body, account=account, **headers), body)

    def order(self, order="order-1", tenant="tenant-a"):
        return self.fixture.rows(
            "SELECT status, amount_cents FROM shop_orders WHERE tenant_id = ? AND order_ref = ?", (tenant, order)
        )[0]

    def test_a_payment_commits_its_record_its_move_and_its_shipment_together(self):
        body = event_body("evt-1", "payment.succeeded", "order-1", 5, 1000)
        self.assertEqual(self.deliver(body)[0], 200)
        self.assertEqual(self.order(), ("paid", 1000))
        jobs = self.fixture.rows("SELECT job_key, request_body, state FROM outbox_jobs")
        self.assertEqual(len(jobs), 1)
        self.assertEqual(jobs[0][0], "tenant-a/order-1/fulfill/v1")
        self.assertEqual(
            json.loads(jobs[0][1]),
            {"tenant": "tenant-a", "order": "order-1", "operation": "fulfill", "version": 1, "amount_cents": 1000},
        )
        # A redelivery under another message id, and a twin event under another id: one shipment.
        self.assertEqual(self.deliver(body, webhook_id="msg_2"), (200, "duplicate"))
        twin = event_body("evt-2", "payment.succeeded", "order-1", 6, 1000)
        self.assertEqual(self.deliver(twin), (200, "taken, no transition"))
        self.assertEqual(len(self.fixture.rows("SELECT * FROM outbox_jobs")), 1)
        self.assertEqual(len(self.fixture.rows("SELECT * FROM processed_events")), 2)

    def test_a_reused_id_with_another_body_is_refused_and_changes_nothing(self):
        self.assertEqual(self.deliver(event_body("evt-1", "order.updated", "order-1", 5, 1500))[0], 200)
        status, _ = self.deliver(event_body("evt-1", "order.updated", "order-1", 6, 1500))
        self.assertEqual(status, 422)
        self.assertEqual(self.order(), ("awaiting_payment", 1500))

    def test_unknown_orders_are_refused_with_no_record_and_other_accounts_forbidden(self):
        status, _ = self.deliver(event_body("evt-1", "payment.succeeded", "order-missing", 5, 500))
        self.assertEqual(status, 422)
        self.assertEqual(self.fixture.rows("SELECT * FROM processed_events"), [])
        # acct-a's event posted to acct-b's endpoint, signed with acct-b's secret.
        body = event_body("evt-1", "payment.succeeded", "order-1", 5, 500, account="acct-a")
        self.assertEqual(self.receiver.handle("acct-b", signed_headers(body, account="acct-b"), body)[0], 403)
        self.assertEqual(self.receiver.handle("acct-x", signed_headers(body, account="acct-x"), body)[0], 401)
        self.assertEqual(self.fixture.rows("SELECT * FROM processed_events"), [])

    def test_the_newest_update_wins_whatever_the_arrival_order(self):
        self.deliver(event_body("evt-2", "order.updated", "order-1", 20, 2222))
        self.deliver(event_body("evt-1", "order.updated", "order-1", 10, 1111))
        self.assertEqual(self.order(), ("awaiting_payment", 2222))
        # The shipment snapshots the amount the order has when it is paid.
        self.deliver(event_body("evt-3", "payment.succeeded", "order-1", 30, 1000))
        self.assertEqual(json.loads(self.fixture.rows("SELECT request_body FROM outbox_jobs")[0][0])["amount_cents"], 2222)

    def test_moves_the_business_does_not_allow_are_taken_and_change_nothing(self):
        self.deliver(event_body("evt-1", "charge.refunded", "order-1", 10))
        self.assertEqual(self.order(), ("refunded", 1000))
        self.assertEqual(self.deliver(event_body("evt-2", "payment.succeeded", "order-1", 5, 1000))[0], 200)
        self.assertEqual(self.order(), ("refunded", 1000))
        self.assertEqual(self.fixture.rows("SELECT * FROM outbox_jobs"), [])
        self.deliver(event_body("evt-3", "payment.succeeded", "order-2", 5, 2000))
        self.assertEqual(self.deliver(event_body("evt-4", "order.cancelled", "order-2", 6))[0], 200)
        self.assertEqual(self.order("order-2"), ("paid", 2000))


class JournalFunctionsTest(unittest.TestCase):
    def test_one_number_per_transaction_and_the_process_name(self):
        fixture = Fixture()
        try:
            setup = sqlite3.connect(fixture.path)
            setup.executescript(
                "CREATE TABLE seen (process TEXT, txn INTEGER, status TEXT);"
                "CREATE TRIGGER t AFTER UPDATE ON shop_orders BEGIN INSERT INTO seen VALUES "
                "(commitgap_journal_process(), commitgap_journal_transaction(), NEW.status); END;"
            )
            setup.close()
            database = common.Database(fixture.path, "relay-9")
            with database.write():
                database.change("UPDATE shop_orders SET status = 'paid' WHERE order_ref = 'order-1'")
                database.change("UPDATE shop_orders SET status = 'refunded' WHERE order_ref = 'order-2'")
            database.change("UPDATE shop_orders SET status = 'cancelled' WHERE tenant_id = 'tenant-b'")
            with self.assertRaises(sqlite3.Error):
                with database.write():
                    database.change("UPDATE shop_orders SET status = 'nonsense'")
            with database.write():
                database.change("UPDATE shop_orders SET status = 'refunded' WHERE order_ref = 'order-1' AND tenant_id = 'tenant-a'")
            database.close()
            # A second connection of the same process (a receiver opens one per request) takes
            # numbers no other connection of the process has used.
            another = common.Database(fixture.path, "relay-9")
            with another.write():
                another.change("UPDATE shop_orders SET status = 'paid' WHERE order_ref = 'order-2'")
            another.close()
            seen = fixture.rows("SELECT process, txn, status FROM seen")
            numbers = [txn for _, txn, _ in seen]
            self.assertEqual({process for process, _, _ in seen}, {"relay-9"})
            self.assertEqual(numbers[0], numbers[1])
            self.assertEqual(len(set(numbers)), 4, seen)
        finally:
            fixture.close()


class FakeProvider:
    """A provider on localhost that answers each POST as the next entry of `script` says:
    ("ok",), ("status", code[, retry_after]), ("slow", seconds) (acts, then answers late).
    Lookups answer from the effects performed."""

    def __init__(self, script):
        self.script = list(script)
        self.requests = []
        self.effects = {}
        provider = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                key = self.headers.get("Idempotency-Key")
                body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
                provider.requests.append(("POST", key, body))
                step = provider.script.pop(0) if provider.script else ("ok",)
                if step[0] == "status":
                    headers = {"Retry-After": str(step[2])} if len(step) > 2 else {}
                    return self.reply(step[1], "{}", headers)
                effect = provider.effects.setdefault(key, f"eff-{len(provider.effects) + 1}")
                if step[0] == "slow":
                    time.sleep(step[1])
                self.reply(200, json.dumps({"effect_id": effect, "replayed": False}))

            def do_GET(self):
                key = self.headers.get("Idempotency-Key")
                provider.requests.append(("GET", key, None))
                if key in provider.effects:
                    return self.reply(200, json.dumps({"effect_id": provider.effects[key]}))
                self.reply(404, "{}")

            def reply(self, status, text, headers=None):
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                try:
                    self.wfile.write(text.encode())
                except OSError:
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


SETTINGS = {
    "call_timeout_ms": 300,
    "lease_ms": 1000,
    "key_lifetime_ms": 3_600_000,
    "backoff_base_ms": 10,
    "backoff_cap_ms": 100,
    "idle_poll_min_ms": 5,
    "idle_poll_max_ms": 20,
    "attempts_max": 5,
    "clock_skew_ms_max": 0,
    "stall_ms_max": 100,
    "provider_act_ms_max": 200,
}


class RelayTest(unittest.TestCase):
    def setUp(self):
        self.fixture = Fixture()
        settings = receiver.ReceiverSettings(self.fixture.settings)
        body = event_body("evt-1", "payment.succeeded", "order-1", 5, 1000)
        receiver.Receiver(self.fixture.path, settings, "receiver-t").handle("acct-a", signed_headers(body), body)

    def tearDown(self):
        self.fixture.close()

    def relay(self, provider, **overrides):
        settings = relay.RelaySettings(dict(SETTINGS, **overrides))
        database = common.Database(self.fixture.path, "relay-t")
        self.addCleanup(database.close)
        return relay.Relay(
            database, relay.Provider(provider.url, settings.call_timeout_ms), settings, "relay-t", threading.Event()
        )

    def run_until_settled(self, relay, bound_s=5):
        deadline = time.monotonic() + bound_s
        while time.monotonic() < deadline:
            if self.job()[0] != common.QUEUED:
                return
            wait_ms = relay.step()
            if wait_ms:
                time.sleep(min(wait_ms, 50) / 1000)
        self.fail(f"the job did not settle: {self.job()}")

    def job(self):
        return self.fixture.rows("SELECT state, attempts, lease_token, dead_reason, effect_id, last_error FROM outbox_jobs")[0]

    def provider(self, script):
        provider = FakeProvider(script)
        self.addCleanup(provider.close)
        return provider

    def test_retries_keep_the_key_and_body_through_409_5xx_timeouts_and_429(self):
        provider = self.provider([("status", 409), ("status", 503), ("slow", 0.5), ("status", 429, 0)])
        relay = self.relay(provider)
        self.run_until_settled(relay)
        state, attempts, token, _, effect, _ = self.job()
        self.assertEqual((state, effect), (common.DELIVERED, "eff-1"))
        posts = [request for request in provider.requests if request[0] == "POST"]
        self.assertEqual(len(posts), 5)
        self.assertEqual({key for _, key, _ in posts}, {"tenant-a/order-1/fulfill/v1"})
        self.assertEqual(len({body for _, _, body in posts}), 1)
        # The 429 gave its attempt back: five sends, four attempts counted.
        self.assertEqual((attempts, token), (4, 5))

    def test_a_permanent_refusal_buries_the_job_and_requeue_brings_it_back(self):
        provider = self.provider([("status", 400)])
        relay = self.relay(provider)
        self.run_until_settled(relay)
        self.assertEqual(self.job()[0], common.DEAD)
        self.assertIn("400", self.job()[3])
        service.run_requeue(type("Args", (), {"database": self.fixture.path})())
        self.assertEqual(self.job()[:2], (common.QUEUED, 0))
        self.run_until_settled(relay)
        self.assertEqual(self.job()[0], common.DELIVERED)

    def test_attempts_run_out_into_a_dead_job_with_the_last_error(self):
        provider = self.provider([("status", 500)] * 10)
        self.run_until_settled(self.relay(provider, attempts_max=3))
        self.assertEqual(self.job()[0], common.DEAD)
        self.assertIn("gave up after 3 attempts", self.job()[3])

    def test_an_old_key_is_looked_up_and_a_known_one_completes_without_a_send(self):
        provider = self.provider([("slow", 0.5)])
        # A lifetime within the margin: every claim looks the key up first.
        relay = self.relay(provider, key_lifetime_ms=1_000, stall_ms_max=1_000, call_timeout_ms=300)
        relay_young = self.relay(provider)
        relay_young.step()  # the first send times out, but the provider acts
        self.assertEqual(self.job()[0], common.QUEUED)
        self.run_until_settled(relay)
        methods = [method for method, _, _ in provider.requests]
        self.assertEqual(methods, ["POST", "GET"])
        self.assertEqual(self.job()[4], "eff-1")

    def test_a_404_while_a_request_may_still_act_waits_before_sending(self):
        provider = self.provider([("status", 503)])
        relay = self.relay(provider, key_lifetime_ms=500, stall_ms_max=500, provider_act_ms_max=500)
        relay.step()  # a send that failed, stamped as sent just now
        self.fixture.rows("SELECT 1")
        connection = sqlite3.connect(self.fixture.path)
        connection.execute("UPDATE outbox_jobs SET next_attempt_ms = 0")
        connection.commit()
        connection.close()
        relay.step()  # looks up (404) and postpones: the send may still act
        # The first claim looked the key up too (it is old from the start here), found nothing
        # and nothing could be acting yet, so it sent.
        self.assertEqual([m for m, _, _ in provider.requests], ["GET", "POST", "GET"])
        self.assertIn("may still act", self.job()[5])
        self.run_until_settled(relay)
        self.assertEqual(self.job()[0], common.DELIVERED)

    def test_a_worker_that_lost_its_lease_is_fenced_out(self):
        provider = self.provider([])
        relay = self.relay(provider)
        self.fixture.rows("SELECT 1")
        claim = relay.claim("tenant-a/order-1/fulfill/v1")
        connection = sqlite3.connect(self.fixture.path)
        connection.execute("UPDATE outbox_jobs SET lease_token = lease_token + 1")
        connection.commit()
        connection.close()
        relay.complete(claim, "eff-stale")
        self.assertEqual(self.job()[0], common.QUEUED)


class PurgeTest(unittest.TestCase):
    def test_only_records_older_than_the_retention_go(self):
        fixture = Fixture()
        try:
            connection = sqlite3.connect(fixture.path)
            now = common.now_ms()
            connection.executemany(
                "INSERT INTO processed_events (account_id, event_id, received_ms, event_sha256) VALUES ('acct-a', ?, ?, 'x')",
                [("old", now - 60_000), ("new", now - 1_000)],
            )
            connection.commit()
            connection.close()
            service.run_purge(type("Args", (), {"database": fixture.path, "older_than_ms": 30_000})())
            self.assertEqual(fixture.rows("SELECT event_id FROM processed_events"), [("new",)])
        finally:
            fixture.close()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ReceiverProcessTest(unittest.TestCase):
    def test_it_serves_refuses_oversized_bodies_and_stops_on_sigterm(self):
        fixture = Fixture()
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, os.path.join(SERVICE_DIR, "service.py"), "receiver", "--port", str(port),
             "--database", fixture.path, "--settings", fixture.settings, "--body-bytes-max", "1000"],
            stderr=subprocess.PIPE,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    urllib.request.urlopen(url + "/healthz", timeout=1)
                    break
                except OSError:
                    time.sleep(0.05)
            body = event_body("evt-1", "payment.succeeded", "order-1", 5, 1000)
            request = urllib.request.Request(url + "/webhooks/acct-a", data=body, headers=signed_headers(body))
            self.assertEqual(urllib.request.urlopen(request, timeout=5).status, 200)
            padded = body + b" " * 1000
            request = urllib.request.Request(url + "/webhooks/acct-a", data=padded, headers=signed_headers(padded))
            with self.assertRaises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=5)
            self.assertEqual(refused.exception.code, 413)
            process.send_signal(signal.SIGTERM)
            self.assertEqual(process.wait(timeout=5), 0)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            process.stderr.close()
            fixture.close()


if __name__ == "__main__":
    unittest.main()
