//! Issue 20, section 3: every pause of a scope is visible, with its cause and its end, in the
//! scope's status (`paused`, `pause_reason`, `paused_until_ms`, `pause_ms`, `pauses`), in the
//! daemon's `/metrics` (`podsweep_paused`, `podsweep_pause_seconds`,
//! `podsweep_pause_until_timestamp_seconds`) and `/healthz` (computed from the same status by
//! `podsweep::daemon::exposition`); a long pause is logged once when it starts and once when it
//! ends. API faults on the tower mock (paused time, `common::fixture`); the HA pauses on a real
//! ZooKeeper server.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::fixture::{capture, start, status_reply, Fixture, STEP_DOWN_AFTER};
use common::manual::ManualBackend;
use common::zk::{ZkOptions, ZkServer};
use futures::future::BoxFuture;
use podsweep::clock::Clock;
use podsweep::config::{keys, Settings, ZkSettings};
use podsweep::daemon::exposition;
use podsweep::deleter::{KubeDeleter, Outcome, OutcomeClass, PodDeleter};
use podsweep::election::zookeeper::ZooKeeperBackend;
use podsweep::election::Backend;
use podsweep::engine::Engine;
use podsweep::model::{AppState, EventKind};
use podsweep::scope::Scope;
use podsweep::sweeper::DeleterSource;
use serde_json::Value;
use tokio::time::Instant;

/// The real HA tests measure on real time: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The `/metrics` line of `family` for the scope `(no context, ns)` and `reason`, if any.
fn metric(text: &str, family: &str, ns: &str, reason: &str) -> Option<f64> {
    let prefix = format!("{family}{{context=\"\",namespace=\"{ns}\",reason=\"{reason}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.parse().ok())
}

/// Lines of the captured log, at any level, containing `needle`.
fn log_lines(logs: &common::fixture::Capture, needle: &str) -> usize {
    logs.messages(i32::MAX, needle).len()
}

/// A Retry-After of ten minutes: the scope reads paused (`retry_after`) until then, healthy at
/// first and unhealthy once the pause has lasted `health.alertAfter`; `/metrics` and
/// `/healthz` say the same; one WARN at its start, one INFO at its end; after it, one DELETE
/// leaves first (the ramp), and its answer ends the pause.
/// Before issue 20 the status had no pause at all and read healthy throughout.
#[tokio::test(start_paused = true)]
async fn a_retry_after_pause_is_visible_until_it_ends() {
    start();
    let logs = capture();
    let mut f = Fixture::new("ALL").await;
    f.lead().await;
    f.observe_finished("ra", 4, EventKind::Update, 600);
    // The first burst is answered 429 with a Retry-After of 10 minutes.
    let (_, _, send) = f.next_delete(Duration::from_millis(10)).await.unwrap();
    send.send_response(status_reply(429, "TooManyRequests", Some("600")));
    f.settle().await;
    while let Some((_, _, s)) = f.next_delete(Duration::ZERO).await {
        s.send_response(status_reply(429, "TooManyRequests", Some("600")));
    }
    f.settle().await;
    let st = f.status();
    println!(
        "status: paused {} reason {} until {} detail {}",
        st["paused"], st["pause_reason"], st["paused_until_ms"], st["pause_detail"]
    );
    assert_eq!(st["paused"], true, "{st}");
    assert_eq!(st["pause_reason"], "retry_after", "{st}");
    let until = st["paused_until_ms"].as_u64().expect("an end");
    let left = until.saturating_sub(now_ms());
    assert!(
        (590_000..=601_000).contains(&left),
        "ends in {left} ms, not in 600 s"
    );
    assert!(st["pause_detail"].as_str().unwrap().contains("429"), "{st}");
    assert_eq!(st["healthy"], true, "a fresh Retry-After is normal: {st}");
    let metrics = exposition::prometheus(std::slice::from_ref(&st));
    assert_eq!(
        metric(&metrics, "podsweep_paused", "spark", "retry_after"),
        Some(1.0)
    );
    assert_eq!(
        metric(&metrics, "podsweep_paused", "spark", "backoff"),
        Some(0.0)
    );
    let until_s = metric(
        &metrics,
        "podsweep_pause_until_timestamp_seconds",
        "spark",
        "retry_after",
    )
    .expect("its end in /metrics");
    assert!((until_s - until as f64 / 1000.0).abs() < 2.0);
    assert!(exposition::health_reasons(std::slice::from_ref(&st)).is_empty());
    let lines = exposition::pause_lines(std::slice::from_ref(&st));
    assert!(lines[0].contains("paused (retry_after)"), "{lines:?}");
    assert_eq!(
        log_lines(&logs, "<default context>:spark is paused (retry_after)"),
        1,
        "one WARN as the long pause starts"
    );
    // Minutes later it is still paused, now unhealthy, and /healthz says why.
    tokio::time::sleep(Duration::from_secs(130)).await;
    let st = f.status();
    assert_eq!(st["pause_reason"], "retry_after");
    assert!(st["pause_ms"].as_u64().unwrap() >= 130_000, "{st}");
    assert_eq!(st["healthy"], false, "{st}");
    let reasons = exposition::health_reasons(std::slice::from_ref(&st));
    println!("/healthz reasons: {reasons:?}");
    assert!(
        reasons.iter().any(|r| r.contains("Retry-After")),
        "{reasons:?}"
    );
    assert_eq!(
        metric(
            &exposition::prometheus(std::slice::from_ref(&st)),
            "podsweep_pause_seconds",
            "spark",
            "retry_after"
        )
        .map(|s| s >= 130.0),
        Some(true)
    );
    assert_eq!(
        log_lines(&logs, "<default context>:spark is paused (retry_after)"),
        1,
        "not one line per pod or per check"
    );
    // The wait passes: one DELETE leaves, and only one, until it is answered.
    let (_, _, send) = f.next_delete(Duration::from_secs(480)).await.unwrap();
    assert!(
        f.next_delete(Duration::from_millis(100)).await.is_none(),
        "a burst after the pause"
    );
    assert_eq!(
        f.status()["pause_reason"],
        "retry_after",
        "until it is answered"
    );
    send.send_response(status_reply(200, "", None));
    f.settle().await;
    let st = f.status();
    assert_eq!(st["paused"], false, "{st}");
    assert_eq!(st["healthy"], true, "{st}");
    // The ramp doubles: two next, then the last one.
    let (_, _, a) = f.next_delete(Duration::from_secs(1)).await.unwrap();
    let (_, _, b) = f.next_delete(Duration::from_millis(10)).await.unwrap();
    assert!(f.next_delete(Duration::from_millis(100)).await.is_none());
    a.send_response(status_reply(200, "", None));
    b.send_response(status_reply(200, "", None));
    f.settle().await;
    let (_, _, c) = f.next_delete(Duration::from_secs(1)).await.unwrap();
    c.send_response(status_reply(200, "", None));
    f.settle().await;
    assert_eq!(f.status()["tracked"], 0, "every pod deleted");
    // Its end is logged once it has not come again for a while (a 429 soon after continues it).
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        log_lines(
            &logs,
            "<default context>:spark is no longer paused (retry_after)"
        ),
        1
    );
}

