//! The full control plane's test kit ([`RealKube::cluster`]): Spark applications as Spark makes
//! them (a driver pod with Kyuubi's labels, its ConfigMap and headless Service owned by the
//! driver pod, executors created once the driver runs, each owned by it), run by KWOK on its
//! nodes; podsweep servers fed by their own informers; and the audit log read for every
//! resource (the garbage collector's and PodGC's requests told apart by their user).
//!
//! # Guarantees
//! - A driver pod is bound by the scheduler and run by KWOK (Pending -> Running -> Succeeded or
//!   Failed at the time its `podsweep.test/*-after` annotation says); nothing here writes a pod's
//!   status.
//! - [`audit`] reads only the API server's audit log: a request is counted when the API server
//!   answered it (stage `ResponseComplete`).
//!
//! # Caveats
//! - Executors never terminate by themselves (as if their driver had died without deleting
//!   them, which a clean Spark driver does): the garbage collector is what removes them.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Service};
use kube::api::{Api, PostParams};
use kube::runtime::watcher;
use podsweep::config::{keys, Settings};
use podsweep::engine::Engine;
use podsweep::kyuubi_state::{self, StateConfig};
use podsweep::model::EventKind;
use podsweep::scope::Scope;
use serde_json::{json, Value};

use super::real_kube::RealKube;

/// The users of the control plane's controllers in the audit log
/// (`--use-service-account-credentials`).
pub const GC_USER: &str = "system:serviceaccount:kube-system:generic-garbage-collector";
pub const PODGC_USER: &str = "system:serviceaccount:kube-system:pod-garbage-collector";
pub const ROOT_CA_USER: &str = "system:serviceaccount:kube-system:root-ca-cert-publisher";
/// KWOK finishing a graceful delete, as a kubelet does.
pub const KWOK_USER: &str = "kwok";

/// The full control plane's suites share one cluster (PodGC's threshold counts terminated pods
/// cluster-wide): each holds this lock for its whole run.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One request of the audit log.
#[derive(Clone, Debug)]
pub struct AuditEvent {
    pub verb: String,
    pub resource: String,
    /// `status` for `pods/status`; empty for the object itself.
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub user: String,
    pub code: u16,
    pub at: SystemTime,
}

/// Every answered request of the audit log so far (pods: every request; configmaps, services
/// and nodes: creates and deletes).
pub fn audit(k: &RealKube) -> Vec<AuditEvent> {
    let text = std::fs::read_to_string(&k.audit).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["stage"] == "ResponseComplete")
        .map(|v| {
            let s = |x: &Value| x.as_str().unwrap_or("").to_owned();
            AuditEvent {
                verb: s(&v["verb"]),
                resource: s(&v["objectRef"]["resource"]),
                subresource: s(&v["objectRef"]["subresource"]),
                namespace: s(&v["objectRef"]["namespace"]),
                name: s(&v["objectRef"]["name"]),
                user: s(&v["user"]["username"]),
                code: v["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                at: v["requestReceivedTimestamp"]
                    .as_str()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .map_or(SystemTime::UNIX_EPOCH, |t| {
                        SystemTime::UNIX_EPOCH
                            + Duration::from_micros(t.as_microsecond().max(0) as u64)
                    }),
            }
        })
        .collect()
}

/// The DELETEs of `resource` in `ns` in the audit log.
pub fn deletes(k: &RealKube, ns: &str, resource: &str) -> Vec<AuditEvent> {
    audit(k)
        .into_iter()
        .filter(|e| e.verb == "delete" && e.resource == resource && e.namespace == ns)
        .filter(|e| e.subresource.is_empty())
        .collect()
}

/// A Spark application's objects, named as Spark names them.
#[derive(Clone, Debug)]
pub struct SparkApp {
    pub driver: String,
    pub driver_uid: String,
    pub app_id: String,
    pub config_map: String,
    pub service: String,
    pub executors: Vec<String>,
    /// The KWOK node the scheduler bound the driver to.
    pub node: String,
}

/// What [`submit`] makes of an application.
pub struct AppSpec<'a> {
    pub executors: usize,
    /// The driver's annotations (e.g. `podsweep.test/succeed-after`, `podsweep.org/retain-period`).
    pub annotations: &'a [(&'a str, &'a str)],
    /// A node selector (`kubernetes.io/hostname`), if the driver must run on one node.
    pub node: Option<&'a str>,
}

