//! Issue 32 §4 on the real kube-apiserver (`scripts/kube`), every request counted from its audit
//! log: the emergency stop of docs/rollout.md. Three servers (self-watching engines, as daemons
//! run) elect one leader through a real ZooKeeper and drain a namespace of terminated Kyuubi
//! driver pods under ServiceAccounts whose only grant is a Role of that namespace; mid-drain the
//! Role loses `delete`. While it lasts the servers must hold the request rate to a bound (one
//! probe per `forbidden.retryInterval` and a couple of DELETEs per leadership term, not every
//! due pod again and again); with `delete` given back they finish the drain without a restart,
//! one accepted DELETE per pod. And a refusal from admission (a ValidatingAdmissionPolicy that
//! refuses every DELETE, whoever sends it) does not rotate the leadership.
//!
//! `cargo test --test emergency_stop` runs them at 200 and 30 pods with short timings;
//! `cargo test --test emergency_stop -- --ignored --nocapture` runs the 5,000-pod version with the
//! default timings (`PODSWEEP_STOP_PODS`, `PODSWEEP_STOP_HOLD_S` change them) and prints one
//! JSON line for `scripts/stamp` (docs/performance.md).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use common::real_kube::{eventually, AuditRequest, RealKube};
use common::zk::ZkServer;
use futures::StreamExt;
use podsweep::config::{keys, Settings};
use podsweep::election::Leadership;
use podsweep::engine::Engine;
use podsweep::scope::Scope;
use serde_json::{json, Value};

const SERVERS: usize = 3;

