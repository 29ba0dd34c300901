//! Issue 22, "safety, second round": each test is one defect of the review (the JVM's items are
//! in the sbt suites, etcd's in `tests/etcd_election.rs`, the watch's in `tests/watch.rs`, the
//! daemon's HTTP server in `tests/daemon.rs`).

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::fixture::{conf, observation, start, status_reply};
use common::pods_api::{driver_pod, wait_for, PodsApi};
use common::zk::ZkServer;
use futures::future::BoxFuture;
use podsweep::clock::Clock;
use podsweep::config::{keys, Settings};
use podsweep::deleter::{KubeDeleter, PodDeleter};
use podsweep::election::{Backend, LeaderSignal};
use podsweep::engine::{Engine, EngineError};
use podsweep::model::{AppState, EventKind};
use podsweep::scope::Scope;
use podsweep::seen::Head;
use podsweep::sweeper::DeleterSource;
use tokio::sync::Notify;
use tokio::time::{sleep, timeout, Instant};
use tokio_util::sync::CancellationToken;

/// An election backend whose first campaign leads at once and panics when `trigger` fires; the
/// campaigns after it wait for the test, as `ManualBackend`'s do.
#[derive(Default)]
struct Bomb {
    signals: Arc<Mutex<Vec<LeaderSignal>>>,
    trigger: Arc<Notify>,
    campaigns: Arc<AtomicUsize>,
}

impl Backend for Bomb {
    fn name(&self) -> &'static str {
        "bomb"
    }

    fn campaign(
        &self,
        _scope: Scope,
        _identity: String,
        signal: LeaderSignal,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        let n = self.campaigns.fetch_add(1, Ordering::SeqCst);
        self.signals.lock().unwrap().push(signal.clone());
        let trigger = self.trigger.clone();
        Box::pin(async move {
            if n == 0 {
                signal.lead_until(Instant::now() + Duration::from_secs(3600), "won");
                trigger.notified().await;
                panic!("injected failure of the election task");
            }
            cancel.cancelled().await;
        })
    }
}

fn mock_source(
    ns: &str,
) -> (
    DeleterSource,
    tower_test::mock::Handle<http::Request<kube::client::Body>, http::Response<kube::client::Body>>,
) {
    let (service, mock) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    let client = kube::Client::new(service, ns.to_owned());
    let ns = ns.to_owned();
    let source: DeleterSource = Arc::new(move |_| {
        let d: Arc<dyn PodDeleter> = Arc::new(KubeDeleter::new(client.clone(), &ns));
        Box::pin(async move { Ok(d) })
    });
    (source, mock)
}

fn status(engine: &Engine, scope: &Scope) -> serde_json::Value {
    serde_json::from_str(&engine.status_json(scope)).unwrap()
}

