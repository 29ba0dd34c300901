//! `scripts/bench coordination_traffic | duplicates`: fleet-level figures, one JSON line each.
//!
//! - `coordination_traffic`: 3 servers x 10 scopes (one podsweep engine per server, built as a
//!   Kyuubi server builds it: `Engine::new` from Kyuubi's keys) against a real ZooKeeper and a real
//!   etcd at Kyuubi's default timeouts, in steady state. Counted at the servers: ZooKeeper packets
//!   (`srvr`'s `Received`), etcd gRPC messages (`/metrics`), and every TCP connection and HTTP
//!   request that reaches the Kubernetes API address the engines are configured with.
//! - `duplicates`: 3 server processes (this binary again) share one scope while pods keep
//!   terminating; every few seconds the leader is killed with SIGKILL and a fresh server joins. The
//!   parent plays the API server and the informers: it keeps the pods, answers each DELETE, and
//!   tells every live server about new pods and about deleted ones. DELETE requests per pod is the
//!   duplicate budget actually spent.

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::recorder::{self, Recorder};
use podsweep::clock::Clock;
use podsweep::config::{keys, Settings, ETCD_CLIENT_CLASS};
use podsweep::election::etcd::EtcdBackend;
use podsweep::election::zookeeper::ZooKeeperBackend;
use podsweep::election::{Backend, Leadership};
use podsweep::engine::Engine;
use podsweep::model::{AppState, EventKind, Observation};
use podsweep::scope::Scope;
use serde_json::json;

