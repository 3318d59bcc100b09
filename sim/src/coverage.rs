//! Coverage of the paths worth testing: how often each interesting situation was reached in a
//! run, and across a sweep, together with how often each fault model fired.
//!
//! A passing sweep says little if it never got near the interleavings where the bugs live: a
//! retry after a lost acknowledgment, a lease taken over under a stalled worker, a redelivery
//! after its receipt was purged. Like FoundationDB's code probes and Antithesis's "sometimes"
//! assertions, each [`Situation`] is counted at the moment the world observes it, from what the
//! world already knows (answers on the wire, committed row changes, statement results, provider
//! replies, crashes), and a sweep names every situation it never reached and every fault model
//! that never fired, with the likeliest reason.
//!
//! Recording is an observer and nothing more. [`Probes`] must not draw from any random stream,
//! schedule anything, write to the trace or change any decision, so that every seed's trace
//! digest stays what it was without it; and it must cost a counter increment, or a small set
//! insertion, at the moment of observation, never a scan of the database or the trace.

use std::collections::{BTreeMap, BTreeSet};

use commitgap::env::Value;
use serde::Serialize;

use crate::domain::{Domain, DomainSituation};
use crate::faults;
use crate::system::{ObligationStatus, ObservedRow};
use crate::view::{DbView, RowDiff};

/// A situation worth reaching: one step of a path that a bug in a receiver or relay needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Situation {
    /// A 2xx answer was lost after the receiver committed, and the sender delivered again.
    LostAckThenRetry,
    /// The provider forgot an idempotency key while its obligation was still owed.
    KeyExpiredWhileOwed,
    /// A relay worker's lease-guarded update carried a replaced token and changed nothing.
    StaleWorkerFencedOut,
    /// An event was delivered again after its receipt was purged.
    PurgeThenRedelivery,
    /// A process crashed while one of its connections had a transaction open.
    CrashInsideTransaction,
    /// A handler started for an event another handler was still processing.
    ConcurrentDuplicateDelivery,
    /// A relay worker got 409 because the provider still held or processed the key.
    ProviderConflict409,
    /// A relay worker's call timed out while the provider had yet to act on it.
    TimeoutWhileProviderActs,
    /// The provider answered a relay worker's request and the answer was lost on its way back.
    ProviderReplyLost,
    /// `BEGIN` failed with `SQLITE_BUSY`.
    BusyOnBegin,
    /// A relay worker looked its key up and found an effect it had not been told about.
    ReconciledByLookup,
}

impl Situation {
    /// Every situation, in the order reports list them.
    pub const ALL: [Situation; 11] = [
        Situation::LostAckThenRetry,
        Situation::KeyExpiredWhileOwed,
        Situation::StaleWorkerFencedOut,
        Situation::PurgeThenRedelivery,
        Situation::CrashInsideTransaction,
        Situation::ConcurrentDuplicateDelivery,
        Situation::ProviderConflict409,
        Situation::TimeoutWhileProviderActs,
        Situation::ProviderReplyLost,
        Situation::BusyOnBegin,
        Situation::ReconciledByLookup,
    ];

