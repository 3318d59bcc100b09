"""The receiver: signed payment webhooks in, committed state out.

It models the shop's Standard Webhooks endpoint (POST /webhooks/<account>, GET /healthz). It
verifies the signature with the endpoint's current or previous secret, refuses a body over the
limit before reading it, validates the event and then, in ONE SQLite transaction, records the
event, moves the order by the business's rules and, for a payment, writes the shipment it owes
into the outbox, keyed by the operation and with the amount snapshotted.

It must not answer 2xx before COMMIT returned, leave anything behind for a delivery it refuses,
or split the record, the move and the shipment over two transactions. It must not call the
provider or touch a job once written: delivering is relay.py's.
"""

import base64
import hashlib
import hmac
import json
import re
import signal
import sqlite3
import threading
import time
import unicodedata
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from common import PLANTED_BUG, QUEUED, Database, log, now_ms, process_name

# --------------------------------------------------------------------------------------------
# Constants of the contract
# --------------------------------------------------------------------------------------------

PAYMENT_SUCCEEDED = "payment.succeeded"
CHARGE_REFUNDED = "charge.refunded"
ORDER_CANCELLED = "order.cancelled"
ORDER_UPDATED = "order.updated"
EVENT_TYPES = (PAYMENT_SUCCEEDED, CHARGE_REFUNDED, ORDER_CANCELLED, ORDER_UPDATED)
# Payments and updates carry the amount; refunds and cancellations need none.
TYPES_WITH_AMOUNT = (PAYMENT_SUCCEEDED, ORDER_UPDATED)

# The longest id, account or order name we take, and the largest amount (ten billion in minor
# units): bounds a hostile sender cannot push us past.
NAME_CHARS_MAX = 128
AMOUNT_CENTS_MAX = 1_000_000_000_000

SECRET_PREFIX = "whsec_"
SECRETS_SETTING_PREFIX = "webhook-secrets/"
TOLERANCE_SETTING = "webhook-tolerance-s"
BODY_BYTES_MAX_SETTING = "webhook-body-bytes-max"
# The Standard Webhooks libraries' tolerance, and a body bound far above any genuine event.
DEFAULT_TOLERANCE_S = 300
DEFAULT_BODY_BYTES_MAX = 64 * 1024


# --------------------------------------------------------------------------------------------
# The receiver
# --------------------------------------------------------------------------------------------


class Refusal(Exception):
    """A delivery we answer with a 4xx: it can never succeed as it is, and nothing was written."""

    def __init__(self, status, reason):
        super().__init__(reason)
        self.status = status
        self.reason = reason


class ReceiverSettings:
    """The endpoints' secrets, the timestamp tolerance and the body limit, read once at start.

    A secret that does not parse is a configuration mistake: we refuse to start rather than
    refuse every delivery with no hint why.
    """

    def __init__(self, path, body_bytes_max=None):
        with open(path, encoding="utf-8") as file:
            settings = json.load(file)
        self.secrets = {}
        for name, value in settings.items():
            if name.startswith(SECRETS_SETTING_PREFIX):
                account = name[len(SECRETS_SETTING_PREFIX) :]
                self.secrets[account] = [parse_secret(text) for text in str(value).split()]
        self.tolerance_s = int(settings.get(TOLERANCE_SETTING, DEFAULT_TOLERANCE_S))
        # The settings file is the deployment's own word; the command line is a fallback.
        configured = settings.get(BODY_BYTES_MAX_SETTING)
        if configured is not None:
            self.body_bytes_max = int(configured)
        elif body_bytes_max is not None:
            self.body_bytes_max = int(body_bytes_max)
        else:
            self.body_bytes_max = DEFAULT_BODY_BYTES_MAX
        if self.tolerance_s < 0 or self.body_bytes_max < 0:
            raise ValueError("the tolerance and the body limit must be zero or more")


def parse_secret(text):
    """The key bytes of a `whsec_<base64>` secret. Anything else is refused, not guessed at."""
    if not text.startswith(SECRET_PREFIX):
        raise ValueError(f"a signing secret does not start with {SECRET_PREFIX!r}")
    key = base64.b64decode(text[len(SECRET_PREFIX) :], validate=True)
    if not key:
        raise ValueError("a signing secret has no key bytes")
    return key


