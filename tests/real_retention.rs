//! Retention on a real kube-apiserver (`scripts/kube`), every DELETE counted from its audit log:
//! failed vs finished retain periods, an annotation override and an opt-out, the Events read
//! back, the cap draining a namespace oldest first, dry run across every path (a fleet whose
//! informers see only their own pods: `tests/owner_scoped.rs`).
//!
//! Heavy (a kube-apiserver, thousands of pods): `cargo test --test real_retention -- --ignored
//! --test-threads 1`. Each test prints one JSON line (`{"bench": "real_retention", ...}`) with its
//! figures. `PODSWEEP_CAP_PODS` sets the cap test's namespace size (default 5,000).

mod common;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::real_kube::{eventually, RealKube};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::Api;
use kube::runtime::watcher;
use podsweep::config::{keys, Settings};
use podsweep::engine::Engine;
use podsweep::kyuubi_state::{self, StateConfig};
use podsweep::model::EventKind;
use podsweep::scope::Scope;
use serde_json::json;

fn conf(pairs: &[(&str, &str)], client: Vec<(String, String)>) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .chain(client)
        .collect()
}

/// A pod of the periods test: name, phase, annotations, the retain period expected (None: kept).
type PodCase<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)], Option<f64>);

fn engine(conf: HashMap<String, String>, id: &str) -> Engine {
    Engine::new(
        Settings::from_map(conf).expect("settings"),
        id,
        tokio::runtime::Handle::current(),
    )
    .expect("engine")
}

fn stamp() -> serde_json::Value {
    json!({
        "commit": podsweep::build_info::COMMIT,
        "date": jiff::Timestamp::from_second(
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs() as i64
        ).unwrap().to_string(),
        "api_server": format!("kube-apiserver {}", RealKube::shared().version),
        "loadavg_1m": std::fs::read_to_string("/proc/loadavg").ok()
            .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse::<f64>().ok())),
    })
}

fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// Seconds from `t0` to `at` (negative when before).
fn since(t0: SystemTime, at: SystemTime) -> f64 {
    match at.duration_since(t0) {
        Ok(d) => secs(d),
        Err(e) => -secs(e.duration()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real kube-apiserver: cargo test --test real_retention -- --ignored"]
async fn failed_and_finished_periods_annotations_and_events() {
    let k = RealKube::shared();
    let ns = "retention";
    k.namespace(ns).await;
    let token = k.server_token("ret-a").await;
    // Finished 1 s ago (whole seconds, as a kubelet writes them).
    let t0 = SystemTime::now() - Duration::from_secs(1);
    let t0 = SystemTime::UNIX_EPOCH
        + Duration::from_secs(t0.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs());
    let pods: &[PodCase] = &[
        ("fin", "Succeeded", &[], Some(4.0)),
        ("fail", "Failed", &[], Some(12.0)),
        (
            "anno",
            "Succeeded",
            &[("podsweep.org/retain-period", "PT8S")],
            Some(8.0),
        ),
        (
            "long",
            "Succeeded",
            &[("podsweep.org/retain-period", "PT1H")],
            Some(16.0),
        ),
        (
            "short",
            "Succeeded",
            &[("podsweep.org/retain-period", "1")],
            Some(4.0),
        ),
        (
            "garbled",
            "Succeeded",
            &[("podsweep.org/retain-period", "soon")],
            Some(4.0),
        ),
        ("keep", "Failed", &[("podsweep.org/keep", "true")], None),
    ];
    for (name, phase, ann, _) in pods {
        k.terminated_pod(ns, name, phase, t0, &[], ann).await;
    }
    let c = conf(
        &[
            (keys::WATCH_ENABLED, "true"),
            (keys::HA_SINGLE_SERVER, "true"),
            (keys::WATCH_KIND, "ALL"),
            (keys::KUBE_NAMESPACE, ns),
            (keys::RETAIN_PERIOD, "PT4S"),
            (keys::FAILED_RETAIN_PERIOD, "PT12S"),
            (keys::ANNOTATIONS_ENABLED, "true"),
            (keys::ANNOTATIONS_MAX_RETAIN, "PT16S"),
            (keys::EVENTS_ENABLED, "true"),
        ],
        k.client_conf(&token),
    );
    let e = engine(c, "ret-a");
    let want = pods.iter().filter(|p| p.3.is_some()).count();
    assert!(
        eventually(Duration::from_secs(40), || k.deletes_in(ns).len() >= want).await,
        "{:?}",
        k.deletes_in(ns)
    );
    // The kept pod outlives every period by far.
    tokio::time::sleep(
        (t0 + Duration::from_secs(30))
            .duration_since(SystemTime::now())
            .unwrap_or_default(),
    )
    .await;
    let deletes = k.deletes_in(ns);
    let mut rows = Vec::new();
    for (name, phase, ann, expect) in pods {
        let mine: Vec<_> = deletes.iter().filter(|d| d.name == *name).collect();
        let at = mine.first().map(|d| since(t0, d.at));
        rows.push(
            json!({"pod": name, "phase": phase, "annotations": format!("{ann:?}"),
            "deletes": mine.len(), "deleted_after_s": at, "retain_s": expect}),
        );
        match expect {
            Some(r) => {
                assert_eq!(mine.len(), 1, "{name}: {mine:?}");
                assert_eq!(mine[0].code, 200, "{name}");
                assert_eq!(mine[0].user, RealKube::user_of("ret-a"));
                let at = at.unwrap();
                assert!(
                    at >= r - 0.05 && at <= r + 5.0,
                    "{name}: {at} s, retain {r} s"
                );
            }
            None => assert!(mine.is_empty(), "{name} was deleted: {mine:?}"),
        }
    }
    assert_eq!(k.pods(ns).await, ["keep"]);
    // The Events, read back from the API server.
    let events: Api<K8sEvent> = Api::namespaced(k.admin().await, ns);
    let mut read = Vec::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            read = futures::executor::block_on(events.list(&Default::default()))
                .map(|l| l.items)
                .unwrap_or_default();
            read.len() >= want
        })
        .await
    );
    let deleted_events: BTreeSet<String> = read
        .iter()
        .filter(|ev| ev.reason.as_deref() == Some("Deleted"))
        .filter(|ev| ev.reporting_controller.as_deref() == Some("podsweep.org/cleanup"))
        .filter_map(|ev| ev.regarding.as_ref()?.name.clone())
        .collect();
    let expected: BTreeSet<String> = pods
        .iter()
        .filter(|p| p.3.is_some())
        .map(|p| p.0.to_owned())
        .collect();
    assert_eq!(deleted_events, expected);
    let sample = read
        .iter()
        .find(|ev| ev.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("fail"))
        .map(|ev| {
            json!({"type": ev.type_, "reason": ev.reason, "note": ev.note,
                "regarding": ev.regarding.as_ref().map(|r| (r.kind.clone(), r.name.clone(), r.uid.clone())),
                "reporting_controller": ev.reporting_controller, "reporting_instance": ev.reporting_instance})
        });
    let st: serde_json::Value =
        serde_json::from_str(&e.status_json(&Scope::new(None, Some(ns)))).unwrap();
    e.close_async(Duration::from_secs(5)).await;
    println!(
        "{}",
        json!({"bench": "real_retention", "case": "periods_annotations_events", "stamp": stamp(),
            "pods": rows, "events_read_back": deleted_events.len(), "event_sample": sample,
            "status": {"kept": st["kept"], "annotated": st["annotated"],
                "annotations_malformed": st["annotations_malformed"], "events_sent": st["events_sent"]}})
    );
}

/// Creates `n` terminated driver pods in `ns`, pod `i` finished `n - i` seconds before `now`
/// (so `name-0` is the oldest), with `parallel` requests at once.
async fn backlog(k: &'static RealKube, ns: &str, prefix: &str, n: usize, parallel: usize) {
    let now = SystemTime::now();
    futures::stream::iter(0..n)
        .for_each_concurrent(parallel, |i| {
            let ns = ns.to_owned();
            let name = format!("{prefix}-{i:05}");
            async move {
                let at = now - Duration::from_secs((n - i) as u64);
                k.terminated_pod(&ns, &name, "Succeeded", at, &[], &[])
                    .await;
            }
        })
        .await;
}