/// One run of the scenario.
struct Plan {
    ns: &'static str,
    pods: usize,
    /// The Role loses `delete` once this many pods are deleted.
    cut_after: usize,
    /// How long `delete` stays away.
    hold: Duration,
    /// Keys beyond the scenario's own (timings, pace).
    keys: Vec<(&'static str, String)>,
}

/// What the servers' statuses showed, sampled every 250 ms.
#[derive(Default)]
struct Samples {
    /// (when, index of the leading server if one leads).
    leaders: Vec<(Instant, Option<usize>)>,
    health: BTreeSet<String>,
    pauses: BTreeSet<String>,
    /// The longest the oldest overdue pod was overdue, on any server, in ms.
    oldest_overdue_ms: u64,
}

fn scope(ns: &str) -> Scope {
    Scope::new(None, Some(ns))
}

fn status(e: &Engine, ns: &str) -> Value {
    serde_json::from_str(&e.status_json(&scope(ns))).unwrap_or(Value::Null)
}

fn engines(plan: &Plan, zk: &ZkServer, tokens: &[String]) -> Vec<Arc<Engine>> {
    let k = RealKube::shared();
    (0..SERVERS)
        .map(|i| {
            let own: Vec<(&str, String)> = vec![
                (keys::WATCH_ENABLED, "true".into()),
                (keys::WATCH_KIND, "ALL".into()),
                (keys::CLEANUP_KIND, "NONE".into()),
                (keys::KUBE_NAMESPACE, plan.ns.into()),
                (keys::RETAIN_PERIOD, "PT1S".into()),
                (keys::HA_ADDRESSES, zk.addr()),
                (
                    keys::HA_NAMESPACE,
                    format!("stop_{}", plan.ns.replace('-', "_")),
                ),
                (keys::ZK_SESSION_TIMEOUT, "10000".into()),
            ];
            let conf = own
                .into_iter()
                .chain(plan.keys.iter().cloned())
                .map(|(k, v)| (k.to_owned(), v))
                .chain(k.client_conf(&tokens[i]))
                .collect();
            let settings = Settings::from_map(conf).expect("settings");
            let id = format!("{}-{i}", plan.ns);
            Arc::new(Engine::new(settings, &id, tokio::runtime::Handle::current()).expect("engine"))
        })
        .collect()
}

fn sampler(
    engines: Vec<Arc<Engine>>,
    ns: &'static str,
    out: Arc<Mutex<Samples>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let leader = engines
                .iter()
                .position(|e| e.leadership(&scope(ns)) == Some(Leadership::Leading));
            let statuses: Vec<Value> = engines.iter().map(|e| status(e, ns)).collect();
            {
                let mut s = out.lock().unwrap();
                s.leaders.push((Instant::now(), leader));
                for st in &statuses {
                    for r in st["health_reasons"].as_array().into_iter().flatten() {
                        // The reason without the figures that change with every sample.
                        let r = r.as_str().unwrap_or_default();
                        s.health
                            .insert(r.split(" for ").next().unwrap_or(r).to_owned());
                    }
                    for p in st["pauses"].as_array().into_iter().flatten() {
                        s.pauses
                            .insert(p["reason"].as_str().unwrap_or_default().to_owned());
                    }
                    let o = st["oldest_overdue_ms"].as_u64().unwrap_or(0);
                    s.oldest_overdue_ms = s.oldest_overdue_ms.max(o);
                }
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
}

/// Leaders in `[from, to]`: how many times the leading server changed (a leaderless gap and the
/// same server again count as no change), the servers that led, and the longest gap in ms.
fn leadership(samples: &Samples, from: Instant, to: Instant) -> (usize, Vec<usize>, u128) {
    let mut changes = 0;
    let mut last: Option<usize> = None;
    let mut led = Vec::new();
    let (mut gap, mut gap_from) = (0u128, None::<Instant>);
    for (at, l) in samples
        .leaders
        .iter()
        .filter(|(at, _)| *at >= from && *at <= to)
    {
        match l {
            Some(i) => {
                if last.is_some_and(|p| p != *i) {
                    changes += 1;
                }
                if last != Some(*i) {
                    led.push(*i);
                }
                last = Some(*i);
                if let Some(f) = gap_from.take() {
                    gap = gap.max(at.duration_since(f).as_millis());
                }
            }
            None => {
                gap_from.get_or_insert(*at);
            }
        }
    }
    (changes, led, gap)
}

fn wall(t: Instant, t0: Instant, wall0: SystemTime) -> SystemTime {
    wall0 + t.duration_since(t0)
}

async fn backlog(k: &'static RealKube, ns: &str, n: usize) {
    let now = SystemTime::now();
    futures::stream::iter(0..n)
        .for_each_concurrent(16, |i| {
            let ns = ns.to_owned();
            async move {
                let at = now - Duration::from_secs(3600 + (n - i) as u64);
                k.terminated_pod(&ns, &format!("stop-{i:05}"), "Succeeded", at, &[], &[])
                    .await;
            }
        })
        .await;
}

/// The emergency stop: returns the run's figures; asserts one accepted DELETE per pod and a
/// drain finished without a restart.
async fn emergency_stop(plan: Plan) -> Value {
    let k = RealKube::shared();
    k.namespace(plan.ns).await;
    let names: Vec<String> = (0..SERVERS).map(|i| format!("{}-{i}", plan.ns)).collect();
    let users: BTreeSet<String> = names.iter().map(|n| RealKube::user_of(n)).collect();
    let tokens = k.role_tokens(plan.ns, "podsweep", &names).await;
    let made = Instant::now();
    backlog(k, plan.ns, plan.pods).await;
    let create_s = made.elapsed().as_secs_f64();
    let zk = ZkServer::start();
    let (t0, wall0) = (Instant::now(), SystemTime::now());
    let engines = engines(&plan, &zk, &tokens);
    let samples = Arc::new(Mutex::new(Samples::default()));
    let sampling = sampler(engines.clone(), plan.ns, samples.clone());
    let ours = |r: &AuditRequest| users.contains(&r.user);
    // Counted from the servers' statuses while they run (the audit log is read once, at the
    // end: parsing it every 100 ms would lag a fast drain).
    let accepted = || -> usize {
        engines
            .iter()
            .map(|e| {
                status(e, plan.ns)["outcomes"]["accepted"]
                    .as_u64()
                    .unwrap_or(0) as usize
            })
            .sum()
    };
    assert!(
        eventually(Duration::from_secs(120), || accepted() >= plan.cut_after).await,
        "{} deleted before the cut",
        accepted()
    );
    // The emergency stop.
    k.set_pod_delete(plan.ns, "podsweep", false, &tokens[0])
        .await;
    let (cut, cut_wall) = (Instant::now(), SystemTime::now());
    let before_cut = accepted();
    tokio::time::sleep(plan.hold).await;
    let (back, back_wall) = (Instant::now(), SystemTime::now());
    k.set_pod_delete(plan.ns, "podsweep", true, &tokens[0])
        .await;
    // Every pod gone (a DELETE aborted by a step-down may have deleted its pod unseen: the
    // servers' counts of accepted DELETEs can miss it, the API server's list cannot).
    let mut left = plan.pods;
    while left > 0 {
        assert!(
            back.elapsed() < Duration::from_secs(600),
            "{left} of {} pods left 600 s after delete was given back",
            plan.pods
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        left = k.pods(plan.ns).await.len();
    }
    let done = Instant::now();
    let statuses: Vec<Value> = engines.iter().map(|e| status(e, plan.ns)).collect();
    sampling.abort();
    for e in &engines {
        e.close_async(Duration::from_secs(5)).await;
    }
    let requests: Vec<AuditRequest> = k.pod_requests(plan.ns).into_iter().filter(ours).collect();
    let in_hold = |r: &&AuditRequest| r.at >= cut_wall && r.at <= back_wall;
    let hold_deletes: Vec<&AuditRequest> = requests
        .iter()
        .filter(in_hold)
        .filter(|r| r.verb == "delete")
        .collect();
    let refused = hold_deletes.iter().filter(|r| r.code == 403).count();
    let mut per_min: BTreeMap<u64, usize> = BTreeMap::new();
    for r in &hold_deletes {
        let m = r.at.duration_since(cut_wall).unwrap_or_default().as_secs() / 60;
        *per_min.entry(m).or_default() += 1;
    }
    let minutes = plan.hold.as_secs().div_ceil(60);
    let per_min: Vec<usize> = (0..minutes)
        .map(|m| *per_min.get(&m).unwrap_or(&0))
        .collect();
    let hold_other: BTreeMap<String, usize> =
        requests
            .iter()
            .filter(in_hold)
            .fold(BTreeMap::new(), |mut m, r| {
                *m.entry(r.verb.clone()).or_default() += 1;
                m
            });
    let resumed_at = k
        .deletes_in(plan.ns)
        .iter()
        .filter(|d| d.code == 200 && d.at >= back_wall)
        .map(|d| d.at)
        .max();
    let samples = std::mem::take(&mut *samples.lock().unwrap());
    let (changes, led, gap_ms) = leadership(&samples, cut, back);
    let (changes_after, _, _) = leadership(&samples, back, done);
    let forbidden: u64 = statuses
        .iter()
        .map(|s| s["outcomes"]["forbidden"].as_u64().unwrap_or(0))
        .sum();
    let restarts: u64 = statuses
        .iter()
        .map(|s| s["restarts"].as_u64().unwrap_or(0))
        .sum();
    // The alerts of docs/alerts/podsweep-rules.yaml whose expressions the statuses met.
    let mut alerts = Vec::new();
    if forbidden > 0 {
        alerts.push(if plan.hold >= Duration::from_secs(300) {
            "PodsweepDeleteForbidden"
        } else {
            "PodsweepDeleteForbidden (pending: the hold is shorter than its 5 min)"
        });
    }
    if samples.pauses.contains("step_down_hold") {
        alerts.push("PodsweepLeaderSteppedDown");
    }
    if samples.oldest_overdue_ms > 60_000 {
        alerts.push("PodsweepLeaderStalled");
    }
    if gap_ms >= 300_000 {
        alerts.push("PodsweepScopeLeaderless");
    }
    // One accepted DELETE per pod, every pod gone, no restart.
    let mut per_pod: BTreeMap<String, usize> = BTreeMap::new();
    for d in k
        .deletes_in(plan.ns)
        .iter()
        .filter(|d| d.code == 200 && d.user != "podsweep-admin")
    {
        *per_pod.entry(d.name.clone()).or_default() += 1;
    }
    let twice = per_pod.values().filter(|n| **n > 1).count();
    let figures = json!({
        "bench": "emergency_stop", "api_server": format!("kube-apiserver {}", k.version),
        "commit": podsweep::build_info::COMMIT,
        "code": std::env::var("PODSWEEP_STOP_LABEL").unwrap_or_else(|_| "this commit".into()),
        "servers": SERVERS, "ha": "zookeeper (one real server)", "mode": "self-watch (daemon)",
        "pods": plan.pods, "create_s": (create_s * 10.0).round() / 10.0,
        "settings": plan.keys.iter().map(|(k, v)| (k.rsplit('.').take(2).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("."), v.clone())).collect::<BTreeMap<_, _>>(),
        "accepted_before_cut": before_cut,
        "hold_s": plan.hold.as_secs(),
        "deletes_in_hold": hold_deletes.len(), "refused_in_hold": refused,
        "deletes_per_min_in_hold": per_min,
        "pod_requests_in_hold_by_verb": hold_other,
        "leadership_changes_in_hold": changes, "leaders_in_hold": led,
        "longest_leaderless_ms_in_hold": gap_ms,
        "leadership_changes_after": changes_after,
        "unhealthy_reasons_seen": samples.health, "pauses_seen": samples.pauses,
        "alerts": alerts,
        "resume_s": resumed_at.and_then(|t| t.duration_since(back_wall).ok()).map(|d| (d.as_secs_f64() * 10.0).round() / 10.0),
        "accepted": per_pod.values().sum::<usize>(), "pods_deleted_twice": twice, "restarts": restarts,
        "run_s": (wall(done, t0, wall0).duration_since(wall0).unwrap_or_default().as_secs_f64()).round(),
    });
    assert_eq!(twice, 0, "{figures}");
    assert_eq!(per_pod.len(), plan.pods, "{figures}");
    assert_eq!(restarts, 0, "{figures}");
    assert!(k.pods(plan.ns).await.is_empty(), "{figures}");
    figures
}

/// 200 pods, `forbidden.retryInterval` 3 s, `ha.stepDownAfter` 10 s, DELETEs paced at 40 a
/// second (so the cut falls mid-drain), `delete` away for 40 s. Before issue 32 every due pod
/// was refused again every 3 s, by every leader in turn; now at most a few DELETEs per leadership
/// term and one probe every ~3 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_emergency_stop_holds_the_request_rate_and_resumes_without_restart() {
    let hold = Duration::from_secs(40);
    let figures = emergency_stop(Plan {
        ns: "stop-small",
        pods: 200,
        cut_after: 40,
        hold,
        keys: vec![
            (keys::FORBIDDEN_RETRY, "PT3S".into()),
            (keys::STEP_DOWN_AFTER, "PT10S".into()),
            (keys::RATE_QPS, "40".into()),
        ],
    })
    .await;
    println!("{figures}");
    // The DELETEs in flight at the cut (at most maxInFlight, 64), two per leadership term, and
    // one probe per 2.7 s at the least.
    let terms = figures["leadership_changes_in_hold"].as_u64().unwrap_or(0) as usize + 1;
    let bound = 64 + 2 * terms + (hold.as_secs_f64() / 2.7).ceil() as usize;
    let refused = figures["refused_in_hold"].as_u64().unwrap() as usize;
    assert!(
        refused <= bound,
        "{refused} refused DELETEs > {bound}: {figures}"
    );
    let resume = figures["resume_s"].as_f64().unwrap();
    assert!(resume <= 30.0, "{figures}");
}

/// The 5,000-pod emergency stop with the default timings (`forbidden.retryInterval` 1 min,
/// `ha.stepDownAfter` 2 min, the adaptive pace without a ceiling): the figures of
/// docs/performance.md and docs/rollout.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "real kube-apiserver, 5,000 pods and minutes: cargo test --test emergency_stop -- --ignored --nocapture"]
async fn an_emergency_stop_of_5000_pods() {
    let pods: usize = std::env::var("PODSWEEP_STOP_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let hold: u64 = std::env::var("PODSWEEP_STOP_HOLD_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(420);
    let figures = emergency_stop(Plan {
        ns: "stop-large",
        pods,
        cut_after: pods / 5,
        hold: Duration::from_secs(hold),
        keys: vec![],
    })
    .await;
    println!("{figures}");
}

/// A ValidatingAdmissionPolicy that refuses every DELETE of a pod in `ns` (403, whoever asks),
/// as an admission webhook or policy that freezes deletions would; removed by deleting it.
async fn freeze_deletes(k: &RealKube, ns: &str) {
    use k8s_openapi::api::admissionregistration::v1::{
        ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    };
    use kube::api::{Api, PostParams};
    let admin = k.admin().await;
    let name = format!("freeze-{ns}");
    let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["DELETE"], "resources": ["pods"]}]},
            "validations": [{"expression": "false", "reason": "Forbidden",
                "message": "pod deletions are frozen in this namespace"}]
        }
    }))
    .unwrap();
    let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}}
    }))
    .unwrap();
    Api::<ValidatingAdmissionPolicy>::all(admin.clone())
        .create(&PostParams::default(), &policy)
        .await
        .expect("policy");
    Api::<ValidatingAdmissionPolicyBinding>::all(admin.clone())
        .create(&PostParams::default(), &binding)
        .await
        .expect("binding");
}

