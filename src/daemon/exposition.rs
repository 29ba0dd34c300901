//! The daemon's answers: `/healthz` from the scopes' health, `/metrics` in Prometheus' text
//! exposition format (version 0.0.4) or OpenMetrics, both computed from the engine's status of
//! every scope. The formats (names, `HELP` / `TYPE`, escaping, histograms) are the
//! `prometheus-client` crate's.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    prometheus_text, text, DescriptorEncoder, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use serde_json::Value;

use crate::pause::PauseKind;

mod apf;

/// A scope's status is unhealthy after its pod watch has failed this long.
pub const WATCH_FAILING_UNHEALTHY_MS: u64 = 60_000;

/// Why the daemon is not healthy; empty when it is.
pub fn health_reasons(scopes: &[Value]) -> Vec<String> {
    if scopes.is_empty() {
        return vec!["no scope is watched (see the log: kind NONE, or the allow lists refuse every configured scope)".into()];
    }
    let mut out = Vec::new();
    if !scopes.iter().any(|s| s["known"] != false) {
        out.push("no scope is watched (see the log: kind NONE, or the allow lists refuse every configured scope)".into());
    }
    for s in scopes {
        let name = s["scope"].as_str().unwrap_or("?");
        if s["healthy"] == false {
            match s["health_reasons"].as_array().filter(|r| !r.is_empty()) {
                Some(reasons) => {
                    for why in reasons {
                        out.push(format!(
                            "scope {name}: {}",
                            why.as_str().unwrap_or("unhealthy")
                        ));
                    }
                }
                None => {
                    let why = s["health_reason"].as_str().unwrap_or("unhealthy");
                    out.push(format!("scope {name}: {why}"));
                }
            }
        }
        let failing = s["watch_failing_ms"].as_u64().unwrap_or(0);
        if failing >= WATCH_FAILING_UNHEALTHY_MS {
            let why = s["watch_last_error"].as_str().unwrap_or("unknown error");
            out.push(format!(
                "scope {name}: its pod watch has failed for {}s: {why}",
                failing / 1000
            ));
        }
    }
    out
}

/// Every open pause of every scope, one line each: `scope S: paused (REASON) for Ns, until T:
/// DETAIL` (`with no known end` when open-ended; `until its next answer` when its time has
/// passed and it waits for an answer, see `crate::pause`).
pub fn pause_lines(scopes: &[Value]) -> Vec<String> {
    let mut out = Vec::new();
    for s in scopes {
        let name = s["scope"].as_str().unwrap_or("?");
        for p in s["pauses"].as_array().into_iter().flatten() {
            let until = match p["until_ms"].as_u64() {
                Some(ms) => format!("until {}", rfc3339(ms)),
                None if p["reason"] == "retry_after" => "until its next answer".to_owned(),
                None => "with no known end".to_owned(),
            };
            out.push(format!(
                "scope {name}: paused ({}) for {}s, {until}{}: {}",
                p["reason"].as_str().unwrap_or("?"),
                p["pause_ms"].as_u64().unwrap_or(0) / 1000,
                if p["unhealthy"] == true {
                    ", unhealthy"
                } else {
                    ""
                },
                p["detail"].as_str().unwrap_or("")
            ));
        }
    }
    out
}

/// Epoch milliseconds as an RFC 3339 time (UTC, whole seconds).
fn rfc3339(ms: u64) -> String {
    i64::try_from(ms / 1000)
        .ok()
        .and_then(|s| jiff::Timestamp::from_second(s).ok())
        .map_or_else(|| format!("{ms} ms after the epoch"), |t| t.to_string())
}

/// The two text formats `/metrics` speaks: Prometheus' (version 0.0.4, the default) and
/// OpenMetrics 1.0 (when the scraper's `Accept` header asks for `application/openmetrics-text`, as
/// Prometheus does). Both are written by the `prometheus-client` crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Prometheus,
    OpenMetrics,
}

