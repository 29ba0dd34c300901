//! `scripts/bench fleet_scale`: what many scopes cost the coordination service, one JSON line per
//! backend.
//!
//! 3 server processes (this binary again, one podsweep engine each, backend from Kyuubi's keys at
//! Kyuubi's default timeouts) see one running driver pod in each of 200 scopes (10 with
//! `--smoke`), against a real ZooKeeper and a real etcd. Measured:
//! - `all_led_ms`: from the first process spawned until every scope has a leader;
//! - `sessions_per_server`: the most ZooKeeper sessions (etcd leases) one server holds, counted
//!   on the coordination server: the distinct owners of the latch nodes (the leases of the
//!   election keys) whose data is that server's identity; `sessions_each` lists all three;
//! - `coordination_per_minute`: packets received by ZooKeeper (`srvr`) or gRPC messages received
//!   by etcd (`/metrics`) per minute, all servers together, in steady state;
//! - `failover_all_scopes_ms`: the process leading the most scopes is killed (SIGKILL) until
//!   every scope it led has a leader again.
//!
//! ZooKeeper runs with `maxClientCnxns=0`: its default (60 connections per client address) would
//! refuse most of the sessions of a client that opens one per scope, and every process here
//! connects from 127.0.0.1.

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::recorder::{self, Recorder};
use etcd_client::GetOptions;
use podsweep::clock::Clock;
use podsweep::config::{keys, HaSettings, Settings, ETCD_CLIENT_CLASS};
use podsweep::election::etcd::EtcdBackend;
use podsweep::election::zookeeper::ZooKeeperBackend;
use podsweep::election::{Backend, Leadership};
use podsweep::engine::Engine;
use podsweep::model::{AppState, EventKind, Observation};
use podsweep::scope::Scope;
use serde_json::json;

const CHILD_ENV: &str = "PODSWEEP_FLEET_SCALE_CHILD";
const SERVERS: usize = 3;
const NAMESPACE: &str = "podsweep_scale";

fn main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        return child(&spec);
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    for n in args.iter().filter(|a| !a.starts_with('-')) {
        if !["fleet_scale", "zookeeper", "etcd"].contains(&n.as_str()) {
            eprintln!("fleet_scale: unknown argument {n} (known: fleet_scale, zookeeper, etcd)");
            std::process::exit(2);
        }
    }
    let only: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| ["zookeeper", "etcd"].contains(a))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    for backend in ["zookeeper", "etcd"] {
        if only.is_empty() || only.contains(&backend) {
            rt.block_on(fleet_scale(backend, smoke));
        }
    }
}

fn progress(msg: &str) {
    eprintln!("[bench] {msg}");
}

fn scope_of(i: usize) -> Scope {
    Scope::new(None, Some(&format!("tenant-{i:03}")))
}

fn identity(server: usize) -> String {
    format!("server-{server}:10009")
}

/// The coordination server under test and what the bench needs from it.
enum Coordinator {
    ZooKeeper(common::zk::ZkServer),
    Etcd(common::etcd::EtcdServer),
}

impl Coordinator {
    fn start(backend: &str) -> Coordinator {
        match backend {
            "zookeeper" => {
                // ZooKeeper as Kyuubi meets it: tickTime 2 s, so the 60 s session Kyuubi asks
                // for is cut to 40 s (20 ticks).
                let tick = Duration::from_secs(2);
                let options = common::zk::ZkOptions {
                    tick,
                    min_session: tick * 2,
                    max_session: tick * 20,
                    extra_config: "maxClientCnxns=0\n".into(),
                    ..Default::default()
                };
                Coordinator::ZooKeeper(common::zk::ZkServer::start_with(options))
            }
            _ => Coordinator::Etcd(common::etcd::EtcdServer::start()),
        }
    }

    /// Kyuubi's keys that point at this server, every timeout left at Kyuubi's default.
    fn conf(&self) -> HashMap<String, String> {
        let mut m = HashMap::new();
        m.insert(keys::CLEANUP_KIND.to_owned(), "ALL".to_owned());
        m.insert(keys::HA_NAMESPACE.to_owned(), NAMESPACE.to_owned());
        match self {
            Coordinator::ZooKeeper(zk) => {
                m.insert(keys::HA_ADDRESSES.to_owned(), zk.addr());
            }
            Coordinator::Etcd(etcd) => {
                m.insert(keys::HA_ADDRESSES.to_owned(), etcd.endpoint());
                m.insert(
                    keys::HA_CLIENT_CLASS.to_owned(),
                    ETCD_CLIENT_CLASS.to_owned(),
                );
            }
        }
        m
    }

