//! `account-shops-unchanged`: the mapping from sender account to shop is set up once and never
//! rewritten. Every delivery is routed through it, so a handler that "repairs" it from a payload
//! would let one account's events land in another shop.
//!
//! It reads the team's own `account_shops` table, which the system's decoder hands over as
//! `ObservedRow::Own` rows, and compares it with the accounts the run started with. It must not
//! read anything but the observation.

use commitgap_sim::invariants::{Invariant, InvariantKind, Observation};

/// See the module documentation.
pub struct AccountShopsUnchanged;

impl Invariant for AccountShopsUnchanged {
    fn name(&self) -> &'static str {
        "account-shops-unchanged"
    }

    fn description(&self) -> &'static str {
        "every account_shops row names the shop the account was set up with"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    // It reads the whole table, not a step's changes: a row rewritten to another shop is still
    // wrong at the end, so a live check over real processes can judge its final rows too.
    fn judges_final_state(&self) -> bool {
        true
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        for row in observation.db.own_rows("account_shops") {
            let expected = observation
                .workload
                .fixtures
                .accounts
                .iter()
                .find(|(account, _)| *account == row.key)
                .map(|(_, shop)| shop.as_str());
            let found = row.field("shop");
            if expected.is_none() || found != expected {
                return Err(format!(
                    "account {} maps to shop {:?}; it was set up with {:?}",
                    row.key, found, expected
                ));
            }
        }
        Ok(())
    }
}
