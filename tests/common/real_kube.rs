//! A real kube-apiserver for the Rust suites: `scripts/kube up` on loopback (etcd + kube-apiserver,
//! TLS, RBAC, an audit log of every pod request), one per test process, stopped when the process
//! ends (`--owner-pid`). Servers act under ServiceAccounts of their own (a token each, from the
//! TokenRequest API), so the audit log tells which server sent each request.
//!
//! [`RealKube::cluster`] is the full control plane (`scripts/kube up --cluster`: the controller
//! manager, the scheduler and KWOK nodes beside the API server), also one per test process and
//! stopped with it: the controllers, not the test kit, make each namespace's default
//! ServiceAccount and `kube-root-ca.crt` there.
//!
//! A suite that needs it and cannot start it fails (the message says why): it never passes
//! without having run.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{Api, PostParams};
use serde_json::json;

/// The namespace of the servers' ServiceAccounts.
pub const SERVERS_NS: &str = "podsweep-servers";

pub struct RealKube {
    pub dir: PathBuf,
    pub server: String,
    pub admin_token: String,
    pub ca: PathBuf,
    pub audit: PathBuf,
    pub version: String,
    /// The full control plane (`--cluster`): the names of its KWOK nodes; empty otherwise.
    pub nodes: Vec<String>,
    /// The etcd binary it runs on, when not the environment's (`RealKube::start_on_etcd`).
    pub etcd: Option<String>,
}

/// PodGC's threshold on [`RealKube::cluster`]: a test that wants PodGC at work puts more
/// terminated pods than this in the cluster at once; the others stay below it.
pub const CLUSTER_POD_GC_THRESHOLD: usize = 10;

/// One DELETE of a pod, from the audit log.
#[derive(Clone, Debug)]
pub struct AuditDelete {
    pub user: String,
    pub namespace: String,
    pub name: String,
    pub code: u16,
    pub dry_run: bool,
    /// `requestReceivedTimestamp`, as the API server saw it.
    pub at: SystemTime,
}

