-- axum-shop's schema: a shop that takes payment webhooks and asks its fulfillment provider to
-- ship paid orders through a transactional outbox. Run once, on a new and empty SQLite file.
--
-- merchant_accounts     which tenant's orders each webhook sender account may touch;
-- payment_inbox         one row per event taken, keyed by (sender account, event id): the only
--                       table the purge deletes from;
-- customer_orders       the business state, moved only by guarded UPDATEs;
-- fulfillment_requests  what the shop owes the provider, one row per business operation.
--
-- Every table is an ordinary rowid table (no WITHOUT ROWID): a commit journal, or any tool that
-- follows rows by rowid, can then see each change.

CREATE TABLE merchant_accounts (
    account_code TEXT NOT NULL PRIMARY KEY,
    tenant_code  TEXT NOT NULL
);

-- An event is the body's (account, id), never the `webhook-id` header: a sender that fans one
-- event out to several subscriptions gives each its own message id. The digest is taken over the
-- event parsed and written back with sorted keys, so the same event re-encoded is still the same,
-- and an id reused for a different event is told apart.
CREATE TABLE payment_inbox (
    sender_account TEXT    NOT NULL,
    event_ref      TEXT    NOT NULL,
    event_type     TEXT    NOT NULL,
    body_sha256    TEXT    NOT NULL,
    received_ms    INTEGER NOT NULL,
    PRIMARY KEY (sender_account, event_ref)
);
CREATE INDEX payment_inbox_by_received ON payment_inbox (received_ms);

-- `total_set_at_ms` is the creation time of the amount update that set `total_cents` (0 for the
-- amount the order was created with): an update older than it changes nothing, so the newest
-- update wins whatever order they arrive in. The state guard, not the inbox, is what keeps a
-- second fulfillment out once receipts are purged: only an order still awaiting payment pays.
CREATE TABLE customer_orders (
    tenant_code     TEXT    NOT NULL,
    order_code      TEXT    NOT NULL,
    order_state     TEXT    NOT NULL
                    CHECK (order_state IN ('awaiting_payment', 'paid', 'refunded', 'cancelled')),
    total_cents     INTEGER NOT NULL,
    total_set_at_ms INTEGER NOT NULL DEFAULT 0,
    changed_ms      INTEGER,
    PRIMARY KEY (tenant_code, order_code)
);

-- One row per business operation (`<tenant>/<order>/fulfill/v1`), which is also the
-- Idempotency-Key the provider sees. `request_json` is written once, with the order's total at
-- the moment it was paid, and sent as it is on every attempt.
--
-- The claim columns are a fenced lease: `claimed_by` names the relay worker, `claim_token` grows
-- by one at every claim, and every write about an attempt's outcome names the token it claimed
-- with, so a worker whose lease was taken over writes nothing. `first_claimed_ms` is no later
-- than the provider's first sight of the key, and is what the key's age is counted from.
CREATE TABLE fulfillment_requests (
    request_key      TEXT    NOT NULL PRIMARY KEY,
    request_json     TEXT    NOT NULL,
    delivery_state   TEXT    NOT NULL CHECK (delivery_state IN ('owed', 'shipped', 'abandoned')),
    attempt_count    INTEGER NOT NULL DEFAULT 0,
    claimed_by       TEXT,
    claim_token      INTEGER NOT NULL DEFAULT 0,
    claim_expires_ms INTEGER,
    retry_at_ms      INTEGER NOT NULL,
    first_claimed_ms INTEGER,
    last_error       TEXT,
    abandon_reason   TEXT,
    shipment_ref     TEXT,
    created_ms       INTEGER NOT NULL,
    finished_ms      INTEGER
);
CREATE INDEX fulfillment_requests_by_due ON fulfillment_requests (delivery_state, retry_at_ms);
