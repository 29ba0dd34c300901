//! Fleets with self-watching servers on one scope, elected through a real ZooKeeper or etcd,
//! against the loopback pods API (`common::pods_api`): JNI-mode servers (fed by an informer, as
//! the patched Kyuubi feeds them) and watch-mode servers form one fleet; exactly one DELETE per
//! pod, one pod watch per scope.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::etcd::EtcdServer;
use common::pods_api::{driver_pod, wait_for, PodsApi};
use common::status::{idle, wait_status};
use common::zk::ZkServer;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use podsweep::config::{keys, Settings, ETCD_CLIENT_CLASS};
use podsweep::election::Leadership;
use podsweep::engine::Engine;
use podsweep::kyuubi_state::{self, StateConfig};
use podsweep::model::EventKind;
use podsweep::scope::Scope;
use tokio::task::JoinHandle;

const NS: &str = "spark";
/// The informer's selector, told apart from podsweep's own (`kyuubi-unique-tag`).
const INFORMER_SELECTOR: &str = "kyuubi-unique-tag,spark-app-selector";
const LONG: Duration = Duration::from_secs(40);

fn scope() -> Scope {
    Scope::new(None, Some(NS))
}

fn engine(api: &PodsApi, ha: &[(&str, &str)], id: &str, watch: bool) -> Arc<Engine> {
    let mode: &[(&str, &str)] = if watch {
        &[
            (keys::WATCH_ENABLED, "true"),
            (keys::CLEANUP_KIND, "NONE"),
            (keys::WATCH_KIND, "ALL"),
        ]
    } else {
        &[(keys::CLEANUP_KIND, "ALL")]
    };
    let raw: HashMap<String, String> = [
        (keys::RETAIN_PERIOD, "PT3S"),
        ("kyuubi.kubernetes.master.address", api.url.as_str()),
        (keys::KUBE_NAMESPACE, NS),
        (keys::HA_NAMESPACE, "watch_fleet"),
    ]
    .iter()
    .chain(mode)
    .chain(ha)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let settings = Settings::from_map(raw).unwrap();
    Arc::new(Engine::new(settings, id, tokio::runtime::Handle::current()).unwrap())
}

/// What the patched Kyuubi does for a JNI-mode server: an informer feeding `observe`.
fn informer(api: &PodsApi, engine: Arc<Engine>) -> JoinHandle<()> {
    let url: http::Uri = api.url.parse().unwrap();
    tokio::spawn(async move {
        let client = kube::Client::try_from(kube::Config::new(url)).unwrap();
        let pods: kube::Api<Pod> = kube::Api::namespaced(client, NS);
        let cfg = watcher::Config::default().labels(INFORMER_SELECTOR);
        let mut events = std::pin::pin!(watcher::watcher(pods, cfg).default_backoff());
        while let Some(ev) = events.next().await {
            let (pod, kind) = match ev {
                Ok(Event::InitApply(p)) => (p, EventKind::Add),
                Ok(Event::Apply(p)) => (p, EventKind::Update),
                Ok(Event::Delete(p)) => (p, EventKind::Delete),
                _ => continue,
            };
            if let Some(obs) = kyuubi_state::observation(&pod, &StateConfig::default(), kind) {
                let _ = engine.observe(scope(), obs);
            }
        }
    })
}

fn status(e: &Engine) -> serde_json::Value {
    serde_json::from_str(&e.status_json(&scope())).unwrap()
}

fn leads(e: &Engine) -> bool {
    e.leadership(&scope()) == Some(Leadership::Leading)
}

fn create(api: &PodsApi, prefix: &str, n: usize, ended_secs_ago: u64) -> Vec<String> {
    (0..n)
        .map(|i| {
            let name = format!("{prefix}-{i}");
            api.create(NS, driver_pod(&name, Some(ended_secs_ago)));
            name
        })
        .collect()
}

async fn all_gone(api: &PodsApi, names: &[String]) {
    wait_for("pods deleted", LONG, || {
        names.iter().all(|n| !api.exists(NS, n))
    })
    .await;
}

