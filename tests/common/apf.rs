//! API Priority and Fairness on the real kube-apiserver (issue 35 §2), shared by `tests/apf.rs`
//! and `benches/apf.rs`: the chart's FlowSchema and PriorityLevelConfiguration rendered by Helm and
//! applied as they are, the API server's `apiserver_flowcontrol_*` metrics, a neighbour that
//! floods the server with GETs, and the audit log's DELETEs with their answer times.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::Value;

use super::real_kube::{RealKube, SERVERS_NS};

/// The Helm release the chart is rendered as: its FlowSchema and level are named after it.
pub const RELEASE: &str = "podsweep";

/// The chart's level rendered small: ceil(600 x 1 / 246) = 3 seats of the API server's default
/// 600, one queue holding one request: a burst of more than 4 DELETEs meets 429s.
pub const SMALL_LEVEL: &[&str] = &[
    "apf.priorityLevel.nominalConcurrencyShares=1",
    "apf.priorityLevel.queues=1",
    "apf.priorityLevel.handSize=1",
    "apf.priorityLevel.queueLengthLimit=1",
];

/// Helm: `PODSWEEP_HELM`, else the tool cache's (`scripts/setup helm`).
pub fn helm() -> PathBuf {
    if let Some(h) = std::env::var_os("PODSWEEP_HELM") {
        return PathBuf::from(h);
    }
    let tools = std::env::var_os("PODSWEEP_TOOLS").map_or_else(
        || {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/podsweep-tools")
        },
        PathBuf::from,
    );
    tools.join("helm")
}

