//! `scripts/bench watch_cost`: what the self-watch leader's pod watch costs the leader and the API
//! server, on a real kube-apiserver (scripts/kube; etcd from Debian unless `PODSWEEP_ETCD` names
//! another).
//!
//! `cargo bench --bench watch_cost -- watch_cost [--smoke]` prints one JSON line per variant on
//! stdout (`{"bench": "watch_cost", "variant": ..., ...}`), progress on stderr. Sizes: 50,000
//! running and 5,000 terminated Kyuubi driver pods in one namespace, 1,000 pods through their
//! life for the per-pod figures; `--smoke`: 200, 20 and 20.
//!
//! 1. A fresh API server (`scripts/kube up`; `PODSWEEP_WATCH_COST_KUBE_FLAGS` adds flags, e.g.
//!    `--feature-gates WatchList=false`). The pods are created as spark-submit creates a driver
//!    (`common::driver_pods`: Spark 3.5's driver pod with Kyuubi's tag), 48 at a time, and their
//!    status is written through the status subresource as a kubelet writes it: running, or Failed
//!    two hours ago.
//! 2. For each variant (`PODSWEEP_WATCH_COST_VARIANTS`, comma-separated; default: `default`;
//!    `legacy`: `watch.phaseSelector` and `watch.streamingList` off; `no_selector`,
//!    `no_streaming`: one of them off; `before`: the daemon `PODSWEEP_WATCH_COST_BEFORE_BIN` names,
//!    another build's, as it is configured by default, e.g. one from before the selector, the
//!    streaming list and the slim decoding, its commit in `PODSWEEP_WATCH_COST_BEFORE_COMMIT`): the
//!    API server is restarted (a fresh process, its watch cache filled from etcd), its peak RSS is
//!    reset (`/proc/PID/clear_refs`), and the daemon (`podsweep --single-server`, this build's
//!    binary) starts as the scope's leader, reaching the API server through a counting TCP proxy.
//!    Cleanup kind ALL, retain period PT5S, `failed.retainPeriod` P1D: the Failed pods wait, none is
//!    deleted during the list.
//!    * **list**: from the daemon's first list (its status `watch_streams` 1) to `watching`: the
//!      time, the objects it received (`watch_events`), the bytes it received (the proxy, TLS
//!      included), its RSS then and its peak; the bytes the API server allocated meanwhile (its
//!      `go_memstats_alloc_bytes_total`), its RSS before and its peak during the list (`VmHWM`
//!      after the reset: a Go heap with room left from the cache's own list grows little).
//!    * **churn**: 1,000 new driver pods, 16 at a time, each created, then (status) creating,
//!      running, Succeeded; the daemon deletes each after 5 s. Done when it has deleted them all
//!      and has taken a last event sent after them (an annotation on a Failed pod, which every
//!      variant's watch carries). Per terminated pod: the watch events the daemon took; the
//!      bytes of those events (a second watch with the daemon's own selectors, opened by the
//!      bench just before, read until that last event: the JSON lines the API server sends);
//!      the bytes the daemon received on the wire (its watch and its DELETEs' answers, TLS
//!      included).
//!
//! The daemon's `/status` is read every 20 ms; the list time is good to that. The daemon is this
//! build's `podsweep`, or the binary `PODSWEEP_WATCH_COST_BIN` names (its commit then given by
//! `PODSWEEP_WATCH_COST_DAEMON_COMMIT`, the line's `daemon_commit`).

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::time::{Duration, Instant, SystemTime};

use common::daemon_proc::Daemon;
use common::driver_pods;
use common::kube_ops::rss;
use common::proxy::Proxy;
use common::real_kube::RealKube;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{json, Value};

