//! Deadline math: when a terminated pod becomes due for deletion.
//!
//! Pure functions over wall-clock times, so they are table-tested. The sweeper turns the time left
//! into a timer in its deadline queue (one timer per pod, no periodic sweep).

use std::time::{Duration, SystemTime};

/// How long after a pod terminated podsweep may first see it terminated, when it was watching:
/// the informer's delivery time. Also the most a node clock running behind the server's can
/// hasten the deletion of a pod podsweep saw run (10 s).
pub const SKEW_TOLERANCE: Duration = Duration::from_secs(10);

/// When a pod's retain period starts.
///
/// `terminated_at` is when the pod terminated, as the pod says (the kubelet's clock); when the
/// pod carries no time, the first observation of it stands in. The anchor is bounded by
/// podsweep's own clock on both sides:
/// * for a pod podsweep saw in a non-terminal state (`seen_running`), it was watching when the
///   pod terminated, so the termination is dated no earlier than the last running sighting, nor
///   than `first_seen - SKEW_TOLERANCE`: a node clock running behind hastens such a deletion by
///   at most [`SKEW_TOLERANCE`]. A pod first seen already terminated (a server that just started)
///   keeps its own time, so a new server keeps the old clock;
/// * never later than `now` (a time in the future counts as now), so a node clock running ahead
///   delays a deletion by at most its skew.
pub fn anchor(
    terminated_at: Option<SystemTime>,
    first_seen: SystemTime,
    seen_running: Option<SystemTime>,
    now: SystemTime,
) -> SystemTime {
    let pod_time = terminated_at.unwrap_or(first_seen);
    let floor = seen_running.map(|r| {
        let watched = first_seen.checked_sub(SKEW_TOLERANCE).unwrap_or(first_seen);
        r.max(watched)
    });
    floor.map_or(pod_time, |f| pod_time.max(f)).min(now)
}

/// Time left until a pod is due: from [`anchor`] plus the retain period.
pub fn time_left(
    terminated_at: Option<SystemTime>,
    first_seen: SystemTime,
    seen_running: Option<SystemTime>,
    retain: Duration,
    now: SystemTime,
) -> Duration {
    let deadline = anchor(terminated_at, first_seen, seen_running, now) + retain;
    deadline.duration_since(now).unwrap_or(Duration::ZERO)
}

/// The wall-clock deadline itself (for status and lag figures).
pub fn deadline(
    terminated_at: Option<SystemTime>,
    first_seen: SystemTime,
    seen_running: Option<SystemTime>,
    retain: Duration,
    now: SystemTime,
) -> SystemTime {
    anchor(terminated_at, first_seen, seen_running, now) + retain
}

/// Retry delay after a failed DELETE: exponential from 1 s, capped, with up to 20 % jitter
/// taken from `jitter` in `[0, 1)`. A server's `Retry-After` wins when it is longer.
pub fn retry_delay(
    attempt: u32,
    retry_after: Option<Duration>,
    cap: Duration,
    jitter: f64,
) -> Duration {
    let exp = Duration::from_secs(1u64 << attempt.saturating_sub(1).min(16)).min(cap);
    // A jitter that is not a number counts as none (`mul_f64` panics on NaN).
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let jittered = exp.mul_f64(1.0 + 0.2 * jitter).min(cap);
    match retry_after {
        Some(ra) if ra > jittered => ra,
        _ => jittered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: u64 = 1_700_000_000;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(s)
    }

    #[test]
    fn time_left_table() {
        let retain = Duration::from_secs(300);
        // (terminated_at, first_seen, seen_running, now, expected left)
        type Row = (Option<u64>, u64, Option<u64>, u64, u64);
        let table: &[Row] = &[
            // terminated just now: a full retain period
            (Some(T0), T0, None, T0, 300),
            // terminated 100 s before we saw it: the old clock is kept
            (Some(T0), T0 + 100, None, T0 + 100, 200),
            // long overdue (e.g. a new leader after failover): due at once
            (Some(T0), T0 + 1000, None, T0 + 1000, 0),
            // a node clock 3 min behind, the pod seen running an hour before: 10 s early at most
            (Some(T0 - 180), T0, Some(T0 - 3600), T0, 290),
            // the same pod seen running 2 s before it ended: not before that
            (Some(T0 - 180), T0, Some(T0 - 2), T0, 298),
            // seen running, its own time within the tolerance: its own time wins
            (Some(T0 - 4), T0, Some(T0 - 600), T0, 296),
            // first seen already terminated (a server that just started): its own time
            (Some(T0 - 180), T0, None, T0, 120),
            // no time on the pod: first observation stands in
            (None, T0 + 10, None, T0 + 20, 290),
            // a termination time in the future counts as now
            (Some(T0 + 500), T0, None, T0, 300),
            // exactly at the deadline
            (Some(T0), T0, None, T0 + 300, 0),
        ];
        for &(term, seen, running, now, want) in table {
            let got = time_left(term.map(at), at(seen), running.map(at), retain, at(now));
            assert_eq!(got, Duration::from_secs(want), "{term:?} {seen} {now}");
        }
    }

    #[test]
    fn deadline_matches_time_left() {
        let retain = Duration::from_secs(60);
        let d = deadline(Some(at(T0)), at(T0 + 5), None, retain, at(T0 + 10));
        assert_eq!(d, at(T0 + 60));
        let ran = deadline(
            Some(at(T0)),
            at(T0 + 5),
            Some(at(T0 + 3)),
            retain,
            at(T0 + 10),
        );
        assert_eq!(ran, at(T0 + 63), "not before it was last seen running");
    }

    #[test]
    fn retry_delays_grow_cap_and_honour_retry_after() {
        let cap = Duration::from_secs(60);
        assert_eq!(retry_delay(1, None, cap, 0.0), Duration::from_secs(1));
        assert_eq!(retry_delay(2, None, cap, 0.0), Duration::from_secs(2));
        assert_eq!(retry_delay(5, None, cap, 0.0), Duration::from_secs(16));
        assert_eq!(retry_delay(30, None, cap, 0.99), cap);
        // Found by tests/core_props.rs: a NaN jitter panicked in Duration::mul_f64.
        assert_eq!(retry_delay(1, None, cap, f64::NAN), Duration::from_secs(1));
        assert_eq!(
            retry_delay(1, None, cap, f64::INFINITY),
            Duration::from_secs(1)
        );
        assert_eq!(
            retry_delay(1, Some(Duration::from_secs(9)), cap, 0.5),
            Duration::from_secs(9)
        );
        let j = retry_delay(3, None, cap, 0.5);
        assert!(
            j >= Duration::from_secs(4) && j <= Duration::from_millis(4800),
            "{j:?}"
        );
    }
}
