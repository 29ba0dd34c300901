//! Cleanup coordinated through a real ZooKeeper: whole engines (tracker, sweeper, election) with
//! a recording deleter in place of the Kubernetes API. Crashed and frozen leaders run in a child
//! process: this test binary re-executed with `PODSWEEP_CLEANUP_CHILD` set.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::process::{exit_with_parent, ChildProcess, Stderr};
use common::recorder::{self, Recorder};
use common::zk::ZkServer;
use podsweep::clock::Clock;
use podsweep::config::{keys, HaSettings, Settings};
use podsweep::election::zookeeper::ZooKeeperBackend;
use podsweep::election::Leadership;
use podsweep::engine::Engine;
use podsweep::model::{AppState, EventKind, Observation};
use podsweep::scope::Scope;
use podsweep::sweeper::DeleterSource;
use tokio::time::{sleep, Instant};

const CHILD_ENV: &str = "PODSWEEP_CLEANUP_CHILD";
const SESSION_MS: u64 = 2000;

fn engine(zk: &str, id: &str, retain_ms: u64, recorder: Arc<Recorder>) -> Engine {
    let conf: HashMap<String, String> = [
        (keys::CLEANUP_KIND, "ALL".to_owned()),
        (keys::RETAIN_PERIOD, retain_ms.to_string()),
        (keys::HA_ADDRESSES, zk.to_owned()),
        (keys::HA_NAMESPACE, "podsweep_it".to_owned()),
        (keys::ZK_SESSION_TIMEOUT, SESSION_MS.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let settings = Settings::from_map(conf).unwrap();
    let HaSettings::ZooKeeper(zk) = settings.ha.clone() else {
        panic!("zookeeper expected")
    };
    let source: DeleterSource = recorder::source(recorder);
    Engine::with_parts(
        settings,
        id,
        Arc::new(ZooKeeperBackend::new(zk)),
        source,
        Clock::System,
        tokio::runtime::Handle::current(),
    )
    .unwrap()
}

fn scope() -> Scope {
    Scope::new(
        Some("arn:aws:eks:us-east-1:123:cluster/prod"),
        Some("spark"),
    )
}

fn pod(
    uid: &str,
    kind: EventKind,
    state: AppState,
    terminated_at: Option<SystemTime>,
) -> Observation {
    Observation {
        kind,
        tag: format!("tag-{uid}"),
        pod_name: format!("driver-{uid}"),
        pod_uid: uid.to_owned(),
        state,
        has_app_selector: true,
        terminated_at,
        deletion_requested: false,
        annotations: None,
    }
}

fn hour_ago() -> Option<SystemTime> {
    Some(SystemTime::now() - Duration::from_secs(3600))
}

async fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < within, "{what}: not within {within:?}");
        sleep(Duration::from_millis(10)).await;
    }
    t0.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_deletes_and_a_cancelled_pod_stays_cancelled_after_handover() {
    let zk = ZkServer::start();
    let (ra, rb) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    let a = engine(&zk.addr(), "server-a", 500, ra.clone());
    let b = engine(&zk.addr(), "server-b", 500, rb.clone());
    a.observe(
        scope(),
        pod("warm", EventKind::Add, AppState::Running, None),
    )
    .unwrap();
    wait_for("a leads", Duration::from_secs(10), || {
        a.leadership(&scope()) == Some(Leadership::Leading)
    })
    .await;
    b.observe(
        scope(),
        pod("warm", EventKind::Add, AppState::Running, None),
    )
    .unwrap();
    wait_for("b follows", Duration::from_secs(10), || {
        b.leadership(&scope()) == Some(Leadership::Following)
    })
    .await;
    let uids: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
    for e in [&a, &b] {
        for u in &uids {
            e.observe(
                scope(),
                pod(u, EventKind::Update, AppState::Finished, hour_ago()),
            )
            .unwrap();
        }
    }
    wait_for("20 deletes", Duration::from_secs(10), || {
        ra.uids.lock().unwrap().len() == 20
    })
    .await;
    // The informers then see the DELETE events.
    for e in [&a, &b] {
        for u in &uids {
            e.observe(
                scope(),
                pod(u, EventKind::Delete, AppState::Finished, hour_ago()),
            )
            .unwrap();
        }
    }
    sleep(Duration::from_millis(300)).await;
    a.close_async(Duration::from_secs(5)).await;
    let handover = wait_for("b leads", Duration::from_secs(5), || {
        b.leadership(&scope()) == Some(Leadership::Leading)
    })
    .await;
    eprintln!("graceful handover took {handover:?}");
    sleep(Duration::from_secs(1)).await;
    assert_eq!(ra.uids.lock().unwrap().len(), 20);
    assert!(
        rb.uids.lock().unwrap().is_empty(),
        "the follower and then the new leader sent nothing"
    );
    b.close_async(Duration::from_secs(5)).await;
}

