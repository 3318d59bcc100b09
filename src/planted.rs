//! Planted bugs: deliberately broken variants of the reference system.
//!
//! Each variant breaks exactly one design rule of the receiver or the relay. They exist so the
//! simulator can prove, every time its tests run, that it finds the bug class each rule guards
//! against. Production code passes `None` wherever a `PlantedBug` is accepted; nothing here may
//! change the behaviour of the reference when no bug is planted.

use std::fmt;

/// One deliberately broken rule. See [`PlantedBug::rule_broken`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PlantedBug {
    /// The receipt commits in its own transaction before the business work.
    ReceiptFirst,
    /// The relay mints a fresh idempotency key on every attempt.
    KeyPerAttempt,
    /// The relay retries past the provider's key lifetime without reconciling first.
    BlindRetryAfterExpiry,
}

impl PlantedBug {
    /// Every planted bug, in a fixed order.
    pub const ALL: [PlantedBug; 3] = [
        PlantedBug::ReceiptFirst,
        PlantedBug::KeyPerAttempt,
        PlantedBug::BlindRetryAfterExpiry,
    ];

    /// The name users pass to `--system`.
    pub fn name(self) -> &'static str {
        match self {
            PlantedBug::ReceiptFirst => "receipt-first",
            PlantedBug::KeyPerAttempt => "key-per-attempt",
            PlantedBug::BlindRetryAfterExpiry => "blind-retry-after-expiry",
        }
    }

    /// The design rule this variant breaks, in one line.
    pub fn rule_broken(self) -> &'static str {
        match self {
            PlantedBug::ReceiptFirst => {
                "the receipt commits in its own transaction before the order transition and the obligation"
            }
            PlantedBug::KeyPerAttempt => {
                "the relay mints a fresh idempotency key on every attempt instead of reusing the persisted one"
            }
            PlantedBug::BlindRetryAfterExpiry => {
                "the relay retries past the provider's key lifetime without looking the key up first"
            }
        }
    }

    pub fn from_name(name: &str) -> Option<PlantedBug> {
        PlantedBug::ALL.into_iter().find(|bug| bug.name() == name)
    }
}

impl fmt::Display for PlantedBug {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
