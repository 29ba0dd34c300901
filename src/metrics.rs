//! Counters and gauges per scope, readable from the JVM as a JSON snapshot.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

pub use crate::clock::epoch_ms;
use crate::deleter::{Flow, Outcome, OutcomeClass};
use crate::pause::{PauseKind, Pauses};

#[derive(Debug, Default)]
pub struct ScopeMetrics {
    /// The keys the scope's election runs under, once read (`election_scope` in the status).
    election: Mutex<Option<ElectionShown>>,
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
    /// Why the scope is unhealthy: a set of `UNHEALTHY_*` bits; 0 is healthy.
    pub unhealthy: AtomicU64,
    /// The reason of each unhealthy bit set (by bit index), and the most recent one's index.
    health_reasons: Mutex<([String; UNHEALTHY_BITS], usize)>,
    /// What holds the scope back now.
    pub pauses: Pauses,
    pub disarmed: AtomicU64,
    pub spared: AtomicU64,
    /// Driver pods remembered as running (not yet terminated).
    pub running: AtomicU64,
    /// Pods of which the scope holds something that only the scope-wide watch told.
    pub watch_only: AtomicU64,
    /// Restarts after a failure of the scope's tasks (cleanup, election, pod watch).
    pub restarts: AtomicU64,
    /// Commands in the scope task's queue now, and the most it ever held.
    pub queued: AtomicU64,
    pub queued_max: AtomicU64,
    /// Age of the oldest pod past its deadline, measured every few seconds.
    pub oldest_overdue_ms: AtomicU64,
    /// Pods made due before their retain period ended because the scope was over its cap.
    pub capped: AtomicU64,
    /// Pods whose annotations changed their retain period (an override or `keep`), and pods
    /// whose annotations could not be read (the operator's period applies).
    pub annotated: AtomicU64,
    pub annotations_malformed: AtomicU64,
    /// Pods kept by `podsweep.org/keep` now (only the cap deletes them).
    pub kept: AtomicU64,
    /// Kubernetes Events recorded, not recorded (the API server refused them), and left out by
    /// `events.qps`.
    pub events_sent: AtomicU64,
    pub events_failed: AtomicU64,
    pub events_dropped: AtomicU64,
    /// DELETEs in flight allowed now (the adaptive limit, or `maxInFlight`).
    pub inflight_limit: AtomicU64,
    outcomes: [AtomicU64; 8],
    /// Lag from deadline to accepted DELETE: buckets of 0.1 s x 2^k (k = 0..13), then overflow.
    lag_buckets: [AtomicU64; LAG_BUCKETS + 1],
    lag_sum_ms: AtomicU64,
    lag_max_ms: AtomicU64,
    /// The last DELETE that failed: when (epoch ms), its outcome class, and the pod with the answer.
    last_failure: Mutex<Option<(u64, &'static str, String)>>,
    /// Which API Priority and Fairness levels answered the scope's DELETEs.
    apf: Mutex<ApfAnswers>,
}

/// The DELETE answers of one scope by the API Priority and Fairness level and flow schema that
/// classified them (the `X-Kubernetes-PF-*` headers).
#[derive(Debug, Default)]
struct ApfAnswers {
    /// Answers and, of them, 429s, by level and schema; at most [`APF_FLOWS_KEPT`] pairs (the
    /// oldest pair goes when a new one comes: a level re-created gets a new UID).
    by_flow: Vec<(Flow, u64, u64)>,
    /// The pair that classified the latest answer.
    last: Option<Flow>,
}

/// Level and schema pairs kept per scope.
const APF_FLOWS_KEPT: usize = 8;

const LAG_BUCKETS: usize = 14;

/// The keys a scope's election runs under, as the status and the metrics show them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionShown {
    /// The election the scope leads in (`cluster:<digest>:<namespace>`, or a URL key).
    pub key: String,
    /// `cluster` or `url`.
    pub kind: &'static str,
    /// podsweep 0.1's election of the scope's URL, won first, when this server joins it.
    pub legacy: Option<String>,
}

