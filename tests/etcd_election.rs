//! The etcd election backend against a real etcd server.
//!
//! Each test starts its own server (see `common::etcd`); timing-sensitive tests take a lock so
//! that only one runs at a time. The freeze scenario runs the leader in a child process: this
//! test binary re-executed with `PODSWEEP_ETCD_CHILD` set, running the ignored test
//! `etcd_child_candidate`, which prints one line per tick to stdout:
//! `tick seq=<n> at_ms=<unix ms> may_act=<bool> state=<STATE>`.
//!
//! Run with `--nocapture` to see the measured figures (lines starting with `figure:`).

mod common;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::GetOptions;
use podsweep::config::{EtcdSettings, EtcdTls};
use podsweep::election::etcd::EtcdBackend;
use podsweep::election::{Backend, ElectionHandle, Leadership};
use podsweep::scope::Scope;
use tokio::time::{sleep, timeout, Instant};

use common::process::{exit_with_parent, ChildProcess, Stderr};

use common::etcd::{free_port, EtcdServer};

/// Only one scenario at a time: they measure timings against lease TTLs.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const CHILD_ENV: &str = "PODSWEEP_ETCD_CHILD";
const NAMESPACE: &str = "kyuubi_test";

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_test_writer()
        .try_init();
}

fn settings(endpoint: &str, ttl_s: u64, tls: Option<EtcdTls>) -> EtcdSettings {
    EtcdSettings {
        endpoints: vec![endpoint.to_owned()],
        namespace: NAMESPACE.to_owned(),
        lease_ttl: Duration::from_secs(ttl_s),
        tls,
    }
}

fn backend(endpoint: &str, ttl_s: u64) -> Arc<dyn Backend> {
    Arc::new(EtcdBackend::new(settings(endpoint, ttl_s, None)))
}

fn election_name(scope: &Scope) -> String {
    EtcdBackend::new(settings("http://unused:1", 1, None)).election_name(scope)
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

/// One candidate key of an election: key, value (the identity), lease.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Candidate {
    key: String,
    identity: String,
    lease: i64,
}