    fn timeouts(&self) -> serde_json::Value {
        match self {
            Coordinator::ZooKeeper(_) => json!({
                "session_timeout_requested_ms": 60000,
                "server_tick_ms": 2000,
                "server_max_session_ms": 40000,
                "server_max_client_cnxns": 0,
            }),
            Coordinator::Etcd(_) => json!({"lease_timeout": "PT10S (Kyuubi's default)"}),
        }
    }

    /// Packets (ZooKeeper) or gRPC messages (etcd) the server has received so far.
    fn messages(&self) -> Option<u64> {
        match self {
            Coordinator::ZooKeeper(zk) => common::bench::zk_packets_received(zk.port()),
            Coordinator::Etcd(etcd) => common::bench::etcd_grpc_messages(&etcd.endpoint()),
        }
    }

    /// For each server, the distinct sessions (leases) that own its latch nodes (election keys)
    /// over all `scopes`, read from the coordination server.
    async fn sessions_by_server(&self, scopes: usize) -> Vec<usize> {
        let settings = Settings::from_map(self.conf()).expect("bench conf");
        let mut owners: HashMap<String, HashSet<i64>> = HashMap::new();
        match (self, &settings.ha) {
            (Coordinator::ZooKeeper(zk), HaSettings::ZooKeeper(s)) => {
                let backend = ZooKeeperBackend::new(s.clone());
                let client = common::zk::inspector(&zk.addr()).await;
                for i in 0..scopes {
                    let dir = backend.latch_dir(&scope_of(i));
                    let names = client.list_children(&dir).await.unwrap_or_default();
                    for name in names {
                        if let Ok((data, stat)) = client.get_data(&format!("{dir}/{name}")).await {
                            owners
                                .entry(String::from_utf8_lossy(&data).into_owned())
                                .or_default()
                                .insert(stat.ephemeral_owner);
                        }
                    }
                }
            }
            (Coordinator::Etcd(etcd), HaSettings::Etcd(s)) => {
                let backend = EtcdBackend::new(s.clone());
                let mut client = etcd.client().await;
                for i in 0..scopes {
                    let prefix = format!("{}/", backend.election_name(&scope_of(i)));
                    let got = client
                        .get(prefix.as_str(), Some(GetOptions::new().with_prefix()))
                        .await
                        .expect("read election keys");
                    for kv in got.kvs() {
                        owners
                            .entry(String::from_utf8_lossy(kv.value()).into_owned())
                            .or_default()
                            .insert(kv.lease());
                    }
                }
            }
            _ => unreachable!("the settings name the server they were built from"),
        }
        (0..SERVERS)
            .map(|s| owners.get(&identity(s)).map_or(0, HashSet::len))
            .collect()
    }

    /// Every lease etcd holds (`LeaseLeases`); `None` for ZooKeeper.
    async fn leases_total(&self) -> Option<usize> {
        match self {
            Coordinator::Etcd(etcd) => {
                let mut client = etcd.client().await;
                client.leases().await.ok().map(|r| r.leases().len())
            }
            Coordinator::ZooKeeper(_) => None,
        }
    }

    /// ZooKeeper's `zk_num_alive_connections` (`mntr`); `None` for etcd.
    fn zk_alive_connections(&self) -> Option<u64> {
        match self {
            Coordinator::ZooKeeper(zk) => common::zk::four_letter(zk.port(), "mntr")?
                .lines()
                .find_map(|l| l.strip_prefix("zk_num_alive_connections"))
                .and_then(|v| v.trim().parse().ok()),
            Coordinator::Etcd(_) => None,
        }
    }
}

/// Which scopes each server process says it leads.
struct Fleet {
    children: Vec<Option<Child>>,
    /// Per server, the scopes it leads; `None` once it is dead.
    leading: Arc<Mutex<Vec<Option<HashSet<usize>>>>>,
}

