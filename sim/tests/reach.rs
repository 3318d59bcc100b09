//! Sweeps reach a team's code, not only the reference's: protections that once only a scripted
//! test of the reference checked are judged by what a sweep of seeds causes.
//! - A body limit the receiver declares ([`System::body_bytes_max`]) is met by a genuine event
//!   padded to exactly that size, so a receiver whose real limit is lower refuses a genuine
//!   delivery.
//! - The `maintenance-lock` model holds the write lock as the operator's pass begins, so an
//!   operator tool that gives up at its first busy answer leaves dead obligations dead.
//!
//! Each changed system is the reference wrapped, with one thing changed, the way a team would
//! write it; the wrapper without the change passes the same seeds.

use std::rc::Rc;
use std::sync::Arc;

use commitgap_sim::commitgap::env::{DbError, Env, LocalBoxFuture, text};
use commitgap_sim::commitgap::receiver::{Answer, WebhookDelivery};
use commitgap_sim::commitgap::relay::RelaySettings;
use commitgap_sim::domain::Domain;
use commitgap_sim::run::Fixtures;
use commitgap_sim::run::{RunOptions, run_seed};
use commitgap_sim::rusqlite;
use commitgap_sim::system::ObservedRow;
use commitgap_sim::system::{System, Workflows};
use commitgap_sim::systems::ReferenceSystem;

/// What the wrapper changes in the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Nothing but the declared body limit, which the reference reads from its settings.
    Nothing,
    /// Declares a larger body limit than the 64 KiB its receiver really takes.
    AcceptsLessThanItDeclares,
    /// The operator's requeue runs once and gives up at a busy database.
    RequeueGivesUpWhenBusy,
}

/// A larger limit than the reference's default, so that the padded event is larger than
/// anything the reference's receiver was tested with.
const DECLARED_BODY_BYTES_MAX: usize = 100_000;

struct Wrapped {
    inner: Arc<dyn System>,
    change: Change,
}

impl Wrapped {
    fn system(change: Change) -> Arc<dyn System> {
        Arc::new(Wrapped {
            inner: Arc::new(ReferenceSystem::reference()),
            change,
        })
    }
}

impl System for Wrapped {
    fn name(&self) -> &str {
        "wrapped-reference"
    }

    fn description(&self) -> &str {
        "the reference with one thing changed"
    }

    fn domain(&self) -> Arc<dyn Domain> {
        self.inner.domain()
    }

    fn workflows(&self) -> Workflows {
        self.inner.workflows()
    }

    fn set_up(&self, connection: &rusqlite::Connection, fixtures: &Fixtures) -> Result<(), DbError> {
        self.inner.set_up(connection, fixtures)
    }

    fn handle_delivery(
        &self,
        env: Rc<dyn Env>,
        delivery: WebhookDelivery,
    ) -> LocalBoxFuture<'static, Answer> {
        if self.change == Change::AcceptsLessThanItDeclares
            && delivery.body.len() > commitgap_sim::commitgap::receiver::DEFAULT_BODY_BYTES_MAX
        {
            let refused = Answer::TooLarge(format!("body of {} bytes is too large", delivery.body.len()));
            return Box::pin(async move { refused });
        }
        self.inner.handle_delivery(env, delivery)
    }

    fn run_relay_worker(&self, env: Rc<dyn Env>, settings: RelaySettings) -> LocalBoxFuture<'static, ()> {
        self.inner.run_relay_worker(env, settings)
    }

    fn purge_receipts(&self, env: Rc<dyn Env>, older_than_ms: i64) -> LocalBoxFuture<'static, ()> {
        self.inner.purge_receipts(env, older_than_ms)
    }

    fn requeue_dead_obligations(&self, env: Rc<dyn Env>) -> LocalBoxFuture<'static, ()> {
        if self.change != Change::RequeueGivesUpWhenBusy {
            return self.inner.requeue_dead_obligations(env);
        }
        Box::pin(async move {
            let requeued: Result<(), DbError> = async {
                let dead = env
                    .query(
                        "SELECT operation_key FROM outbox WHERE status = 'dead' ORDER BY operation_key",
                        &[],
                    )
                    .await?;
                for row in &dead {
                    let key = row.text(0)?.to_owned();
                    env.execute(
                        "UPDATE outbox SET status = 'pending', attempts = 0, dead_reason = NULL \
                         WHERE operation_key = ?1 AND status = 'dead'",
                        &[text(&key)],
                    )
                    .await?;
                }
                Ok(())
            }
            .await;
            if let Err(error) = requeued {
                env.log(&format!("operator requeue failed: {error}"));
            }
        })
    }

    fn body_bytes_max(&self) -> usize {
        DECLARED_BODY_BYTES_MAX
    }

    fn observed_tables(&self) -> &[&'static str] {
        self.inner.observed_tables()
    }

    fn decode_row(&self, table: &str, values: &[rusqlite::types::Value]) -> Result<ObservedRow, String> {
        self.inner.decode_row(table, values)
    }
}

/// Runs `seeds` and returns, for each, the failing invariant's name, if one failed.
fn verdicts(
    system: &Arc<dyn System>,
    seeds: std::ops::Range<u64>,
    options: &RunOptions,
) -> Vec<Option<String>> {
    seeds
        .map(|seed| {
            let outcome = run_seed(system, seed, options).unwrap();
            assert!(
                outcome.unsettled.is_none(),
                "seed {seed}: {:?}",
                outcome.unsettled
            );
            outcome.failure.map(|failure| failure.invariant)
        })
        .collect()
}

#[test]
fn a_receiver_that_takes_less_than_the_body_limit_it_declares_is_caught() {
    let options = RunOptions::default();
    let honest = verdicts(&Wrapped::system(Change::Nothing), 0..40, &options);
    assert!(
        honest.iter().all(Option::is_none),
        "the reference with a 100,000-byte limit fails: {honest:?}"
    );
    let short = verdicts(
        &Wrapped::system(Change::AcceptsLessThanItDeclares),
        0..40,
        &options,
    );
    let caught = short
        .iter()
        .filter(|verdict| verdict.as_deref() == Some("genuine-delivery-accepted"))
        .count();
    assert!(caught >= 10, "{caught} of 40 seeds caught it: {short:?}");
}

#[test]
fn an_operator_tool_that_gives_up_at_a_busy_database_is_caught() {
    // Obligations die of spent attempts in few seeds (long provider outages, cached errors), so
    // it takes a few hundred seeds to meet the lock with some dead ones to requeue.
    let options = RunOptions {
        every_fault: true,
        ..RunOptions::default()
    };
    let honest = verdicts(&Wrapped::system(Change::Nothing), 0..300, &options);
    assert!(
        honest.iter().all(Option::is_none),
        "the reference fails: {honest:?}"
    );
    let quitter = verdicts(&Wrapped::system(Change::RequeueGivesUpWhenBusy), 0..300, &options);
    let caught = quitter
        .iter()
        .filter(|verdict| verdict.as_deref() == Some("dead-only-if-rejected"))
        .count();
    assert!(caught >= 3, "{caught} of 300 seeds caught it");
}
