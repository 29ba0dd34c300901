//! Issue 10, "a scope that dies or stalls without telling anyone": each test is one defect of the
//! review, on the mock API server and paused time (see `common::fixture`).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::fixture::{capture, conf, engine, start, status_reply, Fixture, STEP_DOWN_AFTER};
use common::manual::ManualBackend;
use http::HeaderMap;
use podsweep::clock::Clock;
use podsweep::config::{keys, Settings};
use podsweep::deleter::{classify_response, KubeDeleter, PodDeleter};
use podsweep::model::{AppState, EventKind};
use podsweep::scope::Scope;
use podsweep::sweeper::DeleterSource;
use tokio::time::Instant;

/// Item 6, configuration: a retain period or wait beyond what a timer can hold, or a rate so low
/// that its wait overflows, is refused at start with an error that starts with the key.
#[test]
fn unbounded_configuration_is_refused_naming_the_key() {
    for (key, bad) in [
        (keys::RETAIN_PERIOD, "P800D"),
        (keys::RETAIN_PERIOD, "99999999999999"),
        (keys::RETRY_MAX_WAIT, "P1000D"),
        (keys::FORBIDDEN_RETRY, "P1000D"),
        (keys::RATE_QPS, "1e-300"),
    ] {
        let e = Settings::from_map(conf(&[(key, bad)]))
            .err()
            .unwrap_or_else(|| panic!("{key}={bad} was accepted"));
        assert!(e.to_string().starts_with(key), "{e}");
    }
}

/// Item 6, the server: a `Retry-After` of 99999999999 s or an HTTP date years ahead is taken as
/// the stated maximum (ten minutes).
#[test]
fn a_server_cannot_impose_an_unbounded_wait() {
    for ra in ["99999999999", "Fri, 01 Jan 9999 00:00:00 GMT"] {
        let mut h = HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, ra.parse().unwrap());
        let out = classify_response(http::StatusCode::TOO_MANY_REQUESTS, &h, b"{}");
        assert_eq!(out.retry_after, Some(Duration::from_secs(600)), "{ra}");
    }
}

/// Item 6, end to end: the scope survives such an answer and retries after ten minutes.
#[tokio::test(start_paused = true)]
async fn a_huge_retry_after_does_not_kill_the_scope() {
    start();
    let mut f = Fixture::new("ALL").await;
    f.lead().await;
    f.observe(f.pod("ra", EventKind::Update, AppState::Finished, Some(600)));
    let (_, _, send) = f.next_delete(Duration::from_millis(10)).await.unwrap();
    send.send_response(status_reply(429, "TooManyRequests", Some("99999999999")));
    f.settle().await;
    // Later events still reach the task.
    f.observe(f.pod("later", EventKind::Update, AppState::Finished, Some(600)));
    let mut paths = Vec::new();
    while let Some((path, _, send)) = f.next_delete(Duration::from_secs(601)).await {
        send.send_response(status_reply(200, "", None));
        paths.push(path);
        f.settle().await;
    }
    paths.sort();
    assert_eq!(
        paths,
        [
            "/api/v1/namespaces/spark/pods/driver-later",
            "/api/v1/namespaces/spark/pods/driver-ra"
        ]
    );
    assert_eq!(f.status()["healthy"], true);
}

/// Item 6, the safety net: a scope task that fails anyway is restarted with its records, reports
/// unhealthy with the reason meanwhile, and logs one ERROR.
#[tokio::test(start_paused = true)]
async fn a_failed_scope_task_is_restarted_and_reported() {
    start();
    let logs = capture();
    let (service, mut mock) = tower_test::mock::pair::<
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
    let backend = ManualBackend::default();
    let signals = backend.signals.clone();
    let engine = engine(
        &[(keys::CLEANUP_KIND, "ALL")],
        backend,
        source,
        Clock::System,
    );
    let scope = Scope::new(None, Some("crash"));
    let mut obs = common::fixture::observation("boom", EventKind::Update, AppState::Finished);
    obs.terminated_at = Some(std::time::SystemTime::UNIX_EPOCH);
    engine.observe(scope.clone(), obs).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let signal = signals.lock().unwrap()[0].clone();
    signal.lead_until(Instant::now() + Duration::from_secs(3600), "test");
    let status =
        || -> serde_json::Value { serde_json::from_str(&engine.status_json(&scope)).unwrap() };
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(status()["healthy"], false, "{}", status());
    assert!(
        status()["health_reason"]
            .as_str()
            .is_some_and(|r| r.contains("restarted")),
        "{}",
        status()
    );
    let (req, send) = tokio::time::timeout(Duration::from_secs(5), mock.next_request())
        .await
        .expect("the restarted task deletes the overdue pod")
        .unwrap();
    assert_eq!(
        req.uri().path(),
        "/api/v1/namespaces/crash/pods/driver-boom"
    );
    send.send_response(status_reply(200, "", None));
    assert_eq!(status()["restarts"], 1);
    tokio::time::sleep(Duration::from_secs(121)).await;
    assert_eq!(
        status()["healthy"],
        true,
        "healthy after 2 min without failure"
    );
    std::thread::sleep(Duration::from_millis(200));
    let errors = logs
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(l, m)| {
            *l == 1 && m.contains("The cleanup task of scope <default context>:crash failed")
        })
        .count();
    assert_eq!(errors, 1);
    engine.close_async(Duration::from_secs(1)).await;
}

