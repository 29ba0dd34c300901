//! Issue 34: podsweep on a full control plane (`scripts/kube up --cluster`: kube-apiserver,
//! kube-controller-manager with the garbage collector, PodGC and the root-CA publisher,
//! kube-scheduler, and KWOK playing the kubelets of its nodes), with real ZooKeeper; every
//! request counted from the API server's audit log, each controller by its own user.
//!
//! * Spark applications (driver, executors, ConfigMap, Service, as Spark makes them) run by KWOK
//!   on scheduled nodes, three servers, the leader closed once mid-run: one DELETE per driver
//!   pod, by podsweep; KWOK finishes each graceful delete; the garbage collector then removes
//!   every executor, ConfigMap and Service the driver owned (0 orphans, and how long it took).
//! * PodGC (threshold [`CLUSTER_POD_GC_THRESHOLD`]) racing the leader: PodGC's deletes told apart
//!   by user; podsweep never sends a second DELETE for a pod; with the leader's watch late (an
//!   injected lag), its DELETEs of pods PodGC took answer 404, counted as such and not as a
//!   failure.
//! * The root-CA publisher re-makes `kube-root-ca.crt` after it is deleted: the election key and
//!   the leader stay the same (no second election), one DELETE per pod.
//! * A node lost with its drivers Terminating (podsweep's DELETE accepted, no kubelet to finish
//!   it): podsweep sends no second DELETE and counts nothing twice while PodGC removes the pods.
//!
//! Each test prints one stamped JSON line (`{"test": "cluster", ...}`). They share one cluster
//! and run one at a time: `cargo test --test cluster` (about 3 minutes).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime};

use common::cluster::{
    add_node, apps, audit, deletes, fleet, leader, left, outcomes, podsweep_deletes, secs_between,
    settings, stamp, submit, sum, wait_all_gone, wait_phase, AppSpec, Server, SparkApp, GC_USER,
    KWOK_USER, PODGC_USER, ROOT_CA_USER, SERIAL,
};
use common::real_kube::{eventually, RealKube, CLUSTER_POD_GC_THRESHOLD};
use common::zk::ZkServer;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::Api;
use podsweep::config::keys;
use serde_json::{json, Value};

const WITHIN: Duration = Duration::from_secs(90);

/// Forty drivers `<prefix>-NN` Succeeded 3 s after they run, more than PodGC's threshold: the
/// first twenty retained by podsweep 1..20 s (their annotation), the last twenty `long`.
async fn drivers_past_podgc(k: &RealKube, ns: &str, prefix: &str, long: &str) -> Vec<SparkApp> {
    let mut all = Vec::new();
    for i in 0..40 {
        let r = if i < 20 {
            format!("PT{}S", i + 1)
        } else {
            long.to_owned()
        };
        let spec = AppSpec {
            executors: 0,
            annotations: &[
                ("podsweep.test/succeed-after", "3s"),
                ("podsweep.org/retain-period", r.as_str()),
            ],
            node: None,
        };
        all.push(submit(k, ns, &format!("{prefix}-{i:02}"), &spec).await);
    }
    all
}

