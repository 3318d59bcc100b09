//! The simulated [`Env`]: every awaited call is a scheduling point.
//!
//! Each operation first parks the task (returns `Pending` after telling the world how it waits)
//! and performs its effect only when the scheduler picks the task again, so the scheduler may run
//! any other process, or crash this one, between any two statements. A provider call parks twice:
//! once before the request leaves (the provider acts when it is picked) and once until the reply
//! or the timeout arrives. This module must not perform an operation before its scheduling point
//! and must never block.

use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use commitgap::env::{DbError, Env, LocalBoxFuture, Row, Value};
use commitgap::provider::{CallError, ProviderCall, ProviderReply};

use crate::db::StatementOutput;
use crate::faults::PendingOp;
use crate::sql::Statement;
use crate::trace::Happening;
use crate::world::{Park, StatementStep, TaskId, World};

/// The environment of one simulated task.
pub struct SimEnv {
    world: Rc<RefCell<World>>,
    task: TaskId,
    process_id: String,
}

impl SimEnv {
    pub fn new(world: Rc<RefCell<World>>, task: TaskId, process_id: String) -> SimEnv {
        SimEnv {
            world,
            task,
            process_id,
        }
    }

    /// In a scripted run, remembers the statement the task will run next.
    fn announce(&self, sql: &str) {
        self.world.borrow_mut().announce(self.task, Some(sql));
    }

    /// The announced statement is about to run: forget it.
    fn unannounce(&self) {
        self.world.borrow_mut().announce(self.task, None);
    }

    /// Runs one statement as a scheduling point, and again after each wait for a lock SQLite
    /// refused, until it runs or its busy timeout has passed (see `world::locks`).
    async fn run_statement(
        &self,
        sql: &str,
        params: &[Value],
        wants_rows: bool,
    ) -> Result<StatementOutput, DbError> {
        self.announce(sql);
        let statement = Statement::remembered(sql);
        let mut park = Park::Now;
        loop {
            self.scheduling_point_about(
                park,
                PendingOp::Sql(Rc::clone(&statement)),
                Detail::Sql(&statement),
            )
            .await;
            let step = self
                .world
                .borrow_mut()
                .statement(self.task, sql, params, wants_rows);
            match step {
                StatementStep::Done(result) => {
                    self.unannounce();
                    return result;
                }
                StatementStep::WaitForLock(until_ms) => park = Park::ForLock(until_ms),
            }
        }
    }

    /// Parks the task until the scheduler picks it at or after `park`, about to do `op`.
    fn scheduling_point<'b>(&'b self, park: Park, op: PendingOp) -> SchedulingPoint<'b> {
        self.scheduling_point_about(park, op, Detail::None)
    }

    /// A scheduling point whose schedule label says what it is about.
    fn scheduling_point_about<'b>(
        &'b self,
        park: Park,
        op: PendingOp,
        detail: Detail<'b>,
    ) -> SchedulingPoint<'b> {
        SchedulingPoint {
            env: self,
            park: Some((park, op, detail)),
        }
    }
}

/// A future that is pending exactly once: the first poll parks the task, the next one (when the
/// scheduler picks the task) completes.
struct SchedulingPoint<'a> {
    env: &'a SimEnv,
    park: Option<(Park, PendingOp, Detail<'a>)>,
}

/// What a scheduling point is about, for its schedule label.
#[derive(Clone, Copy)]
enum Detail<'a> {
    None,
    /// A statement: the label carries its verb and table.
    Sql(&'a Statement),
    /// A provider call or its reply: the label carries the idempotency key.
    Key(&'a str),
}

impl Future for SchedulingPoint<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, _context: &mut Context<'_>) -> Poll<()> {
        match self.park.take() {
            Some((park, op, detail)) => {
                let detail = || match detail {
                    Detail::None => String::new(),
                    Detail::Sql(statement) => statement.label(),
                    Detail::Key(key) => key.to_owned(),
                };
                self.env
                    .world
                    .borrow_mut()
                    .park_task(self.env.task, park, op, detail);
                Poll::Pending
            }
            None => Poll::Ready(()),
        }
    }
}

impl Env for SimEnv {
    fn process_id(&self) -> &str {
        &self.process_id
    }

    fn now_ms(&self) -> i64 {
        self.world.borrow().task_now_ms(self.task)
    }

    fn execute<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Value],
    ) -> LocalBoxFuture<'a, Result<usize, DbError>> {
        Box::pin(async move {
            match self.run_statement(sql, params, false).await? {
                StatementOutput::Changed(count) => Ok(count),
                StatementOutput::Rows(rows) => Ok(rows.len()),
            }
        })
    }

    fn query<'a>(
        &'a self,
        sql: &'a str,
        params: &'a [Value],
    ) -> LocalBoxFuture<'a, Result<Vec<Row>, DbError>> {
        Box::pin(async move {
            match self.run_statement(sql, params, true).await? {
                StatementOutput::Rows(rows) => Ok(rows),
                StatementOutput::Changed(_) => Ok(Vec::new()),
            }
        })
    }

    fn sleep_ms(&self, duration_ms: i64) -> LocalBoxFuture<'_, ()> {
        Box::pin(async move {
            let until_ms = {
                let mut world = self.world.borrow_mut();
                let until_ms = world.now_ms() + duration_ms.max(0);
                world.record(Happening::Sleep {
                    duration_ms: duration_ms.max(0),
                });
                until_ms
            };
            self.scheduling_point(Park::Until(until_ms), PendingOp::Wake)
                .await;
            self.world.borrow_mut().record(Happening::Wake);
        })
    }

    fn call_provider<'a>(
        &'a self,
        call: &'a ProviderCall,
    ) -> LocalBoxFuture<'a, Result<ProviderReply, CallError>> {
        Box::pin(async move {
            let key = call.request.idempotency_key();
            self.scheduling_point_about(Park::Now, PendingOp::ProviderCall, Detail::Key(key))
                .await;
            let reply_at_ms = self.world.borrow_mut().send_provider_call(self.task, call);
            self.scheduling_point_about(
                Park::Until(reply_at_ms),
                PendingOp::ProviderReply,
                Detail::Key(key),
            )
            .await;
            self.world.borrow_mut().take_reply(self.task)
        })
    }

    fn log(&self, message: &str) {
        self.world.borrow_mut().record(Happening::Log(message.to_owned()));
    }

    fn setting(&self, name: &str) -> Option<String> {
        self.world.borrow().setting(name)
    }
}
