//! Child-process candidates: a fleet of podsweep server processes on one scope (or many), with
//! the Kubernetes API played by [`PodsApi`] and the informers played by the parent.
//!
//! Each server is this executable run again with [`CHILD_ENV`] set (call [`child_main`] first
//! thing in `main`). A server builds its engine as a Kyuubi server does (`Engine::new` from
//! Kyuubi's keys), so its DELETEs are real HTTP requests to the shared [`PodsApi`]. Every server
//! of a fleet talks to the same API server URL, so a scope resolves to one cluster and one
//! election key for all of them, as in production; each sends a bearer token of its own
//! ([`PodsApi::token`], tag `server-<id>`), by which the API attributes every request to its sender
//! and applies per-server faults ([`PodsApi::hold_deletes`], [`PodsApi::cut`]). Its stdin
//! carries the informer's events (`POD <name> <uid> <deadline_ms> <namespace>`, `RUN <name> <uid>
//! <namespace>`, `GONE <name>`); its stdout reports its leadership of each scope it has seen a pod
//! in (`STATE <namespace> <LEADING|FOLLOWING|PAUSED|NO_QUORUM|NONE>`). The fleet's scope is its
//! namespace; pods in other namespaces ([`Fleet::add_running_in`]) start more scopes, whose
//! leaders [`Fleet::leading`] tells.
//!
//! The parent kills (SIGKILL), freezes (SIGSTOP) and thaws (SIGCONT) servers, adds pods, and at
//! the end reads the safety figures from the API's records ([`Fleet::figures`]): every DELETE,
//! who sent it and when it arrived; and from the servers' reports: two servers leading one scope
//! at once (a frozen or ended server leads nothing) for longer than [`Fleet::failover_window`].
//!
//! ```ignore
//! let fleet = Fleet::new(&rt, "ns", ha_conf);
//! for _ in 0..3 { fleet.spawn(); }
//! let (leader, _) = fleet.wait_leader(&[], Duration::from_secs(30)).unwrap();
//! let churn = fleet.churn(Duration::from_millis(50));
//! fleet.kill(leader);
//! ...
//! churn.stop();
//! fleet.drain(Duration::from_secs(30));
//! let figures = fleet.figures();
//! ```

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use podsweep::clock::Clock;
use podsweep::config::{keys, HaSettings, Settings};
use podsweep::election::etcd::EtcdBackend;
use podsweep::election::zookeeper::ZooKeeperBackend;
use podsweep::election::{Backend, Leadership};
use podsweep::engine::Engine;
use podsweep::model::{AppState, EventKind, Observation};
use podsweep::scope::Scope;
use serde_json::{json, Value};

use super::pods_api::{driver_pod, PodsApi};
use super::recorder::{self, Recorder};

/// Set in a server process's environment (its JSON spec).
pub const CHILD_ENV: &str = "PODSWEEP_FLEET_SERVER";
const MASTER: &str = "kyuubi.kubernetes.master.address";
const TOKEN: &str = "kyuubi.kubernetes.authenticate.oauthToken";
/// Every server's DELETE rate limit (qps and burst): above the churn of the scenarios.
pub const RATE_QPS: u32 = 200;

/// Runs this process as a fleet server when [`CHILD_ENV`] is set (and never returns then).
pub fn child_main() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child(&spec);
        std::process::exit(0);
    }
}

/// A leadership change seen by the parent.
#[derive(Clone, Debug)]
pub struct Transition {
    pub server: usize,
    pub state: String,
    pub at: Instant,
}

struct Server {
    id: usize,
    tag: String,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    /// Its leadership of the fleet's scope.
    state: String,
    /// The namespaces whose scope it leads.
    leading: HashSet<String>,
    /// The engine's last `leadership_reason` in the fleet's scope.
    reason: String,
    /// Killed (or closed) by the parent: its end is not a crash.
    ended_by_us: bool,
    frozen: bool,
}

struct Pod {
    namespace: String,
    uid: String,
    deadline_ms: u64,
    running: bool,
    gone: bool,
}

/// A stretch of time a server led a scope, and could act on it (not frozen, not ended).
#[derive(Clone, Debug)]
struct Span {
    server: usize,
    namespace: String,
    from: Instant,
    /// `None`: still leading.
    to: Option<Instant>,
}