def verify_signature(keys, webhook_id, timestamp, signatures, body, now_s, tolerance_s):
    """Checks a Standard Webhooks signature, raising a 401 Refusal if it does not verify.

    The signed content is `{webhook-id}.{webhook-timestamp}.{body}` over the raw body bytes; any
    `v1` entry made with any of the endpoint's keys (current or previous, during a rotation) is
    genuine. The timestamp is signed too, and must be within the tolerance either way: the
    sender's clock may run ahead of ours as well as behind.
    """
    if not keys:
        raise Refusal(401, "no signing secret is configured for this endpoint")
    if not webhook_id or not timestamp or not signatures.strip():
        raise Refusal(401, "a webhook-id, webhook-timestamp or webhook-signature header is missing")
    if not re.fullmatch(r"-?[0-9]{1,20}", timestamp):
        raise Refusal(401, "webhook-timestamp is not a whole number of seconds")
    if abs(now_s - int(timestamp)) > tolerance_s:
        raise Refusal(401, "webhook-timestamp is outside the tolerance")
    signed = webhook_id.encode() + b"." + timestamp.encode() + b"." + body
    expected = [hmac.new(key, signed, hashlib.sha256).digest() for key in keys]
    for entry in signatures.split():
        version, _, encoded = entry.partition(",")
        if version != "v1":
            continue  # a newer scheme we do not know yet sits beside v1
        try:
            given = base64.b64decode(encoded, validate=True)
        except ValueError:
            continue
        # compare_digest takes as long whichever byte differs: no timing oracle.
        if any(hmac.compare_digest(given, tag) for tag in expected):
            return
    raise Refusal(401, "no v1 signature matches the endpoint's secrets")


def _refuse_constant(name):
    raise ValueError(f"{name} is not a JSON number we take")


def _is_int(value):
    # bool is an int in Python; JSON's true is not an amount.
    return isinstance(value, int) and not isinstance(value, bool)