    /// The situation's short name, as written in reports.
    pub fn name(self) -> &'static str {
        match self {
            Situation::LostAckThenRetry => "lost-ack-then-retry",
            Situation::KeyExpiredWhileOwed => "key-expired-while-owed",
            Situation::StaleWorkerFencedOut => "stale-worker-fenced-out",
            Situation::PurgeThenRedelivery => "purge-then-redelivery",
            Situation::CrashInsideTransaction => "crash-inside-transaction",
            Situation::ConcurrentDuplicateDelivery => "concurrent-duplicate-delivery",
            Situation::ProviderConflict409 => "provider-conflict-409",
            Situation::TimeoutWhileProviderActs => "timeout-while-provider-acts",
            Situation::ProviderReplyLost => "provider-reply-lost",
            Situation::BusyOnBegin => "busy-on-begin",
            Situation::ReconciledByLookup => "reconciled-by-lookup",
        }
    }

    /// What reaching it means, in one line.
    pub fn description(self) -> &'static str {
        match self {
            Situation::LostAckThenRetry => {
                "a 2xx answer given after the receiver committed never settled its stream (lost, never written, or too late), and the sender delivered that stream again"
            }
            Situation::KeyExpiredWhileOwed => {
                "the provider forgot an idempotency key while the obligation it was sent for was still owed"
            }
            Situation::StaleWorkerFencedOut => {
                "a relay worker's lease-guarded update carried a token another worker had replaced, and changed nothing"
            }
            Situation::PurgeThenRedelivery => "an event was delivered again after its receipt was purged",
            Situation::CrashInsideTransaction => {
                "a process crashed while one of its connections had a transaction open"
            }
            Situation::ConcurrentDuplicateDelivery => {
                "a handler started for an event another handler was still processing"
            }
            Situation::ProviderConflict409 => {
                "a relay worker got 409 because the provider was still processing or holding the key"
            }
            Situation::TimeoutWhileProviderActs => {
                "a relay worker's call timed out while the provider had yet to act on it, so the worker could not tell whether it would"
            }
            Situation::ProviderReplyLost => {
                "the provider answered a relay worker's request and the answer was lost on its way back"
            }
            Situation::BusyOnBegin => "BEGIN failed with SQLITE_BUSY",
            Situation::ReconciledByLookup => {
                "a relay worker looked its key up and found the effect it had not been told about"
            }
        }
    }

    /// The fault models that can lead here; empty when ordinary concurrency is enough. A sweep
    /// uses them to say why a situation was never reached.
    pub fn needs(self) -> &'static [&'static str] {
        match self {
            Situation::LostAckThenRetry => &[
                faults::lost_ack::KIND.name,
                faults::crash::KIND.name,
                faults::slow_handler::KIND.name,
            ],
            Situation::KeyExpiredWhileOwed => &[faults::key_expiry::KIND.name],
            Situation::StaleWorkerFencedOut => &[
                faults::worker_pause::KIND.name,
                faults::hung_worker::KIND.name,
                faults::clock_jump::KIND.name,
            ],
            Situation::PurgeThenRedelivery => &[faults::receipt_purge::KIND.name],
            Situation::CrashInsideTransaction => &[faults::crash::KIND.name],
            Situation::ConcurrentDuplicateDelivery => &[],
            Situation::ProviderConflict409 => &[
                faults::provider_conflict::KIND.name,
                faults::provider_slow::KIND.name,
            ],
            Situation::TimeoutWhileProviderActs => &[faults::provider_slow::KIND.name],
            Situation::ProviderReplyLost => &[faults::lost_ack::KIND.name],
            Situation::BusyOnBegin => &[],
            Situation::ReconciledByLookup => &[faults::lost_ack::KIND.name, faults::provider_slow::KIND.name],
        }
    }

    /// The situation as a report lists it beside a domain's own.
    fn note(self) -> DomainSituation {
        DomainSituation {
            name: self.name().to_owned(),
            description: self.description().to_owned(),
            needs: self.needs().iter().map(|&name| name.to_owned()).collect(),
        }
    }

    /// The situation called `name`.
    pub fn from_name(name: &str) -> Option<Situation> {
        Situation::ALL
            .into_iter()
            .find(|situation| situation.name() == name)
    }
}

/// A lease a worker took and has not yet written under: who took it, on which obligation, with
/// which token.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Claim {
    /// The business operation its payload names, which is how the view indexes obligations.
    operation: String,
    /// The key the system stores the obligation under, to tell two rows of one operation apart.
    operation_key: String,
    lease_token: i64,
}

