//! `podsweep status` and `podsweep uninstall` against real ZooKeeper and etcd: a fleet of three
//! servers campaigning in two scopes, read from the HA backend alone by the binary an operator
//! runs (`--json` and the table), after a leader leaves, and removed once every server stopped.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::etcd::EtcdServer;
use common::fixture::observation;
use common::pods_api::{cluster_key, wait_for, PodsApi};
use common::zk::ZkServer;
use podsweep::config::{keys, Settings, ETCD_CLIENT_CLASS};
use podsweep::election::Leadership;
use podsweep::engine::Engine;
use podsweep::model::{AppState, EventKind};
use podsweep::scope::Scope;
use serde_json::Value;

const NAMESPACES: [&str; 2] = ["spark-a", "spark-b"];
const SERVERS: [&str; 3] = ["kyuubi-0:10009", "kyuubi-1:10009", "kyuubi-2:10009"];
const LONG: Duration = Duration::from_secs(40);
/// A server that campaigns in no scope.
const IDLE: &str = "kyuubi-3:10009";

fn conf_pairs(api: &PodsApi, ha: &[(String, String)]) -> Vec<(String, String)> {
    let mut pairs: Vec<(String, String)> = [
        (keys::CLEANUP_KIND, "ALL"),
        ("kyuubi.kubernetes.master.address", api.url.as_str()),
        (keys::HA_NAMESPACE, "status_cli"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    pairs.extend(ha.iter().cloned());
    pairs
}

/// A server as the patched Kyuubi runs it: its informer has seen one running driver pod in each
/// namespace, so it campaigns in both scopes.
fn server(pairs: &[(String, String)], id: &str) -> Arc<Engine> {
    let raw: HashMap<String, String> = pairs.iter().cloned().collect();
    let settings = Settings::from_map(raw).unwrap();
    let e = Arc::new(Engine::new(settings, id, tokio::runtime::Handle::current()).unwrap());
    for (i, ns) in NAMESPACES.iter().enumerate() {
        let uid = format!("00000000-0000-4000-8000-00000000000{i}");
        e.observe(
            Scope::new(None, Some(ns)),
            observation(&uid, EventKind::Add, AppState::Running),
        )
        .unwrap();
    }
    e
}

fn leader_of(servers: &[(String, Arc<Engine>)], ns: &str) -> Option<String> {
    let scope = Scope::new(None, Some(ns));
    let leading: Vec<&String> = servers
        .iter()
        .filter(|(_, e)| e.leadership(&scope) == Some(Leadership::Leading))
        .map(|(id, _)| id)
        .collect();
    (leading.len() == 1).then(|| leading[0].clone())
}

fn write_conf(pairs: &[(String, String)], name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("podsweep-status-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("kyuubi-defaults.conf");
    let text: String = pairs.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs the binary; returns (exit status, stdout, stderr).
fn podsweep(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_podsweep"))
        .args(args)
        .output()
        .expect("run podsweep");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn status_json(conf: &str) -> Value {
    let (code, out, err) = podsweep(&["status", "--config", conf, "--json"]);
    assert_eq!(code, 0, "podsweep status: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// The scope entry of `ns` in a `--json` reading, in election layout `layout` (2: the cluster's
/// key; 1: podsweep 0.1's URL key, which every server wins first).
fn entry_of<'a>(v: &'a Value, ns: &str, layout: u64) -> &'a Value {
    v["scopes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["namespace"] == ns && s["layout"] == layout)
        .unwrap_or_else(|| panic!("no scope {ns} of layout {layout} in {v}"))
}

/// The entry every server campaigns in (podsweep 0.1's election of their one URL; only its
/// leader goes on to campaign in the cluster's election).
fn scope_entry<'a>(v: &'a Value, ns: &str) -> &'a Value {
    entry_of(v, ns, 1)
}

/// The servers a reading says run (the servers' own election).
fn servers_running(v: &Value) -> BTreeSet<String> {
    v["servers"]
        .as_array()
        .unwrap_or_else(|| panic!("no servers in {v}"))
        .iter()
        .map(|p| p["server"].as_str().unwrap().to_owned())
        .collect()
}

fn participants(s: &Value) -> BTreeSet<String> {
    s["participants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["server"].as_str().unwrap().to_owned())
        .collect()
}

/// The whole walk on one backend: 3 servers x 2 scopes, the reading, a leader leaving, the
/// refusal to uninstall under live servers, the uninstall.
async fn fleet_status(backend: &str, ha: Vec<(String, String)>, since_is_known: bool) {
    let api = PodsApi::start().await;
    let pairs = conf_pairs(&api, &ha);
    let conf = write_conf(&pairs, backend);
    let conf = conf.to_str().unwrap();
    let mut servers: Vec<(String, Arc<Engine>)> = SERVERS
        .iter()
        .map(|id| (id.to_string(), server(&pairs, id)))
        .collect();
    // A fourth server whose informer saw no driver pod: it campaigns in no scope (as a server
    // whose scopes were released when idle), yet it runs, and its next pod event would start a
    // campaign again under whatever is left in the backend.
    let idle = {
        let raw: HashMap<String, String> = pairs.iter().cloned().collect();
        let settings = Settings::from_map(raw).unwrap();
        Arc::new(Engine::new(settings, IDLE, tokio::runtime::Handle::current()).unwrap())
    };
    wait_for("a leader per scope", LONG, || {
        NAMESPACES
            .iter()
            .all(|ns| leader_of(&servers, ns).is_some())
    })
    .await;
    let mut reading = Value::Null;
    // The election and the reading settle independently: read until all three participate.
    wait_for("3 participants in each scope", LONG, || {
        reading = status_json(conf);
        NAMESPACES
            .iter()
            .all(|ns| participants(scope_entry(&reading, ns)).len() == 3)
    })
    .await;
    assert_eq!(reading["backend"], backend);
    let running: BTreeSet<String> = SERVERS
        .iter()
        .chain([&IDLE])
        .map(|s| s.to_string())
        .collect();
    wait_for(
        "every server, the idle one too, reads as running",
        LONG,
        || {
            reading = status_json(conf);
            servers_running(&reading) == running
        },
    )
    .await;
    // Each namespace: the cluster's election, and podsweep 0.1's URL-keyed one won before it.
    assert_eq!(reading["scopes"].as_array().unwrap().len(), 4, "{reading}");
    let all: BTreeSet<String> = SERVERS.iter().map(|s| s.to_string()).collect();
    for ns in NAMESPACES {
        let s = scope_entry(&reading, ns);
        assert_eq!(participants(s), all, "{ns}");
        assert_eq!(
            s["leader"].as_str(),
            leader_of(&servers, ns).as_deref(),
            "{ns}: the backend's leader is the one that says it leads"
        );
        assert_eq!(s["context"], api.url.as_str(), "{s}");
        // Scopes are elected under the cluster's identity (the digest of the CA certificate its
        // kube-root-ca.crt publishes), whichever URL a server reaches the cluster by; only the
        // leader of podsweep 0.1's election of its URL campaigns there (servers of one URL meet
        // in that first election).
        let cluster = entry_of(&reading, ns, 2);
        assert_eq!(cluster["context"], cluster_key(), "{cluster}");
        assert_eq!(cluster["leader"], s["leader"], "{cluster}");
        assert_eq!(participants(cluster).len(), 1, "{cluster}");
        if since_is_known {
            let since = s["leader_since_ms"].as_i64().expect("since");
            let now = podsweep::metrics::epoch_ms() as i64;
            assert!(since <= now && now - since < 120_000, "{s}");
        }
    }
    let (code, table, _) = podsweep(&["status", "--config", conf]);
    assert_eq!(code, 0);
    println!("podsweep status ({backend}, 3 servers, 2 scopes):\n{table}");
    for ns in NAMESPACES {
        assert!(
            table.contains(&format!("scope {}:{ns}", cluster_key())),
            "{table}"
        );
    }
    assert_eq!(table.matches("participants  3").count(), 2, "{table}");
    assert_eq!(table.matches("participants  1").count(), 2, "{table}");
    assert_eq!(table.matches("    leads  ").count(), 4, "{table}");
    assert_eq!(table.matches("layout        2").count(), 2, "{table}");

    // The leader of the first scope leaves: the reading names its successor and two participants.
    let first = leader_of(&servers, NAMESPACES[0]).unwrap();
    let at = servers.iter().position(|(id, _)| *id == first).unwrap();
    let (_, gone) = servers.remove(at);
    gone.close_async(Duration::from_secs(5)).await;
    drop(gone);
    wait_for("a new leader of the first scope", LONG, || {
        leader_of(&servers, NAMESPACES[0]).is_some()
    })
    .await;
    wait_for("the reading follows", LONG, || {
        reading = status_json(conf);
        let s = scope_entry(&reading, NAMESPACES[0]);
        participants(s).len() == 2
            && s["leader"].as_str() == leader_of(&servers, NAMESPACES[0]).as_deref()
    })
    .await;
    assert!(!participants(scope_entry(&reading, NAMESPACES[0])).contains(&first));

    // Uninstall refuses while servers campaign, names them, and leaves everything in place.
    let (code, out, err) = podsweep(&["uninstall", "--config", conf]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("participant(s) still campaign"), "{err}");
    assert_eq!(status_json(conf)["scopes"].as_array().unwrap().len(), 4);
    // --force removes them under the live servers: each loses its seat, campaigns again, and the
    // scopes have a leader and both participants again.
    let (code, out, err) = podsweep(&["uninstall", "--config", conf, "--force"]);
    assert_eq!(code, 0, "{err}");
    let forced: u64 = out
        .rsplit(": ")
        .next()
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    println!("podsweep uninstall --force ({backend}, 2 servers running): {out}");
    assert!(forced >= 8, "{out}");
    wait_for("the fleet campaigns again", LONG, || {
        reading = status_json(conf);
        NAMESPACES.iter().all(|ns| {
            reading["scopes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|s| s["namespace"] == *ns && s["layout"] == 1)
                .is_some_and(|s| {
                    participants(s).len() == 2
                        && s["leader"].as_str() == leader_of(&servers, ns).as_deref()
                })
        })
    })
    .await;
    for (_, e) in servers.drain(..) {
        e.close_async(Duration::from_secs(5)).await;
    }
    wait_for("no participant left but the idle server", LONG, || {
        reading = status_json(conf);
        reading["scopes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["participants"].as_array().unwrap().is_empty())
            && servers_running(&reading) == BTreeSet::from([IDLE.to_owned()])
    })
    .await;
    // The idle server still runs: uninstall refuses (before issue 32 it removed everything under
    // it, since no scope had a participant).
    let (code, out, err) = podsweep(&["uninstall", "--config", conf]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("1 server(s) running"), "{err}");
    let (_, table, _) = podsweep(&["status", "--config", conf]);
    assert!(
        table.contains(&format!("servers running: 1 ({IDLE})")),
        "{table}"
    );
    println!(
        "podsweep uninstall ({backend}, one idle server running): {}",
        err.trim()
    );
    // A server that stopped has left the servers' election by the time its close returns: an
    // uninstall run right after finds no server (its session would keep the node until it
    // expired).
    idle.close_async(Duration::from_secs(5)).await;
    reading = status_json(conf);
    assert!(servers_running(&reading).is_empty(), "{reading}");
    let (code, out, err) = podsweep(&["uninstall", "--config", conf]);
    assert_eq!(code, 0, "{err}");
    println!("podsweep uninstall ({backend}): {out}");
    assert!(out.starts_with("removed /status_cli-podsweep"), "{out}");
    let after = status_json(conf);
    assert_eq!(after["scopes"].as_array().unwrap().len(), 0, "{after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_uninstall_on_zookeeper() {
    let zk = ZkServer::start();
    let ha = vec![
        (keys::HA_ADDRESSES.to_owned(), zk.addr()),
        (keys::ZK_SESSION_TIMEOUT.to_owned(), "4000".to_owned()),
    ];
    fleet_status("zookeeper", ha, true).await;
    // Nothing of podsweep is left in ZooKeeper.
    let client = common::zk::inspector(&zk.addr()).await;
    assert_eq!(
        client.list_children("/status_cli-podsweep").await.err(),
        Some(zookeeper_client::Error::NoNode)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_uninstall_on_etcd() {
    let etcd = EtcdServer::start();
    let ha = vec![
        (keys::HA_ADDRESSES.to_owned(), etcd.endpoint()),
        (
            keys::HA_CLIENT_CLASS.to_owned(),
            ETCD_CLIENT_CLASS.to_owned(),
        ),
        (keys::ETCD_ELECTION_LEASE.to_owned(), "4000".to_owned()),
    ];
    fleet_status("etcd", ha, true).await;
    let mut client = etcd_client::Client::connect([etcd.endpoint()], None)
        .await
        .unwrap();
    let left = client
        .get(
            "/status_cli-podsweep/",
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_count_only(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(left.count(), 0);
}

/// A configuration without an HA backend: nothing is elected, and the verbs say so.
#[test]
fn without_an_ha_backend_the_verbs_name_the_key() {
    let path =
        std::env::temp_dir().join(format!("podsweep-status-local-{}.conf", std::process::id()));
    std::fs::write(
        &path,
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind=ALL\n",
    )
    .unwrap();
    let p = path.to_str().unwrap();
    for verb in ["status", "uninstall"] {
        let (code, _, err) = podsweep(&[verb, "--config", p]);
        assert_eq!(code, 1, "{verb}");
        assert!(err.contains(keys::HA_ADDRESSES), "{verb}: {err}");
    }
    let (code, _, err) = podsweep(&["status", "--config", "/nonexistent/kyuubi-defaults.conf"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/kyuubi-defaults.conf"), "{err}");
    let _ = std::fs::remove_file(&path);
}

/// A daemon (server id `daemon-a`) on ZooKeeper with the given session timeout, cleaning
/// NAMESPACES[0], running as `status` reads it; and its configuration file.
async fn running_daemon(
    zk: &ZkServer,
    api: &PodsApi,
    session_ms: &str,
    name: &str,
) -> (tokio::process::Child, PathBuf) {
    use tokio::io::AsyncBufReadExt;
    let mut pairs = conf_pairs(
        api,
        &[
            (keys::HA_ADDRESSES.to_owned(), zk.addr()),
            (keys::ZK_SESSION_TIMEOUT.to_owned(), session_ms.to_owned()),
        ],
    );
    pairs.push((keys::KUBE_NAMESPACE.to_owned(), NAMESPACES[0].to_owned()));
    let path = write_conf(&pairs, name);
    let conf = path.to_str().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_podsweep"))
        .args([
            "--config",
            conf,
            "--listen",
            "127.0.0.1:0",
            "--server-id",
            "daemon-a",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the podsweep binary");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next_line().await.unwrap().unwrap_or_default();
    assert!(first.starts_with("podsweep listening on "), "{first}");
    wait_for("the daemon reads as running", LONG, || {
        servers_running(&status_json(conf)) == BTreeSet::from(["daemon-a".to_owned()])
    })
    .await;
    (child, path)
}

/// Issue 32 §6: a daemon stopped by SIGTERM leaves the servers' election before it exits, so the
/// uninstall an operator runs right after `helm uninstall` finds no server; its ZooKeeper session
/// (60 s here) would otherwise keep its node, and the uninstall would refuse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_stopped_by_sigterm_is_gone_for_the_uninstall_right_after() {
    let zk = ZkServer::start();
    let api = PodsApi::start().await;
    let (mut child, path) = running_daemon(&zk, &api, "60000", "sigterm").await;
    let conf = path.to_str().unwrap();
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let rc = child.wait().await.unwrap();
    assert_eq!(rc.code(), Some(0));
    let t0 = std::time::Instant::now();
    let (code, out, err) = podsweep(&["uninstall", "--config", conf]);
    println!(
        "podsweep uninstall right after SIGTERM: exit {code} in {:?}: {}{}",
        t0.elapsed(),
        out.trim(),
        err.trim()
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.starts_with("removed /status_cli-podsweep"), "{out}");
    assert!(!err.contains("waiting"), "nothing to wait for: {err}");
}

/// A daemon killed at the end of its grace period (SIGKILL: its ZooKeeper session is never
/// closed) stays a participant until the session expires. `uninstall --wait 0` refuses at once
/// and names it; by default uninstall waits up to the session timeout (4 s here) plus 2 s, and
/// removes everything once the session has expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_waits_out_the_session_of_a_killed_daemon() {
    let zk = ZkServer::start();
    let api = PodsApi::start().await;
    let (mut child, path) = running_daemon(&zk, &api, "4000", "sigkill").await;
    let conf = path.to_str().unwrap();
    child.start_kill().unwrap();
    child.wait().await.unwrap();
    let (code, out, err) = podsweep(&["uninstall", "--config", conf, "--wait", "0"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("1 server(s) running"), "{err}");
    let t0 = std::time::Instant::now();
    let (code, out, err) = podsweep(&["uninstall", "--config", conf]);
    let took = t0.elapsed();
    println!(
        "podsweep uninstall right after SIGKILL: exit {code} in {took:?}: {}; {}",
        out.trim(),
        err.trim()
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("waiting up to 6 s"), "{err}");
    assert!(out.starts_with("removed /status_cli-podsweep"), "{out}");
    assert!(status_json(conf)["servers"]
        .as_array()
        .is_none_or(|s| s.is_empty()));
}
