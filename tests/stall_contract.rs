//! Faults stay within what the system under test was promised.
//!
//! The relay widens its reconciliation margin by `stall_ms_max`, the longest a worker may stall
//! between deciding to send and sending, and a deployment must keep real stalls below it. Two
//! fault models pause relay workers (`worker-pause` and `hung-worker`), and each could pause a
//! worker again at the same point when it woke, so their pauses once added up to a stall no
//! deployment was allowed to have: in seed 66221, four pauses of one worker between its claim and
//! its provider call came to 25m43s against a 10-minute promise, the call reached the provider
//! after it had forgotten the key, and the reference "failed" one-effect-per-operation. The world
//! now counts consecutive pauses as one stall and caps it.

use std::sync::Arc;

use commitgap_sim::run::{RunOptions, run_seed};
use commitgap_sim::systems;
use commitgap_sim::trace::{Actor, Happening};

#[test]
fn pauses_of_one_relay_worker_at_one_point_add_up_to_at_most_the_promised_stall() {
    let system = Arc::clone(&systems::by_name("reference").unwrap());
    // The seed draws provider-double-execute, which keeps relay workers from pausing; without
    // it the seed draws what it drew when the finding was made.
    let options = RunOptions {
        keep_trace: true,
        shape: commitgap_sim::run::WorkloadShape {
            without_faults: vec!["provider-double-execute".to_owned()],
            ..Default::default()
        },
        ..RunOptions::default()
    };
    let outcome = run_seed(&system, 66221, &options).unwrap();
    assert!(
        outcome.failure.is_none(),
        "seed 66221: {:?}",
        outcome.failure.map(|failure| failure.message)
    );
    let stall_ms_max = outcome.config.relay.stall_ms_max;
    let trace = outcome.trace.unwrap();
    // Between two steps in which a worker does something other than pause, its pauses add up.
    let mut stalled_ms: std::collections::BTreeMap<String, i64> = Default::default();
    let mut paused_at_all = false;
    for step in &trace {
        let Actor::Process(actor) = &step.actor else {
            continue;
        };
        if !actor.starts_with("relay-") {
            continue;
        }
        match &step.happened[..] {
            [Happening::Pause { process, duration_ms }] if **process == **actor => {
                paused_at_all = true;
                let total = stalled_ms.entry(actor.to_string()).or_default();
                *total += duration_ms;
                assert!(
                    *total <= stall_ms_max,
                    "{actor} stalled {total} ms in a row, more than stall_ms_max {stall_ms_max}: {step}"
                );
            }
            _ => {
                stalled_ms.remove(&**actor);
            }
        }
    }
    assert!(paused_at_all, "the seed still pauses relay workers");
}
