//! The workload's shape, as a team chooses it for a sweep: how many tenants, orders, receivers
//! and relay workers a seed may draw, which sender preset it runs against, the provider's key
//! lifetime, the lease, the receipt retention and which fault models may be drawn.
//!
//! A shape narrows what [`crate::config::SimConfig::draw_shaped`] draws; everything it leaves open
//! is drawn from the seed as before, so the empty shape draws exactly the configuration an
//! unshaped sweep draws. A shape is applied before any fault model's settings are drawn, so no
//! setting is computed from a value the shape then replaced. It is only an input to drawing: the
//! configuration it produces is what seed files record, so a replay needs no shape. Nothing here
//! reads anything but its arguments.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::limits;
use crate::sender::SenderPreset;

/// An inclusive range of counts, written `4..8` (or `4` for exactly four), on the command line
/// and in shape files alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountRange {
    /// The least count, inclusive.
    pub min: u32,
    /// The greatest count, inclusive.
    pub max: u32,
}

impl Serialize for CountRange {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CountRange {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<CountRange, D::Error> {
        /// The forms a shape file may use: `"4..8"`, `4`, or `{"min": 4, "max": 8}`.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Text(String),
            Count(u32),
            Bounds { min: u32, max: u32 },
        }
        let text = match Written::deserialize(deserializer)? {
            Written::Text(text) => text,
            Written::Count(count) => count.to_string(),
            Written::Bounds { min, max } => format!("{min}..{max}"),
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl CountRange {
    /// The range holding `count` alone.
    pub fn exactly(count: u32) -> CountRange {
        CountRange {
            min: count,
            max: count,
        }
    }
}

impl fmt::Display for CountRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.min == self.max {
            write!(f, "{}", self.min)
        } else {
            write!(f, "{}..{}", self.min, self.max)
        }
    }
}

impl FromStr for CountRange {
    type Err = String;

    fn from_str(text: &str) -> Result<CountRange, String> {
        let number = |part: &str| {
            part.trim().parse::<u32>().map_err(|_| {
                format!(
                    "{:?} is not a count; write N or MIN..MAX, as 4..8",
                    crate::files::clip(text, 40)
                )
            })
        };
        let range = match text.split_once("..") {
            Some((min, max)) => CountRange {
                min: number(min)?,
                max: number(max.trim_start_matches('='))?,
            },
            None => CountRange::exactly(number(text)?),
        };
        if range.min > range.max {
            return Err(format!(
                "{text:?} is an empty range; write N or MIN..MAX with MIN <= MAX"
            ));
        }
        Ok(range)
    }
}

/// What a sweep's configurations may be. Every field left `None` (or empty) is drawn from the
/// seed as usual.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkloadShape {
    /// Tenants, each with one sender account.
    pub tenants: Option<CountRange>,
    /// Business entities per tenant, the subjects its events are about (payments: orders
    /// awaiting payment). Shape files may still call it `orders`.
    #[serde(alias = "orders")]
    pub subjects: Option<CountRange>,
    /// Receiver processes.
    pub receivers: Option<CountRange>,
    /// Relay worker processes.
    pub relay_workers: Option<CountRange>,
    /// Update events per entity, on top of its story (payments: amount updates of an order, on
    /// top of a payment, a payment and a refund, a cancellation, or nothing): updates are what
    /// "the newest state wins" is tested with.
    pub updates: Option<CountRange>,
    /// The sender's retry contract.
    pub sender: Option<SenderPreset>,
    /// How long the provider keeps an idempotency key.
    pub key_lifetime_ms: Option<i64>,
    /// How long a relay worker's lease lasts.
    pub lease_ms: Option<i64>,
    /// How old a receipt must be before the purge job may delete it (when the receipt-purge
    /// fault model is on).
    pub receipt_retention_ms: Option<i64>,
    /// Only these fault models may be drawn (each is still on in about three seeds in four).
    pub faults: Option<Vec<String>>,
    /// These fault models are never drawn.
    pub without_faults: Vec<String>,
    /// Only these invariants judge the runs (see `list`); `None` is every one.
    pub invariants: Option<Vec<String>>,
    /// These invariants never judge the runs.
    pub without_invariants: Vec<String>,
    /// Never put values at the receiver's limits (`SimConfig::edge_values`: a name of 128
    /// characters, an event created at time 0, a body at the configured limit, and the domain's
    /// own, such as the payments amount of 10^12 cents), for a receiver whose own documented
    /// limits are stricter than the reference's.
    pub no_edge_values: bool,
}

/// The most amount updates per order: with an order's story (at most two events) that keeps a
/// workload within `EVENTS_MAX` and `STREAMS_MAX` at `ORDERS_MAX`
/// orders, whatever the fault models add.
pub const UPDATES_PER_ORDER_MAX: u32 = 3;

