//! Capped exponential backoff: the one type behind every retry loop of podsweep (the election
//! backends' sessions and campaigns, the restart of a failed scope task, the pod watch's relists
//! and client builds).
//!
//! # Guarantees
//! * Each delay doubles from the base up to the cap; [`Backoff::reset`] goes back to the base.
//!   Callers reset once the retried work has run well for a while, so a loop that failed long
//!   ago starts again from the base.
//! * With jitter ("equal jitter", the default), each delay is drawn from `[d/2, d]`, which keeps
//!   a fleet's retries apart; [`Backoff::exact`] gives the plain sequence.

use std::time::Duration;

/// Capped exponential backoff, with "equal jitter" unless built [`Backoff::exact`].
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    base: Duration,
    cap: Duration,
    current: Duration,
    jitter: bool,
}

impl Backoff {
    /// From `base` (at least 1 ms) doubling up to `cap` (at least `base`), with jitter.
    pub(crate) fn new(base: Duration, cap: Duration) -> Self {
        let base = base.max(Duration::from_millis(1));
        Backoff {
            base,
            cap: cap.max(base),
            current: base,
            jitter: true,
        }
    }

    /// [`Backoff::new`] without jitter: exactly `base`, `2 base`, ... up to `cap`.
    pub(crate) fn exact(base: Duration, cap: Duration) -> Self {
        Backoff {
            jitter: false,
            ..Backoff::new(base, cap)
        }
    }

    pub(crate) fn next_delay(&mut self) -> Duration {
        let d = self.current;
        self.current = (d * 2).min(self.cap);
        if !self.jitter {
            return d;
        }
        let half = d / 2;
        let jitter_ms = rand::random_range(0..=(d - half).as_millis() as u64);
        half + Duration::from_millis(jitter_ms)
    }

    pub(crate) fn reset(&mut self) {
        self.current = self.base;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_the_cap_with_jitter() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let mut ceilings = Vec::new();
        for _ in 0..8 {
            let ceiling = b.current;
            let d = b.next_delay();
            assert!(
                d >= ceiling / 2 && d <= ceiling,
                "{d:?} outside [{:?}, {ceiling:?}]",
                ceiling / 2
            );
            ceilings.push(ceiling.as_millis());
        }
        assert_eq!(ceilings, [100, 200, 400, 800, 1000, 1000, 1000, 1000]);
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(100));
    }

    #[test]
    fn exact_backoff_doubles_without_jitter_and_resets() {
        let mut b = Backoff::exact(Duration::from_secs(1), Duration::from_secs(60));
        let seq: Vec<u64> = (0..8).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(seq, [1, 2, 4, 8, 16, 32, 60, 60]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_secs(1));
    }

    #[test]
    fn backoff_cap_below_base_means_a_constant_base() {
        let mut b = Backoff::new(Duration::from_millis(300), Duration::from_millis(100));
        for _ in 0..4 {
            let d = b.next_delay();
            assert!(d >= Duration::from_millis(150) && d <= Duration::from_millis(300));
        }
        let mut zero = Backoff::new(Duration::ZERO, Duration::ZERO);
        assert!(zero.next_delay() <= Duration::from_millis(1));
    }
}
