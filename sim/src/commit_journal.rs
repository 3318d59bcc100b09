//! A journal of real commits, judged one commit at a time with the simulator's own invariants: the
//! rows every committed transaction of a check over real processes (`live`) changed, in commit
//! order, each with the process that committed it.
//!
//! A final state shows where a run ended, not how it got there: a receipt committed apart from
//! the work it stands for, or an outcome recorded by a process whose lease had passed, leaves a
//! final state as consistent as a correct run's. A journal shows every commit, so the invariants
//! that judge one commit at a time ([`Invariant::judges_commits`]) see what they see in the
//! simulator: the commit's changes, the rows as it left them, the history of leases, receipts
//! and moves the earlier commits made, and the commit's time, for the rules judged by true time
//! (a lease taken while another was live, a claim before its retry time).
//!
//! Judging must raise no false alarm, since a run over real processes cannot be replayed. This
//! module therefore judges only the invariants that read nothing a journal lacks, replays the
//! journal onto the rows it started from, and refuses (`Err`) a journal that does not end in the
//! final rows read apart from it: a journal that missed a change would judge states that never
//! existed. It must not read a clock or change what it is given.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use commitgap::env::Value;

use crate::backend::Backend;
use crate::config::SimConfig;
use crate::final_state::FinalRow;
use crate::invariants::{Invariant, Observation};
use crate::provider::{OperationReader, ProviderModel};
use crate::record::{CommitRecord, History, StepRecord};
use crate::rows::RowChange;
use crate::sender::Sender;
use crate::shape::InvariantChoice;
use crate::system::{RowReader, System};
use crate::view::DbView;
use crate::workload::Workload;

/// One row a committed transaction wrote or deleted.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalChange {
    /// The observed table the row belongs to.
    pub table: String,
    /// The row's SQLite rowid.
    pub rowid: i64,
    /// The row's values after the commit, in table order, or `None` if the commit deleted it.
    pub values: Option<Vec<Value>>,
}

/// One committed transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalCommit {
    /// The process whose connection committed, named as the simulator names its processes
    /// (`receiver-…`, `relay-…`), so that the rules about who may commit what apply alike.
    pub process_id: String,
    /// True time when the commit's last change was made, in the clock the processes' own
    /// clocks read (on a real machine, the wall clock in ms since the epoch): no later than the
    /// commit, and no earlier than anything its process decided before writing.
    pub at_ms: i64,
    /// The rows it changed, in the order it changed them.
    pub changes: Vec<JournalChange>,
}

/// Every commit of a run, between the rows it started from and those it ended with.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CommitJournal {
    /// The observed rows before the first commit (what the system's set-up left).
    pub start: Vec<FinalRow>,
    /// Every committed transaction that changed an observed row, in commit order.
    pub commits: Vec<JournalCommit>,
    /// The observed rows read at the end, apart from the journal: the replay must end in them.
    pub end: Vec<FinalRow>,
    /// The observed tables' column names, in table order
    /// ([`crate::final_state::read_table_columns`]): how the rows of the tables a system
    /// declares ([`System::tables`]) are read. Other tables need none.
    pub columns: BTreeMap<String, Vec<String>>,
    /// How far a commit's time may be from what a process's clock read at the same moment, in
    /// ms: the invariants judged by true time allow for it as they allow for clock skew.
    pub clock_uncertainty_ms: i64,
}

/// What the invariants made of a journal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalJudgement {
    /// How many commits were judged.
    pub commits: usize,
    /// The names of the invariants checked at every commit, in registry order.
    pub judged: Vec<String>,
    /// The first failure of each invariant that failed, with its evidence in one line that names
    /// the commit.
    pub failures: Vec<(String, String)>,
    /// Every `(account, event_id)` whose receipt some commit wrote, or the start held.
    pub ever_received: BTreeSet<(String, String)>,
}

