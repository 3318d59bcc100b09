//! How the CI domain draws a run's branches and events from its seed.
//!
//! Each organisation has one sender account and `settings.subjects_per_tenant` branches, two per
//! repository (`repo-1/main`, `repo-1/feature-2`, `repo-2/main`, ...). A branch gets none to three
//! pushes at distinct creation times, each with a commit of its own, and sometimes a pull request
//! event for one of those commits: a second event owing the same check run. Some feature branches
//! are merged: their newest commit is pushed to their repository's main branch later (the same
//! check run again, from another branch). In some seeds a commit is also pushed to a branch of
//! another repository (a fork or a mirror: a check run of its own), and an event names a branch
//! that does not exist, which a correct receiver refuses. With `settings.edge_values`, one branch's
//! name is exactly as long as the receiver allows and the first event is created at time 0.
//!
//! Every draw comes from a `ci/...` stream of the seed and nothing else is read, so a seed draws
//! the same workload everywhere. This module must not decide anything the model decides: it only
//! says what happened.

use std::collections::BTreeSet;

use commitgap_sim::commitgap::receiver::NAME_CHARS_MAX;
use commitgap_sim::domain::{EventSpec, Workload};
use commitgap_sim::domain::{SimRng, WorkloadSettings};
use commitgap_sim::rng::Ratio;
use commitgap_sim::system::{Fixtures, SubjectFixture};

use crate::domain::{HEAD_SHA, PULL_REQUEST, PUSH, repository_of};

/// The most pushes one branch gets; with a pull request, a merge and a mirror that keeps a branch
/// within the five events an entity the simulator's limits are sized for.
const PUSHES_PER_BRANCH_MAX: u64 = 3;

/// Draws the fixtures and events of `seed` with `settings`. Event ids count per account.
pub(crate) fn draw(seed: u64, settings: &WorkloadSettings) -> (Fixtures, Vec<EventSpec>) {
    let mut rng = SimRng::stream(seed, "ci/branches");
    let mut shas = SimRng::stream(seed, "ci/shas");
    let window_ms = settings.emit_window_ms;
    let mut accounts = Vec::new();
    let mut branches = Vec::new();
    let mut events = Vec::new();
    for tenant_index in 0..settings.tenants.min(26) {
        let letter = char::from(b'a' + tenant_index as u8);
        let (account, org) = (format!("acct-{letter}"), format!("org-{letter}"));
        accounts.push((account.clone(), org.clone()));
        for branch_index in 0..settings.subjects_per_tenant {
            let branch = branch_name(branch_index);
            let new_event =
                |kind: &str, created_ms| EventSpec::new(&account, &org, &branch, kind, created_ms);
            events.extend(draw_branch(&mut rng, &mut shas, window_ms, new_event));
            branches.push(SubjectFixture::new(&org, &branch));
        }
    }
    let mut shared = SimRng::stream(seed, "ci/shared-commits");
    let merges = draw_merges(&mut shared, &branches, &events, window_ms);
    events.extend(merges);
    events.extend(draw_mirror(
        &mut shared,
        (&accounts, &branches),
        &events,
        window_ms,
    ));
    events.extend(draw_missing_branch(seed, &accounts, window_ms));
    events.sort_by_key(|event| event.created_ms);
    Workload::number_events(&mut events);
    if settings.edge_values {
        put_values_at_the_edges(seed, &mut branches, &mut events);
    }
    let fixtures = Fixtures {
        accounts,
        subjects: branches,
    };
    (fixtures, events)
}

/// The name of a tenant's `index`-th branch (from 0): two per repository, `main` first.
pub fn branch_name(index: u32) -> String {
    let repository = index / 2 + 1;
    if index % 2 == 0 {
        format!("repo-{repository}/main")
    } else {
        format!("repo-{repository}/feature-{}", index + 1)
    }
}

/// A commit id: seven hex digits, as GitHub abbreviates them.
fn commit(shas: &mut SimRng) -> String {
    format!("{:07x}", shas.below(1 << 28))
}

/// `count` distinct creation times in `0..window_ms`; every time the window has, if it is
/// narrower than that (only a hand-edited seed file can make it so).
fn distinct_times(rng: &mut SimRng, count: u64, window_ms: i64) -> BTreeSet<i64> {
    let wanted = usize::try_from(count.min(window_ms.max(0).unsigned_abs())).unwrap_or(0);
    let mut times = BTreeSet::new();
    while times.len() < wanted {
        times.insert(rng.between(0, window_ms - 1));
    }
    times
}

