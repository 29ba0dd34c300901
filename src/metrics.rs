//! Counters and gauges per scope, readable from the JVM as a JSON snapshot.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::deleter::OutcomeClass;

#[derive(Debug, Default)]
pub struct ScopeMetrics {
    pub observed: AtomicU64,
    pub tracked: AtomicU64,
    pub scheduled: AtomicU64,
    pub due: AtomicU64,
    pub inflight: AtomicU64,
    pub deletes_sent: AtomicU64,
    pub retries: AtomicU64,
    pub cancelled: AtomicU64,
    pub transitions: AtomicU64,
    pub leader: AtomicU64,
    /// Epoch milliseconds since when no leader is reachable (Paused / NoQuorum); 0 when one is.
    pub leaderless_since_ms: AtomicU64,
    /// 1 once the scope has been leaderless for longer than the alert threshold.
    pub unhealthy: AtomicU64,
    outcomes: [AtomicU64; 8],
}

impl ScopeMetrics {
    pub fn outcome(&self, class: OutcomeClass) {
        self.outcomes[class.index()].fetch_add(1, Relaxed);
    }

    pub fn outcome_count(&self, class: OutcomeClass) -> u64 {
        self.outcomes[class.index()].load(Relaxed)
    }

    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    pub fn set(gauge: &AtomicU64, v: usize) {
        gauge.store(v as u64, Relaxed);
    }

    pub fn snapshot(&self) -> serde_json::Value {
        let mut outcomes = serde_json::Map::new();
        for c in OutcomeClass::ALL {
            outcomes.insert(c.as_str().into(), self.outcome_count(c).into());
        }
        serde_json::json!({
            "observed": self.observed.load(Relaxed),
            "tracked": self.tracked.load(Relaxed),
            "scheduled": self.scheduled.load(Relaxed),
            "due": self.due.load(Relaxed),
            "inflight": self.inflight.load(Relaxed),
            "deletes_sent": self.deletes_sent.load(Relaxed),
            "retries": self.retries.load(Relaxed),
            "cancelled": self.cancelled.load(Relaxed),
            "leadership_transitions": self.transitions.load(Relaxed),
            "leader": self.leader.load(Relaxed),
            "healthy": self.unhealthy.load(Relaxed) == 0,
            "leaderless_ms": match self.leaderless_since_ms.load(Relaxed) {
                0 => 0,
                since => epoch_ms().saturating_sub(since),
            },
            "outcomes": outcomes,
        })
    }
}

/// Wall-clock milliseconds since the epoch (0 if the clock is before 1970).
pub fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
