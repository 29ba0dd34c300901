//! Issue 32 §4, with a real ZooKeeper: a step-down that cannot help does not rotate the
//! leadership. Three servers whose DELETEs are all refused (as in an emergency stop that takes
//! `delete` from every account) hand the scope over while some server has not been refused yet,
//! then the last one keeps it: each writes itself into the scope's `refused` record, and a
//! leader steps down only while a participant of the election is not in it. The first accepted
//! DELETE clears the record. (A leader that can hand over to a server that can delete still
//! does: tests/zk_cleanup.rs.)

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::zk::ZkServer;
use futures::future::BoxFuture;
use podsweep::clock::Clock;
use podsweep::config::{keys, HaSettings, Settings};
use podsweep::deleter::{Outcome, OutcomeClass, PodDeleter};
use podsweep::election::zookeeper::ZooKeeperBackend;
use podsweep::election::Leadership;
use podsweep::engine::Engine;
use podsweep::model::{AppState, EventKind};
use podsweep::scope::Scope;

/// Refuses every DELETE with 403 until told to accept; counts them.
#[derive(Default)]
struct Gate {
    accept: AtomicBool,
    sent: AtomicUsize,
}

impl PodDeleter for Gate {
    fn delete(&self, _name: &str, _uid: &str, _dry_run: bool) -> BoxFuture<'static, Outcome> {
        self.sent.fetch_add(1, Ordering::SeqCst);
        let ok = self.accept.load(Ordering::SeqCst);
        Box::pin(async move {
            if ok {
                Outcome {
                    class: OutcomeClass::Accepted,
                    code: Some(200),
                    reason: String::new(),
                    message: String::new(),
                    retry_after: None,
                    flow: None,
                }
            } else {
                Outcome {
                    class: OutcomeClass::Forbidden,
                    code: Some(403),
                    reason: "Forbidden".into(),
                    message: "pods is forbidden: the Role lost delete".into(),
                    retry_after: None,
                    flow: None,
                }
            }
        })
    }
}

fn scope() -> Scope {
    Scope::new(None, Some("handover"))
}

fn settings(zk: &ZkServer) -> Settings {
    let conf: HashMap<String, String> = [
        (keys::CLEANUP_KIND, "ALL"),
        (keys::RETAIN_PERIOD, "500"),
        (keys::HA_ADDRESSES, zk.addr().as_str()),
        (keys::HA_NAMESPACE, "podsweep_it_handover"),
        (keys::ZK_SESSION_TIMEOUT, "4000"),
        (keys::STEP_DOWN_AFTER, "PT3S"),
        (keys::FORBIDDEN_RETRY, "PT1S"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    Settings::from_map(conf).unwrap()
}

fn engine(zk: &ZkServer, id: &str, gate: &Arc<Gate>) -> Arc<Engine> {
    let s = settings(zk);
    let HaSettings::ZooKeeper(z) = s.ha.clone() else {
        panic!("zookeeper expected")
    };
    let g = gate.clone();
    Arc::new(
        Engine::with_parts(
            s,
            id,
            Arc::new(ZooKeeperBackend::new(z)),
            Arc::new(move |_| {
                let d: Arc<dyn PodDeleter> = g.clone();
                Box::pin(async move { Ok(d) })
            }),
            Clock::System,
            tokio::runtime::Handle::current(),
        )
        .unwrap(),
    )
}

fn leader(engines: &[Arc<Engine>]) -> Option<usize> {
    engines
        .iter()
        .position(|e| e.leadership(&scope()) == Some(Leadership::Leading))
}

fn reasons(e: &Engine) -> String {
    let st: serde_json::Value = serde_json::from_str(&e.status_json(&scope())).unwrap();
    st["health_reasons"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_refused_everywhere_stops_handing_over() {
    let zk = ZkServer::start();
    let gate = Arc::new(Gate::default());
    let engines: Vec<Arc<Engine>> = ["server-a", "server-b", "server-c"]
        .iter()
        .map(|id| engine(&zk, id, &gate))
        .collect();
    let mut pod = common::fixture::observation("due", EventKind::Update, AppState::Finished);
    pod.terminated_at = Some(std::time::SystemTime::now() - Duration::from_secs(3600));
    for e in &engines {
        e.observe(scope(), pod.clone()).unwrap();
    }
    // Sample the leader until one keeps the scope saying why (or give up).
    let t0 = Instant::now();
    let (mut changes, mut last, mut kept) = (0, None, None);
    while t0.elapsed() < Duration::from_secs(60) {
        let now = leader(&engines);
        if now.is_some() && last.is_some() && now != last {
            changes += 1;
        }
        if now.is_some() {
            last = now;
        }
        if let Some(i) = now {
            if reasons(&engines[i]).contains("every other server of the election") {
                kept = Some(i);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "kept by {kept:?} after {:?} and {changes} leadership changes; {} DELETEs sent",
        t0.elapsed(),
        gate.sent.load(Ordering::SeqCst)
    );
    let kept = kept.unwrap_or_else(|| {
        panic!(
            "no leader kept the scope in 60 s ({changes} changes): {:?}",
            engines.iter().map(|e| reasons(e)).collect::<Vec<_>>()
        )
    });
    assert!(
        changes <= 2,
        "{changes} leadership changes before it stopped"
    );
    // Two more windows: the same leader.
    let t1 = Instant::now();
    while t1.elapsed() < Duration::from_secs(7) {
        assert_eq!(leader(&engines), Some(kept), "the leadership moved on");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The record names the three servers.
    let zkc = common::zk::inspector(&zk.addr()).await;
    let shelf = "/podsweep_it_handover-podsweep/refused";
    let refused = |zkc: zookeeper_client::Client| async move {
        let mut names = Vec::new();
        for key in zkc.list_children(shelf).await.unwrap_or_default() {
            let dir = format!("{shelf}/{key}");
            names.extend(zkc.list_children(&dir).await.unwrap_or_default());
        }
        names.sort();
        names
    };
    assert_eq!(
        refused(zkc.clone()).await,
        ["server-a", "server-b", "server-c"]
    );
    // `delete` given back: the next probe goes, and the record is cleared.
    gate.accept.store(true, Ordering::SeqCst);
    let t2 = Instant::now();
    while !engines[kept]
        .status_json(&scope())
        .contains("\"accepted\":1")
    {
        assert!(t2.elapsed() < Duration::from_secs(30), "not deleted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The first accepted DELETE cleared the record.
    let t3 = Instant::now();
    while !refused(zkc.clone()).await.is_empty() {
        assert!(t3.elapsed() < Duration::from_secs(10), "the record stays");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for e in &engines {
        e.close_async(Duration::from_secs(5)).await;
    }
}
