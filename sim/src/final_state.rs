//! A final state the simulator did not produce, judged with the simulator's own invariants: the
//! rows of a real SQLite database, the ledger of a real provider double and a real sender's
//! books, as a check over real processes (`live`) finds them once the processes went quiet.
//!
//! A final state is one moment, not a run. It is judged as if every row had been created by one
//! commit and every effect were new, with no answer, request or reply to look at, and with the
//! run's history empty but for the two facts a check over real processes records: the receipts it
//! saw during the run and the obligations dead when the operator set out to requeue them. Only
//! the invariants whose check on such a state fails only where the run itself failed are judged
//! ([`Invariant::judges_final_state`]); every other one is listed as left out, with why.
//!
//! A run over real processes cannot be replayed to tell a false alarm from a bug, so a false
//! alarm is the worst this module can do. It must not judge what a final state cannot show, must
//! not invent facts of the run the check did not record, and must not change what it is given.
//! An `Err` says only that the input could not be read (a row the system cannot decode, a payload
//! that names no operation); a failed invariant is a [`FinalJudgement::failures`] entry.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use commitgap::env::Value;

use crate::backend::Backend;
use crate::config::SimConfig;
use crate::invariants::{Invariant, InvariantKind, Observation};
use crate::provider::{LedgerEntry, OperationReader, ProviderModel};
use crate::record::{CommitRecord, History, StepRecord};
use crate::rows::RowChange;
use crate::sender::Sender;
use crate::shape::InvariantChoice;
use crate::system::{RowReader, System};
use crate::view::{DbView, RowDiff};
use crate::workload::Workload;

/// The process a final state's one commit is recorded as made by.
pub const FINAL_STATE_PROCESS: &str = "final-state";

/// One row of an observed table, as a real database holds it at the end.
#[derive(Debug, Clone, PartialEq)]
pub struct FinalRow {
    /// The observed table the row belongs to.
    pub table: String,
    /// The row's SQLite rowid.
    pub rowid: i64,
    /// The row's values, in table order.
    pub values: Vec<Value>,
}

/// What a check over real processes found at the end (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FinalState {
    /// Every row of the system's observed tables: (table name, values in table order, the rowid).
    pub rows: Vec<FinalRow>,
    /// Every effect the provider performed, in the order performed.
    pub effects: Vec<LedgerEntry>,
    /// The idempotency keys the provider was still processing a request for.
    pub keys_in_progress: Vec<String>,
    /// The observed tables' column names, in table order ([`read_table_columns`]): how the rows
    /// of the tables a system declares ([`System::tables`]) are read. Other tables need none.
    pub columns: BTreeMap<String, Vec<String>>,
    /// Every `(account, event_id)` whose receipt the check saw committed during the run. The
    /// final receipts are added to it, since each was certainly received.
    pub ever_received: BTreeSet<(String, String)>,
    /// The operation keys of the obligations dead just before the operator's requeue.
    pub dead_at_requeue: BTreeSet<String>,
    /// Wall-clock or virtual end time in ms, given to Observation::now_ms.
    pub now_ms: i64,
}

/// What the invariants made of a final state.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FinalJudgement {
    /// The names of the invariants checked, in registry order.
    pub judged: Vec<String>,
    /// The invariants not checked, each with why: it cannot judge a final state, the system lacks
    /// a workflow it assumes, or the choice of invariants left it out.
    pub left_out: Vec<(String, String)>,
    /// The invariants that failed, each with its evidence in one line.
    pub failures: Vec<(String, String)>,
}