impl Fleet {
    fn spawn(conf: &HashMap<String, String>, scopes: usize) -> Fleet {
        let leading = Arc::new(Mutex::new(vec![Some(HashSet::new()); SERVERS]));
        let mut children = Vec::new();
        for server in 0..SERVERS {
            let spec = json!({"conf": conf, "scopes": scopes, "server": server});
            let mut child = Command::new(std::env::current_exe().expect("own path"))
                .env(CHILD_ENV, spec.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn a server process");
            let out = child.stdout.take().expect("child stdout");
            let leading = leading.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    let mut l = leading.lock().unwrap_or_else(|p| p.into_inner());
                    // Lines still buffered from a killed server do not count.
                    let Some(set) = l[server].as_mut() else {
                        break;
                    };
                    if let Some(i) = line.strip_prefix("LEAD ").and_then(|i| i.parse().ok()) {
                        set.insert(i);
                    } else if let Some(i) = line.strip_prefix("DROP ").and_then(|i| i.parse().ok())
                    {
                        set.remove(&i);
                    }
                }
                // The process is gone: it leads nothing.
                leading.lock().unwrap_or_else(|p| p.into_inner())[server] = None;
            });
            children.push(Some(child));
        }
        Fleet { children, leading }
    }

    fn leading(&self) -> Vec<HashSet<usize>> {
        let l = self.leading.lock().unwrap_or_else(|p| p.into_inner());
        l.iter().map(|s| s.clone().unwrap_or_default()).collect()
    }

    /// How many servers lead each scope.
    fn leaders_per_scope(&self, scopes: usize) -> Vec<usize> {
        let leading = self.leading();
        (0..scopes)
            .map(|i| leading.iter().filter(|l| l.contains(&i)).count())
            .collect()
    }

    fn kill(&mut self, server: usize) {
        if let Some(mut c) = self.children[server].take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Dead, it leads nothing, whether or not its reader has seen the end of its output yet.
        self.leading.lock().unwrap_or_else(|p| p.into_inner())[server] = None;
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for s in 0..SERVERS {
            self.kill(s);
        }
    }
}

