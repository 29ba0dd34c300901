//! Deadline math: when a terminated pod becomes due for deletion.
//!
//! Pure functions over wall-clock times, so they are table-tested. The sweeper turns the time left
//! into a timer in its deadline queue (one timer per pod, no periodic sweep).

use std::time::{Duration, SystemTime};

/// Time left until a pod is due.
///
/// `anchor` is when the pod terminated, as the pod says; when the pod carries no time, the first
/// observation of it stands in. A time in the future (clock skew) counts as now, so a skewed
/// clock can delay a deletion by at most the skew, never hasten it.
pub fn time_left(
    terminated_at: Option<SystemTime>,
    first_seen: SystemTime,
    retain: Duration,
    now: SystemTime,
) -> Duration {
    let anchor = terminated_at.unwrap_or(first_seen).min(now);
    let deadline = anchor + retain;
    deadline.duration_since(now).unwrap_or(Duration::ZERO)
}

/// The wall-clock deadline itself (for status and lag figures).
pub fn deadline(
    terminated_at: Option<SystemTime>,
    first_seen: SystemTime,
    retain: Duration,
    now: SystemTime,
) -> SystemTime {
    terminated_at.unwrap_or(first_seen).min(now) + retain
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
    let jittered = exp.mul_f64(1.0 + 0.2 * jitter.clamp(0.0, 1.0)).min(cap);
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
        // (terminated_at, first_seen, now, expected left)
        let table: &[(Option<u64>, u64, u64, u64)] = &[
            // terminated just now: a full retain period
            (Some(T0), T0, T0, 300),
            // terminated 100 s before we saw it: the old clock is kept
            (Some(T0), T0 + 100, T0 + 100, 200),
            // long overdue (e.g. a new leader after failover): due at once
            (Some(T0), T0 + 1000, T0 + 1000, 0),
            // no time on the pod: first observation stands in
            (None, T0 + 10, T0 + 20, 290),
            // a termination time in the future counts as now
            (Some(T0 + 500), T0, T0, 300),
            // exactly at the deadline
            (Some(T0), T0, T0 + 300, 0),
        ];
        for &(term, seen, now, want) in table {
            let got = time_left(term.map(at), at(seen), retain, at(now));
            assert_eq!(got, Duration::from_secs(want), "{term:?} {seen} {now}");
        }
    }

    #[test]
    fn deadline_matches_time_left() {
        let retain = Duration::from_secs(60);
        let d = deadline(Some(at(T0)), at(T0 + 5), retain, at(T0 + 10));
        assert_eq!(d, at(T0 + 60));
    }

    #[test]
    fn retry_delays_grow_cap_and_honour_retry_after() {
        let cap = Duration::from_secs(60);
        assert_eq!(retry_delay(1, None, cap, 0.0), Duration::from_secs(1));
        assert_eq!(retry_delay(2, None, cap, 0.0), Duration::from_secs(2));
        assert_eq!(retry_delay(5, None, cap, 0.0), Duration::from_secs(16));
        assert_eq!(retry_delay(30, None, cap, 0.99), cap);
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