/// Issue 34 sections 1 and 2, measured: eight Spark applications (a driver, two executors, a
/// ConfigMap and a Service each) bound by the scheduler to KWOK nodes and run by KWOK until the
/// driver Succeeded; three servers elect through ZooKeeper, the leader is closed after the first
/// four. Asserts: each driver pod got exactly one DELETE from podsweep (200), sent by the leader
/// of the time, and went at once (a terminated pod has no grace period: KWOK had nothing to
/// finish); the garbage collector deleted every executor, ConfigMap and Service (its user) and
/// KWOK finished each executor's graceful delete as a kubelet does; none is left, podsweep sent
/// none of those DELETEs; one failover. Prints the time from the driver's DELETE to the GC's last
/// DELETE and to the last dependent gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spark_apps_on_kwok_nodes_one_delete_per_driver_and_the_gc_takes_the_rest() {
    let _serial = SERIAL.lock().await;
    let k = RealKube::cluster();
    let zk = ZkServer::start();
    let ns = "cl-main";
    let mut servers = fleet(k, ns, 3, &settings(&zk, &[])).await;
    let users: Vec<String> = servers.iter().map(Server::user).collect();
    let spec = AppSpec {
        executors: 2,
        annotations: &[("podsweep.test/succeed-after", "2s")],
        node: None,
    };
    let first_names: Vec<String> = (0..4).map(|i| format!("first-{i}")).collect();
    let mut all = apps(k, ns, &first_names, &spec).await;
    let first_leader = leader(&servers, ns).await;
    wait_all_gone(k, ns, &all, WITHIN).await;
    let closed = servers.remove(first_leader);
    let closed_user = closed.user();
    closed.stop().await;
    let second_names: Vec<String> = (0..4).map(|i| format!("second-{i}")).collect();
    let second = apps(k, ns, &second_names, &spec).await;
    all.extend(second.iter().cloned());
    let next_leader = leader(&servers, ns).await;
    let next_user = servers[next_leader].user();
    wait_all_gone(k, ns, &all, WITHIN).await;

    let log = audit(k);
    let in_ns = |e: &&common::cluster::AuditEvent| e.namespace == ns && e.verb == "delete";
    let per_driver = podsweep_deletes(k, ns, &users);
    let mut gc_seconds = Vec::new();
    let mut rows = Vec::new();
    for a in &all {
        let sent: Vec<_> = log
            .iter()
            .filter(in_ns)
            .filter(|e| e.resource == "pods" && e.name == a.driver && users.contains(&e.user))
            .collect();
        // A Succeeded driver goes at once (the API server deletes a terminated pod without a
        // grace period); its executors, still running, are deleted gracefully by the GC, and
        // KWOK finishes each as their kubelet would.
        // (KWOK may still send one for a driver, when the MODIFIED event of its deletion reached
        // KWOK before the DELETED one: answered 404, the pod being gone already.)
        let kwok_on_driver: Vec<u16> = log
            .iter()
            .filter(in_ns)
            .filter(|e| e.resource == "pods" && e.name == a.driver && e.user == KWOK_USER)
            .map(|e| e.code)
            .collect();
        let driver_by_kwok = kwok_on_driver.iter().filter(|c| **c == 200).count();
        let kwok_done: Vec<_> = log
            .iter()
            .filter(in_ns)
            .filter(|e| e.resource == "pods" && a.executors.contains(&e.name))
            .filter(|e| e.user == KWOK_USER && e.code == 200)
            .collect();
        let dependents: Vec<_> = log
            .iter()
            .filter(in_ns)
            .filter(|e| {
                (e.resource == "pods" && a.executors.contains(&e.name))
                    || (e.resource == "configmaps" && e.name == a.config_map)
                    || (e.resource == "services" && e.name == a.service)
            })
            .filter(|e| e.user == GC_USER)
            .collect();
        let last = dependents.iter().map(|e| e.at).max();
        // Gone: the GC's last DELETE, or KWOK's end of a graceful one, whichever came last.
        let gone = dependents
            .iter()
            .filter(|e| e.resource != "pods")
            .chain(kwok_done.iter())
            .map(|e| e.at)
            .max();
        let after = |t: Option<SystemTime>| match (sent.first(), t) {
            (Some(d), Some(t)) => Some(secs_between(d.at, t)),
            _ => None,
        };
        if let Some(s) = after(gone) {
            gc_seconds.push(s);
        }
        rows.push(json!({"app": a.driver, "node": a.node, "podsweep_deletes": sent.len(),
            "sender": sent.first().map(|d| d.user.clone()), "driver_finished_by_kwok": driver_by_kwok, "kwok_404_on_driver": kwok_on_driver.len() - driver_by_kwok,
            "executors_finished_by_kwok": kwok_done.len(), "gc_deletes": dependents.len(),
            "gc_last_delete_seconds": after(last), "all_gone_seconds": after(gone)}));
    }
    gc_seconds.sort_by(f64::total_cmp);
    let podsweep_on_dependents = log
        .iter()
        .filter(in_ns)
        .filter(|e| users.contains(&e.user))
        .filter(|e| e.resource != "pods" || !all.iter().any(|a| a.driver == e.name))
        .count();
    let podgc = log
        .iter()
        .filter(in_ns)
        .filter(|e| e.user == PODGC_USER)
        .count();
    let line = json!({"test": "cluster", "case": "spark_apps_gc_cascade", "stamp": stamp(k),
        "apps": all.len(), "executors_per_app": 2, "servers": 3, "failovers": 1,
        "driver_deletes_by_podsweep": per_driver.values().map(Vec::len).sum::<usize>(),
        "max_per_driver": per_driver.values().map(Vec::len).max(),
        "dependents_deleted_by_gc": rows.iter().map(|r| r["gc_deletes"].as_u64().unwrap_or(0)).sum::<u64>(),
        "podsweep_deletes_of_dependents": podsweep_on_dependents, "podgc_deletes": podgc,
        "orphans_left": left(k, ns, &all).await.len(),
        "all_gone_seconds_median": gc_seconds.get(gc_seconds.len() / 2),
        "all_gone_seconds_max": gc_seconds.last(),
        "nodes_used": all.iter().map(|a| a.node.clone()).collect::<std::collections::BTreeSet<_>>(),
        "rows": rows});
    println!("{line}");
    assert_eq!(per_driver.len(), all.len(), "{line}");
    assert!(per_driver.values().all(|c| c == &[200]), "{line}");
    for (i, a) in all.iter().enumerate() {
        let want = if i < 4 { &closed_user } else { &next_user };
        assert_eq!(rows[i]["sender"], json!(want), "{}: {line}", a.driver);
        assert_eq!(
            rows[i]["driver_finished_by_kwok"], 0,
            "{}: {line}",
            a.driver
        );
        assert_eq!(
            rows[i]["executors_finished_by_kwok"], 2,
            "{}: {line}",
            a.driver
        );
        assert_eq!(rows[i]["gc_deletes"], 4, "{}: {line}", a.driver);
        assert!(k.nodes.contains(&a.node), "{}: {line}", a.driver);
    }
    assert_eq!(podsweep_on_dependents, 0, "{line}");
    assert_eq!(line["orphans_left"], 0, "{line}");
    for s in servers {
        s.stop().await;
    }
}