/// Polls `done` every 20 ms for at most `limit`; how long it took, if it happened.
async fn wait_for(limit: Duration, since: Instant, done: impl Fn() -> bool) -> Option<u64> {
    loop {
        if done() {
            return Some(since.elapsed().as_millis() as u64);
        }
        if since.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn fleet_scale(backend: &'static str, smoke: bool) {
    let scopes = if smoke { 10 } else { 200 };
    let window = Duration::from_secs(if smoke { 10 } else { 120 });
    let server = Coordinator::start(backend);
    let conf = server.conf();
    progress(&format!(
        "fleet_scale ({backend}): {SERVERS} server processes x {scopes} scopes"
    ));
    let t0 = Instant::now();
    let mut fleet = Fleet::spawn(&conf, scopes);
    let all_led_ms = wait_for(Duration::from_secs(180), t0, || {
        fleet.leaders_per_scope(scopes).iter().all(|&n| n >= 1)
    })
    .await;
    // Let the last followers finish campaigning before counting.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let one_leader_per_scope = fleet.leaders_per_scope(scopes).iter().all(|&n| n == 1);
    let alive_connections = server.zk_alive_connections();
    let sessions_each = server.sessions_by_server(scopes).await;
    let leases_total = server.leases_total().await;
    progress(&format!(
        "fleet_scale ({backend}): all led in {all_led_ms:?} ms; sessions per server {sessions_each:?}; measuring {} s",
        window.as_secs()
    ));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = server.messages();
    tokio::time::sleep(window).await;
    let after = server.messages();
    let minutes = window.as_secs_f64() / 60.0;
    let coordination_per_minute = match (before, after) {
        (Some(b), Some(a)) => Some(((a - b) as f64 / minutes).round() as u64),
        _ => None,
    };
    // Kill the server that leads the most scopes; wait until each of them has a new leader.
    let leading = fleet.leading();
    let victim = (0..SERVERS).max_by_key(|&s| leading[s].len()).unwrap_or(0);
    let led: Vec<usize> = leading[victim].iter().copied().collect();
    progress(&format!(
        "fleet_scale ({backend}): killing server-{victim}, which leads {} scopes",
        led.len()
    ));
    let tk = Instant::now();
    fleet.kill(victim);
    let failover_all_scopes_ms = wait_for(Duration::from_secs(180), tk, || {
        let per_scope = fleet.leaders_per_scope(scopes);
        led.iter().all(|&i| per_scope[i] >= 1)
    })
    .await;
    let per_scope = fleet.leaders_per_scope(scopes);
    let led_again = led.iter().filter(|&&i| per_scope[i] >= 1).count();
    drop(fleet);
    let line = json!({
        "backend": backend,
        "servers": SERVERS,
        "scopes": scopes,
        "sessions_per_server": sessions_each.iter().max(),
        "sessions_each": sessions_each,
        "sessions_counted_as": if backend == "zookeeper" { "distinct sessions owning the server's latch nodes" } else { "distinct leases of the server's election keys" },
        "zk_alive_connections": alive_connections,
        "etcd_leases_total": leases_total,
        "coordination_per_minute": coordination_per_minute,
        "coordination_counted_as": if backend == "zookeeper" { "packets received by ZooKeeper (srvr), all servers" } else { "gRPC messages received by etcd (/metrics), all servers" },
        "window_s": window.as_secs(),
        "all_led_ms": all_led_ms,
        "one_leader_per_scope": one_leader_per_scope,
        "killed_leader_led_scopes": led.len(),
        "failover_all_scopes_ms": failover_all_scopes_ms,
        "failover_scopes_led_again": led_again,
        "failover_limit_s": 180,
        "timeouts": server.timeouts(),
    });
    common::bench::line("fleet_scale", line);
}

/// A server process: one engine; one running driver pod in each scope starts its elections.
/// Prints `LEAD <i>` / `DROP <i>` whenever its leadership of scope `i` changes; exits when its
/// stdin closes (the parent went away).
fn child(spec: &str) {
    let spec: serde_json::Value = serde_json::from_str(spec).expect("child spec");
    let conf: HashMap<String, String> = spec["conf"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let scopes = spec["scopes"].as_u64().unwrap_or(1) as usize;
    let server = spec["server"].as_u64().unwrap_or(0) as usize;
    let settings = Settings::from_map(conf).expect("child conf");
    let backend: Arc<dyn Backend> = match &settings.ha {
        HaSettings::ZooKeeper(z) => Arc::new(ZooKeeperBackend::new(z.clone())),
        HaSettings::Etcd(e) => Arc::new(EtcdBackend::new(e.clone())),
        HaSettings::Local => panic!("fleet_scale needs an HA backend"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let engine = Engine::with_parts(
        settings,
        &identity(server),
        backend,
        recorder::source(Arc::new(Recorder::default())),
        Clock::System,
        rt.handle().clone(),
    )
    .expect("engine");
    let all: Vec<Scope> = (0..scopes).map(scope_of).collect();
    for (i, s) in all.iter().enumerate() {
        let uid = format!("running-{i}");
        let pod = Observation {
            kind: EventKind::Add,
            tag: format!("tag-{uid}"),
            pod_name: format!("kyuubi-spark-{uid}-driver"),
            pod_uid: uid,
            state: AppState::Running,
            has_app_selector: true,
            terminated_at: None,
            deletion_requested: false,
        };
        engine.observe(s.clone(), pod).expect("observe");
    }
    std::thread::spawn(|| {
        let mut sink = String::new();
        while std::io::stdin()
            .lock()
            .read_line(&mut sink)
            .is_ok_and(|n| n > 0)
        {}
        std::process::exit(0);
    });
    rt.block_on(async move {
        let mut led = vec![false; scopes];
        loop {
            let mut out = String::new();
            for (i, s) in all.iter().enumerate() {
                let now = engine.leadership(s) == Some(Leadership::Leading);
                if now != led[i] {
                    out.push_str(&format!("{} {i}\n", if now { "LEAD" } else { "DROP" }));
                    led[i] = now;
                }
            }
            if !out.is_empty() {
                let mut stdout = std::io::stdout().lock();
                let _ = stdout.write_all(out.as_bytes());
                let _ = stdout.flush();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}
