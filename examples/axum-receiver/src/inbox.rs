//! What one verified payment event does to the database, in one `BEGIN IMMEDIATE` transaction:
//! its receipt in `payment_inbox`, the order's guarded move, and, for a payment that moved an
//! order still awaiting it, the fulfillment request the shop now owes.
//!
//! The receipt and the work commit together or not at all, and the caller answers 2xx only once
//! COMMIT returned. A known event (same account and id, same contents) is a duplicate: nothing is
//! applied again. Every move is an `UPDATE` guarded by the order's state (or, for an amount, by
//! the update's creation time), so an event that arrives late, twice, or after its receipt was
//! purged finds nothing to move and owes nothing. This module must not call the provider, which
//! is the relay's job outside any transaction.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use crate::event::{Kind, PaymentEvent};

/// The business operation fulfilling an order, and the version of it: a deliberate second
/// shipment would be another version, under another key.
const FULFILL: &str = "fulfill";
const FULFILL_VERSION: u32 = 1;

/// What became of a delivery that reached the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The receipt and the event's move are committed.
    Applied,
    /// The receipt is committed; the order's state made the event change nothing.
    Unchanged,
    /// The event was taken before; nothing was written.
    Duplicate,
    /// The event can never be taken (an unknown account or order, an id reused for another
    /// event); nothing was written.
    Refused(String),
}

/// What the transaction decided before it ends.
enum Decision {
    Commit(Outcome),
    RollBack(Outcome),
}

/// The key of the fulfillment owed for `order` of `tenant`: `<tenant>/<order>/fulfill/v1`. It is
/// the request's identity in the outbox and the Idempotency-Key the provider sees.
pub fn fulfillment_key(tenant: &str, order: &str) -> String {
    format!("{tenant}/{order}/{FULFILL}/v{FULFILL_VERSION}")
}

/// The request body of a fulfillment: the order and its amount as it was when it was paid, an
/// immutable snapshot sent as it is on every attempt.
fn fulfillment_request(tenant: &str, order: &str, amount_cents: i64) -> String {
    serde_json::json!({
        "tenant": tenant,
        "order": order,
        "operation": FULFILL,
        "version": FULFILL_VERSION,
        "amount_cents": amount_cents,
    })
    .to_string()
}

/// Takes `event`, posted to `account`'s endpoint, in one transaction at `now_ms`. An `Err` is a
/// database failure (busy, gone): nothing committed, and the sender should try again.
pub fn take(connection: &mut Connection, event: &PaymentEvent, now_ms: i64) -> rusqlite::Result<Outcome> {
    // IMMEDIATE takes the write lock now: two deliveries of one event queue here instead of both
    // reading "not seen" before either writes.
    let transaction = connection.transaction_with_behavior(TransactionBehavior::Immediate)?;
    match decide(&transaction, event, now_ms)? {
        Decision::Commit(outcome) => {
            transaction.commit()?;
            Ok(outcome)
        }
        Decision::RollBack(outcome) => {
            transaction.rollback()?;
            Ok(outcome)
        }
    }
}

/// Everything inside the transaction: the account's tenant, the receipt, the move.
fn decide(connection: &Connection, event: &PaymentEvent, now_ms: i64) -> rusqlite::Result<Decision> {
    let tenant: Option<String> = connection
        .query_row(
            "SELECT tenant_code FROM merchant_accounts WHERE account_code = ?1",
            [&event.account],
            |row| row.get(0),
        )
        .optional()?;
    let Some(tenant) = tenant else {
        let why = format!("account {:?} is not a merchant of this shop", event.account);
        return Ok(Decision::RollBack(Outcome::Refused(why)));
    };
    let inserted = connection.execute(
        "INSERT INTO payment_inbox (sender_account, event_ref, event_type, body_sha256, received_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (sender_account, event_ref) DO NOTHING",
        params![event.account, event.id, event.type_name, event.digest, now_ms],
    )?;
    if inserted == 0 {
        return seen_before(connection, event);
    }
    let moved = move_order(connection, &tenant, event, now_ms)?;
    if moved {
        return Ok(Decision::Commit(Outcome::Applied));
    }
    let exists = connection
        .query_row(
            "SELECT 1 FROM customer_orders WHERE tenant_code = ?1 AND order_code = ?2",
            params![tenant, event.order],
            |_| Ok(()),
        )
        .optional()?
        .is_some();
    if exists {
        Ok(Decision::Commit(Outcome::Unchanged))
    } else {
        let why = format!("order {:?} of {tenant:?} does not exist", event.order);
        Ok(Decision::RollBack(Outcome::Refused(why)))
    }
}

