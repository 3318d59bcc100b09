//! A webhook receiver and a transactional-outbox relay on SQLite: the reference system that the
//! `commitgap-sim` simulator tests, and a library you can run for real.
//!
//! Map of the modules:
//! - [`env`](mod@env): the runtime interface ([`env::Env`]) every other module is written against; under
//!   simulation each awaited call is a scheduling point.
//! - [`schema`]: the tables (accounts, receipts, orders, outbox) and their column order.
//! - [`receiver`]: one delivery in, one `BEGIN IMMEDIATE` transaction, one answer out, written as
//!   named steps ([`receiver::ReceiverSteps`]) a variant can override one at a time.
//! - [`relay`]: claim an obligation under a fenced lease, call the provider, record the outcome,
//!   written as named steps ([`relay::RelaySteps`]) likewise.
//! - [`reference`](mod@reference): [`reference::Reference`], the type that takes every step as the reference
//!   defines it.
//! - [`purge`]: delete old receipts, never business state.
//! - [`tables`]: where a system keeps its receipts and obligations, and the pattern's statements
//!   over them, written once from that declaration.
//! - [`provider`]: the downstream provider's contract (requests, replies, payload format).
//! - [`realtime`]: an `Env` over a real SQLite file and the wall clock.
//! - [`signature`]: Standard Webhooks signatures: sign a delivery, verify one against a set of
//!   secrets and a timestamp tolerance.

pub mod env;
pub mod provider;
pub mod purge;
pub mod realtime;
pub mod receiver;
pub mod reference;
pub mod relay;
pub mod schema;
pub mod signature;
pub mod tables;
