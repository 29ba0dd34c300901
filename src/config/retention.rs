//! The keys that say how long terminated driver pods stay: the retain period by outcome, the
//! per-scope cap, the per-pod annotations; and two neighbours read with them (Kubernetes Events,
//! the leader's scope-wide watch beside owner-scoped informers).
//!
//! # Guarantees
//! * Unset, every key keeps Kyuubi 1.12.0's decisions: one retain period for every terminated
//!   driver pod (`kyuubi.kubernetes.terminatedApplicationRetainPeriod`), no cap, annotations
//!   ignored, no Events.

use std::time::Duration;

use super::{keys, parse_bool, positive_time, ConfigError};
use crate::model::AppState;

/// How long terminated driver pods stay, per scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retention {
    /// FINISHED drivers: Kyuubi's retain period.
    pub succeeded: Duration,
    /// Drivers that did not finish (FAILED, KILLED, NOT_FOUND, Kyuubi's failed ones):
    /// `failed.retainPeriod`, else Kyuubi's retain period.
    pub failed: Duration,
    /// At most this many terminated driver pods wait for their retain period per scope; past it
    /// the oldest are deleted at once. 0: no cap.
    pub max_terminated: usize,
    /// Annotations are honoured up to this retain period; `None`: annotations are ignored.
    pub annotation_max: Option<Duration>,
}

impl Retention {
    /// Kyuubi's: one retain period, no cap, no annotations.
    pub fn uniform(retain: Duration) -> Self {
        Retention {
            succeeded: retain,
            failed: retain,
            max_terminated: 0,
            annotation_max: None,
        }
    }

    /// The operator's retain period of a pod that terminated in `state`.
    pub fn for_state(&self, state: AppState) -> Duration {
        if state == AppState::Finished {
            self.succeeded
        } else {
            self.failed
        }
    }

    /// The longest any pod can wait for its retain period (an annotation's `keep` aside).
    pub fn longest(&self) -> Duration {
        let base = self.succeeded.max(self.failed);
        self.annotation_max.map_or(base, |m| m.max(base))
    }
}

/// The leader's scope-wide watch beside the JVM's informers (`scopeWatch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopeWatch {
    /// On when Kyuubi's informers see only their own pods
    /// (`kyuubi.kubernetes.application.ownerScopedWatch.enabled`).
    Auto,
    On,
    Off,
}

impl ScopeWatch {
    /// Whether the leaders watch their whole scope; never in self-watch mode (they do anyway).
    pub fn resolve<'a>(self, get: &impl Fn(&str) -> Option<&'a str>, self_watch: bool) -> bool {
        if self_watch {
            return false;
        }
        match self {
            ScopeWatch::On => true,
            ScopeWatch::Off => false,
            ScopeWatch::Auto => {
                get(keys::OWNER_SCOPED_WATCH).is_some_and(|v| v.eq_ignore_ascii_case("true"))
            }
        }
    }
}

pub(super) fn parse_retention<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    retain: Duration,
) -> Result<Retention, ConfigError> {
    let failed = match get(keys::FAILED_RETAIN_PERIOD) {
        None => retain,
        Some(v) => positive_time(keys::FAILED_RETAIN_PERIOD, v)?,
    };
    let max_terminated = match get(keys::MAX_TERMINATED_PODS) {
        None => 0,
        Some(v) => match v.parse::<u64>() {
            Ok(n) if n <= MAX_CAP => n as usize,
            _ => {
                return Err(ConfigError::invalid(
                    keys::MAX_TERMINATED_PODS,
                    v,
                    format!("expected a whole number from 0 (no cap) to {MAX_CAP}"),
                ))
            }
        },
    };
    let enabled = parse_bool(
        keys::ANNOTATIONS_ENABLED,
        get(keys::ANNOTATIONS_ENABLED),
        false,
    )?;
    let max = match get(keys::ANNOTATIONS_MAX_RETAIN) {
        None => DEFAULT_ANNOTATION_MAX,
        Some(v) => positive_time(keys::ANNOTATIONS_MAX_RETAIN, v)?,
    };
    Ok(Retention {
        succeeded: retain,
        failed,
        max_terminated,
        annotation_max: enabled.then_some(max),
    })
}