impl Format {
    /// OpenMetrics when `accept` names it, else Prometheus' text format.
    pub fn from_accept(accept: Option<&str>) -> Self {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// A gauge or counter read from a scope's status. Counters are named without `_total`: the
/// encoder appends it (`podsweep_restarts` is exposed as `podsweep_restarts_total`).
struct Family {
    name: &'static str,
    kind: MetricType,
    help: &'static str,
    value: fn(&Value) -> Option<f64>,
}

fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        other => other.as_f64(),
    }
}

const FAMILIES: &[Family] = &[
    Family {
        name: "podsweep_leader",
        kind: MetricType::Gauge,
        help: "1 while this server leads the scope's cleanup.",
        value: |s| num(&s["leader"]),
    },
    Family {
        name: "podsweep_healthy",
        kind: MetricType::Gauge,
        help: "1 while the scope is healthy.",
        value: |s| num(&s["healthy"]),
    },
    Family {
        name: "podsweep_tracked_pods",
        kind: MetricType::Gauge,
        help: "Terminated driver pods tracked for deletion.",
        value: |s| num(&s["tracked"]),
    },
    Family {
        name: "podsweep_due_pods",
        kind: MetricType::Gauge,
        help: "Tracked pods past their deadline, not deleted yet.",
        value: |s| num(&s["due"]),
    },
    Family {
        name: "podsweep_inflight_deletes",
        kind: MetricType::Gauge,
        help: "DELETE requests in flight.",
        value: |s| num(&s["inflight"]),
    },
    Family {
        name: "podsweep_oldest_overdue_seconds",
        kind: MetricType::Gauge,
        help: "Age of the oldest pod past its deadline.",
        value: |s| s["oldest_overdue_ms"].as_f64().map(|ms| ms / 1000.0),
    },
    Family {
        name: "podsweep_queued_commands",
        kind: MetricType::Gauge,
        help: "Events and commands waiting in the scope task's queue.",
        value: |s| num(&s["queued"]),
    },
    Family {
        name: "podsweep_restarts",
        kind: MetricType::Counter,
        help: "Restarts of the scope's tasks (cleanup, election, pod watch) after a failure.",
        value: |s| num(&s["restarts"]),
    },
    Family {
        name: "podsweep_watching",
        kind: MetricType::Gauge,
        help: "1 while this server holds the scope's pod watch.",
        value: |s| num(&s["watching"]),
    },
    Family {
        name: "podsweep_watch_streams",
        kind: MetricType::Counter,
        help: "Pod watch lists started (each leadership term's first, and every relist).",
        value: |s| num(&s["watch_streams"]),
    },
    Family {
        name: "podsweep_watch_errors",
        kind: MetricType::Counter,
        help: "Errors met by the pod watch.",
        value: |s| num(&s["watch_errors"]),
    },
    Family {
        name: "podsweep_observed",
        kind: MetricType::Counter,
        help: "Driver pod events the scope's task received.",
        value: |s| num(&s["observed"]),
    },
    Family {
        name: "podsweep_deletes_sent",
        kind: MetricType::Counter,
        help: "DELETE requests sent.",
        value: |s| num(&s["deletes_sent"]),
    },
    Family {
        name: "podsweep_capped",
        kind: MetricType::Counter,
        help: "Pods deleted before their retain period ended because the scope was over its cap (maxTerminatedPods).",
        value: |s| num(&s["capped"]),
    },
    Family {
        name: "podsweep_kept_pods",
        kind: MetricType::Gauge,
        help: "Pods kept from deletion by retain period by their podsweep.org/keep annotation now.",
        value: |s| num(&s["kept"]),
    },
    Family {
        name: "podsweep_annotations_malformed",
        kind: MetricType::Counter,
        help: "Pods whose podsweep annotations could not be read (the operator's period applied).",
        value: |s| num(&s["annotations_malformed"]),
    },
    Family {
        name: "podsweep_events_sent",
        kind: MetricType::Counter,
        help: "Kubernetes Events recorded about deleted or refused pods (events.enabled).",
        value: |s| num(&s["events_sent"]),
    },
    Family {
        name: "podsweep_events_failed",
        kind: MetricType::Counter,
        help: "Kubernetes Events the API server did not record (refused, unreachable).",
        value: |s| num(&s["events_failed"]),
    },
    Family {
        name: "podsweep_events_dropped",
        kind: MetricType::Counter,
        help: "Kubernetes Events left out by events.qps.",
        value: |s| num(&s["events_dropped"]),
    },
    Family {
        name: "podsweep_leadership_transitions",
        kind: MetricType::Counter,
        help: "Changes of this server's leadership state for the scope.",
        value: |s| num(&s["leadership_transitions"]),
    },
];

