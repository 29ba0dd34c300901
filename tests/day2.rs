//! Issue 32: one DELETE per pod, and no canceled job left running, through an operator's day-2
//! actions, on a real kube-apiserver (`scripts/kube`) with real ZooKeeper; every DELETE counted
//! from the API server's audit log.
//!
//! * A canceled batch's pod that only a follower's Kyuubi asks to delete (under Kyuubi's default
//!   cleanup kind NONE; a follower restarted after the cancel) goes within seconds, once, sent
//!   by the leader.
//! * A dry run leaves Kyuubi's own delete of a canceled batch's pod alone, and reports each pod
//!   once across a failover.
//! * A fleet where one server's account may not read `kube-root-ca.crt`: that server holds
//!   (unhealthy, `cluster_identity`), the others elect one leader, one DELETE per pod.
//! * `kube-root-ca.crt` deleted and published again mid-run, a server started in between: one
//!   election throughout, one DELETE per pod.
//!
//! Each test prints one stamped JSON line (`{"test": "day2", ...}`) with its figures.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use common::real_kube::{eventually, line_stamp, RealKube};
use common::zk::ZkServer;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::Api;
use kube::runtime::watcher;
use podsweep::config::{keys, Settings};
use podsweep::engine::Engine;
use podsweep::kyuubi_state::{self, StateConfig};
use podsweep::model::EventKind;
use podsweep::scope::Scope;
use serde_json::{json, Value};

const WITHIN: Duration = Duration::from_secs(60);