/// One branch's events: none to three pushes at distinct times, and in one branch in three with
/// a push, a pull request event for one of its commits, created after that push.
fn draw_branch(
    rng: &mut SimRng,
    shas: &mut SimRng,
    window_ms: i64,
    new_event: impl Fn(&str, i64) -> EventSpec,
) -> Vec<EventSpec> {
    let pushes = rng.below(PUSHES_PER_BRANCH_MAX + 1);
    let times = distinct_times(rng, pushes, window_ms);
    let mut events: Vec<EventSpec> = times
        .iter()
        .map(|&created_ms| new_event(PUSH, created_ms).with(HEAD_SHA, commit(shas)))
        .collect();
    if events.is_empty() || !rng.chance(Ratio::new(1, 3)) {
        return events;
    }
    let pushed = rng.pick(&events).clone();
    if pushed.created_ms + 1 < window_ms {
        let created_ms = rng.between(pushed.created_ms + 1, window_ms - 1);
        if !times.contains(&created_ms) {
            let head_sha = pushed.fields[HEAD_SHA].clone();
            events.push(new_event(PULL_REQUEST, created_ms).with(HEAD_SHA, head_sha));
        }
    }
    events
}

/// The events of branch `subject` of `tenant` among `events`.
fn events_of<'a>(
    events: &'a [EventSpec],
    tenant: &'a str,
    subject: &'a str,
) -> impl Iterator<Item = &'a EventSpec> {
    events
        .iter()
        .filter(move |event| event.tenant == tenant && event.subject == subject)
}

/// A push of `commit_of`'s head to branch `to` by `account`, created at a time in
/// `from_ms..window_ms` that no event of `to` has, if one is drawn.
fn push_again(
    rng: &mut SimRng,
    commit_of: &EventSpec,
    (account, to): (&str, &SubjectFixture),
    events: &[EventSpec],
    (from_ms, window_ms): (i64, i64),
) -> Option<EventSpec> {
    if from_ms >= window_ms {
        return None;
    }
    let created_ms = rng.between(from_ms, window_ms - 1);
    if events_of(events, &to.tenant, &to.subject).any(|event| event.created_ms == created_ms) {
        return None;
    }
    let push = EventSpec::new(account, &to.tenant, &to.subject, PUSH, created_ms);
    Some(push.with(HEAD_SHA, commit_of.fields[HEAD_SHA].clone()))
}

/// For one feature branch with events in four, a merge: its newest commit pushed to its
/// repository's main branch after it. Both branches then report one commit, which owes one
/// check run.
fn draw_merges(
    rng: &mut SimRng,
    branches: &[SubjectFixture],
    events: &[EventSpec],
    window_ms: i64,
) -> Vec<EventSpec> {
    let mut merges = Vec::new();
    for feature in branches
        .iter()
        .filter(|branch| !branch.subject.ends_with("/main"))
    {
        let newest =
            events_of(events, &feature.tenant, &feature.subject).max_by_key(|event| event.created_ms);
        let Some(newest) = newest.filter(|_| rng.chance(Ratio::new(1, 4))) else {
            continue;
        };
        let main = format!("{}/main", repository_of(&feature.subject).unwrap_or("repo-1"));
        let main = SubjectFixture::new(&feature.tenant, &main);
        let to = (newest.account.as_str(), &main);
        merges.extend(push_again(
            rng,
            newest,
            to,
            events,
            (newest.created_ms + 1, window_ms),
        ));
    }
    merges
}

/// In one seed in four, a commit already pushed pushed again to a branch of another repository
/// (a fork or a mirror, maybe of another organisation): a check run of its own, since check runs
/// belong to a repository.
fn draw_mirror(
    rng: &mut SimRng,
    (accounts, branches): (&[(String, String)], &[SubjectFixture]),
    events: &[EventSpec],
    window_ms: i64,
) -> Option<EventSpec> {
    if events.is_empty() || !rng.chance(Ratio::new(1, 4)) {
        return None;
    }
    let pushed = rng.pick(events);
    let repository =
        |tenant: &str, subject: &str| (tenant.to_owned(), repository_of(subject).map(str::to_owned));
    let origin = repository(&pushed.tenant, &pushed.subject);
    let others: Vec<&SubjectFixture> = branches
        .iter()
        .filter(|branch| repository(&branch.tenant, &branch.subject) != origin)
        .collect();
    if others.is_empty() {
        return None;
    }
    let to = *rng.pick(&others);
    let (account, _) = accounts.iter().find(|(_, org)| *org == to.tenant)?;
    push_again(rng, pushed, (account, to), events, (0, window_ms))
}

