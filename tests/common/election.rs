//! The election suite, written once and run against each backend: `tests/zk_election.rs` and
//! `tests/etcd_election.rs` instantiate it with [`election_suite!`] and add the scenarios only
//! their backend has.
//!
//! A backend's test server implements [`ElectionServer`] (`common::zk`, `common::etcd`): how a
//! backend reaches it, and how a test reads what the server holds (an election's candidates,
//! the sessions or leases). Tests take [`SERIAL`] so that only one runs at a time, because the
//! timing assertions need the CPU. Crash and freeze scenarios run the leader in a child process:
//! the test binary re-executed with `PODSWEEP_ELECTION_CHILD` set, running the ignored test
//! `child_candidate`, which prints one line per tick to stdout:
//! `tick seq=<n> at_ms=<unix ms> may_act=<bool> state=<STATE>`.
//!
//! Run with `--nocapture` to see the measured figures (lines starting with `figure:`).

#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use podsweep::election::{Backend, ElectionHandle, Leadership};
use podsweep::scope::Scope;
use tokio::time::{sleep, timeout, Instant};

use super::process::{exit_with_parent, free_port, ChildProcess, Stderr};

/// Only one scenario at a time: they measure timings against session timeouts and lease TTLs.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The HA namespace of every backend the suite builds.
pub const NAMESPACE: &str = "kyuubi_test";
/// The session timeout (lease TTL) of most scenarios.
pub const TIMEOUT: Duration = Duration::from_secs(3);
/// The session timeout (lease TTL) of the crash and freeze scenarios.
const SHORT: Duration = Duration::from_secs(2);
const CHILD_ENV: &str = "PODSWEEP_ELECTION_CHILD";

/// One candidate of an election as the server holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The latch node's name (ZooKeeper) or the whole key (etcd).
    pub key: String,
    /// The value: the candidate's identity.
    pub identity: String,
    /// The ZooKeeper session owning the node, or the etcd lease of the key.
    pub owner: i64,
}

/// A real coordination server the suite runs against.
pub trait ElectionServer: Sized {
    /// What the backend calls the sessions of [`ElectionServer::sessions`] ("session", "lease").
    const SESSION: &'static str;
    /// Part of the status reason when the server cannot be reached.
    const UNREACHABLE: &'static str;
    /// The longest a graceful handoff may take.
    const HANDOFF: Duration;
    /// How much longer than the session timeout (lease TTL) a crashed or frozen leader may keep
    /// its successor waiting.
    const FAILOVER_SLACK: Duration;

    /// Starts a server and waits until it serves.
    fn start() -> Self;
    /// The address a backend reaches this server at.
    fn address(&self) -> String;
    /// The address of the same kind on `port` of the loopback interface.
    fn address_on(port: u16) -> String;
    /// A backend in [`NAMESPACE`] at `address` with session timeout (lease TTL) `timeout`.
    fn backend(address: &str, timeout: Duration) -> Arc<dyn Backend>;
    /// The candidates of `scope`'s election in [`NAMESPACE`], the leader first.
    async fn candidates(&self, scope: &Scope) -> Vec<Candidate>;
    /// The encoded scopes that have an election in [`NAMESPACE`], sorted.
    async fn scope_names(&self) -> Vec<String>;
    /// The sessions (leases) the server holds now, sorted.
    async fn sessions(&self) -> Vec<i64>;
    /// Checks how the backend names the candidates of one election.
    fn check_keys(found: &[Candidate]);
}

/// The shared scenarios as `#[tokio::test]`s of the calling test binary against `$server` (an
/// [`ElectionServer`]), and the ignored `child_candidate` test their child processes run.
#[allow(unused_macros)]
macro_rules! election_suite {
    ($server:ty) => {
        $crate::common::election::election_suite!(@tests $server;
            one_leader_per_scope_and_graceful_close_hands_over,
            different_scopes_can_have_different_leaders,
            crashed_leader_is_replaced_after_its_session_expires,
            frozen_leader_is_replaced_and_wakes_up_without_the_right_to_act,
            unreachable_server_means_no_quorum,
            fifty_scopes_share_one_session_and_close_one_at_a_time,
            store_records_are_shared_and_their_changes_watched,
        );

        /// The child process's body; does nothing unless started by a scenario.
        #[test]
        #[ignore = "child-process candidate, started by the other tests of this file"]
        fn child_candidate() {
            $crate::common::election::child_candidate::<$server>();
        }
    };
    (@tests $server:ty; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                $crate::common::election::$name::<$server>().await;
            }
        )*
    };
}
#[allow(unused_imports)]
pub(crate) use election_suite;

