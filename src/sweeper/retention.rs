//! How long a tracked pod waits, beyond Kyuubi's one retain period: the retain period by outcome
//! (`failed.retainPeriod`), the pod's own annotations (`annotations.*`) and the per-scope cap
//! (`maxTerminatedPods`).
//!
//! # Guarantees
//! * A pod's retain period is the operator's for its outcome, or a longer one its annotation
//!   `podsweep.org/retain-period` asks for, at most `annotations.maxRetainPeriod`: an annotation
//!   (which anyone who submits a job can set) never makes a pod go sooner than the operator's
//!   period. `podsweep.org/keep=true` keeps it from deletion by retain period.
//! * The cap holds whatever the annotations say: past `maxTerminatedPods` pods waiting in a
//!   scope, the oldest (by termination time) are due at once, with the same DELETE (UID
//!   precondition), limiter and outcome classes as any other.
//! * A retain period longer than the maximum (365 days and more too) counts as the maximum.
//! * An annotation that does not parse counts as absent (the operator's period), with one WARN
//!   per pod; at most [`WARN_BURST`] such WARNs per scope, then one per [`WARN_EVERY`] with the
//!   count of the pods left out. Never an error, never a stuck scope.
//! * Annotations are read when the pod terminates, and again when they change on a terminated
//!   pod (a changed annotation reaches the task: `crate::seen`).

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::{Sweeper, Uid};
use crate::config::{parse_duration, MAX_TIME};
use crate::metrics::ScopeMetrics;
use crate::model::{Observation, KEEP_ANNOTATION, RETAIN_ANNOTATION};
use crate::tracker::{Policy, Record, Stage};

/// Malformed-annotation WARNs a scope logs at once; then one per [`WARN_EVERY`].
pub const WARN_BURST: u32 = 10;
pub const WARN_EVERY: Duration = Duration::from_secs(60);

/// The bound on malformed-annotation WARNs of a scope.
#[derive(Debug)]
pub(super) struct WarnBound {
    left: u32,
    refill_at: Option<Instant>,
    /// Pods left out since the last WARN.
    skipped: u64,
    /// Pods already warned about (bounded: cleared when full).
    warned: std::collections::HashSet<Uid>,
}

impl Default for WarnBound {
    fn default() -> Self {
        WarnBound {
            left: WARN_BURST,
            refill_at: None,
            skipped: 0,
            warned: Default::default(),
        }
    }
}

impl WarnBound {
    /// Whether a WARN about `uid` may be logged now (and how many were left out before it).
    fn allow(&mut self, uid: &Uid, now: Instant) -> Option<u64> {
        if self.warned.contains(uid) {
            return None;
        }
        if self.warned.len() >= 4096 {
            self.warned.clear();
        }
        self.warned.insert(uid.clone());
        if self.left == 0 && self.refill_at.is_some_and(|t| now >= t) {
            self.left = 1;
        }
        if self.left == 0 {
            self.skipped += 1;
            return None;
        }
        self.left -= 1;
        if self.left == 0 {
            self.refill_at = Some(now + WARN_EVERY);
        }
        Some(std::mem::take(&mut self.skipped))
    }
}

impl Sweeper {
    /// The retain period of a record; `None`: kept (`podsweep.org/keep`), only the cap deletes
    /// it. An immediate record (Kyuubi asked for it) waits for nothing.
    pub(super) fn retain_of(&self, rec: &Record) -> Option<Duration> {
        if rec.immediate() {
            return Some(Duration::ZERO);
        }
        let r = &self.cfg.retention;
        let base = r.for_state(rec.state);
        match (rec.policy(), r.annotation_max) {
            (Policy::Keep, Some(_)) => None,
            (Policy::Retain(d), Some(max)) => Some(d.min(max).max(base)),
            _ => Some(base),
        }
    }

    /// What a terminated pod's annotations ask for, checked; a value that does not parse counts
    /// as absent, with one bounded WARN.
    fn policy_of(&mut self, uid: &Uid, obs: &Observation) -> Policy {
        if self.cfg.retention.annotation_max.is_none() {
            return Policy::Default;
        }
        let Some(a) = obs.annotations.as_deref() else {
            return Policy::Default;
        };
        let mut bad: Option<(&str, &str)> = None;
        let keep = match a.keep.as_deref().map(str::trim) {
            None => false,
            Some(v) if v.eq_ignore_ascii_case("true") => true,
            Some(v) if v.eq_ignore_ascii_case("false") => false,
            Some(v) => {
                bad = Some((KEEP_ANNOTATION, v));
                false
            }
        };
        let retain = match a.retain_period.as_deref() {
            None => None,
            // Longer than any time key may be (365 days) still reads: it asks for the most
            // there is, `annotations.maxRetainPeriod` (`retain_of` bounds it).
            Some(v) => match parse_duration(v) {
                Some(d) if !d.is_zero() => Some(d.min(MAX_TIME)),
                _ => {
                    bad = Some((RETAIN_ANNOTATION, v));
                    None
                }
            },
        };
        if let Some((name, value)) = bad {
            ScopeMetrics::inc(&self.metrics.annotations_malformed);
            if let Some(skipped) = self.warn_bound.allow(uid, Instant::now()) {
                let value: String = value.chars().take(64).collect();
                warn!(
                    scope = %self.scope, pod = %obs.pod_name, uid = %uid,
                    "Pod {} has annotation {name}={value:?}, which podsweep cannot read \
                     (expected {}); it counts as absent{}",
                    obs.pod_name,
                    if name == KEEP_ANNOTATION { "true or false" } else { "milliseconds or an ISO-8601 duration such as PT6H" },
                    if skipped > 0 { format!(" ({skipped} more pods with unreadable annotations were not logged)") } else { String::new() }
                );
            }
        }
        match (keep, retain) {
            (true, _) => Policy::Keep,
            (false, Some(d)) => Policy::Retain(d),
            (false, None) => Policy::Default,
        }
    }