def parse_event(body):
    """Reads and validates an event body, raising a 422 Refusal for anything we would not apply."""
    try:
        event = json.loads(body.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as error:
        raise Refusal(422, f"the body is not a JSON event: {error}") from None
    if not isinstance(event, dict):
        raise Refusal(422, "the body is not a JSON object")
    for field in ("id", "account", "order"):
        value = event.get(field)
        if not isinstance(value, str) or not value:
            raise Refusal(422, f"{field} must be a non-empty string")
        if len(value) > NAME_CHARS_MAX:
            raise Refusal(422, f"{field} is longer than {NAME_CHARS_MAX} characters")
        if any(unicodedata.category(char) == "Cc" for char in value):
            raise Refusal(422, f"{field} holds a control character")
    if event.get("type") not in EVENT_TYPES:
        raise Refusal(422, f"unsupported event type {event.get('type')!r}")
    created_ms = event.get("created_ms")
    if not _is_int(created_ms) or created_ms < 0:
        raise Refusal(422, "created_ms must be a whole number, zero or more")
    amount = event.get("amount_cents")
    if amount is not None and (not _is_int(amount) or amount > AMOUNT_CENTS_MAX):
        raise Refusal(422, f"amount_cents must be a whole number no larger than {AMOUNT_CENTS_MAX}")
    if event["type"] in TYPES_WITH_AMOUNT and (amount is None or amount <= 0):
        raise Refusal(422, f"{event['type']} needs a positive amount_cents")
    return event


def event_digest(event):
    """The digest stored with the event's record: of the event's JSON with sorted keys, so that
    the same event written with other spacing is recognised and an id reused for another event
    is not."""
    canonical = json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def fulfillment_key(tenant, order):
    """The business operation a payment owes: one shipment, version 1. The key is the operation's,
    never the event's, so that twin events and redeliveries meet the same row."""
    return f"{tenant}/{order}/fulfill/v1"


def fulfillment_body(tenant, order, amount_cents):
    """The shipment request as the provider reads it: an immutable snapshot, written once."""
    return json.dumps(
        {
            "tenant": tenant,
            "order": order,
            "operation": "fulfill",
            "version": 1,
            "amount_cents": amount_cents,
        },
        separators=(",", ":"),
    )


# The guarded statements that apply an event. Each changes the order only if the move is one the
# business allows from the order's present state, so a late, repeated or racing event finds
# nothing to move. A payment returns the amount it snapshots into the shipment.
TRANSITIONS = {
    PAYMENT_SUCCEEDED: "UPDATE shop_orders SET status = 'paid', updated_ms = :now "
    "WHERE tenant_id = :tenant AND order_ref = :order AND status = 'awaiting_payment' "
    "RETURNING amount_cents",
    CHARGE_REFUNDED: "UPDATE shop_orders SET status = 'refunded', updated_ms = :now "
    "WHERE tenant_id = :tenant AND order_ref = :order "
    "AND status IN ('awaiting_payment', 'paid') RETURNING amount_cents",
    ORDER_CANCELLED: "UPDATE shop_orders SET status = 'cancelled', updated_ms = :now "
    "WHERE tenant_id = :tenant AND order_ref = :order AND status = 'awaiting_payment' "
    "RETURNING amount_cents",
    # The newest update by creation time wins, whatever the arrival order: an update applies
    # only if it was created after the one that set the amount.
    ORDER_UPDATED: "UPDATE shop_orders SET amount_cents = :amount, amount_as_of_ms = :created, "
    "updated_ms = :now WHERE tenant_id = :tenant AND order_ref = :order "
    "AND amount_as_of_ms < :created RETURNING amount_cents",
}

ENQUEUE = (
    "INSERT INTO outbox_jobs (job_key, request_body, state, next_attempt_ms, created_ms) "
    f"VALUES (:key, :body, '{QUEUED}', :now, :now) ON CONFLICT (job_key) DO NOTHING"
)


class Receiver:
    """Turns one verified delivery into committed state. Answers 2xx only after COMMIT returned."""

    def __init__(self, database_path, settings, name):
        self.database_path = database_path
        self.settings = settings
        self.name = name

    def handle(self, endpoint, headers, body):
        """The answer to one delivery to `endpoint`'s URL: a (status, reason) pair."""
        try:
            keys = self.settings.secrets.get(endpoint, [])
            verify_signature(
                keys,
                headers.get("webhook-id", ""),
                headers.get("webhook-timestamp", ""),
                headers.get("webhook-signature", ""),
                body,
                time.time(),
                self.settings.tolerance_s,
            )
            event = parse_event(body)
            # The body is the sender's to write, the endpoint's secret is not: a verified event
            # may only speak for the account whose endpoint it was posted to.
            if event["account"] != endpoint:
                raise Refusal(403, "the event names another account than the endpoint's")
            return self.record(event, headers.get("webhook-id", ""))
        except Refusal as refusal:
            return refusal.status, refusal.reason
        except sqlite3.Error as error:
            # Nothing was committed (the transaction rolled back): ask for a later try.
            return 503, f"database: {error}"

    def record(self, event, webhook_id):
        """Records the event and applies it, all in one transaction, on a connection of this
        request's own thread."""
        database = Database(self.database_path, self.name)
        try:
            with database.write():
                outcome, owed = self.apply(database, event, webhook_id)
            if owed is not None and PLANTED_BUG == "enqueue-after-commit":
                # PLANTED BUG: the shipment is written after the payment committed, in a
                # transaction of its own.
                with database.write():
                    database.change(ENQUEUE, owed)
            return 200, outcome
        finally:
            database.close()

    def apply(self, database, event, webhook_id):
        """Inside the open transaction: the event's record, then its move. Returns the answer's
        reason and, for the planted bug only, the shipment left to write."""
        rows = database.query(
            "SELECT tenant_id FROM sender_accounts WHERE account_id = ?", (event["account"],)
        )
        if not rows:
            raise Refusal(422, f"unknown account {event['account']!r}")
        tenant = rows[0][0]
        # Read the clock once the write lock is ours, so what we stamp is when it happened.
        now = now_ms()
        digest = event_digest(event)
        inserted = database.query(
            "INSERT INTO processed_events (account_id, event_id, received_ms, event_sha256, "
            "first_webhook_id) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (account_id, event_id) DO NOTHING RETURNING 1",
            (event["account"], event["id"], now, digest, webhook_id or None),
        )
        if not inserted:
            stored = database.query(
                "SELECT event_sha256 FROM processed_events WHERE account_id = ? AND event_id = ?",
                (event["account"], event["id"]),
            )
            if stored and stored[0][0] != digest:
                raise Refusal(422, f"event {event['id']!r} was already taken with another body")
            # Taken before, by this or another delivery: its work committed with its record.
            return "duplicate", None
        params = {
            "tenant": tenant,
            "order": event["order"],
            "now": now,
            "amount": event.get("amount_cents"),
            "created": event["created_ms"],
        }
        moved = database.query(TRANSITIONS[event["type"]], params)
        if not moved:
            exists = database.query(
                "SELECT 1 FROM shop_orders WHERE tenant_id = ? AND order_ref = ?",
                (tenant, event["order"]),
            )
            if not exists:
                raise Refusal(422, f"unknown order {event['order']!r} of tenant {tenant!r}")
            # A move the business does not allow from here (a late cancellation of a paid
            # order, an older amount): taken, and nothing changes.
            return "taken, no transition", None
        if event["type"] != PAYMENT_SUCCEEDED:
            return "applied", None
        # The order moved to paid: the shipment it owes commits with the move and the record.
        owed = {
            "key": fulfillment_key(tenant, event["order"]),
            "body": fulfillment_body(tenant, event["order"], moved[0][0]),
            "now": now,
        }
        if PLANTED_BUG == "enqueue-after-commit":
            return "applied", owed
        database.change(ENQUEUE, owed)
        return "applied, shipment owed", None


WEBHOOK_PATH = re.compile(r"^/webhooks/([^/?#]+)$")
# How much of a refused oversized body we read and throw away, so that a client that writes its
# whole request before reading gets our 413 rather than a reset connection.
DRAIN_BYTES_MAX = 1 << 20


class WebhookHandler(BaseHTTPRequestHandler):
    """HTTP/1.0, one request per connection: nothing can keep a connection open past its answer,
    so a stop waits only for requests actually in flight."""

    protocol_version = "HTTP/1.0"
    # A client must send its request within this many seconds, or its thread gives up on it.
    timeout = 10
    server_version = "python-receiver"

    def do_GET(self):
        if self.path == "/healthz":
            self.answer(200, "ok")
        else:
            self.answer(404, "not found")

    def do_POST(self):
        match = WEBHOOK_PATH.match(self.path)
        if not match:
            self.answer(404, "not found")
            return
        endpoint = urllib.parse.unquote(match.group(1))
        receiver = self.server.receiver
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.answer(411, "a Content-Length is required")
            return
        if length < 0:
            self.answer(400, "a negative Content-Length")
            return
        if length > receiver.settings.body_bytes_max:
            # Refused before it is read into memory, let alone verified or parsed.
            self.drain(length)
            self.answer(413, f"the body is over {receiver.settings.body_bytes_max} bytes")
            return
        try:
            body = self.rfile.read(length)
        except OSError:
            self.answer(408, "the body did not arrive in time")
            return
        if len(body) < length:
            self.answer(400, "the body ended early")
            return
        headers = {name: self.headers.get(name, "") for name in ("webhook-id", "webhook-timestamp", "webhook-signature")}
        status, reason = receiver.handle(endpoint, headers, body)
        log(f"{receiver.name} {endpoint} {headers['webhook-id']}: {status} {reason}")
        self.answer(status, reason)

    def drain(self, length):
        remaining = min(length, DRAIN_BYTES_MAX)
        try:
            while remaining > 0:
                chunk = self.rfile.read(min(remaining, 65536))
                if not chunk:
                    return
                remaining -= len(chunk)
        except OSError:
            pass

    def answer(self, status, reason):
        payload = (json.dumps({"status": status, "reason": reason}) + "\n").encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(payload)
        except OSError:
            # The client hung up: it will retry, and what we committed is already committed.
            pass

    def log_message(self, format, *args):
        # Our own line per delivery says more; the access log would double the log's size.
        pass


class ReceiverServer(ThreadingHTTPServer):
    # A thread per request, and not a daemon one: closing the server waits for the requests in
    # flight, so a stop never cuts a transaction off between its work and its answer.
    daemon_threads = False
    block_on_close = True
    allow_reuse_address = True


def run_receiver(args):
    name = process_name("receiver")
    settings = ReceiverSettings(args.settings, args.body_bytes_max)
    # Open once before serving: a database we cannot open should stop us before we say ready.
    Database(args.database, name).close()
    server = ReceiverServer((args.host, args.port), WebhookHandler)
    server.receiver = Receiver(args.database, settings, name)

    def stop(signum, frame):
        # shutdown() waits for serve_forever() to return, which runs on this very thread: ask
        # from another one.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log(f"{name} listening on {args.host}:{args.port}" + (f" (planted bug: {PLANTED_BUG})" if PLANTED_BUG else ""))
    server.serve_forever(poll_interval=0.1)
    server.server_close()  # joins the request threads still running
    log(f"{name} stopped")
    return 0
