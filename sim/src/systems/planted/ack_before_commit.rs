//! `ack-before-commit`: the receiver answers success before COMMIT.
//!
//! The handler returns its success with the transaction still open, and the web framework commits
//! it after writing the response. A crash or a busy database between the answer and the commit
//! loses work the sender was told is done, and the sender will not deliver it again.
//!
//! Only [`ReceiverSteps::commit_and_answer`] differs from the reference, and the system says the
//! framework commits after the answer; it must not change any other step.

use commitgap::env::{DbError, Env};
use commitgap::receiver::{Answer, Decision, Incoming, Outcome, ReceiverSteps};
use commitgap::reference::Reference;
use commitgap::relay::RelaySteps;

use super::PlantedBug;

/// See the module documentation.
#[derive(Debug, Clone, Copy, Default)]
pub struct AckBeforeCommit;

impl PlantedBug for AckBeforeCommit {
    const NAME: &'static str = "ack-before-commit";
    const RULE_BROKEN: &'static str = "the receiver answers success before COMMIT";
    /// The open transaction is the framework's to commit, after the answer.
    const COMMITS_AFTER_ANSWER: bool = true;
}

impl ReceiverSteps for AckBeforeCommit {
    async fn commit_and_answer(
        &self,
        env: &dyn Env,
        incoming: &Incoming<'_>,
        outcome: Result<Outcome, DbError>,
    ) -> Answer {
        match outcome {
            Ok(Outcome {
                decision: Decision::Commit(kind),
                ..
            }) => Answer::Success(kind),
            other => Reference.commit_and_answer(env, incoming, other).await,
        }
    }
}

impl RelaySteps for AckBeforeCommit {}