    /// Applies a terminated pod's annotations to its record; true when its retain period
    /// changed (the caller re-arms a scheduled record).
    pub(super) fn apply_annotations(&mut self, uid: &Uid, obs: &Observation) -> bool {
        if self.cfg.retention.annotation_max.is_none() || !obs.state.is_terminated() {
            return false;
        }
        let Some(before) = self.tracker.get(uid).map(|r| r.policy()) else {
            return false;
        };
        let policy = self.policy_of(uid, obs);
        if !self.tracker.set_policy(uid, policy) {
            return false;
        }
        if before == Policy::Default {
            ScopeMetrics::inc(&self.metrics.annotated);
        }
        match (before == Policy::Keep, policy == Policy::Keep) {
            (false, true) => {
                self.metrics.kept.fetch_add(1, Relaxed);
            }
            (true, false) => {
                self.metrics.kept.fetch_sub(1, Relaxed);
            }
            _ => {}
        }
        debug!(
            scope = %self.scope, pod = %obs.pod_name, uid = %uid,
            "Pod {}: its annotations ask for {policy:?}", obs.pod_name
        );
        true
    }

    /// A record is gone: a kept one no longer counts.
    pub(super) fn unkeep(&self, rec: &Record) {
        if rec.policy() == Policy::Keep && self.cfg.retention.annotation_max.is_some() {
            self.metrics.kept.fetch_sub(1, Relaxed);
        }
    }

    /// Arms a record again from its own deadline (its retain period changed). A record already
    /// due, waiting for a retry or in flight whose new period keeps it, or ends later than now,
    /// goes back to waiting (an annotation added late saves the pod): its DELETE in flight is
    /// cancelled (if it has not reached the API server yet, the pod stays). Kyuubi's at-once
    /// deletes and the cap's are kept.
    pub(super) fn rearm(&mut self, uid: Uid, now_wall: SystemTime) {
        let Some(rec) = self.tracker.get(&uid) else {
            return;
        };
        let left = self.time_left(rec, now_wall);
        let stage = rec.stage();
        if stage != Stage::Scheduled {
            let saved = !rec.immediate() && !rec.capped() && left.is_none_or(|l| !l.is_zero());
            if !saved {
                return;
            }
            let name = rec.name();
            if let Some(abort) = self.inflight_abort.remove(&uid) {
                abort.abort();
            }
            self.tracker.disarm(&uid);
            self.tracker.set_stage(&uid, Stage::Scheduled);
            self.failures.forget(&uid);
            info!(
                scope = %self.scope, pod = %name, uid = %uid,
                "Pod {name}'s annotations now ask for it to be kept longer: it was {} and waits \
                 again{}",
                match stage {
                    Stage::Due => "due",
                    Stage::Backoff => "waiting for a retry",
                    _ => "being deleted",
                },
                if stage == Stage::Deleting {
                    " (its DELETE is cancelled unless it already reached the API server)"
                } else {
                    ""
                }
            );
        }
        match left {
            Some(left) => self.schedule(uid, left, now_wall),
            None => self.tracker.disarm(&uid),
        }
        if stage != Stage::Scheduled {
            self.enforce_cap(now_wall);
        }
    }

    /// Past the cap, the oldest waiting pods are due now (on every server: only the leader
    /// sends their DELETEs). At most one pod per waiting record is taken, whatever the
    /// bookkeeping says; drift found on the way is reported once.
    pub(super) fn enforce_cap(&mut self, now_wall: SystemTime) {
        let cap = self.cfg.retention.max_terminated;
        if cap == 0 {
            return;
        }
        let drift = self.tracker.cap_drift();
        let mut any = false;
        for _ in 0..self.tracker.count(Stage::Scheduled) {
            let Some(uid) = self.tracker.over_cap(cap) else {
                break;
            };
            self.tracker.disarm(&uid);
            // Overdue since now: the lag figures measure the limiter, not the retain period.
            if !self.tracker.set_due(&uid, now_wall) {
                break;
            }
            self.tracker.mark_capped(&uid);
            ScopeMetrics::inc(&self.metrics.capped);
            self.due.push_back(uid);
            any = true;
        }
        let found = self.tracker.cap_drift() - drift;
        if found > 0 {
            error!(
                scope = %self.scope,
                "The cap's bookkeeping of scope {} was off: {found} stale entries were dropped \
                 ({} in all); no pod was taken for them. This is a podsweep bug: please report it",
                self.scope, self.tracker.cap_drift()
            );
        }
        if any {
            self.dispatch();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_annotation_warnings_are_bounded() {
        let mut b = WarnBound::default();
        let now = Instant::now();
        let uids: Vec<Uid> = (0..30).map(|i| Uid::new(&format!("u{i}"))).collect();
        let allowed = uids.iter().filter(|u| b.allow(u, now).is_some()).count();
        assert_eq!(allowed, WARN_BURST as usize);
        assert_eq!(b.allow(&uids[0], now), None, "one WARN per pod");
        let later = now + WARN_EVERY;
        assert_eq!(b.allow(&Uid::new("late"), later), Some(20));
        assert_eq!(b.allow(&Uid::new("later"), later), None);
    }
}