/// The shortest lease a shape may set: twice the longest relay call timeout a seed draws, which
/// is the contract the configuration holds the lease to.
pub const LEASE_MS_MIN: i64 = 60_000;

/// The longest lease a shape may set: a quarter of the longest duration, so that the relay's
/// waits after heal (a dead worker's lease among them) fit in half of it, which the liveness bound
/// grows to (`SimConfig::relay_waits_ms`).
pub const LEASE_MS_MAX: i64 = limits::DURATION_MS_MAX / 4;

impl WorkloadShape {
    /// True when the shape narrows nothing.
    pub fn is_open(&self) -> bool {
        *self == WorkloadShape::default()
    }

    /// Checks the shape against the limits every configuration is held to and against the fault
    /// models `known` (names). The error is one line naming the setting and what is allowed.
    pub fn check(&self, known: &[String]) -> Result<(), String> {
        let counts = [
            ("tenants", self.tenants, limits::TENANTS_MAX),
            ("subjects", self.subjects, limits::ORDERS_PER_TENANT_MAX),
            ("receivers", self.receivers, limits::PROCESSES_MAX),
            ("relay-workers", self.relay_workers, limits::PROCESSES_MAX),
        ];
        for (name, range, max) in counts {
            if let Some(range) = range
                && (range.min == 0 || range.min > range.max || range.max > max)
            {
                return Err(format!("{name} {range} is out of range; allowed 1..{max}"));
            }
        }
        if let Some(range) = self.updates
            && (range.min > range.max || range.max > UPDATES_PER_ORDER_MAX)
        {
            return Err(format!(
                "updates {range} is out of range; allowed 0..{UPDATES_PER_ORDER_MAX} (a bound on a workload's events)"
            ));
        }
        let largest = u64::from(self.tenants.map_or(3, |range| range.max))
            * u64::from(self.subjects.map_or(4, |range| range.max));
        if largest > limits::ORDERS_MAX {
            return Err(format!(
                "tenants x subjects may reach {largest} subjects; allowed at most {} (a bound on a run's memory and time)",
                limits::ORDERS_MAX
            ));
        }
        for (name, value, min, max) in [
            (
                "key-lifetime-ms",
                self.key_lifetime_ms,
                1,
                limits::DURATION_MS_MAX,
            ),
            ("lease-ms", self.lease_ms, LEASE_MS_MIN, LEASE_MS_MAX),
            (
                "receipt-retention-ms",
                self.receipt_retention_ms,
                0,
                limits::DURATION_MS_MAX,
            ),
        ] {
            if let Some(value) = value
                && !(min..=max).contains(&value)
            {
                return Err(format!("{name} {value} is out of range; allowed {min}..={max}"));
            }
        }
        let chosen = self.faults.iter().flatten().chain(&self.without_faults);
        for name in chosen {
            if !known.iter().any(|known| known == name) {
                return Err(format!(
                    "no fault model is called {:?}; `list` names every fault model",
                    crate::files::clip(name, 80)
                ));
            }
        }
        Ok(())
    }

    /// Whether fault model `name` may be drawn at all.
    pub fn allows_fault(&self, name: &str) -> bool {
        self.faults
            .as_ref()
            .is_none_or(|allowed| allowed.iter().any(|allowed| allowed == name))
            && !self.without_faults.iter().any(|without| without == name)
    }

    /// The shape as command-line flags, so that a printed `replay --seed` command draws the same
    /// configuration. Empty for the open shape.
    pub fn as_flags(&self) -> String {
        let mut flags = String::new();
        let mut add = |flag: &str, value: String| flags.push_str(&format!(" --{flag} {value}"));
        if let Some(preset) = self.sender {
            add("sender", preset.name().to_owned());
        }
        for (flag, range) in [
            ("tenants", self.tenants),
            ("subjects", self.subjects),
            ("receivers", self.receivers),
            ("relay-workers", self.relay_workers),
            ("updates", self.updates),
        ] {
            if let Some(range) = range {
                add(flag, range.to_string());
            }
        }
        for (flag, value) in [
            ("key-lifetime-ms", self.key_lifetime_ms),
            ("lease-ms", self.lease_ms),
            ("receipt-retention-ms", self.receipt_retention_ms),
        ] {
            if let Some(value) = value {
                add(flag, value.to_string());
            }
        }
        if let Some(faults) = &self.faults {
            add("faults", faults.join(","));
        }
        if !self.without_faults.is_empty() {
            add("without-faults", self.without_faults.join(","));
        }
        if self.no_edge_values {
            flags.push_str(" --no-edge-values");
        }
        flags
    }
}

