//! How often a relay polls is its own business: a correct relay that polls every second, where
//! its settings say it may idle for minutes, settles like the reference does. The liveness
//! phase's step bound counts only the steps taken while work is due, so the thousands of polls a
//! run spends waiting out a backoff or a sender's retry hours away neither cut the run off
//! ("did not settle") nor make its owed obligations look stuck.

use std::rc::Rc;
use std::sync::Arc;

use commitgap_sim::commitgap::env::{DbError, Env, LocalBoxFuture, Value};
use commitgap_sim::commitgap::receiver::{Answer, WebhookDelivery};
use commitgap_sim::commitgap::relay::{Pass, RelaySettings, relay_once};
use commitgap_sim::run::{RunOptions, run_seed};
use commitgap_sim::rusqlite::Connection;
use commitgap_sim::system::{Fixtures, ObservedRow, System};
use commitgap_sim::systems::ReferenceSystem;

/// The reference, but its workers look for work every second whatever their settings say.
struct PollsEverySecond(ReferenceSystem);

impl System for PollsEverySecond {
    fn name(&self) -> &str {
        "polls-every-second"
    }

    fn description(&self) -> &str {
        "the reference, its relay polling every second"
    }

    fn set_up(&self, connection: &Connection, fixtures: &Fixtures) -> Result<(), DbError> {
        self.0.set_up(connection, fixtures)
    }

    fn handle_delivery(
        &self,
        env: Rc<dyn Env>,
        delivery: WebhookDelivery,
    ) -> LocalBoxFuture<'static, Answer> {
        self.0.handle_delivery(env, delivery)
    }

    fn run_relay_worker(&self, env: Rc<dyn Env>, settings: RelaySettings) -> LocalBoxFuture<'static, ()> {
        Box::pin(async move {
            loop {
                if !matches!(relay_once(&*env, &settings).await, Ok(Pass::Worked)) {
                    env.sleep_ms(1_000).await;
                }
            }
        })
    }

    fn purge_receipts(&self, env: Rc<dyn Env>, older_than_ms: i64) -> LocalBoxFuture<'static, ()> {
        self.0.purge_receipts(env, older_than_ms)
    }

    fn requeue_dead_obligations(&self, env: Rc<dyn Env>) -> LocalBoxFuture<'static, ()> {
        self.0.requeue_dead_obligations(env)
    }

    fn observed_tables(&self) -> &[&'static str] {
        self.0.observed_tables()
    }

    fn decode_row(&self, table: &str, values: &[Value]) -> Result<ObservedRow, String> {
        self.0.decode_row(table, values)
    }
}

#[test]
fn a_relay_polling_every_second_settles_and_is_never_judged_stuck() {
    let system: Arc<dyn System> = Arc::new(PollsEverySecond(ReferenceSystem::reference()));
    // Seeds 0..12 include runs that wait hours after heal for a sender's retry or a backoff; with
    // every poll counted against the step bound, 6 of these 12 ended unsettled.
    let mut polls_past_the_old_bound = 0;
    for seed in 0..12 {
        let outcome = run_seed(&system, seed, &RunOptions::default()).unwrap();
        assert!(
            outcome.unsettled.is_none(),
            "seed {seed}: {:?}",
            outcome.unsettled
        );
        assert!(outcome.failure.is_none(), "seed {seed}: {:?}", outcome.failure);
        if outcome.steps > outcome.config.fault_phase_steps_max + outcome.config.liveness_steps_max {
            polls_past_the_old_bound += 1;
        }
    }
    assert!(
        polls_past_the_old_bound >= 3,
        "only {polls_past_the_old_bound} of 12 runs took more steps than a fixed bound allowed: the test no longer exercises the rule"
    );
}
