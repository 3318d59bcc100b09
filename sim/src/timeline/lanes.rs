//! The lanes of the timeline page: which lane a process id or a step's actor is drawn on, and
//! the order lanes appear in, top to bottom. Every incarnation of a process shares its lane, so
//! a restart is a mark on the lane rather than a new one.
//!
//! It only names lanes: it reads no trace line and draws nothing. An id it does not know gets a
//! lane of its own in the `other` group, never a panic.

use super::parse_digits;
use crate::trace::Actor;

/// Lane groups in the order they appear on the page, top to bottom.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum LaneGroup {
    Sender,
    Receiver,
    Relay,
    Provider,
    Purge,
    Operator,
    Faults,
    Other,
}

/// One lane: a process with all its incarnations.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Lane {
    group: LaneGroup,
    /// Orders `receiver-10` after `receiver-9`.
    number: u64,
    pub(super) name: String,
}

impl Lane {
    fn new(group: LaneGroup, number: u64, name: &str) -> Lane {
        Lane {
            group,
            number,
            name: name.to_owned(),
        }
    }

    pub(super) fn named(group: LaneGroup) -> Lane {
        let name = match group {
            LaneGroup::Sender => "sender",
            LaneGroup::Provider => "provider",
            LaneGroup::Purge => "purge",
            LaneGroup::Operator => "operator",
            LaneGroup::Faults => "faults",
            LaneGroup::Receiver | LaneGroup::Relay | LaneGroup::Other => "other",
        };
        Lane::new(group, 0, name)
    }

    /// What the lane is, for its hover text.
    pub(super) fn description(&self) -> &'static str {
        match self.group {
            LaneGroup::Sender => "the upstream webhook sender: emits events, delivers and retries them",
            LaneGroup::Receiver => "a webhook receiver process, all its incarnations",
            LaneGroup::Relay => "an outbox relay worker, all its incarnations",
            LaneGroup::Provider => "the downstream provider: what it did with each request",
            LaneGroup::Purge => "the receipt purge job and the timer that starts it",
            LaneGroup::Operator => "the operator after heal: requeues and redeliveries",
            LaneGroup::Faults => "fault model timers",
            LaneGroup::Other => "lines from an actor or in a shape this page does not know",
        }
    }
}

/// The process name of `id` without its `#incarnation`.
fn process_name(id: &str) -> &str {
    match id.rsplit_once('#') {
        Some((name, incarnation)) if parse_digits(incarnation).is_some() => name,
        _ => id,
    }
}

/// The incarnation number of a `name#incarnation` id.
pub(super) fn incarnation_of(id: &str) -> Option<u64> {
    let (_, incarnation) = id.rsplit_once('#')?;
    parse_digits(incarnation).and_then(|number| u64::try_from(number).ok())
}

/// The lane a step's actor belongs to; `None` for the world and an invariant, which are drawn
/// across every lane.
pub(super) fn lane_of_actor(actor: &Actor) -> Option<Lane> {
    match actor {
        Actor::Process(id) => lane_of(id),
        Actor::Sender => Some(Lane::named(LaneGroup::Sender)),
        Actor::Provider => Some(Lane::named(LaneGroup::Provider)),
        Actor::Operator => Some(Lane::named(LaneGroup::Operator)),
        Actor::Fault(name) => lane_of(&format!("fault:{name}")),
        Actor::World | Actor::Invariant => None,
    }
}

/// The lane a process id (or an actor's name) belongs to; `None` for `world` and `invariant`,
/// which are drawn across every lane.
pub(super) fn lane_of(actor: &str) -> Option<Lane> {
    let name = process_name(actor);
    let numbered = |prefix: &str| {
        name.strip_prefix(prefix)
            .and_then(parse_digits)
            .and_then(|number| u64::try_from(number).ok())
    };
    Some(match name {
        "world" | "invariant" => return None,
        "sender" => Lane::named(LaneGroup::Sender),
        "provider" => Lane::named(LaneGroup::Provider),
        "purge" | "fault:receipt-purge" => Lane::named(LaneGroup::Purge),
        "operator" => Lane::named(LaneGroup::Operator),
        _ if name.starts_with("fault:") => Lane::named(LaneGroup::Faults),
        _ => {
            if let Some(number) = numbered("receiver-") {
                Lane::new(LaneGroup::Receiver, number, name)
            } else if let Some(number) = numbered("relay-") {
                Lane::new(LaneGroup::Relay, number, name)
            } else {
                Lane::new(LaneGroup::Other, 0, name)
            }
        }
    })
}
