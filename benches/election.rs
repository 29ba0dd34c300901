//! `scripts/bench election`: leadership figures per backend, as JSON lines.
//!
//! For each backend at its configured timeouts, the median (and min/max) of several runs of:
//! graceful handoff time, crash failover time to the successor's first DELETE of an overdue pod,
//! DELETEs sent by a frozen ex-leader after it wakes (must be 0), and the backend requests per
//! scope per minute in steady state. Real servers on loopback; a recording deleter stands in for
//! the Kubernetes API. Leaders that crash or freeze run in a child process (this binary again).

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::recorder::{self, Recorder};
use podsweep::clock::Clock;
use podsweep::config::ETCD_CLIENT_CLASS;
use podsweep::config::{keys, HaSettings, Settings};
use podsweep::election::{etcd::EtcdBackend, zookeeper::ZooKeeperBackend, Backend, Leadership};
use podsweep::engine::Engine;
use podsweep::model::{AppState, EventKind, Observation};
use podsweep::scope::Scope;
use podsweep::sweeper::DeleterSource;
use tokio::time::{sleep, Instant};

const CHILD_ENV: &str = "PODSWEEP_BENCH_CHILD";

fn main() {
    if let Ok(conf) = std::env::var(CHILD_ENV) {
        return child(&conf);
    }
    // `--smoke` (scripts/bench --smoke): one run each and short windows, figures not checked.
    let smoke = std::env::args().any(|a| a == "--smoke");
    let runs: usize = std::env::var("PODSWEEP_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if smoke { 1 } else { 5 });
    let quick = smoke || std::env::var("PODSWEEP_BENCH_QUICK").is_ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let which = std::env::args().skip(1).find(|a| !a.starts_with('-'));
        for name in ["zookeeper", "etcd"] {
            if which
                .as_deref()
                .is_some_and(|w| w != name && w != "election")
            {
                continue;
            }
            let env = BackendEnv::start(name, false);
            election_bench(&env, runs).await;
            drop(env);
            // Steady-state traffic again at Kyuubi's default timeouts.
            let env = BackendEnv::start(name, true);
            steady_state(&env, quick).await;
        }
    });
}

