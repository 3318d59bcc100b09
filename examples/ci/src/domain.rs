//! The CI domain: GitHub `push` and `pull_request` webhooks about branches of repositories, and
//! the check runs they owe.
//!
//! An organisation's repositories have branches (`repo-1/main`, `repo-1/feature-2`). GitHub
//! reports a push to a branch (`push`) and a pull request whose head moved (`pull_request.*`),
//! each with the commit now at the branch's head (`head_sha`). The rules a correct receiver and
//! relay keep:
//! - a branch moves `idle -> building` on its first event and `building -> building` on later
//!   ones; it never goes back to idle;
//! - a branch's head is the `head_sha` of its newest event by creation time, whatever the arrival
//!   order: an older push arriving late changes nothing (where two events were created in the
//!   same millisecond, either head is right);
//! - every commit pushed to a repository owes exactly one check run, operation
//!   `<org>/<repo>/check-run/<sha>`, whose payload names the repository and the commit: a pull
//!   request for a commit already pushed, the same commit on a second branch, a redelivery or a
//!   twin event all owe that same check run, never a second one; a superseded push still owes its
//!   check run (the commit was pushed);
//! - an event for an account or a branch that does not exist is refused with 422 and leaves no
//!   receipt.
//!
//! This module holds the names, the model, the payload the provider reads, and the domain's
//! answers to the simulator's questions; [`crate::draw`] draws a run's branches and events. It
//! must not look at any database nor share code with the system under test: the model is an
//! oracle computed from the workload alone, and a payload format shared with the relay would
//! agree with the relay's mistakes.

use std::collections::BTreeSet;

use commitgap_sim::commitgap::receiver::NAME_CHARS_MAX;
use commitgap_sim::domain::{
    Domain, DomainWords, EntityState, Model, Owed, Owing, Refusal, WorkloadSettings,
};
use commitgap_sim::domain::{EventSpec, Workload};
use commitgap_sim::system::Fixtures;

/// A push to a branch.
pub const PUSH: &str = "push";
/// A pull request whose head branch moved (the wire type is [`PULL_REQUEST_TYPE`]).
pub const PULL_REQUEST: &str = "pull_request";
/// The wire type of a push.
pub const PUSH_TYPE: &str = "push";
/// The wire type of a pull request event: GitHub's event name and its action.
pub const PULL_REQUEST_TYPE: &str = "pull_request.synchronize";
/// The field every event carries: the commit at the branch's head.
pub const HEAD_SHA: &str = "head_sha";
/// The key the body names the branch under.
pub const BRANCH_KEY: &str = "branch";
/// A branch no event has reached yet.
pub const IDLE: &str = "idle";
/// A branch with a head commit, whose check runs are owed.
pub const BUILDING: &str = "building";
/// The operation a check run is owed under, in its key and its payload.
pub const CHECK_RUN: &str = "check-run";

/// The CI domain. See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ci;

/// The repository a branch belongs to, within its organisation: `repo-1` of `repo-1/main`.
/// `None` for a name that is not `<repository>/<branch>`.
pub fn repository_of(branch: &str) -> Option<&str> {
    branch
        .split_once('/')
        .filter(|(repository, name)| !repository.is_empty() && !name.is_empty())
        .map(|(repository, _)| repository)
}

/// The key of the check run owed for `head_sha` in `repository` (`org-a/repo-1`).
pub fn check_run_key(repository: &str, head_sha: &str) -> String {
    format!("{repository}/{CHECK_RUN}/{head_sha}")
}

/// The payload a correct relay sends for the check run of `head_sha` in `repository`: keys in
/// alphabetical order, as serde_json writes an object whichever map it was built with.
pub fn check_run_payload(repository: &str, head_sha: &str) -> String {
    serde_json::json!({"head_sha": head_sha, "operation": CHECK_RUN, "repository": repository}).to_string()
}

