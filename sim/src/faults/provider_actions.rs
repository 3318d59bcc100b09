//! What a fault model makes the provider do with one request, and which model made it.
//!
//! A model answers [`super::FaultModel::provider_faults`] with a [`ProviderFaults`]: conditions
//! of the provider's contract the provider model knows how to keep (a failure before acting, a
//! cached error, a lock after acting, a lenient replay, a double execution, a refusal for good),
//! a delay, and, open to any model, an [`ProviderAnswer`] of its own: the status a real provider
//! answers (a 429 with a `Retry-After`, a 500 after acting, a 400), whether it acted first, and
//! nothing the simulator needs to know by name. Every model is asked; their answers merge, and
//! each part is credited to the model that decided it ([`ProviderPart`]), so coverage counts a
//! team's model under its own name and a schedule writes the name beside what the model did.
//!
//! This module holds the value, its merge and its schedule text; it decides nothing and calls no
//! model.

use std::collections::BTreeMap;

use commitgap::provider::{CallError, ProviderReply};

use super::{ActiveFault, ProviderRequest};

/// How the provider treats one request, merged over every fault model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderFaults {
    /// See [`crate::provider::Conditions`].
    pub conditions: crate::provider::Conditions,
    /// Process the request this long before acting, past the caller's timeout.
    pub act_after_ms: Option<i64>,
    /// Answer this instead of the provider's own reply.
    pub answer: Option<ProviderAnswer>,
    /// Which fault model decided each part. The simulator fills it in as it merges the models'
    /// answers (a model leaves it empty); a schedule writes it, so a replay credits the same
    /// model.
    pub credit: BTreeMap<ProviderPart, String>,
}

/// An answer a fault model makes the provider give, as a real provider gives it: a status,
/// the `Retry-After` it carries, and whether the provider performed the request first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderAnswer {
    /// The HTTP status. 409 is a conflict and 429 a rate limit; another 4xx is a refusal for
    /// good; a 5xx (or anything else) is a failure the caller sees as the provider unavailable.
    /// A 2xx is the provider's own reply: it acts as usual.
    pub status: u16,
    /// The `Retry-After` the answer carries, in milliseconds (429s and 503s carry one).
    pub retry_after_ms: Option<i64>,
    /// Whether the provider performed the request (its effect, and its key stored) before
    /// answering, as a provider that fails after committing does.
    pub acted: bool,
}

impl ProviderAnswer {
    /// A 429 that performed nothing, with `retry_after_ms` if the provider says when to return.
    pub fn rate_limited(retry_after_ms: Option<i64>) -> ProviderAnswer {
        ProviderAnswer {
            status: 429,
            retry_after_ms,
            acted: false,
        }
    }

    /// What the caller receives for this answer.
    pub fn reply(&self) -> Result<ProviderReply, CallError> {
        match self.status {
            409 => Ok(ProviderReply::Conflict),
            429 => Ok(ProviderReply::RateLimited {
                retry_after_ms: self.retry_after_ms,
            }),
            status @ 400..=499 => Ok(ProviderReply::Rejected {
                status,
                reason: format!("the provider answered {status}"),
            }),
            status => Err(CallError::Unavailable(format!("the provider answered {status}"))),
        }
    }