/// Deletes every pod of `ns` with `parallel` DELETEs at once (a plain client, no limiter);
/// returns the DELETEs per second it reached.
async fn raw_drain(k: &'static RealKube, ns: &str, parallel: usize) -> (usize, f64) {
    // Under a ServiceAccount, as podsweep: the admin's requests skip API Priority and Fairness.
    let token = k.server_token("raw-client").await;
    let api: Api<Pod> = Api::namespaced(k.client(&token).await, ns);
    let names = k.pods(ns).await;
    let start = Instant::now();
    futures::stream::iter(names.clone())
        .for_each_concurrent(parallel, |n| {
            let api = api.clone();
            async move {
                let _ = api.delete(&n, &Default::default()).await;
            }
        })
        .await;
    (
        names.len(),
        names.len() as f64 / start.elapsed().as_secs_f64(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real kube-apiserver: cargo test --test real_retention -- --ignored"]
async fn the_cap_drains_a_namespace_to_its_limit_oldest_first() {
    let k = RealKube::shared();
    let n: usize = std::env::var("PODSWEEP_CAP_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let cap = n / 5;
    let (ns, raw_ns) = ("cap", "cap-raw");
    k.namespace(ns).await;
    k.namespace(raw_ns).await;
    let token = k.server_token("cap-a").await;
    // The raw capacity first, on a namespace of the same pods.
    let made = Instant::now();
    backlog(k, raw_ns, "raw", n - cap, 16).await;
    let create_s = made.elapsed().as_secs_f64();
    let (raw_n, raw_rate) = raw_drain(k, raw_ns, 32).await;
    backlog(k, ns, "old", n, 16).await;
    let c = conf(
        &[
            (keys::WATCH_ENABLED, "true"),
            (keys::HA_SINGLE_SERVER, "true"),
            (keys::WATCH_KIND, "ALL"),
            (keys::KUBE_NAMESPACE, ns),
            (keys::RETAIN_PERIOD, "P1D"),
            (keys::MAX_TERMINATED_PODS, &cap.to_string()),
        ],
        k.client_conf(&token),
    );
    let started = Instant::now();
    let e = engine(c, "cap-a");
    let over = n - cap;
    assert!(
        eventually(Duration::from_secs(600), || {
            k.deletes_in(ns).iter().filter(|d| d.code == 200).count() >= over
        })
        .await,
        "{} of {over} deleted",
        k.deletes_in(ns).len()
    );
    let wall = started.elapsed();
    // Nothing more goes: the cap holds.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let deletes = k.deletes_in(ns);
    let st: serde_json::Value =
        serde_json::from_str(&e.status_json(&Scope::new(None, Some(ns)))).unwrap();
    e.close_async(Duration::from_secs(5)).await;
    assert_eq!(deletes.len(), over, "one DELETE per pod over the cap");
    assert!(deletes
        .iter()
        .all(|d| d.code == 200 && d.user == RealKube::user_of("cap-a")));
    let deleted: BTreeSet<String> = deletes.iter().map(|d| d.name.clone()).collect();
    let oldest: BTreeSet<String> = (0..over).map(|i| format!("old-{i:05}")).collect();
    assert_eq!(deleted, oldest, "the oldest went");
    let left = k.pods(ns).await.len();
    assert_eq!(left, cap);
    // How far the order strays from oldest first (DELETEs in flight overlap).
    let mut order = deletes.clone();
    order.sort_by_key(|d| d.at);
    let stray = order
        .iter()
        .enumerate()
        .map(|(rank, d)| {
            let idx: usize = d.name.trim_start_matches("old-").parse().unwrap();
            idx.abs_diff(rank)
        })
        .max()
        .unwrap_or(0);
    let first = order.first().map(|d| d.at).unwrap();
    let last = order.last().map(|d| d.at).unwrap();
    let span = last
        .duration_since(first)
        .unwrap_or_default()
        .as_secs_f64()
        .max(1e-3);
    let rate = over as f64 / span;
    println!(
        "{}",
        json!({"bench": "real_retention", "case": "cap_drain", "stamp": stamp(),
            "pods": n, "cap": cap, "deleted": deletes.len(), "left": left,
            "deleted_are_the_oldest": deleted == oldest, "max_rank_displacement": stray,
            "first_to_last_delete_s": secs(Duration::from_secs_f64(span)),
            "engine_start_to_last_delete_s": secs(wall),
            "deletes_per_s": (rate * 10.0).round() / 10.0,
            "raw_client": {"parallel": 32, "pods": raw_n, "deletes_per_s": (raw_rate * 10.0).round() / 10.0},
            "ratio_to_raw": (rate / raw_rate * 100.0).round() / 100.0,
            "backlog_create_s": (create_s * 10.0).round() / 10.0,
            "status": {"capped": st["capped"], "inflight_limit": st["inflight_limit"],
                "throttled": st["outcomes"]["throttled"]}})
    );
}

/// A server of a fleet fed by its own informer: a kube-rs watch of `ns` whose selector may be
/// narrowed (Kyuubi's owner-scoped watch: `kyuubi.apache.org/watch-scope in (<id>,global)`).
struct Member {
    engine: Arc<Engine>,
    informer: tokio::task::JoinHandle<()>,
}

impl Member {
    async fn start(
        k: &'static RealKube,
        ns: &str,
        id: &str,
        extra: &[(&str, &str)],
        narrow: bool,
    ) -> Member {
        let token = k.server_token(id).await;
        let mut pairs: Vec<(&str, &str)> =
            vec![(keys::CLEANUP_KIND, "ALL"), (keys::KUBE_NAMESPACE, ns)];
        pairs.extend_from_slice(extra);
        let engine = Arc::new(engine(conf(&pairs, k.client_conf(&token)), id));
        let client = k.client(&token).await;
        let api: Api<Pod> = Api::namespaced(client, ns);
        let selector = if narrow {
            format!("kyuubi-unique-tag,kyuubi.apache.org/watch-scope in ({id},global)")
        } else {
            "kyuubi-unique-tag".to_owned()
        };
        let scope = Scope::new(None, Some(ns));
        let feed = engine.clone();
        let informer = tokio::spawn(async move {
            let cfg = watcher::Config::default().labels(&selector);
            let mut s = std::pin::pin!(watcher::watcher(api, cfg));
            let state = StateConfig::default();
            while let Some(ev) = s.next().await {
                let (pod, kind) = match ev {
                    Ok(watcher::Event::InitApply(p)) => (p, EventKind::Add),
                    Ok(watcher::Event::Apply(p)) => (p, EventKind::Update),
                    Ok(watcher::Event::Delete(p)) => (p, EventKind::Delete),
                    _ => continue,
                };
                if let Some(obs) = kyuubi_state::observation(&pod, &state, kind) {
                    let _ = feed.observe(scope.clone(), obs);
                }
            }
        });
        Member { engine, informer }
    }

    fn leads(&self, ns: &str) -> bool {
        self.engine.leadership(&Scope::new(None, Some(ns)))
            == Some(podsweep::election::Leadership::Leading)
    }

    /// The server stops: its informer first, then its engine (which deletes nothing).
    async fn stop(self) {
        self.informer.abort();
        self.engine.close_async(Duration::from_secs(5)).await;
    }
}

async fn leader_of(members: &[Member], ns: &str) -> usize {
    for _ in 0..300 {
        if let Some(i) = members.iter().position(|m| m.leads(ns)) {
            return i;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no leader of {ns}");
}

/// One run of the dry-run scenario; returns (pods deleted or would-be deleted, audit DELETEs).
async fn dry_run_scenario(ns: &str, zk: &str, dry: bool) -> (BTreeSet<String>, serde_json::Value) {
    let k = RealKube::shared();
    k.namespace(ns).await;
    let dry_s = if dry { "true" } else { "false" };
    let extra = [
        (keys::HA_ADDRESSES, zk),
        (keys::RETAIN_PERIOD, "PT3S"),
        (keys::FAILED_RETAIN_PERIOD, "PT5S"),
        (keys::ANNOTATIONS_ENABLED, "true"),
        (keys::MAX_TERMINATED_PODS, "6"),
        (keys::DRY_RUN, dry_s),
    ];
    let mut members = Vec::new();
    for i in 0..3 {
        members.push(Member::start(k, ns, &format!("{ns}-s{i}"), &extra, false).await);
    }
    let now = SystemTime::now();
    // Over the cap at once: 4 old pods beyond the 6 that may wait.
    for i in 0..10 {
        k.terminated_pod(
            ns,
            &format!("old-{i}"),
            "Succeeded",
            now - Duration::from_secs(60 - i),
            &[],
            &[("podsweep.org/retain-period", "PT1H")],
        )
        .await;
    }
    k.terminated_pod(ns, "failed", "Failed", now, &[], &[])
        .await;
    k.terminated_pod(
        ns,
        "annotated",
        "Succeeded",
        now,
        &[],
        &[("podsweep.org/retain-period", "PT6S")],
    )
    .await;
    k.terminated_pod(
        ns,
        "kept",
        "Failed",
        now,
        &[],
        &[("podsweep.org/keep", "true")],
    )
    .await;
    // A canceled batch's pod, still running: Kyuubi asks every server to delete it now.
    k.running_pod(ns, "canceled", &[], &[]).await;
    let leader = leader_of(&members, ns).await;
    let api: Api<Pod> = Api::namespaced(k.admin().await, ns);
    let pod = api.get("canceled").await.expect("pod");
    let mut left_to_kyuubi = 0;
    for m in &members {
        if let Some(obs) =
            kyuubi_state::observation(&pod, &StateConfig::default(), EventKind::Update)
        {
            let taken = m
                .engine
                .due_now(Scope::new(None, Some(ns)), obs, "its batch is CANCELED")
                .expect("dueNow");
            if !taken {
                // What Kyuubi does with a pod podsweep leaves to it: its own delete, by name.
                left_to_kyuubi += 1;
                let _ = api.delete("canceled", &Default::default()).await;
            }
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Takeover: the leader stops.
    let stopped = members.remove(leader);
    stopped.stop().await;
    leader_of(&members, ns).await;
    tokio::time::sleep(Duration::from_secs(12)).await;
    for m in members {
        m.stop().await;
    }
    let deletes = k.deletes_in(ns);
    let done: BTreeSet<String> = deletes
        .iter()
        .filter(|d| d.code == 200)
        .map(|d| d.name.clone())
        .collect();
    let figures = json!({"dry_run": dry, "delete_requests": deletes.len(),
        "delete_requests_without_dry_run": deletes.iter().filter(|d| !d.dry_run).count(),
        "delete_requests_with_dry_run": deletes.iter().filter(|d| d.dry_run).count(),
        "distinct_pods": done.len(), "senders": deletes.iter().map(|d| d.user.clone()).collect::<BTreeSet<_>>().len(),
        "left_to_kyuubi": left_to_kyuubi, "pods_left": k.pods(ns).await.len()});
    (done, figures)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real kube-apiserver: cargo test --test real_retention -- --ignored"]
async fn dry_run_deletes_nothing_on_every_path_and_would_delete_what_a_run_deletes() {
    let zk = common::zk::ZkServer::start();
    let (normal, nf) = dry_run_scenario("dry-normal", &zk.addr(), false).await;
    let (would, df) = dry_run_scenario("dry-run", &zk.addr(), true).await;
    println!(
        "{}",
        json!({"bench": "real_retention", "case": "dry_run", "stamp": stamp(),
            "normal": nf, "dry": df, "same_pods": normal == would,
            "pods": normal.iter().collect::<Vec<_>>()})
    );
    // A dry run changes nothing of what Kyuubi does: podsweep leaves the canceled batch's pod to
    // Kyuubi's own delete (every server's, as without podsweep), and deletes nothing itself.
    assert_eq!(nf["left_to_kyuubi"], 0, "{nf}");
    assert_eq!(df["left_to_kyuubi"], 3, "{df}");
    let podsweep_real: usize = RealKube::shared()
        .deletes_in("dry-run")
        .iter()
        .filter(|d| !d.dry_run && d.name != "canceled")
        .count();
    assert_eq!(podsweep_real, 0, "{df}");
    assert_eq!(df["pods_left"], 13, "{df}");
    // What a run deletes, the dry run reports (the canceled batch's pod: Kyuubi's own delete).
    assert_eq!(normal, would);
    assert!(
        !normal.contains("kept") && normal.contains("canceled") && normal.len() == 10,
        "{normal:?}"
    );
}

/// Latencies of a reader under another identity: one GET of a pod after the other, until `stop`.
fn reader(
    k: &'static RealKube,
    token: String,
    ns: &'static str,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Vec<Duration>> {
    tokio::spawn(async move {
        let api: Api<Pod> = Api::namespaced(k.client(&token).await, ns);
        let mut out = Vec::new();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            let t = Instant::now();
            let _ = api.get("probe").await;
            out.push(t.elapsed());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        out
    })
}

fn p99_ms(mut xs: Vec<Duration>) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort();
    let i = ((xs.len() as f64 * 0.99).ceil() as usize).clamp(1, xs.len()) - 1;
    (xs[i].as_secs_f64() * 10000.0).round() / 10.0
}

/// One drain phase: what `drain` does to a backlog of `n` overdue pods in `ns`, measured from
/// the audit log, with the reader's p99 meanwhile.
async fn drain_phase(
    k: &'static RealKube,
    label: &str,
    ns: &'static str,
    n: usize,
    reader_token: &str,
    drain: impl std::future::Future<Output = serde_json::Value>,
) -> serde_json::Value {
    k.namespace(ns).await;
    backlog(k, ns, "p", n, 16).await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r = reader(k, reader_token.to_owned(), "reader", stop.clone());
    let extra = drain.await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let lat = r.await.unwrap_or_default();
    let deletes = k.deletes_in(ns);
    let ok: Vec<_> = deletes.iter().filter(|d| d.code == 200).collect();
    let first = ok.iter().map(|d| d.at).min();
    let last = ok.iter().map(|d| d.at).max();
    let span = match (first, last) {
        (Some(f), Some(l)) => l
            .duration_since(f)
            .unwrap_or_default()
            .as_secs_f64()
            .max(1e-3),
        _ => f64::NAN,
    };
    json!({"run": label, "pods": n, "deleted": ok.len(), "delete_requests": deletes.len(),
        "answered_429": deletes.iter().filter(|d| d.code == 429).count(),
        "other_errors": deletes.iter().filter(|d| d.code != 200 && d.code != 429).count(),
        "first_to_last_delete_s": (span * 100.0).round() / 100.0,
        "deletes_per_s": (ok.len() as f64 / span * 10.0).round() / 10.0,
        "reader_p99_ms": p99_ms(lat.clone()), "reader_requests": lat.len(), "details": extra})
}

/// podsweep drains `ns` (self-watch, one server) with `extra` keys; done when every pod is gone.
async fn podsweep_drain(
    k: &'static RealKube,
    ns: &str,
    n: usize,
    id: &str,
    extra: &[(&str, &str)],
) -> serde_json::Value {
    let token = k.server_token(id).await;
    let mut pairs = vec![
        (keys::WATCH_ENABLED, "true"),
        (keys::HA_SINGLE_SERVER, "true"),
        (keys::WATCH_KIND, "ALL"),
        (keys::KUBE_NAMESPACE, ns),
        (keys::RETAIN_PERIOD, "PT1S"),
    ];
    pairs.extend_from_slice(extra);
    let e = engine(conf(&pairs, k.client_conf(&token)), id);
    let done = eventually(Duration::from_secs(900), || {
        k.deletes_in(ns).iter().filter(|d| d.code == 200).count() >= n
    })
    .await;
    let st: serde_json::Value =
        serde_json::from_str(&e.status_json(&Scope::new(None, Some(ns)))).unwrap();
    e.close_async(Duration::from_secs(5)).await;
    json!({"drained": done, "inflight_limit_at_end": st["inflight_limit"],
        "throttled": st["outcomes"]["throttled"], "keys": format!("{extra:?}")})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real kube-apiserver: cargo test --test real_retention -- --ignored"]
async fn drain_side_by_side_raw_default_and_ceiling() {
    let k = RealKube::shared();
    let n: usize = std::env::var("PODSWEEP_DRAIN_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    k.namespace("reader").await;
    k.running_pod("reader", "probe", &[], &[]).await;
    let reader_token = k.server_token("reader").await;
    // The reader alone: its idle p99.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let r = reader(k, reader_token.clone(), "reader", stop.clone());
    tokio::time::sleep(Duration::from_secs(15)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let idle = r.await.unwrap_or_default();
    let idle_p99 = p99_ms(idle.clone());
    let raw_token = k.server_token("raw-client").await;
    let raw = drain_phase(
        k,
        "raw client, 32 concurrent DELETEs",
        "drain-raw",
        n,
        &reader_token,
        async {
            let api: Api<Pod> = Api::namespaced(k.client(&raw_token).await, "drain-raw");
            let names = k.pods("drain-raw").await;
            futures::stream::iter(names)
                .for_each_concurrent(32, |name| {
                    let api = api.clone();
                    async move {
                        let _ = api.delete(&name, &Default::default()).await;
                    }
                })
                .await;
            json!({"parallel": 32})
        },
    )
    .await;
    let default = drain_phase(
        k,
        "podsweep default (adaptive)",
        "drain-default",
        n,
        &reader_token,
        podsweep_drain(k, "drain-default", n, "drain-default", &[]),
    )
    .await;
    let ceiling = drain_phase(
        k,
        "podsweep with a ceiling (rateLimit.qps=100)",
        "drain-ceiling",
        n,
        &reader_token,
        podsweep_drain(
            k,
            "drain-ceiling",
            n,
            "drain-ceiling",
            &[(keys::RATE_QPS, "100")],
        ),
    )
    .await;
    // What sparing the reader costs: the adaptive limit held to two and to one DELETE in flight.
    let mut few = Vec::new();
    for (inflight, ns) in [("2", "drain-inflight-2"), ("1", "drain-inflight-1")] {
        let label = format!("podsweep, maxInFlight={inflight}");
        let extra = [(keys::MAX_IN_FLIGHT, inflight)];
        let drained = podsweep_drain(k, ns, n, ns, &extra);
        few.push(drain_phase(k, &label, ns, n, &reader_token, drained).await);
    }
    let rate = |v: &serde_json::Value| v["deletes_per_s"].as_f64().unwrap_or(f64::NAN);
    println!(
        "{}",
        json!({"bench": "real_retention", "case": "drain_side_by_side", "stamp": stamp(),
            "reader_idle_p99_ms": idle_p99, "reader_idle_requests": idle.len(),
            "runs": [raw, default, ceiling, few[0], few[1]],
            "default_vs_raw": (rate(&default) / rate(&raw) * 100.0).round() / 100.0,
            "default_reader_p99_vs_idle": (default["reader_p99_ms"].as_f64().unwrap_or(f64::NAN) / idle_p99 * 100.0).round() / 100.0})
    );
    assert_eq!(default["deleted"], n);
    assert_eq!(ceiling["deleted"], n);
    assert!(rate(&ceiling) <= 110.0, "the ceiling holds: {ceiling}");
    for run in &few {
        assert_eq!(run["deleted"], n, "{run}");
    }
}