impl RealKube {
    /// The process's API server, started on first use.
    pub fn shared() -> &'static RealKube {
        static ONE: OnceLock<RealKube> = OnceLock::new();
        ONE.get_or_init(|| Self::up("podsweep-real-kube-", &[]))
    }

    /// The process's full control plane (API server, controller manager, scheduler, kwok with
    /// two nodes; PodGC's threshold [`CLUSTER_POD_GC_THRESHOLD`]), started on first use.
    pub fn cluster() -> &'static RealKube {
        static ONE: OnceLock<RealKube> = OnceLock::new();
        ONE.get_or_init(|| {
            let gc = CLUSTER_POD_GC_THRESHOLD.to_string();
            Self::up(
                "podsweep-real-cluster-",
                &["--cluster", "--pod-gc-threshold", &gc, "--nodes", "2"],
            )
        })
    }

    /// A fresh API server of its own (a bench run's), stopped by [`RealKube::stop`] or with the
    /// process.
    pub fn fresh(prefix: &str) -> RealKube {
        Self::up(prefix, &[])
    }

    /// Stops what [`RealKube::fresh`] started (`scripts/kube down`, each process by its PID) and
    /// removes its directory.
    pub fn stop(&self) {
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let _ = Command::new(repo.join("scripts/kube"))
            .arg("down")
            .arg(&self.dir)
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// The kube-apiserver's CPU time so far (user + system, from `/proc/<pid>/stat`), in seconds.
    pub fn apiserver_cpu_s(&self) -> Option<f64> {
        let pid = std::fs::read_to_string(self.dir.join("kube-apiserver.pid")).ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).ok()?;
        // Fields after the command's closing parenthesis: state is the 3rd field, utime the 14th.
        let rest = stat.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
        Some(ticks / 100.0)
    }

    pub(super) fn up(prefix: &str, extra: &[&str]) -> RealKube {
        Self::up_env(prefix, extra, &[])
    }

    /// [`RealKube::up`] with `env` added to scripts/kube's environment (e.g. `PODSWEEP_ETCD`).
    pub(super) fn up_env(prefix: &str, extra: &[&str], env: &[(&str, &str)]) -> RealKube {
        // The directories of earlier test processes that have ended: each holds an etcd data
        // directory and an audit log. Not while a process it names still runs: the watchdog of
        // `scripts/kube up --owner-pid` reads the servers' PID files there up to a second after
        // its owner ended (removed before, an API server outlived its test process).
        if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(pid) = name.strip_prefix(prefix) else {
                    continue;
                };
                if pid.parse::<u32>().is_ok()
                    && !PathBuf::from(format!("/proc/{pid}")).exists()
                    && !runs_a_process(&e.path())
                {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let dir = std::env::temp_dir().join(format!("{prefix}{}", std::process::id()));
        // --owner-pid: scripts/kube's watchdog stops every process it started (by PID) once this
        // test process ends, however it ends (a static is never dropped).
        let out = Command::new(repo.join("scripts/kube"))
            .arg("up")
            .arg(&dir)
            .arg("--owner-pid")
            .arg(std::process::id().to_string())
            .args(extra)
            .envs(env.iter().copied())
            .output()
            .expect("run scripts/kube up");
        assert!(
            out.status.success(),
            "scripts/kube up {extra:?} failed (a real kube-apiserver is needed: scripts/setup kube \
             builds it; --cluster also needs scripts/kube build --cluster): {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let env: HashMap<String, String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let get = |k: &str| {
            env.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("{k} not in env"))
        };
        RealKube {
            dir,
            server: get("PODSWEEP_KUBE_SERVER"),
            admin_token: get("PODSWEEP_KUBE_TOKEN"),
            ca: PathBuf::from(get("PODSWEEP_KUBE_CA")),
            audit: PathBuf::from(get("PODSWEEP_KUBE_AUDIT")),
            version: get("PODSWEEP_KUBE_VERSION"),
            nodes: env
                .get("PODSWEEP_KUBE_NODES")
                .map(|n| n.split(',').map(str::to_owned).collect())
                .unwrap_or_default(),
            etcd: None,
        }
    }

    /// Whether this is the full control plane ([`RealKube::cluster`]).
    pub fn is_cluster(&self) -> bool {
        !self.nodes.is_empty()
    }

    /// Kyuubi's client keys for `token`.
    pub fn client_conf(&self, token: &str) -> Vec<(String, String)> {
        vec![
            (
                "kyuubi.kubernetes.master.address".into(),
                self.server.clone(),
            ),
            (
                "kyuubi.kubernetes.authenticate.oauthToken".into(),
                token.to_owned(),
            ),
            (
                "kyuubi.kubernetes.authenticate.caCertFile".into(),
                self.ca.display().to_string(),
            ),
        ]
    }

    pub async fn client(&self, token: &str) -> kube::Client {
        let conf: HashMap<String, String> = self.client_conf(token).into_iter().collect();
        let cfg = podsweep::kube_client::build_config(&conf)
            .await
            .expect("client config");
        kube::Client::try_from(cfg).expect("client")
    }

    pub async fn admin(&self) -> kube::Client {
        self.client(&self.admin_token).await
    }

    pub async fn namespace(&self, ns: &str) {
        let c = self.admin().await;
        let api: Api<Namespace> = Api::all(c.clone());
        let n: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
        let _ = api.create(&PostParams::default(), &n).await;
        if self.is_cluster() {
            // The controllers' work: the ServiceAccount controller's `default`, the root-CA
            // publisher's `kube-root-ca.crt` (the election key).
            let sas: Api<ServiceAccount> = Api::namespaced(c.clone(), ns);
            let cms: Api<ConfigMap> = Api::namespaced(c.clone(), ns);
            for _ in 0..300 {
                let sa = sas.get_opt("default").await.ok().flatten();
                let cm = cms.get_opt("kube-root-ca.crt").await.ok().flatten();
                if sa.is_some() && cm.is_some() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            panic!("{ns}: no default ServiceAccount or kube-root-ca.crt after 30 s");
        }
        // No controller-manager: every namespace needs its default ServiceAccount for pods.
        let sas: Api<ServiceAccount> = Api::namespaced(self.admin().await, ns);
        let sa: ServiceAccount =
            serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap();
        let _ = sas.create(&PostParams::default(), &sa).await;
        self.publish_root_ca(ns).await;
    }

    /// What kube-controller-manager's root CA publisher does in every namespace of a real
    /// cluster (this control plane runs no controller manager): the ConfigMap `kube-root-ca.crt`
    /// with the cluster's CA, whose digest is the scopes' election key.
    pub async fn publish_root_ca(&self, ns: &str) {
        let ca = std::fs::read_to_string(&self.ca).expect("the API server's CA");
        let cms: Api<ConfigMap> = Api::namespaced(self.admin().await, ns);
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "kube-root-ca.crt"},
            "data": {"ca.crt": ca}
        }))
        .unwrap();
        let _ = cms.create(&PostParams::default(), &cm).await;
    }

    /// The cluster part of a scope's election key on this API server.
    pub fn cluster_key(&self) -> String {
        let ca = std::fs::read_to_string(&self.ca).expect("the API server's CA");
        format!("cluster:{}", podsweep::kube_client::ca_digest(ca.trim()))
    }

    /// A ServiceAccount for a server (pods: get, list, watch, delete; the `kube-root-ca.crt`
    /// ConfigMap: get; events: create, patch), and a token for it.
    pub async fn server_token(&self, name: &str) -> String {
        self.token_with_role(name, "podsweep-server", true).await
    }

    /// [`RealKube::server_token`] for an account whose role lacks the rule on the
    /// `kube-root-ca.crt` ConfigMap (an RBAC change rolled out to some accounts only).
    pub async fn server_token_without_identity(&self, name: &str) -> String {
        self.token_with_role(name, "podsweep-server-no-identity", false)
            .await
    }

    async fn token_with_role(&self, name: &str, role_name: &str, identity: bool) -> String {
        self.namespace(SERVERS_NS).await;
        let admin = self.admin().await;
        let roles: Api<ClusterRole> = Api::all(admin.clone());
        let mut rules = vec![
            json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]}),
            json!({"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}),
        ];
        if identity {
            rules.push(json!({"apiGroups": [""], "resources": ["configmaps"],
                "resourceNames": ["kube-root-ca.crt"], "verbs": ["get"]}));
        }
        let role: ClusterRole =
            serde_json::from_value(json!({"metadata": {"name": role_name}, "rules": rules}))
                .unwrap();
        let _ = roles.create(&PostParams::default(), &role).await;
        let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
        let b: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": format!("podsweep-server-{name}")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": SERVERS_NS}]
        }))
        .unwrap();
        let _ = bindings.create(&PostParams::default(), &b).await;
        account_token(&admin, name).await
    }

    /// ServiceAccounts `names` for servers whose only grant on the pods of `ns` is the Role
    /// `role` there (pods: get, list, watch, delete; events: create, patch), bound by a
    /// RoleBinding each, with a token each. The Role's `delete` can be taken away and given back
    /// ([`RealKube::set_pod_delete`]): the emergency stop of docs/rollout.md.
    pub async fn role_tokens(&self, ns: &str, role: &str, names: &[String]) -> Vec<String> {
        use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
        self.namespace(SERVERS_NS).await;
        let admin = self.admin().await;
        let roles: Api<Role> = Api::namespaced(admin.clone(), ns);
        let _ = roles
            .create(&PostParams::default(), &role_of(role, true))
            .await;
        let mut tokens = Vec::new();
        for name in names {
            let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), ns);
            let b: RoleBinding = serde_json::from_value(json!({
                "metadata": {"name": format!("{role}-{name}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": SERVERS_NS}]
            }))
            .unwrap();
            let _ = bindings.create(&PostParams::default(), &b).await;
            tokens.push(account_token(&admin, name).await);
        }
        tokens
    }

    /// Takes `delete` out of the Role `role` of `ns` (or puts it back), as an operator's
    /// emergency stop does, then waits until the API server's authorizer says so for the
    /// account of `token` (RBAC changes reach it through an informer).
    pub async fn set_pod_delete(&self, ns: &str, role: &str, delete: bool, token: &str) {
        use k8s_openapi::api::rbac::v1::Role;
        let roles: Api<Role> = Api::namespaced(self.admin().await, ns);
        let mut r = roles.get(role).await.expect("role");
        r.rules = role_of(role, delete).rules;
        roles
            .replace(role, &PostParams::default(), &r)
            .await
            .expect("replace role");
        let client = self.client(token).await;
        let mut waited = 0;
        while self.may_delete(&client, ns).await != delete {
            waited += 1;
            assert!(waited < 300, "RBAC did not change within 30 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What the authorizer says of `delete pods` in `ns` for the client's account.
    pub async fn may_delete(&self, client: &kube::Client, ns: &str) -> bool {
        use k8s_openapi::api::authorization::v1::SelfSubjectAccessReview;
        let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
        let review: SelfSubjectAccessReview = serde_json::from_value(json!({
            "spec": {"resourceAttributes": {"namespace": ns, "verb": "delete", "resource": "pods"}}
        }))
        .unwrap();
        api.create(&PostParams::default(), &review)
            .await
            .ok()
            .and_then(|r| r.status)
            .is_some_and(|s| s.allowed)
    }

    /// Every request on pods (and their status) in `ns` in the audit log so far, by anyone.
    pub fn pod_requests(&self, ns: &str) -> Vec<AuditRequest> {
        let text = std::fs::read_to_string(&self.audit).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["stage"] == "ResponseComplete" && v["objectRef"]["namespace"] == ns)
            .map(|v| AuditRequest {
                user: v["user"]["username"].as_str().unwrap_or("").to_owned(),
                verb: v["verb"].as_str().unwrap_or("").to_owned(),
                code: v["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                at: audit_time(&v),
            })
            .collect()
    }

    /// The audit log's username of a server's ServiceAccount.
    pub fn user_of(name: &str) -> String {
        format!("system:serviceaccount:{SERVERS_NS}:{name}")
    }

    /// Creates an unscheduled Kyuubi Spark driver pod and sets its status to `phase` with the
    /// driver container terminated at `finished` (exit code 0 for Succeeded, 1 otherwise), as a
    /// kubelet would; returns its UID. `labels` and `annotations` are added.
    pub async fn terminated_pod(
        &self,
        ns: &str,
        name: &str,
        phase: &str,
        finished: SystemTime,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> String {
        let api: Api<Pod> = Api::namespaced(self.admin().await, ns);
        let uid = self.running_pod(ns, name, labels, annotations).await;
        let secs = finished
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let at = jiff::Timestamp::from_second(secs as i64)
            .unwrap()
            .to_string();
        let status = json!({"status": {
            "phase": phase,
            "containerStatuses": [{
                "name": "spark-kubernetes-driver", "image": "spark", "imageID": "", "ready": false,
                "restartCount": 0,
                "state": {"terminated": {"exitCode": if phase == "Succeeded" {0} else {1},
                    "startedAt": at, "finishedAt": at, "reason": "Completed"}}
            }]
        }});
        api.patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&status),
        )
        .await
        .expect("pod status");
        uid
    }

    /// Creates an unscheduled Kyuubi Spark driver pod (Pending); returns its UID.
    pub async fn running_pod(
        &self,
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> String {
        let api: Api<Pod> = Api::namespaced(self.admin().await, ns);
        let mut l: BTreeMap<String, String> = BTreeMap::new();
        l.insert("kyuubi-unique-tag".into(), format!("tag-{name}"));
        l.insert("spark-app-selector".into(), format!("spark-{name}"));
        for (k, v) in labels {
            l.insert((*k).into(), (*v).into());
        }
        let a: BTreeMap<String, String> = annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": l, "annotations": a},
            "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": "spark"}]}
        }))
        .unwrap();
        let made = api
            .create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
        made.metadata.uid.expect("uid")
    }

    /// Names of the pods left in `ns`.
    pub async fn pods(&self, ns: &str) -> Vec<String> {
        let api: Api<Pod> = Api::namespaced(self.admin().await, ns);
        api.list(&Default::default())
            .await
            .expect("list")
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect()
    }

    /// Every DELETE of a pod in the audit log so far.
    pub fn deletes(&self) -> Vec<AuditDelete> {
        let text = std::fs::read_to_string(&self.audit).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["verb"] == "delete" && v["objectRef"]["resource"] == "pods")
            .filter(|v| v["stage"] == "ResponseComplete")
            .map(|v| AuditDelete {
                user: v["user"]["username"].as_str().unwrap_or("").to_owned(),
                namespace: v["objectRef"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned(),
                name: v["objectRef"]["name"].as_str().unwrap_or("").to_owned(),
                code: v["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
                dry_run: v["requestURI"]
                    .as_str()
                    .unwrap_or("")
                    .contains("dryRun=All"),
                at: v["requestReceivedTimestamp"]
                    .as_str()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .map_or(SystemTime::UNIX_EPOCH, |t| {
                        SystemTime::UNIX_EPOCH
                            + Duration::from_micros(t.as_microsecond().max(0) as u64)
                    }),
            })
            .collect()
    }

    /// The DELETEs of pods in `ns`.
    pub fn deletes_in(&self, ns: &str) -> Vec<AuditDelete> {
        self.deletes()
            .into_iter()
            .filter(|d| d.namespace == ns)
            .collect()
    }
}