/// DELETEs refused (403): every due pod waits for its slow retry, and the scope reads paused
/// (`backoff`) until the next one leaves; a backoff alone leaves the scope healthy (a leader
/// that deletes nothing for `ha.stepDownAfter` steps down: the next test).
#[tokio::test(start_paused = true)]
async fn a_backoff_pause_shows_when_the_next_retry_leaves() {
    start();
    let mut f = Fixture::new("ALL").await;
    f.lead().await;
    f.observe(f.pod("rbac", EventKind::Update, AppState::Finished, Some(600)));
    let (_, _, send) = f.next_delete(Duration::from_millis(10)).await.unwrap();
    send.send_response(status_reply(403, "Forbidden", None));
    f.settle().await;
    // The task looks at its state as it loops.
    tokio::time::sleep(Duration::from_millis(10)).await;
    let st = f.status();
    println!(
        "status: reason {} until {} detail {}",
        st["pause_reason"], st["paused_until_ms"], st["pause_detail"]
    );
    assert_eq!(st["pause_reason"], "backoff", "{st}");
    let left = st["paused_until_ms"]
        .as_u64()
        .expect("the next retry")
        .saturating_sub(now_ms());
    // forbidden.retryInterval is 1 min, jittered by +-10 %.
    assert!((50_000..=67_000).contains(&left), "next retry in {left} ms");
    assert!(st["pause_detail"].as_str().unwrap().contains("403"), "{st}");
    assert_eq!(st["healthy"], true, "{st}");
    let metrics = exposition::prometheus(std::slice::from_ref(&st));
    assert_eq!(
        metric(&metrics, "podsweep_paused", "spark", "backoff"),
        Some(1.0)
    );
    // The retry leaves; while it is in flight the scope is not held back.
    let (_, _, send) = f.next_delete(Duration::from_secs(70)).await.unwrap();
    f.settle().await;
    assert_eq!(f.status()["paused"], false, "{}", f.status());
    send.send_response(status_reply(200, "", None));
    f.settle().await;
}

