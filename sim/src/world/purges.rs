//! What each receipt purge was asked to delete, and what it deleted.
//!
//! A purge is told a cutoff: delete the receipts received before it. Receipts are what stops a
//! redelivery from being applied twice for as long as a sender may redeliver, so a purge that
//! deletes a younger receipt opens that door early, and one that deletes nothing lets the table
//! grow without bound. The world remembers, for each purge task, its cutoff and the receipts
//! older than it when it began; it judges each commit of the purge's process (no receipt received
//! at or after the cutoff may go) and the purge's return (none of those older receipts may be
//! left, unless one of its statements failed, when it may try again next time). Times are the
//! rows' own `received_ms`, as the receivers' clocks wrote them, which is all a purge can compare.
//! A purge whose process crashes is not judged. This module records and judges; it changes no
//! state of the run.

use std::collections::BTreeMap;

use super::{TaskId, World};
use crate::rows::ObservedRow;
use crate::trace::format_time_ms;
use crate::view::RowDiff;

/// The purges running now.
#[derive(Debug, Default)]
pub struct PurgeWatch {
    running: BTreeMap<TaskId, Purge>,
    /// Purges that returned in this step, judged once its commits are in the view.
    returned: Vec<Purge>,
}

/// One purge task.
#[derive(Debug)]
struct Purge {
    /// Receipts received before this are to be deleted.
    older_than_ms: i64,
    /// The purge's process.
    process_id: String,
    /// `(account, event_id, received_ms)` of the receipts older than the cutoff when it began.
    old: Vec<(String, String, i64)>,
    /// Whether one of its statements failed.
    failed: bool,
}

impl World {
    /// Task `task`, just spawned on `process`, purges the receipts received before
    /// `older_than_ms`.
    pub fn watch_purge(&mut self, task: TaskId, process: usize, older_than_ms: i64) {
        let process_id = self.processes[process].id.to_string();
        let old = self
            .view
            .all_receipts()
            .filter_map(|receipt| {
                let received_ms = receipt.received_ms?;
                (received_ms < older_than_ms)
                    .then(|| (receipt.account.clone(), receipt.event_id.clone(), received_ms))
            })
            .collect();
        self.purge_watch.running.insert(
            task,
            Purge {
                older_than_ms,
                process_id,
                old,
                failed: false,
            },
        );
        // A purge that made no Env call returned within its first poll, before it could be
        // watched; it changed nothing, so it is judged as returned now.
        if !self.has_task(task) {
            self.purge_returned(task);
        }
    }

    /// A statement of `task` failed: if it purges, it may leave receipts for next time.
    pub(super) fn purge_statement_failed(&mut self, task: TaskId) {
        if let Some(purge) = self.purge_watch.running.get_mut(&task) {
            purge.failed = true;
        }
    }

    /// Judges the receipts a commit of `process_id` deleted against the cutoff of the purge
    /// running there (the latest, if several are).
    pub(super) fn purge_committed(&mut self, process_id: &str, diffs: &[RowDiff]) {
        // A purge that commits and returns in one step has returned by the time its commit is
        // judged.
        let Some(cutoff_ms) = self
            .purge_watch
            .running
            .values()
            .chain(&self.purge_watch.returned)
            .filter(|purge| purge.process_id == process_id)
            .map(|purge| purge.older_than_ms)
            .max()
        else {
            return;
        };
        for diff in diffs {
            if let (Some(ObservedRow::Receipt(receipt)), None) = (&diff.before, &diff.after)
                && let Some(received_ms) = receipt.received_ms
                && received_ms >= cutoff_ms
            {
                self.step_record.purge_violations.push(format!(
                    "the purge on {process_id} deleted the receipt of {}/{} received at {}, not before its cutoff {}: a redelivery of that event is no longer recognised",
                    receipt.account,
                    receipt.event_id,
                    format_time_ms(received_ms),
                    format_time_ms(cutoff_ms)
                ));
                return;
            }
        }
    }

    /// `task` returned: if it was a purge, it is judged at the end of the step, when what it
    /// committed is in the view.
    pub(super) fn purge_returned(&mut self, task: TaskId) {
        if let Some(purge) = self.purge_watch.running.remove(&task) {
            self.purge_watch.returned.push(purge);
        }
    }

    /// Every receipt older than a returned purge's cutoff when it began must be gone, unless one
    /// of its statements failed.
    pub(super) fn judge_returned_purges(&mut self) {
        for purge in std::mem::take(&mut self.purge_watch.returned) {
            if purge.failed {
                continue;
            }
            let still_here = |(account, event_id, received_ms): &&(String, String, i64)| {
                self.view
                    .receipts(account, event_id)
                    .any(|receipt| receipt.received_ms == Some(*received_ms))
            };
            let left: Vec<&(String, String, i64)> = purge.old.iter().filter(still_here).collect();
            if let Some((account, event_id, received_ms)) = left.first() {
                self.step_record.purge_violations.push(format!(
                    "the purge on {} returned without an error and left {} receipt(s) received before its cutoff {}, such as {account}/{event_id} received at {}",
                    purge.process_id,
                    left.len(),
                    format_time_ms(purge.older_than_ms),
                    format_time_ms(*received_ms)
                ));
            }
        }
    }

    /// `task` died with its process: a purge cut short is not judged.
    pub(super) fn purge_killed(&mut self, task: TaskId) {
        self.purge_watch.running.remove(&task);
    }
}