/// The daemon: this build's, or `PODSWEEP_WATCH_COST_BIN` (another build's, for a before/after).
fn bin() -> String {
    std::env::var("PODSWEEP_WATCH_COST_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_podsweep").to_owned())
}
const NS: &str = "spark";
const LEADER: &str = "watch-cost-leader";
const CREATORS: usize = 48;
const CHURNERS: usize = 16;
/// The tag's run field of each kind of pod (`driver_pods::names`).
const RUNNING_RUN: u16 = 0;
const FAILED_RUN: u16 = 1;
const CHURN_RUN: u16 = 0x100;

struct Size {
    running: usize,
    terminated: usize,
    churn: usize,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    if let Some(name) = args.iter().find(|a| !a.starts_with('-')) {
        if name != "watch_cost" {
            eprintln!("[watch_cost] nothing named {name:?} here (this bench is \"watch_cost\")");
            return;
        }
    }
    let env_n = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let size = Size {
        running: env_n(
            "PODSWEEP_WATCH_COST_RUNNING",
            if smoke { 200 } else { 50_000 },
        ),
        terminated: env_n(
            "PODSWEEP_WATCH_COST_TERMINATED",
            if smoke { 20 } else { 5_000 },
        ),
        churn: env_n("PODSWEEP_WATCH_COST_CHURN", if smoke { 20 } else { 1_000 }),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    if let Err(e) = rt.block_on(run(size)) {
        eprintln!("[watch_cost] failed: {e}");
        std::process::exit(1);
    }
}

/// The daemon's configuration overrides of each variant.
fn variant_conf(name: &str) -> Option<Vec<(&'static str, &'static str)>> {
    use podsweep::config::keys::{WATCH_PHASE_SELECTOR, WATCH_STREAMING_LIST};
    match name {
        // This build's defaults.
        "default" => Some(vec![]),
        // Every driver pod, by a list (the pods are still decoded slim).
        "legacy" => Some(vec![
            (WATCH_PHASE_SELECTOR, "false"),
            (WATCH_STREAMING_LIST, "false"),
        ]),
        "no_selector" => Some(vec![(WATCH_PHASE_SELECTOR, "false")]),
        "no_streaming" => Some(vec![(WATCH_STREAMING_LIST, "false")]),
        // Another build's daemon with its own defaults (it may not know this build's keys).
        "before" => Some(vec![]),
        _ => None,
    }
}

/// The daemon of a variant and the commit it was built from: `before` runs the build
/// `PODSWEEP_WATCH_COST_BEFORE_BIN` names, every other variant this run's daemon.
fn variant_daemon(name: &str) -> Result<(String, String), String> {
    if name == "before" {
        let bin = std::env::var("PODSWEEP_WATCH_COST_BEFORE_BIN").map_err(|_| {
            "variant before: set PODSWEEP_WATCH_COST_BEFORE_BIN to another build's podsweep"
                .to_owned()
        })?;
        if !std::path::Path::new(&bin).is_file() {
            return Err(format!(
                "variant before: PODSWEEP_WATCH_COST_BEFORE_BIN={bin} is not a file"
            ));
        }
        let commit = std::env::var("PODSWEEP_WATCH_COST_BEFORE_COMMIT")
            .map_err(|_| "variant before: set PODSWEEP_WATCH_COST_BEFORE_COMMIT to the commit it was built from".to_owned())?;
        return Ok((bin, commit));
    }
    let commit = std::env::var("PODSWEEP_WATCH_COST_DAEMON_COMMIT")
        .unwrap_or_else(|_| podsweep::build_info::COMMIT.to_owned());
    Ok((bin(), commit))
}

async fn run(size: Size) -> Result<(), String> {
    let variants: Vec<String> = std::env::var("PODSWEEP_WATCH_COST_VARIANTS")
        .unwrap_or_else(|_| "default".into())
        .split(',')
        .map(|v| v.trim().to_owned())
        .filter(|v| !v.is_empty())
        .collect();
    for v in &variants {
        variant_conf(v).ok_or_else(|| format!("unknown variant {v:?}"))?;
        variant_daemon(v)?;
    }
    let flags: Vec<String> = std::env::var("PODSWEEP_WATCH_COST_KUBE_FLAGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let mut up: Vec<&str> = Vec::new();
    if !flags.is_empty() {
        up.push("--");
        up.extend(flags.iter().map(String::as_str));
    }
    let kube = RealKube::start("podsweep-watch-cost-", &up);
    let result = measure_all(&kube, &size, &variants, &flags).await;
    kube.down();
    let _ = std::fs::remove_dir_all(&kube.dir);
    result
}

async fn measure_all(
    kube: &RealKube,
    size: &Size,
    variants: &[String],
    flags: &[String],
) -> Result<(), String> {
    kube.namespace(NS).await;
    let token = kube.server_token(LEADER).await;
    let started = Instant::now();
    populate(kube, size).await?;
    let populate_s = started.elapsed().as_secs_f64();
    eprintln!(
        "[watch_cost] {} running and {} terminated driver pods in {populate_s:.0} s",
        size.running, size.terminated
    );
    for (round, v) in variants.iter().enumerate() {
        let conf = variant_conf(v).unwrap_or_default();
        let (daemon, daemon_commit) = variant_daemon(v)?;
        let mut line = measure(kube, &token, size, &conf, &daemon, round).await?;
        line["variant"] = v.as_str().into();
        line["variant_conf"] = conf
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .into();
        line["api_server"] = format!("kube-apiserver {}", kube.version).into();
        line["etcd"] = kube.etcd_version().into();
        line["kube_flags"] = flags.to_vec().into();
        line["running"] = size.running.into();
        line["terminated"] = size.terminated.into();
        line["churn_pods"] = size.churn.into();
        line["populate_s"] = round2(populate_s).into();
        line["daemon_commit"] = daemon_commit.into();
        line["loadavg_1m"] = loadavg().into();
        common::bench::line("watch_cost", line);
    }
    Ok(())
}

/// Creates the running and the terminated (Failed two hours ago) driver pods.
async fn populate(kube: &RealKube, size: &Size) -> Result<(), String> {
    let api: Api<Pod> = Api::namespaced(kube.admin().await, NS);
    let jobs = (0..size.running)
        .map(|i| (i, false))
        .chain((0..size.terminated).map(|i| (i, true)));
    let total = size.running + size.terminated;
    let mut done = 0usize;
    let mut results = futures::stream::iter(jobs)
        .map(|(i, term)| {
            let api = api.clone();
            async move {
                let run = if term { FAILED_RUN } else { RUNNING_RUN };
                let (name, tag) = driver_pods::names(i, run);
                let status = if term {
                    let f = SystemTime::now() - Duration::from_secs(7200);
                    driver_pods::terminated("Failed", f - Duration::from_secs(600), f)
                } else {
                    driver_pods::running(SystemTime::now() - Duration::from_secs(60))
                };
                write_pod(&api, &name, &tag, &[status]).await
            }
        })
        .buffer_unordered(CREATORS);
    while let Some(r) = results.next().await {
        r?;
        done += 1;
        if done.is_multiple_of(5000) {
            eprintln!("[watch_cost] {done}/{total} pods");
        }
    }
    Ok(())
}

/// Creates a pod (an earlier attempt's pod counts) and writes its statuses in order; retried.
async fn write_pod(
    api: &Api<Pod>,
    name: &str,
    tag: &str,
    statuses: &[Value],
) -> Result<(), String> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let r = async {
            match driver_pods::create(api, name, tag).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e),
            }
            for s in statuses {
                driver_pods::set_status(api, name, s).await?;
            }
            Ok(())
        }
        .await;
        match r {
            Ok(()) => return Ok(()),
            Err(e) if attempt < 5 => {
                eprintln!("[watch_cost] {name}: {e}; again");
                tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
            }
            Err(e) => return Err(format!("{name}: {e}")),
        }
    }
}

