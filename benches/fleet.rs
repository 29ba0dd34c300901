//! `scripts/bench coordination_traffic | duplicates`: fleet-level figures, one JSON line each.
//!
//! - `coordination_traffic`: 3 servers x 10 scopes (one podsweep engine per server, built as a
//!   Kyuubi server builds it: `Engine::new` from Kyuubi's keys) against a real ZooKeeper and a real
//!   etcd at Kyuubi's default timeouts, in steady state. Counted at the servers: ZooKeeper packets
//!   (`srvr`'s `Received`), etcd gRPC messages (`/metrics`), and every TCP connection and HTTP
//!   request that reaches the Kubernetes API address the engines are configured with.
//! - `duplicates`: 3 server processes (this binary again) share one scope while pods keep
//!   terminating; every few seconds the leader is killed with SIGKILL and a fresh server joins. The
//!   fleet harness (tests/common/fleet.rs, shared with `scripts/chaos`) plays the API server (our
//!   pods API over HTTP at one address, so one election as in production; each server with a
//!   bearer token of its own, every DELETE recorded with its sender) and the informers (new pods
//!   and deleted ones are told to every live server). DELETE requests per pod is the duplicate
//!   budget actually spent.

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::fleet::Fleet as ChurnFleet;
use podsweep::config::{keys, Settings, ETCD_CLIENT_CLASS};
use podsweep::election::Leadership;
use podsweep::engine::Engine;
use podsweep::model::{AppState, EventKind, Observation};
use podsweep::scope::Scope;
use serde_json::json;

const MASTER: &str = "kyuubi.kubernetes.master.address";

fn main() {
    common::fleet::child_main();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let named: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |n: &str| named.is_empty() || named.contains(&n);
    for n in &named {
        if !["coordination_traffic", "duplicates"].contains(n) {
            eprintln!("fleet: unknown bench {n} (known: coordination_traffic, duplicates)");
            std::process::exit(2);
        }
    }
    if wants("coordination_traffic") {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(coordination_traffic(smoke));
    }
    if wants("duplicates") {
        for backend in ["zookeeper", "etcd"] {
            duplicates(backend, smoke);
        }
    }
}

fn progress(msg: &str) {
    eprintln!("[bench] {msg}");
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

// ------------------------------------------------------------------------------------------------
// coordination_traffic

/// A TCP listener standing in for the Kubernetes API server address: counts every connection and
/// every HTTP request line it receives, and answers only what a scope must read before it
/// campaigns: its namespace's `kube-root-ca.crt` (the cluster's identity in the election key, as
/// a real cluster's root CA publisher leaves it). Without that answer no scope would campaign and
/// the steady state measured would be a leaderless one.
struct ApiCounter {
    url: String,
    connections: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
}

/// The answer to `GET /api/v1/namespaces/<ns>/configmaps/kube-root-ca.crt`, or None for any other
/// request line.
fn root_ca_answer(request_line: &str) -> Option<String> {
    let path = request_line.strip_prefix("GET ")?.split(' ').next()?;
    let ns = path
        .strip_prefix("/api/v1/namespaces/")?
        .strip_suffix("/configmaps/kube-root-ca.crt")?;
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "kube-root-ca.crt", "namespace": ns, "uid": format!("root-ca-of-{ns}")},
        "data": {"ca.crt": "-----BEGIN CERTIFICATE-----\nbench CA\n-----END CERTIFICATE-----\n"}})
    .to_string();
    Some(format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    ))
}

