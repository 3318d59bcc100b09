//! The reference system's tables.
//!
//! Four tables, each guarding one persistence boundary:
//! - `accounts` maps the sender's account to the tenant whose orders it may touch;
//! - `receipts` records that an upstream event `(account, event_id)` was processed, with a digest
//!   of its body so a conflicting payload under a known id is noticed; it is the only table the
//!   purge job deletes from;
//! - `orders` holds the business state, whose guarded transitions (`awaiting_payment -> paid`,
//!   `-> refunded`, `-> cancelled`) keep a second obligation out even after receipts are purged,
//!   and whose amount carries the creation time of the update that set it, so an older update
//!   arriving late never overwrites a newer one;
//! - `outbox` holds obligations: work owed to the provider, keyed by the business operation, with
//!   an immutable payload, a lease (owner, a token that only grows, an expiry) and enough history
//!   (attempts, last error, dead reason) for an operator to see and recover stuck work.
//!
//! The column order is part of this module's contract: the simulator decodes rows by position
//! (see the `*_COLUMNS` lists), so a new column goes at the end of its table. A variant of the
//! reference that runs on a weaker schema (no unique receipt per event, say) describes it as a few
//! text changes to [`SCHEMA_SQL`] through [`altered_schema`]; nothing else may change the schema.

/// Creates every table of the reference schema. Run once on a fresh database.
pub const SCHEMA_SQL: &str = "
CREATE TABLE accounts (
    account TEXT NOT NULL PRIMARY KEY,
    tenant  TEXT NOT NULL
);
CREATE TABLE receipts (
    account     TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    received_ms INTEGER NOT NULL,
    body_digest TEXT    NOT NULL,
    delivery_id TEXT,
    UNIQUE (account, event_id)
);
CREATE INDEX receipts_by_age ON receipts (received_ms);
CREATE TABLE orders (
    tenant            TEXT    NOT NULL,
    id                TEXT    NOT NULL,
    status            TEXT    NOT NULL
                      CHECK (status IN ('awaiting_payment', 'paid', 'refunded', 'cancelled')),
    amount_cents      INTEGER NOT NULL,
    updated_ms        INTEGER NOT NULL,
    amount_version_ms INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id)
);
CREATE TABLE outbox (
    operation_key    TEXT    NOT NULL UNIQUE,
    payload          TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN ('pending', 'done', 'dead')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    lease_owner      TEXT,
    lease_token      INTEGER NOT NULL DEFAULT 0,
    lease_expires_ms INTEGER,
    next_attempt_ms  INTEGER NOT NULL,
    first_attempt_ms INTEGER,
    last_error       TEXT,
    dead_reason      TEXT,
    provider_ref     TEXT,
    created_ms       INTEGER NOT NULL,
    completed_ms     INTEGER
);
CREATE INDEX outbox_due ON outbox (status, next_attempt_ms);
-- The payload is what the provider fingerprints under the key: changing either after the
-- first attempt would turn a retry into a different request.
CREATE TRIGGER outbox_payload_is_immutable
BEFORE UPDATE OF operation_key, payload ON outbox
WHEN NEW.operation_key IS NOT OLD.operation_key OR NEW.payload IS NOT OLD.payload
BEGIN
    SELECT RAISE(ABORT, 'outbox operation_key and payload are immutable');
END;
";

/// The reference schema with each `(from, to)` of `changes` applied in turn, every occurrence of
/// `from` replaced by `to`: the schema a variant of the reference runs on. Panics if a `from` does
/// not occur, so that a change to the reference schema cannot silently leave a variant on the
/// reference's constraints.
pub fn altered_schema(changes: &[(&str, &str)]) -> String {
    let mut schema = SCHEMA_SQL.to_owned();
    for (from, to) in changes {
        assert!(
            schema.contains(from),
            "the schema has no {from:?} to change into {to:?}"
        );
        schema = schema.replace(from, to);
    }
    schema
}

/// Columns of `receipts`, in table order.
pub const RECEIPT_COLUMNS: [&str; 5] = ["account", "event_id", "received_ms", "body_digest", "delivery_id"];
/// Columns of `orders`, in table order.
pub const ORDER_COLUMNS: [&str; 6] = [
    "tenant",
    "id",
    "status",
    "amount_cents",
    "updated_ms",
    "amount_version_ms",
];
/// Columns of `outbox`, in table order.
pub const OUTBOX_COLUMNS: [&str; 14] = [
    "operation_key",
    "payload",
    "status",
    "attempts",
    "lease_owner",
    "lease_token",
    "lease_expires_ms",
    "next_attempt_ms",
    "first_attempt_ms",
    "last_error",
    "dead_reason",
    "provider_ref",
    "created_ms",
    "completed_ms",
];