/// No reachable leader for longer than `health.alertAfter`.
pub const UNHEALTHY_LEADERLESS: u64 = 1;
/// This server could not complete a DELETE for `ha.stepDownAfter` while DELETEs were due.
pub const UNHEALTHY_CANNOT_DELETE: u64 = 2;
/// The scope's task failed and was restarted recently.
pub const UNHEALTHY_RESTARTED: u64 = 4;
/// The scope's election task failed and was restarted recently.
pub const UNHEALTHY_ELECTION_RESTARTED: u64 = 8;
/// The scope's pod watch task failed and was restarted recently (self-watch mode).
pub const UNHEALTHY_WATCH_RESTARTED: u64 = 16;
/// The scope's pod watch has failed, list after list, for `health.alertAfter`.
pub const UNHEALTHY_WATCH_FAILING: u64 = 32;
/// The API server has held the scope's DELETEs back (Retry-After) for `health.alertAfter`.
pub const UNHEALTHY_THROTTLED: u64 = 64;
/// This server leads the scope but its pod watch cannot list the pods (it watches nothing).
pub const UNHEALTHY_WATCH_CANNOT_LIST: u64 = 128;
/// The scope's Kubernetes client cannot be built: nothing can be deleted.
pub const UNHEALTHY_NO_CLIENT: u64 = 256;
/// The namespace's identity (the election key) cannot be read: the API server cannot be reached,
/// so the scope does not campaign.
pub const UNHEALTHY_NO_IDENTITY: u64 = 512;
/// How many `UNHEALTHY_*` bits there are.
const UNHEALTHY_BITS: usize = 10;

/// Upper bound of lag bucket `k`, in seconds.
fn lag_bound(k: usize) -> f64 {
    0.1 * f64::from(1u32 << k)
}

impl ScopeMetrics {
    /// Records the keys the scope's election runs under now.
    pub fn set_election(&self, shown: ElectionShown) {
        *self.election.lock().unwrap_or_else(|p| p.into_inner()) = Some(shown);
    }

    /// The keys the scope's election runs under, once read.
    pub fn election(&self) -> Option<ElectionShown> {
        self.election
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Sets an unhealthy bit with its reason.
    pub fn set_unhealthy(&self, bit: u64, reason: &str) {
        let i = (bit.trailing_zeros() as usize).min(UNHEALTHY_BITS - 1);
        let mut r = self
            .health_reasons
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if r.0[i] != reason {
            r.0[i] = reason.to_owned();
        }
        r.1 = i;
        self.unhealthy.fetch_or(bit, Relaxed);
    }

    /// Whether an unhealthy bit is set.
    pub fn is_unhealthy(&self, bit: u64) -> bool {
        self.unhealthy.load(Relaxed) & bit != 0
    }

    /// The reasons of the unhealthy bits set, most recent first.
    fn reasons(&self) -> (Option<String>, Vec<String>) {
        let bits = self.unhealthy.load(Relaxed);
        if bits == 0 {
            return (None, Vec::new());
        }
        let r = self
            .health_reasons
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let mut all: Vec<String> = (0..UNHEALTHY_BITS)
            .filter(|i| bits & (1 << i) != 0 && *i != r.1)
            .map(|i| r.0[i].clone())
            .collect();
        let latest = if bits & (1 << r.1) != 0 {
            r.0[r.1].clone()
        } else {
            all.first()
                .cloned()
                .unwrap_or_else(|| "unhealthy".to_owned())
        };
        if bits & (1 << r.1) != 0 {
            all.insert(0, latest.clone());
        }
        (Some(latest), all)
    }

    /// Whether an open pause of `kind` makes the scope unhealthy now (see the docs' table).
    pub fn pause_unhealthy(&self, kind: PauseKind) -> bool {
        match kind {
            PauseKind::Refused | PauseKind::StepDownHold | PauseKind::Restarting => true,
            PauseKind::ClientUnavailable => self.is_unhealthy(UNHEALTHY_NO_CLIENT),
            PauseKind::HaSessionLost => self.is_unhealthy(UNHEALTHY_LEADERLESS),
            PauseKind::WatchFailing => {
                self.is_unhealthy(UNHEALTHY_WATCH_FAILING | UNHEALTHY_WATCH_CANNOT_LIST)
            }
            PauseKind::RetryAfter => self.is_unhealthy(UNHEALTHY_THROTTLED),
            PauseKind::Backoff | PauseKind::ServerIdPending | PauseKind::ListPacing => false,
            PauseKind::ClusterIdentity => self.is_unhealthy(UNHEALTHY_NO_IDENTITY),
        }
    }

    /// Clears an unhealthy bit; true if it was set.
    pub fn clear_unhealthy(&self, bit: u64) -> bool {
        self.unhealthy.fetch_and(!bit, Relaxed) & bit != 0
    }

    pub fn outcome(&self, class: OutcomeClass) {
        self.outcomes[class.index()].fetch_add(1, Relaxed);
    }

    pub fn record_lag(&self, secs: f64) {
        let k = (0..LAG_BUCKETS)
            .find(|&k| secs <= lag_bound(k))
            .unwrap_or(LAG_BUCKETS);
        self.lag_buckets[k].fetch_add(1, Relaxed);
        let ms = (secs * 1000.0) as u64;
        self.lag_sum_ms.fetch_add(ms, Relaxed);
        self.lag_max_ms.fetch_max(ms, Relaxed);
    }

    /// Upper bound of the bucket holding quantile `q` of the lag, in seconds.
    fn lag_quantile(&self, counts: &[u64], q: f64) -> Option<f64> {
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (k, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(if k < LAG_BUCKETS {
                    lag_bound(k)
                } else {
                    self.lag_max_ms.load(Relaxed) as f64 / 1000.0
                });
            }
        }
        None
    }

