//! Fault models: the real failures the simulator injects, one file each, listed once in
//! [`registry`].
//!
//! A fault model draws its settings from its own configuration stream (so a seed's settings can
//! be read and edited in its seed file), decides from its own decision stream, and intervenes only
//! through the hooks of [`FaultModel`]: at a scheduling point, on a message, on a key being stored
//! at the provider, or on a timer it asked for. Swarm testing: each seed turns each fault model
//! on or off independently and draws its rates across orders of magnitude, so that rare
//! combinations show up in a sweep. A fault model must not reach into the world beyond its hooks,
//! and after [`FaultModel::heal`] it must stop injecting (except where its file says why not).

mod crash;
mod duplicate_delivery;
mod key_expiry;
mod lost_ack;
mod receipt_purge;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::rng::{Ratio, SimRng};

/// What a fault model asks the world to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// Crash the process at this scheduling point and restart it after the delay.
    Crash { restart_after_ms: i64 },
    /// Run the purge job now, deleting receipts received before `older_than_ms`.
    PurgeReceipts { older_than_ms: i64 },
    /// Call [`FaultModel::on_timer`] again at `at_ms`.
    WakeAt { at_ms: i64 },
}

/// The kinds of simulated process, as a fault model sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProcessRole {
    Receiver,
    RelayWorker,
    Purger,
}

/// One fault model with its settings and decision stream. Every hook has a do-nothing default.
pub trait FaultModel {
    fn name(&self) -> &'static str;

    /// The settings this model runs with, as written to seed files.
    fn settings(&self) -> serde_json::Value;

    /// Called once when the run starts.
    fn start(&mut self, _now_ms: i64) -> Vec<FaultAction> {
        Vec::new()
    }

    /// Called before a process runs its next step (a statement, a provider call, a reply).
    fn at_scheduling_point(&mut self, _role: ProcessRole) -> Option<FaultAction> {
        None
    }

    /// Called at a time this model asked for with [`FaultAction::WakeAt`].
    fn on_timer(&mut self, _now_ms: i64) -> Vec<FaultAction> {
        Vec::new()
    }

    /// Whether the receiver's answer to a delivery is lost on its way to the sender.
    fn drops_webhook_answer(&mut self, _now_ms: i64) -> bool {
        false
    }

    /// Whether the provider's reply is lost on its way to the relay (the provider did act).
    fn drops_provider_reply(&mut self, _now_ms: i64) -> bool {
        false
    }

    /// How many extra copies of a delivery attempt the sender sends at the same time.
    fn extra_deliveries(&mut self, _now_ms: i64) -> u32 {
        0
    }

    /// When the provider may forget a key first stored at `stored_at_ms`, if ever.
    fn key_forget_at(&mut self, _stored_at_ms: i64, _key_lifetime_ms: i64) -> Option<i64> {
        None
    }

    /// Stop injecting: the run moves to its liveness phase.
    fn heal(&mut self);
}

/// What a fault model's settings may depend on.
#[derive(Debug, Clone, Copy)]
pub struct FaultContext {
    pub fault_phase_ms: i64,
    /// Events are created within this window, so most work happens in it.
    pub emit_window_ms: i64,
    pub key_lifetime_ms: i64,
}

/// Builds a fault model from its settings and its decision stream.
pub type BuildFault = fn(&serde_json::Value, SimRng) -> Result<Box<dyn FaultModel>, String>;

/// A registered fault model.
pub struct FaultKind {
    pub name: &'static str,
    /// Which real failure it models, in one line.
    pub description: &'static str,
    /// Draws settings for one seed.
    pub draw: fn(&mut SimRng, &FaultContext) -> serde_json::Value,
    /// Builds the model from settings (drawn, or read from a seed file) and its decision stream.
    pub build: BuildFault,
}

/// Every fault model, in a fixed order. Adding one is one file and one line here.
pub fn registry() -> Vec<FaultKind> {
    vec![
        crash::KIND,
        lost_ack::KIND,
        duplicate_delivery::KIND,
        receipt_purge::KIND,
        key_expiry::KIND,
    ]
}

/// Finds a registered fault model by name.
pub fn kind(name: &str) -> Option<FaultKind> {
    registry().into_iter().find(|kind| kind.name == name)
}

/// The seed stream a fault model's settings are drawn from.
pub fn config_stream_label(name: &str) -> String {
    format!("config/fault/{name}")
}

/// The seed stream a fault model's decisions are drawn from.
pub fn decision_stream_label(name: &str) -> String {
    format!("fault/{name}")
}

/// Swarm testing: each fault model is on for about three seeds in four.
fn swarm_enabled(rng: &mut SimRng) -> bool {
    rng.chance(Ratio::new(3, 4))
}

/// One of the given ratios, so rates span orders of magnitude across seeds.
fn draw_ratio(rng: &mut SimRng, choices: &[(u32, u32)]) -> Ratio {
    let (numerator, denominator) = *rng.pick(choices);
    Ratio::new(numerator, denominator)
}

fn to_json<T: Serialize>(settings: &T) -> serde_json::Value {
    serde_json::to_value(settings).expect("fault settings are plain data")
}

fn from_json<T: DeserializeOwned>(name: &str, value: &serde_json::Value) -> Result<T, String> {
    serde_json::from_value(value.clone()).map_err(|error| format!("settings of fault {name}: {error}"))
}