/// A running coordination server and the Kyuubi keys that point at it.
struct BackendEnv {
    name: &'static str,
    conf: Vec<(&'static str, String)>,
    /// What the timeouts are, for the report.
    timeouts: serde_json::Value,
    /// Reads the server's request counter.
    requests: Box<dyn Fn() -> Option<u64> + Send + Sync>,
    _server: Box<dyn std::any::Any>,
}

impl BackendEnv {
    /// `kyuubi_defaults`: Kyuubi's timeouts (ZooKeeper session 60 s requested, which a server
    /// with the default tickTime 2 s cuts to 40 s; etcd lease 10 s). Otherwise short test timeouts.
    fn start(name: &str, kyuubi_defaults: bool) -> BackendEnv {
        match name {
            "zookeeper" => {
                let options = if kyuubi_defaults {
                    let tick = Duration::from_millis(2000);
                    common::zk::ZkOptions {
                        tick,
                        min_session: tick * 2,
                        max_session: tick * 20,
                        ..common::zk::ZkOptions::default()
                    }
                } else {
                    common::zk::ZkOptions::default()
                };
                let session_ms = if kyuubi_defaults { 60_000 } else { 2000 };
                let zk = common::zk::ZkServer::start_with(options.clone());
                let port = zk.port();
                BackendEnv {
                    name: "zookeeper",
                    conf: vec![
                        (keys::HA_ADDRESSES, zk.addr()),
                        (keys::ZK_SESSION_TIMEOUT, session_ms.to_string()),
                    ],
                    timeouts: serde_json::json!({
                        "session_timeout_requested_ms": session_ms,
                        "server_tick_ms": options.tick.as_millis() as u64,
                        "server_max_session_ms": options.max_session.as_millis() as u64,
                    }),
                    requests: Box::new(move || common::bench::zk_packets_received(port)),
                    _server: Box::new(zk),
                }
            }
            _ => {
                let etcd = common::etcd::EtcdServer::start();
                let endpoint = etcd.endpoint();
                let metrics_at = endpoint.clone();
                let mut conf = vec![
                    (keys::HA_ADDRESSES, endpoint),
                    (keys::HA_CLIENT_CLASS, ETCD_CLIENT_CLASS.into()),
                ];
                // With the defaults, podsweep's own election lease (PT30S); else a short one.
                let ttl = if kyuubi_defaults {
                    "PT30S (podsweep's default)"
                } else {
                    conf.push((keys::ETCD_ELECTION_LEASE, "PT2S".into()));
                    "PT2S"
                };
                BackendEnv {
                    name: "etcd",
                    conf,
                    timeouts: serde_json::json!({"lease_ttl": ttl}),
                    requests: Box::new(move || common::bench::etcd_grpc_messages(&metrics_at)),
                    _server: Box::new(etcd),
                }
            }
        }
    }
}

fn backend_of(settings: &Settings) -> Arc<dyn Backend> {
    match &settings.ha {
        HaSettings::ZooKeeper(z) => Arc::new(ZooKeeperBackend::new(z.clone())),
        HaSettings::Etcd(e) => Arc::new(EtcdBackend::new(e.clone())),
        HaSettings::Local => panic!("the bench needs an HA backend"),
    }
}

fn engine(conf: &[(&str, String)], id: &str, retain_ms: u64, rec: Arc<Recorder>) -> Engine {
    let mut map: HashMap<String, String> = conf
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    map.insert(keys::CLEANUP_KIND.into(), "ALL".into());
    map.insert(keys::RETAIN_PERIOD.into(), retain_ms.to_string());
    map.insert(keys::HA_NAMESPACE.into(), "podsweep_bench".into());
    let settings = Settings::from_map(map).expect("bench conf");
    let backend = backend_of(&settings);
    let source: DeleterSource = recorder::source(rec);
    Engine::with_parts(
        settings,
        id,
        backend,
        source,
        Clock::System,
        tokio::runtime::Handle::current(),
    )
    .expect("engine")
}

fn pod(uid: &str, state: AppState, ended: Option<SystemTime>) -> Observation {
    Observation {
        kind: if state.is_terminated() {
            EventKind::Update
        } else {
            EventKind::Add
        },
        tag: format!("tag-{uid}"),
        pod_name: format!("driver-{uid}"),
        pod_uid: uid.to_owned(),
        state,
        has_app_selector: true,
        terminated_at: ended,
        deletion_requested: false,
        annotations: None,
    }
}

async fn until(within: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    while !cond() {
        if t0.elapsed() > within {
            return None;
        }
        sleep(Duration::from_millis(2)).await;
    }
    Some(t0.elapsed())
}

fn stats(ms: &[f64]) -> serde_json::Value {
    let mut v = ms.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    if v.is_empty() {
        return serde_json::Value::Null;
    }
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    serde_json::json!({"median_ms": round(median), "min_ms": round(v[0]), "max_ms": round(v[v.len() - 1]), "runs": v.len()})
}

fn round(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

async fn election_bench(env: &BackendEnv, runs: usize) {
    // 1. Graceful handoff: the leader closes; time until the other candidate leads.
    let mut handoff = Vec::new();
    for i in 0..runs {
        let scope = Scope::new(Some("bench"), Some(&format!("handoff-{i}")));
        let (ra, rb) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
        let a = engine(&env.conf, "a", 60_000, ra);
        let b = engine(&env.conf, "b", 60_000, rb);
        a.observe(scope.clone(), pod("warm", AppState::Running, None))
            .unwrap();
        until(Duration::from_secs(20), || {
            a.leadership(&scope) == Some(Leadership::Leading)
        })
        .await;
        b.observe(scope.clone(), pod("warm", AppState::Running, None))
            .unwrap();
        sleep(Duration::from_millis(300)).await;
        let t0 = Instant::now();
        a.close_async(Duration::from_secs(5)).await;
        if until(Duration::from_secs(20), || {
            b.leadership(&scope) == Some(Leadership::Leading)
        })
        .await
        .is_some()
        {
            handoff.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        b.close_async(Duration::from_secs(5)).await;
    }
    // 2. Crash failover: the leader process is killed; time until the successor's first DELETE of
    //    a pod that was already overdue while it followed.
    let mut failover = Vec::new();
    // 3. Frozen ex-leader: DELETEs it sends after SIGCONT.
    let mut frozen_deletes = 0usize;
    let mut frozen_takeover = Vec::new();
    for i in 0..runs {
        let scope_ns = format!("crash-{i}");
        let child = ChildEngine::spawn(&env.conf, &scope_ns, 60_000, &[]);
        if !child.wait_leading().await {
            continue;
        }
        let rec = Arc::new(Recorder::default());
        let b = engine(&env.conf, "b", 60_000, rec.clone());
        let scope = Scope::new(Some("bench"), Some(&scope_ns));
        b.observe(
            scope.clone(),
            pod(
                "overdue",
                AppState::Finished,
                Some(SystemTime::now() - Duration::from_secs(3600)),
            ),
        )
        .unwrap();
        sleep(Duration::from_millis(300)).await;
        child.signal("KILL");
        let t0 = Instant::now();
        if until(Duration::from_secs(30), || {
            !rec.uids.lock().unwrap().is_empty()
        })
        .await
        .is_some()
        {
            failover.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        b.close_async(Duration::from_secs(5)).await;

        let scope_ns = format!("frozen-{i}");
        let scope = Scope::new(Some("bench"), Some(&scope_ns));
        let ended = SystemTime::now();
        let child = ChildEngine::spawn(&env.conf, &scope_ns, 1500, &[("frozen", ended)]);
        if !child.wait_leading().await {
            continue;
        }
        let rec = Arc::new(Recorder::default());
        let b = engine(&env.conf, "b", 1500, rec.clone());
        b.observe(
            scope.clone(),
            pod("frozen", AppState::Finished, Some(ended)),
        )
        .unwrap();
        child.signal("STOP");
        let t0 = Instant::now();
        if until(Duration::from_secs(30), || {
            !rec.uids.lock().unwrap().is_empty()
        })
        .await
        .is_some()
        {
            frozen_takeover.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
        child.signal("CONT");
        sleep(Duration::from_secs(2)).await;
        frozen_deletes += child.deletes();
        b.close_async(Duration::from_secs(5)).await;
    }
    let line = serde_json::json!({
        "backend": env.name,
        "timeouts": env.timeouts,
        "graceful_handoff": stats(&handoff),
        "crash_failover_to_first_delete": stats(&failover),
        "frozen_leader_takeover_to_first_delete": stats(&frozen_takeover),
        "frozen_ex_leader_deletes_after_wake": frozen_deletes,
    });
    common::bench::line("election", line);
}

/// Steady state: one leader and one follower on a scope; backend requests per scope per minute
/// (the Kubernetes API gets none: the recording deleter is the only way out, and it is idle).
async fn steady_state(env: &BackendEnv, quick: bool) {
    let window = if quick {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(60)
    };
    let scope = Scope::new(Some("bench"), Some("steady"));
    let (ra, rb) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    let a = engine(&env.conf, "a", 60_000, ra.clone());
    let b = engine(&env.conf, "b", 60_000, rb.clone());
    for e in [&a, &b] {
        e.observe(scope.clone(), pod("warm", AppState::Running, None))
            .unwrap();
    }
    sleep(Duration::from_secs(3)).await;
    let before = (env.requests)();
    sleep(window).await;
    let after = (env.requests)();
    let per_minute = match (before, after) {
        (Some(b0), Some(b1)) => Some(round((b1 - b0) as f64 * 60.0 / window.as_secs_f64())),
        _ => None,
    };
    let kube = ra.uids.lock().unwrap().len() + rb.uids.lock().unwrap().len();
    a.close_async(Duration::from_secs(5)).await;
    b.close_async(Duration::from_secs(5)).await;
    common::bench::line(
        "election_steady_state",
        serde_json::json!({
            "backend": env.name,
            "timeouts": env.timeouts,
            "candidates_per_scope": 2,
            "window_s": window.as_secs(),
            "backend_requests_per_scope_per_minute": per_minute,
            "kubernetes_requests": kube,
        }),
    );
}

/// An engine in a child process (this binary with `PODSWEEP_BENCH_CHILD`); killed on drop.
struct ChildEngine {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl ChildEngine {
    fn spawn(
        conf: &[(&str, String)],
        namespace: &str,
        retain_ms: u64,
        pods: &[(&str, SystemTime)],
    ) -> Self {
        let spec = serde_json::json!({
            "conf": conf.iter().map(|(k, v)| (k.to_string(), v.clone())).collect::<HashMap<_, _>>(),
            "namespace": namespace,
            "retain_ms": retain_ms,
            "pods": pods.iter().map(|(u, t)| (u.to_string(), t.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64)).collect::<Vec<_>>(),
        });
        let mut child = Command::new(std::env::current_exe().unwrap())
            .env(CHILD_ENV, spec.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = child.stdout.take().unwrap();
        let sink = lines.clone();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(l);
            }
        });
        ChildEngine { child, lines }
    }

    async fn wait_leading(&self) -> bool {
        until(Duration::from_secs(30), || {
            self.lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l == "STATE LEADING")
        })
        .await
        .is_some()
    }

    fn deletes(&self) -> usize {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.starts_with("DELETE"))
            .count()
    }

    fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .args([format!("-{sig}"), self.child.id().to_string()])
            .status();
    }
}

impl Drop for ChildEngine {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn child(spec: &str) {
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let spec: serde_json::Value = serde_json::from_str(spec).expect("child spec");
    let conf: Vec<(&'static str, String)> = spec["conf"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| {
            (
                &*Box::leak(k.clone().into_boxed_str()),
                v.as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let rec = Arc::new(Recorder::echoing());
        let e = engine(&conf, "child", spec["retain_ms"].as_u64().unwrap(), rec);
        let scope = Scope::new(Some("bench"), spec["namespace"].as_str());
        e.observe(scope.clone(), pod("warm", AppState::Running, None))
            .unwrap();
        for p in spec["pods"].as_array().unwrap() {
            let at = UNIX_EPOCH + Duration::from_millis(p[1].as_u64().unwrap());
            e.observe(
                scope.clone(),
                pod(p[0].as_str().unwrap(), AppState::Finished, Some(at)),
            )
            .unwrap();
        }
        let mut last = None;
        loop {
            let now = e.leadership(&scope);
            if now != last {
                println!("STATE {}", now.map(|l| l.as_str()).unwrap_or("NONE"));
                let _ = std::io::stdout().flush();
                last = now;
            }
            sleep(Duration::from_millis(5)).await;
        }
    });
}