/// One run's counts, and the little each detection must remember between the events it joins.
#[derive(Debug, Default)]
pub struct Probes {
    counts: [u64; Situation::ALL.len()],
    /// The step being run, and the step each situation was first reached at, by name.
    step: u64,
    first_steps: BTreeMap<String, u64>,
    /// How often each of the domain's own situations was reached, by name.
    domain_counts: BTreeMap<String, u64>,
    /// Sender streams whose 2xx answer, given after the receipt committed, never settled them.
    unsettled_successes: BTreeSet<usize>,
    /// `(account, event_id)` of receipts a commit deleted, until the event is delivered again.
    purged_events: BTreeSet<(String, String)>,
    /// The lease each process took last and has not written under yet, by process id.
    claims: BTreeMap<String, Claim>,
    /// Keys the provider stored with a time to forget them: `(forget at, key, operation, the
    /// fault model that decided it)`, in the order they will be forgotten. The operation is
    /// empty for an unreadable payload.
    key_expiries: BTreeSet<(i64, String, String, String)>,
}

impl Probes {
    /// Counts one occurrence of `situation`.
    pub fn reach(&mut self, situation: Situation) {
        self.counts[situation as usize] += 1;
        if self.counts[situation as usize] == 1 {
            self.first_steps.insert(situation.name().to_owned(), self.step);
        }
    }

    /// Notes the step now running, for [`Probes::first_steps`].
    pub fn at_step(&mut self, step: u64) {
        self.step = step;
    }

    /// The step each situation was first reached at, by name (`explore` branches after it).
    pub fn first_steps(&self) -> &BTreeMap<String, u64> {
        &self.first_steps
    }

    /// How often `situation` was reached so far.
    pub fn count(&self, situation: Situation) -> u64 {
        self.counts[situation as usize]
    }

    /// How often the domain's situation `name` was reached so far.
    pub fn count_named(&self, name: &str) -> u64 {
        match Situation::from_name(name) {
            Some(situation) => self.count(situation),
            None => self.domain_counts.get(name).copied().unwrap_or(0),
        }
    }

    /// Every situation reached at least once, the pattern's and the domain's, by name.
    pub fn reached(&self) -> BTreeMap<String, u64> {
        Situation::ALL
            .into_iter()
            .filter(|&situation| self.count(situation) > 0)
            .map(|situation| (situation.name().to_owned(), self.count(situation)))
            .chain(
                self.domain_counts
                    .iter()
                    .map(|(name, &count)| (name.clone(), count)),
            )
            .collect()
    }

    /// A 2xx answer to a delivery of `stream`, given after the event's receipt committed, will
    /// never settle the stream.
    pub fn success_not_settled(&mut self, stream: usize) {
        self.unsettled_successes.insert(stream);
    }

    /// The sender acknowledged `stream`: nothing it delivers from now on is a retry.
    pub fn stream_settled(&mut self, stream: usize) {
        self.unsettled_successes.remove(&stream);
    }

    /// A handler starts for `(account, event_id)`, delivered through `stream` if the sender sent
    /// it. Counts the retries and redeliveries this delivery completes.
    pub fn delivery_started(&mut self, stream: Option<usize>, account: &str, event_id: &str) {
        if let Some(stream) = stream
            && self.unsettled_successes.remove(&stream)
        {
            self.reach(Situation::LostAckThenRetry);
        }
        // Checked for emptiness first, so that the common case builds no key.
        if !self.purged_events.is_empty()
            && self
                .purged_events
                .remove(&(account.to_owned(), event_id.to_owned()))
        {
            self.reach(Situation::PurgeThenRedelivery);
        }
    }

    /// Looks at one commit of `process_id`: purged receipts, leases taken and written under, and
    /// moves of an entity that reach one of `domain`'s situations.
    pub fn committed(&mut self, process_id: &str, diffs: &[RowDiff], view: &DbView, domain: &dyn Domain) {
        for diff in diffs {
            match (&diff.before, &diff.after) {
                (Some(ObservedRow::Receipt(receipt)), None) => {
                    self.purged_events
                        .insert((receipt.account.clone(), receipt.event_id.clone()));
                }
                (Some(ObservedRow::Obligation(before)), Some(ObservedRow::Obligation(after))) => {
                    if before.lease_token != after.lease_token {
                        let claim = Claim {
                            operation: view.operation_of(after),
                            operation_key: after.operation_key.clone(),
                            lease_token: after.lease_token,
                        };
                        self.claims.insert(process_id.to_owned(), claim);
                    } else if (after.lease_expires_ms.is_none() || after.status != before.status)
                        && self.claims.get(process_id).is_some_and(|claim| {
                            claim.lease_token == after.lease_token
                                && claim.operation_key == after.operation_key
                        })
                    {
                        // The worker released its lease or settled the obligation under it: that
                        // claim is spent. (Extending the lease keeps it.)
                        self.claims.remove(process_id);
                    }
                }
                (Some(ObservedRow::Entity(before)), Some(ObservedRow::Entity(after)))
                    if before.state != after.state =>
                {
                    if let Some(name) = domain.situation_of_move(&before.state, &after.state) {
                        *self.domain_counts.entry(name.to_owned()).or_default() += 1;
                        self.first_steps.entry(name.to_owned()).or_insert(self.step);
                    }
                }
                _ => {}
            }
        }
    }

