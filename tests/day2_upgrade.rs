//! Issue 32, item 2: a rolling upgrade from podsweep 0.1.0 (commit 5e75a3a, whose elections were
//! keyed by the API server's URL) to this build, and the rollback, on a real kube-apiserver and a
//! real ZooKeeper, with the standalone daemon of each build: three daemons, replaced one by one
//! by the other build and back, terminated driver pods arriving throughout; every pod gets one
//! DELETE (the API server's audit log).
//!
//! The 0.1.0 daemon is built by `scripts/setup previous` (part of `scripts/setup all`) into the
//! tool cache; `PODSWEEP_PREVIOUS_DAEMON` names another. Without it the test fails, naming the
//! command: it never passes without having run.
//!
//! Before (`ha.legacyElection=false`: this build elects under the cluster's key alone, as the
//! builds between 0.1.0 and this one did under the namespace's): the two builds lead apart, two
//! DELETEs for many pods while both run; the figure is printed by the second test.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use common::real_kube::{line_stamp, RealKube};
use common::zk::ZkServer;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

const NEW: &str = env!("CARGO_BIN_EXE_podsweep");
const WITHIN: Duration = Duration::from_secs(90);

fn previous() -> PathBuf {
    if let Some(p) = std::env::var_os("PODSWEEP_PREVIOUS_DAEMON").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let tools = std::env::var_os("PODSWEEP_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
                .join(".cache/podsweep-tools")
        });
    let p = tools.join("podsweep-0.1.0-5e75a3a/podsweep");
    assert!(
        p.is_file(),
        "podsweep 0.1.0's daemon is not built ({}): run scripts/setup previous",
        p.display()
    );
    p
}