/// Item 2: a panic in a scope's election task does not end the scope's election for good, nor
/// leave it reading LEADING and healthy: it reports the failure (unhealthy, with the reason),
/// stops leading, and campaigns again after a backoff; a new term leads and deletes.
#[tokio::test(start_paused = true)]
async fn a_panicking_election_task_is_reported_and_restarted() {
    start();
    let backend = Bomb::default();
    let (signals, trigger, campaigns) = (
        backend.signals.clone(),
        backend.trigger.clone(),
        backend.campaigns.clone(),
    );
    let (source, mut mock) = mock_source("elect");
    let engine = Engine::with_parts(
        Settings::from_map(conf(&[(keys::CLEANUP_KIND, "ALL")])).unwrap(),
        "server-a",
        Arc::new(backend),
        source,
        Clock::System,
        tokio::runtime::Handle::current(),
    )
    .unwrap();
    let scope = Scope::new(None, Some("elect"));
    let mut first = observation("one", EventKind::Update, AppState::Finished);
    first.terminated_at = Some(std::time::SystemTime::UNIX_EPOCH);
    engine.observe(scope.clone(), first).unwrap();
    let (req, send) = timeout(Duration::from_secs(5), mock.next_request())
        .await
        .expect("the leader deletes the overdue pod")
        .unwrap();
    assert_eq!(req.uri().path(), "/api/v1/namespaces/elect/pods/driver-one");
    send.send_response(status_reply(200, "", None));
    assert_eq!(status(&engine, &scope)["leadership"], "LEADING");

    trigger.notify_one();
    // Paused time: every task runs until idle (the panic, its report) before the clock moves.
    sleep(Duration::from_millis(10)).await;
    let s = status(&engine, &scope);
    assert_ne!(
        s["leadership"], "LEADING",
        "a dead election still leads: {s}"
    );
    assert_eq!(s["healthy"], false, "{s}");
    assert!(
        s["health_reason"]
            .as_str()
            .is_some_and(|r| r.contains("election task failed")),
        "{s}"
    );
    // Campaigning again after the backoff (1 s; paused time); the new term leads and deletes.
    sleep(Duration::from_secs(2)).await;
    assert_eq!(campaigns.load(Ordering::SeqCst), 2, "campaigned again");
    let signal = signals.lock().unwrap()[1].clone();
    signal.lead_until(Instant::now() + Duration::from_secs(3600), "won again");
    let mut second = observation("two", EventKind::Update, AppState::Finished);
    second.terminated_at = Some(std::time::SystemTime::UNIX_EPOCH);
    engine.observe(scope.clone(), second).unwrap();
    let (req, send) = timeout(Duration::from_secs(5), mock.next_request())
        .await
        .expect("the new term deletes")
        .unwrap();
    assert_eq!(req.uri().path(), "/api/v1/namespaces/elect/pods/driver-two");
    send.send_response(status_reply(200, "", None));
    assert_eq!(status(&engine, &scope)["restarts"], 1);
    // Healthy again once the restarted task has run `health.alertAfter` (120 s, paused
    // time) without failing.
    sleep(Duration::from_secs(125)).await;
    assert_eq!(status(&engine, &scope)["healthy"], true);
}

/// Item 5: while a failed scope task waits out its restart backoff, its queue of events grows;
/// the status says how deep it is (and the most it held), and it drains once the task runs.
#[tokio::test(start_paused = true)]
async fn the_queue_of_a_restarting_scope_is_measured() {
    start();
    let (service, _mock) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    let client = kube::Client::new(service, "queue");
    let builds = Arc::new(AtomicUsize::new(0));
    let b = builds.clone();
    let source: DeleterSource = Arc::new(move |_| {
        let d: Arc<dyn PodDeleter> = Arc::new(KubeDeleter::new(client.clone(), "queue"));
        let first = b.fetch_add(1, Ordering::SeqCst) == 0;
        Box::pin(async move {
            assert!(!first, "deliberate failure of the first client build");
            Ok(d)
        })
    });
    let backend = common::manual::ManualBackend::default();
    let engine = Engine::with_parts(
        Settings::from_map(conf(&[(keys::CLEANUP_KIND, "ALL")])).unwrap(),
        "server-a",
        Arc::new(backend),
        source,
        Clock::System,
        tokio::runtime::Handle::current(),
    )
    .unwrap();
    let scope = Scope::new(None, Some("queue"));
    engine
        .observe(
            scope.clone(),
            observation("first", EventKind::Add, AppState::Running),
        )
        .unwrap();
    // Paused time: every task runs until idle (the failed client build) before the clock moves.
    sleep(Duration::from_millis(10)).await;
    assert_eq!(status(&engine, &scope)["restarts"], 1, "the task failed");
    // The task waits 1 s before it runs again: what arrives meanwhile waits in its queue.
    for i in 0..50 {
        let obs = observation(&format!("p{i}"), EventKind::Update, AppState::Finished);
        engine.observe(scope.clone(), obs).unwrap();
    }
    let s = status(&engine, &scope);
    assert_eq!(s["queued"], 50, "{s}");
    assert!(s["queued_max"].as_u64().unwrap_or(0) >= 50, "{s}");
    // Past the restart backoff (1 s, paused time).
    sleep(Duration::from_secs(2)).await;
    let s = status(&engine, &scope);
    assert_eq!(s["queued"], 0, "the restarted task took its queue: {s}");
    assert_eq!(s["tracked"], 50, "{s}");
}

