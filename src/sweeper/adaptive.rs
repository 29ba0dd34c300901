//! The adaptive DELETE pace: how many DELETEs a leader keeps in flight, from the API server's
//! answers, below the configured ceilings (`maxInFlight`, `rateLimit.qps`).
//!
//! The limit aims at the knee of the API server's curve (issue 35): the least concurrency that
//! holds the drain rate. Past the knee more DELETEs in flight add no rate, only a queue in the API
//! server that every other client waits behind. The signal is the latency, not errors: the
//! answers' round trip against its floor (the fastest round of this burst of work) says
//! how many of the leader's own DELETEs wait in the API server: with `L` in flight and a round
//! trip `R` over a floor `F`, about `L * (1 - F / R)` of them are queued, not served (TCP Vegas's
//! estimate). Once per round (about one limit's worth of accepted answers, their median round
//! trip) the limit grows by one while fewer than [`QUEUE_LOW`] wait, shrinks by one while more
//! than [`QUEUE_HIGH`] do, and holds in between. A burst starts at [`INITIAL_LIMIT`] and doubles
//! each round until the first queue forms (then it halves back to the last limit that formed
//! none). A 429, a Retry-After, a transport failure or a refusal (403 and the other 4xx but 404
//! and 409: `refusals`) halves it at once (and the scope-wide Retry-After pause of `deletes` and
//! the refusal episode still apply).
//!
//! Before issue 35 the limit was Netflix's Gradient2 (`tower-resilience-adaptive`), whose
//! baseline is the average latency itself: a queue that builds slowly raises the baseline with
//! it, so the limit kept growing to `maxInFlight` (64) and the drain cost a neighbour's p99 three
//! times what a plain client at 32 in flight cost (docs/performance.md). Vegas's own crate form
//! (the same crate's `Vegas`) steps on every answer and keeps its floor for ever; this one steps
//! once a round and measures the floor afresh for each burst.
//!
//! # Guarantees
//! * The limit stays from 2 (1 with `maxInFlight=1`) to `maxInFlight`; after a Retry-After pause
//!   the scope resumes with one DELETE in flight regardless (`deletes`); with
//!   `rateLimit.adaptive=false` it is `maxInFlight` itself (the fixed pace).
//! * Only accepted DELETEs (200) steer it: a 404 or a 409 wrote nothing and comes back faster, so
//!   it would lower the floor and starve the limit.
//! * Answers that met fewer than half the limit in flight (the backlog ran out, or
//!   `rateLimit.qps` holds the pace) neither grow nor shrink it.
//!
//! # Caveats
//! * The floor is the lowest median round trip of a round since the burst began (the first
//!   round, at [`INITIAL_LIMIT`], all but unloaded): [`BURST_GAP`] without any answer ends a
//!   burst. An API server that got slower in the middle of a long drain reads as a
//!   queue, and the limit shrinks towards its floor of 2 until the drain ends.

use std::time::Duration;

use tokio::time::Instant;

use crate::deleter::{Outcome, OutcomeClass};

/// The first limit of a burst of work; each round doubles it until a queue forms.
pub(super) const INITIAL_LIMIT: usize = 2;
/// The least adaptive limit (1 with `maxInFlight=1`).
pub(super) const MIN_LIMIT: usize = 2;
/// Fewer of the leader's DELETEs than this waiting in the API server: the limit grows.
pub(super) const QUEUE_LOW: f64 = 2.0;
/// More than this waiting: the limit shrinks.
pub(super) const QUEUE_HIGH: f64 = 4.0;
/// Without an answer for this long, the next one begins a new burst (limit and floor afresh).
pub(super) const BURST_GAP: Duration = Duration::from_secs(30);
/// A round is the limit's worth of accepted answers, at least this many ...
const ROUND_MIN: usize = 4;
/// ... and at most this many.
const ROUND_MAX: usize = 64;