/// In one seed in four, a push to a branch that does not exist, which a receiver must refuse
/// without committing anything.
fn draw_missing_branch(seed: u64, accounts: &[(String, String)], window_ms: i64) -> Option<EventSpec> {
    let mut rng = SimRng::stream(seed, "ci/missing-branch");
    if accounts.is_empty() || !rng.chance(Ratio::new(1, 4)) {
        return None;
    }
    let (account, org) = rng.pick(accounts).clone();
    let created_ms = rng.between(0, window_ms - 1);
    let push = EventSpec::new(&account, &org, "repo-1/ghost", PUSH, created_ms);
    Some(push.with(HEAD_SHA, commit(&mut rng)))
}

/// Moves values to the receiver's limits, each just inside (see `WorkloadSettings::edge_values`): one
/// branch's name to exactly `NAME_CHARS_MAX` characters, and the first event's creation time to
/// 0, which an idle branch must take as newer than no event at all. `events` are in creation
/// order.
fn put_values_at_the_edges(seed: u64, branches: &mut [SubjectFixture], events: &mut [EventSpec]) {
    let mut rng = SimRng::stream(seed, "ci/edges");
    if !branches.is_empty() {
        let fixture = &mut branches[rng.below(branches.len() as u64) as usize];
        let mut longest = format!("{}-", fixture.subject);
        let padding = NAME_CHARS_MAX.saturating_sub(longest.chars().count());
        longest.extend(std::iter::repeat_n('x', padding));
        for event in events.iter_mut() {
            if event.tenant == fixture.tenant && event.subject == fixture.subject {
                event.subject.clone_from(&longest);
            }
        }
        fixture.subject = longest;
    }
    if let Some(first) = events.first_mut() {
        first.created_ms = 0;
        first.deliver_at_ms = 0;
    }
}

#[cfg(test)]
mod tests {
    use commitgap_sim::domain::Domain;
    use commitgap_sim::run::Backend;
    use commitgap_sim::run::SimConfig;

    use super::*;
    use crate::domain::Ci;

    #[test]
    fn branches_are_named_two_per_repository() {
        let names: Vec<String> = (0..4).map(branch_name).collect();
        assert_eq!(
            names,
            [
                "repo-1/main",
                "repo-1/feature-2",
                "repo-2/main",
                "repo-2/feature-4"
            ]
        );
    }

    #[test]
    fn a_seed_draws_one_workload_inside_the_window_with_distinct_times_per_branch() {
        let mut shared_commits = 0;
        let mut refused = 0;
        for seed in 0..300 {
            let settings = SimConfig::draw(seed, Backend::Memdb).workload_settings();
            let (fixtures, events) = Ci.draw(seed, &settings);
            assert_eq!(
                (fixtures.clone(), events.clone()),
                Ci.draw(seed, &settings),
                "seed {seed}"
            );
            let workload = Workload::new(fixtures, events);
            let mut times = BTreeSet::new();
            for event in &workload.events {
                assert!(
                    (0..settings.emit_window_ms).contains(&event.created_ms),
                    "seed {seed}"
                );
                assert!(
                    event.text(HEAD_SHA).is_some_and(|sha| sha.len() == 7),
                    "seed {seed}"
                );
                let at = (event.tenant.clone(), event.subject.clone(), event.created_ms);
                assert!(
                    times.insert(at),
                    "seed {seed}: two events of a branch at one time"
                );
                refused += usize::from(Ci.refusal(&workload, event).is_some());
            }
            let model = Ci.model(&workload);
            shared_commits += model.owed.values().filter(|owed| owed.events.len() > 1).count();
        }
        assert!(
            shared_commits > 50,
            "{shared_commits} check runs owed by several events"
        );
        assert!(refused > 30, "{refused} events for branches that do not exist");
    }
}