/// The chart's API Priority and Fairness objects (`templates/flowcontrol.yaml`), rendered by Helm
/// for the daemons' ServiceAccount `account` (in [`SERVERS_NS`], the release namespace) and the
/// namespaces cleaned, with `sets` (`key=value`) over the chart's values.
pub fn render(account: &str, namespaces: &[&str], sets: &[&str]) -> Vec<Value> {
    let chart = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("charts/podsweep");
    let mut cmd = Command::new(helm());
    cmd.args(["template", RELEASE])
        .arg(&chart)
        .args([
            "-n",
            SERVERS_NS,
            "--show-only",
            "templates/flowcontrol.yaml",
        ])
        .args(["--set", "apf.enabled=true"])
        .args(["--set", &format!("serviceAccount.name={account}")])
        .args([
            "--set",
            &format!("rbac.namespaces={{{}}}", namespaces.join(",")),
        ]);
    for s in sets {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().unwrap_or_else(|e| {
        panic!(
            "run {} (scripts/setup helm installs it): {e}",
            helm().display()
        )
    });
    assert!(
        out.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("the rendered YAML");
    docs.into_iter().filter(|d| d.is_object()).collect()
}

/// The cluster-scoped API of a rendered object.
fn api_of(client: &kube::Client, doc: &Value) -> Api<DynamicObject> {
    let (group, version) = doc["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .expect("apiVersion group/version");
    let kind = doc["kind"].as_str().expect("kind");
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let ar = ApiResource::from_gvk_with_plural(&gvk, &format!("{}s", kind.to_lowercase()));
    Api::all_with(client.clone(), &ar)
}

/// Server-side applies the rendered objects as they are; returns each one's UID by kind.
pub async fn apply(client: &kube::Client, docs: &[Value]) -> BTreeMap<String, String> {
    let mut uids = BTreeMap::new();
    for doc in docs {
        let name = doc["metadata"]["name"].as_str().expect("name");
        let applied = api_of(client, doc)
            .patch(
                name,
                &PatchParams::apply("podsweep-apf-test").force(),
                &Patch::Apply(doc),
            )
            .await
            .unwrap_or_else(|e| panic!("apply {} {name}: {e}", doc["kind"]));
        uids.insert(
            doc["kind"].as_str().unwrap_or_default().to_owned(),
            applied.metadata.uid.unwrap_or_default(),
        );
    }
    uids
}

/// One sample of the API server's `/metrics`: every `apiserver_flowcontrol_*` series.
#[derive(Clone, Debug, Default)]
pub struct FlowMetrics(Vec<(String, BTreeMap<String, String>, f64)>);

impl FlowMetrics {
    pub async fn read(admin: &kube::Client) -> FlowMetrics {
        let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = admin.request_text(req).await.expect("GET /metrics");
        let mut out = Vec::new();
        for line in text.lines() {
            if !line.starts_with("apiserver_flowcontrol_") {
                continue;
            }
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, l.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter_map(|kv| kv.split_once("=\""))
                .map(|(k, v)| (k.to_owned(), v.trim_end_matches('"').to_owned()))
                .collect();
            out.push((name.to_owned(), labels, value));
        }
        FlowMetrics(out)
    }

    /// The sum of `name` over the series whose labels include every `(label, value)` of `with`.
    pub fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.0
            .iter()
            .filter(|(n, l, _)| {
                n == name && with.iter().all(|(k, v)| l.get(*k).is_some_and(|x| x == v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    /// What `later` counted since `self`, for a counter.
    pub fn delta(&self, later: &FlowMetrics, name: &str, with: &[(&str, &str)]) -> f64 {
        later.sum(name, with) - self.sum(name, with)
    }
}

/// Creates `n` terminated Kyuubi driver pods in `ns` (finished a minute ago: due at once), with
/// `parallel` creations at once.
pub async fn backlog(k: &RealKube, ns: &str, n: usize, parallel: usize) {
    let at = SystemTime::now() - Duration::from_secs(60);
    futures::stream::iter(0..n)
        .for_each_concurrent(parallel, |i| {
            let ns = ns.to_owned();
            async move {
                k.terminated_pod(&ns, &format!("apf-{i:05}"), "Succeeded", at, &[], &[])
                    .await;
            }
        })
        .await;
}

/// One answer the neighbour got: when it was sent, how long it took, its status and the priority
/// level the API server named.
#[derive(Clone, Debug)]
pub struct Answer {
    pub at: Instant,
    pub latency: Duration,
    pub code: u16,
    pub priority_level_uid: String,
}

/// A neighbour under its own ServiceAccount: `loops` clients, each GETting the pod `pod` of `ns`
/// one request after the other until stopped (a closed-loop flood).
pub struct Neighbour {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Answer>>>,
}

impl Neighbour {
    pub async fn start(k: &RealKube, token: &str, ns: &str, pod: &str, loops: usize) -> Neighbour {
        let stop = Arc::new(AtomicBool::new(false));
        let client = k.client(token).await;
        let path = format!("/api/v1/namespaces/{ns}/pods/{pod}");
        let tasks = (0..loops)
            .map(|_| {
                let (client, path, stop) = (client.clone(), path.clone(), stop.clone());
                tokio::spawn(async move {
                    let mut out = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let req = http::Request::get(path.as_str())
                            .body(kube::client::Body::empty())
                            .unwrap();
                        let at = Instant::now();
                        let (code, pl) = match client.send(req).await {
                            Ok(resp) => {
                                let pl = resp
                                    .headers()
                                    .get("x-kubernetes-pf-prioritylevel-uid")
                                    .and_then(|v| v.to_str().ok())
                                    .unwrap_or_default()
                                    .to_owned();
                                let code = resp.status().as_u16();
                                let _ = resp.into_body().collect_bytes().await;
                                (code, pl)
                            }
                            Err(_) => (0, String::new()),
                        };
                        out.push(Answer {
                            at,
                            latency: at.elapsed(),
                            code,
                            priority_level_uid: pl,
                        });
                    }
                    out
                })
            })
            .collect();
        Neighbour { stop, tasks }
    }

    /// Stops the loops; every answer, in order of sending.
    pub async fn stop(self) -> Vec<Answer> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for t in self.tasks {
            all.extend(t.await.unwrap_or_default());
        }
        all.sort_by_key(|a| a.at);
        all
    }
}

/// Latency figures of the answers sent within `[from, to)`: count, per second, p50 and p99 (ms).
pub fn latency(answers: &[Answer], from: Instant, to: Instant) -> Value {
    let mut xs: Vec<Duration> = answers
        .iter()
        .filter(|a| a.at >= from && a.at < to && a.code == 200)
        .map(|a| a.latency)
        .collect();
    xs.sort();
    let q = |p: f64| {
        if xs.is_empty() {
            return Value::Null;
        }
        let i = ((xs.len() as f64 * p).ceil() as usize).clamp(1, xs.len()) - 1;
        Value::from((xs[i].as_secs_f64() * 10000.0).round() / 10.0)
    };
    let secs = to.duration_since(from).as_secs_f64().max(1e-3);
    serde_json::json!({
        "requests": xs.len(),
        "per_s": (xs.len() as f64 / secs * 10.0).round() / 10.0,
        "p50_ms": q(0.5),
        "p99_ms": q(0.99),
    })
}

/// One DELETE of a pod from the audit log, with when the API server received it and when it
/// answered.
#[derive(Clone, Debug)]
pub struct TimedDelete {
    pub user: String,
    pub pod: String,
    pub code: u16,
    pub received: SystemTime,
    pub answered: SystemTime,
}

fn audit_time(v: &Value) -> SystemTime {
    v.as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map_or(SystemTime::UNIX_EPOCH, |t| {
            SystemTime::UNIX_EPOCH + Duration::from_micros(t.as_microsecond().max(0) as u64)
        })
}

/// Every DELETE of a pod of `ns` in the audit log, in order of receipt.
pub fn timed_deletes(k: &RealKube, ns: &str) -> Vec<TimedDelete> {
    let text = std::fs::read_to_string(&k.audit).unwrap_or_default();
    let mut out: Vec<TimedDelete> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| {
            v["stage"] == "ResponseComplete"
                && v["verb"] == "delete"
                && v["objectRef"]["resource"] == "pods"
                && v["objectRef"]["namespace"] == ns
        })
        .map(|v| TimedDelete {
            user: v["user"]["username"].as_str().unwrap_or("").to_owned(),
            pod: v["objectRef"]["name"].as_str().unwrap_or("").to_owned(),
            code: v["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
            received: audit_time(&v["requestReceivedTimestamp"]),
            answered: audit_time(&v["stageTimestamp"]),
        })
        .collect();
    out.sort_by_key(|d| d.received);
    out
}

/// DELETEs received within `(answered + slack, answered + wait)` of any 429 among `deletes`: a
/// client that honours `Retry-After` (at least `wait`) sends none there; `slack` covers requests
/// already on their way when the 429 left. Each as (the 429's pod, the late DELETE's pod, seconds
/// after the 429's answer, the late DELETE's answer).
pub fn sent_during_retry_after(
    deletes: &[TimedDelete],
    wait: Duration,
    slack: Duration,
) -> Vec<(String, String, f64, u16)> {
    let mut hot = Vec::new();
    for r in deletes.iter().filter(|d| d.code == 429) {
        for d in deletes {
            if let Ok(after) = d.received.duration_since(r.answered) {
                if after > slack && after < wait {
                    hot.push((r.pod.clone(), d.pod.clone(), after.as_secs_f64(), d.code));
                }
            }
        }
    }
    hot
}

/// A single-server engine that watches namespace `ns` itself and deletes its terminated driver pods
/// one second after they end, as the ServiceAccount whose token is `token`: the drainer of the APF
/// test and bench.
pub fn self_watch_engine(
    k: &RealKube,
    token: &str,
    ns: &str,
    id: &str,
) -> podsweep::engine::Engine {
    use podsweep::config::{keys, Settings};
    let conf: std::collections::HashMap<String, String> = [
        (keys::WATCH_ENABLED, "true"),
        (keys::HA_SINGLE_SERVER, "true"),
        (keys::WATCH_KIND, "ALL"),
        (keys::KUBE_NAMESPACE, ns),
        (keys::RETAIN_PERIOD, "PT1S"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .chain(k.client_conf(token))
    .collect();
    podsweep::engine::Engine::new(
        Settings::from_map(conf).expect("settings"),
        id,
        tokio::runtime::Handle::current(),
    )
    .expect("engine")
}
