//! Invariants: what must hold, one file each, named as positive statements, listed once in
//! [`registry`].
//!
//! The committed rows, decoded and indexed as an invariant reads them, are here too ([`DbView`]).
//!
//! Two layers judge every system. The pattern's invariants ([`Layer::Pattern`]) know no
//! business: they read receipts, obligations, effects, answers and transactions. The domain's
//! ([`Layer::Domain`]) compare what the system did with its domain's model
//! ([`crate::domain::Model`]): the final states, the operations owed, the allowed transitions,
//! the events to refuse. A domain's rules the generic ones do not cover are its own invariants
//! (payments': [`payments`], checked only for systems in that domain). A team's own invariants
//! are [`Layer::Own`].
//!
//! Safety invariants are checked after every step that committed rows, performed an effect or
//! answered a delivery; they look at that step's changes ([`StepRecord`]) against the committed
//! state, so each check costs what the step changed, not the size of the database. Liveness
//! invariants are checked once, after the faults healed and the world went quiet. Every check
//! reads an [`Observation`] and nothing else: it must not change the world or read the database.

mod claim_waits_for_retry_time;
mod completion_by_lease_holder;
mod dead_only_if_rejected;
mod dedupe_scope_per_account;
mod effect_matches_obligation;
mod every_event_processed;
mod final_state_matches_creation_order;
mod genuine_delivery_accepted;
mod hostile_delivery_changes_nothing;
mod hostile_delivery_refused;
mod lease_outlives_call;
mod no_call_inside_transaction;
mod no_stuck_key;
mod obligation_settles_with_effect_or_reason;
mod one_effect_per_operation;
mod one_live_lease_per_obligation;
mod one_obligation_per_operation;
mod one_receipt_per_event;
mod only_owed_operations_take_effect;
mod outbox_drains;
mod owed_operation_settles;
pub mod payments;
mod purge_keeps_retention;
mod receipt_commits_with_its_work;
mod request_matches_obligation;
mod sender_converges;
mod state_moves_along_allowed_transitions;
mod success_answer_has_receipt;
mod task_closes_its_transaction;
pub mod work_progresses_after_heal;

// The committed rows, decoded and indexed, are what an invariant reads.
pub use crate::view::*;

use std::sync::Arc;

use crate::config::SimConfig;
use crate::domain::{Domain, Model};
use crate::provider::ProviderModel;
pub use crate::record::{AnswerRecord, CommitRecord, History, ReplyRecord, RequestRecord, StepRecord};
use crate::sender::Sender;
use crate::system::{ObligationRow, ObservedRow, Workflow};
use crate::workload::Workload;

pub use crate::shape::InvariantChoice;

/// The invariants that judge a run, and those left out with why.
pub type Judging = (Vec<Box<dyn Invariant>>, Vec<(String, String)>);

/// The invariants that judge a run of a system in `domain` with `workflows` under `choice`,
/// and those left out because the system lacks a workflow they assume, each with the reason.
/// `Err` names a chosen invariant that does not exist.
pub fn judging(
    domain: &dyn Domain,
    added: &[Arc<dyn Invariant>],
    workflows: crate::system::Workflows,
    choice: &InvariantChoice,
) -> Result<Judging, String> {
    let all = registry(domain, added);
    for name in choice.only.iter().flatten().chain(&choice.without) {
        if !all.iter().any(|invariant| invariant.name() == name) {
            return Err(format!(
                "config.invariants names {name:?}, which is no invariant of a system in the {} domain; `list` shows them",
                domain.name()
            ));
        }
    }
    let mut judging = Vec::new();
    let mut left_out = Vec::new();
    for invariant in all {
        if !choice.judges(invariant.name()) {
            continue;
        }
        if let Some(missing) = invariant
            .assumes()
            .iter()
            .find(|workflow| !workflows.has(**workflow))
        {
            left_out.push((
                invariant.name().to_owned(),
                format!("the system has no {} workflow", missing.name()),
            ));
            continue;
        }
        judging.push(invariant);
    }
    Ok((judging, left_out))
}

/// When an invariant is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum InvariantKind {
    /// After every step, faults or not.
    Safety,
    /// Once, after heal, at quiescence.
    Liveness,
}

impl InvariantKind {
    /// The kind's short name, as written in reports.
    pub fn name(self) -> &'static str {
        match self {
            InvariantKind::Safety => "safety",
            InvariantKind::Liveness => "liveness",
        }
    }
}