/// What a seed's configuration says about the workload a domain draws: its size and the shares
/// of its stories, in words every domain can read its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkloadSettings {
    /// Tenants, each with one sender account.
    pub tenants: u32,
    /// Business entities per tenant (payments: orders).
    pub subjects_per_tenant: u32,
    /// Events are created at times in `0..emit_window_ms`.
    pub emit_window_ms: i64,
    /// Share of entities whose story reaches its usual end (payments: orders paid).
    pub completed_subjects: crate::rng::Ratio,
    /// When set, each entity gets this many extra updates, `(min, max)` (payments: amount
    /// updates), drawn from a stream of their own.
    pub updates_per_subject: Option<(u32, u32)>,
    /// Share of entities whose story races with itself.
    pub racing_subjects: crate::rng::Ratio,
    /// Put values at the receiver's limits, each just inside.
    pub edge_values: bool,
}

/// Which invariants judge a run: every one, or only some, less some.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InvariantChoice {
    /// Only these, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only: Option<std::collections::BTreeSet<String>>,
    /// Never these.
    #[serde(default, skip_serializing_if = "std::collections::BTreeSet::is_empty")]
    pub without: std::collections::BTreeSet<String>,
}

impl InvariantChoice {
    /// True when every invariant judges.
    pub fn is_every(&self) -> bool {
        self.only.is_none() && self.without.is_empty()
    }

    /// Whether the invariant called `name` judges.
    pub fn judges(&self, name: &str) -> bool {
        self.only.as_ref().is_none_or(|only| only.contains(name)) && !self.without.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_read_as_written_and_refuse_empty_ones() {
        assert_eq!("4..8".parse(), Ok(CountRange { min: 4, max: 8 }));
        assert_eq!("4..=8".parse(), Ok(CountRange { min: 4, max: 8 }));
        assert_eq!("3".parse(), Ok(CountRange::exactly(3)));
        assert!("8..4".parse::<CountRange>().is_err());
        assert_eq!("0..2".parse(), Ok(CountRange { min: 0, max: 2 }));
        assert!("x".parse::<CountRange>().is_err());
        assert_eq!(CountRange { min: 4, max: 8 }.to_string(), "4..8");
    }

    #[test]
    fn a_shape_is_checked_against_the_limits_and_the_known_models() {
        let known = vec!["crash".to_owned(), "lost-ack".to_owned()];
        let shape = WorkloadShape {
            tenants: Some(CountRange { min: 4, max: 8 }),
            subjects: Some(CountRange { min: 5, max: 8 }),
            faults: Some(vec!["crash".to_owned()]),
            ..WorkloadShape::default()
        };
        assert_eq!(shape.check(&known), Ok(()));
        assert!(shape.allows_fault("crash") && !shape.allows_fault("lost-ack"));
        let too_many = WorkloadShape {
            subjects: Some(CountRange { min: 5, max: 9 }),
            ..shape.clone()
        };
        assert!(too_many.check(&known).unwrap_err().contains("72 subjects"));
        let unknown = WorkloadShape {
            without_faults: vec!["crsh".to_owned()],
            ..WorkloadShape::default()
        };
        assert!(unknown.check(&known).unwrap_err().contains("\"crsh\""));
        let short_lease = WorkloadShape {
            lease_ms: Some(1_000),
            ..WorkloadShape::default()
        };
        assert!(
            short_lease
                .check(&known)
                .unwrap_err()
                .starts_with("lease-ms 1000")
        );
        // A lease longer than a quarter of the longest duration would leave the relay's waits
        // after heal more than the liveness bound can grow to.
        let long_lease = WorkloadShape {
            lease_ms: Some(LEASE_MS_MAX + 1),
            ..WorkloadShape::default()
        };
        assert!(
            long_lease
                .check(&known)
                .unwrap_err()
                .contains(&format!("allowed {LEASE_MS_MIN}..={LEASE_MS_MAX}"))
        );
        for seed in 0..20 {
            let longest = WorkloadShape {
                lease_ms: Some(LEASE_MS_MAX),
                ..WorkloadShape::default()
            };
            longest.check(&known).unwrap();
            crate::config::SimConfig::draw_shaped(seed, crate::db::Backend::Memdb, &longest)
                .validate()
                .unwrap();
        }
    }

    #[test]
    fn flags_name_every_narrowed_setting() {
        let shape = WorkloadShape {
            sender: Some(SenderPreset::GitHub),
            tenants: Some(CountRange { min: 4, max: 8 }),
            without_faults: vec!["crash".to_owned(), "lost-ack".to_owned()],
            ..WorkloadShape::default()
        };
        assert_eq!(
            shape.as_flags(),
            " --sender github --tenants 4..8 --without-faults crash,lost-ack"
        );
        assert_eq!(WorkloadShape::default().as_flags(), "");
    }
}