impl ApiCounter {
    fn start() -> ApiCounter {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the API counter");
        let url = format!("http://{}", listener.local_addr().expect("local addr"));
        let connections = Arc::new(AtomicU64::new(0));
        let requests = Arc::new(AtomicU64::new(0));
        let (c, r) = (connections.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                c.fetch_add(1, Ordering::Relaxed);
                let r = r.clone();
                std::thread::spawn(move || {
                    let methods = ["GET ", "POST ", "PUT ", "PATCH ", "DELETE ", "HEAD "];
                    let Ok(mut writer) = stream.try_clone() else {
                        return;
                    };
                    let mut answer: Option<String> = None;
                    for line in BufReader::new(stream).lines().map_while(Result::ok) {
                        if methods.iter().any(|m| line.starts_with(m)) {
                            r.fetch_add(1, Ordering::Relaxed);
                            answer = root_ca_answer(&line);
                        } else if line.is_empty() {
                            // The end of a request's headers (the GETs answered carry no body).
                            if let Some(a) = answer.take() {
                                if writer.write_all(a.as_bytes()).is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        ApiCounter {
            url,
            connections,
            requests,
        }
    }
}

fn running_pod(uid: &str) -> Observation {
    Observation {
        kind: EventKind::Add,
        tag: format!("tag-{uid}"),
        pod_name: format!("kyuubi-spark-{uid}-driver"),
        pod_uid: uid.to_owned(),
        state: AppState::Running,
        has_app_selector: true,
        terminated_at: None,
        deletion_requested: false,
        annotations: None,
    }
}

struct Fleet {
    backend: &'static str,
    timeouts: serde_json::Value,
    requests: Box<dyn Fn() -> Option<u64> + Send + Sync>,
    engines: Vec<Engine>,
}

fn one_leader_each_scope(f: &Fleet, s: &Scope) -> bool {
    f.engines
        .iter()
        .filter(|e| e.leadership(s) == Some(Leadership::Leading))
        .count()
        == 1
}

async fn coordination_traffic(smoke: bool) {
    const SERVERS: usize = 3;
    const SCOPES: usize = 10;
    let window = Duration::from_secs(if smoke { 10 } else { 300 });
    let api = ApiCounter::start();
    // ZooKeeper as Kyuubi meets it: tickTime 2 s, so the 60 s session Kyuubi asks for is cut to
    // 40 s (20 ticks); etcd with Kyuubi's lease timeout of 10 s.
    let tick = Duration::from_secs(2);
    let zk = common::zk::ZkServer::start_with(common::zk::ZkOptions {
        tick,
        min_session: tick * 2,
        max_session: tick * 20,
        ..common::zk::ZkOptions::default()
    });
    let etcd = common::etcd::EtcdServer::start();
    let zk_port = zk.port();
    let etcd_endpoint = etcd.endpoint();
    let base = |extra: Vec<(&str, String)>| -> HashMap<String, String> {
        let mut m: HashMap<String, String> = [
            (keys::CLEANUP_KIND, "ALL".to_owned()),
            (keys::HA_NAMESPACE, "podsweep_traffic".to_owned()),
            (MASTER, api.url.clone()),
        ]
        .into_iter()
        .chain(extra)
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        m.insert(
            "kyuubi.kubernetes.authenticate.oauthToken".into(),
            "bench".into(),
        );
        m
    };
    let zk_conf = base(vec![(keys::HA_ADDRESSES, zk.addr())]);
    let etcd_conf = base(vec![
        (keys::HA_ADDRESSES, etcd_endpoint.clone()),
        (keys::HA_CLIENT_CLASS, ETCD_CLIENT_CLASS.to_owned()),
    ]);
    let build = |conf: &HashMap<String, String>, id: String| {
        let settings = Settings::from_map(conf.clone()).expect("bench conf");
        Engine::new(settings, &id, tokio::runtime::Handle::current()).expect("engine")
    };
    let mut fleets = vec![
        Fleet {
            backend: "zookeeper",
            timeouts: json!({"session_timeout_requested_ms": 60000, "server_tick_ms": 2000, "server_max_session_ms": 40000}),
            requests: Box::new(move || common::bench::zk_packets_received(zk_port)),
            engines: (0..SERVERS)
                .map(|i| build(&zk_conf, format!("server-{i}:10009")))
                .collect(),
        },
        Fleet {
            backend: "etcd",
            timeouts: json!({"lease_timeout": "PT10S (Kyuubi's default)"}),
            requests: Box::new(move || common::bench::etcd_grpc_messages(&etcd_endpoint)),
            engines: (0..SERVERS)
                .map(|i| build(&etcd_conf, format!("server-{i}:10009")))
                .collect(),
        },
    ];
    let scopes: Vec<Scope> = (0..SCOPES)
        .map(|i| Scope::new(None, Some(&format!("tenant-{i}"))))
        .collect();
    // Elections start with a scope's first driver pod: every server sees one running pod per scope.
    for f in &fleets {
        for e in &f.engines {
            for (i, s) in scopes.iter().enumerate() {
                e.observe(s.clone(), running_pod(&format!("running-{i}")))
                    .expect("observe");
            }
        }
    }
    let t0 = Instant::now();
    let one_leader_each = |f: &Fleet| scopes.iter().all(|s| one_leader_each_scope(f, s));
    while !fleets.iter().all(one_leader_each) && t0.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elected_in = t0.elapsed();
    // The steady state measured is one with a leader per scope: without it the figures would be
    // those of a fleet that never campaigns, so the bench fails instead, saying why.
    if !fleets.iter().all(one_leader_each) {
        for f in &fleets {
            for s in &scopes {
                if !one_leader_each_scope(f, s) {
                    eprintln!(
                        "coordination_traffic: {} scope {s} has no single leader after {:.0} s: {}",
                        f.backend,
                        elected_in.as_secs_f64(),
                        f.engines[0].status_json(s)
                    );
                    break;
                }
            }
        }
        std::process::exit(1);
    }
    progress(&format!(
        "coordination_traffic: {SERVERS} servers x {SCOPES} scopes on ZooKeeper and etcd, elected in {:.1} s; measuring {} s",
        elected_in.as_secs_f64(),
        window.as_secs()
    ));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before: Vec<Option<u64>> = fleets.iter().map(|f| (f.requests)()).collect();
    let api_before = api.requests.load(Ordering::Relaxed);
    tokio::time::sleep(window).await;
    let after: Vec<Option<u64>> = fleets.iter().map(|f| (f.requests)()).collect();
    let api_window = api.requests.load(Ordering::Relaxed) - api_before;
    let leaders_ok: Vec<bool> = fleets.iter().map(one_leader_each).collect();
    let minutes = window.as_secs_f64() / 60.0;
    // Derived, not measured (anchors §E): a Kubernetes Lease per scope, 1 leader renewing at
    // 0.5 writes/s and 2 followers polling at ~0.31 GET/s each.
    let lease_per_scope_per_min = round1((0.5 + 2.0 * 0.31) * 60.0);
    for (i, f) in fleets.iter_mut().enumerate() {
        let per_scope_per_min = match (before[i], after[i]) {
            (Some(b), Some(a)) => Some(round1((a - b) as f64 / SCOPES as f64 / minutes)),
            _ => None,
        };
        let line = json!({
            "backend": f.backend,
            "servers": SERVERS,
            "scopes": SCOPES,
            "window_s": window.as_secs(),
            "timeouts": f.timeouts,
            "one_leader_per_scope": leaders_ok[i],
            "backend_requests_per_scope_per_minute": per_scope_per_min,
            "backend_requests_counted_as": if f.backend == "zookeeper" { "packets received by the ZooKeeper server (srvr)" } else { "gRPC messages received by etcd (/metrics), keep-alives included" },
            "kubernetes_requests_in_window": api_window,
            "kubernetes_requests_whole_run": api.requests.load(Ordering::Relaxed),
            "kubernetes_connections_whole_run": api.connections.load(Ordering::Relaxed),
            "lease_election_reference_requests_per_scope_per_minute": lease_per_scope_per_min,
            "lease_reference_is": "derived from client-go defaults (anchors E), not measured",
        });
        common::bench::line("coordination_traffic", line);
        for e in f.engines.drain(..) {
            e.close_async(Duration::from_secs(5)).await;
        }
    }
    drop(zk);
    drop(etcd);
}

// ------------------------------------------------------------------------------------------------
// duplicates

fn duplicates(backend: &'static str, smoke: bool) {
    // Short timeouts so that a kill every few seconds means a real leadership change each time.
    let (conf, timeouts, _server): (
        Vec<(String, String)>,
        serde_json::Value,
        Box<dyn std::any::Any>,
    ) = match backend {
        "zookeeper" => {
            let zk = common::zk::ZkServer::start();
            (
                vec![
                    (keys::HA_ADDRESSES.into(), zk.addr()),
                    (keys::ZK_SESSION_TIMEOUT.into(), "2000".into()),
                ],
                json!({"session_timeout_ms": 2000, "server_tick_ms": 200}),
                Box::new(zk),
            )
        }
        _ => {
            let etcd = common::etcd::EtcdServer::start();
            (
                vec![
                    (keys::HA_ADDRESSES.into(), etcd.endpoint()),
                    (keys::HA_CLIENT_CLASS.into(), ETCD_CLIENT_CLASS.into()),
                    (keys::ETCD_ELECTION_LEASE.into(), "PT2S".into()),
                ],
                json!({"lease_timeout": "PT2S"}),
                Box::new(etcd),
            )
        }
    };
    let servers = 3;
    let churn = Duration::from_secs(if smoke { 8 } else { 45 });
    let kill_every = Duration::from_secs(3);
    let pod_every = Duration::from_millis(50);
    progress(&format!(
        "duplicates ({backend}): {servers} server processes, a pod terminates every {} ms, the leader is killed every {} s for {} s",
        pod_every.as_millis(),
        kill_every.as_secs(),
        churn.as_secs()
    ));
    // The server processes, the pods API and the informers: tests/common/fleet.rs.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let fleet = Arc::new(ChurnFleet::new(&rt, &format!("churn-{backend}"), conf));
    fleet.add_running();
    for _ in 0..servers {
        fleet.spawn();
    }
    fleet.wait_leader(&[], Duration::from_secs(30));
    let start = Instant::now();
    let churning = fleet.churn(pod_every);
    let mut kills = 0;
    while start.elapsed() + kill_every <= churn {
        std::thread::sleep(kill_every);
        if let Some(leader) = fleet.leaders().first().copied() {
            fleet.kill(leader);
            fleet.spawn();
            kills += 1;
        }
    }
    if let Some(rest) = churn.checked_sub(start.elapsed()) {
        std::thread::sleep(rest);
    }
    churning.stop();
    // Drain: every pod must be deleted once the last successor leads; late duplicates would
    // show up in the 2 s after.
    fleet.drain(Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(2));
    fleet.shutdown();
    let f = fleet.figures();
    let mut lags = fleet.delete_lags_ms();
    lags.sort_unstable();
    let pct = |q: f64| -> Option<u64> {
        if lags.is_empty() {
            return None;
        }
        let rank = ((q * lags.len() as f64).ceil() as usize).clamp(1, lags.len());
        Some(lags[rank - 1])
    };
    let line = json!({
        "backend": backend,
        "timeouts": timeouts,
        "servers": servers,
        "churn_s": churn.as_secs(),
        "leader_killed_every_s": kill_every.as_secs(),
        "leader_kills": kills,
        "servers_that_deleted": fleet.servers_that_deleted(),
        "retain_ms": fleet.retain_ms,
        "rate_limit_qps": common::fleet::RATE_QPS,
        "pods": f.pods,
        "delete_requests": f.delete_requests,
        "deletes_per_pod": if f.pods > 0 { (f.delete_requests as f64 / f.pods as f64 * 1000.0).round() / 1000.0 } else { 0.0 },
        "pods_deleted_more_than_once": f.duplicates,
        "deletes_before_deadline": f.wrongful,
        "leaked": f.leaked,
        "crashes": f.crashes,
        "deadline_to_delete_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": lags.last()},
        "two_leaders_max_ms": f.two_leaders_max_ms,
        "api": "PodsApi over HTTP (one address, a token per server); informer events from the parent",
    });
    common::bench::line("duplicates", line);
}
