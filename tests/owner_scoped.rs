//! Issue 32 §5: a fleet whose informers see only their own pods (Kyuubi's owner-scoped watch),
//! where the leader of each scope also watches all its driver pods (`scopeWatch`), on the real
//! kube-apiserver and a real ZooKeeper, every DELETE counted from the API server's audit log.
//! The LEADER goes, not a follower: its pods must still go, each once; and a server that lost
//! its leadership holds nothing of the pods its own informer never sees end.
//!
//! Heavy (a kube-apiserver, a ZooKeeper): `cargo test --test owner_scoped -- --ignored
//! --test-threads 1`. Each test prints one JSON line (`{"bench": "owner_scoped", ...}`).

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant, SystemTime};

use common::owned::{leader, Member, WATCH_SCOPE};
use common::proxy::Proxy;
use common::real_kube::{eventually, line_stamp, RealKube};
use common::zk::ZkServer;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use podsweep::config::keys;
use serde_json::{json, Value};

/// Terminates a running pod as a kubelet would (Succeeded, finished now).
async fn finish(k: &RealKube, ns: &str, name: &str) {
    let api: Api<Pod> = Api::namespaced(k.admin().await, ns);
    let at = jiff::Timestamp::now().to_string();
    let status = json!({"status": {"phase": "Succeeded", "containerStatuses": [{
        "name": "spark-kubernetes-driver", "image": "spark", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "startedAt": at, "finishedAt": at, "reason": "Completed"}}}]}});
    api.patch_status(name, &Default::default(), &kube::api::Patch::Merge(&status))
        .await
        .expect("status");
}

