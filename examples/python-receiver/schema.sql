-- The schema of the Python example service: a shop that takes payment webhooks and ships paid
-- orders through a transactional outbox. SQLite, run once on a new, empty database.
--
-- Four tables, each guarding one boundary:
--   sender_accounts   which tenant's orders each webhook sender account may touch;
--   processed_events  one row per event taken, (account_id, event_id): the only table the purge
--                     deletes from;
--   shop_orders       the business state, changed only through guarded transitions;
--   outbox_jobs       work owed to the shipping provider, keyed by the business operation.

CREATE TABLE sender_accounts (
    account_id TEXT NOT NULL PRIMARY KEY,
    tenant_id  TEXT NOT NULL
);

-- What counts as one event is the body's (account, id): the sender's `webhook-id` header names
-- a message, and a fan-out delivers one event under several of them. The digest is of the event
-- as JSON with sorted keys, so an id reused for another event is refused, while the same event
-- written with other spacing or key order is still a duplicate.
CREATE TABLE processed_events (
    account_id       TEXT    NOT NULL,
    event_id         TEXT    NOT NULL,
    received_ms      INTEGER NOT NULL,
    event_sha256     TEXT    NOT NULL,
    first_webhook_id TEXT,
    PRIMARY KEY (account_id, event_id)
);
CREATE INDEX processed_events_by_age ON processed_events (received_ms);

-- `amount_as_of_ms` is the creation time of the update that set the amount (0: the amount the
-- order was created with), so that an older update arriving after a newer one changes nothing.
-- The status guard, not the receipts, is what keeps a second shipment out once receipts are
-- purged: a payment only moves an order that still awaits one.
CREATE TABLE shop_orders (
    tenant_id       TEXT    NOT NULL,
    order_ref       TEXT    NOT NULL,
    status          TEXT    NOT NULL
                    CHECK (status IN ('awaiting_payment', 'paid', 'refunded', 'cancelled')),
    amount_cents    INTEGER NOT NULL,
    amount_as_of_ms INTEGER NOT NULL DEFAULT 0,
    updated_ms      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, order_ref)
);

-- One row per business operation (`<tenant>/<order>/fulfill/v1`), never per event, so that every
-- event about one payment meets the same row. The request body is written once, when the job is
-- owed, and sent as it is on every attempt; the lease (owner, a token that only grows, an expiry)
-- lets exactly one relay worker act on a job at a time and fences out a worker that lost it.
CREATE TABLE outbox_jobs (
    job_key          TEXT    NOT NULL PRIMARY KEY,
    request_body     TEXT    NOT NULL,
    state            TEXT    NOT NULL CHECK (state IN ('queued', 'delivered', 'dead_letter')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_expires_ms INTEGER,
    next_attempt_ms  INTEGER NOT NULL,
    -- When the job was first claimed: no later than the provider's first sight of its key, so
    -- the key's age (and when the provider may forget it) is counted from here.
    first_attempt_ms INTEGER,
    -- When a request with the key last left (or was about to leave): an earlier request may still
    -- be acting at the provider for a while after it.
    last_sent_ms     INTEGER,
    last_error       TEXT,
    dead_reason      TEXT,
    effect_id        TEXT,
    created_ms       INTEGER NOT NULL,
    completed_ms     INTEGER
);
CREATE INDEX outbox_jobs_due ON outbox_jobs (state, next_attempt_ms);

-- The provider fingerprints the body under the key: changing either after the first attempt
-- would turn a retry into a different request.
CREATE TRIGGER outbox_jobs_request_is_immutable
BEFORE UPDATE OF job_key, request_body ON outbox_jobs
WHEN NEW.job_key IS NOT OLD.job_key OR NEW.request_body IS NOT OLD.request_body
BEGIN
    SELECT RAISE(ABORT, 'outbox_jobs.job_key and request_body are immutable');
END;