type Labels = Vec<(&'static str, String)>;

fn labels(s: &Value) -> Labels {
    vec![
        ("context", s["context"].as_str().unwrap_or("").to_owned()),
        (
            "namespace",
            s["namespace"].as_str().unwrap_or("").to_owned(),
        ),
    ]
}

fn with(mut l: Labels, key: &'static str, value: &str) -> Labels {
    l.push((key, value.to_owned()));
    l
}

/// A value as the encoder writes it: whole numbers without a fraction (`130`, not `130.0`).
fn encode_value(m: &mut MetricEncoder, kind: MetricType, v: f64) -> fmt::Result {
    let whole = v.fract() == 0.0 && v.abs() < 9.0e15;
    match (kind, whole) {
        // Status counters are never negative; a negative one would be a bug, shown as 0.
        (MetricType::Counter, true) => {
            m.encode_counter::<NoLabelSet, _, u64>(&(v.max(0.0) as u64), None)
        }
        (MetricType::Counter, false) => m.encode_counter::<NoLabelSet, _, u64>(&v.max(0.0), None),
        (_, true) => m.encode_gauge(&(v as i64)),
        (_, false) => m.encode_gauge(&v),
    }
}

/// Every scope's status, read at scrape time; `prometheus-client` writes the families.
#[derive(Debug)]
struct Scopes(Vec<Value>);

impl Scopes {
    fn open_pause(s: &Value, kind: &str) -> Option<Value> {
        s["pauses"]
            .as_array()?
            .iter()
            .find(|p| p["reason"] == kind)
            .cloned()
    }

    /// `podsweep_paused` and `podsweep_pause_seconds` for every kind of pause (0 when not paused
    /// by it, so an alert reads a series that exists), and
    /// `podsweep_pause_until_timestamp_seconds` for each open pause with a known end.
    fn pauses(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let mut m = encoder.encode_descriptor(
            "podsweep_paused",
            "1 while the scope is held back for this reason (refused, ha_session_lost, step_down_hold, restarting, watch_failing, retry_after, backoff).",
            None,
            MetricType::Gauge,
        )?;
        for s in &self.0 {
            for k in PauseKind::ALL {
                let v = i64::from(Self::open_pause(s, k.as_str()).is_some());
                m.encode_family(&with(labels(s), "reason", k.as_str()))?
                    .encode_gauge(&v)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "podsweep_pause_seconds",
            "How long the scope's open pause of this reason has lasted (0 when not paused by it).",
            None,
            MetricType::Gauge,
        )?;
        for s in &self.0 {
            for k in PauseKind::ALL {
                let secs = Self::open_pause(s, k.as_str())
                    .and_then(|p| p["pause_ms"].as_f64())
                    .unwrap_or(0.0)
                    / 1000.0;
                let l = with(labels(s), "reason", k.as_str());
                encode_value(&mut m.encode_family(&l)?, MetricType::Gauge, secs)?;
            }
        }
        let mut m = encoder.encode_descriptor(
            "podsweep_pause_until_timestamp_seconds",
            "When the scope's open pause of this reason ends (Unix time); absent when open-ended or not paused.",
            None,
            MetricType::Gauge,
        )?;
        for s in &self.0 {
            for k in PauseKind::ALL {
                if let Some(ms) =
                    Self::open_pause(s, k.as_str()).and_then(|p| p["until_ms"].as_f64())
                {
                    let l = with(labels(s), "reason", k.as_str());
                    encode_value(&mut m.encode_family(&l)?, MetricType::Gauge, ms / 1000.0)?;
                }
            }
        }
        Ok(())
    }

    /// `podsweep_delete_lag_seconds`: the scope's lag histogram (per-bucket counts, the last one
    /// above every bound; the encoder sums them up).
    fn lag(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let mut m = encoder.encode_descriptor(
            "podsweep_delete_lag_seconds",
            "From a pod's deadline to its accepted DELETE.",
            None,
            MetricType::Histogram,
        )?;
        for s in &self.0 {
            let lag = &s["lag"];
            let (Some(bounds), Some(counts)) = (
                lag["bucket_bounds_seconds"].as_array(),
                lag["bucket_counts"].as_array(),
            ) else {
                continue;
            };
            let mut buckets: Vec<(f64, u64)> = bounds
                .iter()
                .zip(counts)
                .map(|(b, n)| (b.as_f64().unwrap_or(0.0), n.as_u64().unwrap_or(0)))
                .collect();
            let total = lag["count"].as_u64().unwrap_or(0);
            let below: u64 = buckets.iter().map(|(_, n)| n).sum();
            buckets.push((f64::INFINITY, total.saturating_sub(below)));
            m.encode_family(&labels(s))?
                .encode_histogram::<NoLabelSet>(
                    lag["sum_seconds"].as_f64().unwrap_or(0.0),
                    total,
                    &buckets,
                    None,
                )?;
        }
        Ok(())
    }
}

impl Collector for Scopes {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        for f in FAMILIES {
            let mut m = encoder.encode_descriptor(f.name, f.help, None, f.kind)?;
            for s in &self.0 {
                if let Some(v) = (f.value)(s) {
                    encode_value(&mut m.encode_family(&labels(s))?, f.kind, v)?;
                }
            }
        }
        self.pauses(&mut encoder)?;
        let mut m = encoder.encode_descriptor(
            "podsweep_delete_outcomes",
            "DELETE answers by outcome (accepted, already_absent, replaced, forbidden, throttled, server_error, transport, other).",
            None,
            MetricType::Counter,
        )?;
        for s in &self.0 {
            if let Some(outcomes) = s["outcomes"].as_object() {
                for (outcome, n) in outcomes {
                    m.encode_family(&with(labels(s), "outcome", outcome))?
                        .encode_counter::<NoLabelSet, _, u64>(&n.as_u64().unwrap_or(0), None)?;
                }
            }
        }
        self.lag(&mut encoder)?;
        self.apf(&mut encoder)?;
        self.election(&mut encoder)
    }
}

impl Scopes {
    /// `podsweep_election_info`: 1 per scope whose election key is read, labelled with the key's
    /// kind (`cluster`, `url`), the election layout and whether podsweep 0.1's election is won
    /// first ([`crate::identity`]).
    fn election(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let mut m = encoder.encode_descriptor(
            "podsweep_election_info",
            "1 per scope whose election key is read: key_kind (cluster, url), layout, and legacy (true when podsweep 0.1's URL-keyed election is won first).",
            None,
            MetricType::Gauge,
        )?;
        for s in &self.0 {
            let Some(kind) = s["election_key_kind"].as_str() else {
                continue;
            };
            let l = with(labels(s), "key_kind", kind);
            let l = with(l, "layout", &s["election_layout"].to_string());
            let l = with(l, "legacy", &(!s["election_legacy"].is_null()).to_string());
            m.encode_family(&l)?.encode_gauge(&1i64)?;
        }
        Ok(())
    }
}

/// Every scope's figures in the given text format.
pub fn metrics(scopes: &[Value], format: Format) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Scopes(scopes.to_vec())));
    let mut out = String::new();
    // Writing to a String cannot fail; an encoder error would leave a partial answer, which the
    // scraper rejects as it would an empty one.
    let _ = match format {
        Format::Prometheus => prometheus_text::encode(&mut out, &registry),
        Format::OpenMetrics => text::encode(&mut out, &registry),
    };
    out
}

