//! The keys that pace and retry DELETEs (rate, burst, in flight, dry run, retry and forbidden
//! waits): [`Tuning`] and its parsing.

use std::time::Duration;

use super::{keys, lookup, parse_bool, positive_time, ConfigError};

/// How DELETEs are paced and retried, per scope.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuning {
    /// Token-bucket rate of DELETEs per second: the ceiling of the adaptive pace.
    pub qps: f64,
    /// Token-bucket size.
    pub burst: u32,
    /// DELETEs in flight at most: the ceiling of the adaptive limit.
    pub max_in_flight: usize,
    /// The number of DELETEs in flight follows the API server's answers (grows while they are
    /// fast and not throttled, shrinks on 429, Retry-After and rising latency), below the
    /// ceilings above.
    pub adaptive: bool,
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
            qps: MAX_QPS,
            burst: 20,
            max_in_flight: ADAPTIVE_MAX_IN_FLIGHT,
            adaptive: true,
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
    let adaptive = parse_bool(keys::RATE_ADAPTIVE, get(keys::RATE_ADAPTIVE), true)?;
    let qps = match get(keys::RATE_QPS) {
        None if adaptive => d.qps,
        None => FIXED_QPS,
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
        max_in_flight: positive(
            keys::MAX_IN_FLIGHT,
            if adaptive {
                ADAPTIVE_MAX_IN_FLIGHT as u64
            } else {
                FIXED_MAX_IN_FLIGHT as u64
            },
        )? as usize,
        adaptive,
        dry_run: parse_bool(keys::DRY_RUN, get(keys::DRY_RUN), false)?,
        retry_max_wait: time(keys::RETRY_MAX_WAIT, d.retry_max_wait)?,
        forbidden_retry: time(keys::FORBIDDEN_RETRY, d.forbidden_retry)?,
        failures_summary: match lookup(get, keys::FAILURES_SUMMARY) {
            None => d.failures_summary,
            Some((key, v)) => positive_time(key, v)?,
        },
    })
}

/// The DELETE rate when the pace is not adaptive and `rateLimit.qps` is unset.
pub const FIXED_QPS: f64 = 10.0;
/// DELETEs in flight at most when the pace is not adaptive and `maxInFlight` is unset.
pub const FIXED_MAX_IN_FLIGHT: usize = 8;
/// The ceiling of the adaptive in-flight limit when `maxInFlight` is unset.
pub const ADAPTIVE_MAX_IN_FLIGHT: usize = 64;

/// Slowest accepted DELETE rate: one every 1,000 s (the token bucket's waits stay finite).
pub const MIN_QPS: f64 = 0.001;
/// Fastest accepted DELETE rate.
pub const MAX_QPS: f64 = 1_000_000.0;