/// A scope task that fails is restarted after a wait: meanwhile it reads paused (`restarting`)
/// until it runs again, and unhealthy.
#[tokio::test(start_paused = true)]
async fn a_restarting_task_reads_paused_until_it_runs_again() {
    start();
    let (service, _mock) = tower_test::mock::pair::<
        http::Request<kube::client::Body>,
        http::Response<kube::client::Body>,
    >();
    let client = kube::Client::new(service, "crash");
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let source: DeleterSource = Arc::new(move |_| {
        let d: Arc<dyn PodDeleter> = Arc::new(KubeDeleter::new(client.clone(), "crash"));
        let first = c.fetch_add(1, Ordering::SeqCst) == 0;
        Box::pin(async move {
            assert!(!first, "deliberate failure of the first client build");
            Ok(d)
        })
    });
    let engine = common::fixture::engine(
        &[(keys::CLEANUP_KIND, "ALL")],
        ManualBackend::default(),
        source,
        Clock::System,
    );
    let scope = Scope::new(None, Some("crash"));
    let obs = common::fixture::observation("boom", EventKind::Update, AppState::Running);
    engine.observe(scope.clone(), obs).unwrap();
    tokio::time::sleep(Duration::from_millis(1)).await;
    let st: Value = serde_json::from_str(&engine.status_json(&scope)).unwrap();
    println!(
        "status: reason {} until {} detail {}",
        st["pause_reason"], st["paused_until_ms"], st["pause_detail"]
    );
    assert_eq!(st["pause_reason"], "restarting", "{st}");
    let left = st["paused_until_ms"]
        .as_u64()
        .expect("when it runs again")
        .saturating_sub(now_ms());
    assert!(left <= 1_000, "runs again in {left} ms");
    assert_eq!(st["pauses"][0]["unhealthy"], true, "{st}");
    assert_eq!(st["healthy"], false);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st: Value = serde_json::from_str(&engine.status_json(&scope)).unwrap();
    assert_eq!(st["paused"], false, "running again: {st}");
    engine.close_async(Duration::from_secs(1)).await;
}

/// Issue 25, items 5 and 7: a Kubernetes client that cannot be built holds the scope back: it
/// reads paused (`client_unavailable`) until the next attempt, and unhealthy; the detail, which
/// quotes the error, shows no secret of the configuration (here the token the error quotes).
/// Before: the status read healthy and not paused, and `/status` quoted errors as they came.
#[tokio::test(start_paused = true)]
async fn a_client_that_cannot_be_built_reads_paused_with_its_cause_scrubbed() {
    start();
    let source: DeleterSource = Arc::new(|_| {
        Box::pin(async {
            Err::<Arc<dyn PodDeleter>, String>(
                "cannot build the Kubernetes client: the token tok-secret-4242 was refused".into(),
            )
        })
    });
    let engine = common::fixture::engine(
        &[
            (keys::CLEANUP_KIND, "ALL"),
            (
                "kyuubi.kubernetes.authenticate.oauthToken",
                "tok-secret-4242",
            ),
        ],
        ManualBackend::default(),
        source,
        Clock::System,
    );
    let scope = Scope::new(None, Some("noclient"));
    let obs = common::fixture::observation("p", EventKind::Update, AppState::Running);
    engine.observe(scope.clone(), obs).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let text = engine.status_json(&scope);
    let st: Value = serde_json::from_str(&text).unwrap();
    println!(
        "status: reason {} until {} detail {}",
        st["pause_reason"], st["paused_until_ms"], st["pause_detail"]
    );
    assert_eq!(st["pause_reason"], "client_unavailable", "{st}");
    assert!(st["paused_until_ms"].as_u64().is_some(), "an end: {st}");
    assert_eq!(st["healthy"], false, "{st}");
    assert!(!text.contains("tok-secret-4242"), "{text}");
    assert!(text.contains("*********(redacted)"), "{text}");
    let all = engine.status_all_json();
    assert!(!all.contains("tok-secret-4242"), "{all}");
    engine.close_async(Duration::from_secs(1)).await;
}

