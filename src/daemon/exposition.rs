//! The daemon's answers: `/healthz` from the scopes' health, `/metrics` in Prometheus' text
//! exposition format (version 0.0.4), both computed from the engine's status of every scope.

use std::fmt::Write;

use serde_json::Value;

use crate::pause::PauseKind;

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

/// One metric family: name, type, help, and how to read its value from a scope's status.
struct Family {
    name: &'static str,
    kind: &'static str,
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
        kind: "gauge",
        help: "1 while this server leads the scope's cleanup.",
        value: |s| num(&s["leader"]),
    },
    Family {
        name: "podsweep_healthy",
        kind: "gauge",
        help: "1 while the scope is healthy.",
        value: |s| num(&s["healthy"]),
    },
    Family {
        name: "podsweep_tracked_pods",
        kind: "gauge",
        help: "Terminated driver pods tracked for deletion.",
        value: |s| num(&s["tracked"]),
    },
    Family {
        name: "podsweep_due_pods",
        kind: "gauge",
        help: "Tracked pods past their deadline, not deleted yet.",
        value: |s| num(&s["due"]),
    },
    Family {
        name: "podsweep_inflight_deletes",
        kind: "gauge",
        help: "DELETE requests in flight.",
        value: |s| num(&s["inflight"]),
    },
    Family {
        name: "podsweep_oldest_overdue_seconds",
        kind: "gauge",
        help: "Age of the oldest pod past its deadline.",
        value: |s| s["oldest_overdue_ms"].as_f64().map(|ms| ms / 1000.0),
    },
    Family {
        name: "podsweep_queued_commands",
        kind: "gauge",
        help: "Events and commands waiting in the scope task's queue.",
        value: |s| num(&s["queued"]),
    },
    Family {
        name: "podsweep_restarts_total",
        kind: "counter",
        help: "Restarts of the scope's tasks (cleanup, election, pod watch) after a failure.",
        value: |s| num(&s["restarts"]),
    },
    Family {
        name: "podsweep_watching",
        kind: "gauge",
        help: "1 while this server holds the scope's pod watch.",
        value: |s| num(&s["watching"]),
    },
    Family {
        name: "podsweep_watch_streams_total",
        kind: "counter",
        help: "Pod watch lists started (each leadership term's first, and every relist).",
        value: |s| num(&s["watch_streams"]),
    },
    Family {
        name: "podsweep_watch_errors_total",
        kind: "counter",
        help: "Errors met by the pod watch.",
        value: |s| num(&s["watch_errors"]),
    },
    Family {
        name: "podsweep_observed_total",
        kind: "counter",
        help: "Driver pod events the scope's task received.",
        value: |s| num(&s["observed"]),
    },
    Family {
        name: "podsweep_deletes_sent_total",
        kind: "counter",
        help: "DELETE requests sent.",
        value: |s| num(&s["deletes_sent"]),
    },
    Family {
        name: "podsweep_leadership_transitions_total",
        kind: "counter",
        help: "Changes of this server's leadership state for the scope.",
        value: |s| num(&s["leadership_transitions"]),
    },
];

/// Prometheus label value escaping: backslash, double quote, newline.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn labels(s: &Value) -> String {
    format!(
        "context=\"{}\",namespace=\"{}\"",
        escape(s["context"].as_str().unwrap_or("")),
        escape(s["namespace"].as_str().unwrap_or(""))
    )
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Every scope's figures, one family at a time.
pub fn prometheus(scopes: &[Value]) -> String {
    let mut out = String::new();
    for f in FAMILIES {
        header(&mut out, f.name, f.kind, f.help);
        for s in scopes {
            if let Some(v) = (f.value)(s) {
                let _ = writeln!(out, "{}{{{}}} {v}", f.name, labels(s));
            }
        }
    }
    pauses(&mut out, scopes);
    header(
        &mut out,
        "podsweep_delete_outcomes_total",
        "counter",
        "DELETE answers by outcome (accepted, already_absent, replaced, forbidden, throttled, server_error, transport, other).",
    );
    for s in scopes {
        if let Some(outcomes) = s["outcomes"].as_object() {
            for (outcome, n) in outcomes {
                let _ = writeln!(
                    out,
                    "podsweep_delete_outcomes_total{{{},outcome=\"{}\"}} {}",
                    labels(s),
                    escape(outcome),
                    n.as_u64().unwrap_or(0)
                );
            }
        }
    }
    header(
        &mut out,
        "podsweep_delete_lag_seconds",
        "histogram",
        "From a pod's deadline to its accepted DELETE.",
    );
    for s in scopes {
        lag_histogram(&mut out, s);
    }
    out
}