pub(super) fn parse_events<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<Option<f64>, ConfigError> {
    let qps = match get(keys::EVENTS_QPS) {
        None => DEFAULT_EVENTS_QPS,
        Some(v) => match v.parse::<f64>() {
            Ok(q) if (MIN_EVENTS_QPS..=MAX_EVENTS_QPS).contains(&q) => q,
            _ => {
                return Err(ConfigError::invalid(
                    keys::EVENTS_QPS,
                    v,
                    format!("expected a number from {MIN_EVENTS_QPS} to {MAX_EVENTS_QPS}"),
                ))
            }
        },
    };
    let on = parse_bool(keys::EVENTS_ENABLED, get(keys::EVENTS_ENABLED), false)?;
    Ok(on.then_some(qps))
}

pub(super) fn parse_scope_watch<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<ScopeWatch, ConfigError> {
    match get(keys::SCOPE_WATCH) {
        None => Ok(ScopeWatch::Auto),
        Some(v) => match v.to_ascii_uppercase().as_str() {
            "AUTO" => Ok(ScopeWatch::Auto),
            "ON" => Ok(ScopeWatch::On),
            "OFF" => Ok(ScopeWatch::Off),
            _ => Err(ConfigError::invalid(
                keys::SCOPE_WATCH,
                v,
                "expected AUTO, ON or OFF",
            )),
        },
    }
}

/// The largest cap accepted.
pub const MAX_CAP: u64 = 10_000_000;
/// `annotations.maxRetainPeriod` when unset: seven days.
pub const DEFAULT_ANNOTATION_MAX: Duration = Duration::from_secs(7 * 24 * 3600);
/// Events per second per scope when `events.qps` is unset.
pub const DEFAULT_EVENTS_QPS: f64 = 5.0;
pub const MIN_EVENTS_QPS: f64 = 0.01;
pub const MAX_EVENTS_QPS: f64 = 1000.0;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{conf_of, Settings};

    #[test]
    fn unset_keys_keep_kyuubis_one_retain_period() {
        let s = Settings::from_map(conf_of(&[])).unwrap();
        assert_eq!(s.retention, Retention::uniform(Duration::from_secs(300)));
        assert_eq!(s.events_qps, None);
        assert!(!s.scope_watch);
    }

    #[test]
    fn failed_cap_and_annotations() {
        let s = Settings::from_map(conf_of(&[
            (keys::RETAIN_PERIOD, "PT1M"),
            (keys::FAILED_RETAIN_PERIOD, "P1D"),
            (keys::MAX_TERMINATED_PODS, "500"),
            (keys::ANNOTATIONS_ENABLED, "true"),
        ]))
        .unwrap();
        let r = &s.retention;
        assert_eq!(r.for_state(AppState::Finished), Duration::from_secs(60));
        assert_eq!(r.for_state(AppState::Failed), Duration::from_secs(86400));
        assert_eq!(r.for_state(AppState::Killed), Duration::from_secs(86400));
        assert_eq!(r.for_state(AppState::NotFound), Duration::from_secs(86400));
        assert_eq!(r.max_terminated, 500);
        assert_eq!(r.annotation_max, Some(DEFAULT_ANNOTATION_MAX));
        for (k, v) in [
            (keys::MAX_TERMINATED_PODS, "-1"),
            (keys::MAX_TERMINATED_PODS, "10000001"),
            (keys::FAILED_RETAIN_PERIOD, "0"),
            (keys::ANNOTATIONS_MAX_RETAIN, "soon"),
            (keys::EVENTS_QPS, "0"),
            (keys::SCOPE_WATCH, "maybe"),
        ] {
            let e = Settings::from_map(conf_of(&[(k, v)])).unwrap_err();
            assert_eq!(e.key(), k, "{v}");
        }
    }

    #[test]
    fn owner_scoped_informers_turn_the_scope_watch_on() {
        let on = |pairs: &[(&str, &str)]| Settings::from_map(conf_of(pairs)).unwrap().scope_watch;
        assert!(on(&[(keys::OWNER_SCOPED_WATCH, "true")]));
        assert!(!on(&[(keys::OWNER_SCOPED_WATCH, "false")]));
        assert!(!on(&[
            (keys::OWNER_SCOPED_WATCH, "true"),
            (keys::SCOPE_WATCH, "off")
        ]));
        assert!(on(&[(keys::SCOPE_WATCH, "ON")]));
        // Self-watch mode watches the whole scope anyway.
        assert!(!on(&[
            (keys::OWNER_SCOPED_WATCH, "true"),
            (keys::WATCH_ENABLED, "true")
        ]));
    }
}