/// Keys under `prefix`, in create-revision order (the first one leads).
async fn keys_under(server: &EtcdServer, prefix: &str) -> Vec<Candidate> {
    let mut client = server.client().await;
    let got = client
        .get(prefix, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap_or_else(|e| panic!("get {prefix}: {e}"));
    let mut kvs: Vec<_> = got.kvs().to_vec();
    kvs.sort_by_key(|kv| kv.create_revision());
    kvs.iter()
        .map(|kv| Candidate {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            identity: String::from_utf8_lossy(kv.value()).into_owned(),
            lease: kv.lease(),
        })
        .collect()
}

async fn candidates(server: &EtcdServer, scope: &Scope) -> Vec<Candidate> {
    keys_under(server, &format!("{}/", election_name(scope))).await
}

/// Waits until the election of `scope` holds exactly `n` candidate keys.
async fn wait_candidates(server: &EtcdServer, scope: &Scope, n: usize) -> Vec<Candidate> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let found = candidates(server, scope).await;
        if found.len() == n {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "expected {n} candidates for {scope}, got {found:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Child-process candidate
// ---------------------------------------------------------------------------------------------

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
    fn spawn(endpoint: &str, scope: &Scope, identity: &str, ttl_s: u64) -> ChildCandidate {
        let process = ChildProcess::test(
            "etcd_child_candidate",
            &[
                (CHILD_ENV, endpoint.to_owned()),
                (
                    "PODSWEEP_ETCD_CHILD_CONTEXT",
                    scope.context.clone().unwrap_or_default(),
                ),
                (
                    "PODSWEEP_ETCD_CHILD_NAMESPACE",
                    scope.namespace.clone().unwrap_or_default(),
                ),
                ("PODSWEEP_ETCD_CHILD_IDENTITY", identity.to_owned()),
                ("PODSWEEP_ETCD_CHILD_TTL_S", ttl_s.to_string()),
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
fn etcd_child_candidate() {
    let Ok(endpoint) = std::env::var(CHILD_ENV) else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let scope = Scope::new(
        Some(var("PODSWEEP_ETCD_CHILD_CONTEXT").as_str()),
        Some(var("PODSWEEP_ETCD_CHILD_NAMESPACE").as_str()),
    );
    let identity = var("PODSWEEP_ETCD_CHILD_IDENTITY");
    let ttl_s = var("PODSWEEP_ETCD_CHILD_TTL_S").parse().unwrap_or(2);
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
        let handle = ElectionHandle::start(&backend(&endpoint, ttl_s), scope, identity);
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
    let server = EtcdServer::start();
    let etcd = backend(&server.endpoint(), 3);
    let scope = Scope::new(Some("kind-dev"), Some("spark"));

    let a = ElectionHandle::start(&etcd, scope.clone(), "server-a".into());
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let b = ElectionHandle::start(&etcd, scope.clone(), "server-b".into());
    wait_candidates(&server, &scope, 2).await;
    let c = ElectionHandle::start(&etcd, scope.clone(), "server-c".into());
    let found = wait_candidates(&server, &scope, 3).await;
    let ids: Vec<&str> = found.iter().map(|k| k.identity.as_str()).collect();
    assert_eq!(ids, ["server-a", "server-b", "server-c"], "{found:?}");
    assert!(
        found.iter().all(|k| k.lease != 0),
        "keys carry leases: {found:?}"
    );
    let lease_hex = format!("{:x}", found[0].lease);
    assert!(found[0].key.ends_with(&lease_hex), "{found:?}");

    for _ in 0..10 {
        assert_eq!(a.status().leadership, Leadership::Leading);
        assert_eq!(b.status().leadership, Leadership::Following);
        assert!(a.may_act() && !b.may_act() && !c.may_act());
        sleep(Duration::from_millis(50)).await;
    }

    // A waiting candidate that closes takes its key with it.
    c.close().await;
    let found = candidates(&server, &scope).await;
    assert_eq!(
        found.len(),
        2,
        "the closed candidate's key is gone: {found:?}"
    );

    let t0 = Instant::now();
    a.close().await;
    let closed_in = t0.elapsed();
    wait_state(&b, Leadership::Leading, Duration::from_secs(10)).await;
    let handoff = t0.elapsed();
    eprintln!(
        "figure: graceful close took {closed_in:?}; successor leading {handoff:?} after close()"
    );
    assert!(b.may_act());
    assert!(handoff < Duration::from_secs(3), "handoff took {handoff:?}");
    let found = candidates(&server, &scope).await;
    assert_eq!(found.len(), 1, "the closed leader's key is gone: {found:?}");
    assert_eq!(found[0].identity, "server-b");
    b.close().await;
    assert!(candidates(&server, &scope).await.is_empty());
}

/// Issue 22, item 3: the leader's own election key is watched. When it disappears (an operator
/// deletes it, or a resign of an earlier campaign lands late), the next candidate leads, and the
/// old leader steps down instead of leading on beside it; it campaigns again, behind the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_key_disappears_steps_down() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = EtcdServer::start();
    let etcd = backend(&server.endpoint(), 3);
    let scope = Scope::new(None, Some("spark"));
    let a = ElectionHandle::start(&etcd, scope.clone(), "server-a".into());
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let b = ElectionHandle::start(&etcd, scope.clone(), "server-b".into());
    let found = wait_candidates(&server, &scope, 2).await;
    assert_eq!(found[0].identity, "server-a", "{found:?}");

    // An operator deletes the leader's key.
    let mut operator = server.client().await;
    operator
        .delete(found[0].key.as_str(), None)
        .await
        .expect("delete the leader's key");
    wait_state(&b, Leadership::Leading, Duration::from_secs(10)).await;
    let t0 = Instant::now();
    let mut a_status = a.watch();
    // (The borrow `wait_for` returns is dropped at once: it holds the channel's read lock.)
    let stepped_down = timeout(
        Duration::from_secs(5),
        a_status.wait_for(|s| s.leadership != Leadership::Leading),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    assert!(
        stepped_down,
        "server-a still leads {:?} after its key was deleted and server-b leads ({})",
        t0.elapsed(),
        a.status().reason
    );
    eprintln!(
        "figure: the old leader stepped down {:?} after the new one led ({})",
        t0.elapsed(),
        a.status().reason
    );
    // From now on one leader: a campaigns again behind b.
    let found = wait_candidates(&server, &scope, 2).await;
    assert_eq!(found[0].identity, "server-b", "{found:?}");
    assert_eq!(found[1].identity, "server-a", "{found:?}");
    for _ in 0..20 {
        assert!(!(a.may_act() && b.may_act()), "two leaders");
        assert_eq!(a.status().leadership, Leadership::Following);
        sleep(Duration::from_millis(50)).await;
    }
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_scopes_can_have_different_leaders() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = EtcdServer::start();
    let etcd = backend(&server.endpoint(), 3);
    let eks = Scope::new(
        Some("arn:aws:eks:us-east-1:123:cluster/prod"),
        Some("spark"),
    );
    let default_ns = Scope::new(None, Some("default"));

    let a_eks = ElectionHandle::start(&etcd, eks.clone(), "server-a".into());
    wait_state(&a_eks, Leadership::Leading, Duration::from_secs(15)).await;
    let b_def = ElectionHandle::start(&etcd, default_ns.clone(), "server-b".into());
    wait_state(&b_def, Leadership::Leading, Duration::from_secs(15)).await;
    let b_eks = ElectionHandle::start(&etcd, eks.clone(), "server-b".into());
    let a_def = ElectionHandle::start(&etcd, default_ns.clone(), "server-a".into());
    wait_candidates(&server, &eks, 2).await;
    wait_candidates(&server, &default_ns, 2).await;

    assert!(a_eks.may_act() && !b_eks.may_act());
    assert!(b_def.may_act() && !a_def.may_act());
    assert_eq!(a_def.status().leadership, Leadership::Following);
    assert_eq!(b_eks.status().leadership, Leadership::Following);

    // The ARN is one segment under the root: `<root>/<scope>/<lease>`.
    let root = format!("/{NAMESPACE}-podsweep/elections/");
    let mut names: Vec<String> = keys_under(&server, &root)
        .await
        .into_iter()
        .filter_map(|k| {
            let rest = k.key.strip_prefix(&root)?;
            let (name, lease) = rest.split_once('/')?;
            (!lease.contains('/')).then(|| name.to_owned())
        })
        .collect();
    names.sort();
    names.dedup();
    assert_eq!(
        names,
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
async fn frozen_leader_is_replaced_and_wakes_up_without_the_right_to_act() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let ttl_s = 2;
    let server = EtcdServer::start();
    let scope = Scope::new(Some("kind-dev"), Some("freeze"));
    let child = ChildCandidate::spawn(&server.endpoint(), &scope, "child-leader", ttl_s);
    child
        .wait_tick("LEADING", Duration::from_secs(20), |t| {
            t.may_act && t.state == "LEADING"
        })
        .await;
    let b = ElectionHandle::start(
        &backend(&server.endpoint(), ttl_s),
        scope.clone(),
        "in-process".into(),
    );
    wait_candidates(&server, &scope, 2).await;
    assert_eq!(b.status().leadership, Leadership::Following);

    child.signal("STOP");
    let failover = wait_state(&b, Leadership::Leading, Duration::from_secs(20)).await;
    eprintln!("figure: frozen leader replaced after {failover:?} (lease TTL {ttl_s} s)");
    assert!(
        failover < Duration::from_secs(ttl_s + 1),
        "replacement took {failover:?}"
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
        "figure: after SIGCONT the child printed {} ticks, {stale_leading} saying LEADING, first {:?}",
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
    let found = candidates(&server, &scope).await;
    assert_eq!(found[0].identity, "in-process", "{found:?}");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_restart_within_the_ttl_is_survived_with_one_leader() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let ttl_s = 3;
    let mut server = EtcdServer::start();
    let etcd = backend(&server.endpoint(), ttl_s);
    let scope = Scope::new(None, None);
    let a = ElectionHandle::start(&etcd, scope.clone(), "server-a".into());
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let b = ElectionHandle::start(&etcd, scope.clone(), "server-b".into());
    let before = wait_candidates(&server, &scope, 2).await;

    let t0 = Instant::now();
    server.stop();
    let paused = wait_state(&a, Leadership::Paused, Duration::from_secs(ttl_s)).await;
    assert!(!a.may_act() && !b.may_act());
    eprintln!("figure: leader paused {paused:?} after etcd was killed");
    sleep(Duration::from_millis(300)).await;
    server.restart();
    let back = t0.elapsed();
    eprintln!("figure: etcd serving again {back:?} after it was killed (lease TTL {ttl_s} s)");

    // Exactly one leader again, and it stays that way.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut stable_since: Option<Instant> = None;
    loop {
        let (sa, sb) = (a.status().leadership, b.status().leadership);
        let one = matches!(
            (sa, sb),
            (Leadership::Leading, Leadership::Following)
                | (Leadership::Following, Leadership::Leading)
        );
        assert!(!(a.may_act() && b.may_act()), "two leaders may act at once");
        match (one, stable_since) {
            (true, None) => {
                stable_since = Some(Instant::now());
                eprintln!(
                    "figure: one leader again {:?} after etcd was killed ({} leads)",
                    t0.elapsed(),
                    if sa == Leadership::Leading { "a" } else { "b" }
                );
            }
            (true, Some(s)) if s.elapsed() > Duration::from_secs(1) => break,
            (false, _) => stable_since = None,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no single stable leader: a {} ({}), b {} ({})",
            sa.as_str(),
            a.status().reason,
            sb.as_str(),
            b.status().reason
        );
        sleep(Duration::from_millis(20)).await;
    }
    let leader = if a.may_act() { "server-a" } else { "server-b" };
    let after = candidates(&server, &scope).await;
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(after[0].identity, leader, "the first key leads: {after:?}");
    if back < Duration::from_secs(ttl_s) {
        assert_eq!(after, before, "same keys, same leases across the restart");
    }
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_identity_leads_and_a_wrong_ca_is_reported() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = EtcdServer::start_tls();
    let files = server.tls().expect("TLS server").clone();
    let tls = |ca: &std::path::Path| EtcdTls {
        ca: ca.display().to_string(),
        cert: files.client_cert.display().to_string(),
        key: files.client_key.display().to_string(),
    };
    let good: Arc<dyn Backend> = Arc::new(EtcdBackend::new(settings(
        &server.endpoint(),
        3,
        Some(tls(&files.ca)),
    )));
    let wrong: Arc<dyn Backend> = Arc::new(EtcdBackend::new(settings(
        &server.endpoint(),
        3,
        Some(tls(&files.other_ca)),
    )));
    let scope = Scope::new(Some("kind-dev"), Some("tls"));

    let a = ElectionHandle::start(&good, scope.clone(), "tls-good".into());
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    assert!(a.may_act());

    let w = ElectionHandle::start(&wrong, scope.clone(), "tls-wrong-ca".into());
    wait_state(&w, Leadership::NoQuorum, Duration::from_secs(10)).await;
    sleep(Duration::from_millis(500)).await;
    let s = w.status();
    eprintln!(
        "figure: wrong CA -> {} ({})",
        s.leadership.as_str(),
        s.reason
    );
    assert_eq!(s.leadership, Leadership::NoQuorum);
    assert!(!w.may_act());
    let reason = s.reason.to_lowercase();
    assert!(
        reason.contains("certificate") || reason.contains("tls") || reason.contains("issuer"),
        "the reason names the TLS problem: {}",
        s.reason
    );
    assert_eq!(candidates(&server, &scope).await.len(), 1);
    w.close().await;
    a.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_tls_file_means_no_quorum_naming_the_file() {
    init_logs();
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing-ca.pem").display().to_string();
    let tls = EtcdTls {
        ca: missing.clone(),
        cert: dir.path().join("client.pem").display().to_string(),
        key: dir.path().join("client-key.pem").display().to_string(),
    };
    let endpoint = format!("https://127.0.0.1:{}", free_port());
    let etcd: Arc<dyn Backend> = Arc::new(EtcdBackend::new(settings(&endpoint, 3, Some(tls))));
    let h = ElectionHandle::start(&etcd, Scope::new(None, None), "no-files".into());
    wait_state(&h, Leadership::NoQuorum, Duration::from_secs(10)).await;
    let reason = h.status().reason;
    assert!(reason.contains(&missing), "{reason}");
    assert!(reason.contains("kyuubi.ha.etcd.ssl.ca.path"), "{reason}");
    h.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_etcd_means_no_quorum() {
    init_logs();
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let h = ElectionHandle::start(
        &backend(&endpoint, 3),
        Scope::new(None, None),
        "lonely".into(),
    );
    wait_state(&h, Leadership::NoQuorum, Duration::from_secs(10)).await;
    assert!(!h.may_act());
    let reason = h.status().reason;
    assert!(reason.contains("cannot"), "{reason}");
    let t0 = Instant::now();
    h.close().await;
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "close waits for no backoff"
    );
}

// ---------------------------------------------------------------------------------------------
// One lease per server
// ---------------------------------------------------------------------------------------------

/// Every lease the server holds (`LeaseLeases`).
async fn leases(server: &EtcdServer) -> Vec<i64> {
    let mut client = server.client().await;
    let got = client.leases().await.expect("lease list");
    let mut ids: Vec<i64> = got.leases().iter().map(|l| l.id()).collect();
    ids.sort_unstable();
    ids
}

/// Waits until the server holds exactly `n` leases; returns them.
async fn wait_leases(server: &EtcdServer, n: usize) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ids = leases(server).await;
        if ids.len() == n {
            return ids;
        }
        assert!(
            Instant::now() < deadline,
            "expected {n} leases, got {ids:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// The distinct leases of `identity`'s keys in the elections of `scopes`.
async fn leases_of(server: &EtcdServer, scopes: &[Scope], identity: &str) -> Vec<i64> {
    let mut ids = Vec::new();
    for s in scopes {
        for c in candidates(server, s).await {
            if c.identity == identity {
                ids.push(c.lease);
            }
        }
    }
    ids.sort_unstable();
    ids.dedup();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_scopes_share_one_lease_and_close_one_at_a_time() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = EtcdServer::start();
    let etcd = backend(&server.endpoint(), 3);
    let scopes: Vec<Scope> = (0..50)
        .map(|i| Scope::new(Some("kind-dev"), Some(&format!("ns-{i:02}"))))
        .collect();
    let mut handles: Vec<ElectionHandle> = scopes
        .iter()
        .map(|s| ElectionHandle::start(&etcd, s.clone(), "server-a".into()))
        .collect();
    for h in &handles {
        wait_state(h, Leadership::Leading, Duration::from_secs(20)).await;
    }
    // Counted on the server: one lease, and it carries all 50 election keys.
    let ids = wait_leases(&server, 1).await;
    assert_eq!(leases_of(&server, &scopes, "server-a").await, ids);

    // Closing one scope deletes its key only; the others keep leading on the same lease.
    let closed = handles.remove(7);
    closed.close().await;
    assert!(candidates(&server, &scopes[7]).await.is_empty());
    for (i, s) in scopes.iter().enumerate().filter(|(i, _)| *i != 7) {
        assert_eq!(candidates(&server, s).await.len(), 1, "scope {i}");
    }
    assert!(handles.iter().all(|h| h.may_act()));
    assert_eq!(leases(&server).await, ids);

    // Closing the last scope revokes the lease.
    for h in handles {
        h.close().await;
    }
    wait_leases(&server, 0).await;
    for s in &scopes {
        assert!(candidates(&server, s).await.is_empty());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lease_recampaigns_every_scope_on_one_new_lease() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = EtcdServer::start();
    let (a, b) = (
        backend(&server.endpoint(), 3),
        backend(&server.endpoint(), 3),
    );
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
        wait_candidates(&server, s, 2).await;
    }
    let before_a = leases_of(&server, &scopes, "server-a").await;
    let before_b = leases_of(&server, &scopes, "server-b").await;
    assert_eq!((before_a.len(), before_b.len()), (1, 1));
    assert_eq!(wait_leases(&server, 2).await.len(), 2);

    // Server a's lease is revoked (as if it expired): all its keys go at once.
    let mut client = server.client().await;
    client.lease_revoke(before_a[0]).await.expect("revoke");

    // Server b now leads every scope; server a campaigns again on one new lease, in every scope.
    for (_, id, h) in &handles {
        if *id == "server-b" {
            wait_state(h, Leadership::Leading, Duration::from_secs(15)).await;
        }
    }
    for s in &scopes {
        wait_candidates(&server, s, 2).await;
    }
    let after_a = leases_of(&server, &scopes, "server-a").await;
    assert_eq!(after_a.len(), 1, "{after_a:?}");
    assert_ne!(after_a, before_a);
    assert_eq!(leases_of(&server, &scopes, "server-b").await, before_b);
    assert_eq!(wait_leases(&server, 2).await.len(), 2);
    for (i, id, h) in &handles {
        if *id == "server-a" {
            assert_eq!(h.status().leadership, Leadership::Following, "scope {i}");
        }
    }

    // Leaders stay independent per scope: closing b's handle of scope 3 moves only scope 3.
    let pos = handles
        .iter()
        .position(|(i, id, _)| *i == 3 && *id == "server-b")
        .expect("handle");
    let (_, _, h) = handles.remove(pos);
    h.close().await;
    for (i, id, h) in &handles {
        let want = if *i == 3 { "server-a" } else { "server-b" };
        let state = if id == &want {
            Leadership::Leading
        } else {
            Leadership::Following
        };
        wait_state(h, state, Duration::from_secs(10)).await;
    }
    for (_, _, h) in handles {
        h.close().await;
    }
    wait_leases(&server, 0).await;
}
