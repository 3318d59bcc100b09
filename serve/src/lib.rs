//! Runs a [`System`](commitgap_sim::system::System) as a service: the code a team tested under
//! simulation, behind a real HTTP endpoint, on a real SQLite file, with real time.
//!
//! The simulator proves things about a `System`; this crate is the glue between that code and
//! production, written once so that a team does not write its own and decide production's
//! behaviour there untested. It makes no decision of the system's: how a delivery is verified,
//! what is committed, which status is answered, when a lease is released are all the system's
//! own code. What it decides is the plumbing, and it decides it as the simulator assumes:
//!
//! - [`env`](mod@env): the [`Env`](commitgap_sim::commitgap::env::Env) each task runs on, one SQLite
//!   connection in WAL mode with `synchronous = FULL` and the system's busy timeout, and a small
//!   pool of them for the receiver; a stop flag that ends a worker at its next sleep.
//! - [`connection_labels`]: what each connection tells a live check's commit journal: its
//!   process and the number of its transaction.
//! - [`receiver`]: the HTTP receiver (`POST /webhooks/{endpoint}`): raw body and headers become a
//!   `WebhookDelivery`, the system's handler runs on a pooled connection off the async workers,
//!   and its `Answer` becomes the status and body; `GET /healthz` and `GET /readyz`; graceful
//!   shutdown on SIGTERM or Ctrl-C.
//! - [`provider`]: an HTTP [`ProviderClient`](commitgap_sim::commitgap::realtime::ProviderClient)
//!   that sends the idempotency key as a header and honours the call timeout.
//! - [`provider_double`]: a provider that speaks that contract over HTTP, forgets keys at their
//!   lifetime, answers 409 while a key is in progress, and acts slowly or loses replies at seeded
//!   rates; its ledger of effects is what a check over real processes judges.
//! - [`sender`]: a real webhook sender that signs with Standard Webhooks, follows a preset's retry
//!   schedule in compressed time and keeps its books with the simulator's own `Sender`.
//! - [`workers`]: runners for the relay workers, the purge job and the operator's requeue, and the
//!   database's creation from the system's own set-up.
//! - [`cli`]: the command line of a served system (`init`, `run`, `relay`, `purge`, `requeue`,
//!   `live`), so that a team's binary is `Service::new(system).main()`.
//! - [`live`]: the simulator's invariants over real processes: the served system started as
//!   receivers and relay workers on localhost, a signing sender, a provider double, faults from a
//!   seed (kills, pauses, resets, lost answers, early purges), then heal, quiet and the verdict
//!   on the final state and on every commit.
//! - [`service`]: a service description (docs/services.md): how to start and read a service
//!   commitgap did not build, in any language, on its own schema, so that `commitgap-live
//!   --service FILE` checks it as `live` checks a served system.

pub mod cli;
pub mod connection_labels;
pub mod env;
pub mod live;
pub mod provider;
pub mod provider_double;
pub mod receiver;
pub mod sender;
pub mod service;
pub mod workers;