/// A branch's state in the domain's words: idle, or building `head_sha`.
pub fn branch_state(head_sha: Option<&str>) -> EntityState {
    match head_sha {
        Some(sha) => EntityState::named(BUILDING).with(HEAD_SHA, sha),
        None => EntityState::named(IDLE),
    }
}

impl Domain for Ci {
    fn name(&self) -> &str {
        "ci"
    }

    fn description(&self) -> &str {
        "GitHub pushes and pull requests for branches of repositories; every commit pushed owes one check run"
    }

    fn rules(&self) -> Vec<String> {
        [
            "a branch moves idle -> building on its first event and building -> building after; it never goes back to idle",
            "a branch's head is the head_sha of its newest event by creation time, whatever the arrival order",
            "every commit pushed to a repository owes one check run, <org>/<repo>/check-run/<sha>, whatever number of events report it",
            "a check run's payload names the repository and the commit: {\"head_sha\",\"operation\":\"check-run\",\"repository\"}",
            "an event for an account or a branch that does not exist is refused with 422 and leaves no receipt",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    fn words(&self) -> DomainWords {
        DomainWords {
            subjects: "branches".to_owned(),
            updates: "none in this domain, whose stories draw no extra updates (the flag changes nothing)"
                .to_owned(),
            edge_values:
                "a 128-character branch name, an event created at time 0, a body at the configured limit"
                    .to_owned(),
        }
    }

    fn draw(&self, seed: u64, settings: &WorkloadSettings) -> (Fixtures, Vec<EventSpec>) {
        crate::draw::draw(seed, settings)
    }

    fn unknown_type_body(&self, event: &serde_json::Value) -> Option<serde_json::Value> {
        // GitHub sends issue events to a repository's hooks too; this service takes none.
        let mut event = event.clone();
        event["type"] = "issues.opened".into();
        Some(event)
    }

    fn event_type(&self, event: &EventSpec) -> String {
        match event.kind.as_str() {
            PUSH => PUSH_TYPE,
            PULL_REQUEST => PULL_REQUEST_TYPE,
            other => other,
        }
        .to_owned()
    }

    fn body(&self, event: &EventSpec) -> String {
        event.standard_body(&self.event_type(event), BRANCH_KEY)
    }

    fn model(&self, workload: &Workload) -> Model {
        let mut model = Model::default();
        for fixture in &workload.fixtures.subjects {
            let (org, branch) = (&fixture.tenant, &fixture.subject);
            let events: Vec<&EventSpec> = workload
                .events_for_subject(org, branch)
                .filter(|event| workload.knows(&event.account, org, branch))
                .collect();
            model
                .final_states
                .insert((org.clone(), branch.clone()), final_states(&events));
            for event in events {
                owe_check_run(&mut model, event);
            }
        }
        model
    }

    fn may_become(&self, before: &EntityState, after: &EntityState) -> bool {
        let moves = after.state == BUILDING && (before.state == IDLE || before.state == BUILDING);
        moves || before.state == after.state
    }

    fn refusal(&self, workload: &Workload, event: &EventSpec) -> Option<Refusal> {
        if workload.knows(&event.account, &event.tenant, &event.subject) {
            None
        } else {
            Some(Refusal::permanent("its account or branch does not exist"))
        }
    }

    fn operation_of(&self, payload: &str) -> Result<String, String> {
        let value: serde_json::Value = serde_json::from_str(payload)
            .map_err(|error| format!("unreadable check-run payload: {error}"))?;
        let object = value.as_object().ok_or("a check-run payload is a JSON object")?;
        let text = |name: &str| {
            object
                .get(name)
                .and_then(serde_json::Value::as_str)
                .filter(|value| !value.is_empty())
                .ok_or_else(|| format!("a check-run payload needs a non-empty {name}"))
        };
        if object.len() != 3 || text("operation")? != CHECK_RUN {
            return Err(format!("not a check-run payload: {payload}"));
        }
        let repository = text("repository")?;
        if repository.split('/').count() != 2 {
            return Err(format!("repository {repository:?} is not <org>/<repo>"));
        }
        Ok(check_run_key(repository, text(HEAD_SHA)?))
    }

    fn invalid_body(&self, event: &serde_json::Value, rule: u64) -> serde_json::Value {
        let mut event = event.clone();
        match rule % 6 {
            0 => event["id"] = "".into(),
            1 => event[BRANCH_KEY] = "no-repository".into(),
            2 => event[HEAD_SHA] = "".into(),
            3 => event[HEAD_SHA] = "not-a-sha".into(),
            4 => event["created_ms"] = (-1).into(),
            _ => event["id"] = "i".repeat(NAME_CHARS_MAX + 1).into(),
        }
        event
    }
}

/// Every state a branch may end in: idle with no event, else building the head of its newest
/// event by creation time (each of the newest, where several share that millisecond).
fn final_states(events: &[&EventSpec]) -> BTreeSet<EntityState> {
    let Some(newest_ms) = events.iter().map(|event| event.created_ms).max() else {
        return BTreeSet::from([branch_state(None)]);
    };
    events
        .iter()
        .filter(|event| event.created_ms == newest_ms)
        .map(|event| branch_state(event.text(HEAD_SHA)))
        .collect()
}

/// Records that `event`, of a branch that exists, owes the check run of its head commit.
fn owe_check_run(model: &mut Model, event: &EventSpec) {
    let (Some(repository), Some(head_sha)) = (repository_of(&event.subject), event.text(HEAD_SHA)) else {
        return;
    };
    let repository = format!("{}/{repository}", event.tenant);
    let owed = model
        .owed
        .entry(check_run_key(&repository, head_sha))
        .or_insert_with(|| Owed {
            owing: Owing::Certainly,
            payloads: BTreeSet::from([check_run_payload(&repository, head_sha)]),
            events: BTreeSet::new(),
        });
    owed.events
        .insert((event.account.clone(), event.event_id.clone()));
}

#[cfg(test)]
mod tests {
    use commitgap_sim::system::SubjectFixture;

    use super::*;

    fn event(kind: &str, branch: &str, sha: &str, created_ms: i64) -> EventSpec {
        let mut event = EventSpec::new("acct-a", "org-a", branch, kind, created_ms).with(HEAD_SHA, sha);
        event.event_id = format!("evt-{created_ms}");
        event
    }

    fn workload(events: Vec<EventSpec>) -> Workload {
        let fixtures = Fixtures {
            accounts: vec![("acct-a".into(), "org-a".into())],
            subjects: vec![
                SubjectFixture::new("org-a", "repo-1/main"),
                SubjectFixture::new("org-a", "repo-1/feature-2"),
            ],
        };
        Workload::new(fixtures, events)
    }

    fn final_state<'a>(model: &'a Model, branch: &str) -> &'a BTreeSet<EntityState> {
        &model.final_states[&("org-a".to_owned(), branch.to_owned())]
    }