/// An engine in another process (tests/common/process.rs); killed on drop.
struct ChildEngine {
    process: ChildProcess,
}

impl ChildEngine {
    fn spawn(zk: &str, retain_ms: u64, pods: &[(&str, SystemTime)]) -> ChildEngine {
        let pods: Vec<String> = pods
            .iter()
            .map(|(u, t)| format!("{u}:{}", t.duration_since(UNIX_EPOCH).unwrap().as_millis()))
            .collect();
        let process = ChildProcess::test(
            "cleanup_child",
            &[
                (CHILD_ENV, zk.to_owned()),
                ("PODSWEEP_CLEANUP_CHILD_RETAIN_MS", retain_ms.to_string()),
                ("PODSWEEP_CLEANUP_CHILD_PODS", pods.join(",")),
            ],
            Stderr::Inherit,
        );
        ChildEngine { process }
    }

    fn saw(&self, prefix: &str) -> bool {
        self.process.saw(prefix)
    }

    fn signal(&self, name: &str) {
        self.process.signal(name);
    }
}

#[test]
#[ignore = "child-process engine, started by the other tests of this file"]
fn cleanup_child() {
    let Ok(zk) = std::env::var(CHILD_ENV) else {
        return;
    };
    exit_with_parent();
    let retain_ms: u64 = std::env::var("PODSWEEP_CLEANUP_CHILD_RETAIN_MS")
        .unwrap()
        .parse()
        .unwrap();
    let pods = std::env::var("PODSWEEP_CLEANUP_CHILD_PODS").unwrap_or_default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let recorder = Arc::new(Recorder::echoing());
        let e = engine(&zk, "child", retain_ms, recorder);
        e.observe(
            scope(),
            pod("warm", EventKind::Add, AppState::Running, None),
        )
        .unwrap();
        for p in pods.split(',').filter(|p| !p.is_empty()) {
            let (uid, ms) = p.split_once(':').unwrap();
            let at = UNIX_EPOCH + Duration::from_millis(ms.parse().unwrap());
            e.observe(
                scope(),
                pod(uid, EventKind::Update, AppState::Finished, Some(at)),
            )
            .unwrap();
        }
        let mut last = None;
        loop {
            let now = e.leadership(&scope());
            if now != last {
                println!("STATE {}", now.map(|l| l.as_str()).unwrap_or("NONE"));
                last = now;
            }
            sleep(Duration::from_millis(10)).await;
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_successor_reconciles_after_the_leader_process_is_killed() {
    let zk = ZkServer::start();
    let child = ChildEngine::spawn(&zk.addr(), 1000, &[]);
    wait_for("child leads", Duration::from_secs(20), || {
        child.saw("STATE LEADING")
    })
    .await;
    let rb = Arc::new(Recorder::default());
    let b = engine(&zk.addr(), "server-b", 1000, rb.clone());
    // Terminated an hour ago: overdue, but b follows, so it only holds the pod.
    b.observe(
        scope(),
        pod("orphan", EventKind::Update, AppState::Failed, hour_ago()),
    )
    .unwrap();
    sleep(Duration::from_millis(1500)).await;
    assert!(
        rb.uids.lock().unwrap().is_empty(),
        "a follower sends nothing"
    );
    child.signal("KILL");
    let failover = wait_for("successor deletes", Duration::from_secs(15), || {
        !rb.uids.lock().unwrap().is_empty()
    })
    .await;
    eprintln!("crash failover to first DELETE: {failover:?} (session timeout {SESSION_MS} ms)");
    assert_eq!(*rb.uids.lock().unwrap(), ["orphan"]);
    b.close_async(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_leader_sends_nothing_after_it_wakes() {
    let zk = ZkServer::start();
    // Due 3 s from now, in both processes.
    let ended = SystemTime::now();
    let child = ChildEngine::spawn(&zk.addr(), 3000, &[("frozen-pod", ended)]);
    wait_for("child leads", Duration::from_secs(20), || {
        child.saw("STATE LEADING")
    })
    .await;
    let rb = Arc::new(Recorder::default());
    let b = engine(&zk.addr(), "server-b", 3000, rb.clone());
    b.observe(
        scope(),
        pod(
            "frozen-pod",
            EventKind::Update,
            AppState::Finished,
            Some(ended),
        ),
    )
    .unwrap();
    child.signal("STOP");
    wait_for("successor deletes", Duration::from_secs(20), || {
        !rb.uids.lock().unwrap().is_empty()
    })
    .await;
    // Wake the old leader long after its deadline passed: its timer fires at once, and must not send.
    sleep(Duration::from_secs(2)).await;
    child.signal("CONT");
    sleep(Duration::from_secs(3)).await;
    let lines = child.process.lines();
    assert!(
        !lines.iter().any(|l| l.starts_with("DELETE")),
        "the woken ex-leader sent a DELETE: {lines:?}"
    );
    assert_eq!(*rb.uids.lock().unwrap(), ["frozen-pod"]);
    b.close_async(Duration::from_secs(5)).await;
}

/// Answers every DELETE with 403, as an API server does for a server with the wrong service
/// account, and counts them.
#[derive(Default)]
struct Refusing(std::sync::atomic::AtomicUsize);

impl podsweep::deleter::PodDeleter for Refusing {
    fn delete(
        &self,
        _name: &str,
        _uid: &str,
        _dry_run: bool,
    ) -> futures::future::BoxFuture<'static, podsweep::deleter::Outcome> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async {
            podsweep::deleter::Outcome {
                class: podsweep::deleter::OutcomeClass::Forbidden,
                code: Some(403),
                reason: "Forbidden".into(),
                message: "pods is forbidden: wrong service account".into(),
                retry_after: None,
                flow: None,
            }
        })
    }
}

/// Issue 10, item 7, with a real ZooKeeper: a leader that gets only 403s steps down after
/// `ha.stepDownAfter` and a server that can delete takes over and deletes the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_cannot_delete_hands_over_to_one_that_can() {
    let zk = ZkServer::start();
    let with_step_down = |id: &str, source: DeleterSource| {
        let conf: HashMap<String, String> = [
            (keys::CLEANUP_KIND, "ALL"),
            (keys::RETAIN_PERIOD, "500"),
            (keys::HA_ADDRESSES, zk.addr().as_str()),
            (keys::HA_NAMESPACE, "podsweep_it_stepdown"),
            (keys::ZK_SESSION_TIMEOUT, "2000"),
            (keys::STEP_DOWN_AFTER, "PT3S"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let settings = Settings::from_map(conf).unwrap();
        let HaSettings::ZooKeeper(z) = settings.ha.clone() else {
            panic!("zookeeper expected")
        };
        Engine::with_parts(
            settings,
            id,
            Arc::new(ZooKeeperBackend::new(z)),
            source,
            Clock::System,
            tokio::runtime::Handle::current(),
        )
        .unwrap()
    };
    let refusing = Arc::new(Refusing::default());
    let r = refusing.clone();
    let canary = with_step_down(
        "canary",
        Arc::new(move |_| {
            let d: Arc<dyn podsweep::deleter::PodDeleter> = r.clone();
            Box::pin(async move { Ok(d) })
        }),
    );
    canary
        .observe(
            scope(),
            pod("warm", EventKind::Add, AppState::Running, None),
        )
        .unwrap();
    wait_for("the canary leads", Duration::from_secs(20), || {
        canary.leadership(&scope()) == Some(Leadership::Leading)
    })
    .await;
    let good_rec = Arc::new(Recorder::default());
    let good = with_step_down("good", recorder::source(good_rec.clone()));
    for e in [&canary, &good] {
        e.observe(
            scope(),
            pod("due", EventKind::Update, AppState::Finished, hour_ago()),
        )
        .unwrap();
    }
    let took = wait_for(
        "the good server deletes the pod",
        Duration::from_secs(60),
        || good_rec.count() == 1,
    )
    .await;
    assert!(
        took >= Duration::from_secs(3),
        "not before the window: {took:?}"
    );
    assert!(refusing.0.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    let st: serde_json::Value = serde_json::from_str(&canary.status_json(&scope())).unwrap();
    assert_eq!(st["healthy"], false, "{st}");
    assert!(
        st["health_reason"]
            .as_str()
            .is_some_and(|r| r.contains("completed no DELETE")),
        "{st}"
    );
    assert_eq!(good.leadership(&scope()), Some(Leadership::Leading));
    canary.close_async(Duration::from_secs(5)).await;
    good.close_async(Duration::from_secs(5)).await;
}