/// An admin client without a read timeout (a watch may be quiet for a while).
async fn unhurried(kube: &RealKube) -> Result<kube::Client, String> {
    let conf: std::collections::HashMap<String, String> =
        kube.client_conf(&kube.admin_token).into_iter().collect();
    let mut cfg = podsweep::kube_client::build_config(&conf)
        .await
        .map_err(|e| e.to_string())?;
    cfg.read_timeout = None;
    kube::Client::try_from(cfg).map_err(|e| e.to_string())
}

/// A second watch with the leader's own selectors, from the bench: the bytes and events the
/// API server sends on such a watch, from `rv` until the sentinel's event (left out).
async fn mirror_watch(
    client: kube::Client,
    selector: Option<String>,
    rv: String,
    sentinel: String,
) -> Result<(u64, u64), String> {
    use futures::AsyncBufReadExt as _;
    let mut base = format!(
        "/api/v1/namespaces/{NS}/pods?watch=1&allowWatchBookmarks=false&labelSelector=kyuubi-unique-tag"
    );
    if let Some(f) = selector {
        base.push_str("&fieldSelector=");
        base.push_str(
            &f.replace('!', "%21")
                .replace('=', "%3D")
                .replace(',', "%2C"),
        );
    }
    let (mut bytes, mut events) = (0u64, 0u64);
    // The API server may end a watch at any time: at once with one ERROR event when, restarted a
    // moment ago, its watch cache is not yet at the version asked; later when it closes a watcher
    // it finds slow while the churn keeps it busy. Like an informer, the watch is opened again
    // from the last version it delivered (nothing is lost or counted twice); an ERROR after
    // events (410: that version is gone) ends the measurement.
    let give_up = Instant::now() + Duration::from_secs(900);
    let (mut from, mut reopened, mut last_error) = (rv, 0u32, String::new());
    while Instant::now() < give_up {
        let mut url = base.clone();
        url.push_str(&format!("&resourceVersion={from}"));
        let req = http::Request::get(url)
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        let body = client
            .request_stream(req)
            .await
            .map_err(|e| e.to_string())?;
        let mut lines = Box::pin(body).lines();
        while let Some(line) = lines.next().await {
            let line = match line {
                Ok(l) => l,
                Err(e) => {
                    last_error = e.to_string();
                    break;
                }
            };
            if line.contains(&sentinel) {
                if reopened > 0 {
                    eprintln!("[watch_cost] the mirror watch was opened again {reopened} time(s)");
                }
                return Ok((bytes, events));
            }
            if line.contains("\"type\":\"ERROR\"") {
                if events > 0 {
                    return Err(format!(
                        "the mirror watch failed after {events} events: {line}"
                    ));
                }
                last_error = line;
                break;
            }
            if let Some(v) = serde_json::from_str::<Value>(&line).ok().and_then(|e| {
                e["object"]["metadata"]["resourceVersion"]
                    .as_str()
                    .map(str::to_owned)
            }) {
                from = v;
            }
            bytes += line.len() as u64 + 1;
            events += 1;
        }
        reopened += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!(
        "the mirror watch did not reach the sentinel ({events} events, opened {reopened} times): {last_error}"
    ))
}

