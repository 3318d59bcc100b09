//! Every task that returns has closed its transaction: committed it or rolled it back.
//!
//! The simulated connection pool rolls a left-open transaction back when the task returns, so
//! the run can go on; a deployment whose connections are not reset between tasks (one connection
//! per process, as `RealEnv` has, or a pool without a reset) would hand the open transaction,
//! and the write lock it may hold, to the process's next task, whose `BEGIN` then fails and whose
//! writes join a transaction it did not start. A crash is not a return (SQLite rolls back a
//! closed connection's transaction), and a handler whose web framework commits after the answer
//! (`System::commits_after_answer`) leaves its transaction to the framework. The check reads only
//! the step's record.

use super::{Invariant, InvariantKind, Observation};

pub struct TaskClosesItsTransaction;

impl Invariant for TaskClosesItsTransaction {
    fn name(&self) -> &'static str {
        "task-closes-its-transaction"
    }

    fn description(&self) -> &'static str {
        "a handler, relay worker, purge or operator task never returns with a transaction open"
    }

    fn kind(&self) -> InvariantKind {
        InvariantKind::Safety
    }

    fn check(&self, observation: &Observation<'_>) -> Result<(), String> {
        match observation.step.transactions_left_open.first() {
            Some(process_id) => Err(format!(
                "a task of {process_id} returned with its transaction open (neither COMMIT nor ROLLBACK ran); a connection that is not reset would hand it to the next task"
            )),
            None => Ok(()),
        }
    }
}