fn owner(driver: &str, uid: &str) -> Value {
    json!([{"apiVersion": "v1", "kind": "Pod", "name": driver, "uid": uid, "controller": true}])
}

/// Submits application `name` as spark-submit and Spark's executor allocator do: the driver pod
/// (Kyuubi's `kyuubi-unique-tag`, Spark's labels), its ConfigMap and headless Service owned by
/// it, then, once KWOK runs the driver, its executors owned by it. Returns when every executor
/// runs too.
pub async fn submit(k: &RealKube, ns: &str, name: &str, spec: &AppSpec<'_>) -> SparkApp {
    let admin = k.admin().await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let app_id = format!("spark-{}", name.replace('-', ""));
    let annotations: BTreeMap<&str, &str> = spec.annotations.iter().copied().collect();
    let mut pod_spec = json!({
        "restartPolicy": "Never",
        "containers": [{"name": "spark-kubernetes-driver", "image": "apache/spark:3.5.6",
            "args": ["driver", "--class", "org.apache.spark.examples.SparkPi"]}]
    });
    if let Some(node) = spec.node {
        pod_spec["nodeSelector"] = json!({"kubernetes.io/hostname": node});
    }
    let driver: Pod = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-driver"), "annotations": annotations, "labels": {
            "kyuubi-unique-tag": format!("tag-{name}"), "spark-app-selector": app_id,
            "spark-app-name": name, "spark-role": "driver", "spark-version": "3.5.6"}},
        "spec": pod_spec
    }))
    .expect("driver pod");
    let made = pods
        .create(&PostParams::default(), &driver)
        .await
        .expect("create driver pod");
    let driver = made.metadata.name.clone().unwrap_or_default();
    let uid = made.metadata.uid.clone().expect("uid");
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": format!("{app_id}-conf-map"), "ownerReferences": owner(&driver, &uid),
            "labels": {"spark-app-selector": app_id}},
        "data": {"spark.properties": format!("spark.app.id={app_id}\n")}
    }))
    .expect("configmap");
    let config_map = cms
        .create(&PostParams::default(), &cm)
        .await
        .expect("create configmap")
        .metadata
        .name
        .unwrap_or_default();
    let svcs: Api<Service> = Api::namespaced(admin.clone(), ns);
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": format!("{name}-driver-svc"), "ownerReferences": owner(&driver, &uid)},
        "spec": {"clusterIP": "None", "selector": {"spark-app-selector": app_id, "spark-role": "driver"},
            "ports": [{"name": "driver-rpc-port", "port": 7078}, {"name": "blockmanager", "port": 7079},
                {"name": "spark-ui", "port": 4040}]}
    }))
    .expect("service");
    let service = svcs
        .create(&PostParams::default(), &svc)
        .await
        .expect("create service")
        .metadata
        .name
        .unwrap_or_default();
    let node = wait_phase(k, ns, &driver, &["Running", "Succeeded", "Failed"])
        .await
        .spec
        .and_then(|s| s.node_name)
        .unwrap_or_default();
    let mut executors = Vec::new();
    for i in 1..=spec.executors {
        let e: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-exec-{i}"), "ownerReferences": owner(&driver, &uid),
                "labels": {"spark-app-selector": app_id, "spark-app-name": name,
                    "spark-role": "executor", "spark-exec-id": i.to_string()}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "spark-kubernetes-executor",
                "image": "apache/spark:3.5.6", "args": ["executor"]}]}
        }))
        .expect("executor pod");
        let made = pods
            .create(&PostParams::default(), &e)
            .await
            .expect("create executor");
        executors.push(made.metadata.name.unwrap_or_default());
    }
    for e in &executors {
        wait_phase(k, ns, e, &["Running"]).await;
    }
    SparkApp {
        driver,
        driver_uid: uid,
        app_id,
        config_map,
        service,
        executors,
        node,
    }
}