    /// A statement of `process_id` changed (or returned) no row. If it was an update carrying
    /// the token of the lease the process last took, and another worker has since replaced that
    /// token, the process was fenced out.
    pub fn changed_nothing(&mut self, process_id: &str, sql: &str, params: &[Value], view: &DbView) {
        let Some(claim) = self.claims.get(process_id) else {
            return;
        };
        let is_update = crate::sql::Statement::remembered(sql).verb == crate::sql::Verb::Update;
        if !is_update || !params.contains(&Value::Integer(claim.lease_token)) {
            return;
        }
        let replaced = view
            .obligations_for(&claim.operation)
            .find(|obligation| obligation.operation_key == claim.operation_key)
            .is_some_and(|obligation| obligation.lease_token != claim.lease_token);
        if replaced {
            self.claims.remove(process_id);
            self.reach(Situation::StaleWorkerFencedOut);
        }
    }

    /// The provider stored `key`, sent for business operation `operation` (empty if the payload
    /// named none), and will forget it at `forget_at_ms`, as fault model `model` decided.
    pub fn key_stored(&mut self, forget_at_ms: i64, key: &str, operation: String, model: String) {
        self.key_expiries
            .insert((forget_at_ms, key.to_owned(), operation, model));
    }

    /// Called before each step: returns the keys the provider forgot by `now_ms`, each with the
    /// fault model that decided it. They were
    /// forgotten since the previous step, when the committed rows were what `view` holds now,
    /// so an obligation owed in the view was owed at that moment. The common case, nothing
    /// forgotten, costs one comparison and allocates nothing.
    pub fn keys_forgotten_by(&mut self, now_ms: i64, view: &DbView) -> Vec<(String, String)> {
        let mut forgotten = Vec::new();
        while let Some((forget_at_ms, _, _, _)) = self.key_expiries.first() {
            if *forget_at_ms > now_ms {
                break;
            }
            let (_, key, operation, model) = self.key_expiries.pop_first().expect("checked above");
            if view
                .obligations_for(&operation)
                .any(|obligation| obligation.status == ObligationStatus::Owed)
            {
                self.reach(Situation::KeyExpiredWhileOwed);
            }
            forgotten.push((key, model));
        }
        forgotten
    }
}

/// How often something happened across a sweep: in all, and in how many seeds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// How many times it happened, over every seed.
    pub count: u64,
    /// How many seeds it happened in at least once.
    pub seeds: u64,
    /// How many seeds had one of the fault models it needs on (see [`Situation::needs`]); 0 for
    /// a situation that needs none.
    pub seeds_with_its_faults: u64,
    /// How many of those seeds it happened in.
    pub reached_with_its_faults: u64,
}

impl Tally {
    fn add(&mut self, count: u64) {
        if count > 0 {
            self.count += count;
            self.seeds += 1;
        }
    }
}

/// How often one fault model fired across a sweep, and in how many seeds it was on at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct FaultTally {
    /// How many times the model fired, over every seed.
    pub count: u64,
    /// How many seeds it fired in at least once.
    pub seeds: u64,
    /// How many seeds had the model turned on.
    pub on_in_seeds: u64,
}