fn check_once(api: &PodsApi, names: &[String]) {
    for n in names {
        assert_eq!(api.deletes_of(n), 1, "{n}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_fleet_of_jni_and_watch_servers_deletes_each_pod_once() {
    let zk = ZkServer::start();
    let api = PodsApi::start().await;
    let addr = zk.addr();
    let ha = [
        (keys::HA_ADDRESSES, addr.as_str()),
        (keys::ZK_SESSION_TIMEOUT, "2000"),
    ];
    api.create(NS, driver_pod("warm", None));
    // A JNI-mode server leads first.
    let a = engine(&api, &ha, "jni-a", false);
    let inf_a = informer(&api, a.clone());
    wait_for("a leads", LONG, || leads(&a)).await;
    // A watch-mode server joins the same election and follows: no watch.
    let b = engine(&api, &ha, "watch-b", true);
    wait_for("b follows", LONG, || {
        b.leadership(&scope()) == Some(Leadership::Following)
    })
    .await;
    let first = create(&api, "first", 10, 3600);
    all_gone(&api, &first).await;
    assert_eq!(status(&b)["watching"], false);
    assert_eq!(api.open_watches_for("kyuubi-unique-tag"), 0);
    // Pods a tracks, not due yet, when it closes: b lists them and keeps their clock.
    let pending = create(&api, "pending", 5, 0);
    wait_for("a tracks them", LONG, || status(&a)["tracked"] == 5).await;
    a.close_async(Duration::from_secs(5)).await;
    inf_a.abort();
    wait_for("b leads and watches", LONG, || {
        leads(&b) && status(&b)["watching"] == true
    })
    .await;
    all_gone(&api, &pending).await;
    let second = create(&api, "second", 10, 3600);
    all_gone(&api, &second).await;
    // A JNI-mode server joins behind the watch-mode leader, then takes over from it.
    let c = engine(&api, &ha, "jni-c", false);
    let inf_c = informer(&api, c.clone());
    wait_for("c follows", LONG, || {
        c.leadership(&scope()) == Some(Leadership::Following)
    })
    .await;
    assert_eq!(
        api.open_watches_for("kyuubi-unique-tag"),
        1,
        "b's watch only"
    );
    let sb = status(&b);
    b.close_async(Duration::from_secs(5)).await;
    wait_for("c leads", LONG, || leads(&c)).await;
    wait_for("b's watch is closed", LONG, || {
        api.open_watches_for("kyuubi-unique-tag") == 0
    })
    .await;
    let third = create(&api, "third", 5, 3600);
    all_gone(&api, &third).await;
    // c, the one server left, leads and holds nothing (every pod it was told of is settled): no
    // DELETE can follow.
    let sc = wait_status(&c, &scope(), "c settled its pods", LONG, |s| {
        s["leadership"] == "LEADING" && idle(s)
    })
    .await;
    println!(
        "DELETEs {} (all 200: {}); b: streams {}; c: watching {} streams {} deletes {}",
        api.deletes().len(),
        api.deletes().iter().all(|d| d.status == 200),
        sb["watch_streams"],
        sc["watching"],
        sc["watch_streams"],
        sc["deletes_sent"]
    );
    for names in [&first, &pending, &second, &third] {
        check_once(&api, names);
    }
    assert_eq!(api.deletes().len(), 30);
    assert!(api.exists(NS, "warm"));
    assert_eq!(sb["watch_streams"], 1, "one list in b's term");
    assert_eq!(sc["watch_streams"], 0, "a JNI-mode server never watches");
    c.close_async(Duration::from_secs(5)).await;
    inf_c.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_watch_servers_on_etcd_hold_one_watch_and_hand_it_over() {
    let etcd = EtcdServer::start();
    let api = PodsApi::start().await;
    let endpoint = etcd.endpoint();
    let ha = [
        (keys::HA_ADDRESSES, endpoint.as_str()),
        (keys::HA_CLIENT_CLASS, ETCD_CLIENT_CLASS),
        (keys::ETCD_ELECTION_LEASE, "PT2S"),
    ];
    let servers: Vec<Arc<Engine>> = ["s1", "s2", "s3"]
        .iter()
        .map(|id| engine(&api, &ha, id, true))
        .collect();
    let leader = |servers: &[Arc<Engine>]| servers.iter().position(|e| leads(e));
    wait_for("a leader watches", LONG, || {
        leader(&servers).is_some_and(|i| status(&servers[i])["watching"] == true)
    })
    .await;
    let first = create(&api, "first", 10, 3600);
    let pending = create(&api, "pending", 5, 0);
    all_gone(&api, &first).await;
    let watching: Vec<bool> = servers
        .iter()
        .map(|e| status(e)["watching"] == true)
        .collect();
    assert_eq!(watching.iter().filter(|w| **w).count(), 1, "{watching:?}");
    assert_eq!(api.open_watches_for("kyuubi-unique-tag"), 1);
    let i = leader(&servers).unwrap();
    // A closed engine reports nothing: its figures are read before.
    let first_term = status(&servers[i])["watch_streams"].as_u64().unwrap();
    servers[i].close_async(Duration::from_secs(5)).await;
    let rest: Vec<Arc<Engine>> = servers
        .iter()
        .enumerate()
        .filter(|(j, _)| *j != i)
        .map(|(_, e)| e.clone())
        .collect();
    wait_for("a successor watches", LONG, || {
        leader(&rest).is_some_and(|j| status(&rest[j])["watching"] == true)
    })
    .await;
    all_gone(&api, &pending).await;
    let second = create(&api, "second", 10, 3600);
    all_gone(&api, &second).await;
    // The successor holds nothing (every pod it listed or was sent is settled) and the other
    // server left follows without a watch: no DELETE and no list can follow.
    let j = leader(&rest).expect("a leader");
    wait_status(
        &rest[j],
        &scope(),
        "the successor settled its pods",
        LONG,
        |s| s["leadership"] == "LEADING" && idle(s),
    )
    .await;
    for e in rest.iter().filter(|e| !leads(e)) {
        let s = status(e);
        assert_eq!(s["leadership"], "FOLLOWING", "{s}");
        assert_eq!(s["watching"], false, "{s}");
    }
    let streams: Vec<u64> = servers
        .iter()
        .enumerate()
        .map(|(j, e)| match j == i {
            true => first_term,
            false => status(e)["watch_streams"].as_u64().unwrap(),
        })
        .collect();
    println!(
        "DELETEs {}, watch streams per server {streams:?}, open watches {}",
        api.deletes().len(),
        api.open_watches_for("kyuubi-unique-tag")
    );
    for names in [&first, &pending, &second] {
        check_once(&api, names);
    }
    assert_eq!(
        streams.iter().sum::<u64>(),
        2,
        "one list per leadership term"
    );
    assert_eq!(api.open_watches_for("kyuubi-unique-tag"), 1);
    for e in &rest {
        e.close_async(Duration::from_secs(5)).await;
    }
}
