//! `scripts/bench apf`: podsweep's drain beside a neighbour that floods the API server, with and
//! without the chart's API Priority and Fairness objects (issue 35 §2), one JSON line per run.
//!
//! `cargo bench --bench apf -- apf [--smoke]`. Each run has a fresh kube-apiserver of its own
//! (`scripts/kube up`: APF on, its default 600 seats), so that no run inherits another's state:
//! 1. The neighbour: `NEIGHBOUR_LOOPS` clients under a ServiceAccount of their own, each GETting
//!    one pod after the other, without pause (a closed-loop flood), classified by the API
//!    server's built-in `service-accounts` FlowSchema to `workload-low`.
//! 2. `with_flowschema` runs: the chart's FlowSchema and PriorityLevelConfiguration at the
//!    chart's defaults, rendered by Helm (`templates/flowcontrol.yaml`) for podsweep's ServiceAccount
//!    and applied as they are; the run waits until the API server classifies that account's
//!    requests at the chart's level. `with_small_level`: the same objects with the level rendered
//!    small (`apf::SMALL_LEVEL`: 3 seats, one queue of one request), so that APF rejects what podsweep
//!    sends beyond them (429 with `Retry-After`) and the line shows how podsweep answers that.
//!    `without` runs: podsweep's requests go to `workload-low` beside the neighbour's.
//! 3. `PODS` terminated driver pods, overdue; the neighbour floods alone for `IDLE` (its idle
//!    figures), then podsweep (one self-watching engine, its default pace) drains them.
//!
//! Measured: the drain rate (accepted DELETEs over first to last, from the audit log), podsweep's
//! 429s, the neighbour's p50 / p99 and rate alone and during the drain, the API server's
//! `apiserver_flowcontrol_*` figures of podsweep's level over the drain (seats, dispatched,
//! rejected, mean queue wait), and the API server's CPU seconds per deleted pod; after 429s, the
//! DELETEs the API server received within a second of one (podsweep honours `Retry-After`, at
//! least 1 s from APF: none expected after the first 250 ms, which cover requests already on their
//! way) and the pods sent again within their own 429's second.
//! `--smoke`: 100 pods, one run of each. Full: 3,000 pods, `without` and `with_flowschema` twice,
//! alternating, then `with_small_level`.

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant};

use common::apf::{self, FlowMetrics, Neighbour};
use common::real_kube::RealKube;
use podsweep::scope::Scope;
use serde_json::{json, Value};

const ACCOUNT: &str = "podsweep";
const NS: &str = "spark-drain";
const NEIGHBOUR_NS: &str = "neighbour";
const NEIGHBOUR_LOOPS: usize = 8;

fn progress(msg: &str) {
    eprintln!("[bench] {msg}");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    for n in args.iter().filter(|a| !a.starts_with('-')) {
        if n != "apf" {
            eprintln!("apf: unknown argument {n} (known: apf)");
            std::process::exit(2);
        }
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (pods, idle) = if smoke {
        (100, Duration::from_secs(2))
    } else {
        (3000, Duration::from_secs(8))
    };
    use Run::{Chart, SmallLevel, Without};
    let plan: &[Run] = if smoke {
        &[Without, Chart, SmallLevel]
    } else {
        &[Without, Chart, Without, Chart, SmallLevel]
    };
    for (i, kind) in plan.iter().enumerate() {
        let line = rt.block_on(run(i, *kind, pods, idle));
        common::bench::line("apf", line);
    }
}

/// What classifies podsweep's requests in a run.
#[derive(Clone, Copy, PartialEq)]
enum Run {
    /// No object of the chart's: the built-in `service-accounts` FlowSchema.
    Without,
    /// The chart's objects at its defaults.
    Chart,
    /// The chart's objects, the level rendered small (`apf::SMALL_LEVEL`).
    SmallLevel,
}

impl Run {
    fn label(self) -> &'static str {
        match self {
            Run::Without => "without",
            Run::Chart => "with_flowschema",
            Run::SmallLevel => "with_small_level",
        }
    }
}

/// The level podsweep's requests go to: the chart's, or the built-in one its ServiceAccount falls
/// to without the FlowSchema.
fn level_name(with: bool) -> &'static str {
    if with {
        apf::RELEASE
    } else {
        "workload-low"
    }
}