/// A sweep's coverage: every registered fault model and every situation, reached or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepCoverage {
    /// Seeds whose outcome was added.
    pub seeds: u64,
    /// How often each registered fault model fired, by name.
    pub faults_fired: BTreeMap<String, FaultTally>,
    /// How often each situation was reached, by name.
    pub situations: BTreeMap<String, Tally>,
    /// Invariants not checked against the system, with why (it lacks a workflow they assume).
    pub invariants_left_out: BTreeMap<String, String>,
    /// The attacker's requests never sent, by attack, with why (the domain cannot make them).
    pub attacks_left_out: BTreeMap<String, String>,
    /// The domains of the systems whose runs were added.
    pub domains: std::collections::BTreeSet<String>,
    /// The situations of those domains, as each declared them, after the pattern's.
    domain_situations: Vec<DomainSituation>,
    /// What the report says of each fault model of the registry the sweep ran with.
    kinds: Vec<KindNote>,
}

/// What a coverage report says of a fault model: its name, what it acts on, and whether only a
/// faulty system can make it act.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KindNote {
    name: &'static str,
    description: &'static str,
    acts_only_on_faulty_systems: bool,
}

impl Default for SweepCoverage {
    /// Nothing added yet, with the built-in fault models.
    fn default() -> SweepCoverage {
        SweepCoverage::new(&faults::built_in())
    }
}

impl SweepCoverage {
    /// Nothing added yet: every fault model of `kinds` and every situation at zero, so that a
    /// report names what never happened as well as what did.
    pub fn new(kinds: &[faults::FaultKind]) -> SweepCoverage {
        SweepCoverage {
            seeds: 0,
            kinds: kinds
                .iter()
                .map(|kind| KindNote {
                    name: kind.name,
                    description: kind.description,
                    acts_only_on_faulty_systems: kind.acts_only_on_faulty_systems,
                })
                .collect(),
            faults_fired: kinds
                .iter()
                .map(|kind| (kind.name.to_owned(), FaultTally::default()))
                .collect(),
            situations: Situation::ALL
                .into_iter()
                .map(|situation| (situation.name().to_owned(), Tally::default()))
                .collect(),
            invariants_left_out: BTreeMap::new(),
            attacks_left_out: BTreeMap::new(),
            domains: std::collections::BTreeSet::new(),
            domain_situations: Vec::new(),
        }
    }
}

/// What one run contributes to a sweep's coverage.
#[derive(Debug, Clone, Copy)]
pub struct SeedCoverage<'a> {
    /// Each fault model's settings, as the run was configured (which were on).
    pub faults: &'a BTreeMap<String, serde_json::Value>,
    /// How often each fault model fired.
    pub faults_fired: &'a BTreeMap<String, u64>,
    /// How often each situation was reached.
    pub situations: &'a BTreeMap<String, u64>,
    /// Invariants not checked, with why.
    pub invariants_left_out: &'a [(String, String)],
    /// The attacker's requests never sent, with why.
    pub attacks_left_out: &'a [(String, String)],
    /// The situations the system's domain declares (see [`Domain::situations`]).
    pub domain_situations: &'a [DomainSituation],
    /// The domain of the system that ran.
    pub domain: &'a str,
}