pub(super) struct Pace {
    ceiling: usize,
    knee: Option<Knee>,
}

/// The latency-steered limit of one scope.
struct Knee {
    min: usize,
    max: usize,
    limit: usize,
    /// Doubling each round until the first queue.
    starting: bool,
    /// The lowest median round trip of a round of this burst.
    floor: Option<Duration>,
    /// The accepted answers' round trips of this round.
    round: Vec<Duration>,
    last_answer: Option<Instant>,
}

impl Knee {
    fn new(max: usize) -> Self {
        let min = MIN_LIMIT.min(max);
        Knee {
            min,
            max,
            limit: INITIAL_LIMIT.clamp(min, max),
            starting: true,
            floor: None,
            round: Vec::with_capacity(ROUND_MIN),
            last_answer: None,
        }
    }

    /// A new burst of work: the limit starts again from [`INITIAL_LIMIT`], the floor is measured
    /// again.
    fn restart(&mut self) {
        *self = Knee::new(self.max);
    }

    fn back_off(&mut self) {
        self.limit = (self.limit / 2).max(self.min);
        self.starting = false;
        self.round.clear();
    }

    fn accepted(&mut self, rtt: Duration, in_flight: usize) {
        let rtt = rtt.max(Duration::from_micros(1));
        // The backlog ran out or the rate ceiling holds the pace: the latency says nothing about
        // this limit. (A completion counts itself as in flight.)
        if in_flight.saturating_mul(2) < self.limit {
            return;
        }
        self.round.push(rtt);
        if self.round.len() < self.limit.clamp(ROUND_MIN, ROUND_MAX) {
            return;
        }
        self.round.sort_unstable();
        let median = self.round[self.round.len() / 2];
        self.round.clear();
        // Medians against medians: the spread of single answers is no queue.
        let floor = self.floor.map_or(median, |f| f.min(median));
        self.floor = Some(floor);
        let queued = self.limit as f64 * (1.0 - floor.as_secs_f64() / median.as_secs_f64());
        self.limit = if queued < QUEUE_LOW {
            if self.starting {
                self.limit.saturating_mul(2)
            } else {
                self.limit + 1
            }
        } else if queued > QUEUE_HIGH {
            if std::mem::take(&mut self.starting) {
                // The last doubling formed the queue: back to the limit before it.
                self.limit / 2
            } else {
                self.limit - 1
            }
        } else {
            self.starting = false;
            self.limit
        }
        .clamp(self.min, self.max);
    }
}

impl Pace {
    pub(super) fn new(adaptive: bool, ceiling: usize) -> Self {
        let ceiling = ceiling.max(1);
        Pace {
            ceiling,
            knee: adaptive.then(|| Knee::new(ceiling)),
        }
    }

    /// DELETEs in flight at most now.
    pub(super) fn limit(&self) -> usize {
        self.knee
            .as_ref()
            .map_or(self.ceiling, |k| k.limit.clamp(1, self.ceiling))
    }