/// Issue 34 section 4, PodGC racing the leader (measured). Forty drivers run to Succeeded at
/// once, more than PodGC's threshold: the first twenty retained 1..20 s by podsweep (their
/// annotation), the last twenty 30 s, so PodGC's next pass (every 20 s) finds more than its
/// threshold and deletes the oldest, among them the ones podsweep is about to delete. Asserts:
/// PodGC deleted some (its user); podsweep sent at most one DELETE per pod and none after PodGC's
/// accepted one was seen (a 404 when PodGC was first is allowed, counted as `already_absent`, not
/// a failure: no retry, no last failure); every pod is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn podgc_racing_the_leader_never_gets_a_second_delete_from_podsweep() {
    let _serial = SERIAL.lock().await;
    let k = RealKube::cluster();
    let zk = ZkServer::start();
    let ns = "cl-podgc";
    let servers = fleet(
        k,
        ns,
        2,
        &settings(
            &zk,
            &[
                (keys::ANNOTATIONS_ENABLED, "true"),
                (keys::ANNOTATIONS_MAX_RETAIN, "PT60S"),
            ],
        ),
    )
    .await;
    let users: Vec<String> = servers.iter().map(Server::user).collect();
    let all = drivers_past_podgc(k, ns, "race", "PT30S").await;
    let lead = leader(&servers, ns).await;
    wait_all_gone(k, ns, &all, WITHIN).await;

    let log: Vec<_> = audit(k)
        .into_iter()
        .filter(|e| e.namespace == ns && e.resource == "pods" && e.verb == "delete")
        .collect();
    let mut podsweep_per_pod: BTreeMap<&str, Vec<u16>> = BTreeMap::new();
    let mut podgc_per_pod: BTreeMap<&str, Vec<(u16, SystemTime)>> = BTreeMap::new();
    for e in &log {
        if users.contains(&e.user) {
            podsweep_per_pod.entry(&e.name).or_default().push(e.code);
        } else if e.user == PODGC_USER {
            podgc_per_pod
                .entry(&e.name)
                .or_default()
                .push((e.code, e.at));
        }
    }
    // podsweep after PodGC's accepted DELETE: only a 404 is allowed (PodGC's delete had not
    // reached podsweep's informer yet).
    let mut after_podgc = Vec::new();
    let mut both_accepted = 0;
    for e in log.iter().filter(|e| users.contains(&e.user)) {
        if let Some(gc) = podgc_per_pod.get(e.name.as_str()) {
            if gc.iter().any(|(c, at)| *c == 200 && *at < e.at) {
                after_podgc.push((e.name.clone(), e.code));
            }
            if e.code == 200 && gc.iter().any(|(c, _)| *c == 200) {
                both_accepted += 1;
            }
        }
    }
    let podgc_accepted = podgc_per_pod
        .values()
        .filter(|v| v.iter().any(|(c, _)| *c == 200))
        .count();
    let status: Vec<Value> = servers.iter().map(|s| s.status(ns)).collect();
    let line = json!({"test": "cluster", "case": "podgc_race", "stamp": stamp(k),
        "pods": all.len(), "podgc_threshold": CLUSTER_POD_GC_THRESHOLD,
        "podgc_deleted": podgc_accepted,
        "podsweep_deletes": podsweep_per_pod.values().map(Vec::len).sum::<usize>(),
        "podsweep_max_per_pod": podsweep_per_pod.values().map(Vec::len).max(),
        "podsweep_404": podsweep_per_pod.values().flatten().filter(|c| **c == 404).count(),
        "podsweep_after_podgc": after_podgc,
        // PodGC force-deleting a pod podsweep's graceful DELETE left Terminating (KWOK had not
        // finished it yet): Kubernetes' overlap, not a second DELETE by podsweep.
        "podgc_on_pods_podsweep_deleted": both_accepted,
        "already_absent": outcomes(&servers, ns, "already_absent"),
        // Pods the leader had scheduled that went before its DELETE (PodGC's, seen by its informer).
        "leader_cancelled": status[lead]["cancelled"],
        "retries": sum(&servers, ns, "retries"),
        "last_failures": status.iter().map(|s| s["last_failure"].clone()).collect::<Vec<_>>()});
    println!("{line}");
    assert!(podgc_accepted > 0, "PodGC deleted nothing: {line}");
    assert!(podsweep_per_pod.values().all(|v| v.len() == 1), "{line}");
    assert!(after_podgc.iter().all(|(_, c)| *c == 404), "{line}");
    let accepted: std::collections::BTreeSet<&str> = log
        .iter()
        .filter(|e| e.code == 200 && (users.contains(&e.user) || e.user == PODGC_USER))
        .map(|e| e.name.as_str())
        .collect();
    assert_eq!(
        accepted.len(),
        all.len(),
        "every pod deleted by podsweep or PodGC: {line}"
    );
    assert_eq!(line["retries"], 0, "{line}");
    assert!(status.iter().all(|s| s["last_failure"].is_null()), "{line}");
    for s in servers {
        s.stop().await;
    }
}