async fn run(i: usize, kind: Run, pods: usize, idle: Duration) -> Value {
    let label = kind.label();
    let with = kind != Run::Without;
    progress(&format!("apf run {i} ({label}): a fresh kube-apiserver"));
    let k = RealKube::fresh(&format!("podsweep-apf-bench-{i}-"));
    let admin = k.admin().await;
    k.namespace(NS).await;
    k.namespace(NEIGHBOUR_NS).await;
    let token = k.server_token(ACCOUNT).await;
    let neighbour_token = k.server_token("neighbour").await;
    k.running_pod(NEIGHBOUR_NS, "probe", &[], &[]).await;
    let mut chart = Value::Null;
    if with {
        let sets: &[&str] = if kind == Run::SmallLevel {
            apf::SMALL_LEVEL
        } else {
            &[]
        };
        let docs = apf::render(ACCOUNT, &[NS], sets);
        let uids = apf::apply(&admin, &docs).await;
        let level = uids
            .get("PriorityLevelConfiguration")
            .cloned()
            .unwrap_or_default();
        k.running_pod(NS, "running-driver", &[], &[]).await;
        let client = k.client(&token).await;
        let mut classified = false;
        for _ in 0..100 {
            let req = http::Request::get(format!("/api/v1/namespaces/{NS}/pods/running-driver"))
                .body(kube::client::Body::empty())
                .unwrap();
            if let Ok(resp) = client.send(req).await {
                let pl = resp
                    .headers()
                    .get("x-kubernetes-pf-prioritylevel-uid")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default();
                if pl == level {
                    classified = true;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let pl = docs
            .iter()
            .find(|d| d["kind"] == "PriorityLevelConfiguration")
            .map(|d| d["spec"]["limited"].clone());
        chart = json!({"classified": classified, "priority_level": pl});
    }
    progress(&format!("apf run {i} ({label}): {pods} terminated pods"));
    apf::backlog(&k, NS, pods, 16).await;
    let flood =
        Neighbour::start(&k, &neighbour_token, NEIGHBOUR_NS, "probe", NEIGHBOUR_LOOPS).await;
    let idle_from = Instant::now();
    tokio::time::sleep(idle).await;
    let drain_from = Instant::now();
    let before = FlowMetrics::read(&admin).await;
    let cpu_before = k.apiserver_cpu_s();
    progress(&format!("apf run {i} ({label}): podsweep drains"));
    let e = apf::self_watch_engine(&k, &token, NS, "apf-bench");
    let deadline = Instant::now() + Duration::from_secs(600);
    let user = RealKube::user_of(ACCOUNT);
    let mut deletes = Vec::new();
    while Instant::now() < deadline {
        deletes = apf::timed_deletes(&k, NS);
        if deletes
            .iter()
            .filter(|d| d.code == 200 && d.user == user)
            .count()
            >= pods
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drain_to = Instant::now();
    let cpu_after = k.apiserver_cpu_s();
    let after = FlowMetrics::read(&admin).await;
    let answers = flood.stop().await;
    let st: Value =
        serde_json::from_str(&e.status_json(&Scope::new(None, Some(NS)))).unwrap_or(Value::Null);
    e.close_async(Duration::from_secs(5)).await;
    k.stop();

    let mine: Vec<_> = deletes.iter().filter(|d| d.user == user).collect();
    let ok: Vec<_> = mine.iter().filter(|d| d.code == 200).collect();
    let span = match (ok.first(), ok.last()) {
        (Some(f), Some(l)) => l
            .received
            .duration_since(f.received)
            .unwrap_or_default()
            .as_secs_f64()
            .max(1e-3),
        _ => f64::NAN,
    };
    let pl = [("priority_level", level_name(with))];
    let mine_pl = [
        ("priority_level", level_name(with)),
        (
            "flow_schema",
            if with {
                apf::RELEASE
            } else {
                "service-accounts"
            },
        ),
    ];
    let d = |name: &str, with: &[(&str, &str)]| before.delta(&after, name, with);
    let waits = d(
        "apiserver_flowcontrol_request_wait_duration_seconds_count",
        &mine_pl,
    );
    let wait_sum = d(
        "apiserver_flowcontrol_request_wait_duration_seconds_sum",
        &mine_pl,
    );
    let idle_fig = apf::latency(&answers, idle_from, drain_from);
    let during = apf::latency(&answers, drain_from, drain_to);
    let ratio = match (idle_fig["p99_ms"].as_f64(), during["p99_ms"].as_f64()) {
        (Some(a), Some(b)) if a > 0.0 => Value::from((b / a * 100.0).round() / 100.0),
        _ => Value::Null,
    };
    // After a 429: DELETEs received within its second (past the first 250 ms, requests already on
    // their way), and pods sent again within their own 429's second.
    let mine_owned: Vec<apf::TimedDelete> = mine.iter().map(|d| (*d).clone()).collect();
    let window = Duration::from_millis(950);
    let hot = apf::sent_during_retry_after(&mine_owned, window, Duration::from_millis(250));
    let retried_hot = apf::sent_during_retry_after(&mine_owned, window, Duration::ZERO)
        .into_iter()
        .filter(|(rejected, late, _, _)| rejected == late)
        .count();
    let cpu = match (cpu_before, cpu_after) {
        (Some(b), Some(a)) if !ok.is_empty() => {
            Value::from(((a - b) / ok.len() as f64 * 1e6).round() / 1e3)
        }
        _ => Value::Null,
    };
    json!({
        "run": label,
        "api_server": format!("kube-apiserver {}", k.version),
        "pods": pods,
        "drained": ok.len() >= pods,
        "podsweep": {
            "delete_requests": mine.len(),
            "accepted": ok.len(),
            "answered_429": mine.iter().filter(|d| d.code == 429).count(),
            "sent_within_1s_of_a_429_after_250ms": hot.len(),
            "pods_sent_again_within_1s_of_their_429": retried_hot,
            "status_throttled": st["outcomes"]["throttled"],
            "first_to_last_s": (span * 100.0).round() / 100.0,
            "deletes_per_s": (ok.len() as f64 / span * 10.0).round() / 10.0,
            "inflight_limit_at_end": st["inflight_limit"],
            "status_apf": st["apf"],
        },
        "neighbour": {
            "loops": NEIGHBOUR_LOOPS,
            "idle": idle_fig,
            "during_drain": during,
            "p99_during_over_idle": ratio,
            "answered_429": answers.iter().filter(|a| a.code == 429).count(),
        },
        "podsweep_level": {
            "priority_level": level_name(with),
            "nominal_seats": after.sum("apiserver_flowcontrol_nominal_limit_seats", &pl),
            "dispatched": d("apiserver_flowcontrol_dispatched_requests_total", &mine_pl),
            "rejected": d("apiserver_flowcontrol_rejected_requests_total", &mine_pl),
            "mean_wait_ms": if waits > 0.0 { Value::from((wait_sum / waits * 1e5).round() / 100.0) } else { Value::Null },
        },
        "apiserver_cpu_ms_per_pod": cpu,
        "chart": chart,
    })
}