impl SweepCoverage {
    /// Adds one seed's run.
    pub fn add(&mut self, outcome: SeedCoverage<'_>) {
        self.seeds += 1;
        if !self.domains.contains(outcome.domain) {
            self.domains.insert(outcome.domain.to_owned());
            for declared in outcome.domain_situations {
                if !self
                    .domain_situations
                    .iter()
                    .any(|known| known.name == declared.name)
                {
                    self.situations.entry(declared.name.clone()).or_default();
                    self.domain_situations.push(declared.clone());
                }
            }
        }
        for (name, why) in outcome.invariants_left_out {
            self.invariants_left_out.insert(name.clone(), why.clone());
        }
        for (attack, why) in outcome.attacks_left_out {
            self.attacks_left_out.insert(attack.clone(), why.clone());
        }
        for (name, settings) in outcome.faults {
            // A model without an on/off switch is on whenever it is configured.
            let on = settings
                .get("enabled")
                .and_then(serde_json::Value::as_bool)
                .unwrap_or(true);
            if on {
                self.faults_fired.entry(name.clone()).or_default().on_in_seeds += 1;
            }
        }
        for (name, &count) in outcome.faults_fired {
            let tally = self.faults_fired.entry(name.clone()).or_default();
            if count > 0 {
                tally.count += count;
                tally.seeds += 1;
            }
        }
        for (name, &count) in outcome.situations {
            self.situations.entry(name.clone()).or_default().add(count);
        }
        for situation in self.situation_notes() {
            let needs = &situation.needs;
            let on = needs.iter().any(|name| {
                outcome.faults.get(name).is_some_and(|settings| {
                    settings
                        .get("enabled")
                        .and_then(serde_json::Value::as_bool)
                        .unwrap_or(true)
                })
            });
            if on {
                let tally = self.situations.entry(situation.name.clone()).or_default();
                tally.seeds_with_its_faults += 1;
                if outcome
                    .situations
                    .get(situation.name.as_str())
                    .is_some_and(|&count| count > 0)
                {
                    tally.reached_with_its_faults += 1;
                }
            }
        }
    }

    /// The fault models in registry order, then any others the runs reported.
    fn fault_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.kinds.iter().map(|kind| kind.name.to_owned()).collect();
        for name in self.faults_fired.keys() {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names
    }

    fn fault(&self, name: &str) -> FaultTally {
        self.faults_fired.get(name).copied().unwrap_or_default()
    }

    fn situation(&self, name: &str) -> Tally {
        self.situations.get(name).copied().unwrap_or_default()
    }

    /// Every situation a report lists: the pattern's, then the domains' own.
    fn situation_notes(&self) -> Vec<DomainSituation> {
        Situation::ALL
            .into_iter()
            .map(Situation::note)
            .chain(self.domain_situations.iter().cloned())
            .collect()
    }

    /// The situations no seed reached, in report order.
    pub fn never_reached(&self) -> Vec<String> {
        self.situation_notes()
            .into_iter()
            .filter(|situation| self.situation(&situation.name).count == 0)
            .map(|situation| situation.name)
            .collect()
    }

    /// How many situations the report lists: the pattern's and the domains' own.
    pub fn situations_listed(&self) -> usize {
        Situation::ALL.len() + self.domain_situations.len()
    }

    /// The fault models that fired in no seed, in registry order.
    pub fn never_fired(&self) -> Vec<String> {
        self.fault_names()
            .into_iter()
            .filter(|name| self.fault(name).count == 0)
            .collect()
    }

    /// The block `sweep` prints: what fired, what was reached, and a warning for each fault
    /// model that never fired and each situation never reached.
    pub fn lines(&self) -> Vec<String> {
        let fired: Vec<String> = self
            .fault_names()
            .iter()
            .map(|name| format!("{name} {}", self.fault(name).count))
            .collect();
        let situations = self.situation_notes();
        let reached: Vec<String> = situations
            .iter()
            .map(|situation| {
                let tally = self.situation(&situation.name);
                format!(
                    "{} {} (in {} seed{})",
                    situation.name,
                    tally.count,
                    tally.seeds,
                    if tally.seeds == 1 { "" } else { "s" }
                )
            })
            .collect();
        let with_faults: Vec<String> = situations
            .iter()
            .filter_map(|situation| {
                let tally = self.situation(&situation.name);
                (tally.seeds_with_its_faults > 0).then(|| {
                    format!(
                        "{} {}% ({} of {})",
                        situation.name,
                        tally.reached_with_its_faults * 100 / tally.seeds_with_its_faults,
                        tally.reached_with_its_faults,
                        tally.seeds_with_its_faults
                    )
                })
            })
            .collect();
        let mut lines = vec![
            format!("coverage: faults fired: {}", fired.join(", ")),
            format!("coverage: situations: {}", reached.join(", ")),
        ];
        if !with_faults.is_empty() {
            lines.push(format!(
                "coverage: reached in the seeds with a fault model it needs on: {}",
                with_faults.join(", ")
            ));
        }
        lines.extend(
            self.warnings()
                .into_iter()
                .map(|warning| format!("coverage: warning: {warning}")),
        );
        lines.extend(
            self.notes()
                .into_iter()
                .map(|note| format!("coverage: note: {note}")),
        );
        lines
    }