/// Issue 34 section 4, PodGC first and the leader's watch late (an injected fault: its informer
/// sees every deletion 8 s late, as a watch behind a busy API server does). Forty drivers as in
/// the race above; PodGC's pass deletes pods podsweep still holds as due within those 8 s, so
/// podsweep's DELETE finds them gone. Asserts: podsweep got at least one 404, each for a pod
/// PodGC had deleted before, each counted `already_absent` and nothing else: no retry, no last
/// failure; still at most one DELETE per pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn podgc_first_and_a_late_watch_give_a_404_that_is_no_failure() {
    let _serial = SERIAL.lock().await;
    let k = RealKube::cluster();
    let zk = ZkServer::start();
    let ns = "cl-podgc-late";
    k.namespace(ns).await;
    let extra = settings(
        &zk,
        &[
            (keys::ANNOTATIONS_ENABLED, "true"),
            (keys::ANNOTATIONS_MAX_RETAIN, "PT60S"),
        ],
    );
    let server = Server::start_lagging(
        k,
        ns,
        &format!("{ns}-0"),
        &extra,
        Some(Duration::from_secs(8)),
    )
    .await;
    let user = server.user();
    let all = drivers_past_podgc(k, ns, "late", "PT25S").await;
    wait_all_gone(k, ns, &all, WITHIN).await;
    let servers = [server];
    // Every DELETE podsweep sent has had its answer once nothing is due or in flight.
    assert!(
        eventually(Duration::from_secs(30), || sum(&servers, ns, "tracked")
            == 0
            && sum(&servers, ns, "inflight") == 0)
        .await,
        "{}",
        servers[0].status(ns)
    );
    let log: Vec<_> = deletes(k, ns, "pods");
    let podgc_at: BTreeMap<&str, SystemTime> = log
        .iter()
        .filter(|e| e.user == PODGC_USER && e.code == 200)
        .map(|e| (e.name.as_str(), e.at))
        .collect();
    let mine: Vec<_> = log.iter().filter(|e| e.user == user).collect();
    let mut per_pod: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &mine {
        *per_pod.entry(e.name.as_str()).or_default() += 1;
    }
    let not_found: Vec<_> = mine.iter().filter(|e| e.code == 404).collect();
    let after_podgc = not_found
        .iter()
        .filter(|e| podgc_at.get(e.name.as_str()).is_some_and(|at| *at < e.at))
        .count();
    let status = servers[0].status(ns);
    let line = json!({"test": "cluster", "case": "podgc_first_late_watch", "stamp": stamp(k),
        "pods": all.len(), "watch_lag_seconds": 8, "podgc_deleted": podgc_at.len(),
        "podsweep_deletes": mine.len(), "podsweep_200": mine.iter().filter(|e| e.code == 200).count(),
        "podsweep_404": not_found.len(), "podsweep_404_after_podgc": after_podgc,
        "max_per_pod": per_pod.values().max(), "outcomes": status["outcomes"],
        "retries": status["retries"], "last_failure": status["last_failure"]});
    println!("{line}");
    assert!(!podgc_at.is_empty(), "PodGC deleted nothing: {line}");
    assert!(
        !not_found.is_empty(),
        "no DELETE met a pod PodGC took: {line}"
    );
    assert_eq!(after_podgc, not_found.len(), "{line}");
    assert_eq!(
        status["outcomes"]["already_absent"],
        not_found.len(),
        "{line}"
    );
    assert_eq!(status["retries"], 0, "{line}");
    assert!(status["last_failure"].is_null(), "{line}");
    assert!(per_pod.values().all(|n| *n == 1), "{line}");
    for s in servers {
        s.stop().await;
    }
}

