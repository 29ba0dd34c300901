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

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use podsweep::config::ZkSettings;
use podsweep::election::zookeeper::ZooKeeperBackend;
use podsweep::election::{Backend, ElectionHandle, Leadership};
use podsweep::scope::Scope;
use tokio::time::{sleep, timeout, Instant};

use common::process::{exit_with_parent, ChildProcess, Stderr};

use common::zk::{free_port, latch_nodes, wait_contenders, ZkOptions, ZkServer};

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

/// A candidate in another process (tests/common/process.rs); killed on drop.
struct ChildCandidate {
    process: ChildProcess,
}

impl ChildCandidate {
    fn spawn(addr: &str, scope: &Scope, identity: &str, session_ms: u64) -> ChildCandidate {
        let process = ChildProcess::test(
            "zk_child_candidate",
            &[
                (CHILD_ENV, addr.to_owned()),
                (
                    "PODSWEEP_ZK_CHILD_CONTEXT",
                    scope.context.clone().unwrap_or_default(),
                ),
                (
                    "PODSWEEP_ZK_CHILD_NAMESPACE",
                    scope.namespace.clone().unwrap_or_default(),
                ),
                ("PODSWEEP_ZK_CHILD_IDENTITY", identity.to_owned()),
                ("PODSWEEP_ZK_CHILD_SESSION_MS", session_ms.to_string()),
            ],
            Stderr::Prefixed,
        );
        ChildCandidate { process }
    }

    fn signal(&self, name: &str) {
        self.process.signal(name);
    }

    fn ticks(&self) -> Vec<Tick> {
        self.process
            .lines()
            .iter()
            .filter_map(|l| parse_tick(l))
            .collect()
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
    exit_with_parent();
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
    child.process.kill();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_auth_is_sent_on_every_new_session() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let session_ms = 1000;
    let mut server = ZkServer::start();
    let zk: Arc<dyn Backend> = Arc::new(ZooKeeperBackend::new(ZkSettings {
        auth: podsweep::config::ZkAuth::Digest,
        digest: Some("podsweep:secret".into()),
        retry: podsweep::config::ZkRetry {
            base_wait: Duration::from_millis(100),
            max_wait: Duration::from_millis(500),
            ..Default::default()
        },
        ..settings(&server.addr(), session_ms)
    }));
    let scope = Scope::new(Some("kind-dev"), Some("digest"));
    let dir = latch_dir(&scope);
    let a = ElectionHandle::start(&zk, scope, "server-a".into());
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let first = latch_nodes(&server.addr(), &dir).await;
    assert_eq!(first.len(), 1);

    // Longer than the client waits for its session (7/5 of the timeout): a brand-new session.
    server.stop();
    wait_state(&a, Leadership::Paused, Duration::from_secs(5)).await;
    sleep(Duration::from_millis(session_ms * 2)).await;
    server.restart();
    let back = wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let second = latch_nodes(&server.addr(), &dir).await;
    assert_eq!(second.len(), 1, "{second:?}");
    assert_ne!(second[0].owner, first[0].owner, "a new session");
    eprintln!("figure: leading again {back:?} after the restart, in a new session");
    // Creator-all needs an authenticated identity: the new session still carries the digest.
    let inspect = common::zk::inspector(&server.addr()).await;
    let (acls, _) = inspect
        .get_acl(&format!("{dir}/{}", second[0].name))
        .await
        .expect("world-readable ACL");
    let ids: Vec<String> = acls
        .iter()
        .map(|a| format!("{}:{}", a.scheme(), a.id()))
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(ids[0], "world:anyone");
    assert!(ids[1].starts_with("digest:podsweep:"), "{ids:?}");
    a.close().await;
}

/// Only in `--features kerberos` builds: with no Kerberos ticket the SASL handshake fails, the
/// campaign reports `NoQuorum` with the reason and keeps retrying; nothing panics.
#[cfg(feature = "kerberos")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kerberos_without_a_ticket_never_leads() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = ZkServer::start();
    let zk: Arc<dyn Backend> = Arc::new(ZooKeeperBackend::new(ZkSettings {
        auth: podsweep::config::ZkAuth::Kerberos {
            principal: Some("kyuubi/host@EXAMPLE.COM".into()),
            keytab: Some("/nonexistent.keytab".into()),
            server_principal: Some("zookeeper/localhost@EXAMPLE.COM".into()),
        },
        ..settings(&server.addr(), 1000)
    }));
    let h = ElectionHandle::start(&zk, Scope::new(None, Some("krb")), "server-k".into());
    wait_state(&h, Leadership::NoQuorum, Duration::from_secs(10)).await;
    sleep(Duration::from_secs(2)).await;
    assert!(!h.may_act());
    eprintln!("figure: kerberos without a ticket: {:?}", h.status().reason);
    h.close().await;
}

// ---------------------------------------------------------------------------------------------
// One session per server
// ---------------------------------------------------------------------------------------------

/// The distinct sessions owning the latch nodes of `scopes` whose data is `identity`.
async fn owners_of(addr: &str, scopes: &[Scope], identity: &str) -> Vec<i64> {
    let mut owners = Vec::new();
    for s in scopes {
        for n in latch_nodes(addr, &latch_dir(s)).await {
            if n.identity == identity {
                owners.push(n.owner);
            }
        }
    }
    owners.sort_unstable();
    owners.dedup();
    owners
}