const CHILD_ENV: &str = "PODSWEEP_FLEET_CHILD";
const MASTER: &str = "kyuubi.kubernetes.master.address";
/// The churn fleet's DELETE rate limit (qps and burst).
const CHURN_QPS: u32 = 100;

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child(&spec);
    }
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
/// every HTTP request line it receives, and answers none.
struct ApiCounter {
    url: String,
    connections: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
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
                    for line in BufReader::new(stream).lines().map_while(Result::ok) {
                        if methods.iter().any(|m| line.starts_with(m)) {
                            r.fetch_add(1, Ordering::Relaxed);
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
    }
}

struct Fleet {
    backend: &'static str,
    timeouts: serde_json::Value,
    requests: Box<dyn Fn() -> Option<u64> + Send + Sync>,
    engines: Vec<Engine>,
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
    let one_leader_each = |f: &Fleet| {
        scopes.iter().all(|s| {
            f.engines
                .iter()
                .filter(|e| e.leadership(s) == Some(Leadership::Leading))
                .count()
                == 1
        })
    };
    while !fleets.iter().all(one_leader_each) && t0.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let elected_in = t0.elapsed();
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

/// One server process of the churn fleet.
struct Server {
    id: usize,
    child: Child,
    stdin: Option<ChildStdin>,
    leading: bool,
}

struct PodRecord {
    deadline_ms: u64,
    deletes: u32,
    deleted_ms: Option<u64>,
}

#[derive(Default)]
struct World {
    servers: Vec<Server>,
    pods: HashMap<String, PodRecord>,
    /// Pods in creation order (what an informer's initial list returns).
    order: Vec<String>,
    deletes: Vec<(usize, String, u64)>,
}

impl World {
    fn send_all(&mut self, line: &str) {
        for s in self.servers.iter_mut() {
            if let Some(stdin) = s.stdin.as_mut() {
                // A server that died mid-write is noticed by its reader thread.
                let _ = stdin.write_all(line.as_bytes());
            }
        }
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn spawn_server(world: &Arc<Mutex<World>>, id: usize, spec: &serde_json::Value) {
    let mut child = Command::new(std::env::current_exe().expect("own path"))
        .env(CHILD_ENV, spec.to_string())
        .arg(id.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn a server process");
    let out = child.stdout.take().expect("child stdout");
    let mut stdin = child.stdin.take();
    let mut w = world.lock().unwrap_or_else(|p| p.into_inner());
    // The new server's informer lists the pods that still exist.
    if let Some(s) = stdin.as_mut() {
        let mut list = String::new();
        for uid in &w.order {
            if let Some(p) = w.pods.get(uid).filter(|p| p.deleted_ms.is_none()) {
                list.push_str(&format!("POD {uid} {}\n", p.deadline_ms));
            }
        }
        let _ = s.write_all(list.as_bytes());
    }
    w.servers.push(Server {
        id,
        child,
        stdin,
        leading: false,
    });
    drop(w);
    let world = world.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let mut w = world.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(state) = line.strip_prefix("STATE ") {
                if let Some(s) = w.servers.iter_mut().find(|s| s.id == id) {
                    s.leading = state == "LEADING";
                }
            } else if let Some(uid) = line.strip_prefix("DELETE ") {
                let at = now_ms();
                w.deletes.push((id, uid.to_owned(), at));
                let first = match w.pods.get_mut(uid) {
                    Some(p) => {
                        p.deletes += 1;
                        if p.deleted_ms.is_none() {
                            p.deleted_ms = Some(at);
                            true
                        } else {
                            false
                        }
                    }
                    None => false,
                };
                // The API server removes the pod; every informer sees the DELETE event.
                if first {
                    w.send_all(&format!("GONE {uid}\n"));
                }
            }
        }
        let mut w = world.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = w.servers.iter_mut().find(|s| s.id == id) {
            s.leading = false;
            s.stdin = None;
        }
    });
}

fn duplicates(backend: &'static str, smoke: bool) {
    // Short timeouts so that a kill every few seconds means a real leadership change each time.
    let (conf, timeouts, _server): (
        Vec<(&str, String)>,
        serde_json::Value,
        Box<dyn std::any::Any>,
    ) = match backend {
        "zookeeper" => {
            let zk = common::zk::ZkServer::start();
            (
                vec![
                    (keys::HA_ADDRESSES, zk.addr()),
                    (keys::ZK_SESSION_TIMEOUT, "2000".into()),
                ],
                json!({"session_timeout_ms": 2000, "server_tick_ms": 200}),
                Box::new(zk),
            )
        }
        _ => {
            let etcd = common::etcd::EtcdServer::start();
            (
                vec![
                    (keys::HA_ADDRESSES, etcd.endpoint()),
                    (keys::HA_CLIENT_CLASS, ETCD_CLIENT_CLASS.into()),
                    (keys::ETCD_LEASE_TIMEOUT, "PT2S".into()),
                ],
                json!({"lease_timeout": "PT2S"}),
                Box::new(etcd),
            )
        }
    };
    let servers = 3;
    let retain_ms = 1000u64;
    let churn = Duration::from_secs(if smoke { 8 } else { 45 });
    let kill_every = Duration::from_secs(3);
    let pod_every = Duration::from_millis(50);
    let spec = json!({
        "conf": conf.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<HashMap<_, _>>(),
        "namespace": format!("churn-{backend}"),
        "retain_ms": retain_ms,
    });
    progress(&format!(
        "duplicates ({backend}): {servers} server processes, a pod terminates every {} ms, the leader is killed every {} s for {} s",
        pod_every.as_millis(),
        kill_every.as_secs(),
        churn.as_secs()
    ));
    let world = Arc::new(Mutex::new(World::default()));
    let mut next_id = 0;
    for _ in 0..servers {
        spawn_server(&world, next_id, &spec);
        next_id += 1;
    }
    let anyone_leads = |w: &Arc<Mutex<World>>| {
        w.lock()
            .unwrap_or_else(|p| p.into_inner())
            .servers
            .iter()
            .any(|s| s.leading)
    };
    let t0 = Instant::now();
    while !anyone_leads(&world) && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let start = Instant::now();
    let mut next_pod = start;
    let mut next_kill = start + kill_every;
    let mut kills = 0;
    let mut seq = 0u64;
    while start.elapsed() < churn {
        let now = Instant::now();
        if now >= next_pod {
            let uid = format!("uid-{seq:06}");
            seq += 1;
            let deadline = now_ms() + retain_ms;
            let mut w = world.lock().unwrap_or_else(|p| p.into_inner());
            w.pods.insert(
                uid.clone(),
                PodRecord {
                    deadline_ms: deadline,
                    deletes: 0,
                    deleted_ms: None,
                },
            );
            w.order.push(uid.clone());
            // The pod terminated now; `deadline` travels as its termination time + retain.
            w.send_all(&format!("POD {uid} {deadline}\n"));
            next_pod += pod_every;
        }
        if now >= next_kill {
            let mut w = world.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(s) = w.servers.iter_mut().find(|s| s.leading) {
                let _ = s.child.kill();
                let _ = s.child.wait();
                s.leading = false;
                s.stdin = None;
                kills += 1;
                drop(w);
                spawn_server(&world, next_id, &spec);
                next_id += 1;
                next_kill = now + kill_every;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Drain: every pod must be deleted once the last successor leads.
    let drain = Instant::now();
    loop {
        let left = {
            let w = world.lock().unwrap_or_else(|p| p.into_inner());
            w.pods.values().filter(|p| p.deleted_ms.is_none()).count()
        };
        if left == 0 || drain.elapsed() > Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Late duplicates would show up here.
    std::thread::sleep(Duration::from_secs(2));
    let mut w = world.lock().unwrap_or_else(|p| p.into_inner());
    for s in w.servers.iter_mut() {
        s.stdin = None;
        let _ = s.child.kill();
        let _ = s.child.wait();
    }
    let pods = w.pods.len();
    let requests = w.deletes.len();
    let twice = w.pods.values().filter(|p| p.deletes > 1).count();
    let leaked = w.pods.values().filter(|p| p.deleted_ms.is_none()).count();
    let early = w
        .deletes
        .iter()
        .filter(|(_, uid, at)| w.pods.get(uid).is_some_and(|p| *at < p.deadline_ms))
        .count();
    let mut lags: Vec<u64> = w
        .pods
        .values()
        .filter_map(|p| p.deleted_ms.map(|d| d.saturating_sub(p.deadline_ms)))
        .collect();
    lags.sort_unstable();
    let pct = |q: f64| -> Option<u64> {
        if lags.is_empty() {
            return None;
        }
        let rank = ((q * lags.len() as f64).ceil() as usize).clamp(1, lags.len());
        Some(lags[rank - 1])
    };
    let senders: HashSet<usize> = w.deletes.iter().map(|(id, _, _)| *id).collect();
    let line = json!({
        "backend": backend,
        "timeouts": timeouts,
        "servers": servers,
        "churn_s": churn.as_secs(),
        "leader_killed_every_s": kill_every.as_secs(),
        "leader_kills": kills,
        "servers_that_deleted": senders.len(),
        "retain_ms": retain_ms,
        "rate_limit_qps": CHURN_QPS,
        "pods": pods,
        "delete_requests": requests,
        "deletes_per_pod": if pods > 0 { (requests as f64 / pods as f64 * 1000.0).round() / 1000.0 } else { 0.0 },
        "pods_deleted_more_than_once": twice,
        "deletes_before_deadline": early,
        "leaked": leaked,
        "deadline_to_delete_ms": {"p50": pct(0.5), "p99": pct(0.99), "max": lags.last()},
    });
    common::bench::line("duplicates", line);
}

/// A server process of the churn fleet: one engine; stdin carries the informer's events
/// (`POD <uid> <deadline_ms>`, `GONE <uid>`), stdout its leadership (`STATE ...`) and its DELETEs.
fn child(spec: &str) {
    let spec: serde_json::Value = serde_json::from_str(spec).expect("child spec");
    let id = std::env::args().nth(1).unwrap_or_default();
    let mut map: HashMap<String, String> = spec["conf"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let retain_ms = spec["retain_ms"].as_u64().unwrap_or(1000);
    map.insert(keys::CLEANUP_KIND.into(), "ALL".into());
    map.insert(keys::RETAIN_PERIOD.into(), retain_ms.to_string());
    map.insert(keys::HA_NAMESPACE.into(), "podsweep_churn".into());
    // Pods terminate faster (20/s) than the default DELETE rate limit (10/s) lets a leader drain.
    map.insert(keys::RATE_QPS.into(), CHURN_QPS.to_string());
    map.insert(keys::RATE_BURST.into(), CHURN_QPS.to_string());
    let settings = Settings::from_map(map).expect("child conf");
    let backend: Arc<dyn Backend> = match &settings.ha {
        podsweep::config::HaSettings::ZooKeeper(z) => Arc::new(ZooKeeperBackend::new(z.clone())),
        podsweep::config::HaSettings::Etcd(e) => Arc::new(EtcdBackend::new(e.clone())),
        podsweep::config::HaSettings::Local => panic!("the churn fleet needs an HA backend"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let rec = Arc::new(Recorder::echoing());
    let engine = Arc::new(
        Engine::with_parts(
            settings,
            &format!("server-{id}"),
            backend,
            recorder::source(rec),
            Clock::System,
            rt.handle().clone(),
        )
        .expect("engine"),
    );
    let scope = Scope::new(None, spec["namespace"].as_str());
    let feed = {
        let (engine, scope) = (engine.clone(), scope.clone());
        move |kind: EventKind, uid: &str, deadline_ms: u64| {
            let ended = UNIX_EPOCH + Duration::from_millis(deadline_ms.saturating_sub(retain_ms));
            let _ = engine.observe(
                scope.clone(),
                Observation {
                    kind,
                    tag: format!("tag-{uid}"),
                    pod_name: format!("kyuubi-spark-{uid}-driver"),
                    pod_uid: uid.to_owned(),
                    state: AppState::Finished,
                    has_app_selector: true,
                    terminated_at: Some(ended),
                    deletion_requested: false,
                },
            );
        }
    };
    let _ = engine.observe(scope.clone(), running_pod("running"));
    std::thread::spawn(move || {
        let mut deadlines: HashMap<String, u64> = HashMap::new();
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            let mut parts = line.split(' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("POD"), Some(uid), Some(d)) => {
                    let d = d.parse().unwrap_or(0);
                    deadlines.insert(uid.to_owned(), d);
                    feed(EventKind::Update, uid, d);
                }
                (Some("GONE"), Some(uid), _) => {
                    let d = deadlines.remove(uid).unwrap_or(0);
                    feed(EventKind::Delete, uid, d);
                }
                _ => {}
            }
        }
        // The parent went away.
        std::process::exit(0);
    });
    rt.block_on(async move {
        let mut last = None;
        loop {
            let now = engine.leadership(&scope);
            if now != last {
                println!("STATE {}", now.map(|l| l.as_str()).unwrap_or("NONE"));
                let _ = std::io::stdout().flush();
                last = now;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
}
