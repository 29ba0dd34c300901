//! The self-watch leader's watch on a real kube-apiserver (`scripts/kube`): it carries only the
//! driver pods past Running (a field selector on `status.phase`), and the running pods' fate
//! stays right: a pod that terminates later arrives (as ADDED) and keeps the clock a watch that
//! saw it running would have kept; a canceled batch's pod, deleted while it runs, costs no
//! DELETE; a pod that leaves the selection (phase `Unknown`, then running again) is not taken
//! for deleted. Its first state comes as a streaming list where the API server offers one
//! (1.34's default), and as a list where it does not (`--feature-gates WatchList=false`).
//!
//! Each test runs an engine as the drop-in runs it (self-watch mode, alone: it leads at once)
//! under a ServiceAccount of its own, so the audit log tells its requests apart.

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::driver_pods;
use common::real_kube::{eventually, RealKube};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use podsweep::config::{keys, Settings};
use podsweep::engine::Engine;
use podsweep::scope::Scope;
use serde_json::Value;

const LONG: Duration = Duration::from_secs(20);

fn engine(k: &RealKube, token: &str, ns: &str, retain: &str, id: &str) -> Engine {
    let conf: HashMap<String, String> = [
        (keys::WATCH_ENABLED, "true"),
        (keys::HA_SINGLE_SERVER, "true"),
        (keys::CLEANUP_KIND, "NONE"),
        (keys::WATCH_KIND, "ALL"),
        (keys::RETAIN_PERIOD, retain),
        (keys::KUBE_NAMESPACE, ns),
        (keys::STEP_DOWN_AFTER, "P365D"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .chain(k.client_conf(token))
    .collect();
    Engine::new(
        Settings::from_map(conf).expect("settings"),
        id,
        tokio::runtime::Handle::current(),
    )
    .expect("engine")
}

fn status(e: &Engine, ns: &str) -> Value {
    serde_json::from_str(&e.status_json(&Scope::new(None, Some(ns)))).expect("status JSON")
}

fn n(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// A namespace, its pods API (admin), a leader account's token and an engine that leads it and
/// has listed.
async fn leading(k: &RealKube, ns: &str, retain: &str) -> (Api<Pod>, String, Engine) {
    k.namespace(ns).await;
    let account = format!("{ns}-leader");
    let token = k.server_token(&account).await;
    let api: Api<Pod> = Api::namespaced(k.admin().await, ns);
    let e = engine(k, &token, ns, retain, &account);
    assert!(
        eventually(LONG, || status(&e, ns)["watching"] == true).await,
        "the leader lists: {}",
        status(&e, ns)
    );
    (api, account, e)
}

/// The pods the leader's account DELETEd in `ns`, with the answers' codes.
fn leader_deletes(k: &RealKube, ns: &str, account: &str) -> Vec<(String, u16)> {
    let user = RealKube::user_of(account);
    k.deletes_in(ns)
        .into_iter()
        .filter(|d| d.user == user && !d.dry_run)
        .map(|d| (d.name, d.code))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_pods_cost_the_leader_no_event() {
    let k = RealKube::shared();
    let ns = "sel-running";
    k.namespace(ns).await;
    let api: Api<Pod> = Api::namespaced(k.admin().await, ns);
    for i in 0..20 {
        let (name, tag) = driver_pods::names(i, 1);
        driver_pods::create_running(&api, &name, &tag, Duration::from_secs(60))
            .await
            .expect("running pod");
    }
    for i in 0..2 {
        let (name, tag) = driver_pods::names(i, 2);
        driver_pods::create_terminated(&api, &name, &tag, "Succeeded", Duration::from_secs(60))
            .await
            .expect("terminated pod");
    }
    let (_, _, e) = leading(k, ns, "P1D").await;
    let listed = n(&status(&e, ns), "watch_events");
    // Status updates of running pods (a kubelet's), then one pod that terminates: once the
    // leader tracks it, it has taken every event sent before it.
    for i in 0..5 {
        let (name, _) = driver_pods::names(i, 1);
        driver_pods::set_status(&api, &name, &driver_pods::running(SystemTime::now()))
            .await
            .expect("status");
    }
    let (name, _) = driver_pods::names(0, 1);
    let now = SystemTime::now();
    driver_pods::set_status(&api, &name, &driver_pods::terminated("Failed", now, now))
        .await
        .expect("status");
    assert!(eventually(LONG, || n(&status(&e, ns), "tracked") == 3).await);
    let st = status(&e, ns);
    println!(
        "listed {listed} objects of 22 driver pods (20 running); then {} events for 5 running \
         pods' updates and 1 termination; field selector {}",
        n(&st, "watch_events") - listed,
        st["watch_field_selector"]
    );
    assert_eq!(listed, 2, "the list carries the terminated pods only");
    assert_eq!(n(&st, "watch_events"), 3, "one event: the termination");
    assert_eq!(n(&st, "running"), 0, "no running pod is remembered");
    e.close_async(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_terminates_later_arrives_as_added_and_keeps_the_clock() {
    let k = RealKube::shared();
    let ns = "sel-later";
    let (api, account, e) = leading(k, ns, "PT20S").await;
    // The API server's view through the same selectors, as a second client.
    let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let wp = WatchParams::default()
        .labels("kyuubi-unique-tag")
        .fields(podsweep::watch::PHASE_SELECTOR);
    // From now (a watch from resourceVersion 0 is a streaming list on 1.34, which the API
    // server cannot serve on Debian's etcd 3.4).
    let now = api
        .list(&ListParams::default().limit(1))
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("resourceVersion");
    let mut events = api.watch(&wp, &now).await.expect("watch").boxed();
    let sink = seen.clone();
    let watcher = tokio::spawn(async move {
        while let Some(ev) = events.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    sink.lock().unwrap().push(("ERROR".into(), e.to_string()));
                    break;
                }
            };
            let (kind, pod) = match ev {
                WatchEvent::Added(p) => ("ADDED", p),
                WatchEvent::Modified(p) => ("MODIFIED", p),
                WatchEvent::Deleted(p) => ("DELETED", p),
                WatchEvent::Error(e) => {
                    sink.lock().unwrap().push(("ERROR".into(), e.message));
                    continue;
                }
                _ => continue,
            };
            let name = pod.metadata.name.unwrap_or_default();
            sink.lock().unwrap().push((kind.to_owned(), name));
        }
    });
    let (name, tag) = driver_pods::names(7, 3);
    driver_pods::create_running(&api, &name, &tag, Duration::from_secs(60))
        .await
        .expect("running pod");
    // It ends, as told by a node whose clock is an hour behind.
    let finished = SystemTime::now() - Duration::from_secs(3600);
    let status_written = SystemTime::now();
    driver_pods::set_status(
        &api,
        &name,
        &driver_pods::terminated("Succeeded", finished, finished),
    )
    .await
    .expect("status");
    assert!(
        eventually(Duration::from_secs(40), || leader_deletes(k, ns, &account)
            .len()
            == 1)
        .await,
        "the leader deletes the pod: {}",
        status(&e, ns)
    );
    let at = k
        .deletes_in(ns)
        .into_iter()
        .find(|d| d.user == RealKube::user_of(&account))
        .expect("the DELETE")
        .at;
    let after = at.duration_since(status_written).unwrap_or_default();
    let first = seen
        .lock()
        .unwrap()
        .iter()
        .find(|(_, n)| *n == name)
        .cloned();
    watcher.abort();
    let errors: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(k, _)| k == "ERROR")
        .cloned()
        .collect();
    assert!(errors.is_empty(), "the test's own watch: {errors:?}");
    println!(
        "first event of the pod through the selector: {first:?}; its DELETE {:.1} s after it \
         terminated (retain 20 s, its finishedAt an hour earlier)",
        after.as_secs_f64()
    );
    assert_eq!(first.map(|f| f.0).as_deref(), Some("ADDED"));
    assert_eq!(leader_deletes(k, ns, &account), [(name, 200)]);
    // Never earlier than its first sighting less 10 s plus the retain period.
    assert!(after >= Duration::from_secs(9), "{after:?}");
    e.close_async(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_batch_pod_deleted_while_running_costs_no_delete() {
    let k = RealKube::shared();
    let ns = "sel-canceled";
    let (api, account, e) = leading(k, ns, "PT2S").await;
    // Bound to a node: Kyuubi's DELETE is graceful; the kubelet kills the driver (Failed), then
    // removes the pod.
    let (bound, tag) = driver_pods::names(1, 4);
    let mut pod = driver_pods::driver(&bound, &tag);
    pod["spec"]["nodeName"] = "node-1".into();
    let pod: Pod = serde_json::from_value(pod).expect("pod");
    api.create(&PostParams::default(), &pod)
        .await
        .expect("create");
    driver_pods::set_status(&api, &bound, &driver_pods::running(SystemTime::now()))
        .await
        .expect("status");
    api.delete(&bound, &DeleteParams::default())
        .await
        .expect("Kyuubi's DELETE");
    let now = SystemTime::now();
    driver_pods::set_status(&api, &bound, &driver_pods::terminated("Failed", now, now))
        .await
        .expect("status");
    api.delete(&bound, &DeleteParams::default().grace_period(0))
        .await
        .expect("the kubelet's DELETE");
    // Unscheduled: Kyuubi's DELETE removes it at once.
    let (unbound, tag) = driver_pods::names(2, 4);
    driver_pods::create_running(&api, &unbound, &tag, Duration::from_secs(5))
        .await
        .expect("running pod");
    api.delete(&unbound, &DeleteParams::default())
        .await
        .expect("Kyuubi's DELETE");
    // A pod that ends after both: once the leader has deleted it, it has seen all of theirs.
    let (after, tag) = driver_pods::names(3, 4);
    driver_pods::create_terminated(&api, &after, &tag, "Succeeded", Duration::ZERO)
        .await
        .expect("terminated pod");
    assert!(
        eventually(LONG, || !leader_deletes(k, ns, &account).is_empty()).await,
        "{}",
        status(&e, ns)
    );
    let st = status(&e, ns);
    println!(
        "leader's DELETEs {:?}; watch events {}, cancelled {}",
        leader_deletes(k, ns, &account),
        n(&st, "watch_events"),
        n(&st, "cancelled")
    );
    assert_eq!(leader_deletes(k, ns, &account), [(after, 200)]);
    assert!(k.pods(ns).await.is_empty());
    e.close_async(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_leaves_the_selection_is_not_taken_for_deleted() {
    let k = RealKube::shared();
    let ns = "sel-unknown";
    let (api, account, e) = leading(k, ns, "PT2S").await;
    let (name, tag) = driver_pods::names(1, 5);
    driver_pods::create_running(&api, &name, &tag, Duration::from_secs(60))
        .await
        .expect("running pod");
    // Its node stops answering (phase Unknown: in the selection), then answers again (Running:
    // out of it, a DELETED event of its last state inside).
    let unknown = serde_json::json!({"status": {"phase": "Unknown"}});
    driver_pods::set_status(&api, &name, &unknown)
        .await
        .expect("status");
    assert!(eventually(LONG, || n(&status(&e, ns), "watch_events") == 1).await);
    driver_pods::set_status(&api, &name, &driver_pods::running(SystemTime::now()))
        .await
        .expect("status");
    assert!(eventually(LONG, || n(&status(&e, ns), "watch_events") == 2).await);
    // Then it ends, and must be cleaned.
    let now = SystemTime::now();
    driver_pods::set_status(&api, &name, &driver_pods::terminated("Succeeded", now, now))
        .await
        .expect("status");
    let deleted = eventually(LONG, || !leader_deletes(k, ns, &account).is_empty()).await;
    let st = status(&e, ns);
    println!(
        "leader's DELETEs {:?}; watch events {}, tracked {}, cancelled {}, disarmed {}",
        leader_deletes(k, ns, &account),
        n(&st, "watch_events"),
        n(&st, "tracked"),
        n(&st, "cancelled"),
        n(&st, "disarmed")
    );
    assert!(deleted, "the pod is deleted once it ends");
    assert_eq!(leader_deletes(k, ns, &account), [(name, 200)]);
    e.close_async(Duration::from_secs(5)).await;
}

/// The leader account's requests on pods in `ns`, from the audit log, in order: (verb, request
/// URI, code). A watch still open has only its `ResponseStarted` entry.
fn leader_requests(k: &RealKube, ns: &str, account: &str) -> Vec<(String, String, u16)> {
    let user = RealKube::user_of(account);
    let mut seen = std::collections::HashSet::new();
    std::fs::read_to_string(&k.audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["objectRef"]["namespace"] == ns && v["user"]["username"] == user.as_str())
        .filter(|v| v["stage"] == "ResponseComplete" || v["stage"] == "ResponseStarted")
        .filter(|v| seen.insert(v["auditID"].as_str().unwrap_or("").to_owned()))
        .map(|v| {
            (
                v["verb"].as_str().unwrap_or("").to_owned(),
                v["requestURI"].as_str().unwrap_or("").to_owned(),
                v["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
            )
        })
        .collect()
}

/// One terminated driver pod in `ns` of `k`, a leader that lists it and deletes it: its status
/// then and its requests on pods.
async fn first_state(k: &RealKube, ns: &str) -> (Value, Vec<(String, String, u16)>) {
    k.namespace(ns).await;
    let api: Api<Pod> = Api::namespaced(k.admin().await, ns);
    let (name, tag) = driver_pods::names(1, 6);
    driver_pods::create_terminated(&api, &name, &tag, "Succeeded", Duration::from_secs(60))
        .await
        .expect("terminated pod");
    let (_, account, e) = leading(k, ns, "PT1S").await;
    assert!(
        eventually(LONG, || leader_deletes(k, ns, &account)
            == [(name.clone(), 200)])
        .await,
        "the leader deletes the pod: {}",
        status(&e, ns)
    );
    let st = status(&e, ns);
    let requests = leader_requests(k, ns, &account);
    println!(
        "etcd {}: list mode {}; watch errors {}; healthy {}; requests {requests:?}",
        k.etcd_version(),
        st["watch_list_mode"],
        st["watch_errors"],
        st["healthy"]
    );
    e.close_async(Duration::from_secs(5)).await;
    assert_eq!(n(&st, "watch_errors"), 0, "no error: {st}");
    assert_eq!(st["healthy"], true, "{st}");
    assert!(
        requests[0].0 == "watch" && requests[0].1.contains("sendInitialEvents=true"),
        "a streaming list first: {requests:?}"
    );
    (st, requests)
}

/// The process's API server (1.34, WatchList on): a streaming list where its etcd lets it serve
/// one (3.6); on Debian's etcd 3.4 it answers the streaming list with an error event
/// (`RequestWatchProgress` is missing), and the leader lists instead, at once, without an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_state_streams_or_falls_back_to_a_list() {
    let k = RealKube::shared();
    let (st, requests) = first_state(k, "sel-stream").await;
    let lists = requests
        .iter()
        .filter(|(verb, _, _)| verb == "list")
        .count();
    match st["watch_list_mode"].as_str() {
        Some("streaming") => assert_eq!(lists, 0, "{requests:?}"),
        Some("list") => assert_eq!((requests[1].0.as_str(), lists), ("list", 1), "{requests:?}"),
        other => panic!("list mode {other:?}"),
    }
}

/// An API server with WatchList off refuses the streaming list (422): the leader lists instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_watchlist_the_watch_lists_and_cleans() {
    let k = RealKube::start(
        "podsweep-real-kube-no-watchlist-",
        &["--", "--feature-gates", "WatchList=false"],
    );
    let (st, requests) = first_state(&k, "sel-nostream").await;
    k.down();
    assert_eq!(st["watch_list_mode"], "list");
    assert_eq!(requests[0].2, 422, "{requests:?}");
    assert_eq!(requests[1].0, "list", "{requests:?}");
}

/// On etcd 3.6 (the matrix's build: `scripts/matrix --tools etcd-3.6`, or `PODSWEEP_ETCD36`) the
/// API server serves streaming lists, and the leader's first state comes as one: no list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs etcd 3.6: PODSWEEP_ETCD36=<etcd binary> cargo test --test watch_selector -- --ignored"]
async fn on_etcd_36_the_first_state_streams() {
    let etcd = std::env::var("PODSWEEP_ETCD36")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            let tools = std::env::var("PODSWEEP_TOOLS").unwrap_or_else(|_| {
                format!(
                    "{}/.cache/podsweep-tools",
                    std::env::var("HOME").unwrap_or_default()
                )
            });
            std::path::PathBuf::from(tools).join("etcd-3.6.16/etcd")
        });
    assert!(etcd.exists(), "no etcd 3.6 at {}", etcd.display());
    let k = RealKube::start_on_etcd("podsweep-real-kube-etcd36-", &[], &etcd);
    let (st, requests) = first_state(&k, "sel-etcd36").await;
    k.down();
    assert_eq!(st["watch_list_mode"], "streaming");
    assert!(
        requests.iter().all(|(verb, _, _)| verb != "list"),
        "no list: {requests:?}"
    );
}