/// Item 7: every ZooKeeper time key is bounded as the other time keys are (the session timeout
/// also by the protocol's 32-bit milliseconds); a value past it is refused naming the key.
#[test]
fn zookeeper_time_keys_are_bounded() {
    for key in [
        keys::ZK_SESSION_TIMEOUT,
        keys::ZK_CONNECTION_TIMEOUT,
        keys::ZK_BASE_RETRY_WAIT,
        keys::ZK_MAX_RETRY_WAIT,
    ] {
        let e = Settings::from_map(conf(&[
            (keys::HA_ADDRESSES, "127.0.0.1:2181"),
            (key, "99999999999999"),
        ]))
        .err()
        .unwrap_or_else(|| panic!("{key}=99999999999999 was accepted"));
        assert!(e.to_string().starts_with(key), "{e}");
    }
    let e = Settings::from_map(conf(&[
        (keys::HA_ADDRESSES, "127.0.0.1:2181"),
        (keys::ZK_SESSION_TIMEOUT, "3000000000"),
    ]))
    .map(|_| ())
    .expect_err("a session timeout past 2^31 ms was accepted");
    assert!(e.to_string().starts_with(keys::ZK_SESSION_TIMEOUT), "{e}");
    Settings::from_map(conf(&[
        (keys::HA_ADDRESSES, "127.0.0.1:2181"),
        (keys::ZK_SESSION_TIMEOUT, "600000"),
    ]))
    .expect("Kyuubi's own values are accepted");
}

/// Item 7: `observe_in` checks the event summary it is given against the event, and refuses one
/// that disagrees (naming it) instead of recording what the scope's task was told from it.
#[tokio::test]
async fn observe_in_refuses_a_summary_that_disagrees_with_its_event() {
    let engine = Engine::with_parts(
        Settings::from_map(conf(&[(keys::CLEANUP_KIND, "ALL")])).unwrap(),
        "server-a",
        Arc::new(common::manual::ManualBackend::default()),
        common::fixture::no_deleters(),
        Clock::System,
        tokio::runtime::Handle::current(),
    )
    .unwrap();
    let id = engine.scope_id(Scope::new(None, Some("spark"))).unwrap();
    let uid = "0b5f7c1e-3a4d-4c2b-9e8f-1a2b3c4d5e6f";
    let finished = observation(uid, EventKind::Update, AppState::Finished);
    let running = observation(uid, EventKind::Update, AppState::Running);
    // A summary of the running pod handed with its terminal event.
    let e = engine
        .observe_in(id, finished.clone(), Head::of(&running))
        .expect_err("a summary of another event was taken");
    assert!(
        matches!(e, EngineError::Argument { name: "head", .. }),
        "{e}"
    );
    engine
        .observe_in(id, finished.clone(), Head::of(&finished))
        .expect("its own summary");
}