/// Judges `journal`, the commits of a run of `system` over `workload` whose deliveries `sender`
/// records, commit by commit, with the invariants `choice` picks among the built-in ones and
/// `added` that can judge a journal (see the module documentation). `Err` says what could not be
/// read: a row of a table the system does not observe, a row it cannot decode, a choice naming
/// no invariant, or a journal that does not end in its final rows.
pub fn judge_commit_journal(
    system: &dyn System,
    workload: &Workload,
    sender: &Sender,
    journal: CommitJournal,
    added: &[Arc<dyn Invariant>],
    choice: &InvariantChoice,
) -> Result<JournalJudgement, String> {
    let domain = system.domain();
    let reader_domain = Arc::clone(&domain);
    let reader = OperationReader::new(move |payload| reader_domain.operation_of(payload));
    let tables = &crate::system::observed_tables(system);
    let columns = &journal.columns;
    let row_reader = RowReader::new(system, &|table| crate::final_state::columns_given(columns, table))?;
    let decode = |table: &str, values: &[Value]| {
        row_reader
            .read(system, table, values)
            .map_err(|error| format!("a journal row of {table} does not decode: {error}"))
    };
    let (judging, _) = crate::invariants::judging(&*domain, added, system.workflows(), choice)?;
    let judging: Vec<&dyn Invariant> = judging
        .iter()
        .map(|invariant| &**invariant)
        .filter(|invariant| invariant.judges_commits())
        .collect();
    let model = domain.model(workload).with_refusals(&*domain, workload);
    let provider = ProviderModel::from_ledger(reader.clone(), Vec::new(), Vec::new())?;
    let mut config = SimConfig::draw(0, Backend::Memdb);
    config.invariants = choice.clone();

    let mut db = DbView::new(reader);
    let mut history = History {
        clock_offset_max_ms: journal.clock_uncertainty_ms.max(0),
        ..History::default()
    };
    let mut rows = Rows::default();
    let start = rows.changes(tables, system, journal.start.into_iter().map(JournalChange::from))?;
    let diffs = db.apply(&decode, tables, start)?;
    remember(&mut history, "start", &diffs);

    let mut judgement = JournalJudgement {
        commits: journal.commits.len(),
        judged: judging
            .iter()
            .map(|invariant| invariant.name().to_owned())
            .collect(),
        ..JournalJudgement::default()
    };
    let mut failed = BTreeSet::new();
    let total = journal.commits.len();
    for (index, commit) in journal.commits.into_iter().enumerate() {
        let changes = rows.changes(tables, system, commit.changes)?;
        let diffs = db.apply(&decode, tables, changes)?;
        remember(&mut history, &commit.process_id, &diffs);
        let step = StepRecord {
            commits: vec![CommitRecord {
                process_id: commit.process_id,
                hostile: None,
                diffs,
            }],
            ..StepRecord::default()
        };
        let observation = Observation {
            db: &db,
            provider: &provider,
            workload,
            sender,
            history: &history,
            step: &step,
            now_ms: commit.at_ms,
            config: &config,
            domain: &*domain,
            model: &model,
        };
        for invariant in &judging {
            if failed.contains(invariant.name()) {
                continue;
            }
            if let Err(evidence) = invariant.check(&observation) {
                failed.insert(invariant.name());
                judgement.failures.push((
                    invariant.name().to_owned(),
                    format!("at commit {} of {total}: {evidence}", index + 1),
                ));
            }
        }
    }
    rows.ends_in(journal.end)?;
    judgement.ever_received = history.ever_received;
    Ok(judgement)
}

/// Remembers what the commit of `process_id` whose changes are `diffs` adds to `history`: who
/// took each lease, which events were ever received, and which moves entities made. The world
/// remembers its commits with it too, so a journal's history is the simulator's.
pub(crate) fn remember(history: &mut History, process_id: &str, diffs: &[crate::view::RowDiff]) {
    use crate::system::ObservedRow;
    for diff in diffs {
        match (&diff.before, &diff.after) {
            (before, Some(ObservedRow::Obligation(after))) => {
                let token_before = match before {
                    Some(ObservedRow::Obligation(before)) => Some(before.lease_token),
                    _ => None,
                };
                if token_before != Some(after.lease_token) {
                    history.lease_holders.insert(
                        (after.operation_key.clone(), after.lease_token),
                        process_id.to_owned(),
                    );
                }
            }
            (_, Some(ObservedRow::Receipt(receipt))) => {
                history
                    .ever_received
                    .insert((receipt.account.clone(), receipt.event_id.clone()));
            }
            (Some(ObservedRow::Entity(before)), Some(ObservedRow::Entity(after)))
                if before.state.state != after.state.state =>
            {
                history.moves.insert((
                    after.tenant.clone(),
                    after.subject.clone(),
                    before.state.state.clone(),
                    after.state.state.clone(),
                ));
            }
            _ => {}
        }
    }
}