    /// One DELETE was answered at `now` after `latency`, with `in_flight` DELETEs in flight
    /// (itself included).
    pub(super) fn answered(
        &mut self,
        outcome: &Outcome,
        latency: Duration,
        in_flight: usize,
        now: Instant,
    ) {
        let Some(k) = &mut self.knee else {
            return;
        };
        if k.last_answer
            .is_some_and(|t| now.saturating_duration_since(t) >= BURST_GAP)
        {
            k.restart();
        }
        k.last_answer = Some(now);
        match outcome.class {
            OutcomeClass::Throttled | OutcomeClass::Transport => k.back_off(),
            OutcomeClass::ServerError if outcome.retry_after.is_some() => k.back_off(),
            OutcomeClass::Accepted => k.accepted(latency, in_flight),
            // Nothing was written: a faster answer that says nothing about a DELETE's cost.
            OutcomeClass::AlreadyAbsent | OutcomeClass::Replaced => {}
            // A refusal says nothing about the load it met, but a burst of them is load all the
            // same: it counts as a throttle.
            _ if super::refusals::is_refusal(outcome) => k.back_off(),
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

    fn ok() -> Outcome {
        answer(OutcomeClass::Accepted, 200, false)
    }

    /// Feeds `n` answers of `latency`, each with the limit in flight, one `latency / limit` apart.
    fn feed(p: &mut Pace, now: &mut Instant, n: usize, outcome: &Outcome, latency: Duration) {
        for _ in 0..n {
            let l = p.limit();
            *now += latency / l as u32;
            p.answered(outcome, latency, l, *now);
        }
    }

    #[test]
    fn fast_answers_grow_the_limit_and_a_429_halves_it() {
        let mut p = Pace::new(true, 64);
        let mut now = Instant::now();
        assert_eq!(p.limit(), INITIAL_LIMIT);
        feed(&mut p, &mut now, 500, &ok(), Duration::from_millis(5));
        let grown = p.limit();
        assert!(grown > 16, "{grown}");
        let throttled = answer(OutcomeClass::Throttled, 429, true);
        p.answered(&throttled, Duration::from_millis(5), grown, now);
        assert!(p.limit() <= grown / 2 + 1, "{} after {grown}", p.limit());
        // Latency forty times the floor shrinks it further.
        let before = p.limit();
        feed(&mut p, &mut now, 50, &ok(), Duration::from_millis(200));
        assert!(p.limit() < before, "{} vs {before}", p.limit());
        assert!(p.limit() >= MIN_LIMIT);
        // It grows back from its floor.
        for _ in 0..20 {
            p.answered(&throttled, Duration::from_millis(5), 1, now);
        }
        assert_eq!(p.limit(), MIN_LIMIT);
        feed(&mut p, &mut now, 200, &ok(), Duration::from_millis(5));
        assert!(p.limit() > MIN_LIMIT * 2, "{}", p.limit());
    }

    /// Issue 32: a refusal (403, 422) halves the limit as a 429 does; a 404 does not.
    #[test]
    fn refusals_halve_the_limit() {
        for refusal in [
            answer(OutcomeClass::Forbidden, 403, false),
            answer(OutcomeClass::Other, 422, false),
        ] {
            let mut p = Pace::new(true, 64);
            let mut now = Instant::now();
            feed(&mut p, &mut now, 500, &ok(), Duration::from_millis(5));
            let grown = p.limit();
            let absent = answer(OutcomeClass::AlreadyAbsent, 404, false);
            p.answered(&absent, Duration::from_millis(5), grown, now);
            assert!(p.limit() >= grown, "{} after a 404", p.limit());
            p.answered(&refusal, Duration::from_millis(5), grown, now);
            assert!(
                p.limit() <= grown / 2 + 1,
                "{} after {refusal:?} at {grown}",
                p.limit()
            );
        }
    }

    #[test]
    fn the_fixed_pace_is_the_ceiling() {
        let mut p = Pace::new(false, 8);
        let throttled = answer(OutcomeClass::Throttled, 429, true);
        p.answered(&throttled, Duration::from_millis(5), 8, Instant::now());
        assert_eq!(p.limit(), 8);
        assert_eq!(Pace::new(true, 3).limit(), 2);
        assert_eq!(Pace::new(true, 1).limit(), 1);
    }

    /// The round trip of `l` DELETEs in flight on a server that serves `c` at a time in
    /// `service` each, with a deterministic jitter of +-10 %.
    fn saturated(c: usize, service: Duration, l: usize, seed: &mut u64) -> Duration {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let jitter = 0.9 + 0.2 * ((*seed >> 33) as f64 / (1u64 << 31) as f64);
        service.mul_f64(jitter * (l as f64 / c as f64).max(1.0))
    }

    /// `n` accepted answers from a server saturated as [`saturated`] says, each with the limit
    /// in flight; the limit before each answer.
    fn drive(
        p: &mut Pace,
        now: &mut Instant,
        seed: &mut u64,
        n: usize,
        c: usize,
        service: Duration,
    ) -> Vec<usize> {
        (0..n)
            .map(|_| {
                let l = p.limit();
                let rtt = saturated(c, service, l, seed);
                *now += rtt / l as u32;
                p.answered(&ok(), rtt, l, *now);
                l
            })
            .collect()
    }

    /// A saturated API server (issue 35): it serves `C` DELETEs at a time in `S` each, so with
    /// `L` in flight an answer takes `S * max(1, L / C)`, and more than `C` in flight only queues.
    /// The rate is held from `C` on; the limit must settle there, not queue everything it may.
    /// Gradient2 (before issue 35) ended at 64 here.
    #[test]
    fn the_limit_settles_at_the_knee_of_a_saturated_server() {
        for c in [1, 4, 16] {
            let service = Duration::from_millis(10);
            let mut p = Pace::new(true, 64);
            let mut now = Instant::now();
            let mut seed = 7;
            let seen = drive(&mut p, &mut now, &mut seed, 3000, c, service).split_off(2000);
            let (lo, hi) = (seen.iter().min().copied(), seen.iter().max().copied());
            // The rate is held (at least the knee), with at most QUEUE_HIGH + 1 queued.
            assert!(
                lo >= Some(c.max(MIN_LIMIT)) && hi <= Some(c + QUEUE_HIGH as usize + 1),
                "limits over the last 1,000 answers from {lo:?} to {hi:?}, knee at {c}"
            );
        }
    }

    /// A 404 or a 409 wrote nothing and comes back fast: it must not become the floor that every
    /// accepted DELETE is then measured against.
    #[test]
    fn answers_that_wrote_nothing_do_not_set_the_floor() {
        let mut p = Pace::new(true, 64);
        let mut now = Instant::now();
        let mut seed = 3;
        let ten = Duration::from_millis(10);
        drive(&mut p, &mut now, &mut seed, 1000, 4, ten);
        let settled = p.limit();
        for class in [OutcomeClass::AlreadyAbsent, OutcomeClass::Replaced] {
            let nothing = answer(class, 404, false);
            feed(&mut p, &mut now, 200, &nothing, Duration::from_millis(1));
        }
        assert_eq!(p.limit(), settled);
        drive(&mut p, &mut now, &mut seed, 500, 4, ten);
        assert!(p.limit() >= 4, "{} after 404s at 1 ms", p.limit());
    }

    /// Without a full pipeline (the backlog ran out, a rate ceiling holds the pace) the latency
    /// says nothing about the limit: it neither grows nor shrinks.
    #[test]
    fn answers_without_a_full_pipeline_leave_the_limit() {
        let mut p = Pace::new(true, 64);
        let mut now = Instant::now();
        feed(&mut p, &mut now, 100, &ok(), Duration::from_millis(5));
        let l = p.limit();
        for latency in [Duration::from_millis(1), Duration::from_millis(500)] {
            for _ in 0..200 {
                now += latency;
                p.answered(&ok(), latency, 1, now);
            }
            assert_eq!(p.limit(), l);
        }
    }

    /// A burst after a pause measures its floor afresh: an API server slower than in the last
    /// burst is not taken for a queue that keeps the limit at its floor.
    #[test]
    fn a_new_burst_measures_its_floor_afresh() {
        let mut p = Pace::new(true, 64);
        let mut now = Instant::now();
        feed(&mut p, &mut now, 300, &ok(), Duration::from_millis(2));
        now += BURST_GAP;
        let mut seed = 11;
        let forty = Duration::from_millis(40);
        drive(&mut p, &mut now, &mut seed, 1000, 8, forty);
        assert!(p.limit() >= 8, "{} with a floor of 2 ms kept", p.limit());
    }
}