    /// One sentence for each fault model that never fired but acts only on a faulty system's
    /// behaviour (see [`faults::FaultKind::acts_only_on_faulty_systems`]): expected of a correct
    /// system, so not a warning.
    pub fn notes(&self) -> Vec<String> {
        let left_out = self
            .invariants_left_out
            .iter()
            .map(|(name, why)| format!("not checked: {name}, since {why}"))
            .chain(
                self.attacks_left_out
                    .iter()
                    .map(|(attack, why)| format!("not sent: the attacker's {attack} request, since {why}")),
            );
        left_out
            .chain(self.never_fired()
            .into_iter()
            .filter(|name| self.acts_only_on_faulty_systems(name))
            .map(|name| {
                let description = self.kind(&name).map_or("", |kind| kind.description);
                format!(
                    "never fired: {name} ({description}); it acts only on what a correct system never does, so a sweep of one never sees it fire"
                )
            }))
            .collect()
    }

    /// One sentence for each situation never reached and each fault model that never fired,
    /// saying why where the counts tell.
    pub fn warnings(&self) -> Vec<String> {
        // A domain's situations are listed only for the domains swept, so one domain's is never
        // a gap in a sweep of systems in another.
        let mut warnings: Vec<String> = self
            .situation_notes()
            .iter()
            .filter(|situation| self.situation(&situation.name).count == 0)
            .map(|situation| {
                format!(
                    "never reached: {} ({})",
                    situation.name,
                    self.why_never_reached(situation)
                )
            })
            .collect();
        for name in self.never_fired() {
            if self.acts_only_on_faulty_systems(&name) {
                continue;
            }
            let on = self.fault(&name).on_in_seeds;
            let why = if on == 0 {
                "it was off in every seed".to_owned()
            } else {
                format!(
                    "it was on in {on} of {} seeds and never acted: too rare at the rates drawn, or what it acts on never happened",
                    self.seeds
                )
            };
            // The model's own description says what it acts on, which is often the reason.
            let acts_on = self
                .kind(&name)
                .map(|kind| format!("{}; ", kind.description))
                .unwrap_or_default();
            warnings.push(format!("never fired: {name} ({acts_on}{why})"));
        }
        warnings
    }

    fn kind(&self, name: &str) -> Option<&KindNote> {
        self.kinds.iter().find(|kind| kind.name == name)
    }

    /// Whether the fault model named `name` acts only on a faulty system's behaviour.
    fn acts_only_on_faulty_systems(&self, name: &str) -> bool {
        self.kind(name)
            .is_some_and(|kind| kind.acts_only_on_faulty_systems)
    }

    fn why_never_reached(&self, situation: &DomainSituation) -> String {
        let needs = &situation.needs;
        if needs.is_empty() {
            return "no fault model is needed for it, yet no run got there".to_owned();
        }
        let fired: Vec<String> = needs
            .iter()
            .filter(|name| self.fault(name).count > 0)
            .map(|name| {
                let tally = self.fault(name);
                format!(
                    "{name} fired {} time{} in {} seed{}",
                    tally.count,
                    if tally.count == 1 { "" } else { "s" },
                    tally.seeds,
                    if tally.seeds == 1 { "" } else { "s" }
                )
            })
            .collect();
        if !fired.is_empty() {
            return format!("{}, but never led there", fired.join(", "));
        }
        let on: u64 = needs.iter().map(|name| self.fault(name).on_in_seeds).sum();
        let silent = match needs.as_slice() {
            [only] => format!("the {only} fault fired 0 times"),
            _ => format!("none of {} fired", needs.join(", ")),
        };
        if on == 0 {
            let it = if needs.len() == 1 { "it was" } else { "they were" };
            format!("{silent}; {it} off in every seed")
        } else {
            silent
        }
    }
}

#[cfg(test)]
mod tests;
