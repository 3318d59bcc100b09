//! Seeded randomness: one ChaCha8 stream per concern, all derived from the run's seed.
//!
//! Each concern (the configuration, the workload, the scheduler, each fault model) draws from its
//! own stream, named by a label, so that adding a fault model or an extra draw in one concern
//! does not shift the decisions of the others. Probabilities are integer ratios, never floats, so
//! a decision does not depend on floating-point rounding. This module must be the only source of
//! randomness in a run.

use rand::RngExt;
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::SeedableRng;
use serde::{Deserialize, Serialize};

/// A deterministic random stream.
#[derive(Debug, Clone)]
pub struct SimRng {
    inner: ChaCha8Rng,
}

impl SimRng {
    /// The stream named `label` of `seed`. Equal seeds and labels give equal streams everywhere.
    pub fn stream(seed: u64, label: &str) -> SimRng {
        let mut inner = ChaCha8Rng::seed_from_u64(seed);
        inner.set_stream(stream_id(label));
        SimRng { inner }
    }

    /// A uniform integer in `0..bound`. `bound` must be positive.
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "below(0) has no value to return");
        self.inner.random_range(0..bound)
    }

    /// A uniform integer in `low..=high`.
    pub fn between(&mut self, low: i64, high: i64) -> i64 {
        assert!(low <= high, "between({low}, {high}) is an empty range");
        self.inner.random_range(low..=high)
    }

    /// True with probability `ratio`.
    pub fn chance(&mut self, ratio: Ratio) -> bool {
        ratio.numerator > 0 && self.below(u64::from(ratio.denominator)) < u64::from(ratio.numerator)
    }

    /// One element of a non-empty slice, uniformly.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

/// FNV-1a of the label: a stable stream number that does not depend on registry order.
fn stream_id(label: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in label.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// A probability as `numerator / denominator`. Reading one from a seed file checks that it is
/// a probability, so a hand-edited zero denominator is an error message, never a division.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RatioFields")]
pub struct Ratio {
    /// Chances in favour, at most `denominator`.
    pub numerator: u32,
    /// Chances in all; never zero.
    pub denominator: u32,
}

/// A ratio as written, before it is checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RatioFields {
    numerator: u32,
    denominator: u32,
}

impl TryFrom<RatioFields> for Ratio {
    type Error = String;

    fn try_from(fields: RatioFields) -> Result<Ratio, String> {
        let RatioFields {
            numerator,
            denominator,
        } = fields;
        if denominator == 0 || numerator > denominator {
            return Err(format!(
                "{numerator}/{denominator} is not a probability; need 1 <= denominator and numerator <= denominator"
            ));
        }
        Ok(Ratio {
            numerator,
            denominator,
        })
    }
}

impl Ratio {
    /// The probability zero.
    pub const NEVER: Ratio = Ratio {
        numerator: 0,
        denominator: 1,
    };

    /// The ratio `numerator / denominator`; panics unless it is a probability.
    pub const fn new(numerator: u32, denominator: u32) -> Ratio {
        assert!(denominator > 0 && numerator <= denominator);
        Ratio {
            numerator,
            denominator,
        }
    }
}

impl std::fmt::Display for Ratio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.numerator, self.denominator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_independent() {
        let draws = |seed, label| {
            let mut rng = SimRng::stream(seed, label);
            (0..8).map(|_| rng.below(1_000_000)).collect::<Vec<_>>()
        };
        assert_eq!(draws(7, "scheduler"), draws(7, "scheduler"));
        assert_ne!(draws(7, "scheduler"), draws(7, "config"));
        assert_ne!(draws(7, "scheduler"), draws(8, "scheduler"));
    }

    #[test]
    fn ratios_read_from_files_are_probabilities() {
        let read = |text: &str| serde_json::from_str::<Ratio>(text);
        assert_eq!(
            read(r#"{"numerator": 1, "denominator": 4}"#).unwrap(),
            Ratio::new(1, 4)
        );
        for bad in [
            r#"{"numerator": 1, "denominator": 0}"#,
            r#"{"numerator": 5, "denominator": 4}"#,
            r#"{"numerator": -1, "denominator": 4}"#,
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn chance_respects_the_extremes() {
        let mut rng = SimRng::stream(1, "test");
        assert!((0..100).all(|_| !rng.chance(Ratio::NEVER)));
        assert!((0..100).all(|_| rng.chance(Ratio::new(3, 3))));
        let hits = (0..10_000).filter(|_| rng.chance(Ratio::new(1, 4))).count();
        assert!((2_000..3_000).contains(&hits), "{hits} hits of 1/4 in 10000");
    }
}