    #[test]
    fn the_newest_event_by_creation_time_decides_the_head_whatever_the_order_given() {
        // Listed newest first, as a late delivery would bring them: creation time decides.
        let model = Ci.model(&workload(vec![
            event(PUSH, "repo-1/main", "c0ffee3", 30),
            event(PUSH, "repo-1/main", "c0ffee1", 10),
            event(PULL_REQUEST, "repo-1/main", "c0ffee2", 20),
        ]));
        let building = |sha: &str| BTreeSet::from([branch_state(Some(sha))]);
        assert_eq!(final_state(&model, "repo-1/main"), &building("c0ffee3"));
        assert_eq!(
            final_state(&model, "repo-1/feature-2"),
            &BTreeSet::from([branch_state(None)])
        );
        // Every commit pushed owes its check run, the superseded ones too.
        assert_eq!(model.owed.len(), 3);
        // Two events created in the same millisecond: either may be the head.
        let tied = Ci.model(&workload(vec![
            event(PUSH, "repo-1/main", "aaaaaaa", 10),
            event(PUSH, "repo-1/main", "bbbbbbb", 10),
        ]));
        assert_eq!(final_state(&tied, "repo-1/main").len(), 2);
    }

    #[test]
    fn a_push_and_a_pull_request_for_one_commit_owe_one_check_run() {
        let push = event(PUSH, "repo-1/feature-2", "abc1234", 10);
        let pull_request = event(PULL_REQUEST, "repo-1/feature-2", "abc1234", 20);
        let merged = event(PUSH, "repo-1/main", "abc1234", 30);
        let model = Ci.model(&workload(vec![
            push.clone(),
            pull_request.clone(),
            merged.clone(),
        ]));
        let key = "org-a/repo-1/check-run/abc1234";
        assert_eq!(model.owed.keys().collect::<Vec<_>>(), [key]);
        let owed = &model.owed[key];
        assert_eq!(owed.owing, Owing::Certainly);
        assert_eq!(owed.events.len(), 3, "all three events owe the one check run");
        let payload = owed.payloads.first().unwrap();
        assert_eq!(
            payload,
            r#"{"head_sha":"abc1234","operation":"check-run","repository":"org-a/repo-1"}"#
        );
        assert_eq!(Ci.operation_of(payload).as_deref(), Ok(key));
        for event in [&push, &pull_request, &merged] {
            let owed_by: Vec<&str> = model.certainly_owed_by(&event.account, &event.event_id).collect();
            assert_eq!(owed_by, [key]);
        }
    }