/// Every scope's figures in Prometheus' text format.
pub fn prometheus(scopes: &[Value]) -> String {
    metrics(scopes, Format::Prometheus)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn scope(healthy: bool) -> Value {
        json!({
            "scope": "prod:spark", "context": "prod", "namespace": "sp\"ark",
            "leader": 1, "healthy": healthy, "health_reason": if healthy { Value::Null } else { "no leader".into() },
            "tracked": 3, "due": 1, "inflight": 0, "oldest_overdue_ms": 1500,
            "watching": true, "watch_streams": 2, "watch_errors": 1, "watch_failing_ms": 0,
            "observed": 9, "deletes_sent": 4, "leadership_transitions": 1,
            "outcomes": {"accepted": 3, "already_absent": 1},
            "lag": {"count": 4, "sum_seconds": 0.5, "bucket_bounds_seconds": [0.1, 0.2],
                    "bucket_counts": [3, 0, 1]}
        })
    }

    /// Issue 32: the retention and Events counters of the status are exported too.
    #[test]
    fn retention_and_events_counters_are_exported() {
        let mut st = scope(true);
        for (k, v) in [
            ("capped", 5),
            ("kept", 2),
            ("annotations_malformed", 3),
            ("events_sent", 7),
            ("events_failed", 4),
            ("events_dropped", 6),
        ] {
            st[k] = json!(v);
        }
        let text = prometheus(&[st]);
        let l = "context=\"prod\",namespace=\"sp\\\"ark\"";
        for line in [
            format!("podsweep_capped_total{{{l}}} 5"),
            format!("podsweep_kept_pods{{{l}}} 2"),
            format!("podsweep_annotations_malformed_total{{{l}}} 3"),
            format!("podsweep_events_sent_total{{{l}}} 7"),
            format!("podsweep_events_failed_total{{{l}}} 4"),
            format!("podsweep_events_dropped_total{{{l}}} 6"),
        ] {
            assert!(
                text.lines().any(|x| x == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn text_exposition() {
        let text = prometheus(&[scope(true)]);
        let l = "context=\"prod\",namespace=\"sp\\\"ark\"";
        for line in [
            "# TYPE podsweep_leader gauge".to_owned(),
            format!("podsweep_leader{{{l}}} 1"),
            format!("podsweep_healthy{{{l}}} 1"),
            format!("podsweep_oldest_overdue_seconds{{{l}}} 1.5"),
            format!("podsweep_watch_streams_total{{{l}}} 2"),
            format!("podsweep_delete_outcomes_total{{{l},outcome=\"accepted\"}} 3"),
            format!("podsweep_delete_lag_seconds_bucket{{{l},le=\"0.1\"}} 3"),
            format!("podsweep_delete_lag_seconds_bucket{{{l},le=\"0.2\"}} 3"),
            format!("podsweep_delete_lag_seconds_bucket{{{l},le=\"+Inf\"}} 4"),
            format!("podsweep_delete_lag_seconds_count{{{l}}} 4"),
        ] {
            assert!(
                text.lines().any(|x| x == line),
                "missing {line:?} in\n{text}"
            );
        }
    }

    #[test]
    fn openmetrics_exposition() {
        let text = metrics(&[scope(true)], Format::OpenMetrics);
        let l = "context=\"prod\",namespace=\"sp\\\"ark\"";
        for line in [
            "# TYPE podsweep_restarts counter".to_owned(),
            "# TYPE podsweep_delete_lag_seconds histogram".to_owned(),
            format!("podsweep_leader{{{l}}} 1"),
            format!("podsweep_watch_streams_total{{{l}}} 2"),
            // OpenMetrics' encoder writes `le` first.
            format!("podsweep_delete_lag_seconds_bucket{{le=\"+Inf\",{l}}} 4"),
            "# EOF".to_owned(),
        ] {
            assert!(
                text.lines().any(|x| x == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(
            Format::from_accept(Some(
                "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
            )),
            Format::OpenMetrics
        );
        assert_eq!(Format::from_accept(Some("*/*")), Format::Prometheus);
        assert_eq!(Format::from_accept(None), Format::Prometheus);
    }

    /// Every metric name the alert rules (`docs/alerts/podsweep-rules.yaml`, group
    /// `podsweep-daemon`) read is one `/metrics` exposes.
    #[test]
    fn the_alert_rules_read_exposed_names() {
        let rules = include_str!("../../docs/alerts/podsweep-rules.yaml");
        let mut s = scope(true);
        s["pauses"] = json!([{"reason": "retry_after", "pause_ms": 1, "until_ms": 2}]);
        s["restarts"] = 0.into();
        s["queued"] = 0.into();
        let text = prometheus(&[s]);
        let exposed: Vec<&str> = text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split(['{', ' ']).next())
            .collect();
        let mut read = 0;
        for word in rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("podsweep_") {
                read += 1;
                assert!(
                    exposed.contains(&word),
                    "{word} is read by an alert rule but not exposed"
                );
            }
        }
        assert!(read > 5, "the rules read {read} podsweep_ names");
    }

    #[test]
    fn pauses_in_the_exposition_and_in_healthz() {
        let mut s = scope(true);
        s["pauses"] = json!([{
            "reason": "retry_after", "detail": "429", "since_ms": 1_000, "until_ms": 1_796_366_707_000u64,
            "pause_ms": 4_000, "unhealthy": false
        }, {
            "reason": "ha_session_lost", "detail": "PAUSED", "since_ms": 1_000, "until_ms": null,
            "pause_ms": 130_000, "unhealthy": true
        }]);
        let text = prometheus(std::slice::from_ref(&s));
        let l = "context=\"prod\",namespace=\"sp\\\"ark\"";
        for line in [
            format!("podsweep_paused{{{l},reason=\"retry_after\"}} 1"),
            format!("podsweep_paused{{{l},reason=\"backoff\"}} 0"),
            format!("podsweep_pause_seconds{{{l},reason=\"ha_session_lost\"}} 130"),
            format!("podsweep_pause_seconds{{{l},reason=\"refused\"}} 0"),
            format!(
                "podsweep_pause_until_timestamp_seconds{{{l},reason=\"retry_after\"}} 1796366707"
            ),
        ] {
            assert!(
                text.lines().any(|x| x == line),
                "missing {line:?} in\n{text}"
            );
        }
        assert!(!text.contains("podsweep_pause_until_timestamp_seconds{context=\"prod\",namespace=\"sp\\\"ark\",reason=\"ha_session_lost\"}"));
        let lines = pause_lines(&[s]);
        assert_eq!(
            lines,
            [
                "scope prod:spark: paused (retry_after) for 4s, until 2026-12-04T06:45:07Z: 429",
                "scope prod:spark: paused (ha_session_lost) for 130s, with no known end, unhealthy: PAUSED"
            ]
        );
    }

    #[test]
    fn health() {
        assert!(health_reasons(&[scope(true)]).is_empty());
        let r = health_reasons(&[scope(false)]);
        assert_eq!(r, ["scope prod:spark: no leader"]);
        assert_eq!(health_reasons(&[]).len(), 1);
        let mut failing = scope(true);
        failing["watch_failing_ms"] = 61_000.into();
        failing["watch_last_error"] = "403".into();
        let r = health_reasons(&[failing]);
        assert!(r[0].contains("failed for 61s: 403"), "{r:?}");
        // Every reason of an unhealthy scope, and a refused scope alone is no watched scope.
        let mut two = scope(false);
        two["health_reasons"] = json!(["no leader", "cannot list"]);
        assert_eq!(
            health_reasons(&[two]),
            [
                "scope prod:spark: no leader",
                "scope prod:spark: cannot list"
            ]
        );
        let refused =
            json!({"scope": "x", "known": false, "healthy": false, "health_reasons": ["refused"]});
        let r = health_reasons(&[refused]);
        assert!(
            r[0].starts_with("no scope is watched") && r[1] == "scope x: refused",
            "{r:?}"
        );
    }
}
