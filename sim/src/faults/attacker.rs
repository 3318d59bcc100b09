//! Attacker and misbehaving sender: requests at a receiver's endpoint that must be refused.
//!
//! A webhook endpoint is a public URL. Anyone can post to it, and a sender can be buggy: the
//! article the reference system comes from puts signature checks and authorization before its
//! receiver and leaves them out. On a cadence during the fault phase this model sends one
//! hostile request, copied from a delivery the sender already made (what an attacker sees on the
//! wire, or what a buggy sender mangles):
//! - `forged-signature`: a signature made up without the secret;
//! - `tampered-body`: the genuine headers and signature with a body changed after signing;
//! - `stale-replay`: a genuine delivery captured long ago, replayed beyond the tolerance;
//! - `retired-secret`: signed with a secret the endpoint no longer holds;
//! - `cross-account`: validly signed for one account's endpoint, naming another account;
//! - `malformed-body`, `oversized-body`, `unknown-type`: validly signed, but not an event the
//!   receiver can accept (broken JSON, a body over the size limit, a type it does not know);
//! - `invalid-event`: validly signed JSON of a known type that breaks one of the receiver's rules
//!   for an event (an empty id or order, an id one character too long, a control character, a
//!   creation time before the epoch, an amount one cent over the limit), which a buggy sender
//!   could post and a receiver whose checks are off by one would take in;
//! - `reused-event-id`: validly signed and valid, but with the id of an event the receiver has
//!   already recorded and another body (its creation time moved by a millisecond), as a sender
//!   that reuses ids would post; the receiver must not apply it. Refusing it (422) and
//!   acknowledging it as a duplicate are both correct. It is sent only in seeds whose receipts
//!   are never purged and only for an event whose receipt is committed, since a receiver that
//!   holds no receipt for the id rightly takes the request as a new event.
//!
//! None of them may change state or get a success answer. Which attack and which delivery are
//! drawn here; the executor builds the request and records the pair as a schedule choice, so a
//! shrunk schedule can drop it. The model stops at heal.

use serde::{Deserialize, Serialize};

use super::{Fault, FaultContext, FaultKind, FaultModel, TimerAction, check_duration};
use crate::rng::SimRng;

pub const KIND: FaultKind = FaultKind::of::<Attacker>();

impl Fault for Attacker {
    const NAME: &'static str = "attacker";
    const DESCRIPTION: &'static str =
        "forged, tampered, replayed, cross-account and malformed requests at the endpoints";
    const DETAILS: &'static str =
        "every 30 s, 5 min or 30 min a hostile request copied from a real delivery: forged signature, body \
        tampered after signing, replay beyond the tolerance, a retired secret, an event naming another \
        account, malformed JSON, a body over the size limit, an event of a type the domain says it never \
        sends (not sent when it names none), a signed event the domain says breaks one validation rule \
        (payments: an empty id or order, an id one character too long, a control character, a creation \
        time before the epoch, an amount one cent over the maximum), and a signed, valid event reusing the \
        id of one the receiver already recorded with another body, which must change nothing (a 422 and a \
        2xx duplicate are both correct; sent only in seeds without receipt purges and only once that \
        receipt is committed, since a receiver holding no receipt for the id rightly takes it as new)";
    type Settings = Settings;

    fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
        draw(rng, context)
    }

    fn build(settings: Settings, rng: SimRng, context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
        build(settings, rng, context)
    }
}

/// What is wrong with one hostile request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Attack {
    /// A well-formed signature made with a guessed key.
    ForgedSignature,
    /// The genuine signature over a body that was changed after signing.
    TamperedBody,
    /// A correctly signed request whose timestamp is far outside the tolerance window.
    StaleReplay,
    /// A request signed with a secret that has been retired.
    RetiredSecret,
    /// A correctly signed body that names another account.
    CrossAccount,
    /// A correctly signed body cut in half, so it is not valid JSON.
    MalformedBody,
    /// A correctly signed body padded beyond the maximum body size.
    OversizedBody,
    /// A correctly signed event of a type the receiver does not handle.
    UnknownType,
    /// A correctly signed event whose contents are invalid.
    InvalidEvent,
    /// A correctly signed event that reuses a delivered event's id with different contents.
    ReusedEventId,
}

