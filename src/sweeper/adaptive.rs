//! The adaptive DELETE pace: how many DELETEs a leader keeps in flight, from the API server's
//! answers, below the configured ceilings (`maxInFlight`, `rateLimit.qps`).
//!
//! The limit is Netflix's Gradient2 (the `tower-resilience-adaptive` crate's): each answer's
//! latency is compared with a slowly moving baseline; while answers come back about as fast as
//! the baseline and the leader uses at least half its limit, the limit grows by a queue allowance;
//! a rising latency shrinks it in proportion. A 429, a Retry-After, a transport failure or a
//! refusal (403 and the other 4xx but 404 and 409: `refusals`) halves it at once (and the
//! scope-wide Retry-After pause of `deletes` and the refusal episode still apply). In the spirit of
//! API Priority and Fairness, which sheds load by concurrency, podsweep backs off before the API
//! server has to say 429.
//!
//! # Guarantees
//! * The limit stays from 2 (1 with `maxInFlight=1`) to `maxInFlight`; after a Retry-After pause
//!   the scope resumes with one DELETE in flight regardless (`deletes`); with `rateLimit.adaptive=false` it is
//!   `maxInFlight` itself (the fixed pace).

use std::time::Duration;

use tower_resilience_adaptive::{ConcurrencyAlgorithm, Gradient2};

use crate::deleter::{Outcome, OutcomeClass};

/// The first limit of a leader's term: as many DELETEs in flight as the fixed pace had.
pub(super) const INITIAL_LIMIT: usize = 8;
/// A latest answer this many times slower than the baseline shrinks the limit.
pub(super) const RTT_TOLERANCE: f64 = 1.5;
/// The adaptive limit's floor (see [`Pace::new`]).
pub(super) const MIN_LIMIT: usize = 2;

pub(super) struct Pace {
    ceiling: usize,
    algo: Option<Gradient2>,
}

impl Pace {
    pub(super) fn new(adaptive: bool, ceiling: usize) -> Self {
        let ceiling = ceiling.max(1);
        let algo = adaptive.then(|| {
            Gradient2::builder()
                .initial_limit(INITIAL_LIMIT.min(ceiling))
                // At 1 the algorithm's queue allowance is 0 and the limit could never grow
                // again; the ramp after a Retry-After pause starts from one DELETE anyway.
                .min_limit(MIN_LIMIT.min(ceiling))
                .max_limit(ceiling)
                .rtt_tolerance(RTT_TOLERANCE)
                .build()
                .ok()
        });
        Pace {
            ceiling,
            algo: algo.flatten(),
        }
    }

    /// DELETEs in flight at most now.
    pub(super) fn limit(&self) -> usize {
        self.algo
            .as_ref()
            .map_or(self.ceiling, |a| a.limit().clamp(1, self.ceiling))
    }

    /// One DELETE was answered after `latency` with `in_flight` DELETEs in flight (itself
    /// included).
    pub(super) fn answered(&self, outcome: &Outcome, latency: Duration, in_flight: usize) {
        let Some(a) = &self.algo else {
            return;
        };
        match outcome.class {
            OutcomeClass::Throttled | OutcomeClass::Transport => a.record_failure(),
            OutcomeClass::ServerError if outcome.retry_after.is_some() => a.record_failure(),
            OutcomeClass::Accepted | OutcomeClass::AlreadyAbsent | OutcomeClass::Replaced => {
                a.record_success_with_load(latency, in_flight)
            }
            // A refusal says nothing about the load it met, but a burst of them is load all the
            // same: it counts as a throttle.
            _ if super::refusals::is_refusal(outcome) => a.record_failure(),
            // A 5xx without Retry-After, a client-side failure.
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(class: OutcomeClass, code: u16, retry_after: bool) -> Outcome {
        Outcome {
            class,
            code: Some(code),
            reason: String::new(),
            message: String::new(),
            retry_after: retry_after.then_some(Duration::from_secs(1)),
            flow: None,
        }
    }

    #[test]
    fn fast_answers_grow_the_limit_and_a_429_halves_it() {
        let p = Pace::new(true, 64);
        assert_eq!(p.limit(), INITIAL_LIMIT);
        for _ in 0..500 {
            let l = p.limit();
            p.answered(
                &answer(OutcomeClass::Accepted, 200, false),
                Duration::from_millis(5),
                l,
            );
        }
        let grown = p.limit();
        assert!(grown > INITIAL_LIMIT * 2, "{grown}");
        p.answered(
            &answer(OutcomeClass::Throttled, 429, true),
            Duration::from_millis(5),
            grown,
        );
        assert!(p.limit() <= grown / 2 + 1, "{} after {grown}", p.limit());
        // Latency ten times the baseline shrinks it further.
        let before = p.limit();
        for _ in 0..50 {
            let l = p.limit();
            p.answered(
                &answer(OutcomeClass::Accepted, 200, false),
                Duration::from_millis(200),
                l,
            );
        }
        assert!(p.limit() < before, "{} vs {before}", p.limit());
        assert!(p.limit() >= MIN_LIMIT);
        // It grows back from its floor.
        for _ in 0..20 {
            p.answered(
                &answer(OutcomeClass::Throttled, 429, true),
                Duration::from_millis(5),
                1,
            );
        }
        assert_eq!(p.limit(), MIN_LIMIT);
        for _ in 0..200 {
            let l = p.limit();
            p.answered(
                &answer(OutcomeClass::Accepted, 200, false),
                Duration::from_millis(5),
                l,
            );
        }
        assert!(p.limit() > MIN_LIMIT * 2, "{}", p.limit());
    }

    /// Issue 32: a refusal (403, 422) halves the limit as a 429 does; a 404 does not.
    #[test]
    fn refusals_halve_the_limit() {
        for refusal in [
            answer(OutcomeClass::Forbidden, 403, false),
            answer(OutcomeClass::Other, 422, false),
        ] {
            let p = Pace::new(true, 64);
            for _ in 0..500 {
                let l = p.limit();
                p.answered(
                    &answer(OutcomeClass::Accepted, 200, false),
                    Duration::from_millis(5),
                    l,
                );
            }
            let grown = p.limit();
            p.answered(
                &answer(OutcomeClass::AlreadyAbsent, 404, false),
                Duration::from_millis(5),
                grown,
            );
            assert!(p.limit() >= grown, "{} after a 404", p.limit());
            p.answered(&refusal, Duration::from_millis(5), grown);
            assert!(
                p.limit() <= grown / 2 + 1,
                "{} after {refusal:?} at {grown}",
                p.limit()
            );
        }
    }

    #[test]
    fn the_fixed_pace_is_the_ceiling() {
        let p = Pace::new(false, 8);
        p.answered(
            &answer(OutcomeClass::Throttled, 429, true),
            Duration::from_millis(5),
            8,
        );
        assert_eq!(p.limit(), 8);
        assert_eq!(Pace::new(true, 3).limit(), 3);
    }
}