/// Position of `name` in `columns`; panics on a typo, which is a bug in this crate.
pub const fn column(columns: &[&str], name: &str) -> usize {
    let mut index = 0;
    while index < columns.len() {
        if const_str_eq(columns[index], name) {
            return index;
        }
        index += 1;
    }
    panic!("no such column");
}

const fn const_str_eq(left: &str, right: &str) -> bool {
    let (left, right) = (left.as_bytes(), right.as_bytes());
    if left.len() != right.len() {
        return false;
    }
    let mut index = 0;
    while index < left.len() {
        if left[index] != right[index] {
            return false;
        }
        index += 1;
    }
    true
}

/// Order status before the payment event.
pub const AWAITING_PAYMENT: &str = "awaiting_payment";
/// Order status after the payment event.
pub const PAID: &str = "paid";
/// Order refunded (before or after payment); terminal.
pub const REFUNDED: &str = "refunded";
/// Order cancelled before payment; terminal.
pub const CANCELLED: &str = "cancelled";
/// Obligation still owed (possibly leased to a worker right now).
pub const PENDING: &str = "pending";
/// Obligation completed: the provider confirmed the effect.
pub const DONE: &str = "done";
/// Obligation that can never succeed as sent; waits for an operator.
pub const DEAD: &str = "dead";

/// Inserts an account-to-tenant mapping.
pub const INSERT_ACCOUNT_SQL: &str = "INSERT INTO accounts (account, tenant) VALUES (?1, ?2)";
/// Inserts an order awaiting payment: `(tenant, id, amount_cents, updated_ms)`.
pub const INSERT_ORDER_SQL: &str = "INSERT INTO orders (tenant, id, status, amount_cents, updated_ms) \
     VALUES (?1, ?2, 'awaiting_payment', ?3, ?4)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_creates_and_column_lists_match_the_tables() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA_SQL).unwrap();
        for (table, columns) in [
            ("receipts", &RECEIPT_COLUMNS[..]),
            ("orders", &ORDER_COLUMNS[..]),
            ("outbox", &OUTBOX_COLUMNS[..]),
        ] {
            let mut statement = conn
                .prepare(&format!(
                    "SELECT name FROM pragma_table_info('{table}') ORDER BY cid"
                ))
                .unwrap();
            let names: Vec<String> = statement
                .query_map([], |row| row.get(0))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert_eq!(names, columns, "column list of {table}");
        }
        assert_eq!(column(&OUTBOX_COLUMNS, "lease_token"), 5);
    }

    #[test]
    fn an_altered_schema_differs_only_where_it_was_changed() {
        assert_eq!(altered_schema(&[]), SCHEMA_SQL);
        let weaker = altered_schema(&[("    UNIQUE (account, event_id)\n", "")]);
        assert_eq!(
            weaker.len(),
            SCHEMA_SQL.len() - "    UNIQUE (account, event_id)\n".len()
        );
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(&altered_schema(&[(
            "    UNIQUE (account, event_id)\n",
            "    CHECK (account <> '')\n",
        )]))
        .unwrap();
    }

    #[test]
    #[should_panic(expected = "the schema has no")]
    fn a_change_to_text_the_schema_lacks_is_refused() {
        altered_schema(&[("UNIQUE (account, order_id)", "")]);
    }

    #[test]
    fn payload_cannot_change_after_insert() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        conn.execute_batch(SCHEMA_SQL).unwrap();
        conn.execute(
            "INSERT INTO outbox (operation_key, payload, status, next_attempt_ms, created_ms) \
             VALUES ('k', 'p', 'pending', 0, 0)",
            [],
        )
        .unwrap();
        let error = conn
            .execute("UPDATE outbox SET payload = 'q' WHERE operation_key = 'k'", [])
            .unwrap_err();
        assert!(error.to_string().contains("immutable"), "{error}");
        conn.execute("UPDATE outbox SET attempts = 1 WHERE operation_key = 'k'", [])
            .unwrap();
    }
}