/// Item 4: `(no context, ns)` and `(ctx, ns)` where `ctx` is the default context name the same
/// pods. Two servers whose informers see every pod under both scopes (as Kyuubi's do with
/// `:spark,prod:spark` in its init list) elect one leader between the two, on real ZooKeeper, so
/// each pod gets one DELETE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_scopes_over_one_namespace_elect_one_leader() {
    let zk = ZkServer::start();
    let api = PodsApi::start().await;
    let raw: HashMap<String, String> = [
        (keys::CLEANUP_KIND, "ALL"),
        (keys::RETAIN_PERIOD, "PT1S"),
        (keys::HA_ADDRESSES, zk.addr().as_str()),
        (keys::HA_NAMESPACE, "round2_alias"),
        (keys::ZK_SESSION_TIMEOUT, "4000"),
        ("kyuubi.kubernetes.master.address", api.url.as_str()),
        (keys::KUBE_CONTEXT, "prod"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let servers: Vec<Engine> = ["server-a", "server-b"]
        .into_iter()
        .map(|id| {
            Engine::new(
                Settings::from_map(raw.clone()).unwrap(),
                id,
                tokio::runtime::Handle::current(),
            )
            .unwrap()
        })
        .collect();
    let scopes = [
        Scope::new(None, Some("spark")),
        Scope::new(Some("prod"), Some("spark")),
    ];
    let mut names = Vec::new();
    for i in 0..5 {
        let name = format!("driver-alias-{i}");
        let uid = api.create("spark", driver_pod(&name, Some(0)));
        for e in &servers {
            for s in &scopes {
                let mut obs = observation(&uid, EventKind::Update, AppState::Finished);
                obs.pod_name = name.clone();
                obs.terminated_at = Some(std::time::SystemTime::now());
                e.observe(s.clone(), obs).unwrap();
            }
        }
        names.push(name);
    }
    wait_for("every pod deleted", Duration::from_secs(30), || {
        names.iter().all(|n| !api.exists("spark", n))
    })
    .await;
    // Every election of the pods' scopes (one per election key the servers report, whichever
    // name they were given) has its leader, and each leader has settled every pod it tracked:
    // a second leader, had there been one, has sent its DELETEs by then. A follower sends none.
    let named = |e: &Engine, s: &Scope| common::status::of(e, s);
    let settled = || {
        let all: Vec<serde_json::Value> = servers
            .iter()
            .flat_map(|e| scopes.iter().map(move |s| named(e, s)))
            .collect();
        let key = |s: &serde_json::Value| s["election_scope"].as_str().unwrap_or("").to_owned();
        let keys: std::collections::BTreeSet<String> = all.iter().map(key).collect();
        keys.iter().all(|k| {
            let mut leaders = all
                .iter()
                .filter(|s| key(s) == *k && s["leadership"] == "LEADING")
                .peekable();
            leaders.peek().is_some() && leaders.all(common::status::idle)
        })
    };
    wait_for(
        "each election's leader has settled its pods",
        Duration::from_secs(30),
        settled,
    )
    .await;
    for e in &servers {
        let s = named(e, &scopes[0]);
        println!(
            "{}: {} of {}, deletes_sent {}, tracked {}",
            s["server_id"], s["leadership"], s["election_scope"], s["deletes_sent"], s["tracked"]
        );
    }
    let counts: Vec<(String, usize)> = names
        .iter()
        .map(|n| (n.clone(), api.deletes_of(n)))
        .collect();
    let leaders: Vec<String> = servers
        .iter()
        .flat_map(|e| {
            scopes
                .iter()
                .map(move |s| format!("{s}: {:?}", e.leadership(s)))
        })
        .collect();
    assert!(
        counts.iter().all(|(_, n)| *n == 1),
        "DELETEs per pod {counts:?}; leadership {leaders:?}"
    );
    for e in &servers {
        e.close_async(Duration::from_secs(5)).await;
    }
}

/// Item 4, with the allow lists: a scope that shares its key with a scope already served is
/// still checked against the allow lists by its own name on its first event, and refused.
#[tokio::test]
async fn a_scope_sharing_its_key_is_still_checked_against_the_allow_lists() {
    let backend = common::manual::ManualBackend::default();
    let signals = backend.signals.clone();
    let engine = Engine::with_parts(
        Settings::from_map(conf(&[
            (keys::CLEANUP_KIND, "ALL"),
            ("kyuubi.kubernetes.master.address", "http://127.0.0.1:1"),
            (keys::KUBE_CONTEXT, "prod"),
            (keys::CONTEXT_ALLOW_LIST, "other"),
        ]))
        .unwrap(),
        "server-a",
        Arc::new(backend),
        common::fixture::no_deleters(),
        Clock::System,
        tokio::runtime::Handle::current(),
    )
    .unwrap();
    let running = || observation("r", EventKind::Add, AppState::Running);
    // No context: not checked (Kyuubi's rule), served.
    engine
        .observe(Scope::new(None, Some("spark")), running())
        .unwrap();
    // The default context named: the same pods, but `prod` is not in the context allow list.
    let e = engine
        .observe(Scope::new(Some("prod"), Some("spark")), running())
        .expect_err("a refused context was served");
    assert!(e.to_string().starts_with(keys::CONTEXT_ALLOW_LIST), "{e}");
    // Later events of the refused scope are ignored quietly.
    engine
        .observe(Scope::new(Some("prod"), Some("spark")), running())
        .unwrap();
    tokio::task::yield_now().await;
    assert_eq!(signals.lock().unwrap().len(), 1, "one election");
}
