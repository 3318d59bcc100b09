//! Provider rate limit: bursts in which the provider answers 429 Too Many Requests, with a
//! `Retry-After`, before looking at the request.
//!
//! Every large API limits its callers (Stripe's default is 100 requests a second; Shopify's
//! leaky bucket, GitHub's secondary limits), and a backlog drained after an incident meets the
//! limit first. A 429 performs nothing: the request is as good as new, and a relay that treats it
//! as a failure spends its attempts on a provider that only asked it to wait, and may give an
//! obligation up for good. In a burst some or all requests are limited, each answered with the
//! `Retry-After` the seed drew (or none, as some APIs send none). One burst always meets the
//! drain after the incident, and in half the seeds a short one comes while events are delivered.
//! A limit is the provider's, not the run's: a burst that has begun when the faults heal goes on
//! to its end (up to ten minutes), as a real limit would, through the operator's requeue. The
//! model makes its answers with [`super::ProviderAnswer`] alone; nothing outside this file knows
//! it.

use serde::{Deserialize, Serialize};

use commitgap::provider::ProviderRequest;

use super::{
    Fault, FaultContext, FaultKind, FaultModel, ProviderAnswer, ProviderFaults, TimerAction, check_windows,
    draw_ratio,
};
use crate::limits::DURATION_MS_MAX;
use crate::rng::{Ratio, SimRng};

pub const KIND: FaultKind = FaultKind::of::<ProviderRateLimit>();

impl Fault for ProviderRateLimit {
    const NAME: &'static str = "provider-rate-limit";
    const DESCRIPTION: &'static str =
        "the provider answers 429 with a Retry-After in bursts, and a burst outlasts heal";
    const DETAILS: &'static str = "in half the seeds a burst of 1 min while events are delivered, and always one \
        of 5 or 10 min that begins in the last 2 min before heal and goes on after it, through the \
        operator's pass; in a burst two thirds or all of the sends get 429, with a Retry-After of 5 s, \
        30 s, 1 min or none";
    type Settings = Settings;

    fn draw(rng: &mut SimRng, context: &FaultContext) -> Settings {
        // The burst that matters most meets the drain after an incident: it begins in the fault
        // phase's last two minutes and outlasts heal and the operator's pass (a minute after
        // heal), so obligations given up before the pass meet the limit again when requeued. In
        // half the seeds a short one also falls while events are delivered, where the relay sends
        // most. Bursts are few and short: every 429 answers before the provider acts, so each
        // hides the slow calls and timeouts other models make, and costs the run a claim and a
        // call. Limits are short, as real ones are (per second or per minute quotas), and a
        // `Retry-After` is seconds.
        let mut bursts_ms: Vec<(i64, i64)> = Vec::new();
        if rng.chance(Ratio::new(1, 2)) {
            let start_ms = rng.between(0, context.emit_window_ms.min(context.fault_phase_ms));
            bursts_ms.push((start_ms, 60_000));
        }
        let start_ms = (context.fault_phase_ms - rng.between(0, 2 * 60_000)).max(0);
        bursts_ms.push((start_ms, *rng.pick(&[5 * 60_000, 10 * 60_000])));
        Settings {
            bursts_ms,
            limited: draw_ratio(rng, &[(2, 3), (1, 1), (1, 1)]),
            retry_after_ms: *rng.pick(&[None, Some(5_000), Some(30_000), Some(60_000)]),
        }
    }

    fn build(settings: Settings, rng: SimRng, _context: &FaultContext) -> Result<Box<dyn FaultModel>, String> {
        check_windows("bursts_ms", &settings.bursts_ms)?;
        if settings.limited.denominator == 0 || settings.limited.numerator > settings.limited.denominator {
            return Err("limited: a share, numerator at most denominator, denominator not 0".to_owned());
        }
        if let Some(retry_after_ms) = settings.retry_after_ms {
            crate::limits::check("retry_after_ms", retry_after_ms, 0, DURATION_MS_MAX)?;
        }
        Ok(Box::new(ProviderRateLimit {
            settings,
            rng,
            healed_at_ms: None,
        }))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Settings {
    /// `(start_ms, duration_ms)` windows in which the provider limits its callers.
    bursts_ms: Vec<(i64, i64)>,
    /// The share of requests in a burst that are answered 429.
    limited: Ratio,
    /// The `Retry-After` a 429 carries, in milliseconds; `None` sends none.
    retry_after_ms: Option<i64>,
}

struct ProviderRateLimit {
    settings: Settings,
    rng: SimRng,
    /// When the faults healed: bursts begun by then go on; none begins after.
    healed_at_ms: Option<i64>,
}

impl FaultModel for ProviderRateLimit {
    fn provider_faults(&mut self, now_ms: i64, _request: &ProviderRequest) -> ProviderFaults {
        let in_burst = self.settings.bursts_ms.iter().any(|&(start_ms, duration_ms)| {
            let begun = self.healed_at_ms.is_none_or(|healed_ms| start_ms <= healed_ms);
            begun && (start_ms..start_ms + duration_ms).contains(&now_ms)
        });
        // Drawn only in a burst, so a seed whose bursts never meet a request draws nothing.
        let limited = in_burst && self.rng.chance(self.settings.limited);
        ProviderFaults {
            answer: limited.then(|| ProviderAnswer::rate_limited(self.settings.retry_after_ms)),
            ..ProviderFaults::default()
        }
    }

    fn heal(&mut self, now_ms: i64) -> Vec<TimerAction> {
        self.healed_at_ms = Some(now_ms);
        Vec::new()
    }
}