/// A status figure (0 when absent).
fn n(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

/// Nothing left to do on this server: nothing tracked, due, queued or in flight.
fn quiet(v: &Value) -> bool {
    ["tracked", "due", "inflight", "queued"]
        .iter()
        .all(|k| n(v, k) == 0)
}

/// How the leader goes.
#[derive(Clone, Copy, Debug)]
enum Going {
    /// A graceful stop (a rolling restart, a scale-down): it hands its leadership over.
    Stop,
    /// A crash, as the others see it: its ZooKeeper connection goes silent (its engine pauses at
    /// once and never acts again) and its informer stops; its session expires after 4 s.
    Crash,
}

/// The followers restart (a rolling restart: their informers list none of their pods, all gone),
/// new jobs land on the leader only, and the leader goes while its pods wait for their retain
/// period. Every follower's informer sees none of the pods left: before issue 32 none of them
/// campaigned (a server campaigned for a scope only on its informer's events, and released it
/// when idle), so the pods stayed until a job landed on another server.
async fn leader_goes(ns: &str, going: Going) -> Value {
    let k = RealKube::shared();
    let zk = ZkServer::start();
    k.namespace(ns).await;
    let ids: Vec<String> = (0..3).map(|i| format!("{ns}-{i}")).collect();
    let mut proxies = std::collections::HashMap::new();
    for id in &ids {
        proxies.insert(id.clone(), Proxy::start(&zk.addr()).await);
    }
    let extra = |id: &str| -> Vec<(&'static str, String)> {
        vec![
            (keys::HA_ADDRESSES, proxies[id].addr.clone()),
            (keys::HA_NAMESPACE, ns.to_owned()),
            (keys::ZK_SESSION_TIMEOUT, "4000".to_owned()),
            (keys::RETAIN_PERIOD, "PT5S".to_owned()),
        ]
    };
    let start = |id: String| {
        let conf = extra(&id);
        async move {
            let pairs: Vec<(&str, &str)> = conf.iter().map(|(k, v)| (*k, v.as_str())).collect();
            Member::start(k, ns, &id, &pairs).await
        }
    };
    let mut members = Vec::new();
    for id in &ids {
        members.push(start(id.clone()).await);
    }
    // Each server's own jobs, and a shared one; they finish and go.
    let mut pods = Vec::new();
    for id in &ids {
        for j in 0..2 {
            let name = format!("{id}-first-{j}");
            k.running_pod(ns, &name, &[(WATCH_SCOPE, id.as_str())], &[])
                .await;
            pods.push(name);
        }
    }
    let shared = format!("{ns}-shared");
    k.running_pod(ns, &shared, &[(WATCH_SCOPE, "global")], &[])
        .await;
    pods.push(shared);
    let first = leader(&members, Duration::from_secs(30))
        .await
        .expect("a leader");
    for p in &pods {
        finish(k, ns, p).await;
    }
    let n_first = pods.len();
    assert!(
        eventually(Duration::from_secs(60), || k.deletes_in(ns).len()
            >= n_first)
        .await,
        "the first jobs' pods deleted: {:?}",
        k.deletes_in(ns)
    );
    // The followers restart, one after the other.
    let leader_id = members[first].id.clone();
    let mut kept = Vec::new();
    for m in members {
        if m.id == leader_id {
            kept.insert(0, m);
        } else {
            let id = m.id.clone();
            m.stop().await;
            kept.push(start(id).await);
        }
    }
    let mut members = kept;
    let restarted: Vec<Value> = members[1..].iter().map(Member::status).collect();
    // New jobs, on the leader only; they finish, and it goes while they wait for their period.
    let mut last = Vec::new();
    for j in 0..3 {
        let name = format!("{leader_id}-last-{j}");
        k.running_pod(ns, &name, &[(WATCH_SCOPE, &leader_id)], &[])
            .await;
        last.push(name);
    }
    for p in &last {
        finish(k, ns, p).await;
    }
    assert!(
        eventually(Duration::from_secs(30), || n(
            &members[0].status(),
            "tracked"
        ) == 3)
        .await,
        "the leader tracks its last pods: {}",
        members[0].status()
    );
    let gone = members.remove(0);
    let gone_at = Instant::now();
    let crashed = match going {
        Going::Stop => {
            gone.stop().await;
            None
        }
        Going::Crash => {
            proxies[&leader_id].blackhole(true);
            gone.stop_informer();
            Some(gone)
        }
    };
    // A follower leads and watches the scope.
    let mut failover_s = None;
    while gone_at.elapsed() < Duration::from_secs(60) {
        if members
            .iter()
            .any(|m| m.leads() && m.status()["watching"] == true)
        {
            failover_s = Some(gone_at.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    pods.extend(last.iter().cloned());
    let all = pods.len();
    let cleaned = eventually(Duration::from_secs(60), || k.deletes_in(ns).len() >= all).await;
    // Whatever else was coming has come: every server left has nothing to do.
    let settled = eventually(Duration::from_secs(30), || {
        members.iter().all(|m| quiet(&m.status()))
    })
    .await;
    let deletes = k.deletes_in(ns);
    let left = k.pods(ns).await;
    for m in members.into_iter().chain(crashed) {
        m.stop().await;
    }
    let per_pod: BTreeSet<usize> = pods
        .iter()
        .map(|p| deletes.iter().filter(|d| &d.name == p).count())
        .collect();
    json!({"bench": "owner_scoped", "case": "leader_goes", "going": format!("{going:?}"),
        "stamp": line_stamp(), "servers": 3, "leader": leader_id, "pods": all,
        "pods_left_by_the_leader": last.len(),
        "restarted_followers_known_before": restarted.iter().map(|s| s["known"].clone()).collect::<Vec<_>>(),
        "failover_to_a_watching_leader_s": failover_s.map(|s| (s * 1000.0).round() / 1000.0),
        "deletes": deletes.len(), "deletes_answered_200": deletes.iter().filter(|d| d.code == 200).count(),
        "deletes_per_pod": per_pod.iter().collect::<Vec<_>>(), "left": left,
        "settled": settled, "cleaned_in_time": cleaned,
        "senders": deletes.iter().map(|d| d.user.clone()).collect::<BTreeSet<_>>()})
}

/// The leader goes, gracefully and by a crash: its pods still go, each once, and a follower leads
/// and watches within the failover time (at once; the 4 s session after a crash).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real kube-apiserver: cargo test --test owner_scoped -- --ignored"]
async fn the_leader_goes_and_its_pods_still_go_each_once() {
    for (ns, going) in [("gone-stop", Going::Stop), ("gone-crash", Going::Crash)] {
        let figures = leader_goes(ns, going).await;
        println!("{figures}");
        assert!(
            figures["failover_to_a_watching_leader_s"].is_number(),
            "no follower took over: {figures}"
        );
        assert_eq!(figures["left"], json!([]), "{figures}");
        assert_eq!(figures["deletes_per_pod"], json!([1]), "{figures}");
        assert_eq!(
            figures["deletes_answered_200"], figures["pods"],
            "{figures}"
        );
    }
}

/// The leader is cut off from ZooKeeper: another server takes over, and once it is a follower
/// again the ex-leader holds nothing of the pods of other owners that only its scope watch had
/// told it of (tracked, spared, running), while its own informer's stay; when it leads again it
/// sends no DELETE for a pod another leader deleted meanwhile (which its informer never saw go).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real kube-apiserver: cargo test --test owner_scoped -- --ignored"]
async fn an_ex_leader_holds_nothing_of_other_owners_pods() {
    let k = RealKube::shared();
    let zk = ZkServer::start();
    let ns = "owned-ex";
    k.namespace(ns).await;
    let ids = ["ex-0", "ex-1", "ex-2"];
    let mut proxies = Vec::new();
    let mut members = Vec::new();
    for id in ids {
        let proxy = Proxy::start(&zk.addr()).await;
        let extra = [
            (keys::HA_ADDRESSES, proxy.addr.as_str()),
            (keys::HA_NAMESPACE, "owned-ex"),
            (keys::ZK_SESSION_TIMEOUT, "4000"),
            // FAILED pods are spared (kept) under COMPLETED.
            (keys::CLEANUP_KIND, "COMPLETED"),
            (keys::RETAIN_PERIOD, "PT30S"),
        ];
        members.push(Member::start(k, ns, id, &extra).await);
        proxies.push(proxy);
    }
    let now = SystemTime::now();
    // Per owner, and shared: one running, one failed (spared), one finished (tracked).
    for owner in ids.iter().copied().chain(["global"]) {
        k.running_pod(
            ns,
            &format!("{owner}-running"),
            &[(WATCH_SCOPE, owner)],
            &[],
        )
        .await;
        k.terminated_pod(
            ns,
            &format!("{owner}-failed"),
            "Failed",
            now,
            &[(WATCH_SCOPE, owner)],
            &[],
        )
        .await;
        k.terminated_pod(
            ns,
            &format!("{owner}-done"),
            "Succeeded",
            now,
            &[(WATCH_SCOPE, owner)],
            &[],
        )
        .await;
    }
    let l = leader(&members, Duration::from_secs(30))
        .await
        .expect("a leader");
    let leading = eventually(Duration::from_secs(20), || {
        let s = members[l].status();
        n(&s, "tracked") == 4 && n(&s, "spared") == 4
    })
    .await;
    let before = members[l].status();
    assert!(leading, "the leader sees every pod: {before}");
    // Cut off: another server leads.
    proxies[l].blackhole(true);
    let cut_at = Instant::now();
    let mut successor = None;
    while cut_at.elapsed() < Duration::from_secs(30) && successor.is_none() {
        successor = (0..members.len()).find(|&i| i != l && members[i].leads());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let m = successor.expect("another server takes over");
    let takeover_s = cut_at.elapsed().as_secs_f64();
    proxies[l].blackhole(false);
    assert!(
        eventually(Duration::from_secs(30), || members[l].status()
            ["leadership"]
            == "FOLLOWING")
        .await,
        "the ex-leader follows again: {}",
        members[l].status()
    );
    let after = members[l].status();
    // The new leader deletes every finished pod at its deadline (the others' too, which the
    // ex-leader's informer never sees go).
    let done = eventually(Duration::from_secs(60), || {
        k.deletes_in(ns).iter().filter(|d| d.code == 200).count() >= 4
    })
    .await;
    // The ex-leader leads again (the others stop); it lists the scope and has nothing to do.
    let ex = members.remove(l);
    for other in members {
        other.stop().await;
    }
    let again = eventually(Duration::from_secs(30), || {
        let s = ex.status();
        ex.leads() && s["watching"] == true && n(&s, "due") == 0 && n(&s, "inflight") == 0
    })
    .await;
    let last = ex.status();
    ex.stop().await;
    let deletes = k.deletes_in(ns);
    let per = |s: &Value| {
        json!({"tracked": s["tracked"], "spared": s["spared"],
        "running": s["running"], "watch_only": s["watch_only"]})
    };
    let figures = json!({"bench": "owner_scoped", "case": "ex_leader", "stamp": line_stamp(),
        "servers": 3, "owners": 3, "shared": 1, "ex_leader": ids[l], "successor": ids[m],
        "takeover_after_cut_s": (takeover_s * 1000.0).round() / 1000.0,
        "ex_leader_leading": per(&before), "ex_leader_following": per(&after),
        "ex_leader_leading_again": per(&last), "leads_again": again, "finished_pods_deleted": done,
        "deletes": deletes.len(), "deletes_answered_200": deletes.iter().filter(|d| d.code == 200).count(),
        "deletes_answered_404": deletes.iter().filter(|d| d.code == 404).count(),
        "left": k.pods(ns).await.len()});
    println!("{figures}");
    // Its own pods and the shared ones stay (its informer sees them end); the others' go.
    assert_eq!(
        figures["ex_leader_following"],
        json!({"tracked": 2, "spared": 2, "running": 2, "watch_only": 0}),
        "{figures}"
    );
    assert_eq!(figures["deletes_answered_404"], 0, "{figures}");
    assert_eq!(
        figures["deletes"], 4,
        "one DELETE per finished pod: {figures}"
    );
}

/// Pod requests the API server received from `users` between `from` and `to` (the audit log's
/// `requestReceivedTimestamp`, each request once).
fn pod_requests(k: &RealKube, users: &BTreeSet<String>, from: SystemTime, to: SystemTime) -> usize {
    let text = std::fs::read_to_string(&k.audit).unwrap_or_default();
    let mut ids = BTreeSet::new();
    for v in text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let user = v["user"]["username"].as_str().unwrap_or("");
        let at = v["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse::<jiff::Timestamp>().ok())
            .map(|t| SystemTime::UNIX_EPOCH + Duration::from_micros(t.as_microsecond() as u64));
        if users.contains(user) && at.is_some_and(|t| t >= from && t < to) {
            ids.insert(v["auditID"].as_str().unwrap_or("").to_owned());
        }
    }
    ids.len()
}

/// This process's resident memory (VmRSS), in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Three servers with `scopes` configured namespaces (`prefix-<i>`) and no pod at all, idle for
/// `window` once every scope has one leader watching: ZooKeeper packets, the servers' pod
/// requests at the API server, and this process's memory per scope task.
async fn idle_fleet(k: &'static RealKube, prefix: &str, scopes: usize, window: Duration) -> Value {
    let zk = ZkServer::start();
    let namespaces: Vec<String> = (0..scopes).map(|i| format!("{prefix}-{i}")).collect();
    for ns in &namespaces {
        k.namespace(ns).await;
    }
    let list: String = namespaces.iter().map(|n| format!(":{n},")).collect();
    let ids: Vec<String> = (0..3).map(|i| format!("{prefix}-s{i}")).collect();
    let mut tokens = Vec::new();
    for id in &ids {
        tokens.push(k.server_token(id).await);
    }
    let rss_before = rss_kib();
    let mut engines = Vec::new();
    for (id, token) in ids.iter().zip(&tokens) {
        let mut conf: std::collections::HashMap<String, String> = [
            (keys::CLEANUP_KIND, "ALL"),
            (keys::OWNER_SCOPED_WATCH, "true"),
            (keys::HA_ADDRESSES, zk.addr().as_str()),
            (keys::HA_NAMESPACE, prefix),
            (keys::INIT_LIST, list.as_str()),
        ]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        conf.extend(k.client_conf(token));
        let settings = podsweep::config::Settings::from_map(conf).unwrap();
        engines.push(
            podsweep::engine::Engine::new(settings, id, tokio::runtime::Handle::current()).unwrap(),
        );
    }
    let scope = |ns: &str| podsweep::scope::Scope::new(None, Some(ns));
    let status = |e: &podsweep::engine::Engine, ns: &str| -> Value {
        serde_json::from_str(&e.status_json(&scope(ns))).unwrap()
    };
    let all_led = eventually(Duration::from_secs(90), || {
        namespaces.iter().all(|ns| {
            engines
                .iter()
                .filter(|e| status(e, ns)["known"] == true)
                .count()
                == ids.len()
                && engines
                    .iter()
                    .filter(|e| {
                        let s = status(e, ns);
                        s["leadership"] == "LEADING" && s["watching"] == true
                    })
                    .count()
                    == 1
        })
    })
    .await;
    assert!(
        all_led,
        "every configured scope campaigns on every server, one leader watching"
    );
    let rss_held = rss_kib();
    let users: BTreeSet<String> = ids.iter().map(|id| RealKube::user_of(id)).collect();
    let (p0, t0) = (
        common::bench::zk_packets_received(zk.port()).unwrap_or(0),
        SystemTime::now(),
    );
    // The measured window: the fleet idles.
    tokio::time::sleep(window).await;
    let (p1, t1) = (
        common::bench::zk_packets_received(zk.port()).unwrap_or(0),
        SystemTime::now(),
    );
    let still = namespaces
        .iter()
        .all(|ns| engines.iter().all(|e| status(e, ns)["known"] == true));
    for e in &engines {
        e.close_async(Duration::from_secs(5)).await;
    }
    let minutes = window.as_secs_f64() / 60.0;
    let round = |x: f64| (x * 100.0).round() / 100.0;
    let api = pod_requests(k, &users, t0, t1) as f64;
    json!({"scopes": scopes, "servers": ids.len(), "window_s": window.as_secs(),
        "zk_packets_per_min": round((p1 - p0) as f64 / minutes),
        "pod_requests_per_min": round(api / minutes),
        "rss_kib_before": rss_before, "rss_kib_held": rss_held,
        "rss_kib_per_scope_task": round(rss_held.saturating_sub(rss_before) as f64
            / (scopes * ids.len()) as f64),
        "all_still_campaigning": still})
}

/// What the choice costs: with the scope watch on, every configured scope campaigns for the
/// engine's life on every server, idle or not, and its leader keeps a watch open. Two idle
/// fleets of three servers, with 1 and with 20 configured namespaces and no pod: the difference
/// is what 19 scopes kept campaigning cost. The window of the larger one (300 s) holds one
/// renewal of each leader's watch request (every 290 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real kube-apiserver: cargo test --test owner_scoped -- --ignored"]
async fn idle_scopes_kept_campaigning_cost() {
    let k = RealKube::shared();
    let one = idle_fleet(k, "idle-one", 1, Duration::from_secs(120)).await;
    let many = idle_fleet(k, "idle-many", 20, Duration::from_secs(300)).await;
    let f = |v: &Value, key: &str| v[key].as_f64().unwrap_or(0.0);
    let per_scope = |key: &str| ((f(&many, key) - f(&one, key)) / 19.0 * 100.0).round() / 100.0;
    let figures = json!({"bench": "owner_scoped", "case": "idle_scopes_cost", "stamp": line_stamp(),
        "zk_session_timeout_ms_granted": 4000, "one_scope": one, "twenty_scopes": many,
        "per_added_scope": {"zk_packets_per_min": per_scope("zk_packets_per_min"),
            "pod_requests_per_min": per_scope("pod_requests_per_min")}});
    println!("{figures}");
    assert!(
        one["all_still_campaigning"] == true && many["all_still_campaigning"] == true,
        "{figures}"
    );
}