    /// Whether the provider answers as usual (a 2xx): the answer changes nothing.
    pub fn is_ordinary(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// `429/30000`, `500/acted`: the answer in a schedule's provider value.
    fn encode(&self) -> String {
        let mut text = self.status.to_string();
        if let Some(ms) = self.retry_after_ms {
            text.push_str(&format!("/{ms}"));
        }
        if self.acted {
            text.push_str("/acted");
        }
        text
    }

    fn decode(value: &str) -> Result<ProviderAnswer, String> {
        let mut parts = value.split('/');
        let status = parts
            .next()
            .and_then(|status| status.parse::<u16>().ok())
            .filter(|status| (100..=599).contains(status))
            .ok_or_else(|| format!("answer {value:?}: the status is not one from 100 to 599"))?;
        let mut answer = ProviderAnswer {
            status,
            retry_after_ms: None,
            acted: false,
        };
        for part in parts {
            match part {
                "acted" => answer.acted = true,
                ms => {
                    let ms = ms.parse::<i64>().ok().filter(|ms| *ms >= 0);
                    answer.retry_after_ms = Some(ms.ok_or_else(|| {
                        format!("answer {value:?}: {part:?} is neither `acted` nor milliseconds")
                    })?);
                }
            }
        }
        Ok(answer)
    }
}

/// One part of how the provider treats a request, as credit names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProviderPart {
    /// A failure before acting.
    Fail,
    /// A failure cached under the key.
    Sticky,
    /// A reused key with another payload answered with the stored result.
    Replay,
    /// A request executed while another with its key was in progress.
    Double,
    /// A refusal for good.
    Refuse,
    /// The key held after acting.
    Lock,
    /// Acting past the caller's timeout.
    Slow,
    /// An answer of a model's own.
    Answer,
}

impl ProviderPart {
    /// The part's word in a schedule's provider value.
    pub fn name(self) -> &'static str {
        match self {
            ProviderPart::Fail => "fail",
            ProviderPart::Sticky => "sticky",
            ProviderPart::Replay => "replay",
            ProviderPart::Double => "double",
            ProviderPart::Refuse => "refuse",
            ProviderPart::Lock => "lock",
            ProviderPart::Slow => "slow",
            ProviderPart::Answer => "answer",
        }
    }

    const ALL: [ProviderPart; 8] = [
        ProviderPart::Fail,
        ProviderPart::Sticky,
        ProviderPart::Replay,
        ProviderPart::Double,
        ProviderPart::Refuse,
        ProviderPart::Lock,
        ProviderPart::Slow,
        ProviderPart::Answer,
    ];

    /// The built-in model a schedule written before credit was recorded meant: the one that was
    /// then the only one to decide this part. A team's model never could, so none is missed.
    fn legacy_model(self) -> &'static str {
        match self {
            ProviderPart::Fail => super::provider_failure::KIND.name,
            ProviderPart::Sticky => super::sticky_error::KIND.name,
            ProviderPart::Replay => super::payload_mismatch::KIND.name,
            ProviderPart::Double => super::provider_double_execute::KIND.name,
            ProviderPart::Refuse => super::provider_refusal::KIND.name,
            ProviderPart::Lock => super::provider_conflict::KIND.name,
            ProviderPart::Slow => super::provider_slow::KIND.name,
            // Answers came with credit from the first.
            ProviderPart::Answer => "",
        }
    }
}

impl ProviderFaults {
    /// The parts this value sets, each once.
    pub fn parts(&self) -> Vec<ProviderPart> {
        let c = &self.conditions;
        ProviderPart::ALL
            .into_iter()
            .filter(|part| match part {
                ProviderPart::Fail => c.fail_before_acting,
                ProviderPart::Sticky => c.sticky_errors,
                ProviderPart::Replay => c.replay_on_mismatch,
                ProviderPart::Double => c.double_execute,
                ProviderPart::Refuse => c.refuse,
                ProviderPart::Lock => c.lock_after_ms > 0,
                ProviderPart::Slow => self.act_after_ms.is_some(),
                ProviderPart::Answer => self.answer.is_some(),
            })
            .collect()
    }

    /// The model credited with `part`, if one decided it.
    pub fn credited(&self, part: ProviderPart) -> Option<&str> {
        self.credit.get(&part).map(String::as_str)
    }