/// The pause families: `podsweep_paused` and `podsweep_pause_seconds` for every kind of pause
/// (0 when not paused by it, so an alert reads a series that exists), and
/// `podsweep_pause_until_timestamp_seconds` for each open pause with a known end.
fn pauses(out: &mut String, scopes: &[Value]) {
    let open = |s: &Value, kind: &str| -> Option<Value> {
        s["pauses"]
            .as_array()?
            .iter()
            .find(|p| p["reason"] == kind)
            .cloned()
    };
    header(
        out,
        "podsweep_paused",
        "gauge",
        "1 while the scope is held back for this reason (refused, ha_session_lost, step_down_hold, restarting, watch_failing, retry_after, backoff).",
    );
    for s in scopes {
        for k in PauseKind::ALL {
            let v = u8::from(open(s, k.as_str()).is_some());
            let _ = writeln!(
                out,
                "podsweep_paused{{{},reason=\"{}\"}} {v}",
                labels(s),
                k.as_str()
            );
        }
    }
    header(
        out,
        "podsweep_pause_seconds",
        "gauge",
        "How long the scope's open pause of this reason has lasted (0 when not paused by it).",
    );
    for s in scopes {
        for k in PauseKind::ALL {
            let secs = open(s, k.as_str())
                .and_then(|p| p["pause_ms"].as_f64())
                .unwrap_or(0.0)
                / 1000.0;
            let _ = writeln!(
                out,
                "podsweep_pause_seconds{{{},reason=\"{}\"}} {secs}",
                labels(s),
                k.as_str()
            );
        }
    }
    header(
        out,
        "podsweep_pause_until_timestamp_seconds",
        "gauge",
        "When the scope's open pause of this reason ends (Unix time); absent when open-ended or not paused.",
    );
    for s in scopes {
        for k in PauseKind::ALL {
            if let Some(ms) = open(s, k.as_str()).and_then(|p| p["until_ms"].as_f64()) {
                let _ = writeln!(
                    out,
                    "podsweep_pause_until_timestamp_seconds{{{},reason=\"{}\"}} {}",
                    labels(s),
                    k.as_str(),
                    ms / 1000.0
                );
            }
        }
    }
}

fn lag_histogram(out: &mut String, s: &Value) {
    let lag = &s["lag"];
    let (Some(bounds), Some(counts)) = (
        lag["bucket_bounds_seconds"].as_array(),
        lag["bucket_counts"].as_array(),
    ) else {
        return;
    };
    let l = labels(s);
    let mut cumulative = 0;
    for (bound, n) in bounds.iter().zip(counts) {
        cumulative += n.as_u64().unwrap_or(0);
        let _ = writeln!(
            out,
            "podsweep_delete_lag_seconds_bucket{{{l},le=\"{}\"}} {cumulative}",
            bound.as_f64().unwrap_or(0.0)
        );
    }
    let total = lag["count"].as_u64().unwrap_or(0);
    let _ = writeln!(
        out,
        "podsweep_delete_lag_seconds_bucket{{{l},le=\"+Inf\"}} {total}\n\
         podsweep_delete_lag_seconds_sum{{{l}}} {}\n\
         podsweep_delete_lag_seconds_count{{{l}}} {total}",
        lag["sum_seconds"].as_f64().unwrap_or(0.0)
    );
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