/// Issue 34 section 4, the root-CA ConfigMap re-created: two servers elect, three drivers go;
/// `kube-root-ca.crt` (the election key) is deleted and the root-CA publisher makes it again (a
/// new UID, its user in the audit log); three more drivers go. Asserts: the publisher re-made it;
/// every server's election key is the same before and after; the same leader throughout and no
/// leadership transition after the first election; one DELETE per driver, by the leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_root_ca_publisher_remakes_the_election_key_and_the_election_stays_one() {
    let _serial = SERIAL.lock().await;
    let k = RealKube::cluster();
    let zk = ZkServer::start();
    let ns = "cl-rootca";
    let servers = fleet(k, ns, 2, &settings(&zk, &[])).await;
    let users: Vec<String> = servers.iter().map(Server::user).collect();
    let spec = AppSpec {
        executors: 0,
        annotations: &[("podsweep.test/succeed-after", "1s")],
        node: None,
    };
    let before: Vec<String> = (0..3).map(|i| format!("before-{i}")).collect();
    let mut all = apps(k, ns, &before, &spec).await;
    let first = leader(&servers, ns).await;
    wait_all_gone(k, ns, &all, WITHIN).await;
    let keys_before: Vec<Value> = servers
        .iter()
        .map(|s| s.status(ns)["election_scope"].clone())
        .collect();
    let transitions_before = sum(&servers, ns, "leadership_transitions");

    let cms: Api<ConfigMap> = Api::namespaced(k.admin().await, ns);
    let old_uid = cms.get("kube-root-ca.crt").await.expect("cm").metadata.uid;
    let deleted_at = SystemTime::now();
    cms.delete("kube-root-ca.crt", &Default::default())
        .await
        .expect("delete kube-root-ca.crt");
    let mut new_uid = None;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(30) {
        if let Ok(Some(cm)) = cms.get_opt("kube-root-ca.crt").await {
            if cm.metadata.uid != old_uid {
                new_uid = cm.metadata.uid;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        new_uid.is_some(),
        "the publisher did not re-make kube-root-ca.crt"
    );
    let remade = audit(k).into_iter().find(|e| {
        e.namespace == ns
            && e.resource == "configmaps"
            && e.verb == "create"
            && e.name == "kube-root-ca.crt"
            && e.at >= deleted_at - Duration::from_secs(1)
            && e.code == 201
    });

    let after: Vec<String> = (0..3).map(|i| format!("after-{i}")).collect();
    let more = apps(k, ns, &after, &spec).await;
    all.extend(more);
    wait_all_gone(k, ns, &all, WITHIN).await;
    let second = leader(&servers, ns).await;
    let keys_after: Vec<Value> = servers
        .iter()
        .map(|s| s.status(ns)["election_scope"].clone())
        .collect();
    let transitions_after = sum(&servers, ns, "leadership_transitions");
    let per_driver = podsweep_deletes(k, ns, &users);
    let line = json!({"test": "cluster", "case": "root_ca_recreated", "stamp": stamp(k),
        "drivers": all.len(), "remade_by": remade.as_ref().map(|e| e.user.clone()),
        "remade_seconds": remade.as_ref().map(|e| secs_between(deleted_at, e.at)),
        "election_keys_before": keys_before, "election_keys_after": keys_after,
        "leader_before": servers[first].id, "leader_after": servers[second].id,
        "leadership_transitions_before": transitions_before,
        "leadership_transitions_after": transitions_after,
        "driver_deletes": per_driver.values().map(Vec::len).sum::<usize>(),
        "max_per_driver": per_driver.values().map(Vec::len).max()});
    println!("{line}");
    assert_eq!(
        remade.map(|e| e.user),
        Some(ROOT_CA_USER.to_owned()),
        "{line}"
    );
    let expected = json!(format!("{}:{ns}", k.cluster_key()));
    assert!(
        keys_before
            .iter()
            .chain(&keys_after)
            .all(|k| *k == expected),
        "{line}"
    );
    assert_eq!(first, second, "{line}");
    assert_eq!(transitions_before, transitions_after, "{line}");
    assert_eq!(per_driver.len(), all.len(), "{line}");
    assert!(per_driver.values().all(|c| c == &[200]), "{line}");
    for s in servers {
        s.stop().await;
    }
}

/// Issue 34 section 4, a node lost with its pods Terminating. On a node of their own, two
/// drivers run to Succeeded and three keep running; the node is then lost (deleted: no kubelet,
/// KWOK no longer plays it) and the three running drivers are deleted (as Kyuubi's cancel or an
/// operator does): Terminating, with nobody to finish them, until PodGC's orphan pass (after its
/// 40 s quarantine) marks them Failed and force-deletes them. Asserts: podsweep sent one DELETE
/// per Succeeded driver (200: a terminated pod goes at once, node or no node) and none for a
/// Terminating one, even once PodGC marked it Failed; it counted each once (`deletes_sent`,
/// `accepted`), no retry, nothing left tracked; PodGC's user removed the Terminating ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_lost_with_its_pods_terminating_gets_no_second_delete() {
    let _serial = SERIAL.lock().await;
    let k = RealKube::cluster();
    let zk = ZkServer::start();
    let ns = "cl-nodelost";
    let node = "kwok-node-lost";
    add_node(k, node).await;
    let servers = fleet(k, ns, 1, &settings(&zk, &[(keys::RETAIN_PERIOD, "PT5S")])).await;
    let users: Vec<String> = servers.iter().map(Server::user).collect();
    let done_spec = AppSpec {
        executors: 0,
        annotations: &[("podsweep.test/succeed-after", "1s")],
        node: Some(node),
    };
    let running_spec = AppSpec {
        executors: 0,
        annotations: &[],
        node: Some(node),
    };
    let done_names: Vec<String> = (0..2).map(|i| format!("done-{i}")).collect();
    let running_names: Vec<String> = (0..3).map(|i| format!("running-{i}")).collect();
    let done = apps(k, ns, &done_names, &done_spec).await;
    let running = apps(k, ns, &running_names, &running_spec).await;
    for a in &done {
        wait_phase(k, ns, &a.driver, &["Succeeded"]).await;
    }
    let nodes: Api<Node> = Api::all(k.admin().await);
    nodes
        .delete(node, &Default::default())
        .await
        .expect("delete the node");
    let lost_at = SystemTime::now();
    let pods: Api<Pod> = Api::namespaced(k.admin().await, ns);
    for a in &running {
        pods.delete(&a.driver, &Default::default())
            .await
            .expect("delete a running driver");
    }
    for a in &running {
        let p = pods.get(&a.driver).await.expect("a Terminating driver");
        assert!(p.metadata.deletion_timestamp.is_some(), "{}", a.driver);
    }
    // The Succeeded ones go (podsweep), then the Terminating ones (PodGC's orphan pass).
    wait_all_gone(k, ns, &done, WITHIN).await;
    wait_all_gone(k, ns, &running, Duration::from_secs(150)).await;
    let gone_at = SystemTime::now();
    assert!(
        eventually(Duration::from_secs(30), || sum(&servers, ns, "tracked")
            == 0)
        .await,
        "{}",
        servers[0].status(ns)
    );
    let log = audit(k);
    let per_pod = podsweep_deletes(k, ns, &users);
    let removed_by: BTreeMap<String, Vec<String>> = running
        .iter()
        .map(|a| {
            let by = log
                .iter()
                .filter(|e| e.namespace == ns && e.name == a.driver && e.verb == "delete")
                .filter(|e| e.subresource.is_empty() && e.code == 200)
                .map(|e| e.user.clone())
                .collect();
            (a.driver.clone(), by)
        })
        .collect();
    let marked_failed = log
        .iter()
        .filter(|e| e.namespace == ns && e.subresource == "status" && e.user == PODGC_USER)
        .filter(|e| running.iter().any(|a| a.driver == e.name) && e.code == 200)
        .count();
    let line = json!({"test": "cluster", "case": "node_lost_terminating", "stamp": stamp(k),
        "succeeded_drivers": done.len(), "terminating_drivers": running.len(),
        "podsweep_deletes": per_pod, "deletes_sent": sum(&servers, ns, "deletes_sent"),
        "accepted": outcomes(&servers, ns, "accepted"), "retries": sum(&servers, ns, "retries"),
        "terminating_removed_by": removed_by, "podgc_marked_failed": marked_failed,
        "seconds_node_lost_to_all_gone": secs_between(lost_at, gone_at)});
    println!("{line}");
    for a in &done {
        assert_eq!(per_pod.get(&a.driver), Some(&vec![200]), "{line}");
    }
    for a in &running {
        assert_eq!(per_pod.get(&a.driver), None, "{line}");
        // The test's own DELETE, then PodGC's.
        assert_eq!(
            removed_by[&a.driver].last().map(String::as_str),
            Some(PODGC_USER),
            "{line}"
        );
    }
    assert_eq!(line["deletes_sent"], done.len(), "{line}");
    assert_eq!(line["accepted"], done.len(), "{line}");
    assert_eq!(line["retries"], 0, "{line}");
    for s in servers {
        s.stop().await;
    }
}
