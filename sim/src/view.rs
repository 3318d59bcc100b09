//! The committed state of the database, as the invariants see it.
//!
//! The view is rebuilt incrementally from committed row changes (see `db`), decoded by the
//! system into canonical rows, and indexed by the keys the invariants ask about. Rows are kept by
//! `(table, rowid)` rather than by their business key, because a broken system may well store two
//! rows under one key and the invariants must see both. Applying a commit returns its diff (each
//! row before and after), which is what the per-step invariants examine. The view never reads the
//! database and never holds uncommitted data.

use std::collections::{BTreeMap, BTreeSet};

use crate::provider::OperationReader;
use crate::rows::RowChange;
use crate::rows::{EntityRow, ObligationRow, ObligationStatus, ObservedRow, OwnRow, ReceiptRow};

/// A row's place in the database: observed table index and rowid.
pub type RowRef = (usize, i64);

/// A row before and after one commit. At least one side is present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowDiff {
    /// The row before the commit, or `None` if the commit created it.
    pub before: Option<ObservedRow>,
    /// The row after the commit, or `None` if the commit deleted it.
    pub after: Option<ObservedRow>,
}

/// A system's decoder: one row of a table, its values in table order, to what the invariants see.
pub type DecodeRow<'a> = dyn Fn(&str, &[commitgap::env::Value]) -> Result<ObservedRow, String> + 'a;

/// Committed rows, indexed for the invariants.
pub struct DbView {
    /// Reads an obligation's payload as the provider would, to index it by operation.
    reader: OperationReader,
    rows: BTreeMap<RowRef, ObservedRow>,
    receipts_by_event: BTreeMap<(String, String), BTreeSet<RowRef>>,
    entities_by_key: BTreeMap<(String, String), BTreeSet<RowRef>>,
    obligations_by_operation: BTreeMap<String, BTreeSet<RowRef>>,
}

impl std::fmt::Debug for DbView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DbView")
            .field("rows", &self.rows)
            .finish_non_exhaustive()
    }
}

impl DbView {
    /// An empty view whose obligations are indexed by the operation `reader` reads from their
    /// payloads (the system's domain's reading).
    pub fn new(reader: OperationReader) -> DbView {
        DbView {
            reader,
            rows: BTreeMap::new(),
            receipts_by_event: BTreeMap::new(),
            entities_by_key: BTreeMap::new(),
            obligations_by_operation: BTreeMap::new(),
        }
    }

    /// The operation `obligation` is for (see [`operation_of`]).
    pub fn operation_of(&self, obligation: &ObligationRow) -> String {
        operation_of(&|payload: &str| self.reader.operation_of(payload), obligation)
    }

    /// Applies one commit's changes, each row decoded by `decode` (the system's decoder), and returns what each changed row was before and after.
    pub fn apply(
        &mut self,
        decode: &DecodeRow<'_>,
        tables: &[&str],
        changes: Vec<RowChange>,
    ) -> Result<Vec<RowDiff>, String> {
        let mut diffs = Vec::with_capacity(changes.len());
        for change in changes {
            let place = (change.table, change.rowid);
            let before = self.remove(place);
            let after = match change.values {
                Some(values) => {
                    let row = decode(tables[change.table], &values)?;
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
            ObservedRow::Entity(entity) => {
                self.entities_by_key
                    .entry((entity.tenant.clone(), entity.subject.clone()))
                    .or_default()
                    .insert(place);
            }
            ObservedRow::Obligation(obligation) => {
                self.obligations_by_operation
                    .entry(self.operation_of(obligation))
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
            ObservedRow::Entity(entity) => (
                &mut self.entities_by_key,
                (entity.tenant.clone(), entity.subject.clone()),
            ),
            ObservedRow::Obligation(obligation) => {
                let operation = self.operation_of(obligation);
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

    /// The entity `(tenant, subject)`, if it exists (the first row if a broken system stored
    /// two).
    pub fn entity(&self, tenant: &str, subject: &str) -> Option<&EntityRow> {
        self.refs(self.entities_by_key.get(&(tenant.to_owned(), subject.to_owned())))
            .find_map(|row| match row {
                ObservedRow::Entity(entity) => Some(entity),
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

    /// Every receipt, in table order.
    pub fn all_receipts(&self) -> impl Iterator<Item = &ReceiptRow> {
        self.rows.values().filter_map(|row| match row {
            ObservedRow::Receipt(receipt) => Some(receipt),
            _ => None,
        })
    }

    /// Every business entity, in table order.
    pub fn entities(&self) -> impl Iterator<Item = &EntityRow> {
        self.rows.values().filter_map(|row| match row {
            ObservedRow::Entity(entity) => Some(entity),
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
            .filter(|obligation| obligation.status == ObligationStatus::Owed)
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

/// The business operation an obligation is for, read from its payload by `read` as the
/// provider of the system's domain would read it. The operation key column may be anything the system chose (a planted
/// bug may even derive it from the event); the payload is what the provider acts on. An
/// unreadable payload is keyed by its operation key prefixed with `unreadable:`.
pub fn operation_of(read: &dyn Fn(&str) -> Result<String, String>, obligation: &ObligationRow) -> String {
    read(&obligation.payload).unwrap_or_else(|_| format!("unreadable:{}", obligation.operation_key))
}
