//! The `podsweep` binary as an operator runs it: a child process with a Kyuubi configuration
//! file, against the loopback pods API (`common::pods_api`), local backend. Its HTTP endpoints,
//! its exit status on SIGTERM / SIGINT and on a bad configuration.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use common::pods_api::{driver_pod, wait_for, PodsApi};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::{sleep, timeout};

const NS: &str = "spark";
const BIN: &str = env!("CARGO_BIN_EXE_podsweep");
const LONG: Duration = Duration::from_secs(30);

struct Daemon {
    child: Child,
    url: String,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

/// Writes `file` as kyuubi-defaults.conf and starts the daemon on a free port.
async fn start(file: &str, extra: &[&str]) -> Daemon {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("kyuubi-defaults.conf");
    std::fs::write(&conf, file).unwrap();
    let stderr = dir.path().join("stderr.log");
    let mut child = Command::new(BIN)
        .arg("--config")
        .arg(&conf)
        .args(["--listen", "127.0.0.1:0", "--server-id", "daemon-1"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .kill_on_drop(true)
        .spawn()
        .expect("the podsweep binary");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let line = timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("the listening line in time")
        .unwrap()
        .unwrap_or_else(|| panic!("no line; stderr:\n{}", read(&stderr)));
    let url = line
        .strip_prefix("podsweep listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    println!("{line}");
    Daemon {
        child,
        url,
        stderr,
        _dir: dir,
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// `GET path` over HTTP/1.1: status code and body.
async fn get(url: &str, path: &str) -> (u16, String) {
    let (code, _, body) = get_with(url, path, "").await;
    (code, body)
}

/// GET with extra header lines (each ending in `\r\n`): status, head, body.
async fn get_with(url: &str, path: &str, headers: &str) -> (u16, String, String) {
    let host = url.strip_prefix("http://").unwrap();
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{headers}Connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).await.unwrap();
    let (head, body) = reply.split_once("\r\n\r\n").unwrap();
    let code = head.split(' ').nth(1).unwrap().parse().unwrap();
    (code, head.to_owned(), body.to_owned())
}

async fn signal(d: &mut Daemon, sig: &str) -> i32 {
    let pid = d.child.id().unwrap().to_string();
    let ok = std::process::Command::new("kill")
        .args([sig, &pid])
        .status()
        .unwrap();
    assert!(ok.success());
    let status = timeout(Duration::from_secs(30), d.child.wait())
        .await
        .expect("exit in time")
        .unwrap();
    status.code().unwrap_or(-1)
}

/// Kyuubi's file, as an operator of stock Kyuubi writes it, without an HA backend.
fn fleet_conf_file(api: &PodsApi) -> String {
    format!(
        "# Kyuubi's file, as an operator of stock Kyuubi writes it\n\
         kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind NONE\n\
         kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.kind=ALL\n\
         kyuubi.kubernetes.terminatedApplicationRetainPeriod: PT1S\n\
         kyuubi.kubernetes.master.address={}\n\
         kyuubi.kubernetes.namespace  {NS}\n",
        api.url
    )
}

/// [`fleet_conf_file`] for the one daemon of these tests: no HA backend, so it says it runs alone.
fn conf_file(api: &PodsApi) -> String {
    format!(
        "{}{}=true\n",
        fleet_conf_file(api),
        podsweep::config::keys::HA_SINGLE_SERVER
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_health_metrics_and_status_and_exits_0_on_sigterm() {
    let api = PodsApi::start().await;
    api.create(NS, driver_pod("done-1", Some(3600)));
    api.create(NS, driver_pod("done-2", Some(3600)));
    api.create(NS, driver_pod("running", None));
    let mut d = start(&conf_file(&api), &[]).await;
    wait_for("overdue pods deleted", LONG, || {
        !api.exists(NS, "done-1") && !api.exists(NS, "done-2")
    })
    .await;
    let (code, body) = get(&d.url, "/healthz").await;
    println!("/healthz {code} {body:?}");
    assert_eq!((code, body.as_str()), (200, "ok\n"));
    let (code, status) = get(&d.url, "/status").await;
    assert_eq!(code, 200);
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    let s = &v[0];
    println!(
        "/status: scope {} server {} leadership {} watching {} streams {}",
        s["scope"], s["server_id"], s["leadership"], s["watching"], s["watch_streams"]
    );
    assert_eq!(s["server_id"], "daemon-1");
    assert_eq!(s["watching"], true);
    assert_eq!(s["watch_streams"], 1);
    let (code, metrics) = get(&d.url, "/metrics").await;
    assert_eq!(code, 200);
    let l = "context=\"\",namespace=\"spark\"";
    for line in [
        format!("podsweep_leader{{{l}}} 1"),
        format!("podsweep_healthy{{{l}}} 1"),
        format!("podsweep_watching{{{l}}} 1"),
        format!("podsweep_watch_streams_total{{{l}}} 1"),
        format!("podsweep_delete_outcomes_total{{{l},outcome=\"accepted\"}} 2"),
        format!("podsweep_delete_lag_seconds_count{{{l}}} 2"),
    ] {
        assert!(
            metrics.lines().any(|x| x == line),
            "missing {line:?} in\n{metrics}"
        );
    }
    // What Prometheus asks for: OpenMetrics, the same series, `# EOF` last.
    let (code, head, om) = get_with(
        &d.url,
        "/metrics",
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n",
    )
    .await;
    assert_eq!(code, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(
        om.lines()
            .any(|x| x == format!("podsweep_watch_streams_total{{{l}}} 1")),
        "{om}"
    );
    let (code, _) = get(&d.url, "/nope").await;
    assert_eq!(code, 404);
    assert_eq!(api.open_watches(), 1);
    let rc = signal(&mut d, "-TERM").await;
    let log = read(&d.stderr);
    println!("exit status {rc} after SIGTERM");
    assert_eq!(rc, 0, "stderr:\n{log}");
    assert!(log.contains("SIGTERM received"), "{log}");
    assert!(api.exists(NS, "running"));
    assert_eq!(api.deletes().len(), 2, "nothing deleted on close");
    wait_for("the watch is closed", LONG, || api.open_watches() == 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_503_with_reasons_when_no_scope_is_watched_and_sigint_exits_0() {
    let api = PodsApi::start().await;
    let file = format!(
        "{}kyuubi.kubernetes.namespace.allow.list=other\n",
        conf_file(&api)
    );
    let mut d = start(&file, &[]).await;
    let (code, body) = get(&d.url, "/healthz").await;
    println!("/healthz {code} {body}");
    assert_eq!(code, 503);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["healthy"], false);
    assert!(v["reasons"][0].as_str().unwrap().contains("no scope"));
    assert_eq!(signal(&mut d, "-INT").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_apply_and_a_bad_configuration_exits_2_naming_the_key() {
    let api = PodsApi::start().await;
    let kind = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.kind";
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--conf".into(), format!("{kind}=SOME")], kind),
        (vec!["--conf".into(), format!("{kind}=NONE")], kind),
        (
            vec![
                "--conf".into(),
                "kyuubi.kubernetes.application.state.source=NODE".into(),
            ],
            "kyuubi.kubernetes.application.state.source",
        ),
        (
            vec![
                "--conf".into(),
                "kyuubi.kubernetes.master.address=ftp://x".into(),
            ],
            "kyuubi.kubernetes.master.address",
        ),
        (vec!["--conf".into(), "novalue".into()], "KEY=VALUE"),
    ];
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("kyuubi-defaults.conf");
    std::fs::write(&conf, conf_file(&api)).unwrap();
    for (args, named) in cases {
        let out = Command::new(BIN)
            .arg("--config")
            .arg(&conf)
            .args(["--listen", "127.0.0.1:0"])
            .args(&args)
            .output()
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        println!("{args:?} -> {:?}: {}", out.status.code(), err.trim());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(err.contains(named), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "nothing listens");
    }
    // An override wins over the file: COMPLETED spares a FAILED pod the file's ALL would delete.
    let mut failed = driver_pod("failed", Some(3600));
    failed["status"]["phase"] = "Failed".into();
    failed["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] = 1.into();
    api.create(NS, failed);
    api.create(NS, driver_pod("done", Some(3600)));
    let mut d = start(&conf_file(&api), &["--conf", &format!("{kind}=COMPLETED")]).await;
    wait_for("done deleted", LONG, || !api.exists(NS, "done")).await;
    // The scope has taken both listed pods and the DELETED event of `done` (3 observations) and
    // holds nothing: the FAILED pod was judged and not armed, so no DELETE of it can follow.
    let s = wait_status(&d, "both pods judged, nothing tracked", |s| {
        s["observed"].as_u64().unwrap_or(0) >= 3
            && s["tracked"] == 0
            && s["inflight"] == 0
            && s["queued"] == 0
    })
    .await;
    println!(
        "/status: observed {} tracked {} deletes_sent {}",
        s["observed"], s["tracked"], s["deletes_sent"]
    );
    assert!(api.exists(NS, "failed"));
    assert_eq!(api.deletes_of("failed"), 0);
    assert_eq!(s["deletes_sent"], 1);
    assert_eq!(signal(&mut d, "-TERM").await, 0);
}

/// Polls the daemon's `/status` (its first scope) every 50 ms until `pred` holds, and returns
/// it; panics naming `what` after [`LONG`].
async fn wait_status(
    d: &Daemon,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let t0 = std::time::Instant::now();
    loop {
        let (_, body) = get(&d.url, "/status").await;
        let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        if pred(&v[0]) {
            return v[0].clone();
        }
        assert!(t0.elapsed() < LONG, "{what}: not within {LONG:?}: {body}");
        sleep(Duration::from_millis(50)).await;
    }
}

/// Descriptors the process `pid` holds open.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Issue 22, item 7: slow clients (a request line, then nothing) cannot take the daemon's file
/// descriptors: past a cap, the oldest connection is closed to make room; and the daemon still
/// answers once they are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_clients_cannot_exhaust_the_daemons_descriptors() {
    let api = PodsApi::start().await;
    let mut d = start(&conf_file(&api), &[]).await;
    let pid = d.child.id().unwrap();
    // The daemon's own connections are open (its pod watch), and the probe's is closed (read
    // to its end): the baseline.
    wait_for("the daemon watches", LONG, || api.open_watches() == 1).await;
    let (code, _) = get(&d.url, "/healthz").await;
    assert_eq!(code, 200);
    let before = open_fds(pid);
    let host = d.url.strip_prefix("http://").unwrap().to_owned();
    let t0 = tokio::time::Instant::now();
    // Each slow client (a scrape's request line, then nothing: not a probe, so they share the
    // pool of MAX_CONNECTIONS) is watched by a task of its own that reports when the daemon
    // closes it (an end or a reset).
    let (closed_tx, mut closed_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut watchers = Vec::new();
    for i in 0..200 {
        let mut s = tokio::net::TcpStream::connect(&host).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let tx = closed_tx.clone();
        watchers.push(tokio::spawn(async move {
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest).await;
            let _ = tx.send(i);
        }));
    }
    // A probe answered after them: the daemon's one accept loop (a FIFO queue) has taken all
    // 200, and probes have slots of their own.
    let (code, _) = timeout(Duration::from_secs(10), get(&d.url, "/healthz"))
        .await
        .expect("a probe is answered beside 200 slow clients");
    assert_eq!(code, 200);
    let cap = podsweep::daemon::http::MAX_CONNECTIONS;
    let evicted = 200 - cap;
    // Which clients make room depends on the order the daemon tells them apart (one task each),
    // not on the order they connected; how many does not: all but `cap`. Nothing can have been
    // closed by the header read timeout before it ran from the first connect: by then every
    // client past the cap must have been closed to make room, and `cap` still be open.
    let by = t0 + podsweep::daemon::http::HEADER_READ_TIMEOUT - Duration::from_millis(50);
    let mut closed = 0;
    while closed < evicted {
        match tokio::time::timeout_at(by, closed_rx.recv()).await {
            Ok(Some(_)) => closed += 1,
            Ok(None) => unreachable!("a watcher's sender outlives the loop"),
            Err(_) => panic!(
                "{closed} of 200 slow clients closed to make room within {:?} (header read \
                 timeout {:?}); {evicted} must be",
                t0.elapsed(),
                podsweep::daemon::http::HEADER_READ_TIMEOUT
            ),
        }
    }
    let made_room_within = t0.elapsed();
    while let Ok(i) = closed_rx.try_recv() {
        closed += 1;
        assert!(
            tokio::time::Instant::now() >= by,
            "slow client {i} closed beyond the {evicted} that make room for the others, before any \
             header read timeout (cap {cap})"
        );
    }
    let during = open_fds(pid);
    println!(
        "figure: daemon descriptors {before} before, {during} with 200 slow clients \
         ({closed} closed to make room within {made_room_within:?})"
    );
    assert!(
        during <= before + 40,
        "200 slow clients took {} descriptors of the daemon",
        during - before
    );
    // Their streams close with their tasks.
    for w in &watchers {
        w.abort();
    }
    let (code, _) = timeout(Duration::from_secs(10), get(&d.url, "/healthz"))
        .await
        .expect("the daemon answers again once the slow clients are gone");
    assert_eq!(code, 200);
    assert_eq!(signal(&mut d, "-TERM").await, 0);
}

/// Issue 25, item 7: idle connections cannot keep a probe from being answered. Before, the
/// daemon served 32 connections and left the others in the accept queue: with 31 idle ones a
/// probe was answered at once, with 33 not within 3 s (a kubelet's liveness probe fails, the
/// pod is restarted). Now a new connection closes the oldest past the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_never_keep_a_probe_from_being_answered() {
    let api = PodsApi::start().await;
    let mut d = start(&conf_file(&api), &[]).await;
    let host = d.url.strip_prefix("http://").unwrap().to_owned();
    let mut idle = Vec::new();
    for _ in 0..(podsweep::daemon::http::MAX_CONNECTIONS + 8) {
        idle.push(tokio::net::TcpStream::connect(&host).await.unwrap());
    }
    for probe in 0..3 {
        let t0 = std::time::Instant::now();
        let (code, body) = timeout(Duration::from_secs(3), get(&d.url, "/healthz"))
            .await
            .unwrap_or_else(|_| {
                panic!("probe {probe}: no answer within 3 s with 40 idle connections")
            });
        println!(
            "figure: probe {probe} answered {code} in {:?} beside 40 idle connections",
            t0.elapsed()
        );
        assert_eq!(code, 200, "{body}");
    }
    drop(idle);
    assert_eq!(signal(&mut d, "-TERM").await, 0);
}

/// Issue 32: a connection flood cannot cut a probe. A probe whose request is still arriving
/// (its request line sent, its headers not finished) when 40 other connections open is
/// answered: before, the 33rd connection closed the oldest, the probe's (a kubelet then counts
/// a failed liveness probe and, after three, restarts the pod).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_flood_never_cuts_a_probe() {
    let api = PodsApi::start().await;
    let mut d = start(&conf_file(&api), &[]).await;
    let host = d.url.strip_prefix("http://").unwrap().to_owned();
    let mut flood = Vec::new();
    for path in ["/livez", "/healthz"] {
        let mut probe = tokio::net::TcpStream::connect(&host).await.unwrap();
        probe
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n").as_bytes())
            .await
            .unwrap();
        for _ in 0..(podsweep::daemon::http::MAX_CONNECTIONS + 8) {
            flood.push(tokio::net::TcpStream::connect(&host).await.unwrap());
        }
        // The daemon's one accept loop takes connections in order: once this request is
        // answered, it has taken the whole flood.
        let (code, _) = get(&d.url, "/status").await;
        assert_eq!(code, 200);
        probe.write_all(b"\r\n").await.unwrap();
        let mut answer = String::new();
        let read = timeout(Duration::from_secs(5), probe.read_to_string(&mut answer)).await;
        println!(
            "{path} beside {} flooding connections: {:?}",
            flood.len(),
            answer.lines().next()
        );
        assert!(read.is_ok(), "{path}: no answer within 5 s");
        assert!(
            answer.starts_with("HTTP/1.1 200"),
            "{path}: the probe's connection was cut: {answer:?}"
        );
    }
    drop(flood);
    assert_eq!(signal(&mut d, "-TERM").await, 0);
}

/// Issue 20, as a new user tries it: the daemon pointed at an API server that nobody answers
/// (a closed port). Its leader watches nothing it could list, so within seconds `/healthz` is
/// 503 and says so, `podsweep_healthy` and `podsweep_watching` read 0, `podsweep_paused` reads
/// 1 for `watch_failing` with when the next list is tried, and `/status` has the pause.
/// Before issue 20: `/healthz` 200 "ok", `podsweep_healthy 1`, `podsweep_watching 1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_whose_api_server_is_unreachable_is_unhealthy_with_the_reason() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let file = format!(
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind NONE\n\
         kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.kind=ALL\n\
         kyuubi.kubernetes.master.address=http://127.0.0.1:{port}\n\
         kyuubi.kubernetes.namespace  {NS}\n\
         kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.singleServer=true\n"
    );
    let mut d = start(&file, &[]).await;
    let t0 = std::time::Instant::now();
    let (code, body) = loop {
        let (code, body) = get(&d.url, "/healthz").await;
        if code != 200 || t0.elapsed() > Duration::from_secs(10) {
            break (code, body);
        }
        sleep(Duration::from_millis(100)).await;
    };
    println!("/healthz {code} after {:?}: {body}", t0.elapsed());
    assert_eq!(code, 503, "{body}");
    // The liveness probe is another condition: the process answers, so it is not restarted.
    assert_eq!(get(&d.url, "/livez").await, (200, "ok\n".to_owned()));
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let reasons = v["reasons"].to_string();
    assert!(reasons.contains("cannot list"), "{reasons}");
    assert!(
        v["pauses"][0]
            .as_str()
            .unwrap()
            .contains("paused (watch_failing)"),
        "{v}"
    );
    let (_, metrics) = get(&d.url, "/metrics").await;
    let l = "context=\"\",namespace=\"spark\"";
    for line in [
        format!("podsweep_healthy{{{l}}} 0"),
        format!("podsweep_watching{{{l}}} 0"),
        format!("podsweep_paused{{{l},reason=\"watch_failing\"}} 1"),
    ] {
        assert!(
            metrics.lines().any(|x| x == line),
            "missing {line:?} in\n{metrics}"
        );
    }
    assert!(metrics.contains(&format!(
        "podsweep_pause_until_timestamp_seconds{{{l},reason=\"watch_failing\"}}"
    )));
    let (_, status) = get(&d.url, "/status").await;
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(v[0]["pause_reason"], "watch_failing", "{v}");
    assert!(v[0]["paused_until_ms"].is_u64(), "{v}");
    assert_eq!(signal(&mut d, "-TERM").await, 0);
}

/// Issue 20: a configured scope the allow lists refuse is listed by `/status`, `/metrics`
/// (`podsweep_paused{reason="refused"} 1`) and `/healthz` (503 naming it), even while another
/// scope is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_configured_scope_is_reported() {
    let api = PodsApi::start().await;
    let file = format!(
        "{}kyuubi.kubernetes.client.initialize.list=:spark,:other\n\
         kyuubi.kubernetes.namespace.allow.list=spark\n",
        conf_file(&api)
    );
    let mut d = start(&file, &[]).await;
    let (code, body) = get(&d.url, "/healthz").await;
    println!("/healthz {code} {body}");
    assert_eq!(code, 503);
    assert!(body.contains("other") && body.contains("refused"), "{body}");
    let (_, metrics) = get(&d.url, "/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|x| x == "podsweep_paused{context=\"\",namespace=\"other\",reason=\"refused\"} 1"),
        "{metrics}"
    );
    assert!(metrics
        .lines()
        .any(|x| x == "podsweep_paused{context=\"\",namespace=\"spark\",reason=\"refused\"} 0"));
    let (_, status) = get(&d.url, "/status").await;
    let v: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v[1]["pause_reason"], "refused", "{v}");
    assert_eq!(signal(&mut d, "-TERM").await, 0);
}

/// A bad configuration is reported without the secrets it holds (Kyuubi's redaction rule, URL
/// passwords), and `--list-keys` prints podsweep's key table.
#[tokio::test]
async fn a_bad_configuration_is_reported_without_its_secrets_and_list_keys_prints_the_table() {
    let api = PodsApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("kyuubi-defaults.conf");
    std::fs::write(&conf, conf_file(&api)).unwrap();
    let cases: &[(&str, &str)] = &[
        (
            "kyuubi.kubernetes.master.address=ftp://admin:hunter2pw@api.example",
            "hunter2pw",
        ),
        (
            "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.rateLimit.qps=secret-7f3a",
            "secret-7f3a",
        ),
    ];
    for (arg, secret) in cases {
        let out = Command::new(BIN)
            .arg("--config")
            .arg(&conf)
            .args(["--listen", "127.0.0.1:0", "--conf", arg])
            .output()
            .await
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        println!("{arg} -> {:?}: {}", out.status.code(), err.trim());
        assert_eq!(out.status.code(), Some(2), "{arg}");
        assert!(!err.contains(secret), "{arg}: {err}");
        assert!(err.contains("*********(redacted)"), "{arg}: {err}");
    }
    let out = Command::new(BIN)
        .args(["--list-keys", "json"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let keys: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        keys.as_array().unwrap().len(),
        podsweep::config::table::KEYS.len()
    );
    let md = Command::new(BIN)
        .args(["--list-keys", "markdown"])
        .output()
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&md.stdout),
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/settings.md")).unwrap()
    );
}
