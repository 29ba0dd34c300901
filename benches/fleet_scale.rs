//! `scripts/bench fleet_scale`: what many scopes cost the coordination service, one JSON line per
//! backend.
//!
//! 3 server processes (this binary again, one podsweep engine each, backend from Kyuubi's keys at
//! Kyuubi's default timeouts: the fleet of tests/common/fleet.rs, shared with `scripts/chaos`)
//! see one running driver pod in each of 200 scopes (10 with `--smoke`), against a real ZooKeeper
//! and a real etcd. Measured:
//! - `all_led_ms`: from the first process spawned until every scope has a leader;
//! - `sessions_per_server`: the most ZooKeeper sessions (etcd leases) one server holds, counted
//!   on the coordination server: the distinct owners of the latch nodes (the leases of the
//!   election keys) whose data is that server's identity; `sessions_each` lists all three;
//! - `coordination_per_minute`: packets received by ZooKeeper (`srvr`) or gRPC messages received
//!   by etcd (`/metrics`) per minute, all servers together, in steady state, and per server;
//! - `zk_packets_per_minute_by_session` (ZooKeeper): the same per session (`cons`), highest
//!   first: sessions holding a won seat send heartbeats, the others only the client's pings;
//!   `leading_servers`: how many servers led a scope meanwhile;
//! - `failover_all_scopes_ms`: the process leading the most scopes is killed (SIGKILL) until
//!   every scope it led has a leader again.
//!
//! `PODSWEEP_FLEET_SCOPES` and `PODSWEEP_FLEET_WINDOW_S` change the number of scopes and the
//! measured window (seconds).
//!
//! ZooKeeper runs with `maxClientCnxns=0`: its default (60 connections per client address) would
//! refuse most of the sessions of a client that opens one per scope, and every process here
//! connects from 127.0.0.1.

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::fleet::Fleet;
use common::process::poll_until;
use podsweep::config::{keys, HaSettings, Settings, ETCD_CLIENT_CLASS};
use podsweep::election::etcd::EtcdBackend;
use podsweep::election::zookeeper::ZooKeeperBackend;
use podsweep::kube_client::resolve;
use podsweep::scope::Scope;
use serde_json::json;

const SERVERS: usize = 3;
const NAMESPACE: &str = "podsweep_scale";
const MASTER: &str = "kyuubi.kubernetes.master.address";

fn main() {
    common::fleet::child_main();
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
            fleet_scale(&rt, backend, smoke);
        }
    }
}

fn progress(msg: &str) {
    eprintln!("[bench] {msg}");
}

/// The namespace of scope `i`.
fn namespace(i: usize) -> String {
    format!("tenant-{i:03}")
}