    /// Writes the value as a schedule value: comma-separated `fail`, `sticky`, `replay`,
    /// `double`, `refuse`, `lock=MS`, `slow=MS`, `answer=STATUS[/RETRY_AFTER_MS][/acted]`, each
    /// followed by `@MODEL`, the model credited with it.
    pub fn encode(&self) -> String {
        let c = &self.conditions;
        self.parts()
            .into_iter()
            .map(|part| {
                let mut flag = part.name().to_owned();
                match part {
                    ProviderPart::Lock => flag.push_str(&format!("={}", c.lock_after_ms)),
                    ProviderPart::Slow => flag.push_str(&format!("={}", self.act_after_ms.unwrap_or(0))),
                    ProviderPart::Answer => {
                        let answer = self.answer.as_ref().map(ProviderAnswer::encode);
                        flag.push_str(&format!("={}", answer.unwrap_or_default()));
                    }
                    _ => {}
                }
                if let Some(model) = self.credited(part) {
                    flag.push_str(&format!("@{model}"));
                }
                flag
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Reads a value written by [`ProviderFaults::encode`]. A flag without `@MODEL` (written
    /// before credit was recorded) credits the built-in model that alone decided it then. The
    /// error names the flag it could not read.
    pub fn decode(value: &str) -> Result<ProviderFaults, String> {
        let mut faults = ProviderFaults::default();
        let milliseconds = |flag: &str, ms: &str| {
            ms.parse::<i64>()
                .map_err(|_| format!("{flag:?}: {ms:?} is not a whole number of milliseconds"))
        };
        for flag in value.split(',').map(str::trim).filter(|flag| !flag.is_empty()) {
            let (setting, model) = match flag.split_once('@') {
                Some((setting, model)) if !model.is_empty() => (setting, Some(model)),
                Some(_) => return Err(format!("{flag:?}: no model after @")),
                None => (flag, None),
            };
            let part = match setting.split_once('=') {
                Some(("lock", ms)) => {
                    faults.conditions.lock_after_ms = milliseconds(flag, ms)?;
                    ProviderPart::Lock
                }
                Some(("slow", ms)) => {
                    faults.act_after_ms = Some(milliseconds(flag, ms)?);
                    ProviderPart::Slow
                }
                Some(("answer", answer)) => {
                    faults.answer = Some(ProviderAnswer::decode(answer)?);
                    ProviderPart::Answer
                }
                _ => match setting {
                    "fail" => {
                        faults.conditions.fail_before_acting = true;
                        ProviderPart::Fail
                    }
                    "sticky" => {
                        faults.conditions.sticky_errors = true;
                        ProviderPart::Sticky
                    }
                    "replay" => {
                        faults.conditions.replay_on_mismatch = true;
                        ProviderPart::Replay
                    }
                    "double" => {
                        faults.conditions.double_execute = true;
                        ProviderPart::Double
                    }
                    "refuse" => {
                        faults.conditions.refuse = true;
                        ProviderPart::Refuse
                    }
                    _ => {
                        return Err(format!(
                            "{flag:?} is not one of fail, sticky, replay, double, refuse, lock=MS, slow=MS, answer=STATUS, each with @MODEL"
                        ));
                    }
                },
            };
            let model = match model {
                Some(model) => model,
                None if part == ProviderPart::Answer => {
                    return Err(format!("{flag:?}: an answer names its model (@MODEL)"));
                }
                None => part.legacy_model(),
            };
            faults.credit.insert(part, model.to_owned());
        }
        Ok(faults)
    }

    /// This value with `other`'s parts added, `other` decided by the model `name`: a part
    /// already decided keeps its model, except a longer lock or delay, which wins.
    fn merge(mut self, other: ProviderFaults, name: &str) -> ProviderFaults {
        for part in other.parts() {
            let (taken, wins) = match part {
                ProviderPart::Lock => (
                    self.conditions.lock_after_ms > 0,
                    other.conditions.lock_after_ms > self.conditions.lock_after_ms,
                ),
                ProviderPart::Slow => (
                    self.act_after_ms.is_some(),
                    other.act_after_ms > self.act_after_ms,
                ),
                _ => (self.parts().contains(&part), false),
            };
            if taken && !wins {
                continue;
            }
            let (mine, theirs) = (&mut self.conditions, &other.conditions);
            match part {
                ProviderPart::Fail => mine.fail_before_acting = true,
                ProviderPart::Sticky => mine.sticky_errors = true,
                ProviderPart::Replay => mine.replay_on_mismatch = true,
                ProviderPart::Double => mine.double_execute = true,
                ProviderPart::Refuse => mine.refuse = true,
                ProviderPart::Lock => mine.lock_after_ms = theirs.lock_after_ms,
                ProviderPart::Slow => self.act_after_ms = other.act_after_ms,
                ProviderPart::Answer => self.answer.clone_from(&other.answer),
            }
            self.credit.insert(part, name.to_owned());
        }
        self
    }
}

/// Asks every fault model how the provider treats `request` (every model is asked, so one
/// model's answer never changes how many draws another makes), and credits each part to the
/// first model that decided it (a longer lock or delay to the model that asked for it).
pub fn provider_faults(faults: &mut [ActiveFault], now_ms: i64, request: &ProviderRequest) -> ProviderFaults {
    let mut merged = ProviderFaults::default();
    for fault in faults.iter_mut() {
        let answer = fault.provider_faults(now_ms, request);
        merged = merged.merge(answer, fault.name());
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_reads_back_with_its_model_and_old_values_credit_the_built_in() {
        let value = "fail@provider-failure,lock=3000@provider-conflict,slow=45000@provider-slow,answer=429/30000@rate-limit";
        let faults = ProviderFaults::decode(value).unwrap();
        assert_eq!(faults.encode(), value);
        assert_eq!(faults.credited(ProviderPart::Answer), Some("rate-limit"));
        assert_eq!(
            faults.answer.as_ref().map(ProviderAnswer::reply),
            Some(Ok(ProviderReply::RateLimited {
                retry_after_ms: Some(30_000)
            }))
        );
        let old = ProviderFaults::decode("sticky,fail").unwrap();
        assert_eq!(
            old.credited(ProviderPart::Sticky),
            Some(super::super::sticky_error::KIND.name)
        );
        assert_eq!(
            old.credited(ProviderPart::Fail),
            Some(super::super::provider_failure::KIND.name)
        );
        for bad in [
            "answer=429",
            "answer=700@x",
            "answer=500/soon@x",
            "fail@",
            "teleport",
        ] {
            assert!(ProviderFaults::decode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn answers_read_as_a_real_provider_s() {
        let answer = |status, acted| ProviderAnswer {
            status,
            retry_after_ms: None,
            acted,
        };
        assert_eq!(answer(409, false).reply(), Ok(ProviderReply::Conflict));
        assert!(matches!(
            answer(400, false).reply(),
            Ok(ProviderReply::Rejected { status: 400, .. })
        ));
        assert!(matches!(
            answer(500, true).reply(),
            Err(CallError::Unavailable(_))
        ));
        assert!(answer(201, false).is_ordinary() && !answer(429, false).is_ordinary());
        assert_eq!(
            ProviderAnswer::decode("500/acted"),
            Ok(answer(500, true)),
            "a 500 after acting"
        );
    }

    #[test]
    fn the_first_model_to_decide_a_part_gets_the_credit_and_a_longer_wait_wins() {
        let lock = |ms| ProviderFaults {
            conditions: crate::provider::Conditions {
                lock_after_ms: ms,
                ..Default::default()
            },
            ..Default::default()
        };
        let merged = ProviderFaults::default()
            .merge(lock(1_000), "first")
            .merge(lock(500), "second");
        assert_eq!(
            (
                merged.conditions.lock_after_ms,
                merged.credited(ProviderPart::Lock)
            ),
            (1_000, Some("first"))
        );
        let merged = merged.merge(lock(9_000), "third");
        assert_eq!(
            (
                merged.conditions.lock_after_ms,
                merged.credited(ProviderPart::Lock)
            ),
            (9_000, Some("third"))
        );
    }
}
