//! The committed state of the database, as the invariants see it.
//!
//! The view is rebuilt incrementally from committed row changes (see `db`), decoded by the
//! system into canonical rows, and indexed by the keys the invariants ask about. Rows are kept by
//! `(table, rowid)` rather than by their business key, because a broken system may well store two
//! rows under one key and the invariants must see both. Applying a commit returns its diff (each
//! row before and after), which is what the per-step invariants examine. The view never reads the
//! database and never holds uncommitted data.

use std::collections::{BTreeMap, BTreeSet};

use commitgap::provider::FulfillmentPayload;

use crate::db::RowChange;
use crate::system::{ObligationRow, ObservedRow, OrderRow, OwnRow, ReceiptRow, System};

/// A row's place in the database: observed table index and rowid.
pub type RowRef = (usize, i64);

/// A row before and after one commit. At least one side is present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowDiff {
    pub before: Option<ObservedRow>,
    pub after: Option<ObservedRow>,
}

/// Committed rows, indexed for the invariants.
#[derive(Debug, Default)]
pub struct DbView {
    rows: BTreeMap<RowRef, ObservedRow>,
    receipts_by_event: BTreeMap<(String, String), BTreeSet<RowRef>>,
    orders_by_key: BTreeMap<(String, String), BTreeSet<RowRef>>,
    obligations_by_operation: BTreeMap<String, BTreeSet<RowRef>>,
}

impl DbView {
    /// Applies one commit's changes and returns what each changed row was before and after.
    pub fn apply(
        &mut self,
        system: &dyn System,
        tables: &[&str],
        changes: Vec<RowChange>,
    ) -> Result<Vec<RowDiff>, String> {
        let mut diffs = Vec::with_capacity(changes.len());
        for change in changes {
            let place = (change.table, change.rowid);
            let before = self.remove(place);
            let after = match change.values {
                Some(values) => {
                    let row = system.decode_row(tables[change.table], &values)?;
                    self.insert(place, row.clone());
                    Some(row)
                }
                None => None,
            };
            if before != after {
                diffs.push(RowDiff { before, after });
            }
        }
        Ok(diffs)
    }

    fn insert(&mut self, place: RowRef, row: ObservedRow) {
        match &row {
            ObservedRow::Receipt(receipt) => {
                self.receipts_by_event
                    .entry((receipt.account.clone(), receipt.event_id.clone()))
                    .or_default()
                    .insert(place);
            }
            ObservedRow::Order(order) => {
                self.orders_by_key
                    .entry((order.tenant.clone(), order.order.clone()))
                    .or_default()
                    .insert(place);
            }
            ObservedRow::Obligation(obligation) => {
                self.obligations_by_operation
                    .entry(operation_of(obligation))
                    .or_default()
                    .insert(place);
            }
            ObservedRow::Own(_) => {}
        }
        self.rows.insert(place, row);
    }

    fn remove(&mut self, place: RowRef) -> Option<ObservedRow> {
        let row = self.rows.remove(&place)?;
        let (index, key) = match &row {
            ObservedRow::Receipt(receipt) => (
                &mut self.receipts_by_event,
                (receipt.account.clone(), receipt.event_id.clone()),
            ),
            ObservedRow::Order(order) => (
                &mut self.orders_by_key,
                (order.tenant.clone(), order.order.clone()),
            ),
            ObservedRow::Obligation(obligation) => {
                let operation = operation_of(obligation);
                remove_from(&mut self.obligations_by_operation, &operation, place);
                return Some(row);
            }
            ObservedRow::Own(_) => return Some(row),
        };
        remove_from(index, &key, place);
        Some(row)
    }

    /// Receipts recorded for `(account, event_id)`.
    pub fn receipts(&self, account: &str, event_id: &str) -> impl Iterator<Item = &ReceiptRow> {
        self.refs(
            self.receipts_by_event
                .get(&(account.to_owned(), event_id.to_owned())),
        )
        .filter_map(|row| match row {
            ObservedRow::Receipt(receipt) => Some(receipt),
            _ => None,
        })
    }

    /// The order `(tenant, order)`, if it exists (the first row if a broken system stored two).
    pub fn order(&self, tenant: &str, order: &str) -> Option<&OrderRow> {
        self.refs(self.orders_by_key.get(&(tenant.to_owned(), order.to_owned())))
            .find_map(|row| match row {
                ObservedRow::Order(order) => Some(order),
                _ => None,
            })
    }

    /// Obligations whose payload names business operation `operation`
    /// (see [`operation_of`]).
    pub fn obligations_for(&self, operation: &str) -> impl Iterator<Item = &ObligationRow> {
        self.refs(self.obligations_by_operation.get(operation))
            .filter_map(as_obligation)
    }

    /// Every obligation, in table order.
    pub fn obligations(&self) -> impl Iterator<Item = &ObligationRow> {
        self.rows.values().filter_map(as_obligation)
    }

    /// Every order, in table order.
    pub fn orders(&self) -> impl Iterator<Item = &OrderRow> {
        self.rows.values().filter_map(|row| match row {
            ObservedRow::Order(order) => Some(order),
            _ => None,
        })
    }

    /// Every committed row of the system's own table `table`, in table order.
    pub fn own_rows<'a>(&'a self, table: &'a str) -> impl Iterator<Item = &'a OwnRow> + 'a {
        self.rows.values().filter_map(move |row| match row {
            ObservedRow::Own(own) if own.table == table => Some(own),
            _ => None,
        })
    }

    /// Number of obligations still owed.
    pub fn owed_obligations(&self) -> usize {
        self.obligations()
            .filter(|obligation| obligation.status == crate::system::ObligationStatus::Owed)
            .count()
    }

    fn refs<'a>(&'a self, places: Option<&'a BTreeSet<RowRef>>) -> impl Iterator<Item = &'a ObservedRow> {
        places
            .into_iter()
            .flatten()
            .filter_map(|place| self.rows.get(place))
    }
}

fn as_obligation(row: &ObservedRow) -> Option<&ObligationRow> {
    match row {
        ObservedRow::Obligation(obligation) => Some(obligation),
        _ => None,
    }
}

fn remove_from<K: Ord>(index: &mut BTreeMap<K, BTreeSet<RowRef>>, key: &K, place: RowRef) {
    if let Some(places) = index.get_mut(key) {
        places.remove(&place);
        if places.is_empty() {
            index.remove(key);
        }
    }
}

/// The business operation an obligation is for, read from its payload as the provider would read
/// it. The operation key column may be anything the system chose (a planted bug may even derive
/// it from the event); the payload is what the provider acts on. An unreadable payload is keyed
/// by its operation key prefixed with `unreadable:`.
pub fn operation_of(obligation: &ObligationRow) -> String {
    match FulfillmentPayload::parse(&obligation.payload) {
        Ok(payload) => payload.operation_key(),
        Err(_) => format!("unreadable:{}", obligation.operation_key),
    }
}