impl From<FinalRow> for JournalChange {
    fn from(row: FinalRow) -> JournalChange {
        JournalChange {
            table: row.table,
            rowid: row.rowid,
            values: Some(row.values),
        }
    }
}

/// The raw rows the replay has reached, to compare with the final rows read apart from it.
#[derive(Default)]
struct Rows(BTreeMap<(String, i64), Vec<Value>>);

impl Rows {
    /// `changes` as the view takes them, applied to the raw rows too.
    fn changes(
        &mut self,
        tables: &[&str],
        system: &dyn System,
        changes: impl IntoIterator<Item = JournalChange>,
    ) -> Result<Vec<RowChange>, String> {
        changes
            .into_iter()
            .map(|change| {
                let Some(table) = tables.iter().position(|table| *table == change.table) else {
                    return Err(format!(
                        "a journal row (rowid {}) is of table {:?}, which system {} does not observe",
                        change.rowid,
                        change.table,
                        system.name()
                    ));
                };
                let place = (change.table, change.rowid);
                match &change.values {
                    Some(values) => self.0.insert(place, values.clone()),
                    None => self.0.remove(&place),
                };
                Ok(RowChange {
                    table,
                    rowid: change.rowid,
                    values: change.values,
                })
            })
            .collect()
    }

    /// `Err` naming the first row where the replay and `end` differ.
    fn ends_in(self, end: Vec<FinalRow>) -> Result<(), String> {
        let mut end: BTreeMap<(String, i64), Vec<Value>> = end
            .into_iter()
            .map(|row| ((row.table, row.rowid), row.values))
            .collect();
        for ((table, rowid), values) in self.0 {
            match end.remove(&(table.clone(), rowid)) {
                Some(read) if read == values => {}
                Some(read) => {
                    return Err(format!(
                        "the commit journal does not end in the final rows: {table} rowid {rowid} is {values:?} in the journal but {read:?} in the database"
                    ));
                }
                None => {
                    return Err(format!(
                        "the commit journal does not end in the final rows: {table} rowid {rowid} is in the journal but not in the database"
                    ));
                }
            }
        }
        if let Some(((table, rowid), _)) = end.into_iter().next() {
            return Err(format!(
                "the commit journal does not end in the final rows: {table} rowid {rowid} is in the database but no commit of the journal wrote it"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::final_state::{read_final_rows, read_table_columns};
    use crate::run::{RunOptions, RunOutcome, prepare};

    /// What judging a run's journal found against what the simulator found.
    struct Judged {
        outcome: RunOutcome,
        judgement: JournalJudgement,
    }

    /// Runs `seed` of `system` with its commits journaled, and judges the journal as a check over
    /// real processes would: from the rows the set-up left to those the run ended with.
    fn judge_run(system: &Arc<dyn System>, seed: u64, options: &RunOptions) -> Judged {
        let mut simulation = prepare(system, seed, options).unwrap();
        let tables = &crate::system::observed_tables(&**system);
        let start = {
            let mut world = simulation.world.borrow_mut();
            world.keep_commit_journal();
            read_final_rows(world.database_mut().setup_connection(), tables).unwrap()
        };
        let outcome = simulation.run().unwrap();
        let mut world = simulation.world.borrow_mut();
        let end = read_final_rows(world.database_mut().setup_connection(), tables).unwrap();
        let columns = read_table_columns(world.database_mut().setup_connection(), tables).unwrap();
        let journal = CommitJournal {
            start,
            commits: world.commit_journal().to_vec(),
            end,
            columns,
            // The simulator's commits are timed by true time; its processes' clocks are off by
            // at most the furthest skew of the run.
            clock_uncertainty_ms: world.history().clock_offset_max_ms,
        };
        let judgement = judge_commit_journal(
            &**system,
            world.workload(),
            world.sender(),
            journal,
            &[],
            &outcome.config.invariants,
        )
        .unwrap_or_else(|error| panic!("{} seed {seed}: {error}", system.name()));
        Judged { outcome, judgement }
    }

    #[test]
    fn every_reference_seed_the_simulator_passes_passes_as_a_journal() {
        let reference = crate::systems::by_name("reference").unwrap();
        let every_fault = RunOptions {
            every_fault: true,
            backend: Backend::WalFile,
            ..RunOptions::default()
        };
        let mut passed = 0;
        for seed in 0..30 {
            let judged = judge_run(&reference, seed, &every_fault);
            if judged.outcome.failure.is_some() {
                continue;
            }
            assert!(judged.judgement.commits > 0, "seed {seed} commits something");
            assert_eq!(
                judged.judgement.failures,
                Vec::<(String, String)>::new(),
                "reference seed {seed} passes the simulator but not as a journal"
            );
            passed += 1;
        }
        assert!(passed >= 27, "{passed} of 30 reference seeds passed");
    }

    #[test]
    fn every_system_judged_by_its_journal_fails_only_where_the_simulator_fails() {
        let options = RunOptions {
            backend: Backend::WalFile,
            ..RunOptions::default()
        };
        let mut caught: BTreeMap<String, usize> = BTreeMap::new();
        for system in crate::systems::all() {
            let name = system.name().to_owned();
            for seed in 0..10 {
                let judged = judge_run(&system, seed, &options);
                let Some(failure) = judged.outcome.failure else {
                    // A passing run's commits keep every commit rule: no false alarm.
                    assert_eq!(
                        judged.judgement.failures,
                        Vec::<(String, String)>::new(),
                        "{name} seed {seed} passes the simulator but not as a journal"
                    );
                    continue;
                };
                if !judged.judgement.judged.contains(&failure.invariant) {
                    continue;
                }
                // The commit that failed in the simulator is in the journal, and fails alike.
                assert!(
                    judged
                        .judgement
                        .failures
                        .iter()
                        .any(|(invariant, _)| *invariant == failure.invariant),
                    "{name} seed {seed} failed {} ({}) in the simulator but not as a journal: {:?}",
                    failure.invariant,
                    failure.message,
                    judged.judgement.failures
                );
                *caught.entry(name.clone()).or_insert(0) += 1;
            }
        }
        // The bugs a final state cannot show, whose rule is broken between two commits.
        for name in [
            "receipt-after",
            "unfenced-completion",
            "outbox-on-other-connection",
        ] {
            assert!(caught.get(name).copied().unwrap_or(0) > 0, "{name}: {caught:?}");
        }
    }

    #[test]
    fn a_journal_that_does_not_end_in_the_final_rows_is_refused() {
        let reference = crate::systems::by_name("reference").unwrap();
        let mut simulation = prepare(
            &reference,
            3,
            &RunOptions {
                backend: Backend::WalFile,
                ..RunOptions::default()
            },
        )
        .unwrap();
        let start = {
            let mut world = simulation.world.borrow_mut();
            world.keep_commit_journal();
            read_final_rows(
                world.database_mut().setup_connection(),
                reference.observed_tables(),
            )
            .unwrap()
        };
        simulation.run().unwrap();
        let mut world = simulation.world.borrow_mut();
        let end = read_final_rows(
            world.database_mut().setup_connection(),
            reference.observed_tables(),
        )
        .unwrap();
        let mut commits = world.commit_journal().to_vec();
        // A journal that lost the last commit that changed a row.
        let lost = commits
            .iter()
            .rposition(|commit| !commit.changes.is_empty())
            .unwrap();
        commits.remove(lost);
        let error = judge_commit_journal(
            &*reference,
            world.workload(),
            world.sender(),
            CommitJournal {
                start,
                commits,
                end,
                columns: BTreeMap::new(),
                clock_uncertainty_ms: 0,
            },
            &[],
            &InvariantChoice::default(),
        )
        .unwrap_err();
        assert!(error.contains("does not end in the final rows"), "{error}");
    }
}
