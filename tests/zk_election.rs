//! The ZooKeeper election backend against a real ZooKeeper server.
//!
//! Each test starts its own server (see `common::zk`); tests take a lock so that only one runs at
//! a time, because the timing assertions need the CPU. Crash and freeze scenarios run the leader
//! in a child process: this test binary re-executed with `PODSWEEP_ZK_CHILD` set, running the
//! ignored test `zk_child_candidate`, which prints one line per tick to stdout:
//! `tick seq=<n> at_ms=<unix ms> may_act=<bool> state=<STATE>`.
//!
//! Run with `--nocapture` to see the measured figures (lines starting with `figure:`).

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use podsweep::config::ZkSettings;
use podsweep::election::zookeeper::ZooKeeperBackend;
use podsweep::election::{Backend, ElectionHandle, Leadership};
use podsweep::scope::Scope;
use tokio::time::{sleep, timeout, Instant};

use common::zk::{free_port, ZkOptions, ZkServer};

/// Only one scenario at a time: they measure timings against session timeouts.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const CHILD_ENV: &str = "PODSWEEP_ZK_CHILD";
const NAMESPACE: &str = "kyuubi_test";

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_test_writer()
        .try_init();
}

fn settings(addr: &str, session_ms: u64) -> ZkSettings {
    ZkSettings {
        addresses: addr.to_owned(),
        namespace: NAMESPACE.to_owned(),
        session_timeout: Duration::from_millis(session_ms),
        connection_timeout: Duration::from_millis(15_000),
        ..ZkSettings::default()
    }
}

fn backend(addr: &str, session_ms: u64) -> Arc<dyn Backend> {
    Arc::new(ZooKeeperBackend::new(settings(addr, session_ms)))
}

fn latch_dir(scope: &Scope) -> String {
    ZooKeeperBackend::new(settings("unused:1", 1000)).latch_dir(scope)
}

fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// Waits until `h` reports `want`; returns how long that took.
async fn wait_state(h: &ElectionHandle, want: Leadership, within: Duration) -> Duration {
    let start = Instant::now();
    let mut rx = h.watch();
    let reached = timeout(within, rx.wait_for(|s| s.leadership == want)).await;
    if !matches!(reached, Ok(Ok(_))) {
        let s = h.status();
        panic!(
            "no {} within {within:?}; status {} ({})",
            want.as_str(),
            s.leadership.as_str(),
            s.reason
        );
    }
    start.elapsed()
}

/// One latch node: name, data (the candidate's identity), owning session.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    name: String,
    identity: String,
    owner: i64,
}

/// The latch nodes of `dir`, in sequence order, read with a separate client.
async fn latch_nodes(addr: &str, dir: &str) -> Vec<Node> {
    let client = zookeeper_client::Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .connect(addr)
        .await
        .expect("inspection client connects");
    let names = match client.list_children(dir).await {
        Ok(names) => names,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(e) => panic!("list {dir}: {e}"),
    };
    let mut nodes = Vec::new();
    for name in names {
        match client.get_data(&format!("{dir}/{name}")).await {
            Ok((data, stat)) => nodes.push(Node {
                identity: String::from_utf8_lossy(&data).into_owned(),
                owner: stat.ephemeral_owner,
                name,
            }),
            Err(zookeeper_client::Error::NoNode) => {}
            Err(e) => panic!("get {dir}/{name}: {e}"),
        }
    }
    nodes.sort_by_key(|n| n.name.rsplit('-').next().unwrap_or("").to_owned());
    nodes
}