/// Which layer of the contract an invariant belongs to (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    /// The webhook pattern's: true of any receiver and relay, whatever their business.
    Pattern,
    /// The domain's: what the system did compared with its domain's model and rules.
    Domain,
    /// A team's own, added through `App::invariant` or `harness::Check::invariant`.
    Own,
}

impl Layer {
    /// The layer's short name, as written in reports.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Pattern => "pattern",
            Layer::Domain => "domain",
            Layer::Own => "own",
        }
    }
}

/// One invariant.
pub trait Invariant: Send + Sync {
    /// The invariant's short name, as written in failures and seed files.
    fn name(&self) -> &'static str;
    /// What it asserts, in one line.
    fn description(&self) -> &'static str;
    /// When the invariant is checked.
    fn kind(&self) -> InvariantKind;
    /// Which layer it belongs to. A domain's invariants say [`Layer::Domain`]; one a team adds
    /// through `App::invariant` or `harness::Check::invariant` is listed as [`Layer::Own`]
    /// whatever it says.
    fn layer(&self) -> Layer {
        Layer::Pattern
    }
    /// The workflows it assumes a system has; against a system that declares it lacks one
    /// ([`crate::system::System::workflows`]) the invariant is not checked.
    fn assumes(&self) -> &'static [Workflow] {
        &[]
    }
    /// Whether the invariant can judge a final state alone (all rows as created by one commit,
    /// every effect new, no answers, requests or replies), as a check over real processes does
    /// ([`crate::judge`]). It may say so only when a failure on such a state means the
    /// run it ended in failed too, so that judging a final state raises no false alarm.
    ///
    /// By default a liveness invariant can, since it reads only the state at quiescence; one that
    /// reads facts of the run a final state lacks (`History` beyond `ever_received` and
    /// `dead_at_requeue`) must say it cannot. A safety invariant cannot by default: it judges
    /// each step's transitions, answers, requests and leases.
    fn judges_final_state(&self) -> bool {
        self.kind() == InvariantKind::Liveness
    }
    /// Whether the invariant can judge each commit of a journal of real commits, as a check over
    /// real processes records them ([`crate::judge`]): an observation whose step holds
    /// that one commit, with the rows as it left them, the history of leases, receipts and moves
    /// the journal itself shows, the commit's true time as `now_ms` and the journal's clock
    /// uncertainty as the history's clock offset, but no provider ledger, answers, requests,
    /// replies, purge verdicts or configuration. It may say so only when it reads nothing else,
    /// so that judging a journal raises no false alarm. False by default.
    fn judges_commits(&self) -> bool {
        false
    }
    /// `Err` carries the evidence, in one line a person can act on.
    fn check(&self, observation: &Observation<'_>) -> Result<(), String>;
}

/// Every invariant of a system in `domain`: the built-in ones (the domain's own among them),
/// then `added` (a team's own, through `App::invariant` or `harness::Check::invariant`), which
/// are listed as [`Layer::Own`].
pub fn registry(domain: &dyn Domain, added: &[Arc<dyn Invariant>]) -> Vec<Box<dyn Invariant>> {
    let mut invariants = built_in(domain);
    // An added invariant of a built-in's name replaces it (see `check_addition`).
    invariants.retain(|built| !added.iter().any(|invariant| invariant.name() == built.name()));
    invariants.extend(
        added
            .iter()
            .map(|invariant| Box::new(Added(Arc::clone(invariant))) as Box<dyn Invariant>),
    );
    invariants
}

/// An added invariant, shared by every run that checks it.
struct Added(Arc<dyn Invariant>);

impl Invariant for Added {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn description(&self) -> &'static str {
        self.0.description()
    }
    fn kind(&self) -> InvariantKind {
        self.0.kind()
    }
    fn layer(&self) -> Layer {
        Layer::Own
    }
    fn assumes(&self) -> &'static [Workflow] {
        self.0.assumes()
    }
    fn judges_final_state(&self) -> bool {
        self.0.judges_final_state()
    }
    fn judges_commits(&self) -> bool {
        self.0.judges_commits()
    }
    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        self.0.check(observation)
    }
}

/// Checks that `invariant` may join `added`. `Ok(false)` when one of its name is already added
/// (as when several tests of one process set up the same harness), which adds nothing. One of a
/// built-in invariant's name takes that invariant's place (see [`replaces_built_in`]), so that a
/// built-in added in a later release never stops a team's program from running.
pub fn check_addition(added: &[Arc<dyn Invariant>], invariant: &dyn Invariant) -> Result<bool, String> {
    let name = invariant.name();
    if name.is_empty() || name.contains(|c: char| c == ',' || c.is_whitespace()) {
        return Err(format!(
            "invariant name {name:?} must be non-empty, without spaces or commas (it is an --invariants value)"
        ));
    }
    Ok(!added.iter().any(|existing| existing.name() == name))
}