fn scope_of(i: usize) -> Scope {
    Scope::new(None, Some(&namespace(i)))
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
            Coordinator::Etcd(_) => {
                json!({"election_lease": "PT30S (podsweep's default; Kyuubi's lease timeout PT10S is its registrations')"})
            }
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
    /// over all `scopes`, read from the coordination server. The servers talk to the API server
    /// at `api_url`: the cluster of their scopes' election keys.
    async fn sessions_by_server(&self, scopes: usize, api_url: &str) -> Vec<usize> {
        let mut conf = self.conf();
        conf.insert(MASTER.to_owned(), api_url.to_owned());
        // The election key: the cluster's identity, as the pods API publishes it.
        let key = |i: usize| {
            let named = resolve(&conf, &scope_of(i)).expect("the scope's cluster");
            let ns = named.namespace.clone().unwrap_or_default();
            Scope::new(Some(&common::pods_api::cluster_key()), Some(&ns))
        };
        let settings = Settings::from_map(conf.clone()).expect("bench conf");
        let mut owners: HashMap<String, HashSet<i64>> = HashMap::new();
        match (self, &settings.ha) {
            (Coordinator::ZooKeeper(zk), HaSettings::ZooKeeper(s)) => {
                let backend = ZooKeeperBackend::new(s.clone());
                let client = common::zk::inspector(&zk.addr()).await;
                for i in 0..scopes {
                    let dir = backend.latch_dir(&key(i));
                    for n in common::zk::latch_nodes_with(&client, &dir).await {
                        owners.entry(n.identity).or_default().insert(n.owner);
                    }
                }
            }
            (Coordinator::Etcd(etcd), HaSettings::Etcd(s)) => {
                let backend = EtcdBackend::new(s.clone());
                let mut client = etcd.client().await;
                for i in 0..scopes {
                    let prefix = format!("{}/", backend.election_name(&key(i)));
                    for k in common::etcd::keys_under(&mut client, &prefix).await {
                        owners.entry(k.identity).or_default().insert(k.owner);
                    }
                }
            }
            _ => unreachable!("the settings name the server they were built from"),
        }
        // A count of nothing is a broken measurement, not a figure: say what is there instead.
        if owners.is_empty() {
            let found = match (self, &settings.ha) {
                (Coordinator::Etcd(etcd), HaSettings::Etcd(s)) => {
                    let mut client = etcd.client().await;
                    common::etcd::keys_under(&mut client, &format!("{}/", s.root()))
                        .await
                        .into_iter()
                        .map(|c| format!("{} = {} (lease {})", c.key, c.identity, c.owner))
                        .take(10)
                        .collect::<Vec<_>>()
                }
                _ => Vec::new(),
            };
            panic!("no election node of any scope found where the bench looked; first keys: {found:#?}");
        }
        (0..SERVERS)
            .map(|s| owners.get(&Fleet::tag(s)).map_or(0, HashSet::len))
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

    /// Packets ZooKeeper received from each session so far (`cons`); empty for etcd.
    fn received_by_session(&self) -> std::collections::BTreeMap<String, u64> {
        match self {
            Coordinator::ZooKeeper(zk) => common::bench::zk_received_by_session(zk.port()),
            Coordinator::Etcd(_) => Default::default(),
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

/// How many servers lead each of the first `scopes` scopes.
fn leaders_per_scope(fleet: &Fleet, scopes: usize) -> Vec<usize> {
    let leading = fleet.leading();
    (0..scopes)
        .map(|i| {
            let ns = namespace(i);
            leading.iter().filter(|l| l.contains(&ns)).count()
        })
        .collect()
}

fn fleet_scale(rt: &tokio::runtime::Runtime, backend: &'static str, smoke: bool) {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let scopes = env("PODSWEEP_FLEET_SCOPES").map_or(if smoke { 10 } else { 200 }, |n| n as usize);
    let window =
        Duration::from_secs(env("PODSWEEP_FLEET_WINDOW_S").unwrap_or(if smoke { 10 } else { 120 }));
    let server = Coordinator::start(backend);
    progress(&format!(
        "fleet_scale ({backend}): {SERVERS} server processes x {scopes} scopes"
    ));
    // One running driver pod per scope (the elections start with it), told to every server.
    let mut fleet = Fleet::new(rt, &namespace(0), Vec::new());
    fleet.poll = Duration::from_millis(20);
    fleet.record_deletes = true;
    for i in 0..scopes {
        fleet.add_running_in(&namespace(i));
    }
    // Every server talks to the fleet's one API address: the cluster, and so the election key,
    // of a scope is its API server's address.
    let conf: Vec<(String, String)> = server.conf().into_iter().collect();
    let t0 = Instant::now();
    for _ in 0..SERVERS {
        fleet.spawn_with(conf.clone());
    }
    let all_led_ms = poll_until(Duration::from_secs(180), || {
        leaders_per_scope(&fleet, scopes).iter().all(|&n| n >= 1)
    })
    .map(|_| t0.elapsed().as_millis() as u64);
    // Let the last followers finish campaigning before counting.
    std::thread::sleep(Duration::from_secs(3));
    let one_leader_per_scope = leaders_per_scope(&fleet, scopes).iter().all(|&n| n == 1);
    let alive_connections = server.zk_alive_connections();
    let sessions_each = rt.block_on(server.sessions_by_server(scopes, &fleet.api.url));
    let leases_total = rt.block_on(server.leases_total());
    progress(&format!(
        "fleet_scale ({backend}): all led in {all_led_ms:?} ms; sessions per server {sessions_each:?}; measuring {} s",
        window.as_secs()
    ));
    std::thread::sleep(Duration::from_secs(2));
    let by_session_before = server.received_by_session();
    let before = server.messages();
    std::thread::sleep(window);
    let after = server.messages();
    let by_session_after = server.received_by_session();
    let minutes = window.as_secs_f64() / 60.0;
    // Per session (ZooKeeper): the leaders' sessions send heartbeats, the others pings alone.
    let mut per_session: Vec<f64> = by_session_after
        .iter()
        .filter_map(|(sid, a)| {
            let b = by_session_before.get(sid)?;
            Some(((a - b) as f64 / minutes * 10.0).round() / 10.0)
        })
        .collect();
    per_session.sort_by(|a, b| b.total_cmp(a));
    let coordination_per_minute = match (before, after) {
        (Some(b), Some(a)) => Some(((a - b) as f64 / minutes).round() as u64),
        _ => None,
    };
    // Kill the server that leads the most scopes; wait until each of them has a new leader.
    let leading = fleet.leading();
    let victim = (0..SERVERS).max_by_key(|&s| leading[s].len()).unwrap_or(0);
    let led: Vec<usize> = (0..scopes)
        .filter(|&i| leading[victim].contains(&namespace(i)))
        .collect();
    progress(&format!(
        "fleet_scale ({backend}): killing server-{victim}, which leads {} scopes",
        led.len()
    ));
    let tk = Instant::now();
    fleet.kill(victim);
    let failover_all_scopes_ms = poll_until(Duration::from_secs(180), || {
        let per_scope = leaders_per_scope(&fleet, scopes);
        led.iter().all(|&i| per_scope[i] >= 1)
    })
    .map(|_| tk.elapsed().as_millis() as u64);
    let per_scope = leaders_per_scope(&fleet, scopes);
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
        "coordination_per_minute_per_server": coordination_per_minute
            .map(|n| (n as f64 / SERVERS as f64 * 10.0).round() / 10.0),
        "coordination_counted_as": if backend == "zookeeper" { "packets received by ZooKeeper (srvr), all servers" } else { "gRPC messages received by etcd (/metrics), all servers" },
        "zk_packets_per_minute_by_session": if backend == "zookeeper" { json!(per_session) } else { serde_json::Value::Null },
        "leading_servers": leading.iter().filter(|l| !l.is_empty()).count(),
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
