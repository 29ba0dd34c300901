//! Issue 32 §3: a daemon, or any engine in self-watch mode, with no HA backend would lead every
//! scope on its own, so that N replicas (the chart's default mode reads Kyuubi's ConfigMap, which
//! may name none) send N DELETEs per pod. It refuses to start unless the operator says it runs
//! alone (`...cleanupTerminatedDriverPod.ha.singleServer=true`, or the daemon's
//! `--single-server`). The binary as an operator runs it, against the loopback pods API, and the
//! engine as `PodSweeper.create` builds it.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::pods_api::{driver_pod, wait_for, PodsApi};
use podsweep::config::keys;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Command;
use tokio::time::timeout;

const NS: &str = "spark";
const BIN: &str = env!("CARGO_BIN_EXE_podsweep");

/// Kyuubi's file without an HA backend.
fn conf_text(api: &PodsApi) -> String {
    format!(
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind NONE\n\
         kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.kind=ALL\n\
         kyuubi.kubernetes.terminatedApplicationRetainPeriod=PT1S\n\
         kyuubi.kubernetes.master.address={}\n\
         kyuubi.kubernetes.namespace={NS}\n",
        api.url
    )
}

/// Runs the daemon with `args`: `Err(first stdout line)` if it started (it is stopped then),
/// else its exit status and stderr.
async fn run(conf: &std::path::Path, args: &[&str]) -> Result<(i32, String), String> {
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(conf)
        .args(["--listen", "127.0.0.1:0", "--server-id", "alone-1"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the podsweep binary");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("a line or the end of stdout within 30 s")
        .unwrap();
    if let Some(line) = first {
        let _ = child.start_kill();
        let _ = child.wait().await;
        return Err(line);
    }
    let status = timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("exit in time")
        .unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .await
        .unwrap();
    Ok((status.code().unwrap_or(-1), err))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_ha_backend_the_daemon_refuses_to_start_unless_it_runs_alone() {
    let api = PodsApi::start().await;
    api.create(NS, driver_pod("done", Some(3600)));
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("kyuubi-defaults.conf");
    std::fs::write(&conf, conf_text(&api)).unwrap();
    let alone = format!("{}=false", keys::HA_SINGLE_SERVER);
    let embedded = [
        "--conf",
        "kyuubi.ha.addresses=127.0.0.1:2181",
        "--conf",
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.embedded=true",
    ];
    let refused: [&[&str]; 3] = [&[], &["--conf", &alone], &embedded];
    for args in refused {
        let out = run(&conf, args).await;
        println!("{args:?} -> {out:?}");
        let (code, err) = out.unwrap_or_else(|line| panic!("{args:?}: the daemon started: {line}"));
        assert_eq!(code, 2, "{args:?}: {err}");
        for named in [
            keys::HA_SINGLE_SERVER,
            "--single-server",
            keys::HA_ADDRESSES,
            keys::HA_ZK_QUORUM,
        ] {
            assert!(err.contains(named), "{args:?}: {named} not in {err}");
        }
    }
    assert_eq!(
        api.deletes_of("done"),
        0,
        "a refused daemon deletes nothing"
    );

    // Alone, by the flag (or the key): it runs and cleans, one DELETE per pod.
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(&conf)
        .args(["--listen", "127.0.0.1:0", "--server-id", "alone-1"])
        .arg("--single-server")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the listening line in time")
        .unwrap()
        .expect("a line");
    println!("--single-server -> {line}");
    assert!(line.starts_with("podsweep listening on "), "{line}");
    wait_for("done deleted", Duration::from_secs(30), || {
        !api.exists(NS, "done")
    })
    .await;
    assert_eq!(api.deletes_of("done"), 1);
    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("exit in time")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

/// The engine a drop-in, a patched server in self-watch mode or the daemon builds
/// (`Engine::new`, which `PodSweeper.create` calls): without an HA backend (none configured, or
/// Kyuubi's private embedded ZooKeeper) it is refused, naming the key and both ways out, unless
/// the server runs alone. A patched server fed by its informers keeps today's local fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_watch_without_an_ha_backend_is_refused_naming_the_key() {
    let base = [
        (keys::CLEANUP_KIND, "ALL"),
        ("kyuubi.kubernetes.master.address", "http://127.0.0.1:9"),
        (keys::KUBE_NAMESPACE, NS),
    ];
    let build = |extra: &[(&str, &str)]| {
        let raw: std::collections::HashMap<String, String> = base
            .iter()
            .chain(extra)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let settings = podsweep::config::Settings::from_map(raw).expect("settings");
        podsweep::engine::Engine::new(settings, "s-1", tokio::runtime::Handle::current())
    };
    let watch = (keys::WATCH_ENABLED, "true");
    let embedded = [
        watch,
        (keys::HA_ADDRESSES, "127.0.0.1:2181"),
        (keys::HA_EMBEDDED, "true"),
    ];
    for extra in [
        &[watch][..],
        &[watch, (keys::HA_SINGLE_SERVER, "false")],
        &embedded,
    ] {
        let e = build(extra)
            .err()
            .unwrap_or_else(|| panic!("{extra:?} was accepted"));
        let text = e.to_string();
        println!("{extra:?} -> {text}");
        assert!(
            matches!(e, podsweep::engine::EngineError::Config(ref c) if c.key() == keys::HA_SINGLE_SERVER),
            "{text}"
        );
        for named in [keys::HA_ADDRESSES, keys::HA_ZK_QUORUM] {
            assert!(text.contains(named), "{named} not in {text}");
        }
    }
    let fine: [&[(&str, &str)]; 3] = [
        &[watch, (keys::HA_SINGLE_SERVER, "true")],
        // Informer mode: each server cleans on its own, as Kyuubi does without podsweep.
        &[],
        &[
            (keys::HA_ADDRESSES, "127.0.0.1:2181"),
            (keys::HA_EMBEDDED, "true"),
        ],
    ];
    for extra in fine {
        let e = build(extra).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
        e.close_async(Duration::from_secs(5)).await;
    }
}