/// A scope the allow lists refuse reads paused (`refused`), open-ended, and unhealthy, with the
/// key that refuses it.
#[tokio::test(start_paused = true)]
async fn a_refused_scope_reads_paused_for_good() {
    start();
    let engine = common::fixture::engine(
        &[
            (keys::CLEANUP_KIND, "ALL"),
            (keys::NAMESPACE_ALLOW_LIST, "spark"),
        ],
        ManualBackend::default(),
        common::fixture::no_deleters(),
        Clock::System,
    );
    let refused = Scope::new(None, Some("other"));
    let obs = common::fixture::observation("x", EventKind::Update, AppState::Finished);
    assert!(engine.observe(refused.clone(), obs).is_err());
    let st: Value = serde_json::from_str(&engine.status_json(&refused)).unwrap();
    println!("status: {st}");
    assert_eq!(st["known"], false);
    assert_eq!(st["pause_reason"], "refused");
    assert_eq!(st["paused_until_ms"], Value::Null, "open-ended");
    assert!(st["pause_detail"]
        .as_str()
        .unwrap()
        .starts_with(keys::NAMESPACE_ALLOW_LIST));
    assert_eq!(st["healthy"], false);
    let metrics = exposition::prometheus(std::slice::from_ref(&st));
    assert_eq!(
        metric(&metrics, "podsweep_paused", "other", "refused"),
        Some(1.0)
    );
    engine.close_async(Duration::from_secs(1)).await;
}

