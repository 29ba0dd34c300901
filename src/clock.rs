//! Wall-clock time, injectable so tests can run on tokio's paused clock.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// Wall-clock milliseconds since the epoch (0 if the clock is before 1970), from the system's
/// clock whatever [`Clock`] a scope uses: the times its status shows.
pub fn epoch_ms() -> u64 {
    SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

#[derive(Clone, Debug)]
pub enum Clock {
    /// The system's wall clock.
    System,
    /// Wall time derived from tokio's clock: `base + (tokio now - start)`. With paused tokio time in
    /// tests, wall time advances exactly as the timers do.
    Derived { base: SystemTime, start: Instant },
}

impl Clock {
    pub fn derived(base: SystemTime) -> Self {
        Clock::Derived {
            base,
            start: Instant::now(),
        }
    }

    pub fn now(&self) -> SystemTime {
        match self {
            Clock::System => SystemTime::now(),
            Clock::Derived { base, start } => *base + Instant::now().duration_since(*start),
        }
    }

    /// The wall time as of the kernel's last clock tick (`CLOCK_REALTIME_COARSE`), at a fraction
    /// of the cost of [`Clock::now`] (no clock source is read), and at most a tick (1 to 10 ms)
    /// behind it. For the times the informer's thread records on every event: when a running pod
    /// was last seen so, a lower bound where a tick early only loosens the bound by as much.
    pub fn recent(&self) -> SystemTime {
        match self {
            Clock::System => coarse_now(),
            Clock::Derived { .. } => self.now(),
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn coarse_now() -> SystemTime {
    use rustix::time::{clock_gettime, ClockId};
    let t = clock_gettime(ClockId::RealtimeCoarse);
    match (u64::try_from(t.tv_sec), u32::try_from(t.tv_nsec)) {
        (Ok(s), Ok(ns)) if ns < 1_000_000_000 => SystemTime::UNIX_EPOCH + Duration::new(s, ns),
        _ => SystemTime::now(),
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn coarse_now() -> SystemTime {
    SystemTime::now()
}

/// Milliseconds since the epoch -> a wall time; zero or negative means unknown.
pub fn from_epoch_millis(ms: i64) -> Option<SystemTime> {
    (ms > 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recent_time_is_at_most_a_tick_behind_and_never_ahead() {
        for _ in 0..1_000 {
            let before = SystemTime::now();
            let recent = Clock::System.recent();
            let after = SystemTime::now();
            // A tick is 10 ms at the lowest kernel rate (HZ=100); allow for a slow test machine.
            assert!(recent <= after, "{recent:?} is after {after:?}");
            let behind = before.duration_since(recent).unwrap_or(Duration::ZERO);
            assert!(behind < Duration::from_millis(200), "{behind:?} behind");
        }
    }
}