pub fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_test_writer()
        .try_init();
}

pub fn unix_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

/// Waits until `h` reports `want`; returns how long that took.
pub async fn wait_state(h: &ElectionHandle, want: Leadership, within: Duration) -> Duration {
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

/// Waits until the election of `scope` has exactly `n` candidates.
pub async fn wait_candidates<S: ElectionServer>(
    server: &S,
    scope: &Scope,
    n: usize,
) -> Vec<Candidate> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let found = server.candidates(scope).await;
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

/// Waits until the server holds exactly `n` sessions (leases); returns them.
pub async fn wait_sessions<S: ElectionServer>(server: &S, n: usize) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let ids = server.sessions().await;
        if ids.len() == n {
            return ids;
        }
        assert!(
            Instant::now() < deadline,
            "expected {n} {}s on the server, got {ids:?}",
            S::SESSION
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// The distinct sessions (leases) of `identity`'s candidates in the elections of `scopes`.
pub async fn owners_of<S: ElectionServer>(
    server: &S,
    scopes: &[Scope],
    identity: &str,
) -> Vec<i64> {
    let mut owners = Vec::new();
    for s in scopes {
        for c in server.candidates(s).await {
            if c.identity == identity {
                owners.push(c.owner);
            }
        }
    }
    owners.sort_unstable();
    owners.dedup();
    owners
}

/// Servers `a` and `b` campaign in every scope of `scopes`: `a` first in the even ones, `b` first
/// in the odd ones (each first candidate leads before the next scope starts). Returns every
/// candidate as (scope index, identity, handle) once each election has both.
pub async fn campaign_everywhere<S: ElectionServer>(
    server: &S,
    a: &Arc<dyn Backend>,
    b: &Arc<dyn Backend>,
    scopes: &[Scope],
) -> Vec<(usize, &'static str, ElectionHandle)> {
    let mut handles = Vec::new();
    for (i, s) in scopes.iter().enumerate() {
        let first = if i % 2 == 0 {
            (a, "server-a")
        } else {
            (b, "server-b")
        };
        let h = ElectionHandle::start(first.0, s.clone(), first.1.into());
        wait_state(&h, Leadership::Leading, Duration::from_secs(15)).await;
        handles.push((i, first.1, h));
    }
    for (i, s) in scopes.iter().enumerate() {
        let second = if i % 2 == 0 {
            (b, "server-b")
        } else {
            (a, "server-a")
        };
        handles.push((
            i,
            second.1,
            ElectionHandle::start(second.0, s.clone(), second.1.into()),
        ));
    }
    for s in scopes {
        wait_candidates(server, s, 2).await;
    }
    handles
}

// ---------------------------------------------------------------------------------------------
// Child-process candidate
// ---------------------------------------------------------------------------------------------

/// One tick line of the child.
#[derive(Debug, Clone)]
pub struct Tick {
    pub at_ms: u128,
    pub may_act: bool,
    pub state: String,
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
pub struct ChildCandidate {
    pub process: ChildProcess,
}

impl ChildCandidate {
    pub fn spawn(address: &str, scope: &Scope, identity: &str, timeout: Duration) -> Self {
        let process = ChildProcess::test(
            "child_candidate",
            &[
                (CHILD_ENV, address.to_owned()),
                (
                    "PODSWEEP_ELECTION_CHILD_CONTEXT",
                    scope.context.clone().unwrap_or_default(),
                ),
                (
                    "PODSWEEP_ELECTION_CHILD_NAMESPACE",
                    scope.namespace.clone().unwrap_or_default(),
                ),
                ("PODSWEEP_ELECTION_CHILD_IDENTITY", identity.to_owned()),
                (
                    "PODSWEEP_ELECTION_CHILD_TIMEOUT_MS",
                    timeout.as_millis().to_string(),
                ),
            ],
            Stderr::Prefixed,
        );
        ChildCandidate { process }
    }

    pub fn signal(&self, name: &str) {
        self.process.signal(name);
    }

    pub fn ticks(&self) -> Vec<Tick> {
        self.process
            .lines()
            .iter()
            .filter_map(|l| parse_tick(l))
            .collect()
    }

    /// Waits for a tick line matching `pred`.
    pub async fn wait_tick(
        &self,
        what: &str,
        within: Duration,
        pred: impl Fn(&Tick) -> bool,
    ) -> Tick {
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

/// The body of the ignored test `child_candidate`; does nothing unless started by
/// [`ChildCandidate::spawn`].
pub fn child_candidate<S: ElectionServer>() {
    let Ok(address) = std::env::var(CHILD_ENV) else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let scope = Scope::new(
        Some(var("PODSWEEP_ELECTION_CHILD_CONTEXT").as_str()),
        Some(var("PODSWEEP_ELECTION_CHILD_NAMESPACE").as_str()),
    );
    let identity = var("PODSWEEP_ELECTION_CHILD_IDENTITY");
    let timeout_ms = var("PODSWEEP_ELECTION_CHILD_TIMEOUT_MS")
        .parse()
        .unwrap_or(2000);
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
        let backend = S::backend(&address, Duration::from_millis(timeout_ms));
        let handle = ElectionHandle::start(&backend, scope, identity);
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

/// A child-process candidate of `scope` with session timeout (lease TTL) `timeout` that leads,
/// and an in-process candidate `in-process` behind it.
async fn child_leads_in_process_follows<S: ElectionServer>(
    server: &S,
    scope: &Scope,
    timeout: Duration,
) -> (ChildCandidate, ElectionHandle) {
    let child = ChildCandidate::spawn(&server.address(), scope, "child-leader", timeout);
    child
        .wait_tick("LEADING", Duration::from_secs(20), |t| {
            t.may_act && t.state == "LEADING"
        })
        .await;
    let b = ElectionHandle::start(
        &S::backend(&server.address(), timeout),
        scope.clone(),
        "in-process".into(),
    );
    wait_candidates(server, scope, 2).await;
    assert_eq!(b.status().leadership, Leadership::Following);
    (child, b)
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

pub async fn one_leader_per_scope_and_graceful_close_hands_over<S: ElectionServer>() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = S::start();
    let backend = S::backend(&server.address(), TIMEOUT);
    let scope = Scope::new(Some("kind-dev"), Some("spark"));

    let a = ElectionHandle::start(&backend, scope.clone(), "server-a".into());
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let b = ElectionHandle::start(&backend, scope.clone(), "server-b".into());
    wait_candidates(&server, &scope, 2).await;
    let c = ElectionHandle::start(&backend, scope.clone(), "server-c".into());
    let found = wait_candidates(&server, &scope, 3).await;
    let ids: Vec<&str> = found.iter().map(|k| k.identity.as_str()).collect();
    assert_eq!(ids, ["server-a", "server-b", "server-c"], "{found:?}");
    S::check_keys(&found);

    for _ in 0..10 {
        assert_eq!(a.status().leadership, Leadership::Leading);
        assert_eq!(b.status().leadership, Leadership::Following);
        assert!(a.may_act() && !b.may_act() && !c.may_act());
        sleep(Duration::from_millis(50)).await;
    }

    // A waiting candidate that closes takes its key with it.
    c.close().await;
    let found = server.candidates(&scope).await;
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
    assert!(handoff < S::HANDOFF, "handoff took {handoff:?}");
    let found = server.candidates(&scope).await;
    assert_eq!(found.len(), 1, "the closed leader's key is gone: {found:?}");
    assert_eq!(found[0].identity, "server-b");
    b.close().await;
    assert!(server.candidates(&scope).await.is_empty());
}

pub async fn different_scopes_can_have_different_leaders<S: ElectionServer>() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = S::start();
    let backend = S::backend(&server.address(), TIMEOUT);
    let eks = Scope::new(
        Some("arn:aws:eks:us-east-1:123:cluster/prod"),
        Some("spark"),
    );
    let default_ns = Scope::new(None, Some("default"));

    let a_eks = ElectionHandle::start(&backend, eks.clone(), "server-a".into());
    wait_state(&a_eks, Leadership::Leading, Duration::from_secs(15)).await;
    let b_def = ElectionHandle::start(&backend, default_ns.clone(), "server-b".into());
    wait_state(&b_def, Leadership::Leading, Duration::from_secs(15)).await;
    let b_eks = ElectionHandle::start(&backend, eks.clone(), "server-b".into());
    let a_def = ElectionHandle::start(&backend, default_ns.clone(), "server-a".into());
    wait_candidates(&server, &eks, 2).await;
    wait_candidates(&server, &default_ns, 2).await;

    assert!(a_eks.may_act() && !b_eks.may_act());
    assert!(b_def.may_act() && !a_def.may_act());
    assert_eq!(a_def.status().leadership, Leadership::Following);
    assert_eq!(b_eks.status().leadership, Leadership::Following);

    // The ARN is one segment under the root.
    assert_eq!(
        server.scope_names().await,
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

pub async fn crashed_leader_is_replaced_after_its_session_expires<S: ElectionServer>() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = S::start();
    let scope = Scope::new(Some("kind-dev"), Some("crash"));
    let (mut child, b) = child_leads_in_process_follows(&server, &scope, SHORT).await;

    let t0 = Instant::now();
    child.process.kill();
    let failover = wait_state(&b, Leadership::Leading, Duration::from_secs(20)).await;
    eprintln!(
        "figure: crash failover {failover:?} ({} timeout {SHORT:?})",
        S::SESSION
    );
    assert!(t0.elapsed() < SHORT + S::FAILOVER_SLACK);
    assert!(
        failover > SHORT / 2,
        "the candidate outlives a crash until expiry"
    );
    assert!(b.may_act());
    b.close().await;
}

pub async fn frozen_leader_is_replaced_and_wakes_up_without_the_right_to_act<S: ElectionServer>() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = S::start();
    let scope = Scope::new(Some("kind-dev"), Some("freeze"));
    let (child, b) = child_leads_in_process_follows(&server, &scope, SHORT).await;

    child.signal("STOP");
    let failover = wait_state(&b, Leadership::Leading, Duration::from_secs(20)).await;
    eprintln!(
        "figure: frozen leader replaced after {failover:?} ({} timeout {SHORT:?})",
        S::SESSION
    );
    assert!(
        failover < SHORT + S::FAILOVER_SLACK,
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
    let found = server.candidates(&scope).await;
    assert_eq!(found[0].identity, "in-process", "{found:?}");
    b.close().await;
}

pub async fn unreachable_server_means_no_quorum<S: ElectionServer>() {
    init_logs();
    let address = S::address_on(free_port());
    let h = ElectionHandle::start(
        &S::backend(&address, TIMEOUT),
        Scope::new(None, None),
        "lonely".into(),
    );
    wait_state(&h, Leadership::NoQuorum, Duration::from_secs(10)).await;
    assert!(!h.may_act());
    let reason = h.status().reason;
    assert!(reason.contains(S::UNREACHABLE), "{reason}");
    let t0 = Instant::now();
    h.close().await;
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "close waits for no backoff"
    );
}

/// One session (lease) per server, whatever the number of scopes.
pub async fn fifty_scopes_share_one_session_and_close_one_at_a_time<S: ElectionServer>() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = S::start();
    let backend = S::backend(&server.address(), TIMEOUT);
    let scopes: Vec<Scope> = (0..50)
        .map(|i| Scope::new(Some("kind-dev"), Some(&format!("ns-{i:02}"))))
        .collect();
    let mut handles: Vec<ElectionHandle> = scopes
        .iter()
        .map(|s| ElectionHandle::start(&backend, s.clone(), "server-a".into()))
        .collect();
    for h in &handles {
        wait_state(h, Leadership::Leading, Duration::from_secs(20)).await;
    }
    // Counted on the server: one session (lease), and it owns all 50 candidates.
    let ids = wait_sessions(&server, 1).await;
    let owners = owners_of(&server, &scopes, "server-a").await;
    assert_eq!(owners.len(), 1, "candidates' owners {owners:?}");
    assert_eq!(owners, ids);

    // Closing one scope removes its candidate only; the others keep leading in the same session.
    let closed = handles.remove(7);
    closed.close().await;
    assert!(server.candidates(&scopes[7]).await.is_empty());
    for (i, s) in scopes.iter().enumerate().filter(|(i, _)| *i != 7) {
        assert_eq!(server.candidates(s).await.len(), 1, "scope {i}");
    }
    assert!(handles.iter().all(|h| h.may_act()));
    assert_eq!(wait_sessions(&server, 1).await, ids);

    // Closing the last scope closes the session (revokes the lease).
    for h in handles {
        h.close().await;
    }
    wait_sessions(&server, 0).await;
    for s in &scopes {
        assert!(server.candidates(s).await.is_empty());
    }
}

/// The scope store ([`podsweep::election::store`]): a record one server creates is read by
/// another, created once however often it is created, watched (a change after a listing wakes
/// the watcher, also on a shelf that did not exist when it was listed) and removed.
pub async fn store_records_are_shared_and_their_changes_watched<S: ElectionServer>() {
    use podsweep::election::store::Shelf;
    use podsweep::election::Identity;
    init_logs();
    let server = S::start();
    let scope = Scope::new(Some("cluster:ab12"), Some("spark"));
    let (one, two) = (
        S::backend(&server.address(), TIMEOUT),
        S::backend(&server.address(), TIMEOUT),
    );
    // No session yet: the store does not open one of its own.
    let (id_a, id_b) = (Identity::fixed("server-a"), Identity::fixed("server-b"));
    let a = one.store(&id_a).expect("a store");
    let b = two.store(&id_b).expect("a store");
    let none = a.list(&scope, Shelf::Requests).await;
    assert!(none.is_err(), "no session, no store: {none:?}");
    let ha = ElectionHandle::start(&one, scope.clone(), "server-a".into());
    wait_state(&ha, Leadership::Leading, Duration::from_secs(15)).await;
    let hb = ElectionHandle::start(&two, scope.clone(), "server-b".into());
    wait_candidates(&server, &scope, 2).await;
    // Whom a step-down could hand the scope to: every candidate, read on either's session.
    for store in [&a, &b] {
        let mut who = store.participants(&scope).await.expect("participants");
        who.sort();
        assert_eq!(who, ["server-a", "server-b"]);
    }
    let other = Scope::new(Some("cluster:ab12"), Some("other"));
    assert_eq!(a.participants(&other).await, Ok(vec![]));

    let (listed, changed) = b.watch(&scope, Shelf::Requests).await.expect("watch");
    assert!(listed.is_empty(), "{listed:?}");
    assert_eq!(
        a.create(&scope, Shelf::Requests, "uid/1", b"one".to_vec())
            .await,
        Ok(true)
    );
    assert_eq!(
        a.create(&scope, Shelf::Requests, "uid/1", b"two".to_vec())
            .await,
        Ok(false)
    );
    timeout(Duration::from_secs(10), changed)
        .await
        .expect("the watcher saw the record come");
    let (listed, changed) = b.watch(&scope, Shelf::Requests).await.expect("watch");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (listed[0].name.as_str(), listed[0].value.as_slice()),
        ("uid/1", &b"one"[..])
    );
    // Another shelf is another set.
    assert_eq!(b.list(&scope, Shelf::Reported).await, Ok(vec![]));
    b.remove(&scope, Shelf::Requests, "uid/1")
        .await
        .expect("remove");
    b.remove(&scope, Shelf::Requests, "uid/1")
        .await
        .expect("gone is not an error");
    timeout(Duration::from_secs(10), changed)
        .await
        .expect("the watcher saw the record go");
    assert_eq!(a.list(&scope, Shelf::Requests).await, Ok(vec![]));
    hb.close().await;
    ha.close().await;
}