fn zk_settings(
    server: &ZkServer,
    extra: &[(&str, &str)],
) -> (Settings, Arc<dyn Backend>, ZkSettings) {
    let mut raw: std::collections::HashMap<String, String> = [
        (keys::CLEANUP_KIND, "ALL"),
        (keys::RETAIN_PERIOD, "PT1S"),
        (keys::HA_ADDRESSES, server.addr().as_str()),
        (keys::HA_NAMESPACE, "pauses"),
        (keys::ZK_SESSION_TIMEOUT, "6000"),
        (keys::HEALTH_ALERT_AFTER, "PT3S"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    for (k, v) in extra {
        raw.insert((*k).to_owned(), (*v).to_owned());
    }
    let settings = Settings::from_map(raw).unwrap();
    let zk = ZkSettings {
        addresses: server.addr(),
        namespace: "pauses".to_owned(),
        session_timeout: Duration::from_millis(6000),
        connection_timeout: Duration::from_millis(15_000),
        ..ZkSettings::default()
    };
    let backend: Arc<dyn Backend> = Arc::new(ZooKeeperBackend::new(zk.clone()));
    (settings, backend, zk)
}

async fn wait_status(
    engine: &Engine,
    scope: &Scope,
    what: &str,
    within: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let t0 = Instant::now();
    loop {
        let st: Value = serde_json::from_str(&engine.status_json(scope)).unwrap();
        if pred(&st) {
            return st;
        }
        assert!(t0.elapsed() < within, "{what}: not within {within:?}: {st}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Real ZooKeeper: the leader's server dies. The scope reads paused (`ha_session_lost`,
/// open-ended) at once, unhealthy after `health.alertAfter` (3 s here) with `/healthz`
/// saying so, and not paused once the same session is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_ha_session_reads_paused_until_it_is_back() {
    let _serial = SERIAL.lock().await;
    let mut server = ZkServer::start_with(ZkOptions {
        max_session: Duration::from_secs(10),
        ..ZkOptions::default()
    });
    let (settings, backend, _) = zk_settings(&server, &[]);
    let engine = Engine::with_parts(
        settings,
        "server-a",
        backend,
        common::fixture::no_deleters(),
        Clock::System,
        tokio::runtime::Handle::current(),
    )
    .unwrap();
    let scope = Scope::new(None, Some("ha"));
    let obs = common::fixture::observation("r", EventKind::Add, AppState::Running);
    engine.observe(scope.clone(), obs).unwrap();
    wait_status(&engine, &scope, "leading", Duration::from_secs(15), |s| {
        s["leadership"] == "LEADING"
    })
    .await;
    let t0 = Instant::now();
    server.stop();
    let st = wait_status(&engine, &scope, "paused", Duration::from_secs(6), |s| {
        s["pause_reason"] == "ha_session_lost"
    })
    .await;
    println!(
        "figure: paused (ha_session_lost) {:?} after the server died: {}",
        t0.elapsed(),
        st["pause_detail"]
    );
    assert_eq!(st["paused_until_ms"], Value::Null, "open-ended");
    let metrics = exposition::prometheus(std::slice::from_ref(&st));
    assert_eq!(
        metric(&metrics, "podsweep_paused", "ha", "ha_session_lost"),
        Some(1.0)
    );
    let st = wait_status(&engine, &scope, "unhealthy", Duration::from_secs(6), |s| {
        s["healthy"] == false
    })
    .await;
    assert!(
        t0.elapsed() >= Duration::from_secs(3),
        "unhealthy only after health.alertAfter"
    );
    assert_eq!(st["pauses"][0]["unhealthy"], true, "{st}");
    let reasons = exposition::health_reasons(std::slice::from_ref(&st));
    println!("/healthz reasons: {reasons:?}");
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("no reachable cleanup leader")),
        "{reasons:?}"
    );
    server.restart();
    let st = wait_status(&engine, &scope, "resumed", Duration::from_secs(20), |s| {
        s["paused"] == false
    })
    .await;
    assert_eq!(st["healthy"], true, "{st}");
    engine.close_async(Duration::from_secs(5)).await;
}

/// Refuses every DELETE (a wrong service account).
struct Forbidden;

impl PodDeleter for Forbidden {
    fn delete(&self, _name: &str, _uid: &str, _dry_run: bool) -> BoxFuture<'static, Outcome> {
        Box::pin(async {
            Outcome {
                class: OutcomeClass::Forbidden,
                code: Some(403),
                reason: "Forbidden".into(),
                message: "pods is forbidden".into(),
                retry_after: None,
                flow: None,
            }
        })
    }
}

/// Real ZooKeeper: a leader whose DELETEs are all refused steps down after `ha.stepDownAfter`
/// (2 s here) and stays out of the election as long: it reads paused (`step_down_hold`) until
/// then, unhealthy, and back in the election afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_down_hold_reads_paused_until_it_ends() {
    let _serial = SERIAL.lock().await;
    let server = ZkServer::start();
    let (settings, backend, _) = zk_settings(&server, &[(STEP_DOWN_AFTER, "PT2S")]);
    let source: DeleterSource = Arc::new(|_| {
        let d: Arc<dyn PodDeleter> = Arc::new(Forbidden);
        Box::pin(async move { Ok(d) })
    });
    let engine = Engine::with_parts(
        settings,
        "server-a",
        backend,
        source,
        Clock::System,
        tokio::runtime::Handle::current(),
    )
    .unwrap();
    let scope = Scope::new(None, Some("hold"));
    let mut obs = common::fixture::observation("f", EventKind::Update, AppState::Finished);
    obs.terminated_at = Some(UNIX_EPOCH + Duration::from_secs(1_000_000_000));
    engine.observe(scope.clone(), obs).unwrap();
    let st = wait_status(
        &engine,
        &scope,
        "stepped down",
        Duration::from_secs(30),
        |s| s["pause_reason"] == "step_down_hold",
    )
    .await;
    println!(
        "status: leadership {} until {} detail {}",
        st["leadership"], st["paused_until_ms"], st["pause_detail"]
    );
    assert_eq!(st["leadership"], "FOLLOWING", "{st}");
    let left = st["paused_until_ms"]
        .as_u64()
        .expect("the hold's end")
        .saturating_sub(now_ms());
    assert!(left <= 2_000, "the hold ends in {left} ms");
    assert_eq!(st["healthy"], false);
    let metrics = exposition::prometheus(std::slice::from_ref(&st));
    assert_eq!(
        metric(&metrics, "podsweep_paused", "hold", "step_down_hold"),
        Some(1.0)
    );
    wait_status(&engine, &scope, "hold over", Duration::from_secs(5), |s| {
        !s["pauses"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["reason"] == "step_down_hold"))
    })
    .await;
    engine.close_async(Duration::from_secs(5)).await;
}