/// Whether an invariant called `name` is built in, so that an added one of that name replaces it.
pub fn replaces_built_in(name: &str) -> bool {
    built_in(&crate::domain::payments::Payments)
        .iter()
        .any(|existing| existing.name() == name)
}

/// The invariants this crate ships, safety first, with `domain`'s own between the safety and the
/// liveness ones. Adding one is one file and one line here.
fn built_in(domain: &dyn Domain) -> Vec<Box<dyn Invariant>> {
    let mut invariants: Vec<Box<dyn Invariant>> = vec![
        // First, so that a hostile request's commit is named for what it is, not for the
        // inconsistency it causes elsewhere.
        Box::new(hostile_delivery_changes_nothing::HostileDeliveryChangesNothing),
        Box::new(hostile_delivery_refused::HostileDeliveryRefused),
        Box::new(genuine_delivery_accepted::GenuineDeliveryAccepted),
        Box::new(one_effect_per_operation::OneEffectPerOperation),
        Box::new(effect_matches_obligation::EffectMatchesObligation),
        Box::new(request_matches_obligation::RequestMatchesObligation),
        Box::new(no_call_inside_transaction::NoCallInsideTransaction),
        Box::new(task_closes_its_transaction::TaskClosesItsTransaction),
        Box::new(purge_keeps_retention::PurgeKeepsRetention),
        Box::new(receipt_commits_with_its_work::ReceiptCommitsWithItsWork),
        Box::new(one_receipt_per_event::OneReceiptPerEvent),
        Box::new(one_obligation_per_operation::OneObligationPerOperation),
        Box::new(success_answer_has_receipt::SuccessAnswerHasReceipt),
        Box::new(dedupe_scope_per_account::DedupeScopePerAccount),
        Box::new(completion_by_lease_holder::CompletionByLeaseHolder),
        Box::new(one_live_lease_per_obligation::OneLiveLeasePerObligation),
        Box::new(claim_waits_for_retry_time::ClaimWaitsForRetryTime),
        Box::new(lease_outlives_call::LeaseOutlivesCall),
        Box::new(obligation_settles_with_effect_or_reason::ObligationSettlesWithEffectOrReason),
        Box::new(state_moves_along_allowed_transitions::StateMovesAlongAllowedTransitions),
        Box::new(only_owed_operations_take_effect::OnlyOwedOperationsTakeEffect),
    ];
    if domain.name() == crate::domain::payments::NAME {
        invariants.push(Box::new(payments::RefundFirstNeverShips));
        invariants.push(Box::new(payments::PaidOrderSettled));
    }
    invariants.extend::<Vec<Box<dyn Invariant>>>(vec![
        Box::new(outbox_drains::OutboxDrains),
        Box::new(dead_only_if_rejected::DeadOnlyIfRejected),
        Box::new(every_event_processed::EveryEventProcessed),
        Box::new(sender_converges::SenderConverges),
        Box::new(final_state_matches_creation_order::FinalStateMatchesCreationOrder),
        Box::new(owed_operation_settles::OwedOperationSettles),
        Box::new(no_stuck_key::NoStuckKey),
        Box::new(work_progresses_after_heal::WorkProgressesAfterHeal),
    ]);
    invariants
}

/// Everything an invariant may look at.
pub struct Observation<'a> {
    /// Committed rows after this step.
    pub db: &'a DbView,
    /// The provider's ledger of effects.
    pub provider: &'a ProviderModel,
    /// The ground truth: fixtures and events.
    pub workload: &'a Workload,
    /// What the sender knows.
    pub sender: &'a Sender,
    /// Facts accumulated over the run.
    pub history: &'a History,
    /// What this step changed (empty for liveness checks).
    pub step: &'a StepRecord,
    /// True virtual time at the end of the step, by no process's clock.
    pub now_ms: i64,
    /// The run's configuration: the bounds the system was promised (clock skew, stalls, lease).
    pub config: &'a SimConfig,
    /// The system's domain.
    pub domain: &'a dyn Domain,
    /// What the domain says the run must end in.
    pub model: &'a Model,
}

impl std::fmt::Debug for Observation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observation")
            .field("now_ms", &self.now_ms)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Observation<'_> {
    /// The business operation `obligation` is for, as the provider reads its payload.
    pub fn operation_of(&self, obligation: &ObligationRow) -> String {
        self.db.operation_of(obligation)
    }

    /// Whether this is a scripted scenario's run, where the test makes every delivery and there
    /// is no full history of the sender's events to judge by.
    pub fn scripted(&self) -> bool {
        self.sender.streams().is_empty()
    }
}