    /// Records a DELETE that failed (it is retried): its class and `what` (pod and answer).
    pub fn failed(&self, class: OutcomeClass, what: String) {
        let mut last = self.last_failure.lock().unwrap_or_else(|p| p.into_inner());
        *last = Some((epoch_ms(), class.as_str(), what));
    }

    /// Records which API Priority and Fairness level and flow schema answered a DELETE, if the
    /// answer said.
    pub fn apf_answer(&self, outcome: &Outcome) {
        let Some(flow) = &outcome.flow else {
            return;
        };
        let throttled = u64::from(outcome.class == OutcomeClass::Throttled);
        let mut a = self.apf.lock().unwrap_or_else(|p| p.into_inner());
        match a.by_flow.iter().position(|(f, _, _)| f == flow) {
            Some(i) => {
                let (_, answers, t) = &mut a.by_flow[i];
                *answers += 1;
                *t += throttled;
            }
            None => {
                if a.by_flow.len() >= APF_FLOWS_KEPT {
                    a.by_flow.remove(0);
                }
                a.by_flow.push((flow.clone(), 1, throttled));
            }
        }
        if a.last.as_ref() != Some(flow) {
            a.last = Some(flow.clone());
        }
    }

    /// The `apf` part of the status: the level and schema of the latest answer, and the answers
    /// (and 429s) by level and schema; null before any answer named them.
    fn apf_snapshot(&self) -> serde_json::Value {
        let a = self.apf.lock().unwrap_or_else(|p| p.into_inner());
        let Some(last) = &a.last else {
            return serde_json::Value::Null;
        };
        serde_json::json!({
            "priority_level_uid": last.priority_level_uid,
            "flow_schema_uid": last.flow_schema_uid,
            "answers": a.by_flow.iter().map(|(f, n, t)| serde_json::json!({
                "priority_level_uid": f.priority_level_uid,
                "flow_schema_uid": f.flow_schema_uid,
                "answers": n,
                "throttled": t,
            })).collect::<Vec<_>>(),
        })
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
        let counts: Vec<u64> = self.lag_buckets.iter().map(|b| b.load(Relaxed)).collect();
        let lag = serde_json::json!({
            "count": counts.iter().sum::<u64>(),
            "sum_seconds": self.lag_sum_ms.load(Relaxed) as f64 / 1000.0,
            "max_seconds": self.lag_max_ms.load(Relaxed) as f64 / 1000.0,
            "p50_seconds_le": self.lag_quantile(&counts, 0.5),
            "p99_seconds_le": self.lag_quantile(&counts, 0.99),
            "bucket_bounds_seconds": (0..LAG_BUCKETS).map(lag_bound).collect::<Vec<_>>(),
            "bucket_counts": counts,
        });
        let (reason, reasons) = self.reasons();
        let mut v = serde_json::json!({
            "lag": lag,
            "oldest_overdue_ms": self.oldest_overdue_ms.load(Relaxed),
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
            "healthy": reason.is_none(),
            "health_reason": reason,
            "health_reasons": reasons,
            "disarmed": self.disarmed.load(Relaxed),
            "spared": self.spared.load(Relaxed),
            "running": self.running.load(Relaxed),
            "watch_only": self.watch_only.load(Relaxed),
            "restarts": self.restarts.load(Relaxed),
            "queued": self.queued.load(Relaxed),
            "queued_max": self.queued_max.load(Relaxed),
            "capped": self.capped.load(Relaxed),
            "annotated": self.annotated.load(Relaxed),
            "annotations_malformed": self.annotations_malformed.load(Relaxed),
            "kept": self.kept.load(Relaxed),
            "events_sent": self.events_sent.load(Relaxed),
            "events_failed": self.events_failed.load(Relaxed),
            "events_dropped": self.events_dropped.load(Relaxed),
            "inflight_limit": self.inflight_limit.load(Relaxed),
            "leaderless_ms": match self.leaderless_since_ms.load(Relaxed) {
                0 => 0,
                since => epoch_ms().saturating_sub(since),
            },
            "outcomes": outcomes,
            "apf": self.apf_snapshot(),
            "last_failure": match &*self.last_failure.lock().unwrap_or_else(|p| p.into_inner()) {
                Some((at_ms, class, what)) => serde_json::json!({
                    "at_ms": at_ms,
                    "outcome": class,
                    "detail": what,
                }),
                None => serde_json::Value::Null,
            },
        });
        self.pauses.add_to(&mut v, |k| self.pause_unhealthy(k));
        v
    }
}
