//! Wall-clock time, injectable so tests can run on tokio's paused clock.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

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
}

/// Milliseconds since the epoch -> a wall time; zero or negative means unknown.
pub fn from_epoch_millis(ms: i64) -> Option<SystemTime> {
    (ms > 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_millis(ms as u64))
}
