//! The payment events the shop takes, read from a verified body and checked before any of it
//! reaches the database.
//!
//! A body is one JSON event: `id` (unique within the sender's account), `type`, `account`,
//! `order`, `created_ms`, and `amount_cents` for a payment or an amount update. Four types are
//! handled: `payment.succeeded`, `charge.refunded`, `order.cancelled` and `order.updated`; any
//! other type, a missing or empty name, a name with control characters or longer than 128
//! characters, a negative creation time or an amount out of range makes the body not an event,
//! refused for good. This module must not touch the database or decide what an event does to
//! an order.

use sha2::{Digest, Sha256};

/// The longest id, account or order name an event may carry.
const NAME_CHARS_MAX: usize = 128;
/// The largest amount an event may carry: ten billion in major units.
const AMOUNT_CENTS_MAX: i64 = 1_000_000_000_000;

/// What an event reports about an order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `payment.succeeded`: the order was paid, with the amount paid.
    Paid,
    /// `charge.refunded`: the charge was refunded in full.
    Refunded,
    /// `order.cancelled`: the merchant cancelled the order.
    Cancelled,
    /// `order.updated`: the order's amount changed.
    AmountChanged,
}

impl Kind {
    fn from_type(name: &str) -> Option<Kind> {
        match name {
            "payment.succeeded" => Some(Kind::Paid),
            "charge.refunded" => Some(Kind::Refunded),
            "order.cancelled" => Some(Kind::Cancelled),
            "order.updated" => Some(Kind::AmountChanged),
            _ => None,
        }
    }

    fn needs_amount(self) -> bool {
        matches!(self, Kind::Paid | Kind::AmountChanged)
    }
}

/// The body as the sender writes it.
#[derive(Debug, serde::Deserialize)]
struct Wire {
    id: String,
    #[serde(rename = "type")]
    type_name: String,
    account: String,
    order: String,
    created_ms: i64,
    #[serde(default)]
    amount_cents: Option<i64>,
}

/// One checked event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaymentEvent {
    pub id: String,
    /// The type as written, stored with the receipt for whoever reads the inbox.
    pub type_name: String,
    pub kind: Kind,
    pub account: String,
    pub order: String,
    pub created_ms: i64,
    pub amount_cents: Option<i64>,
    /// SHA-256 of the event written back with sorted keys and no spacing, in hex: the same event
    /// however the sender spaced or ordered it, and a different digest for different contents.
    pub digest: String,
}

impl PaymentEvent {
    /// Reads and checks a body. The error says what is wrong with it.
    pub fn parse(body: &[u8]) -> Result<PaymentEvent, String> {
        let value: serde_json::Value =
            serde_json::from_slice(body).map_err(|error| format!("the body is not JSON: {error}"))?;
        // serde_json's objects keep their keys sorted, so writing the value back is canonical.
        let digest = hex(&Sha256::digest(value.to_string().as_bytes()));
        let wire: Wire =
            serde_json::from_value(value).map_err(|error| format!("the body is not an event: {error}"))?;
        let kind = Kind::from_type(&wire.type_name)
            .ok_or_else(|| format!("events of type {:?} are not handled here", wire.type_name))?;
        for (field, text) in [
            ("id", &wire.id),
            ("account", &wire.account),
            ("order", &wire.order),
        ] {
            if text.is_empty() {
                return Err(format!("{field} is empty"));
            }
            if text.chars().count() > NAME_CHARS_MAX {
                return Err(format!("{field} is longer than {NAME_CHARS_MAX} characters"));
            }
            if text.chars().any(char::is_control) {
                return Err(format!("{field} holds a control character"));
            }
        }
        if wire.created_ms < 0 {
            return Err("created_ms is before 1970".to_owned());
        }
        match wire.amount_cents {
            Some(amount) if !(1..=AMOUNT_CENTS_MAX).contains(&amount) => {
                return Err(format!(
                    "amount_cents {amount} is not between 1 and {AMOUNT_CENTS_MAX}"
                ));
            }
            None if kind.needs_amount() => return Err(format!("{} needs amount_cents", wire.type_name)),
            _ => {}
        }
        Ok(PaymentEvent {
            id: wire.id,
            type_name: wire.type_name,
            kind,
            account: wire.account,
            order: wire.order,
            created_ms: wire.created_ms,
            amount_cents: wire.amount_cents,
            digest,
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut text, byte| {
            let _ = write!(text, "{byte:02x}");
            text
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_read_and_bad_ones_refused_with_why() {
        let payment = br#"{"account":"acct-a","amount_cents":100,"created_ms":5,"id":"evt-1","order":"order-1","type":"payment.succeeded"}"#;
        let event = PaymentEvent::parse(payment).unwrap();
        assert_eq!((event.kind, event.amount_cents), (Kind::Paid, Some(100)));
        // The same event spaced and ordered otherwise is the same event.
        let respaced = br#"{ "type": "payment.succeeded", "id": "evt-1", "order": "order-1",
            "created_ms": 5, "amount_cents": 100, "account": "acct-a" }"#;
        assert_eq!(PaymentEvent::parse(respaced).unwrap().digest, event.digest);
        let refund =
            br#"{"account":"acct-a","created_ms":6,"id":"evt-2","order":"order-1","type":"charge.refunded"}"#;
        assert_eq!(PaymentEvent::parse(refund).unwrap().kind, Kind::Refunded);
        for (body, why) in [
            (&br#"{"account":"a","created_ms":1,"id":"e","order":"o","type":"payment.succeeded"}"#[..], "needs amount"),
            (br#"{"account":"a","created_ms":1,"id":"e","order":"o","type":"invoice.paid"}"#, "not handled"),
            (br#"{"account":"a","created_ms":-1,"id":"e","order":"o","type":"order.cancelled"}"#, "before 1970"),
            (br#"{"account":"a","created_ms":1,"id":"","order":"o","type":"order.cancelled"}"#, "empty"),
            (br#"{"account":"a","created_ms":1,"id":"e","order":"o\u0007","type":"order.cancelled"}"#, "control"),
            (br#"{"account":"a","created_ms":1,"id":"e","order":"o","type":"order.updated","amount_cents":1000000000001}"#, "between"),
            (br#"{"account":"a","#, "not JSON"),
        ] {
            let error = PaymentEvent::parse(body).unwrap_err();
            assert!(error.contains(why), "{error}");
        }
    }
}