/// A Kyuubi server of the fleet: an engine fed by its own informer (a kube-rs watch of the
/// namespace's driver pods), as the patched `KubernetesApplicationOperation` feeds it.
struct Server {
    id: String,
    engine: Arc<Engine>,
    informer: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(ns: &str, id: &str, token: String, extra: &[(&str, &str)]) -> Server {
        let k = RealKube::shared();
        let mut conf: HashMap<String, String> = k.client_conf(&token).into_iter().collect();
        conf.insert(keys::KUBE_NAMESPACE.into(), ns.into());
        for (key, v) in extra {
            conf.insert((*key).into(), (*v).into());
        }
        let settings = Settings::from_map(conf).expect("settings");
        let engine =
            Arc::new(Engine::new(settings, id, tokio::runtime::Handle::current()).expect("engine"));
        let api: Api<Pod> = Api::namespaced(k.client(&token).await, ns);
        let (feed, scope) = (engine.clone(), Scope::new(None, Some(ns)));
        let informer = tokio::spawn(async move {
            let cfg = watcher::Config::default().labels("kyuubi-unique-tag");
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
        Server {
            id: id.to_owned(),
            engine,
            informer,
        }
    }

    fn status(&self, ns: &str) -> Value {
        serde_json::from_str(&self.engine.status_json(&Scope::new(None, Some(ns)))).unwrap()
    }

    fn leads(&self, ns: &str) -> bool {
        self.status(ns)["leadership"] == "LEADING"
    }

    /// What Kyuubi's `checkPodAppCanceled` does on this server for pod `name`: asks podsweep to
    /// delete it now; returns whether podsweep took it (else Kyuubi deletes it itself).
    async fn kyuubi_asks(&self, ns: &str, name: &str) -> bool {
        let api: Api<Pod> = Api::namespaced(RealKube::shared().admin().await, ns);
        let pod = api.get(name).await.expect("pod");
        let obs = kyuubi_state::observation(&pod, &StateConfig::default(), EventKind::Update)
            .expect("a driver pod");
        self.engine
            .due_now(Scope::new(None, Some(ns)), obs, "its batch is CANCELED")
            .expect("dueNow")
    }

    async fn stop(self) {
        self.informer.abort();
        self.engine.close_async(Duration::from_secs(5)).await;
    }
}

async fn fleet(ns: &str, n: usize, extra: &[(&str, &str)]) -> Vec<Server> {
    let k = RealKube::shared();
    k.namespace(ns).await;
    let mut out = Vec::new();
    for i in 0..n {
        let id = format!("{ns}-{i}");
        let token = k.server_token(&id).await;
        out.push(Server::start(ns, &id, token, extra).await);
    }
    out
}

async fn leader(servers: &[Server], ns: &str) -> usize {
    for _ in 0..600 {
        let leading: Vec<usize> = (0..servers.len())
            .filter(|i| servers[*i].leads(ns))
            .collect();
        if leading.len() == 1 {
            return leading[0];
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no single leader of {ns}");
}

/// Every DELETE of pod `name` in `ns`, not dry-run ones.
fn deletes_of(ns: &str, name: &str) -> Vec<common::real_kube::AuditDelete> {
    RealKube::shared()
        .deletes_in(ns)
        .into_iter()
        .filter(|d| d.name == name && !d.dry_run)
        .collect()
}

/// Per pod, the DELETE requests (not dry-run) the audit log holds.
fn deletes_per_pod(ns: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for d in RealKube::shared().deletes_in(ns) {
        if !d.dry_run {
            *out.entry(d.name).or_insert(0) += 1;
        }
    }
    out
}

async fn gone(ns: &str, name: &str) -> bool {
    let api: Api<Pod> = Api::namespaced(RealKube::shared().admin().await, ns);
    matches!(api.get_opt(name).await, Ok(None))
}

async fn wait_gone(ns: &str, names: &[String]) {
    let start = Instant::now();
    loop {
        let mut left = Vec::new();
        for n in names {
            if !gone(ns, n).await {
                left.push(n.clone());
            }
        }
        if left.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < WITHIN,
            "{ns}: pods left after {WITHIN:?}: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Issue 32, item 1: under Kyuubi's default kind NONE, a canceled batch's pod that only a
/// follower's Kyuubi asks to delete (the leader saw the pod before the cancel; a follower
/// restarted after it and re-listed the pod) is deleted within seconds, once, by the leader.
/// Before: the follower took it (`dueNow` answered TAKEN, so Kyuubi sent nothing), kept it and
/// never told the leader: 0 DELETEs, the canceled job kept running.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_canceled_batch_asked_by_a_follower_alone_is_deleted_once_by_the_leader() {
    let zk = ZkServer::start();
    let ns = "d2-cancel";
    let k = RealKube::shared();
    let mut servers = fleet(ns, 3, &[(keys::HA_ADDRESSES, &zk.addr())]).await;
    // Server 0's own canceled batch starts its scope (kind NONE tracks only what Kyuubi asks):
    // it is the only candidate, leads, and deletes that pod.
    k.running_pod(ns, "first", &[], &[]).await;
    assert!(servers[0].kyuubi_asks(ns, "first").await);
    wait_gone(ns, &["first".to_owned()]).await;
    assert_eq!(leader(&servers, ns).await, 0);

    // A follower's Kyuubi alone asks.
    k.running_pod(ns, "only-follower", &[], &[]).await;
    let asked = SystemTime::now();
    assert!(servers[1].kyuubi_asks(ns, "only-follower").await);
    wait_gone(ns, &["only-follower".to_owned()]).await;
    let after_ask = deletes_of(ns, "only-follower");
    // A follower that restarted after the cancel re-lists the pod; its Kyuubi asks.
    k.running_pod(ns, "after-restart", &[], &[]).await;
    let restarted = servers.remove(2);
    restarted.stop().await;
    let token = k.server_token(&format!("{ns}-2")).await;
    servers.push(
        Server::start(
            ns,
            &format!("{ns}-2"),
            token,
            &[(keys::HA_ADDRESSES, &zk.addr())],
        )
        .await,
    );
    assert!(servers[2].kyuubi_asks(ns, "after-restart").await);
    wait_gone(ns, &["after-restart".to_owned()]).await;
    let after_restart = deletes_of(ns, "after-restart");
    // Nothing is left for anyone to send: every server's scope forgets the pods.
    assert!(
        eventually(WITHIN, || servers
            .iter()
            .all(|s| s.status(ns)["tracked"].as_u64().unwrap_or(0) == 0))
        .await,
        "{:?}",
        servers.iter().map(|s| s.status(ns)).collect::<Vec<_>>()
    );
    let leader_user = RealKube::user_of(&servers[0].id);
    let line = json!({"test": "day2", "case": "canceled_batch_follower_only", "stamp": line_stamp(),
        "deletes_only_follower": after_ask.len(), "deletes_after_restart": after_restart.len(),
        "seconds_from_ask_to_delete": after_ask.first().map(|d| d.at.duration_since(asked).unwrap_or_default().as_secs_f64()),
        "senders": after_ask.iter().chain(&after_restart).map(|d| d.user.clone()).collect::<Vec<_>>()});
    println!("{line}");
    for d in after_ask.iter().chain(&after_restart) {
        assert_eq!(
            (d.code, d.user.as_str()),
            (200, leader_user.as_str()),
            "{line}"
        );
    }
    assert_eq!((after_ask.len(), after_restart.len()), (1, 1), "{line}");
    for s in servers {
        s.stop().await;
    }
}

/// Issue 32, item 1: a dry run changes nothing of what Kyuubi does: `dueNow` leaves a canceled
/// batch's pod to Kyuubi's own delete. And a dry run reports each pod once: a successor does not
/// send a second dry-run DELETE for what the leader it replaced reported. Before: `dueNow`
/// answered TAKEN (Kyuubi sent nothing, the canceled job kept running), and a successor sent
/// every dry-run DELETE again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dry_run_leaves_kyuubis_own_delete_and_reports_each_pod_once() {
    let zk = ZkServer::start();
    let ns = "d2-dry";
    let k = RealKube::shared();
    let extra = [
        (keys::HA_ADDRESSES, zk.addr()),
        (keys::CLEANUP_KIND, "ALL".to_owned()),
        (keys::RETAIN_PERIOD, "PT2S".to_owned()),
        (keys::DRY_RUN, "true".to_owned()),
    ];
    let extra: Vec<(&str, &str)> = extra.iter().map(|(a, b)| (*a, b.as_str())).collect();
    let mut servers = fleet(ns, 3, &extra).await;
    k.running_pod(ns, "canceled", &[], &[]).await;
    for s in &servers {
        assert!(
            !s.kyuubi_asks(ns, "canceled").await,
            "a dry run leaves the canceled batch's pod to Kyuubi"
        );
    }
    let now = SystemTime::now();
    let names: Vec<String> = (0..10).map(|i| format!("done-{i}")).collect();
    for n in &names {
        k.terminated_pod(ns, n, "Succeeded", now, &[], &[]).await;
    }
    let dry = || {
        k.deletes_in(ns)
            .into_iter()
            .filter(|d| d.dry_run)
            .collect::<Vec<_>>()
    };
    assert!(
        eventually(WITHIN, || dry().len() >= 10).await,
        "the leader reports every pod: {:?}",
        dry()
    );
    let first = leader(&servers, ns).await;
    let reported_by_first = dry().len();
    let stopped = servers.remove(first);
    stopped.stop().await;
    let next = leader(&servers, ns).await;
    // The successor settles what was reported without sending: it tracks nothing once done.
    assert!(
        eventually(WITHIN, || servers[next].status(ns)["tracked"].as_u64()
            == Some(0))
        .await,
        "{}",
        servers[next].status(ns)
    );
    let line = json!({"test": "day2", "case": "dry_run_failover", "stamp": line_stamp(),
        "pods": 10, "dry_run_deletes_first_leader": reported_by_first,
        "dry_run_deletes_total": dry().len(), "real_deletes": deletes_per_pod(ns).values().sum::<usize>(),
        "canceled_left_to_kyuubi": true});
    println!("{line}");
    assert_eq!(dry().len(), 10, "{line}");
    assert_eq!(
        deletes_per_pod(ns).len(),
        0,
        "a dry run deletes nothing: {line}"
    );
    for s in servers {
        s.stop().await;
    }
}

/// Issue 32, item 2: the RBAC rule on `kube-root-ca.crt` reached some accounts only. The server
/// that may not read it holds the scope (no campaign, unhealthy with the cause); the others
/// elect one leader; one DELETE per pod. Before: that server elected under its URL, a second
/// leader beside the others, up to two DELETEs per pod, and the scope read healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_that_cannot_read_the_identity_holds_and_every_pod_goes_once() {
    let zk = ZkServer::start();
    let ns = "d2-rbac";
    let k = RealKube::shared();
    k.namespace(ns).await;
    let extra = [
        (keys::HA_ADDRESSES, zk.addr()),
        (keys::CLEANUP_KIND, "ALL".to_owned()),
        (keys::RETAIN_PERIOD, "PT1S".to_owned()),
    ];
    let extra: Vec<(&str, &str)> = extra.iter().map(|(a, b)| (*a, b.as_str())).collect();
    let mut servers = Vec::new();
    for i in 0..3 {
        let id = format!("{ns}-{i}");
        let token = if i == 2 {
            k.server_token_without_identity(&id).await
        } else {
            k.server_token(&id).await
        };
        servers.push(Server::start(ns, &id, token, &extra).await);
    }
    let now = SystemTime::now();
    let names: Vec<String> = (0..20).map(|i| format!("p-{i}")).collect();
    for n in &names {
        k.terminated_pod(ns, n, "Succeeded", now, &[], &[]).await;
    }
    wait_gone(ns, &names).await;
    let held = servers[2].status(ns);
    assert!(
        eventually(WITHIN, || {
            let st = servers[2].status(ns);
            st["pause_reason"] == "cluster_identity" && st["healthy"] == false
        })
        .await,
        "{held}"
    );
    let per_pod = deletes_per_pod(ns);
    let senders: std::collections::BTreeSet<String> =
        k.deletes_in(ns).into_iter().map(|d| d.user).collect();
    let line = json!({"test": "day2", "case": "mixed_rbac_fleet", "stamp": line_stamp(),
        "pods": names.len(), "delete_requests": per_pod.values().sum::<usize>(),
        "max_per_pod": per_pod.values().max(), "senders": senders,
        "held_server": servers[2].status(ns)["health_reason"]});
    println!("{line}");
    assert_eq!(per_pod.len(), names.len(), "{line}");
    assert!(per_pod.values().all(|n| *n == 1), "{line}");
    assert_eq!(senders.len(), 1, "{line}");
    assert_eq!(servers[2].status(ns)["leadership"], "FOLLOWING");
    for s in servers {
        s.stop().await;
    }
}

/// Issue 32, item 2: `kube-root-ca.crt` is deleted (a GitOps prune, `kubectl delete cm --all`)
/// and published again (a new UID, the same certificate) mid-run, and a server starts while it
/// is missing: it holds until the ConfigMap is back, then joins the one election; every pod goes
/// once. Before (the election keyed by the ConfigMap's UID): servers started before and after
/// elected apart, two leaders, two DELETEs per pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_root_ca_configmap_recreated_mid_run_keeps_one_election() {
    let zk = ZkServer::start();
    let ns = "d2-recreate";
    let k = RealKube::shared();
    let extra = [
        (keys::HA_ADDRESSES, zk.addr()),
        (keys::CLEANUP_KIND, "ALL".to_owned()),
        (keys::RETAIN_PERIOD, "PT1S".to_owned()),
    ];
    let extra: Vec<(&str, &str)> = extra.iter().map(|(a, b)| (*a, b.as_str())).collect();
    let mut servers = fleet(ns, 2, &extra).await;
    let now = SystemTime::now();
    let first: Vec<String> = (0..10).map(|i| format!("before-{i}")).collect();
    for n in &first {
        k.terminated_pod(ns, n, "Succeeded", now, &[], &[]).await;
    }
    wait_gone(ns, &first).await;
    let cms: Api<ConfigMap> = Api::namespaced(k.admin().await, ns);
    let old_uid = cms.get("kube-root-ca.crt").await.unwrap().metadata.uid;
    cms.delete("kube-root-ca.crt", &Default::default())
        .await
        .expect("delete the ConfigMap");
    // A server (re)started while it is missing: held, then in the one election.
    let id = format!("{ns}-late");
    let token = k.server_token(&id).await;
    servers.push(Server::start(ns, &id, token, &extra).await);
    k.running_pod(ns, "wakes-the-late-one", &[], &[]).await;
    assert!(
        eventually(WITHIN, || servers[2].status(ns)["pause_reason"]
            == "cluster_identity")
        .await,
        "{}",
        servers[2].status(ns)
    );
    k.publish_root_ca(ns).await;
    let new_uid = cms.get("kube-root-ca.crt").await.unwrap().metadata.uid;
    assert_ne!(old_uid, new_uid, "published again: a new UID");
    assert!(
        eventually(WITHIN, || servers[2].status(ns)["election_scope_read"]
            == true)
        .await,
        "{}",
        servers[2].status(ns)
    );
    let now = SystemTime::now();
    let second: Vec<String> = (0..10).map(|i| format!("after-{i}")).collect();
    for n in &second {
        k.terminated_pod(ns, n, "Succeeded", now, &[], &[]).await;
    }
    wait_gone(ns, &second).await;
    let keys: Vec<Value> = servers
        .iter()
        .map(|s| s.status(ns)["election_scope"].clone())
        .collect();
    let per_pod = deletes_per_pod(ns);
    let line = json!({"test": "day2", "case": "root_ca_recreated", "stamp": line_stamp(),
        "pods": first.len() + second.len(), "delete_requests": per_pod.values().sum::<usize>(),
        "max_per_pod": per_pod.values().max(), "election_keys": keys});
    println!("{line}");
    let expected = json!(format!("{}:{ns}", k.cluster_key()));
    assert!(keys.iter().all(|k| *k == expected), "{line}");
    assert_eq!(per_pod.len(), first.len() + second.len(), "{line}");
    assert!(per_pod.values().all(|n| *n == 1), "{line}");
    for s in servers {
        s.stop().await;
    }
}