/// Every obligation row this step's commits changed (not created or deleted), with the process
/// that committed the change: `(process_id, before, after)`.
pub fn changed_obligations<'a>(
    observation: &'a Observation<'_>,
) -> impl Iterator<Item = (&'a str, &'a ObligationRow, &'a ObligationRow)> {
    observation.step.commits.iter().flat_map(|commit| {
        commit
            .diffs
            .iter()
            .filter_map(move |diff| match (&diff.before, &diff.after) {
                (Some(ObservedRow::Obligation(before)), Some(ObservedRow::Obligation(after))) => {
                    Some((commit.process_id.as_str(), before, after))
                }
                _ => None,
            })
    })
}

/// Whether the change from `before` to `after` is a worker taking a new lease: a new token with
/// an owner.
pub fn lease_taken(before: &ObligationRow, after: &ObligationRow) -> bool {
    after.lease_token > before.lease_token && after.lease_owner.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::payments::Payments;
    use crate::system::Workflows;

    fn names(invariants: &[Box<dyn Invariant>]) -> Vec<&'static str> {
        invariants.iter().map(|invariant| invariant.name()).collect()
    }

    #[test]
    fn a_system_without_a_workflow_is_not_judged_by_what_assumes_it() {
        let every = InvariantChoice::default();
        let (all, left_out) = judging_of(Workflows::default(), &every);
        assert!(names(&all).contains(&"dead-only-if-rejected"));
        assert!(left_out.is_empty());
        let without = Workflows {
            operator_requeue: false,
        };
        let (fewer, left_out) = judging_of(without, &every);
        assert!(!names(&fewer).contains(&"dead-only-if-rejected"));
        assert_eq!(left_out.len(), 1);
        assert_eq!(left_out[0].0, "dead-only-if-rejected");
        assert!(left_out[0].1.contains("operator-requeue"), "{left_out:?}");
    }

    fn judging_of(workflows: Workflows, choice: &InvariantChoice) -> Judging {
        judging(&Payments, &[], workflows, choice).unwrap()
    }

    #[test]
    fn a_choice_narrows_and_an_unknown_name_is_refused() {
        let only = InvariantChoice {
            only: Some(["outbox-drains".to_owned(), "one-effect-per-operation".to_owned()].into()),
            without: ["outbox-drains".to_owned()].into(),
        };
        let (chosen, _) = judging_of(Workflows::default(), &only);
        assert_eq!(names(&chosen), ["one-effect-per-operation"]);
        let unknown = InvariantChoice {
            only: None,
            without: ["no-such-rule".to_owned()].into(),
        };
        let error = judging(&Payments, &[], Workflows::default(), &unknown)
            .err()
            .unwrap();
        assert!(error.contains("no-such-rule"), "{error}");
    }

    #[test]
    fn the_payments_rules_judge_only_systems_in_the_payments_domain() {
        struct Elsewhere;
        impl Domain for Elsewhere {
            fn name(&self) -> &str {
                "elsewhere"
            }
            fn description(&self) -> &str {
                "a domain for a test"
            }
            fn rules(&self) -> Vec<String> {
                Vec::new()
            }
            fn draw(
                &self,
                _seed: u64,
                _settings: &crate::shape::WorkloadSettings,
            ) -> (crate::workload::Fixtures, Vec<crate::workload::EventSpec>) {
                (crate::workload::Fixtures::default(), Vec::new())
            }
            fn event_type(&self, event: &crate::workload::EventSpec) -> String {
                event.kind.clone()
            }
            fn model(&self, _workload: &crate::workload::Workload) -> Model {
                Model::default()
            }
            fn may_become(
                &self,
                _before: &crate::rows::EntityState,
                _after: &crate::rows::EntityState,
            ) -> bool {
                true
            }
            fn refusal(
                &self,
                _workload: &crate::workload::Workload,
                _event: &crate::workload::EventSpec,
            ) -> Option<crate::domain::Refusal> {
                None
            }
            fn operation_of(&self, payload: &str) -> Result<String, String> {
                Ok(payload.to_owned())
            }
        }
        let elsewhere = names(&registry(&Elsewhere, &[]));
        assert!(!elsewhere.contains(&"refund-first-never-ships"));
        assert!(elsewhere.contains(&"owed-operation-settles"));
        assert!(names(&registry(&Payments, &[])).contains(&"refund-first-never-ships"));
    }
}