/// Waits until `dir` holds exactly `n` latch nodes.
async fn wait_contenders(addr: &str, dir: &str, n: usize) -> Vec<Node> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let nodes = latch_nodes(addr, dir).await;
        if nodes.len() == n {
            return nodes;
        }
        assert!(
            Instant::now() < deadline,
            "expected {n} latch nodes in {dir}, got {nodes:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Child-process candidate
// ---------------------------------------------------------------------------------------------

/// One tick line of the child.
#[derive(Debug, Clone)]
struct Tick {
    at_ms: u128,
    may_act: bool,
    state: String,
}

fn parse_tick(line: &str) -> Option<Tick> {
    let rest = line.strip_prefix("tick ")?;
    let (mut at_ms, mut may_act, mut state) = (None, None, None);
    for field in rest.split_whitespace() {
        match field.split_once('=')? {
            ("at_ms", v) => at_ms = v.parse().ok(),
            ("may_act", v) => may_act = v.parse().ok(),
            ("state", v) => state = Some(v.to_owned()),
            _ => {}
        }
    }
    Some(Tick {
        at_ms: at_ms?,
        may_act: may_act?,
        state: state?,
    })
}

/// A candidate in another process; killed on drop.
struct ChildCandidate {
    child: Child,
    ticks: Arc<Mutex<Vec<Tick>>>,
}

impl ChildCandidate {
    fn spawn(addr: &str, scope: &Scope, identity: &str, session_ms: u64) -> ChildCandidate {
        let exe = std::env::current_exe().expect("test binary path");
        let mut child = Command::new(exe)
            .args([
                "zk_child_candidate",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, addr)
            .env(
                "PODSWEEP_ZK_CHILD_CONTEXT",
                scope.context.clone().unwrap_or_default(),
            )
            .env(
                "PODSWEEP_ZK_CHILD_NAMESPACE",
                scope.namespace.clone().unwrap_or_default(),
            )
            .env("PODSWEEP_ZK_CHILD_IDENTITY", identity)
            .env("PODSWEEP_ZK_CHILD_SESSION_MS", session_ms.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("child candidate starts");
        let ticks = Arc::new(Mutex::new(Vec::new()));
        if let Some(out) = child.stdout.take() {
            let ticks = ticks.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    if let Some(t) = parse_tick(&line) {
                        ticks.lock().unwrap_or_else(|p| p.into_inner()).push(t);
                    }
                }
            });
        }
        if let Some(err) = child.stderr.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    eprintln!("[child] {line}");
                }
            });
        }
        ChildCandidate { child, ticks }
    }

    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([format!("-{name}"), self.pid()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{name} {} failed", self.pid());
    }

    fn ticks(&self) -> Vec<Tick> {
        self.ticks.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits for a tick line matching `pred`.
    async fn wait_tick(&self, what: &str, within: Duration, pred: impl Fn(&Tick) -> bool) -> Tick {
        let deadline = Instant::now() + within;
        loop {
            if let Some(t) = self.ticks().into_iter().find(|t| pred(t)) {
                return t;
            }
            let last = self.ticks().last().cloned();
            assert!(
                Instant::now() < deadline,
                "child: no tick with {what} within {within:?}; last {last:?}"
            );
            sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for ChildCandidate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child process's body; does nothing unless started by [`ChildCandidate::spawn`].
#[test]
#[ignore = "child-process candidate, started by the other tests of this file"]
fn zk_child_candidate() {
    let Ok(addr) = std::env::var(CHILD_ENV) else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let scope = Scope::new(
        Some(var("PODSWEEP_ZK_CHILD_CONTEXT").as_str()),
        Some(var("PODSWEEP_ZK_CHILD_NAMESPACE").as_str()),
    );
    let identity = var("PODSWEEP_ZK_CHILD_IDENTITY");
    let session_ms = var("PODSWEEP_ZK_CHILD_SESSION_MS").parse().unwrap_or(2000);
    // Exit when the parent goes away (its end of our stdin closes).
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_writer(std::io::stderr)
        .try_init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let handle = ElectionHandle::start(&backend(&addr, session_ms), scope, identity);
        let mut every = tokio::time::interval(Duration::from_millis(20));
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        for seq in 0u64.. {
            every.tick().await;
            // Time first: a line evaluated before a SIGSTOP carries a time from before it.
            let at_ms = unix_ms();
            let may_act = handle.may_act();
            let state = handle.status().leadership.as_str();
            println!("tick seq={seq} at_ms={at_ms} may_act={may_act} state={state}");
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_per_scope_and_graceful_close_hands_over() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = ZkServer::start();
    let zk = backend(&server.addr(), 3000);
    let scope = Scope::new(Some("kind-dev"), Some("spark"));
    let dir = latch_dir(&scope);

    let a = ElectionHandle::start(&zk, scope.clone(), "server-a".into());
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let b = ElectionHandle::start(&zk, scope.clone(), "server-b".into());
    let nodes = wait_contenders(&server.addr(), &dir, 2).await;
    // Curator LeaderLatch layout: `_c_<uuid>-latch-<seq>`, data = participant id.
    assert!(
        nodes
            .iter()
            .all(|n| n.name.starts_with("_c_") && n.name.contains("-latch-")),
        "{nodes:?}"
    );
    assert_eq!(nodes[0].identity, "server-a");
    assert_eq!(nodes[1].identity, "server-b");

    for _ in 0..10 {
        assert_eq!(a.status().leadership, Leadership::Leading);
        assert_eq!(b.status().leadership, Leadership::Following);
        assert!(a.may_act() && !b.may_act());
        sleep(Duration::from_millis(50)).await;
    }

    let t0 = Instant::now();
    a.close().await;
    let closed_in = t0.elapsed();
    wait_state(&b, Leadership::Leading, Duration::from_secs(10)).await;
    let handoff = t0.elapsed();
    eprintln!(
        "figure: graceful close took {closed_in:?}; successor leading {handoff:?} after close()"
    );
    assert!(b.may_act());
    assert!(handoff < Duration::from_secs(5), "handoff took {handoff:?}");
    let nodes = latch_nodes(&server.addr(), &dir).await;
    assert_eq!(
        nodes.len(),
        1,
        "the closed leader's node is gone: {nodes:?}"
    );
    assert_eq!(nodes[0].identity, "server-b");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_scopes_can_have_different_leaders() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = ZkServer::start();
    let zk = backend(&server.addr(), 3000);
    let eks = Scope::new(
        Some("arn:aws:eks:us-east-1:123:cluster/prod"),
        Some("spark"),
    );
    let default_ns = Scope::new(None, Some("default"));

    let a_eks = ElectionHandle::start(&zk, eks.clone(), "server-a".into());
    wait_state(&a_eks, Leadership::Leading, Duration::from_secs(15)).await;
    let b_def = ElectionHandle::start(&zk, default_ns.clone(), "server-b".into());
    wait_state(&b_def, Leadership::Leading, Duration::from_secs(15)).await;
    let b_eks = ElectionHandle::start(&zk, eks.clone(), "server-b".into());
    let a_def = ElectionHandle::start(&zk, default_ns.clone(), "server-a".into());
    wait_contenders(&server.addr(), &latch_dir(&eks), 2).await;
    wait_contenders(&server.addr(), &latch_dir(&default_ns), 2).await;

    assert!(a_eks.may_act() && !b_eks.may_act());
    assert!(b_def.may_act() && !a_def.may_act());
    assert_eq!(a_def.status().leadership, Leadership::Following);
    assert_eq!(b_eks.status().leadership, Leadership::Following);

    // The ARN is one path segment under the root.
    let root = format!("/{NAMESPACE}-podsweep/latches");
    let inspect = zookeeper_client::Client::connect(&server.addr())
        .await
        .expect("connects");
    let mut scopes = inspect.list_children(&root).await.expect("root exists");
    scopes.sort();
    assert_eq!(
        scopes,
        [
            "c=arn%3Aaws%3Aeks%3Aus-east-1%3A123%3Acluster%2Fprod.n=spark",
            "c_.n=default"
        ]
    );

    // Closing one scope's leader moves only that scope.
    a_eks.close().await;
    wait_state(&b_eks, Leadership::Leading, Duration::from_secs(10)).await;
    assert!(b_def.may_act() && !a_def.may_act());
    for h in [b_eks, b_def, a_def] {
        h.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_leader_is_replaced_after_its_session_expires() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let session_ms = 2000;
    let server = ZkServer::start();
    let scope = Scope::new(Some("kind-dev"), Some("crash"));
    let mut child = ChildCandidate::spawn(&server.addr(), &scope, "child-leader", session_ms);
    child
        .wait_tick("LEADING", Duration::from_secs(20), |t| {
            t.may_act && t.state == "LEADING"
        })
        .await;
    let b = ElectionHandle::start(
        &backend(&server.addr(), session_ms),
        scope.clone(),
        "in-process".into(),
    );
    wait_contenders(&server.addr(), &latch_dir(&scope), 2).await;
    assert_eq!(b.status().leadership, Leadership::Following);

    let t0 = Instant::now();
    child.child.kill().expect("SIGKILL the leader");
    let _ = child.child.wait();
    let failover = wait_state(&b, Leadership::Leading, Duration::from_secs(20)).await;
    eprintln!("figure: crash failover {failover:?} (negotiated session timeout {session_ms} ms)");
    assert!(t0.elapsed() < Duration::from_millis(session_ms) + Duration::from_secs(5));
    assert!(
        failover > Duration::from_millis(session_ms / 2),
        "the node outlives a crash until expiry"
    );
    assert!(b.may_act());
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_leader_wakes_up_without_the_right_to_act() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let session_ms = 2000;
    let server = ZkServer::start();
    let scope = Scope::new(Some("kind-dev"), Some("freeze"));
    let child = ChildCandidate::spawn(&server.addr(), &scope, "child-leader", session_ms);
    child
        .wait_tick("LEADING", Duration::from_secs(20), |t| {
            t.may_act && t.state == "LEADING"
        })
        .await;
    let b = ElectionHandle::start(
        &backend(&server.addr(), session_ms),
        scope.clone(),
        "in-process".into(),
    );
    wait_contenders(&server.addr(), &latch_dir(&scope), 2).await;

    child.signal("STOP");
    let failover = wait_state(&b, Leadership::Leading, Duration::from_secs(20)).await;
    eprintln!(
        "figure: frozen leader replaced after {failover:?} (session timeout {session_ms} ms)"
    );
    assert!(b.may_act());

    let woke_ms = unix_ms();
    child.signal("CONT");
    child
        .wait_tick("FOLLOWING after wake", Duration::from_secs(15), |t| {
            t.at_ms >= woke_ms && t.state == "FOLLOWING"
        })
        .await;
    sleep(Duration::from_millis(500)).await;
    let after: Vec<Tick> = child
        .ticks()
        .into_iter()
        .filter(|t| t.at_ms >= woke_ms)
        .collect();
    let stale_leading = after.iter().filter(|t| t.state == "LEADING").count();
    eprintln!(
        "figure: after SIGCONT the child printed {} ticks, {stale_leading} still saying LEADING, first {:?}",
        after.len(),
        after.first()
    );
    assert!(!after.is_empty());
    assert!(
        after.iter().all(|t| !t.may_act),
        "the woken leader claimed the right to act: {:?}",
        after.iter().find(|t| t.may_act)
    );
    assert!(b.may_act(), "the successor keeps leading");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_pauses_and_the_same_session_resumes() {
    let _serial = SERIAL.lock().await;
    init_logs();
    // A long session, so that a slow JVM restart still fits in it (the client gives up on its
    // session 7/5 of the timeout after it last heard from the server).
    let session_ms = 8000;
    let mut server = ZkServer::start_with(ZkOptions {
        max_session: Duration::from_secs(10),
        ..ZkOptions::default()
    });
    let scope = Scope::new(None, None);
    let dir = latch_dir(&scope);
    let a = ElectionHandle::start(
        &backend(&server.addr(), session_ms),
        scope,
        "server-a".into(),
    );
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let before = latch_nodes(&server.addr(), &dir).await;
    assert_eq!(before.len(), 1);

    let t0 = Instant::now();
    server.stop();
    let paused = wait_state(&a, Leadership::Paused, Duration::from_millis(session_ms)).await;
    assert!(!a.may_act());
    eprintln!("figure: paused {paused:?} after the server died (session timeout {session_ms} ms)");
    assert!(
        paused < Duration::from_millis(session_ms / 2),
        "pause must not wait for expiry"
    );

    server.restart();
    let restarted = t0.elapsed();
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    eprintln!(
        "figure: server back after {restarted:?}; leading again {:?} after the outage began",
        t0.elapsed()
    );
    assert!(a.may_act());
    let after = latch_nodes(&server.addr(), &dir).await;
    assert_eq!(after, before, "same latch node, same session");
    assert!(
        a.status().reason.contains("reconnected"),
        "{}",
        a.status().reason
    );
    a.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_zookeeper_means_no_quorum() {
    init_logs();
    let addr = format!("127.0.0.1:{}", free_port());
    let h = ElectionHandle::start(
        &backend(&addr, 2000),
        Scope::new(None, None),
        "lonely".into(),
    );
    wait_state(&h, Leadership::NoQuorum, Duration::from_secs(10)).await;
    assert!(!h.may_act());
    assert!(
        h.status().reason.contains("cannot connect"),
        "{}",
        h.status().reason
    );
    let t0 = Instant::now();
    h.close().await;
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "close waits for no backoff"
    );
}