async fn thaw_deletes(k: &RealKube, ns: &str) {
    use k8s_openapi::api::admissionregistration::v1::ValidatingAdmissionPolicyBinding;
    use kube::api::Api;
    Api::<ValidatingAdmissionPolicyBinding>::all(k.admin().await)
        .delete(&format!("freeze-{ns}"), &Default::default())
        .await
        .expect("delete binding");
}

/// Whether a dry-run DELETE of pod `name` by the account of `token` is refused (403). (kube-rs
/// says `dryRun` in the body only, so the audit log shows it as a DELETE: ask as the admin,
/// whose requests the counts leave out.)
async fn refused(k: &RealKube, ns: &str, name: &str, token: &str) -> bool {
    use k8s_openapi::api::core::v1::Pod;
    let pods: kube::Api<Pod> = kube::Api::namespaced(k.client(token).await, ns);
    let dp = kube::api::DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    matches!(pods.delete(name, &dp).await, Err(kube::Error::Api(e)) if e.code == 403)
}

/// Admission refuses every DELETE (RBAC allows them): the leader asks the API server, learns
/// that its account may delete, and keeps the leadership past `ha.stepDownAfter` instead of
/// handing it to a server that would be refused the same way. Lifted, the pods go, once each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_admission_refusal_does_not_rotate_the_leadership() {
    let k = RealKube::shared();
    let ns = "stop-admission";
    k.namespace(ns).await;
    let names: Vec<String> = (0..SERVERS).map(|i| format!("{ns}-{i}")).collect();
    let tokens = k.role_tokens(ns, "podsweep", &names).await;
    let pods = 30;
    backlog(k, ns, pods).await;
    freeze_deletes(k, ns).await;
    assert!(
        eventually(Duration::from_secs(30), || futures::executor::block_on(
            refused(k, ns, "stop-00000", &k.admin_token)
        ))
        .await,
        "the policy refuses DELETEs"
    );
    let zk = ZkServer::start();
    let plan = Plan {
        ns,
        pods,
        cut_after: 0,
        hold: Duration::ZERO,
        keys: vec![
            (keys::FORBIDDEN_RETRY, "PT2S".into()),
            (keys::STEP_DOWN_AFTER, "PT5S".into()),
        ],
    };
    let engines = engines(&plan, &zk, &tokens);
    let samples = Arc::new(Mutex::new(Samples::default()));
    let sampling = sampler(engines.clone(), ns, samples.clone());
    // The leader decides at ha.stepDownAfter (5 s) of refusals: it stays, saying why.
    let stays = |e: &Arc<Engine>| {
        status(e, ns)["health_reasons"].as_array().is_some_and(|r| {
            r.iter()
                .any(|r| r.as_str().is_some_and(|r| r.contains("not stepping down")))
        })
    };
    let decided = eventually(Duration::from_secs(60), || engines.iter().any(stays)).await;
    let t = Instant::now();
    // Two more windows: still the same leader.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let (changes, led, _) = leadership(&samples.lock().unwrap(), t, Instant::now());
    let all = leadership(
        &samples.lock().unwrap(),
        Instant::now() - Duration::from_secs(3600),
        Instant::now(),
    );
    let statuses: Vec<Value> = engines.iter().map(|e| status(e, ns)).collect();
    let reasons: Vec<&Value> = statuses.iter().map(|s| &s["health_reasons"]).collect();
    println!("decided {decided}; after it {changes} changes, leaders {led:?}; whole run {all:?}; reasons {reasons:?}");
    assert!(
        decided,
        "no leader kept the scope: {reasons:?} (whole run {all:?})"
    );
    assert_eq!(changes, 0, "{led:?}");
    assert_eq!(all.0, 0, "not one step-down: {all:?}");
    let deletes = k.deletes_in(ns);
    println!("{} DELETEs refused so far", deletes.len());
    thaw_deletes(k, ns).await;
    assert!(
        eventually(Duration::from_secs(120), || k
            .deletes_in(ns)
            .iter()
            .filter(|d| d.code == 200 && d.user != "podsweep-admin")
            .count()
            >= pods)
        .await
    );
    sampling.abort();
    for e in &engines {
        e.close_async(Duration::from_secs(5)).await;
    }
    let ok: Vec<_> = k
        .deletes_in(ns)
        .into_iter()
        .filter(|d| d.code == 200 && d.user != "podsweep-admin")
        .collect();
    assert_eq!(ok.len(), pods, "one accepted DELETE per pod");
    assert!(k.pods(ns).await.is_empty());
}
