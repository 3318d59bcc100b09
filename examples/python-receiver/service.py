#!/usr/bin/env python3
"""A shop's payment webhooks and its shipping outbox, in Python's standard library only.

Four subcommands, each its own process:

  receiver  takes signed payment webhooks (Standard Webhooks) on POST /webhooks/<account> and,
            in ONE SQLite transaction, records the event, moves the order and, for a payment,
            writes the shipment it owes into the outbox;
  relay     delivers each owed shipment to the provider under a fenced lease, with the job's own
            key and body on every attempt, outside any transaction;
  purge     deletes event records older than a retention;
  requeue   the operator's tool: moves every dead job back to owed.

The rules of the business (the `payments` domain of commitgap):
  - an order moves awaiting_payment -> paid | refunded | cancelled, and paid -> refunded;
    refunded and cancelled are final; an event that would move it any other way is taken (2xx)
    and changes nothing;
  - a payment of an order awaiting it owes one shipment, operation <tenant>/<order>/fulfill/v1,
    whose body snapshots the order's amount at that moment;
  - the newest amount update by creation time decides the amount, whatever the arrival order;
  - an event for an unknown account or order is refused with 422 and leaves nothing behind.

Every connection is in WAL mode with a busy timeout, `synchronous=FULL`, no implicit
transactions (isolation_level=None) and explicit BEGIN IMMEDIATE / COMMIT / ROLLBACK, and
defines the two SQL functions of commitgap's commit journal (see docs/services.md).

This file is the entry point `service.toml` runs (`python3 service.py <command> ...`): the
command line, the table of planted bugs, and the two one-shot commands, purge and requeue. The
rest lives beside it: common.py (the clock, the log, the database), receiver.py and relay.py. It
must not hold the receiver's or the relay's logic, and no module may import it: run as a script
it is `__main__`, and an import would load a second copy of it.

A planted bug for the checker to find is switched on with the environment variable
PLANTED_BUG (see PLANTED_BUGS below); without it the service is what we believe is correct.
"""

import argparse
import sys

from common import DEAD, PLANTED_BUG, QUEUED, Database, log, now_ms, process_name
from receiver import run_receiver
from relay import run_relay

# --------------------------------------------------------------------------------------------
# The planted bugs
# --------------------------------------------------------------------------------------------

# Bugs we plant on purpose to see the checker catch them. Each is a mistake teams really make.
PLANTED_BUGS = {
    # The relay mints a new idempotency key on every attempt instead of sending the job's
    # persisted key, so a retry after a timeout or a lost reply performs the shipment again.
    "fresh-key-per-attempt": "the relay sends a new random Idempotency-Key on every attempt",
    # The receiver commits the event and the order's move to paid, then writes the shipment in
    # a second transaction: a crash or kill between the two loses the shipment for good.
    "enqueue-after-commit": "the receiver writes the outbox job in its own transaction after the commit",
}


# --------------------------------------------------------------------------------------------
# The purge and the operator's requeue
# --------------------------------------------------------------------------------------------


def run_purge(args):
    """Deletes the event records received more than `--older-than-ms` ago. Only records: the
    orders and jobs are what keep a late redelivery from owing a second shipment once its record
    is gone."""
    database = Database(args.database, process_name("purge"))
    try:
        with database.write():
            cutoff_ms = now_ms() - args.older_than_ms  # read once the write lock is ours
            deleted = database.change("DELETE FROM processed_events WHERE received_ms < ?", (cutoff_ms,))
    finally:
        database.close()
    log(f"purged {deleted} event records received before {cutoff_ms}")
    return 0


def run_requeue(args):
    """Moves every dead job back to owed, due now, with a fresh budget of attempts. Its key, body,
    first attempt and lease token stay: the provider may have seen the key, and tokens only grow."""
    database = Database(args.database, process_name("operator"))
    try:
        with database.write():
            requeued = database.change(
                f"UPDATE outbox_jobs SET state = '{QUEUED}', attempts = 0, next_attempt_ms = :now, "
                "lease_expires_ms = NULL, "
                "last_error = 'requeued by operator after: ' || coalesce(dead_reason, ''), "
                f"dead_reason = NULL WHERE state = '{DEAD}'",
                {"now": now_ms()},
            )
    finally:
        database.close()
    log(f"requeued {requeued} dead jobs")
    return 0


# --------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------


def arguments(argv):
    parser = argparse.ArgumentParser(
        description="A shop's payment webhook receiver and shipping outbox relay on SQLite."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    receiver = commands.add_parser("receiver", help="serve POST /webhooks/<account> and GET /healthz")
    receiver.add_argument("--port", type=int, required=True, help="the port to listen on")
    receiver.add_argument("--host", default="127.0.0.1", help="the address to listen on")
    receiver.add_argument("--database", required=True, help="the SQLite database file")
    receiver.add_argument(
        "--settings", required=True, help="a JSON object: webhook-secrets/<account>, webhook-tolerance-s, ..."
    )
    receiver.add_argument(
        "--body-bytes-max",
        type=int,
        help="the largest body taken, when the settings file does not say (default 65536)",
    )

    relay = commands.add_parser("relay", help="deliver owed shipments to the provider until SIGTERM")
    relay.add_argument("--database", required=True, help="the SQLite database file")
    relay.add_argument("--provider", required=True, help="the provider's base URL, http://host:port")
    relay.add_argument("--worker", help="this worker's name, written as the lease owner")
    relay.add_argument("--relay-settings", required=True, help="a JSON file of the relay's settings")

    purge = commands.add_parser("purge", help="delete event records older than a retention, once")
    purge.add_argument("--database", required=True, help="the SQLite database file")
    purge.add_argument("--older-than-ms", type=int, required=True, help="the retention, in milliseconds")

    requeue = commands.add_parser("requeue", help="move every dead job back to owed, once")
    requeue.add_argument("--database", required=True, help="the SQLite database file")
    return parser.parse_args(argv)


def main(argv=None):
    args = arguments(argv)
    if PLANTED_BUG and PLANTED_BUG not in PLANTED_BUGS:
        print(f"PLANTED_BUG={PLANTED_BUG!r}: the planted bugs are {', '.join(PLANTED_BUGS)}", file=sys.stderr)
        return 2
    run = {
        "receiver": run_receiver,
        "relay": run_relay,
        "purge": run_purge,
        "requeue": run_requeue,
    }[args.command]
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