/// Waits (60 s at most) until pod `name` is in one of `phases`; returns it.
pub async fn wait_phase(k: &RealKube, ns: &str, name: &str, phases: &[&str]) -> Pod {
    let pods: Api<Pod> = Api::namespaced(k.admin().await, ns);
    let start = Instant::now();
    loop {
        if let Ok(Some(p)) = pods.get_opt(name).await {
            let phase = p.status.as_ref().and_then(|s| s.phase.clone());
            if phase.is_some_and(|ph| phases.contains(&ph.as_str())) {
                return p;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{ns}/{name}: not {phases:?} after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The objects of `apps` still in the API (pods, ConfigMaps, Services), by name.
pub async fn left(k: &RealKube, ns: &str, apps: &[SparkApp]) -> Vec<String> {
    let admin = k.admin().await;
    let pods: Api<Pod> = Api::namespaced(admin.clone(), ns);
    let cms: Api<ConfigMap> = Api::namespaced(admin.clone(), ns);
    let svcs: Api<Service> = Api::namespaced(admin.clone(), ns);
    let mut out = Vec::new();
    for a in apps {
        for p in std::iter::once(&a.driver).chain(&a.executors) {
            if !matches!(pods.get_opt(p).await, Ok(None)) {
                out.push(format!("pod/{p}"));
            }
        }
        if !matches!(cms.get_opt(&a.config_map).await, Ok(None)) {
            out.push(format!("configmap/{}", a.config_map));
        }
        if !matches!(svcs.get_opt(&a.service).await, Ok(None)) {
            out.push(format!("service/{}", a.service));
        }
    }
    out
}

/// Waits until nothing of `apps` is left in the API; panics after `within`.
pub async fn wait_all_gone(k: &RealKube, ns: &str, apps: &[SparkApp], within: Duration) {
    let start = Instant::now();
    loop {
        let l = left(k, ns, apps).await;
        if l.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < within,
            "{ns}: left after {within:?}: {l:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Creates KWOK node `name` (KWOK manages it: the annotation its selector reads) and waits until
/// it is Ready with no `node.kubernetes.io/*` taint left.
pub async fn add_node(k: &RealKube, name: &str) {
    let nodes: Api<Node> = Api::all(k.admin().await);
    let n: Node = serde_json::from_value(json!({"metadata": {"name": name,
        "annotations": {"kwok.x-k8s.io/node": "fake"},
        "labels": {"type": "kwok", "kubernetes.io/hostname": name}}}))
    .expect("node");
    nodes
        .create(&PostParams::default(), &n)
        .await
        .expect("create node");
    let start = Instant::now();
    loop {
        if let Ok(n) = nodes.get(name).await {
            let ready = n
                .status
                .and_then(|s| s.conditions)
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let tainted = n
                .spec
                .and_then(|s| s.taints)
                .is_some_and(|t| t.iter().any(|t| t.key.starts_with("node.kubernetes.io/")));
            if ready && !tainted {
                return;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "node {name} not Ready after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Where a JSON line of the full control plane comes from: commit, date, the control plane's
/// versions, the machine's load.
pub fn stamp(k: &RealKube) -> Value {
    json!({
        "commit": podsweep::build_info::COMMIT,
        "date": SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .ok()
            .and_then(|d| jiff::Timestamp::from_second(d.as_secs() as i64).ok())
            .map(|t| t.to_string()),
        "api_server": format!("kube-apiserver {}", k.version),
        "control_plane": format!("kube-apiserver, kube-controller-manager, kube-scheduler {}; kwok 0.8.0; {} nodes", k.version, k.nodes.len()),
        "loadavg_1m": std::fs::read_to_string("/proc/loadavg").ok()
            .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse::<f64>().ok())),
    })
}

/// Seconds from `a` to `b` (negative when `b` is earlier), to the millisecond.
pub fn secs_between(a: SystemTime, b: SystemTime) -> f64 {
    let s = match b.duration_since(a) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    };
    (s * 1000.0).round() / 1000.0
}

/// A Kyuubi server: an engine fed by its own informer of the namespace's driver pods (a kube-rs
/// watch), as the patched `KubernetesApplicationOperation` feeds it.
pub struct Server {
    pub id: String,
    pub engine: Arc<Engine>,
    informer: tokio::task::JoinHandle<()>,
}

impl Server {
    pub async fn start(k: &RealKube, ns: &str, id: &str, extra: &[(&str, String)]) -> Server {
        Self::start_lagging(k, ns, id, extra, None).await
    }

    /// [`Server::start`] whose informer is late by `lag` with every deletion it sees (a pod's
    /// DELETED event, or a MODIFIED one with a deletionTimestamp), as a watch lagging behind a
    /// busy API server is: the injected fault of a lagging watch.
    pub async fn start_lagging(
        k: &RealKube,
        ns: &str,
        id: &str,
        extra: &[(&str, String)],
        lag: Option<Duration>,
    ) -> Server {
        let token = k.server_token(id).await;
        let mut conf: HashMap<String, String> = k.client_conf(&token).into_iter().collect();
        conf.insert(keys::KUBE_NAMESPACE.into(), ns.into());
        for (key, v) in extra {
            conf.insert((*key).into(), v.clone());
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
                let deletion =
                    kind == EventKind::Delete || pod.metadata.deletion_timestamp.is_some();
                if let Some(obs) = kyuubi_state::observation(&pod, &state, kind) {
                    match lag {
                        Some(lag) if deletion => {
                            let (feed, scope) = (feed.clone(), scope.clone());
                            tokio::spawn(async move {
                                tokio::time::sleep(lag).await;
                                let _ = feed.observe(scope, obs);
                            });
                        }
                        _ => {
                            let _ = feed.observe(scope.clone(), obs);
                        }
                    }
                }
            }
        });
        Server {
            id: id.to_owned(),
            engine,
            informer,
        }
    }

    pub fn status(&self, ns: &str) -> Value {
        serde_json::from_str(&self.engine.status_json(&Scope::new(None, Some(ns))))
            .unwrap_or(Value::Null)
    }

    pub fn user(&self) -> String {
        RealKube::user_of(&self.id)
    }

    pub async fn stop(self) {
        self.informer.abort();
        self.engine.close_async(Duration::from_secs(5)).await;
    }
}

/// `n` servers of namespace `ns` (ids `<ns>-<i>`), each with `extra` settings.
pub async fn fleet(k: &RealKube, ns: &str, n: usize, extra: &[(&str, String)]) -> Vec<Server> {
    k.namespace(ns).await;
    let mut out = Vec::new();
    for i in 0..n {
        out.push(Server::start(k, ns, &format!("{ns}-{i}"), extra).await);
    }
    out
}

/// The index of the one server leading `ns` (30 s at most).
pub async fn leader(servers: &[Server], ns: &str) -> usize {
    for _ in 0..300 {
        let leading: Vec<usize> = (0..servers.len())
            .filter(|i| servers[*i].status(ns)["leadership"] == "LEADING")
            .collect();
        if leading.len() == 1 {
            return leading[0];
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no single leader of {ns}");
}

/// The sum of a numeric status field over `servers`.
pub fn sum(servers: &[Server], ns: &str, field: &str) -> u64 {
    servers
        .iter()
        .map(|s| s.status(ns)[field].as_u64().unwrap_or(0))
        .sum()
}

/// The sum of outcome `class` (e.g. `accepted`, `already_absent`) over `servers`.
pub fn outcomes(servers: &[Server], ns: &str, class: &str) -> u64 {
    servers
        .iter()
        .map(|s| s.status(ns)["outcomes"][class].as_u64().unwrap_or(0))
        .sum()
}

/// A fleet's settings: ZooKeeper at `zk`, cleanup kind ALL, retain 1 s, then `more`.
pub fn settings(
    zk: &super::zk::ZkServer,
    more: &[(&'static str, &str)],
) -> Vec<(&'static str, String)> {
    let mut out = vec![
        (keys::HA_ADDRESSES, zk.addr()),
        (keys::CLEANUP_KIND, "ALL".to_owned()),
        (keys::RETAIN_PERIOD, "PT1S".to_owned()),
    ];
    for (key, v) in more {
        out.retain(|(k, _)| k != key);
        out.push((key, (*v).to_owned()));
    }
    out
}

/// Per pod of `ns`, the codes of the DELETEs any of `users` sent, from the audit log.
pub fn podsweep_deletes(k: &RealKube, ns: &str, users: &[String]) -> BTreeMap<String, Vec<u16>> {
    let mut out: BTreeMap<String, Vec<u16>> = BTreeMap::new();
    for d in deletes(k, ns, "pods") {
        if users.contains(&d.user) {
            out.entry(d.name).or_default().push(d.code);
        }
    }
    out
}

/// [`submit`] for each of `names`, one after the other.
pub async fn apps(k: &RealKube, ns: &str, names: &[String], spec: &AppSpec<'_>) -> Vec<SparkApp> {
    let mut out = Vec::new();
    for n in names {
        out.push(submit(k, ns, n, spec).await);
    }
    out
}