impl FinalJudgement {
    /// Whether every invariant judged held.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Judges `state`, the end of a run of `system` over `workload` whose deliveries `sender`
/// records, with the invariants `choice` picks among the built-in ones and `added`, as the
/// simulator would at the end of a run; only those that can judge a final state are checked
/// (see the module documentation). `Err` says what could not be read: a row of a table the
/// system does not observe, two rows with one rowid, a row the system cannot decode, an effect
/// whose payload names no operation, or a choice naming no invariant.
///
/// The observation's configuration is a default one, not the run's: no invariant that judges a
/// final state reads it.
pub fn judge_final_state(
    system: &dyn System,
    workload: &Workload,
    sender: &Sender,
    state: FinalState,
    added: &[Arc<dyn Invariant>],
    choice: &InvariantChoice,
) -> Result<FinalJudgement, String> {
    let domain = system.domain();
    // As the world reads payloads: by the system's domain, for the view and the provider alike.
    let reader_domain = Arc::clone(&domain);
    let reader = OperationReader::new(move |payload| reader_domain.operation_of(payload));
    let FinalState {
        rows,
        columns,
        effects,
        keys_in_progress,
        mut ever_received,
        dead_at_requeue,
        now_ms,
    } = state;
    let (db, diffs) = view_of(system, reader.clone(), rows, &columns)?;
    // A final receipt was received, whether or not the check's polling saw it: the simulator's
    // history holds every receipt ever committed, and so must this one.
    ever_received.extend(
        db.all_receipts()
            .map(|receipt| (receipt.account.clone(), receipt.event_id.clone())),
    );
    let provider = ProviderModel::from_ledger(reader, effects, keys_in_progress)?;
    let step = StepRecord {
        commits: vec![CommitRecord {
            process_id: FINAL_STATE_PROCESS.to_owned(),
            hostile: None,
            diffs,
        }],
        new_effects: (0..provider.effects().len()).collect(),
        ..StepRecord::default()
    };
    let history = History {
        ever_received,
        dead_at_requeue,
        ..History::default()
    };
    // Exactly as the world computes it, refusals included.
    let model = domain.model(workload).with_refusals(&*domain, workload);
    let mut config = SimConfig::draw(0, Backend::Memdb);
    config.invariants = choice.clone();
    let observation = Observation {
        db: &db,
        provider: &provider,
        workload,
        sender,
        history: &history,
        step: &step,
        now_ms,
        config: &config,
        domain: &*domain,
        model: &model,
    };
    let (judging, left_out) = crate::invariants::judging(&*domain, added, system.workflows(), choice)?;
    let every: Vec<&'static str> = crate::invariants::registry(&*domain, added)
        .iter()
        .map(|invariant| invariant.name())
        .collect();
    Ok(judge(&every, &judging, left_out, &observation))
}

/// The view of `rows`, all applied as one commit, and that commit's diffs: every row created.
fn view_of(
    system: &dyn System,
    reader: OperationReader,
    rows: Vec<FinalRow>,
    columns: &BTreeMap<String, Vec<String>>,
) -> Result<(DbView, Vec<RowDiff>), String> {
    let tables = &crate::system::observed_tables(system);
    let mut places = BTreeSet::new();
    let mut changes = Vec::with_capacity(rows.len());
    for row in rows {
        let Some(table) = tables.iter().position(|table| *table == row.table) else {
            return Err(format!(
                "a final row (rowid {}) is of table {:?}, which system {} does not observe",
                row.rowid,
                row.table,
                system.name()
            ));
        };
        // Applied as one commit, a second row under one rowid would replace the first, and the
        // state judged would not be the one given.
        if !places.insert((table, row.rowid)) {
            return Err(format!(
                "two final rows of {} have rowid {}",
                row.table, row.rowid
            ));
        }
        changes.push(RowChange {
            table,
            rowid: row.rowid,
            values: Some(row.values),
        });
    }
    let mut db = DbView::new(reader);
    let rows = RowReader::new(system, &|table| columns_given(columns, table))?;
    let decode = |table: &str, values: &[Value]| {
        rows.read(system, table, values)
            .map_err(|error| format!("a final row of {table} does not decode: {error}"))
    };
    let diffs = db.apply(&decode, tables, changes)?;
    Ok((db, diffs))
}

/// Checks the invariants of `judging` that can judge a final state against `observation`, and
/// lists every other invariant of `every` (the registry's names, in order) as left out: those of
/// `judging` that cannot, those `workflow_left_out` names with its reason, and the rest as not
/// chosen.
fn judge(
    every: &[&'static str],
    judging: &[Box<dyn Invariant>],
    workflow_left_out: Vec<(String, String)>,
    observation: &Observation<'_>,
) -> FinalJudgement {
    let mut judgement = FinalJudgement::default();
    let chosen: BTreeMap<&str, &dyn Invariant> = judging
        .iter()
        .map(|invariant| (invariant.name(), &**invariant))
        .collect();
    let mut workflow_left_out: BTreeMap<String, String> = workflow_left_out.into_iter().collect();
    for &name in every {
        let Some(invariant) = chosen.get(name) else {
            let reason = workflow_left_out
                .remove(name)
                .unwrap_or_else(|| "not chosen: the choice of invariants leaves it out".to_owned());
            judgement.left_out.push((name.to_owned(), reason));
            continue;
        };
        if !invariant.judges_final_state() {
            judgement
                .left_out
                .push((name.to_owned(), cannot_judge(invariant.kind()).to_owned()));
            continue;
        }
        judgement.judged.push(name.to_owned());
        if let Err(evidence) = invariant.check(observation) {
            judgement.failures.push((name.to_owned(), evidence));
        }
    }
    judgement
}

/// Why an invariant of `kind` that cannot judge a final state was left out.
fn cannot_judge(kind: InvariantKind) -> &'static str {
    match kind {
        InvariantKind::Safety => {
            "cannot judge a final state: it judges each step's changes, answers, requests or leases, which a final state does not show"
        }
        InvariantKind::Liveness => {
            "cannot judge a final state: it reads facts of the run that a check over real processes does not record"
        }
    }
}

/// The column names of each of `tables` on `connection`, in table order, for
/// [`FinalState::columns`] and [`crate::commit_journal::CommitJournal::columns`].
pub fn read_table_columns(
    connection: &rusqlite::Connection,
    tables: &[&str],
) -> Result<BTreeMap<String, Vec<String>>, String> {
    tables
        .iter()
        .map(|table| {
            Ok((
                (*table).to_owned(),
                crate::system::table_columns(connection, table)?,
            ))
        })
        .collect()
}

/// The column names `columns` gives for `table`, or why a declared table cannot be read without
/// them.
pub(crate) fn columns_given(
    columns: &BTreeMap<String, Vec<String>>,
    table: &str,
) -> Result<Vec<String>, String> {
    columns.get(table).cloned().ok_or_else(|| {
        format!("the column names of declared table {table} are missing (read them with read_table_columns)")
    })
}

/// Every row of `tables` on `connection`, table by table in rowid order, each with its values in
/// table order: a real database's final rows, for [`FinalState::rows`]. Read as the simulator
/// reads the rows a system's set-up left, so that both decode alike.
pub fn read_final_rows(connection: &rusqlite::Connection, tables: &[&str]) -> Result<Vec<FinalRow>, String> {
    let changes = crate::db::rows_of(connection, tables).map_err(|error| error.to_string())?;
    Ok(changes
        .into_iter()
        .map(|change| FinalRow {
            table: tables[change.table].to_owned(),
            rowid: change.rowid,
            values: change.values.unwrap_or_default(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::{RunOptions, RunOutcome, Simulation, prepare};
    use crate::system::ObligationStatus;

    /// A run of `system` for `seed`, carried out to its end, and its outcome.
    fn run(system: &Arc<dyn System>, seed: u64) -> (Simulation, RunOutcome) {
        run_with(system, seed, &RunOptions::default())
    }

    /// A run of `system` for `seed` with `options`, carried out to its end, and its outcome.
    fn run_with(system: &Arc<dyn System>, seed: u64, options: &RunOptions) -> (Simulation, RunOutcome) {
        let mut simulation = prepare(system, seed, options).unwrap();
        let outcome = simulation.run().unwrap();
        (simulation, outcome)
    }

    /// What a check over real processes would read at the end of `simulation`: the rows of its
    /// database through a connection of its own, the provider's ledger, and the two facts of the
    /// history such a check records. `None` when the database cannot be read (a task the run
    /// stopped holds a lock that keeps readers out).
    fn final_state_of(system: &dyn System, simulation: &Simulation) -> Option<FinalState> {
        let mut world = simulation.world.borrow_mut();
        let tables = crate::system::observed_tables(system);
        let rows = read_final_rows(world.database_mut().setup_connection(), &tables).ok()?;
        let columns = read_table_columns(world.database_mut().setup_connection(), &tables).ok()?;
        let effects = world
            .provider()
            .effects()
            .iter()
            .map(|effect| LedgerEntry {
                effect_id: effect.id.clone(),
                idempotency_key: effect.idempotency_key.clone(),
                payload: effect.payload.clone(),
                at_ms: effect.at_ms,
            })
            .collect();
        Some(FinalState {
            rows,
            columns,
            effects,
            keys_in_progress: world.provider().keys_in_progress().cloned().collect(),
            ever_received: world.history().ever_received.clone(),
            dead_at_requeue: world.history().dead_at_requeue.clone(),
            now_ms: world.now_ms(),
        })
    }

    /// Judges `state` as the end of `simulation`, with its workload and its sender.
    fn judged(
        system: &dyn System,
        simulation: &Simulation,
        state: FinalState,
        choice: &InvariantChoice,
    ) -> FinalJudgement {
        let world = simulation.world.borrow();
        judge_final_state(system, world.workload(), world.sender(), state, &[], choice).unwrap()
    }

    /// The run's own choice of invariants, less `dead-only-if-rejected` when an obligation stayed
    /// dead because the simulated provider refused it: a ledger records no refusal (the doubles
    /// of a check over real processes never refuse), so that one cannot be judged the same way.
    fn choice_for(simulation: &Simulation, outcome: &RunOutcome) -> (InvariantChoice, bool) {
        let world = simulation.world.borrow();
        let mut choice = outcome.config.invariants.clone();
        let refused = world.view().obligations().any(|obligation| {
            obligation.status == ObligationStatus::Dead
                && world.provider().rejected(&world.view().operation_of(obligation))
        });
        if refused {
            choice.without.insert("dead-only-if-rejected".to_owned());
        }
        (choice, refused)
    }

    /// What judging the ends of a system's runs as final states found.
    #[derive(Debug, Default)]
    struct Tally {
        /// Seeds the simulator passed, each of which passed as a final state too.
        passed: usize,
        /// Of those, seeds that left an obligation dead because the provider refused it.
        refused: usize,
        /// Seeds the simulator failed with an invariant that judges a final state, each of which
        /// failed as a final state too, with that invariant.
        caught: usize,
    }

    /// Runs `seeds` of `system` with `options` and judges each run's end as a final state: one the
    /// simulator passed (and settled) must pass, and one it failed with an invariant that judges
    /// a final state must fail with it too, since the state after the failing step still shows
    /// what failed. An obligation deleted while owed leaves no row to show, and is not counted.
    fn judge_runs(system: &Arc<dyn System>, seeds: std::ops::Range<u64>, options: &RunOptions) -> Tally {
        let mut tally = Tally::default();
        for seed in seeds {
            let (simulation, outcome) = run_with(system, seed, options);
            if outcome.unsettled.is_some() && outcome.failure.is_none() {
                continue;
            }
            let name = system.name();
            let state = final_state_of(&**system, &simulation)
                .unwrap_or_else(|| panic!("{name} seed {seed}: the database reads after the run"));
            let (choice, refused) = choice_for(&simulation, &outcome);
            let judgement = judged(&**system, &simulation, state, &choice);
            let Some(failure) = outcome.failure else {
                assert_eq!(
                    judgement.failures,
                    Vec::<(String, String)>::new(),
                    "{name} seed {seed} passes the simulator but not as a final state"
                );
                tally.passed += 1;
                tally.refused += usize::from(refused);
                continue;
            };
            let judges = judgement.judged.contains(&failure.invariant);
            if judges && !failure.message.contains("while it was owed") {
                assert!(
                    judgement
                        .failures
                        .iter()
                        .any(|(invariant, _)| *invariant == failure.invariant),
                    "{name} seed {seed} failed {} ({}) in the simulator but not as a final state: {:?}",
                    failure.invariant,
                    failure.message,
                    judgement.failures
                );
                tally.caught += 1;
            }
        }
        tally
    }

    #[test]
    fn every_reference_seed_the_simulator_passes_passes_as_a_final_state() {
        let reference = crate::systems::by_name("reference").unwrap();
        let drawn = judge_runs(&reference, 0..100, &RunOptions::default());
        assert!(drawn.passed >= 95, "{drawn:?}");
        let every_fault = RunOptions {
            every_fault: true,
            ..RunOptions::default()
        };
        let faulty = judge_runs(&reference, 0..40, &every_fault);
        assert!(faulty.passed >= 36, "{faulty:?}");
        assert!(
            drawn.refused + faulty.refused > 0,
            "some seed leaves an obligation the provider refused dead"
        );
    }

    #[test]
    fn a_planted_bug_passes_as_a_final_state_where_the_simulator_passes_it_and_fails_where_it_fails() {
        // On a WAL file, so that a run stopped at its failure, with a task holding a write lock,
        // can still be read, as a real database can.
        let options = RunOptions {
            backend: crate::backend::Backend::WalFile,
            ..RunOptions::default()
        };
        let mut total = Tally::default();
        for system in crate::systems::all().iter().skip(1) {
            let tally = judge_runs(system, 0..10, &options);
            total.passed += tally.passed;
            total.caught += tally.caught;
        }
        assert!(total.passed > 30 && total.caught > 30, "{total:?}");
    }

    /// The first seed from 0 of the reference that passes, settles, and leaves a done obligation
    /// with its one effect: a final state to break one way at a time.
    fn passing_reference() -> (Arc<dyn System>, Simulation, FinalState) {
        let reference = crate::systems::by_name("reference").unwrap();
        for seed in 0..20 {
            let (simulation, outcome) = run(&reference, seed);
            let done = simulation
                .world
                .borrow()
                .view()
                .obligations()
                .any(|obligation| obligation.status == ObligationStatus::Done);
            if outcome.failure.is_none() && outcome.unsettled.is_none() && done {
                let state = final_state_of(&*reference, &simulation).unwrap();
                let judgement = judged(
                    &*reference,
                    &simulation,
                    state.clone(),
                    &InvariantChoice::default(),
                );
                assert!(judgement.passed(), "seed {seed}: {:?}", judgement.failures);
                return (reference, simulation, state);
            }
        }
        panic!("no reference seed in 0..20 passes with a done obligation");
    }

    /// The evidence `judgement` gives for `invariant`, which must have failed.
    fn evidence<'a>(judgement: &'a FinalJudgement, invariant: &str) -> &'a str {
        judgement
            .failures
            .iter()
            .find(|(name, _)| name == invariant)
            .map(|(_, evidence)| evidence.as_str())
            .unwrap_or_else(|| panic!("{invariant} did not fail: {:?}", judgement.failures))
    }

    #[test]
    fn a_second_effect_for_an_operation_fails_one_effect_per_operation() {
        let (reference, simulation, mut state) = passing_reference();
        let first = simulation.world.borrow().provider().effect(0).clone();
        state.effects.push(LedgerEntry {
            effect_id: "eff-again".to_owned(),
            idempotency_key: format!("{}-under-another-key", first.idempotency_key),
            payload: first.payload.clone(),
            at_ms: first.at_ms + 1,
        });
        let judgement = judged(&*reference, &simulation, state, &InvariantChoice::default());
        let evidence = evidence(&judgement, "one-effect-per-operation");
        assert!(evidence.contains(&first.operation), "{evidence}");
        assert!(evidence.contains("eff-again"), "{evidence}");
    }

    #[test]
    fn a_done_obligation_without_its_effect_fails_obligation_settles_with_effect_or_reason() {
        let (reference, simulation, mut state) = passing_reference();
        let world = simulation.world.borrow();
        let done = world
            .view()
            .obligations()
            .find(|obligation| obligation.status == ObligationStatus::Done)
            .unwrap();
        let operation = world.view().operation_of(done);
        let key = done.operation_key.clone();
        drop(world);
        let reader = crate::provider::OperationReader::new(move |payload| {
            crate::domain::payments().operation_of(payload)
        });
        state.effects.retain(|effect| {
            reader.operation_of(&effect.payload).ok().as_deref() != Some(operation.as_str())
        });
        let judgement = judged(&*reference, &simulation, state, &InvariantChoice::default());
        let evidence = evidence(&judgement, "obligation-settles-with-effect-or-reason");
        assert!(
            evidence.contains(&key) && evidence.contains(&operation),
            "{evidence}"
        );
    }

    #[test]
    fn an_obligation_left_owed_fails_outbox_drains() {
        let (reference, simulation, _) = passing_reference();
        let mut world = simulation.world.borrow_mut();
        let connection = world.database_mut().setup_connection();
        let key: String = connection
            .query_row(
                "UPDATE outbox SET status = 'pending' \
                 WHERE rowid = (SELECT min(rowid) FROM outbox WHERE status = 'done') RETURNING operation_key",
                [],
                |row| row.get(0),
            )
            .unwrap();
        drop(world);
        let state = final_state_of(&*reference, &simulation).unwrap();
        let judgement = judged(&*reference, &simulation, state, &InvariantChoice::default());
        let evidence = evidence(&judgement, "outbox-drains");
        assert!(evidence.contains(&key), "{evidence}");
    }

    #[test]
    fn a_stream_never_acknowledged_fails_sender_converges() {
        let (reference, simulation, state) = passing_reference();
        let world = simulation.world.borrow();
        let workload = world.workload();
        let domain = reference.domain();
        let model = domain.model(workload).with_refusals(&*domain, workload);
        // A sender that never delivered: each of its streams is still waiting to be sent.
        let silent = Sender::new(world.sender().preset(), &workload.events, |event| {
            model.expects_rejection(event)
        });
        let judgement = judge_final_state(
            &*reference,
            workload,
            &silent,
            state,
            &[],
            &InvariantChoice::default(),
        )
        .unwrap();
        let evidence = evidence(&judgement, "sender-converges");
        assert!(evidence.contains("still delivering"), "{evidence}");
    }

    /// A reference with no events and no rows: what judging needs, and nothing to judge.
    fn nothing() -> (Arc<dyn System>, Workload, Sender) {
        let reference = crate::systems::by_name("reference").unwrap();
        let workload = Workload::new(crate::workload::Fixtures::default(), Vec::new());
        let sender = Sender::new(crate::sender::SenderPreset::Svix, &[], |_| false);
        (reference, workload, sender)
    }

    #[test]
    fn every_invariant_that_cannot_judge_a_final_state_is_left_out_with_why() {
        let (reference, workload, sender) = nothing();
        let every = InvariantChoice::default();
        let judgement = judge_final_state(
            &*reference,
            &workload,
            &sender,
            FinalState::default(),
            &[],
            &every,
        )
        .unwrap();
        let all = crate::invariants::registry(&*reference.domain(), &[]);
        for invariant in &all {
            let name = invariant.name();
            let left_out = judgement.left_out.iter().find(|(left, _)| left == name);
            if invariant.judges_final_state() {
                assert!(judgement.judged.iter().any(|judged| judged == name), "{name}");
                assert_eq!(left_out, None);
            } else {
                let (_, reason) = left_out.unwrap_or_else(|| panic!("{name} is neither judged nor left out"));
                assert!(
                    reason.starts_with("cannot judge a final state: "),
                    "{name}: {reason}"
                );
            }
        }
        assert_eq!(judgement.judged.len() + judgement.left_out.len(), all.len());
        assert_eq!(
            judgement.judged,
            [
                "one-effect-per-operation",
                "one-receipt-per-event",
                "one-obligation-per-operation",
                "obligation-settles-with-effect-or-reason",
                "only-owed-operations-take-effect",
                "paid-order-settled",
                "outbox-drains",
                "dead-only-if-rejected",
                "every-event-processed",
                "sender-converges",
                "final-state-matches-creation-order",
                "owed-operation-settles",
                "no-stuck-key",
            ]
        );
        assert!(judgement.passed(), "{:?}", judgement.failures);
    }

    /// A team's invariant that always fails, judging a final state as `judges` says.
    struct AlwaysFails {
        name: &'static str,
        kind: InvariantKind,
        judges: Option<bool>,
    }

    impl Invariant for AlwaysFails {
        fn name(&self) -> &'static str {
            self.name
        }
        fn description(&self) -> &'static str {
            "fails whenever it is checked"
        }
        fn kind(&self) -> InvariantKind {
            self.kind
        }
        fn judges_final_state(&self) -> bool {
            self.judges.unwrap_or(self.kind == InvariantKind::Liveness)
        }
        fn check(&self, _observation: &Observation<'_>) -> Result<(), String> {
            Err(format!("{} was checked", self.name))
        }
    }

    #[test]
    fn a_teams_invariant_is_judged_as_it_says_and_a_choice_leaves_out_the_rest() {
        let (reference, workload, sender) = nothing();
        let added: Vec<Arc<dyn Invariant>> = vec![
            Arc::new(AlwaysFails {
                name: "own-safety-judged",
                kind: InvariantKind::Safety,
                judges: Some(true),
            }),
            Arc::new(AlwaysFails {
                name: "own-safety-per-step",
                kind: InvariantKind::Safety,
                judges: None,
            }),
            Arc::new(AlwaysFails {
                name: "own-liveness",
                kind: InvariantKind::Liveness,
                judges: None,
            }),
        ];
        let choice = InvariantChoice {
            only: None,
            without: ["outbox-drains".to_owned()].into(),
        };
        let judgement = judge_final_state(
            &*reference,
            &workload,
            &sender,
            FinalState::default(),
            &added,
            &choice,
        )
        .unwrap();
        let failed: Vec<&str> = judgement.failures.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(failed, ["own-safety-judged", "own-liveness"]);
        let reason = |name: &str| {
            judgement
                .left_out
                .iter()
                .find(|(left, _)| left == name)
                .map(|(_, reason)| reason.clone())
        };
        assert!(reason("own-safety-per-step").unwrap().starts_with("cannot judge"));
        assert!(reason("outbox-drains").unwrap().starts_with("not chosen"));
        assert!(!judgement.judged.iter().any(|name| name == "outbox-drains"));
    }

    #[test]
    fn what_cannot_be_read_is_an_error_naming_it() {
        let (reference, workload, sender) = nothing();
        let every = InvariantChoice::default();
        let stray = FinalState {
            rows: vec![FinalRow {
                table: "stray_table".to_owned(),
                rowid: 1,
                values: Vec::new(),
            }],
            ..FinalState::default()
        };
        let error = judge_final_state(&*reference, &workload, &sender, stray, &[], &every).unwrap_err();
        assert!(error.contains("stray_table"), "{error}");
        let garbled = FinalState {
            rows: vec![FinalRow {
                table: "outbox".to_owned(),
                rowid: 1,
                values: vec![Value::Integer(1)],
            }],
            ..FinalState::default()
        };
        let error = judge_final_state(&*reference, &workload, &sender, garbled, &[], &every).unwrap_err();
        assert!(error.contains("outbox does not decode"), "{error}");
        let unreadable = FinalState {
            effects: vec![LedgerEntry {
                effect_id: "eff-7".to_owned(),
                idempotency_key: "k".to_owned(),
                payload: "not a payload".to_owned(),
                at_ms: 0,
            }],
            ..FinalState::default()
        };
        let error = judge_final_state(&*reference, &workload, &sender, unreadable, &[], &every).unwrap_err();
        assert!(error.contains("eff-7"), "{error}");
    }
}