    #[test]
    fn an_event_for_a_branch_that_does_not_exist_is_refused_and_owes_nothing() {
        let ghost = event(PUSH, "repo-9/ghost", "dead000", 10);
        let known = event(PUSH, "repo-1/main", "beef000", 20);
        let workload = workload(vec![ghost.clone(), known.clone()]);
        assert_eq!(
            Ci.refusal(&workload, &ghost).map(|refusal| refusal.status_class),
            Some(4)
        );
        assert_eq!(Ci.refusal(&workload, &known), None);
        let mut stranger = known.clone();
        stranger.account = "acct-z".into();
        assert!(
            Ci.refusal(&workload, &stranger).is_some(),
            "an account of another org"
        );
        let model = Ci.model(&workload).with_refusals(&Ci, &workload);
        assert!(model.expects_rejection(&ghost));
        assert_eq!(
            model.owed.keys().collect::<Vec<_>>(),
            ["org-a/repo-1/check-run/beef000"]
        );
    }

    #[test]
    fn a_branch_never_goes_back_to_idle() {
        let idle = branch_state(None);
        let building = branch_state(Some("abc1234"));
        assert!(Ci.may_become(&idle, &building));
        assert!(Ci.may_become(&building, &branch_state(Some("def5678"))));
        assert!(!Ci.may_become(&building, &idle));
        assert!(!Ci.may_become(&idle, &EntityState::named("passed")));
    }

    #[test]
    fn the_provider_reads_only_check_run_payloads() {
        for payload in [
            "{",
            "[]",
            r#"{"head_sha":"abc","operation":"deploy","repository":"org-a/repo-1"}"#,
            r#"{"head_sha":"","operation":"check-run","repository":"org-a/repo-1"}"#,
            r#"{"head_sha":"abc","operation":"check-run","repository":"repo-1"}"#,
            r#"{"head_sha":"abc","operation":"check-run","repository":"org-a/repo-1","x":1}"#,
        ] {
            assert!(Ci.operation_of(payload).is_err(), "{payload}");
        }
    }

    #[test]
    fn bodies_name_the_branch_and_its_head() {
        let push = event(PULL_REQUEST, "repo-1/main", "abc1234", 7);
        let expected = serde_json::json!({
            "account": "acct-a", "branch": "repo-1/main", "created_ms": 7, "head_sha": "abc1234",
            "id": "evt-7", "type": "pull_request.synchronize"
        });
        assert_eq!(Ci.body(&push), expected.to_string());
    }
}