#[derive(Default)]
struct World {
    servers: Vec<Server>,
    pods: HashMap<String, Pod>,
    /// Pod names in creation order (an informer's initial list).
    order: Vec<String>,
    transitions: Vec<Transition>,
    crashes: Vec<String>,
    next_pod: u64,
    /// API delete records already turned into `GONE` events.
    seen_deletes: usize,
    /// Every server's leadership of every scope it reported, over time.
    spans: Vec<Span>,
}

impl World {
    /// Server `id` leads `namespace` from now (if it is not leading it already).
    fn open_span(&mut self, id: usize, namespace: &str) {
        let open = self
            .spans
            .iter()
            .any(|s| s.server == id && s.namespace == namespace && s.to.is_none());
        if !open {
            self.spans.push(Span {
                server: id,
                namespace: namespace.to_owned(),
                from: Instant::now(),
                to: None,
            });
        }
    }

    /// Server `id` stops leading `namespace` (every scope when `None`) now.
    fn close_spans(&mut self, id: usize, namespace: Option<&str>) {
        let now = Instant::now();
        for s in self.spans.iter_mut().filter(|s| {
            s.server == id && s.to.is_none() && namespace.is_none_or(|ns| s.namespace == ns)
        }) {
            s.to = Some(now);
        }
    }

    fn send_all(&mut self, line: &str) {
        for s in self.servers.iter_mut().filter(|s| !s.frozen) {
            if let Some(stdin) = s.stdin.as_mut() {
                let _ = stdin.write_all(line.as_bytes());
            }
        }
    }
}

/// The safety figures every chaos line reports.
#[derive(Clone, Debug)]
pub struct Figures {
    pub pods: usize,
    pub delete_requests: usize,
    pub duplicates: usize,
    pub duplicates_within_bound: bool,
    pub leaked: usize,
    pub wrongful: usize,
    pub crashes: usize,
    pub crash_notes: Vec<String>,
    /// Each pod deleted twice by one server: its DELETEs and the leadership changes around them.
    pub beyond_bound: Vec<String>,
    /// The longest time two servers led one scope at once (ms).
    pub two_leaders_max_ms: u64,
    /// Each time two servers led one scope at once for longer than the fleet's failover window.
    pub two_leaders: Vec<String>,
}

impl Figures {
    /// The common fields of a chaos line.
    pub fn json(&self) -> Value {
        json!({
            "pods": self.pods,
            "delete_requests": self.delete_requests,
            "duplicates": self.duplicates,
            "duplicates_within_bound": self.duplicates_within_bound,
            "leaked": self.leaked,
            "wrongful": self.wrongful,
            "crashes": self.crashes,
            "two_leaders_max_ms": self.two_leaders_max_ms,
        })
    }

    /// What is broken among the common safety figures.
    pub fn broken(&self) -> Vec<String> {
        let mut b = Vec::new();
        if self.leaked > 0 {
            b.push(format!("leaked={}", self.leaked));
        }
        if self.wrongful > 0 {
            b.push(format!("wrongful={}", self.wrongful));
        }
        if self.crashes > 0 {
            b.push(format!("crashes={} {:?}", self.crashes, self.crash_notes));
        }
        if !self.duplicates_within_bound {
            b.push(format!(
                "duplicates beyond the bound of one per leader per pod: {:?}",
                self.beyond_bound
            ));
        }
        if !self.two_leaders.is_empty() {
            b.push(format!(
                "two leaders of one scope at once for longer than a failover window: {:?}",
                self.two_leaders
            ));
        }
        b
    }
}

pub struct Fleet {
    pub api: Arc<PodsApi>,
    pub namespace: String,
    pub retain_ms: u64,
    /// How often a server looks at its leadership of each scope.
    pub poll: Duration,
    /// Servers record their DELETEs instead of sending them (no Kubernetes client is built): for
    /// fleets where only the elections count.
    pub record_deletes: bool,
    /// How long two servers may both report leading one scope (a leader that lost its lease and
    /// has not said so yet, and its successor) before [`Fleet::figures`] calls it broken: a
    /// session / lease timeout and some slack. Two elections for one scope overlap for ever.
    pub failover_window: Duration,
    ha_conf: Vec<(String, String)>,
    world: Arc<Mutex<World>>,
    rt: tokio::runtime::Handle,
    pump_stop: Arc<AtomicBool>,
    pump: Mutex<Option<JoinHandle<()>>>,
    started: Instant,
}