/// Item 7: a leader whose DELETEs all fail (403 here: a wrong service account) steps down after
/// the stated window, stays out of the election as long, reports unhealthy with the reason, and
/// when it leads again and still fails, steps down again no sooner than one window later.
#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_delete_steps_down_and_stays_out() {
    start();
    let mut f = Fixture::with_conf("ALL", &[(STEP_DOWN_AFTER, "PT2M")]).await;
    f.lead().await;
    f.observe_finished("rbac", 3, EventKind::Update, 600);
    let t0 = Instant::now();
    while f.status()["leadership"] == "LEADING"
        && Instant::now().duration_since(t0) < Duration::from_secs(600)
    {
        if let Some((_, _, send)) = f.next_delete(Duration::from_secs(5)).await {
            send.send_response(status_reply(403, "Forbidden", None));
        }
        f.settle().await;
    }
    let stepped = Instant::now().duration_since(t0);
    assert!(
        stepped >= Duration::from_secs(120) && stepped <= Duration::from_secs(140),
        "stepped down after {stepped:?}"
    );
    let st = f.status();
    assert_eq!(st["leadership"], "FOLLOWING", "{st}");
    assert!(
        st["leadership_reason"]
            .as_str()
            .unwrap()
            .contains("stepped down"),
        "{st}"
    );
    assert_eq!(st["healthy"], false, "{st}");
    assert!(
        st["health_reason"]
            .as_str()
            .unwrap()
            .contains("completed no DELETE"),
        "{st}"
    );
    assert_eq!(
        f.ended.load(Ordering::SeqCst),
        1,
        "the campaign was released"
    );
    assert_eq!(f.signals.lock().unwrap().len(), 1);
    // Out of the election for the window: no new campaign, no DELETE.
    assert!(f.next_delete(Duration::from_secs(110)).await.is_none());
    assert_eq!(
        f.signals.lock().unwrap().len(),
        1,
        "not back before the window"
    );
    tokio::time::sleep(Duration::from_secs(15)).await;
    assert_eq!(f.signals.lock().unwrap().len(), 2, "back in the election");
    // It wins again and still cannot delete: it leads for a whole window again.
    f.lead().await;
    let t1 = Instant::now();
    while f.status()["leadership"] == "LEADING"
        && Instant::now().duration_since(t1) < Duration::from_secs(600)
    {
        if let Some((_, _, send)) = f.next_delete(Duration::from_secs(5)).await {
            send.send_response(status_reply(403, "Forbidden", None));
        }
        f.settle().await;
    }
    assert!(Instant::now().duration_since(t1) >= Duration::from_secs(120));
    assert_eq!(f.status()["tracked"], 3, "nothing is dropped");
}

/// Item 7, the other way to be unable to delete: no Kubernetes client can be built.
#[tokio::test(start_paused = true)]
async fn a_leader_without_a_kubernetes_client_steps_down() {
    start();
    let backend = ManualBackend::default();
    let signals = backend.signals.clone();
    let engine = engine(
        &[(keys::CLEANUP_KIND, "ALL"), (STEP_DOWN_AFTER, "PT2M")],
        backend,
        Arc::new(|_| Box::pin(async { Err("no kubeconfig and not in a cluster".to_owned()) })),
        Clock::System,
    );
    let scope = Scope::new(None, Some("noclient"));
    let mut obs = common::fixture::observation("nc", EventKind::Update, AppState::Finished);
    obs.terminated_at = Some(std::time::SystemTime::UNIX_EPOCH);
    engine.observe(scope.clone(), obs).unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    let signal = signals.lock().unwrap()[0].clone();
    signal.lead_until(Instant::now() + Duration::from_secs(3600), "test");
    tokio::time::sleep(Duration::from_secs(130)).await;
    let st: serde_json::Value = serde_json::from_str(&engine.status_json(&scope)).unwrap();
    assert_eq!(st["leadership"], "FOLLOWING", "{st}");
    assert!(
        st["health_reason"]
            .as_str()
            .unwrap()
            .contains("cannot be built"),
        "{st}"
    );
    engine.close_async(Duration::from_secs(1)).await;
}

/// Item 8: while the API server answers every DELETE with 429 `Retry-After: 2`, no DELETE of any
/// pod of the scope leaves sooner than 2 s after a 429 was answered.
#[tokio::test(start_paused = true)]
async fn a_429_pauses_every_delete_of_the_scope() {
    start();
    let mut f = Fixture::new("ALL").await;
    f.lead().await;
    f.observe_finished("t", 80, EventKind::Update, 600);
    let t0 = Instant::now();
    let mut last_429: Option<Instant> = None;
    let mut during_storm = 0;
    let mut accepted = 0;
    loop {
        let Some((_, _, send)) = f.next_delete(Duration::from_secs(30)).await else {
            break;
        };
        let now = Instant::now();
        if let Some(at) = last_429 {
            assert!(
                now >= at + Duration::from_secs(2) || now == at,
                "a DELETE left {:?} after a 429",
                now.duration_since(at)
            );
        }
        // Everything already sent at this instant is answered at once, as one batch.
        let mut batch = vec![send];
        while let Some((_, _, s)) = f.next_delete(Duration::ZERO).await {
            batch.push(s);
        }
        if now.duration_since(t0) < Duration::from_secs(10) {
            during_storm += batch.len();
            for s in batch {
                s.send_response(status_reply(429, "TooManyRequests", Some("2")));
            }
            last_429 = Some(now);
        } else {
            accepted += batch.len();
            for s in batch {
                s.send_response(status_reply(200, "", None));
            }
        }
        f.settle().await;
    }
    assert!(
        during_storm <= 8 * 6,
        "{during_storm} DELETEs during a 10 s storm"
    );
    assert_eq!(accepted, 80, "every pod deleted after the storm");
}