/// Waits until the server's `cons` lists exactly `n` sessions; returns them.
async fn wait_sessions(server: &ZkServer, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let sids = common::zk::sessions_served(server.port()).unwrap_or_default();
        if sids.len() == n {
            return sids;
        }
        assert!(
            Instant::now() < deadline,
            "expected {n} sessions on the server, got {sids:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_scopes_share_one_session_and_close_one_at_a_time() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = ZkServer::start();
    let zk = backend(&server.addr(), 3000);
    let scopes: Vec<Scope> = (0..50)
        .map(|i| Scope::new(Some("kind-dev"), Some(&format!("ns-{i:02}"))))
        .collect();
    let mut handles: Vec<ElectionHandle> = scopes
        .iter()
        .map(|s| ElectionHandle::start(&zk, s.clone(), "server-a".into()))
        .collect();
    for h in &handles {
        wait_state(h, Leadership::Leading, Duration::from_secs(20)).await;
    }
    // Counted on the server: one connection with a session, and one owner of all 50 latches.
    let sids = wait_sessions(&server, 1).await;
    let owners = owners_of(&server.addr(), &scopes, "server-a").await;
    assert_eq!(owners.len(), 1, "latch owners {owners:?}");
    assert_eq!(sids, [format!("0x{:x}", owners[0] as u64)]);

    // Closing one scope releases its latch only; the others keep leading in the same session.
    let closed = handles.remove(7);
    closed.close().await;
    assert!(latch_nodes(&server.addr(), &latch_dir(&scopes[7]))
        .await
        .is_empty());
    for (i, s) in scopes.iter().enumerate().filter(|(i, _)| *i != 7) {
        assert_eq!(
            latch_nodes(&server.addr(), &latch_dir(s)).await.len(),
            1,
            "scope {i}"
        );
    }
    assert!(handles.iter().all(|h| h.may_act()));
    assert_eq!(wait_sessions(&server, 1).await, sids);

    // Closing the last scope closes the session.
    for h in handles {
        h.close().await;
    }
    wait_sessions(&server, 0).await;
    for s in &scopes {
        assert!(latch_nodes(&server.addr(), &latch_dir(s)).await.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_expiry_recampaigns_every_scope_on_one_new_session() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let mut server = ZkServer::start();
    let (a, b) = (backend(&server.addr(), 2000), backend(&server.addr(), 2000));
    let scopes: Vec<Scope> = (0..10)
        .map(|i| Scope::new(None, Some(&format!("tenant-{i}"))))
        .collect();
    // Server a campaigns first for the even scopes, server b for the odd ones.
    let mut handles = Vec::new();
    for (i, s) in scopes.iter().enumerate() {
        let first = if i % 2 == 0 {
            (&a, "server-a")
        } else {
            (&b, "server-b")
        };
        let h = ElectionHandle::start(first.0, s.clone(), first.1.into());
        wait_state(&h, Leadership::Leading, Duration::from_secs(15)).await;
        handles.push((i, first.1, h));
    }
    for (i, s) in scopes.iter().enumerate() {
        let second = if i % 2 == 0 {
            (&b, "server-b")
        } else {
            (&a, "server-a")
        };
        handles.push((
            i,
            second.1,
            ElectionHandle::start(second.0, s.clone(), second.1.into()),
        ));
    }
    for s in &scopes {
        wait_contenders(&server.addr(), &latch_dir(s), 2).await;
    }
    let before_a = owners_of(&server.addr(), &scopes, "server-a").await;
    let before_b = owners_of(&server.addr(), &scopes, "server-b").await;
    assert_eq!((before_a.len(), before_b.len()), (1, 1));

    // The server forgets every session: a restart with an empty data directory, so each client's
    // reconnection is answered with "session expired".
    server.stop();
    std::fs::remove_dir_all(server.data_dir()).expect("wipe the data directory");
    std::fs::create_dir_all(server.data_dir()).expect("recreate the data directory");
    for (_, _, h) in &handles {
        let mut rx = h.watch();
        let stopped = rx.wait_for(|s| s.leadership != Leadership::Leading);
        timeout(Duration::from_secs(10), stopped)
            .await
            .expect("nobody leads while the server is down")
            .expect("status");
        assert!(!h.may_act());
    }
    server.restart();

    // Every scope has exactly one leader again, each server on one new session.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let leaders: Vec<usize> = (0..scopes.len())
            .map(|i| {
                handles
                    .iter()
                    .filter(|(s, _, h)| *s == i && h.status().leadership == Leadership::Leading)
                    .count()
            })
            .collect();
        if leaders.iter().all(|&n| n == 1) {
            break;
        }
        assert!(Instant::now() < deadline, "leaders per scope {leaders:?}");
        sleep(Duration::from_millis(50)).await;
    }
    for s in &scopes {
        wait_contenders(&server.addr(), &latch_dir(s), 2).await;
    }
    let after_a = owners_of(&server.addr(), &scopes, "server-a").await;
    let after_b = owners_of(&server.addr(), &scopes, "server-b").await;
    assert_eq!(
        (after_a.len(), after_b.len()),
        (1, 1),
        "{after_a:?} {after_b:?}"
    );
    assert_ne!(after_a, before_a);
    assert_ne!(after_b, before_b);
    assert_eq!(wait_sessions(&server, 2).await.len(), 2);
    // A leader of every scope may act; its rival may not.
    for i in 0..scopes.len() {
        let acting: Vec<&str> = handles
            .iter()
            .filter(|(s, _, h)| *s == i && h.may_act())
            .map(|(_, id, _)| *id)
            .collect();
        assert_eq!(acting.len(), 1, "scope {i}: {acting:?}");
    }
    for (_, _, h) in handles {
        h.close().await;
    }
    wait_sessions(&server, 0).await;
}