/// One request on pods, from the audit log.
#[derive(Clone, Debug)]
pub struct AuditRequest {
    pub user: String,
    pub verb: String,
    pub code: u16,
    pub at: SystemTime,
}

fn audit_time(v: &serde_json::Value) -> SystemTime {
    v["requestReceivedTimestamp"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map_or(SystemTime::UNIX_EPOCH, |t| {
            SystemTime::UNIX_EPOCH + Duration::from_micros(t.as_microsecond().max(0) as u64)
        })
}

/// A namespaced Role for podsweep's servers, with or without `delete` on pods.
/// The ServiceAccount `name` of the servers' namespace (created unless it exists) and a token of
/// it, valid for a day.
async fn account_token(admin: &kube::Client, name: &str) -> String {
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), SERVERS_NS);
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let _ = sas.create(&PostParams::default(), &sa).await;
    let req = TokenRequest {
        spec: Some(TokenRequestSpec {
            audiences: Some(vec![]),
            expiration_seconds: Some(24 * 3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let tr = sas
        .create_token_request(name, &PostParams::default(), &req)
        .await
        .expect("token request");
    tr.status.and_then(|s| s.token).expect("token")
}

/// Where a JSON line of a real-API test comes from: the commit, the date, the API server and
/// the machine's load (1 minute) as the line is written.
#[allow(dead_code)]
pub fn line_stamp() -> serde_json::Value {
    json!({
        "commit": podsweep::build_info::COMMIT,
        "date": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .and_then(|d| jiff::Timestamp::from_second(d.as_secs() as i64).ok())
            .map(|t| t.to_string()),
        "api_server": format!("kube-apiserver {}", RealKube::shared().version),
        "loadavg_1m": std::fs::read_to_string("/proc/loadavg").ok()
            .and_then(|l| l.split_whitespace().next().and_then(|v| v.parse::<f64>().ok())),
    })
}

fn role_of(name: &str, delete: bool) -> k8s_openapi::api::rbac::v1::Role {
    let mut verbs = vec!["get", "list", "watch"];
    if delete {
        verbs.push("delete");
    }
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": verbs},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
            // The cluster's identity (the election key), as docs/kyuubi-integration.md grants it.
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["kube-root-ca.crt"],
             "verbs": ["get"]}
        ]
    }))
    .unwrap()
}

/// Waits until `f` holds, up to `within`; false if it never did.
pub async fn eventually(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let until = std::time::Instant::now() + within;
    while std::time::Instant::now() < until {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    f()
}

/// Whether a `*.pid` file of `dir` (what `scripts/kube up` started there) names a running process.
fn runs_a_process(dir: &std::path::Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|e| {
        e.file_name().to_string_lossy().ends_with(".pid")
            && std::fs::read_to_string(e.path()).is_ok_and(|pid| {
                let pid = pid.trim();
                !pid.is_empty() && PathBuf::from(format!("/proc/{pid}")).exists()
            })
    })
}