impl Attack {
    /// Every kind of attack.
    pub const ALL: [Attack; 10] = [
        Attack::ForgedSignature,
        Attack::TamperedBody,
        Attack::StaleReplay,
        Attack::RetiredSecret,
        Attack::CrossAccount,
        Attack::MalformedBody,
        Attack::OversizedBody,
        Attack::UnknownType,
        Attack::InvalidEvent,
        Attack::ReusedEventId,
    ];

    /// The attacks of seed files written before `invalid-event` existed, which draw from these.
    const BEFORE_INVALID_EVENT: usize = 8;

    /// The attack's short name, as written in fault logs and seed files.
    pub fn name(self) -> &'static str {
        match self {
            Attack::ForgedSignature => "forged-signature",
            Attack::TamperedBody => "tampered-body",
            Attack::StaleReplay => "stale-replay",
            Attack::RetiredSecret => "retired-secret",
            Attack::CrossAccount => "cross-account",
            Attack::MalformedBody => "malformed-body",
            Attack::OversizedBody => "oversized-body",
            Attack::UnknownType => "unknown-type",
            Attack::InvalidEvent => "invalid-event",
            Attack::ReusedEventId => "reused-event-id",
        }
    }

    /// The attack with this short name, if any.
    pub fn from_name(name: &str) -> Option<Attack> {
        Attack::ALL.into_iter().find(|attack| attack.name() == name)
    }

    /// Whether the hostile request carries the genuine delivery's signature; every other attack
    /// signs anew or forges, so the genuine one need not be computed for it (a test checks that
    /// their requests do not depend on it).
    pub fn keeps_genuine_signature(self) -> bool {
        self == Attack::TamperedBody
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    /// Time between two hostile requests.
    cadence_ms: i64,
    /// Whether `invalid-event` is among the attacks; false in seed files written before it
    /// existed, so that they draw the attacks they drew then.
    #[serde(default)]
    invalid_events: bool,
    /// Whether `reused-event-id` is among the attacks; false in seed files written before it
    /// existed.
    #[serde(default)]
    reused_event_ids: bool,
}

struct Attacker {
    settings: Settings,
    rng: SimRng,
    healed: bool,
}

fn draw(rng: &mut SimRng, _context: &FaultContext) -> Settings {
    Settings {
        cadence_ms: *rng.pick(&[30_000, 300_000, 1_800_000]),
        invalid_events: true,
        reused_event_ids: true,
    }
}

fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
    check_duration("cadence_ms", settings.cadence_ms, 1)?;
    Ok(Box::new(Attacker {
        settings,
        rng,
        healed: false,
    }))
}

impl FaultModel for Attacker {
    fn start(&mut self, now_ms: i64) -> Vec<TimerAction> {
        vec![TimerAction::WakeAt {
            at_ms: now_ms + self.settings.cadence_ms,
        }]
    }

    fn on_timer(&mut self, now_ms: i64) -> Vec<TimerAction> {
        if self.healed {
            return Vec::new();
        }
        let attacks: Vec<Attack> = Attack::ALL
            .into_iter()
            .enumerate()
            .filter(|&(index, attack)| {
                index < Attack::BEFORE_INVALID_EVENT
                    || (attack == Attack::InvalidEvent && self.settings.invalid_events)
                    || (attack == Attack::ReusedEventId && self.settings.reused_event_ids)
            })
            .map(|(_, attack)| attack)
            .collect();
        let attack = *self.rng.pick(&attacks);
        let target = self.rng.below(u64::MAX);
        vec![
            TimerAction::Attack { attack, target },
            TimerAction::WakeAt {
                at_ms: now_ms + self.settings.cadence_ms,
            },
        ]
    }

    fn heal(&mut self, _now_ms: i64) -> Vec<TimerAction> {
        self.healed = true;
        Vec::new()
    }
}
