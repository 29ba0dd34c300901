//! Self-watch mode end to end: engines whose leaders watch a loopback pods API server
//! (`common::pods_api`) with kube-rs and send their DELETEs to it; elections driven by hand
//! (`ManualBackend`). Real time, short retain periods; every check waits for a condition.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::manual::ManualBackend;
use common::pods_api::{driver_pod, wait_for, PodsApi};
use common::status::{idle, n, wait_status};
use podsweep::clock::Clock;
use podsweep::config::{keys, Settings};
use podsweep::election::{Backend, LeaderSignal};
use podsweep::engine::{kube_source, Engine, EngineError};
use podsweep::model::{AppState, EventKind};
use podsweep::scope::Scope;
use tokio::time::{sleep, Instant};

const NS: &str = "spark";

fn conf(api: &PodsApi, retain: &str, extra: &[(&str, &str)]) -> HashMap<String, String> {
    [
        (keys::WATCH_ENABLED, "true"),
        (keys::CLEANUP_KIND, "NONE"),
        (keys::WATCH_KIND, "ALL"),
        (keys::RETAIN_PERIOD, retain),
        ("kyuubi.kubernetes.master.address", api.url.as_str()),
        (keys::KUBE_NAMESPACE, NS),
        (keys::STEP_DOWN_AFTER, "P365D"),
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn engine_with(raw: HashMap<String, String>, id: &str, backend: Arc<dyn Backend>) -> Engine {
    let source = kube_source(raw.clone());
    Engine::with_parts(
        Settings::from_map(raw).unwrap(),
        id,
        backend,
        source,
        Clock::System,
        tokio::runtime::Handle::current(),
    )
    .unwrap()
}

/// A watch-mode engine on scope `(None, spark)` with a hand-driven election.
fn engine(api: &PodsApi, id: &str, retain: &str) -> (Engine, Arc<Mutex<Vec<LeaderSignal>>>) {
    let backend = ManualBackend::default();
    let signals = backend.signals.clone();
    (
        engine_with(conf(api, retain, &[]), id, Arc::new(backend)),
        signals,
    )
}

fn scope() -> Scope {
    Scope::new(None, Some(NS))
}

fn status(e: &Engine) -> serde_json::Value {
    serde_json::from_str(&e.status_json(&scope())).unwrap()
}

async fn signal(signals: &Arc<Mutex<Vec<LeaderSignal>>>) -> LeaderSignal {
    wait_for("a campaign", Duration::from_secs(10), || {
        !signals.lock().unwrap().is_empty()
    })
    .await;
    signals.lock().unwrap().last().cloned().unwrap()
}

async fn lead(signals: &Arc<Mutex<Vec<LeaderSignal>>>) {
    signal(signals)
        .await
        .lead_until(Instant::now() + Duration::from_secs(24 * 3600), "test");
}

fn watching(e: &Engine) -> bool {
    status(e)["watching"] == true
}

/// `watching W streams S deletes D observed O` of a status, for the test's output.
fn summary(s: &serde_json::Value) -> String {
    format!(
        "watching {} streams {} deletes {} observed {}",
        s["watching"], s["watch_streams"], s["deletes_sent"], s["observed"]
    )
}

/// Every DELETE the API answered: pod name and status.
fn deletes(api: &PodsApi) -> Vec<(String, u16)> {
    api.deletes()
        .into_iter()
        .map(|d| (d.name, d.status))
        .collect()
}

fn streams(e: &Engine) -> u64 {
    status(e)["watch_streams"].as_u64().unwrap()
}

const LONG: Duration = Duration::from_secs(30);

/// A watch-mode engine that leads and tracks the given pods (terminated now, not due yet).
async fn tracking(
    api: &PodsApi,
    retain: &str,
    names: &[&str],
) -> (Engine, Arc<Mutex<Vec<LeaderSignal>>>) {
    let (a, sa) = engine(api, "server-a", retain);
    lead(&sa).await;
    wait_for("a watches", LONG, || watching(&a)).await;
    for n in names {
        api.create(NS, driver_pod(n, Some(0)));
    }
    wait_for("tracked", LONG, || status(&a)["tracked"] == names.len()).await;
    (a, sa)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_watches_and_a_follower_does_not() {
    let api = PodsApi::start().await;
    let (a, sa) = engine(&api, "server-a", "PT2S");
    let (b, _sb) = engine(&api, "server-b", "PT2S");
    for i in 0..5 {
        api.create(NS, driver_pod(&format!("done-{i}"), Some(3600)));
    }
    api.create(NS, driver_pod("running", None));
    lead(&sa).await;
    wait_for("a watches", LONG, || {
        watching(&a) && api.open_watches() == 1
    })
    .await;
    wait_for("the overdue pods are deleted", LONG, || {
        (0..5).all(|i| !api.exists(NS, &format!("done-{i}")))
    })
    .await;
    // Pods that terminate later are seen through the watch.
    api.create(NS, driver_pod("later", Some(0)));
    wait_for("the later pod is deleted", LONG, || {
        !api.exists(NS, "later")
    })
    .await;
    // The leader has taken every event the API server sent (5 listed pods: its watch asks for
    // the pods past Running only; 5 DELETED, `later` ADDED and DELETED) and holds nothing: no
    // DELETE can follow.
    wait_status(&a, &scope(), "a took every event", LONG, |s| {
        n(s, "observed") >= 12 && idle(s)
    })
    .await;
    let (sa_, sb_) = (status(&a), status(&b));
    println!(
        "leader: {}; follower: {}; open watches {}, watch requests {}, lists {}",
        summary(&sa_),
        summary(&sb_),
        api.open_watches(),
        api.watch_requests(),
        api.list_requests()
    );
    assert!(watching(&a));
    assert_eq!(streams(&a), 1);
    assert!(!watching(&b));
    assert_eq!(streams(&b), 0);
    assert_eq!(sb_["deletes_sent"], 0);
    assert_eq!(api.open_watches(), 1);
    assert_eq!(api.watch_agents(), [podsweep::kube_client::USER_AGENT]);
    assert_eq!(api.list_requests(), 1, "one list: the leader's");
    assert!(
        api.exists(NS, "running"),
        "a running driver is never deleted"
    );
    for d in api.deletes() {
        assert_eq!(d.status, 200, "{d:?}");
    }
    assert_eq!(api.deletes().len(), 6, "one DELETE per terminated pod");
    a.close_async(Duration::from_secs(5)).await;
    b.close_async(Duration::from_secs(5)).await;
    wait_for("no watch after close", LONG, || api.open_watches() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leadership_change_moves_the_watch() {
    let api = PodsApi::start().await;
    let (a, sa) = engine(&api, "server-a", "PT2S");
    let (b, sb) = engine(&api, "server-b", "PT2S");
    lead(&sa).await;
    wait_for("a watches", LONG, || watching(&a)).await;
    api.create(NS, driver_pod("first", Some(3600)));
    wait_for("first deleted", LONG, || !api.exists(NS, "first")).await;
    // A pod a tracks, not due yet, when leadership moves.
    api.create(NS, driver_pod("moving", Some(0)));
    wait_for("a tracks it", LONG, || status(&a)["tracked"] == 1).await;
    signal(&sa).await.follow("lost the latch");
    wait_for("a stops watching", LONG, || !watching(&a)).await;
    assert_eq!(status(&a)["tracked"], 0, "a follower keeps no record");
    lead(&sb).await;
    wait_for("b watches", LONG, || watching(&b)).await;
    wait_for("moving deleted by b", LONG, || !api.exists(NS, "moving")).await;
    api.create(NS, driver_pod("after", Some(3600)));
    wait_for("after deleted", LONG, || !api.exists(NS, "after")).await;
    wait_for("one open watch", LONG, || api.open_watches() == 1).await;
    let (sa_, sb_) = (status(&a), status(&b));
    println!(
        "a: {}; b: {}; DELETEs {:?}",
        summary(&sa_),
        summary(&sb_),
        deletes(&api)
    );
    assert_eq!(sa_["deletes_sent"], 1);
    assert_eq!(sb_["deletes_sent"], 2);
    assert_eq!((streams(&a), streams(&b)), (1, 1));
    for name in ["first", "moving", "after"] {
        assert_eq!(api.deletes_of(name), 1, "{name}");
    }
    a.close_async(Duration::from_secs(5)).await;
    b.close_async(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_and_dropped_streams_relist_without_a_double_delete() {
    let api = PodsApi::start().await;
    let (a, _sa) = tracking(&api, "PT3S", &["kept", "vanishing"]).await;
    // The API server goes away (streams cut, 503s); meanwhile a pod is deleted by someone else,
    // and the history is compacted past what the watch saw.
    api.set_down(true);
    wait_for("a's watch saw the outage", LONG, || !watching(&a)).await;
    assert!(api.remove(NS, "vanishing"));
    api.create(
        NS,
        serde_json::json!({"metadata": {"name": "not-a-driver"}}),
    );
    api.compact();
    api.set_down(false);
    wait_for("relisted", LONG, || streams(&a) >= 2).await;
    wait_for("kept deleted at its deadline", LONG, || {
        !api.exists(NS, "kept")
    })
    .await;
    // An expiry alone: the history moves past the watch's resourceVersion (a pod it does not
    // select), and its stream ends: 410 on resume, then a relist.
    let before_expiry = streams(&a);
    api.create(
        NS,
        serde_json::json!({"metadata": {"name": "not-a-driver-2"}}),
    );
    api.compact();
    api.drop_watches();
    wait_for("relisted after 410", LONG, || {
        streams(&a) == before_expiry + 1
    })
    .await;
    // A stream dropped without compaction resumes from its resourceVersion: no relist.
    let before = streams(&a);
    api.drop_watches();
    api.create(NS, driver_pod("after-drop", Some(3600)));
    wait_for("after-drop deleted", LONG, || !api.exists(NS, "after-drop")).await;
    // a has taken every event its watch was sent (kept and vanishing ADDED, kept listed after
    // the outage and DELETED, after-drop ADDED and DELETED; the list after the expiry is
    // empty) and holds nothing: no DELETE and no relist can follow without a new event.
    let st = wait_status(&a, &scope(), "a took every event", LONG, |s| {
        n(s, "observed") >= 6 && idle(s)
    })
    .await;
    println!(
        "streams {} (after the outage {before_expiry}, after the expiry {before}), errors {}, \
         observed {}, deletes {:?}",
        st["watch_streams"],
        st["watch_errors"],
        st["observed"],
        deletes(&api)
    );
    assert_eq!(api.deletes_of("kept"), 1);
    assert_eq!(
        api.deletes_of("vanishing"),
        0,
        "gone while unwatched: no DELETE"
    );
    assert_eq!(api.deletes_of("after-drop"), 1);
    assert_eq!(api.deletes().len(), 2);
    assert!(st["watch_errors"].as_u64().unwrap() >= 2);
    assert_eq!(
        streams(&a),
        before,
        "a dropped stream resumes without a relist"
    );
    a.close_async(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_while_nobody_watched_is_not_deleted_again() {
    let api = PodsApi::start().await;
    let (a, sa) = tracking(&api, "PT2S", &["p", "q"]).await;
    signal(&sa).await.follow("lost the latch");
    wait_for("a stops watching", LONG, || !watching(&a)).await;
    // Another leader deletes p while a does not watch; q stays. Both deadlines (PT2S from their
    // creation) pass meanwhile: a record kept over the gap would be due when a leads again.
    assert!(api.remove(NS, "p"));
    sleep(Duration::from_secs(3)).await;
    signal(&sa)
        .await
        .lead_until(Instant::now() + Duration::from_secs(3600), "back");
    wait_for("q deleted from the fresh list", LONG, || {
        !api.exists(NS, "q")
    })
    .await;
    // The new term's list is taken and a holds nothing: a record of p, had it outlived the
    // gap, would be due, in flight or settled (with its DELETE) by now.
    wait_status(&a, &scope(), "a settled the new term's list", LONG, |s| {
        s["watching"] == true && idle(s)
    })
    .await;
    println!("DELETEs {:?}, streams {}", deletes(&api), streams(&a));
    assert_eq!(api.deletes_of("p"), 0);
    assert_eq!(api.deletes_of("q"), 1);
    assert_eq!(streams(&a), 2, "one list per term");
    a.close_async(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_come_from_the_init_list_and_the_allow_lists_and_observe_is_refused() {
    let api = PodsApi::start().await;
    let raw = conf(
        &api,
        "PT1M",
        &[
            (keys::INIT_LIST, ":spark, :other, ctx:, :blocked"),
            (keys::NAMESPACE_ALLOW_LIST, "spark,other"),
        ],
    );
    let backend = ManualBackend::default();
    let signals = backend.signals.clone();
    let e = engine_with(raw, "server-a", Arc::new(backend));
    // `ctx:` has no keys of its own: the same API server, and the default namespace, `spark`. It
    // names the pods `:spark` names, so one election and one watch serve both (issue 22).
    wait_for("two campaigns", LONG, || signals.lock().unwrap().len() == 2).await;
    // The scopes (and so the elections) of a watch-mode engine are all started when it is
    // built: the status lists every one (below), so a third campaign would show as a third
    // scope. `:blocked` was refused then too.
    assert!(
        e.refused_configured()
            .iter()
            .any(|s| s["scope"] == "<default context>:blocked"),
        "{:?}",
        e.refused_configured()
    );
    assert_eq!(signals.lock().unwrap().len(), 2);
    let all: serde_json::Value = serde_json::from_str(&e.status_all_json()).unwrap();
    let scopes: Vec<String> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["scope"].as_str().unwrap().to_owned())
        .collect();
    println!("scopes {scopes:?}");
    assert_eq!(
        scopes,
        ["<default context>:other", "<default context>:spark"]
    );
    let obs = common::fixture::observation("u", EventKind::Update, AppState::Finished);
    let err = e.observe(scope(), obs).unwrap_err();
    assert!(matches!(err, EngineError::WatchMode), "{err}");
    assert!(err.to_string().contains(keys::WATCH_ENABLED), "{err}");
    e.close_async(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_listed_again_while_its_delete_is_in_flight_is_not_deleted_twice() {
    let api = PodsApi::start().await;
    let (a, sa) = engine(&api, "server-a", "PT2S");
    api.set_delete_delay(Duration::from_secs(2));
    lead(&sa).await;
    wait_for("a watches", LONG, || watching(&a)).await;
    api.create(NS, driver_pod("slow", Some(3600)));
    wait_for("its DELETE is in flight", LONG, || {
        status(&a)["inflight"] == 1
    })
    .await;
    // The watch expires meanwhile: the record is dropped, and the relist arms it again at once
    // (overdue) while the first DELETE is still waiting for its answer.
    let before = streams(&a);
    api.create(
        NS,
        serde_json::json!({"metadata": {"name": "not-a-driver"}}),
    );
    api.compact();
    api.drop_watches();
    wait_for("relisted", LONG, || streams(&a) == before + 1).await;
    wait_for("deleted", LONG, || !api.exists(NS, "slow")).await;
    // The record the relist armed again is settled (by the first DELETE's answer, or by a
    // second DELETE): nothing tracked, nothing in flight.
    let st = wait_status(&a, &scope(), "the relisted record settled", LONG, idle).await;
    println!(
        "DELETEs {:?}, tracked {}, inflight {}",
        deletes(&api),
        st["tracked"],
        st["inflight"]
    );
    assert_eq!(deletes(&api), [("slow".to_owned(), 200)]);
    assert_eq!(st["tracked"], 0, "settled by the first DELETE");
    a.close_async(Duration::from_secs(5)).await;
}

/// Issue 22, item 2: a panic in a scope's watch task does not end its watch for good while the
/// scope reads LEADING and healthy: the scope reports it (unhealthy, with the reason), drops
/// what the watch told it, and the task runs again after a backoff and watches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_watch_task_is_reported_and_restarted() {
    let api = PodsApi::start().await;
    api.create(NS, driver_pod("overdue", Some(3600)));
    let raw = conf(&api, "PT2S", &[]);
    let real = podsweep::watch::kube_clients(raw.clone());
    let builds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let b = builds.clone();
    let watch_source: podsweep::watch::ClientSource = Arc::new(move |scope| {
        if b.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            panic!("injected failure of the watch task");
        }
        real(scope)
    });
    let backend = ManualBackend::default();
    let signals = backend.signals.clone();
    let a = Engine::with_watch_clients(
        Settings::from_map(raw.clone()).unwrap(),
        "server-a",
        Arc::new(backend),
        kube_source(raw),
        watch_source,
        Clock::System,
        tokio::runtime::Handle::current(),
    )
    .unwrap();
    lead(&signals).await;
    wait_for("the failure is reported", LONG, || {
        let s = status(&a);
        s["healthy"] == false
            && s["health_reason"]
                .as_str()
                .is_some_and(|r| r.contains("pod watch task failed"))
    })
    .await;
    assert_eq!(status(&a)["leadership"], "LEADING");
    wait_for("the restarted watch deletes the overdue pod", LONG, || {
        !api.exists(NS, "overdue")
    })
    .await;
    assert!(watching(&a));
    assert_eq!(status(&a)["restarts"], 1);
    a.close_async(Duration::from_secs(5)).await;
}

/// Issue 22, item 6: a watch that fails right after every list (the lists work) is a failing
/// watch: its failing time is not reset by each list, and after `health.alertAfter` the
/// scope (and so the daemon's /healthz) reports it. Lists after failures are paced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_that_fails_after_every_list_is_reported() {
    let api = PodsApi::start().await;
    api.set_watch_fail(true);
    let backend = ManualBackend::default();
    let signals = backend.signals.clone();
    let a = engine_with(
        conf(&api, "PT2S", &[(keys::HEALTH_ALERT_AFTER, "PT3S")]),
        "server-a",
        Arc::new(backend),
    );
    lead(&signals).await;
    wait_for("the watch failed a few times", LONG, || {
        status(&a)["watch_errors"].as_u64().unwrap_or(0) >= 3
    })
    .await;
    let t0 = Instant::now();
    wait_for("the failing watch is reported", LONG, || {
        status(&a)["healthy"] == false
    })
    .await;
    let s = status(&a);
    println!(
        "reported {:?} after the third error: lists {}, watch requests {}, {}",
        t0.elapsed(),
        api.list_requests(),
        api.watch_requests(),
        s["health_reason"]
    );
    assert!(
        s["health_reason"]
            .as_str()
            .is_some_and(|r| r.contains("pod watch has failed")),
        "{s}"
    );
    assert!(s["watch_failing_ms"].as_u64().unwrap_or(0) >= 3000, "{s}");
    let reasons = podsweep::daemon::exposition::health_reasons(&[s]);
    assert!(!reasons.is_empty(), "/healthz would answer 200");
    // Paced: the lists came at least 0.4 s, 0.8 s, 1.6 s ... apart, not one per failure at once.
    assert!(api.list_requests() <= 6, "{} lists", api.list_requests());
    // Working again: healthy again once the watch has shown it works.
    api.set_watch_fail(false);
    let t1 = Instant::now();
    for i in 0.. {
        // An event after the next list shows the watch works.
        api.create(NS, driver_pod(&format!("probe-{i}"), None));
        sleep(Duration::from_millis(500)).await;
        if status(&a)["healthy"] == true {
            break;
        }
        assert!(t1.elapsed() < Duration::from_secs(90), "{}", status(&a));
    }
    a.close_async(Duration::from_secs(5)).await;
}

/// Issue 22, item 6: a leadership that flaps (Paused, Leading again, over and over) does not
/// relist the namespace at once each time: the pacing of lists holds across leadership terms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_leadership_does_not_relist_at_once_each_time() {
    let api = PodsApi::start().await;
    api.create(NS, driver_pod("running", None));
    let (a, sa) = engine(&api, "server-a", "PT2S");
    lead(&sa).await;
    wait_for("a watches", LONG, || watching(&a) && streams(&a) == 1).await;
    let signal = signal(&sa).await;
    let before = api.list_requests();
    // The flaps' rhythm (real time): the lists counted are those made while flapping.
    for _ in 0..8 {
        signal.pause("flap");
        sleep(Duration::from_millis(60)).await;
        signal.lead_until(Instant::now() + Duration::from_secs(3600), "flap");
        sleep(Duration::from_millis(60)).await;
    }
    let flapped = api.list_requests() - before;
    println!("8 flaps in about 1 s: {flapped} lists");
    assert!(flapped <= 3, "{flapped} lists for 8 flaps");
    // Issue 25, item 5: while the paced first list of the term waits, the scope reads LEADING
    // and paused `list_pacing`, with the time of the list (before, it read leading, healthy and
    // not paused, for up to 5 minutes).
    // One more short term ends at once: whether the last term listed (on a loaded machine the
    // flaps may outlast the pacing wait) or still waited, the next list is at least 0.4 s away,
    // so the new term must show the pause once its watch task runs.
    signal.pause("flap");
    signal.lead_until(Instant::now() + Duration::from_secs(3600), "flap");
    let t_paced = Instant::now();
    let pacing_of = |st: &serde_json::Value| {
        st["pauses"]
            .as_array()
            .and_then(|p| p.iter().find(|p| p["reason"] == "list_pacing").cloned())
    };
    let mut st = status(&a);
    while pacing_of(&st).is_none() && t_paced.elapsed() < Duration::from_secs(5) {
        sleep(Duration::from_millis(10)).await;
        st = status(&a);
    }
    assert_eq!(st["leadership"], "LEADING", "{st}");
    let pacing = pacing_of(&st)
        .unwrap_or_else(|| panic!("leading after 9 short terms, and no list_pacing pause: {st}"));
    assert!(pacing["until_ms"].as_u64().is_some(), "{pacing}");
    println!("paced: {pacing}");
    // It still watches once the flapping stops.
    wait_for("watching again", LONG, || {
        watching(&a) && api.open_watches() == 1
    })
    .await;
    api.create(NS, driver_pod("after-flaps", Some(3600)));
    wait_for("the pod is deleted", LONG, || {
        !api.exists(NS, "after-flaps")
    })
    .await;
    a.close_async(Duration::from_secs(5)).await;
}