async fn measure(
    kube: &RealKube,
    token: &str,
    size: &Size,
    conf: &[(&str, &str)],
    daemon_bin: &str,
    round: usize,
) -> Result<Value, String> {
    // A fresh API server for each variant: its memory starts from its watch cache alone.
    kube.restart("kube-apiserver");
    let admin: Api<Pod> = Api::namespaced(kube.admin().await, NS);
    let ready_by = Instant::now() + Duration::from_secs(120);
    while admin
        .list(&ListParams::default().match_any().limit(1))
        .await
        .is_err()
    {
        if Instant::now() > ready_by {
            return Err("the API server's pod cache did not answer within 2 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Settled: the cache's own list is over; then the base figures.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let api_pid = kube.pid("kube-apiserver").ok_or("no kube-apiserver PID")?;
    let (api_base, _) = rss(api_pid).ok_or("no kube-apiserver RSS")?;
    std::fs::write(format!("/proc/{api_pid}/clear_refs"), "5")
        .map_err(|e| format!("cannot reset the API server's peak RSS: {e}"))?;
    let upstream = kube.server.trim_start_matches("https://").to_owned();
    let proxy = Proxy::start(&upstream).await;
    let alloc0 = allocated(kube).await;

    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let file = daemon_conf(kube, token, &proxy, conf);
    let mut daemon = Daemon::start(daemon_bin, dir.path(), &file, LEADER).await?;
    let started = Instant::now();
    // The list: from the first list started to watching.
    let mut list_started: Option<Instant> = None;
    let listed = loop {
        let st = daemon.status(NS).await;
        if list_started.is_none() && n(&st, "watch_streams") >= 1 {
            list_started = Some(Instant::now());
        }
        if st["watching"] == true {
            break st;
        }
        if started.elapsed() > Duration::from_secs(900) {
            return Err(format!("the daemon did not list within 15 minutes: {st}"));
        }
        if let Some(code) = daemon.exited() {
            return Err(format!(
                "the daemon exited ({code}): {}",
                daemon.stderr_tail()
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let listed_at = Instant::now();
    let list_bytes = proxy.bytes_down();
    let (leader_rss, leader_peak) = rss(daemon.pid()).unwrap_or_default();
    // The API server is done with the list once the daemon has it all; a second for its tail.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, api_peak) = rss(api_pid).unwrap_or_default();
    let api_alloc = allocated(kube).await - alloc0;
    let list_ms = list_started.map_or(0, |t| listed_at.duration_since(t).as_millis() as u64);
    eprintln!(
        "[watch_cost] listed {} objects in {list_ms} ms, {} MB received; leader RSS {} MB",
        n(&listed, "watch_events"),
        list_bytes / 1_000_000,
        leader_rss / 1_000_000
    );

    // The churn: pods that run and end, which the leader deletes.
    let before = daemon.status(NS).await;
    let bytes_before = proxy.bytes_down();
    let rv = admin
        .list(&ListParams::default().limit(1))
        .await
        .map_err(|e| format!("list: {e}"))?
        .metadata
        .resource_version
        .unwrap_or_default();
    let selector = listed["watch_field_selector"].as_str().map(str::to_owned);
    let mark = format!("round-{round}-sentinel");
    let mirror = tokio::spawn(mirror_watch(
        unhurried(kube).await?,
        selector,
        rv,
        mark.clone(),
    ));
    let churn_started = Instant::now();
    let mut results = futures::stream::iter(0..size.churn)
        .map(|i| {
            let api = admin.clone();
            async move {
                let (name, tag) = driver_pods::names(i, CHURN_RUN + round as u16);
                let now = SystemTime::now();
                let statuses = [
                    driver_pods::creating(now),
                    driver_pods::running(now),
                    driver_pods::terminated("Succeeded", now, SystemTime::now()),
                ];
                write_pod(&api, &name, &tag, &statuses).await
            }
        })
        .buffer_unordered(CHURNERS);
    while let Some(r) = results.next().await {
        r?;
    }
    drop(results);
    let accepted0 = n(&before["outcomes"], "accepted");
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let st = daemon.status(NS).await;
        if n(&st["outcomes"], "accepted") >= accepted0 + size.churn as u64 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the churn's pods were not deleted in 10 minutes: {st}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A last event, after every event of the churn: once the daemon has taken it, it has
    // taken them all.
    let observed = n(&daemon.status(NS).await, "observed");
    let (sentinel, _) = driver_pods::names(0, FAILED_RUN);
    let patch = json!({"metadata": {"annotations": {"podsweep-bench/round": mark}}});
    admin
        .patch(&sentinel, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| format!("sentinel: {e}"))?;
    let after = loop {
        let st = daemon.status(NS).await;
        if n(&st, "observed") > observed {
            break st;
        }
        if Instant::now() > deadline {
            return Err(format!("the sentinel event did not arrive: {st}"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let churn_s = churn_started.elapsed().as_secs_f64();
    let bytes_after = proxy.bytes_down();
    let (mirror_bytes, mirror_events) = tokio::time::timeout(Duration::from_secs(60), mirror)
        .await
        .map_err(|_| "the mirror watch saw no sentinel within 60 s".to_owned())?
        .map_err(|e| e.to_string())??;
    let (leader_rss_end, leader_peak_end) = rss(daemon.pid()).unwrap_or_default();
    daemon.stop().await;

    let k = size.churn.max(1) as f64;
    let events = n(&after, "watch_events").saturating_sub(n(&before, "watch_events"));
    Ok(json!({
        "list": {
            "mode": listed.get("watch_list_mode").cloned().unwrap_or(Value::Null),
            "field_selector": listed.get("watch_field_selector").cloned().unwrap_or(Value::Null),
            "objects": n(&listed, "watch_events"),
            "time_ms": list_ms,
            "wire_bytes": list_bytes,
            "leader_rss_mb": mb(leader_rss),
            "leader_peak_rss_mb": mb(leader_peak),
            "apiserver_rss_base_mb": mb(api_base),
            "apiserver_peak_rss_mb": mb(api_peak),
            "apiserver_peak_rss_delta_mb": mb(api_peak.saturating_sub(api_base)),
            "apiserver_allocated_mb": round2(api_alloc / 1_048_576.0),
            "tracked": n(&listed, "tracked"),
        },
        "churn": {
            "seconds": round2(churn_s),
            "deleted": n(&after["outcomes"], "accepted") - accepted0,
            "watch_events": events,
            "events_per_terminated_pod": round2(events.saturating_sub(1) as f64 / k),
            "mirror_watch_events": mirror_events,
            "watch_bytes_per_terminated_pod": (mirror_bytes as f64 / k).round(),
            "wire_bytes_per_terminated_pod": ((bytes_after - bytes_before) as f64 / k).round(),
        },
        "leader_rss_end_mb": mb(leader_rss_end),
        "leader_peak_rss_end_mb": mb(leader_peak_end),
    }))
}

/// The bytes the API server's Go runtime has allocated so far (`go_memstats_alloc_bytes_total`).
async fn allocated(kube: &RealKube) -> f64 {
    common::kube_ops::metric_sum(
        &kube.metrics_text().await,
        "go_memstats_alloc_bytes_total",
        &[],
    )
}

fn n(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or(0)
}

fn mb(bytes: u64) -> f64 {
    round2(bytes as f64 / 1_048_576.0)
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn loadavg() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The daemon's configuration: cleanup kind ALL in self-watch mode, retain PT5S, Failed pods
/// P1D, through the proxy with the leader's token; `conf` added.
fn daemon_conf(kube: &RealKube, token: &str, proxy: &Proxy, conf: &[(&str, &str)]) -> String {
    use podsweep::config::keys;
    let mut file = format!(
        "{} NONE\n{}=ALL\n{}=PT5S\n{}=P1D\n{}=P365D\n\
         kyuubi.kubernetes.master.address=https://{}\n\
         kyuubi.kubernetes.authenticate.oauthToken={token}\n\
         kyuubi.kubernetes.authenticate.caCertFile={}\n{}={NS}\n",
        keys::CLEANUP_KIND,
        keys::WATCH_KIND,
        keys::RETAIN_PERIOD,
        keys::FAILED_RETAIN_PERIOD,
        keys::STEP_DOWN_AFTER,
        proxy.addr,
        kube.ca.display(),
        keys::KUBE_NAMESPACE,
    );
    for (k, v) in conf {
        file.push_str(&format!("{k}={v}\n"));
    }
    file
}