/// An event whose receipt exists: a duplicate when its contents are the same, refused when the
/// sender reused the id for a different event (applying it would be applying an unverifiable
/// story; acknowledging it would hide the sender's bug).
fn seen_before(connection: &Connection, event: &PaymentEvent) -> rusqlite::Result<Decision> {
    let stored: String = connection.query_row(
        "SELECT body_sha256 FROM payment_inbox WHERE sender_account = ?1 AND event_ref = ?2",
        params![event.account, event.id],
        |row| row.get(0),
    )?;
    if stored == event.digest {
        Ok(Decision::RollBack(Outcome::Duplicate))
    } else {
        let why = format!("event {} was already taken with other contents", event.id);
        Ok(Decision::RollBack(Outcome::Refused(why)))
    }
}

/// Applies the event's guarded move; returns whether the order changed. A payment that moved
/// the order also writes the fulfillment request, in the same transaction.
fn move_order(
    connection: &Connection,
    tenant: &str,
    event: &PaymentEvent,
    now_ms: i64,
) -> rusqlite::Result<bool> {
    let order = &event.order;
    match event.kind {
        Kind::Paid => {
            // RETURNING the total as the row holds it now: the snapshot the request carries.
            let paid: Option<i64> = connection
                .query_row(
                    "UPDATE customer_orders SET order_state = 'paid', changed_ms = ?3 \
                     WHERE tenant_code = ?1 AND order_code = ?2 AND order_state = 'awaiting_payment' \
                     RETURNING total_cents",
                    params![tenant, order, now_ms],
                    |row| row.get(0),
                )
                .optional()?;
            let Some(total_cents) = paid else {
                return Ok(false);
            };
            connection.execute(
                "INSERT INTO fulfillment_requests \
                 (request_key, request_json, delivery_state, retry_at_ms, created_ms) \
                 VALUES (?1, ?2, 'owed', ?3, ?3)",
                params![
                    fulfillment_key(tenant, order),
                    fulfillment_request(tenant, order, total_cents),
                    now_ms
                ],
            )?;
            Ok(true)
        }
        Kind::Refunded => changed(connection.execute(
            "UPDATE customer_orders SET order_state = 'refunded', changed_ms = ?3 \
             WHERE tenant_code = ?1 AND order_code = ?2 AND order_state IN ('awaiting_payment', 'paid')",
            params![tenant, order, now_ms],
        )),
        Kind::Cancelled => changed(connection.execute(
            "UPDATE customer_orders SET order_state = 'cancelled', changed_ms = ?3 \
             WHERE tenant_code = ?1 AND order_code = ?2 AND order_state = 'awaiting_payment'",
            params![tenant, order, now_ms],
        )),
        // Only an update newer than the one that set the amount applies, so the newest wins
        // whatever order the updates arrive in. The amount changes in any state: a refunded
        // order still has the amount its merchant last gave it.
        Kind::AmountChanged => changed(connection.execute(
            "UPDATE customer_orders SET total_cents = ?3, total_set_at_ms = ?4, changed_ms = ?5 \
             WHERE tenant_code = ?1 AND order_code = ?2 AND total_set_at_ms < ?4",
            params![tenant, order, event.amount_cents, event.created_ms, now_ms],
        )),
    }
}

