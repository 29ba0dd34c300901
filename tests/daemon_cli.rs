//! The `podsweep` binary's operator-facing command line (issue 33): a scope without a namespace
//! key is refused instead of defaulted, `podsweep check` validates a file offline with the
//! daemon's own checks, and `--log-format json` writes one JSON object per log line.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::pods_api::{driver_pod, wait_for, PodsApi};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;
use tokio::time::timeout;

const BIN: &str = env!("CARGO_BIN_EXE_podsweep");
const NS_KEY: &str = "kyuubi.kubernetes.namespace";

/// Kyuubi's file as Kyuubi 1.12.0's own Helm chart writes it: the chart passes
/// `kyuubi.kubernetes.namespace` on Kyuubi's command line, so the file has none.
fn kyuubi_chart_file(api: &PodsApi) -> String {
    format!(
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind=NONE\n\
         kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.kind=ALL\n\
         kyuubi.kubernetes.terminatedApplicationRetainPeriod=PT1S\n\
         kyuubi.kubernetes.master.address={}\n",
        api.url
    )
}

fn write_conf(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kyuubi-defaults.conf");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// Runs the binary to its end (at most 20 s: a daemon that starts instead of refusing is killed
/// and reported).
async fn run(args: &[&str]) -> (Option<i32>, String, String) {
    let child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("podsweep {args:?} still runs after 20 s"))
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 33 §1: a daemon reading Kyuubi's chart-made file (no namespace key at all) used to
/// clean `default`; it is refused, naming the key, and nothing listens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_without_any_namespace_key_is_refused_not_defaulted_to_default() {
    let api = PodsApi::start().await;
    api.create("default", driver_pod("in-default", Some(3600)));
    let (_dir, conf) = write_conf(&kyuubi_chart_file(&api));
    let conf = conf.to_str().unwrap();
    let (code, out, err) = run(&["--config", conf, "--listen", "127.0.0.1:0"]).await;
    println!("no namespace key -> {code:?}: {}", err.trim());
    assert_eq!(code, Some(2), "stdout {out:?} stderr {err}");
    assert!(
        err.starts_with(&format!("podsweep: bad configuration: {NS_KEY}: not set")),
        "{err}"
    );
    assert!(out.is_empty(), "nothing listens: {out}");
    assert_eq!(api.deletes_of("in-default"), 0);
    // An initialize-list entry without a namespace, and no namespace key: refused, naming the list.
    let list = "kyuubi.kubernetes.client.initialize.list";
    let (code, _, err) = run(&[
        "--config",
        conf,
        "--listen",
        "127.0.0.1:0",
        "--conf",
        &format!("{list}=prod"),
    ])
    .await;
    println!("entry without a namespace -> {code:?}: {}", err.trim());
    assert_eq!(code, Some(2));
    assert!(
        err.contains(&format!("bad configuration: {list}:")),
        "{err}"
    );
}

/// `podsweep check`: the daemon's checks, offline. A good file prints what the daemon would do
/// (exit 0); a bad one is refused with the key named (exit 2), as the daemon refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_validates_a_file_offline_and_names_the_key_it_refuses() {
    // No API server and no HA backend answer at these addresses: check contacts neither.
    let text = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind=NONE\n\
                kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.kind=COMPLETED\n\
                kyuubi.kubernetes.master.address=https://127.0.0.1:9\n\
                kyuubi.ha.addresses=127.0.0.1:9\n\
                kyuubi.ha.namespace=prod\n\
                kyuubi.kubernetes.client.initialize.list=:spark-a,:spark-b\n";
    let (_dir, conf) = write_conf(text);
    let conf = conf.to_str().unwrap();
    let (code, out, err) = run(&["check", "--config", conf]).await;
    println!("check -> {code:?}\n{out}{err}");
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("the daemon accepts it"), "{out}");
    assert!(out.contains("cleanup kind   COMPLETED"), "{out}");
    assert!(out.contains("scopes         :spark-a, :spark-b"), "{out}");
    assert!(
        out.contains("HA backend     zookeeper at 127.0.0.1:9 (namespace prod)"),
        "{out}"
    );
    let kind = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.kind";
    let cases: &[(&str, &str)] = &[
        (&format!("{kind}=SOME"), kind),
        (&format!("{kind}=NONE"), kind),
        ("kyuubi.kubernetes.client.initialize.list=", NS_KEY),
        (
            "kyuubi.kubernetes.terminatedApplicationRetainPeriod=5 minutes",
            "kyuubi.kubernetes.terminatedApplicationRetainPeriod",
        ),
        (
            "kyuubi.ha.zookeeper.session.timeout=-1",
            "kyuubi.ha.zookeeper.session.timeout",
        ),
        ("novalue", "KEY=VALUE"),
    ];
    for (arg, named) in cases {
        let (code, out, err) = run(&["check", "--config", conf, "--conf", arg]).await;
        println!("check --conf {arg} -> {code:?}: {}", err.trim());
        assert_eq!(code, Some(2), "{arg}: {out}{err}");
        assert!(err.contains(named), "{arg}: {err}");
        assert!(out.is_empty(), "{arg}: {out}");
    }
    let (code, _, err) = run(&["check", "--config", "/nonexistent/kyuubi-defaults.conf"]).await;
    assert_eq!(code, Some(2));
    assert!(err.contains("/nonexistent/kyuubi-defaults.conf"), "{err}");
}

/// `--log-format json`: every line the daemon writes on stderr, from its start to its exit after
/// SIGTERM, is one JSON object with a timestamp, a level, a target and a message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_format_json_writes_one_json_object_per_line() {
    let api = PodsApi::start().await;
    api.create("spark", driver_pod("done", Some(3600)));
    let (dir, conf) = write_conf(&kyuubi_chart_file(&api));
    let stderr_path = dir.path().join("stderr.log");
    let mut child = Command::new(BIN)
        .args([
            "--config",
            conf.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--conf", &format!("{NS_KEY}=spark"), "--log-format", "json"])
        // One daemon and no HA backend in this file: it runs alone.
        .arg("--single-server")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the listening line")
        .unwrap()
        .unwrap_or_else(|| panic!("{}", std::fs::read_to_string(&stderr_path).unwrap()));
    assert!(
        first.starts_with("podsweep listening on http://"),
        "{first}"
    );
    wait_for("the pod deleted", Duration::from_secs(30), || {
        !api.exists("spark", "done")
    })
    .await;
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = timeout(Duration::from_secs(30), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let text = std::fs::read_to_string(&stderr_path).unwrap();
    let mut messages = Vec::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON object ({e}): {line:?}"));
        for field in ["timestamp", "level", "target", "message"] {
            assert!(v[field].is_string(), "{field} missing: {line}");
        }
        messages.push(v["message"].as_str().unwrap().to_owned());
    }
    println!(
        "{} JSON lines; first {:?}; last {:?}",
        messages.len(),
        messages.first(),
        messages.last()
    );
    assert!(messages.len() >= 3, "{text}");
    assert!(
        messages.iter().any(|m| m.starts_with("SIGTERM received")),
        "{text}"
    );
    assert!(
        messages.iter().any(|m| m.contains("done")),
        "the DELETE's line: {text}"
    );
    // A refused configuration in JSON mode is one JSON object too.
    let (code, _, err) = run(&[
        "--config",
        conf.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ])
    .await;
    assert_eq!(code, Some(2));
    let v: serde_json::Value = serde_json::from_str(err.trim()).expect("one JSON object");
    assert_eq!(v["level"], "ERROR");
    assert!(v["message"].as_str().unwrap().contains(NS_KEY), "{v}");
}