/// One daemon process of either build.
struct Daemon {
    name: String,
    build: &'static str,
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Daemon {
    async fn start(bin: &Path, build: &'static str, name: &str, conf: &str) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kyuubi-defaults.conf");
        std::fs::write(&file, conf).unwrap();
        let stderr = dir.path().join("stderr.log");
        let mut child = Command::new(bin)
            .arg("--config")
            .arg(&file)
            .args(["--listen", "127.0.0.1:0", "--server-id", name])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .kill_on_drop(true)
            .spawn()
            .expect("a podsweep daemon");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the listening line in time")
            .unwrap()
            .unwrap_or_else(|| {
                panic!(
                    "{name}: no line; stderr:\n{}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                )
            });
        let url = line
            .strip_prefix("podsweep listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Daemon {
            name: name.to_owned(),
            build,
            child,
            url,
            _dir: dir,
        }
    }

    async fn status(&self, ns: &str) -> Value {
        common::daemon_proc::scope_status(&self.url, ns).await
    }

    async fn leads(&self, ns: &str) -> bool {
        self.status(ns).await["leadership"] == "LEADING"
    }

    /// SIGTERM, as a rolling update stops a pod; waits for the exit.
    async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
    }
}

fn conf(ns: &str, zk: &str, token: &str, extra: &str) -> String {
    let k = RealKube::shared();
    let client: String = k
        .client_conf(token)
        .into_iter()
        .map(|(key, v)| format!("{key}={v}\n"))
        .collect();
    format!(
        "{client}kyuubi.kubernetes.namespace={ns}\n\
         kyuubi.kubernetes.client.initialize.list=:{ns}\n\
         kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind=NONE\n\
         kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.kind=ALL\n\
         kyuubi.kubernetes.terminatedApplicationRetainPeriod=PT1S\n\
         kyuubi.ha.addresses={zk}\n\
         kyuubi.ha.namespace=kyuubi-{ns}\n\
         kyuubi.ha.zookeeper.session.timeout=6000\n{extra}"
    )
}

/// Per pod, the DELETE requests of the audit log (dry-run ones aside).
fn deletes_per_pod(ns: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for d in RealKube::shared().deletes_in(ns) {
        if !d.dry_run {
            *out.entry(d.name).or_insert(0) += 1;
        }
    }
    out
}

/// Creates `n` terminated driver pods named `<prefix>-<i>` and waits until they are gone.
async fn wave(ns: &str, prefix: &str, n: usize) -> Vec<String> {
    let k = RealKube::shared();
    let now = SystemTime::now();
    let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
    for name in &names {
        k.terminated_pod(ns, name, "Succeeded", now, &[], &[]).await;
    }
    let api: Api<Pod> = Api::namespaced(k.admin().await, ns);
    let start = Instant::now();
    loop {
        let left = api
            .list(&Default::default())
            .await
            .map(|l| {
                l.items
                    .iter()
                    .filter(|p| {
                        p.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with(&format!("{prefix}-")))
                    })
                    .count()
            })
            .unwrap_or(usize::MAX);
        if left == 0 {
            return names;
        }
        assert!(
            start.elapsed() < WITHIN,
            "{ns}: {left} pods of {prefix} left"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until exactly one daemon leads (or, with `apart`, at least one); the first leader's
/// index.
async fn one_leader(daemons: &[Daemon], ns: &str, apart: bool) -> usize {
    let start = Instant::now();
    loop {
        let mut leading = Vec::new();
        for (i, d) in daemons.iter().enumerate() {
            if d.leads(ns).await {
                leading.push(i);
            }
        }
        if leading.len() == 1 || (apart && !leading.is_empty()) {
            return leading[0];
        }
        assert!(start.elapsed() < WITHIN, "{ns}: leaders {leading:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Three daemons of `from`, replaced one by one by `to` and then back, a wave of pods after each
/// replacement; returns (pods, DELETE requests, pods deleted more than once).
async fn roll(ns: &str, extra_new: &str, apart: bool) -> (usize, usize, usize, Vec<Value>) {
    let k = RealKube::shared();
    k.namespace(ns).await;
    let zk = ZkServer::start();
    let old = previous();
    let mut tokens = Vec::new();
    for i in 0..3 {
        tokens.push(k.server_token(&format!("{ns}-{i}")).await);
    }
    let start_as = |build: &'static str, i: usize| {
        let (bin, extra) = if build == "0.1.0" {
            (old.clone(), String::new())
        } else {
            (PathBuf::from(NEW), extra_new.to_owned())
        };
        let conf = conf(ns, &zk.addr(), &tokens[i], &extra);
        let name = format!("{ns}-{i}");
        async move { Daemon::start(&bin, build, &name, &conf).await }
    };
    let mut daemons = Vec::new();
    for i in 0..3 {
        daemons.push(start_as("0.1.0", i).await);
    }
    let mut steps = Vec::new();
    let mut pods = 0;
    one_leader(&daemons, ns, apart).await;
    pods += wave(ns, "all-old", 10).await.len();
    // The rolling upgrade (highest index first, as a StatefulSet rolls), then the rollback.
    let plan: [(usize, &'static str); 6] = [
        (2, "this"),
        (1, "this"),
        (0, "this"),
        (0, "0.1.0"),
        (1, "0.1.0"),
        (2, "0.1.0"),
    ];
    for (n, (i, build)) in plan.into_iter().enumerate() {
        let stopped = std::mem::replace(&mut daemons[i], start_as(build, i).await);
        stopped.stop().await;
        let leader = one_leader(&daemons, ns, apart).await;
        let builds: Vec<&str> = daemons.iter().map(|d| d.build).collect();
        pods += wave(ns, &format!("step-{n}"), 10).await.len();
        steps.push(json!({"builds": builds, "leader": daemons[leader].name,
            "leader_build": daemons[leader].build}));
    }
    for d in daemons {
        d.stop().await;
    }
    let per_pod = deletes_per_pod(ns);
    let twice = per_pod.values().filter(|n| **n > 1).count();
    (pods, per_pod.values().sum(), twice, steps)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_upgrade_from_0_1_and_back_deletes_every_pod_once() {
    let (pods, requests, twice, steps) = roll("d2-upgrade", "", false).await;
    let line = json!({"test": "day2", "case": "rolling_upgrade_from_0.1.0", "stamp": line_stamp(),
        "previous": "0.1.0 (5e75a3a)", "pods": pods, "delete_requests": requests,
        "pods_deleted_twice": twice, "steps": steps});
    println!("{line}");
    assert_eq!((requests, twice), (pods, 0), "{line}");
}

/// What the upgrade costs without joining 0.1's election first (the figure before the fix): while
/// both builds run, each leads in its own election and pods are deleted twice. A demonstration,
/// not part of the suite: `cargo test --test day2_upgrade -- --ignored`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "the figure before the fix: cargo test --test day2_upgrade -- --ignored"]
async fn without_the_legacy_election_both_builds_lead_during_the_upgrade() {
    let (pods, requests, twice, steps) = roll(
        "d2-upgrade-apart",
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.legacyElection=false\n",
        true,
    )
    .await;
    let line = json!({"test": "day2", "case": "rolling_upgrade_without_legacy_election",
        "stamp": line_stamp(), "pods": pods, "delete_requests": requests, "pods_deleted_twice": twice,
        "steps": steps});
    println!("{line}");
    assert!(twice > 0, "two leaders while both builds run: {line}");
}
