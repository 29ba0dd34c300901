//! The keys that pace and retry DELETEs (rate, burst, in flight, dry run, retry and forbidden
//! waits): [`Tuning`] and its parsing.

use std::time::Duration;

use super::{keys, lookup, parse_bool, positive_time, ConfigError};

/// How DELETEs are paced and retried, per scope.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuning {
    /// Token-bucket rate of DELETEs per second.
    pub qps: f64,
    /// Token-bucket size.
    pub burst: u32,
    /// DELETEs in flight at most.
    pub max_in_flight: usize,
    /// Send DELETEs with server-side `dryRun=All`; log "would delete".
    pub dry_run: bool,
    /// Cap of the exponential backoff after 429, 5xx and transport failures.
    pub retry_max_wait: Duration,
    /// Wait between retries of a pod whose DELETE was forbidden (403).
    pub forbidden_retry: Duration,
    /// At most one summary line per failure class per scope per this interval.
    pub failures_summary: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            qps: 10.0,
            burst: 20,
            max_in_flight: 8,
            dry_run: false,
            retry_max_wait: Duration::from_secs(60),
            forbidden_retry: Duration::from_secs(60),
            failures_summary: Duration::from_secs(60),
        }
    }
}

pub(super) fn parse_tuning<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Tuning, ConfigError> {
    let d = Tuning::default();
    let qps = match get(keys::RATE_QPS) {
        None => d.qps,
        Some(v) => match v.parse::<f64>() {
            Ok(q) if (MIN_QPS..=MAX_QPS).contains(&q) => q,
            _ => {
                return Err(ConfigError::invalid(
                    keys::RATE_QPS,
                    v,
                    format!("expected a number from {MIN_QPS} to {MAX_QPS}"),
                ))
            }
        },
    };
    let positive = |key: &str, default: u64| -> Result<u64, ConfigError> {
        match get(key) {
            None => Ok(default),
            Some(v) => match v.parse::<u64>() {
                Ok(n) if n > 0 && n <= 1_000_000 => Ok(n),
                _ => Err(ConfigError::invalid(
                    key,
                    v,
                    "expected a whole number from 1 to 1000000",
                )),
            },
        }
    };
    let time = |key: &str, default: Duration| -> Result<Duration, ConfigError> {
        get(key).map_or(Ok(default), |v| positive_time(key, v))
    };
    Ok(Tuning {
        qps,
        burst: positive(keys::RATE_BURST, u64::from(d.burst))? as u32,
        max_in_flight: positive(keys::MAX_IN_FLIGHT, d.max_in_flight as u64)? as usize,
        dry_run: parse_bool(keys::DRY_RUN, get(keys::DRY_RUN), false)?,
        retry_max_wait: time(keys::RETRY_MAX_WAIT, d.retry_max_wait)?,
        forbidden_retry: time(keys::FORBIDDEN_RETRY, d.forbidden_retry)?,
        failures_summary: match lookup(get, keys::FAILURES_SUMMARY) {
            None => d.failures_summary,
            Some((key, v)) => positive_time(key, v)?,
        },
    })
}

/// Slowest accepted DELETE rate: one every 1,000 s (the token bucket's waits stay finite).
pub const MIN_QPS: f64 = 0.001;
/// Fastest accepted DELETE rate.
pub const MAX_QPS: f64 = 1_000_000.0;