impl Fleet {
    /// A fleet on scope `namespace` whose servers use the HA keys `ha_conf` (in the HA namespace
    /// `podsweep_chaos` unless they name one). The API server runs on `rt`.
    pub fn new(
        rt: &tokio::runtime::Runtime,
        namespace: &str,
        ha_conf: Vec<(String, String)>,
    ) -> Fleet {
        let api = Arc::new(rt.block_on(PodsApi::start()));
        let world = Arc::new(Mutex::new(World::default()));
        let pump_stop = Arc::new(AtomicBool::new(false));
        // Informers: every pod the API removed is reported GONE to every server.
        let pump = {
            let (api, world, stop) = (api.clone(), world.clone(), pump_stop.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let deletes = api.deletes();
                    let mut w = lock(&world);
                    let from = w.seen_deletes;
                    w.seen_deletes = deletes.len();
                    for d in &deletes[from..] {
                        if d.status == 200 {
                            if let Some(p) = w.pods.get_mut(&d.name) {
                                p.gone = true;
                            }
                            w.send_all(&format!("GONE {}\n", d.name));
                        }
                    }
                    drop(w);
                    thread::sleep(Duration::from_millis(5));
                }
            })
        };
        Fleet {
            api,
            namespace: namespace.to_owned(),
            retain_ms: 1000,
            poll: Duration::from_millis(5),
            record_deletes: false,
            failover_window: Duration::from_millis(2500),
            ha_conf,
            world,
            rt: rt.handle().clone(),
            pump_stop,
            pump: Mutex::new(Some(pump)),
            started: Instant::now(),
        }
    }

    /// Starts a server with the fleet's HA keys; returns its id.
    pub fn spawn(&self) -> usize {
        self.spawn_with(self.ha_conf.clone())
    }

    /// Starts a server with its own HA keys (e.g. through a proxy).
    pub fn spawn_with(&self, ha_conf: Vec<(String, String)>) -> usize {
        self.spawn_full(ha_conf, &[])
    }

    /// [`Fleet::spawn_with`] with more environment for the process (e.g. `KRB5CCNAME`).
    ///
    /// Every server gets the fleet's API server URL (one cluster: one election per scope) and a
    /// bearer token of its own, which tells its requests apart ([`Fleet::tag`]).
    pub fn spawn_full(&self, ha_conf: Vec<(String, String)>, env: &[(String, String)]) -> usize {
        let id = lock(&self.world).servers.len();
        let tag = Self::tag(id);
        let mut conf: HashMap<String, String> = ha_conf.into_iter().collect();
        conf.insert(MASTER.into(), self.api.url.clone());
        conf.insert(TOKEN.into(), self.api.token(&tag));
        conf.insert(keys::CLEANUP_KIND.into(), "ALL".into());
        conf.insert(keys::RETAIN_PERIOD.into(), self.retain_ms.to_string());
        conf.entry(keys::HA_NAMESPACE.into())
            .or_insert_with(|| "podsweep_chaos".into());
        conf.insert(keys::KUBE_NAMESPACE.into(), self.namespace.clone());
        conf.insert(keys::RATE_QPS.into(), RATE_QPS.to_string());
        conf.insert(keys::RATE_BURST.into(), RATE_QPS.to_string());
        let spec = json!({
            "conf": conf,
            "namespace": self.namespace,
            "id": id,
            "retain_ms": self.retain_ms,
            "poll_ms": self.poll.as_millis() as u64,
            "record_deletes": self.record_deletes,
        });
        // /proc/self/exe: the running binary even if a rebuild replaced the file meanwhile.
        let exe = if std::path::Path::new("/proc/self/exe").exists() {
            std::path::PathBuf::from("/proc/self/exe")
        } else {
            std::env::current_exe().expect("own path")
        };
        let mut child = Command::new(exe)
            .env(CHILD_ENV, spec.to_string())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file(id))
            .spawn()
            .expect("spawn a server process");
        let out = child.stdout.take().expect("child stdout");
        let mut stdin = child.stdin.take();
        let mut w = lock(&self.world);
        if let Some(s) = stdin.as_mut() {
            let mut list = String::new();
            for name in &w.order {
                let p = &w.pods[name];
                if p.gone {
                    continue;
                }
                if p.running {
                    list.push_str(&format!("RUN {name} {} {}\n", p.uid, p.namespace));
                } else {
                    list.push_str(&format!(
                        "POD {name} {} {} {}\n",
                        p.uid, p.deadline_ms, p.namespace
                    ));
                }
            }
            let _ = s.write_all(list.as_bytes());
        }
        w.servers.push(Server {
            id,
            tag,
            child: Some(child),
            stdin,
            state: "NONE".into(),
            leading: HashSet::new(),
            reason: String::new(),
            ended_by_us: false,
            frozen: false,
        });
        drop(w);
        let (world, namespace) = (self.world.clone(), self.namespace.clone());
        thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let mut w = lock(&world);
                // Lines still buffered from a server the parent ended do not count.
                if w.servers[id].ended_by_us {
                    continue;
                }
                if let Some((ns, state)) = line
                    .strip_prefix("STATE ")
                    .and_then(|rest| rest.split_once(' '))
                {
                    let s = &mut w.servers[id];
                    let frozen = s.frozen;
                    if state == "LEADING" {
                        s.leading.insert(ns.to_owned());
                    } else {
                        s.leading.remove(ns);
                    }
                    if ns == namespace {
                        s.state = state.to_owned();
                    }
                    if state != "LEADING" {
                        w.close_spans(id, Some(ns));
                    } else if !frozen {
                        w.open_span(id, ns);
                    }
                    if ns == namespace {
                        w.transitions.push(Transition {
                            server: id,
                            state: state.to_owned(),
                            at: Instant::now(),
                        });
                    }
                } else if let Some(reason) = line.strip_prefix("REASON ") {
                    w.servers[id].reason = reason.to_owned();
                }
            }
            let mut w = lock(&world);
            w.close_spans(id, None);
            let s = &mut w.servers[id];
            s.state = "NONE".into();
            s.leading.clear();
            s.stdin = None;
            if !s.ended_by_us {
                let status = s.child.as_mut().and_then(|c| c.wait().ok());
                let note = format!("server-{id} ended by itself: {status:?}");
                w.crashes.push(note);
            }
        });
        id
    }

    /// The API tag of server `id` (`DeleteRecord::via`; its bearer token's, [`PodsApi::token`]).
    pub fn tag(id: usize) -> String {
        format!("server-{id}")
    }

    pub fn state(&self, id: usize) -> String {
        lock(&self.world).servers[id].state.clone()
    }

    /// Why server `id` is in its state, as its engine's status says.
    pub fn reason(&self, id: usize) -> String {
        lock(&self.world).servers[id].reason.clone()
    }

    /// Servers that report LEADING now.
    pub fn leaders(&self) -> Vec<usize> {
        lock(&self.world)
            .servers
            .iter()
            .filter(|s| s.state == "LEADING")
            .map(|s| s.id)
            .collect()
    }

    /// Per server, the namespaces whose scope it leads (none once it has ended).
    pub fn leading(&self) -> Vec<HashSet<String>> {
        lock(&self.world)
            .servers
            .iter()
            .map(|s| s.leading.clone())
            .collect()
    }

    /// Waits until a server not in `except` reports LEADING; returns it and the time waited.
    pub fn wait_leader(&self, except: &[usize], within: Duration) -> Option<(usize, Duration)> {
        let t0 = Instant::now();
        loop {
            if let Some(l) = self.leaders().into_iter().find(|l| !except.contains(l)) {
                return Some((l, t0.elapsed()));
            }
            if t0.elapsed() > within {
                return None;
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Every leadership change seen so far.
    pub fn transitions(&self) -> Vec<Transition> {
        lock(&self.world).transitions.clone()
    }

    /// SIGKILL, as a crash would. From now on the server leads nothing.
    pub fn kill(&self, id: usize) {
        let mut w = lock(&self.world);
        w.close_spans(id, None);
        let s = &mut w.servers[id];
        s.ended_by_us = true;
        s.stdin = None;
        s.state = "NONE".into();
        s.leading.clear();
        if let Some(c) = s.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        s.frozen = false;
    }

    /// SIGSTOP: the process keeps its sockets but runs nothing (a long GC pause, a stalled VM).
    /// Informer events meant for it are lost while it is frozen.
    pub fn freeze(&self, id: usize) {
        let mut w = lock(&self.world);
        let s = &mut w.servers[id];
        if let Some(c) = &s.child {
            super::process::signal(c.id(), "STOP");
            s.frozen = true;
            // A stopped process acts on nothing: it leads nothing until it runs again.
            w.close_spans(id, None);
        }
    }

    /// SIGCONT; the server is sent the pods that still exist (its informer relists).
    pub fn thaw(&self, id: usize) {
        let mut w = lock(&self.world);
        let mut relist = String::new();
        for name in &w.order {
            let p = &w.pods[name];
            if p.gone {
                relist.push_str(&format!("GONE {name}\n"));
            } else if !p.running {
                relist.push_str(&format!(
                    "POD {name} {} {} {}\n",
                    p.uid, p.deadline_ms, p.namespace
                ));
            }
        }
        let s = &mut w.servers[id];
        if let Some(c) = &s.child {
            super::process::signal(c.id(), "CONT");
        }
        let was_frozen = std::mem::replace(&mut s.frozen, false);
        if let Some(stdin) = s.stdin.as_mut() {
            let _ = stdin.write_all(relist.as_bytes());
        }
        // It leads what it said it led until it says otherwise.
        if was_frozen {
            let leading: Vec<String> = s.leading.iter().cloned().collect();
            for ns in leading {
                w.open_span(id, &ns);
            }
        }
    }

    /// Adds a driver pod that terminated now (due in `retain_ms`) and tells every server.
    pub fn add_terminated(&self) -> String {
        let mut w = lock(&self.world);
        let name = format!("driver-{:06}", w.next_pod);
        w.next_pod += 1;
        let uid = self.api.create(&self.namespace, driver_pod(&name, Some(0)));
        let deadline_ms = now_ms() + self.retain_ms;
        w.pods.insert(
            name.clone(),
            Pod {
                namespace: self.namespace.clone(),
                uid: uid.clone(),
                deadline_ms,
                running: false,
                gone: false,
            },
        );
        w.order.push(name.clone());
        w.send_all(&format!(
            "POD {name} {uid} {deadline_ms} {}\n",
            self.namespace
        ));
        name
    }

    /// Adds a running driver pod (it starts the scope's election; never to be deleted).
    pub fn add_running(&self) -> String {
        self.add_running_in(&self.namespace)
    }

    /// Adds a running driver pod in `namespace`: every server campaigns in that scope too.
    pub fn add_running_in(&self, namespace: &str) -> String {
        let mut w = lock(&self.world);
        let name = format!("running-{:06}", w.next_pod);
        w.next_pod += 1;
        let uid = self.api.create(namespace, driver_pod(&name, None));
        w.pods.insert(
            name.clone(),
            Pod {
                namespace: namespace.to_owned(),
                uid: uid.clone(),
                deadline_ms: u64::MAX,
                running: true,
                gone: false,
            },
        );
        w.order.push(name.clone());
        w.send_all(&format!("RUN {name} {uid} {namespace}\n"));
        name
    }

    /// A pod terminating every `every` until [`Churn::stop`].
    pub fn churn(self: &Arc<Self>, every: Duration) -> Churn {
        let stop = Arc::new(AtomicBool::new(false));
        let (fleet, s) = (self.clone(), stop.clone());
        let handle = thread::spawn(move || {
            let mut next = Instant::now();
            while !s.load(Ordering::Relaxed) {
                fleet.add_terminated();
                next += every;
                if let Some(d) = next.checked_duration_since(Instant::now()) {
                    thread::sleep(d);
                }
            }
        });
        Churn {
            stop,
            handle: Some(handle),
        }
    }

    /// Terminated pods not deleted yet.
    pub fn left(&self) -> usize {
        lock(&self.world)
            .pods
            .values()
            .filter(|p| !p.running && !p.gone)
            .count()
    }

    /// Terminated pods not deleted yet whose retain period ended more than `grace` ago.
    pub fn overdue(&self, grace: Duration) -> usize {
        let now = now_ms();
        lock(&self.world)
            .pods
            .values()
            .filter(|p| !p.running && !p.gone && p.deadline_ms + grace.as_millis() as u64 <= now)
            .count()
    }

    /// Waits until every terminated pod is gone (or `within` passed); returns the time waited.
    pub fn drain(&self, within: Duration) -> Duration {
        let t0 = Instant::now();
        while self.left() > 0 && t0.elapsed() < within {
            thread::sleep(Duration::from_millis(20));
        }
        t0.elapsed()
    }

    /// DELETE requests from server `id` that arrived in `[from, to)`.
    pub fn deletes_from(&self, id: usize, from: Instant, to: Instant) -> usize {
        let tag = Self::tag(id);
        self.api
            .arrivals()
            .iter()
            .filter(|d| d.via == tag && d.arrived >= from && d.arrived < to)
            .count()
    }

    /// DELETE requests from anyone that arrived in `[from, to)`.
    pub fn deletes_between(&self, from: Instant, to: Instant) -> usize {
        self.api
            .arrivals()
            .iter()
            .filter(|d| d.arrived >= from && d.arrived < to)
            .count()
    }

    /// For each pod deleted, milliseconds from its deadline to the DELETE that removed it.
    pub fn delete_lags_ms(&self) -> Vec<u64> {
        let deletes = self.api.deletes();
        let w = lock(&self.world);
        deletes
            .iter()
            .filter(|d| d.status == 200)
            .filter_map(|d| {
                let p = w.pods.get(&d.name)?;
                let at = d.arrived_wall.duration_since(UNIX_EPOCH).ok()?.as_millis() as u64;
                Some(at.saturating_sub(p.deadline_ms))
            })
            .collect()
    }

    /// Servers that sent at least one DELETE.
    pub fn servers_that_deleted(&self) -> usize {
        let senders: HashSet<String> = self.api.arrivals().into_iter().map(|d| d.via).collect();
        senders.len()
    }

    /// Ends every server (not counted as crashes) and the informer pump.
    pub fn shutdown(&self) {
        let mut w = lock(&self.world);
        for id in 0..w.servers.len() {
            w.close_spans(id, None);
        }
        for s in w.servers.iter_mut() {
            s.ended_by_us = true;
            s.stdin = None;
            if let Some(c) = s.child.as_mut() {
                if s.frozen {
                    super::process::signal(c.id(), "CONT");
                }
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        drop(w);
        self.pump_stop.store(true, Ordering::Relaxed);
        let pump = self.pump.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(p) = pump {
            let _ = p.join();
        }
    }

    /// The safety figures, from the API's records: every DELETE that arrived, by pod.
    pub fn figures(&self) -> Figures {
        let arrivals = self.api.arrivals();
        let w = lock(&self.world);
        let mut per_pod: HashMap<&str, Vec<&str>> = HashMap::new();
        let mut wrongful = 0;
        for d in &arrivals {
            per_pod.entry(&d.name).or_default().push(&d.via);
            let at_ms = d
                .arrived_wall
                .duration_since(UNIX_EPOCH)
                .map(|t| t.as_millis() as u64)
                .unwrap_or(0);
            match w.pods.get(&d.name) {
                // A running pod, or one deleted before its retain period ended.
                Some(p) if p.running || at_ms < p.deadline_ms => wrongful += 1,
                Some(p) if d.uid.as_deref() != Some(p.uid.as_str()) => wrongful += 1,
                Some(_) => {}
                None => wrongful += 1,
            }
        }
        let duplicates = per_pod.values().filter(|v| v.len() > 1).count();
        // The bound: a pod in flight at a leadership change may be deleted once by each leader.
        let beyond: Vec<&str> = per_pod
            .iter()
            .filter(|(_, senders)| {
                let distinct: HashSet<&&str> = senders.iter().collect();
                distinct.len() != senders.len()
            })
            .map(|(name, _)| *name)
            .collect();
        let within = beyond.is_empty();
        // What happened to each pod beyond the bound: its DELETEs (sender, answer, when) and the
        // leadership changes around them, for the report.
        let t0 = self.started;
        let ms = |i: Instant| i.saturating_duration_since(t0).as_millis() as u64;
        let beyond_detail: Vec<String> = beyond
            .iter()
            .map(|name| {
                let answered = self.api.deletes();
                let ds: Vec<String> = arrivals
                    .iter()
                    .filter(|d| d.name == *name)
                    .map(|d| {
                        let status = answered
                            .iter()
                            .find(|a| a.name == d.name && a.via == d.via && a.arrived == d.arrived)
                            .map(|a| a.status)
                            .unwrap_or(0);
                        format!("{} at {} ms -> {}", d.via, ms(d.arrived), status)
                    })
                    .collect();
                let first = arrivals
                    .iter()
                    .filter(|d| d.name == *name)
                    .map(|d| d.arrived)
                    .min();
                let last = arrivals
                    .iter()
                    .filter(|d| d.name == *name)
                    .map(|d| d.arrived)
                    .max();
                let changes: Vec<String> = match (first, last) {
                    (Some(f), Some(l)) => w
                        .transitions
                        .iter()
                        .filter(|t| {
                            t.at + Duration::from_secs(5) >= f && t.at <= l + Duration::from_secs(1)
                        })
                        .map(|t| format!("server-{} {} at {} ms", t.server, t.state, ms(t.at)))
                        .collect(),
                    _ => Vec::new(),
                };
                format!(
                    "{name}: deletes [{}]; leadership [{}]",
                    ds.join(", "),
                    changes.join(", ")
                )
            })
            .collect();
        let (two_leaders_max_ms, two_leaders) = two_leaders(&w.spans, self.failover_window, t0);
        let pods = w.pods.values().filter(|p| !p.running).count();
        let leaked = w.pods.values().filter(|p| !p.running && !p.gone).count();
        Figures {
            pods,
            delete_requests: arrivals.len(),
            duplicates,
            duplicates_within_bound: within,
            leaked,
            wrongful,
            crashes: w.crashes.len(),
            crash_notes: w.crashes.clone(),
            beyond_bound: beyond_detail,
            two_leaders_max_ms,
            two_leaders,
        }
    }
}

/// The longest time two servers led one scope at once (ms, up to now for spans still open), and
/// each such time longer than `window`, described (times in ms from `t0`).
fn two_leaders(spans: &[Span], window: Duration, t0: Instant) -> (u64, Vec<String>) {
    let now = Instant::now();
    let ms = |i: Instant| i.saturating_duration_since(t0).as_millis() as u64;
    let mut max = Duration::ZERO;
    let mut found = Vec::new();
    for (i, a) in spans.iter().enumerate() {
        for b in &spans[i + 1..] {
            if a.server == b.server || a.namespace != b.namespace {
                continue;
            }
            let from = a.from.max(b.from);
            let to = a.to.unwrap_or(now).min(b.to.unwrap_or(now));
            let Some(both) = to.checked_duration_since(from) else {
                continue;
            };
            max = max.max(both);
            if both > window {
                found.push(format!(
                    "scope {}: server-{} and server-{} both led for {} ms (from {} ms)",
                    a.namespace,
                    a.server,
                    b.server,
                    both.as_millis(),
                    ms(from)
                ));
            }
        }
    }
    (max.as_millis() as u64, found)
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.shutdown();
    }
}

pub struct Churn {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Churn {
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Churn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn lock(w: &Mutex<World>) -> MutexGuard<'_, World> {
    w.lock().unwrap_or_else(|p| p.into_inner())
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Min, median and max of `xs` in milliseconds (`null`s when empty).
pub fn min_median_max(xs: &[Duration]) -> Value {
    let mut ms: Vec<u64> = xs.iter().map(|d| d.as_millis() as u64).collect();
    ms.sort_unstable();
    if ms.is_empty() {
        return json!({"min": null, "median": null, "max": null});
    }
    json!({"min": ms[0], "median": ms[ms.len() / 2], "max": ms[ms.len() - 1]})
}

/// The election backend Kyuubi's HA keys in `settings` name.
pub fn backend_of(settings: &Settings) -> Arc<dyn Backend> {
    match &settings.ha {
        HaSettings::ZooKeeper(z) => Arc::new(ZooKeeperBackend::new(z.clone())),
        HaSettings::Etcd(e) => Arc::new(EtcdBackend::new(e.clone())),
        HaSettings::Local => panic!("a fleet needs an HA backend"),
    }
}

/// Where server `id`'s log goes: `$PODSWEEP_FLEET_LOG_DIR/server-<id>.log` (appended; INFO and
/// above, or `RUST_LOG`) when that is set, else nowhere.
fn log_file(id: usize) -> Stdio {
    let Some(dir) = std::env::var_os(FLEET_LOG_DIR) else {
        return Stdio::null();
    };
    let path = std::path::Path::new(&dir).join(format!("server-{id}.log"));
    let _ = std::fs::create_dir_all(&dir);
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map(Stdio::from)
        .unwrap_or_else(|e| panic!("cannot open {path:?}: {e}"))
}

/// Names a directory for the fleet servers' logs.
pub const FLEET_LOG_DIR: &str = "PODSWEEP_FLEET_LOG_DIR";

/// A fleet server: one engine built from Kyuubi's keys; pods from stdin, leadership on stdout.
fn child(spec: &str) {
    if std::env::var_os(FLEET_LOG_DIR).is_some() {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .try_init();
    }
    let spec: Value = serde_json::from_str(spec).expect("server spec");
    let id = spec["id"].as_u64().unwrap_or(0);
    let retain_ms = spec["retain_ms"].as_u64().unwrap_or(1000);
    let poll = Duration::from_millis(spec["poll_ms"].as_u64().unwrap_or(5));
    let conf: HashMap<String, String> = spec["conf"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let settings = Settings::from_map(conf).expect("server conf");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let identity = format!("server-{id}");
    let engine = if spec["record_deletes"] == true {
        let backend = backend_of(&settings);
        let deleters = recorder::source(Arc::new(Recorder::default()));
        // Election keys as a server's: the namespace's identity from the pods API.
        let identities = podsweep::engine::kube_identities(settings.raw.clone());
        Engine::with_parts(
            settings,
            &identity,
            backend,
            deleters,
            Clock::System,
            rt.handle().clone(),
        )
        .map(|e| e.with_namespace_identities(identities))
    } else {
        Engine::new(settings, &identity, rt.handle().clone())
    };
    let engine = Arc::new(engine.expect("engine"));
    let home = spec["namespace"].as_str().unwrap_or_default().to_owned();
    // The namespaces of the scopes seen so far, the fleet's own first.
    let namespaces = Arc::new(Mutex::new(vec![home.clone()]));
    let feed = {
        let engine = engine.clone();
        move |kind: EventKind, ns: &str, name: &str, uid: &str, ended: Option<SystemTime>| {
            let _ = engine.observe(
                Scope::new(None, Some(ns)),
                Observation {
                    kind,
                    tag: format!("tag-{name}"),
                    pod_name: name.to_owned(),
                    pod_uid: uid.to_owned(),
                    state: if ended.is_some() {
                        AppState::Finished
                    } else {
                        AppState::Running
                    },
                    has_app_selector: true,
                    terminated_at: ended,
                    deletion_requested: false,
                    annotations: None,
                },
            );
        }
    };
    {
        let namespaces = namespaces.clone();
        thread::spawn(move || {
            let mut seen: HashSet<String> = HashSet::from([home]);
            let mut note = |ns: &str| {
                if seen.insert(ns.to_owned()) {
                    lock_vec(&namespaces).push(ns.to_owned());
                }
            };
            // Name -> namespace, UID, end.
            let mut known: HashMap<String, (String, String, Option<SystemTime>)> = HashMap::new();
            for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                let parts: Vec<&str> = line.split(' ').collect();
                match parts.as_slice() {
                    ["POD", name, uid, deadline, ns] => {
                        let d: u64 = deadline.parse().unwrap_or(0);
                        let ended = UNIX_EPOCH + Duration::from_millis(d.saturating_sub(retain_ms));
                        let kind = if known.contains_key(*name) {
                            EventKind::Update
                        } else {
                            EventKind::Add
                        };
                        note(ns);
                        known.insert(
                            name.to_string(),
                            (ns.to_string(), uid.to_string(), Some(ended)),
                        );
                        feed(kind, ns, name, uid, Some(ended));
                    }
                    ["RUN", name, uid, ns] => {
                        note(ns);
                        known.insert(name.to_string(), (ns.to_string(), uid.to_string(), None));
                        feed(EventKind::Add, ns, name, uid, None);
                    }
                    ["GONE", name] => {
                        if let Some((ns, uid, ended)) = known.remove(*name) {
                            feed(EventKind::Delete, &ns, name, &uid, ended);
                        }
                    }
                    _ => {}
                }
            }
            // The parent went away.
            std::process::exit(0);
        });
    }
    rt.block_on(async move {
        // Per scope: namespace, scope, last leadership told.
        let mut watched: Vec<(String, Scope, Option<Leadership>)> = Vec::new();
        let mut last_reason = String::new();
        loop {
            {
                let all = lock_vec(&namespaces);
                for ns in &all[watched.len()..] {
                    watched.push((ns.clone(), Scope::new(None, Some(ns)), None));
                }
            }
            let mut out = String::new();
            for (ns, scope, last) in watched.iter_mut() {
                let now = engine.leadership(scope);
                if now != *last {
                    let state = now.map(|l| l.as_str()).unwrap_or("NONE");
                    out.push_str(&format!("STATE {ns} {state}\n"));
                    *last = now;
                }
            }
            // The reason of the fleet's own scope.
            let status: Value =
                serde_json::from_str(&engine.status_json(&watched[0].1)).unwrap_or_default();
            let reason = status["leadership_reason"]
                .as_str()
                .unwrap_or("")
                .replace('\n', " ");
            if reason != last_reason {
                out.push_str(&format!("REASON {reason}\n"));
                last_reason = reason;
            }
            if !out.is_empty() {
                let mut stdout = std::io::stdout().lock();
                let _ = stdout.write_all(out.as_bytes());
                let _ = stdout.flush();
            }
            tokio::time::sleep(poll).await;
        }
    });
}

fn lock_vec(v: &Mutex<Vec<String>>) -> MutexGuard<'_, Vec<String>> {
    v.lock().unwrap_or_else(|p| p.into_inner())
}