fn changed(rows: rusqlite::Result<usize>) -> rusqlite::Result<bool> {
    rows.map(|rows| rows > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shop() -> Connection {
        let connection = Connection::open_in_memory().unwrap();
        connection.execute_batch(include_str!("../schema.sql")).unwrap();
        connection
            .execute_batch(
                "INSERT INTO merchant_accounts VALUES ('acct-a', 'tenant-a');
                 INSERT INTO customer_orders (tenant_code, order_code, order_state, total_cents)
                 VALUES ('tenant-a', 'order-1', 'awaiting_payment', 500);",
            )
            .unwrap();
        connection
    }

    fn event(id: &str, body: &str) -> PaymentEvent {
        let text = format!(r#"{{"account":"acct-a","id":"{id}","order":"order-1",{body}}}"#);
        PaymentEvent::parse(text.as_bytes()).unwrap()
    }

    fn owed(connection: &Connection) -> Vec<(String, String)> {
        let mut statement = connection
            .prepare("SELECT request_key, request_json FROM fulfillment_requests")
            .unwrap();
        statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }

    #[test]
    fn a_payment_owes_one_fulfillment_with_the_amount_of_its_moment() {
        let mut connection = shop();
        let update = event(
            "e1",
            r#""type":"order.updated","amount_cents":700,"created_ms":20"#,
        );
        let older = event(
            "e2",
            r#""type":"order.updated","amount_cents":600,"created_ms":10"#,
        );
        let payment = event(
            "e3",
            r#""type":"payment.succeeded","amount_cents":700,"created_ms":30"#,
        );
        assert_eq!(take(&mut connection, &update, 1).unwrap(), Outcome::Applied);
        assert_eq!(take(&mut connection, &older, 2).unwrap(), Outcome::Unchanged);
        assert_eq!(take(&mut connection, &payment, 3).unwrap(), Outcome::Applied);
        assert_eq!(take(&mut connection, &payment, 4).unwrap(), Outcome::Duplicate);
        let twin = event(
            "e4",
            r#""type":"payment.succeeded","amount_cents":700,"created_ms":30"#,
        );
        assert_eq!(take(&mut connection, &twin, 5).unwrap(), Outcome::Unchanged);
        let owed = owed(&connection);
        assert_eq!(owed.len(), 1);
        assert_eq!(owed[0].0, "tenant-a/order-1/fulfill/v1");
        let payload: serde_json::Value = serde_json::from_str(&owed[0].1).unwrap();
        assert_eq!(payload["amount_cents"], 700);
    }

    #[test]
    fn a_refund_first_ships_nothing_and_unknown_orders_leave_no_receipt() {
        let mut connection = shop();
        let refund = event("e1", r#""type":"charge.refunded","created_ms":20"#);
        let payment = event(
            "e2",
            r#""type":"payment.succeeded","amount_cents":500,"created_ms":10"#,
        );
        assert_eq!(take(&mut connection, &refund, 1).unwrap(), Outcome::Applied);
        assert_eq!(take(&mut connection, &payment, 2).unwrap(), Outcome::Unchanged);
        assert!(owed(&connection).is_empty());
        let missing = PaymentEvent::parse(
            br#"{"account":"acct-a","id":"e3","order":"nope","type":"order.cancelled","created_ms":1}"#,
        )
        .unwrap();
        assert!(matches!(
            take(&mut connection, &missing, 3).unwrap(),
            Outcome::Refused(_)
        ));
        let reused = event("e1", r#""type":"order.cancelled","created_ms":20"#);
        assert!(matches!(
            take(&mut connection, &reused, 4).unwrap(),
            Outcome::Refused(_)
        ));
        let receipts: i64 = connection
            .query_row("SELECT count(*) FROM payment_inbox", [], |row| row.get(0))
            .unwrap();
        assert_eq!(receipts, 2);
    }
}
