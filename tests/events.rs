//! Issue 32 §6, on paused time: Kubernetes Events the API server refuses are not silent. The
//! first refusal of each cause is a WARN (once per scope), every one is counted (`events_failed`)
//! and exported in `/metrics` with the other retention counters.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::fixture::{capture, start};
use common::manual::ManualBackend;
use futures::future::BoxFuture;
use podsweep::clock::Clock;
use podsweep::config::keys;
use podsweep::daemon::exposition;
use podsweep::deleter::{EventNote, Outcome, OutcomeClass, PodDeleter};
use podsweep::model::{AppState, EventKind};
use podsweep::scope::Scope;

/// Deletes every pod; the API server refuses every Event (403 as kube-rs words it), counted.
#[derive(Default)]
struct NoEvents(AtomicUsize);

impl PodDeleter for NoEvents {
    fn delete(&self, _name: &str, _uid: &str, _dry_run: bool) -> BoxFuture<'static, Outcome> {
        Box::pin(async {
            Outcome {
                class: OutcomeClass::Accepted,
                code: Some(200),
                reason: String::new(),
                message: String::new(),
                retry_after: None,
                flow: None,
            }
        })
    }

    fn record(&self, _note: EventNote) -> BoxFuture<'static, Result<(), String>> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Box::pin(async {
            Err("ApiError: events.events.k8s.io is forbidden: User \"system:serviceaccount:k:podsweep\" \
                 cannot create resource \"events\" in API group \"events.k8s.io\": Forbidden \
                 (ErrorResponse { status: \"Failure\", reason: \"Forbidden\", code: 403 })"
                .to_owned())
        })
    }
}

#[tokio::test(start_paused = true)]
async fn refused_events_are_warned_once_per_cause_and_exported() {
    start();
    let logs = capture();
    let d = Arc::new(NoEvents::default());
    let dd = d.clone();
    let backend = ManualBackend::default();
    let signals = backend.signals.clone();
    let wall0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let engine = common::fixture::engine(
        &[
            (keys::CLEANUP_KIND, "ALL"),
            (keys::RETAIN_PERIOD, "PT1M"),
            (keys::EVENTS_ENABLED, "true"),
        ],
        backend,
        Arc::new(move |_| {
            let d: Arc<dyn PodDeleter> = dd.clone();
            Box::pin(async move { Ok(d) })
        }),
        Clock::derived(wall0),
    );
    let scope = Scope::new(None, Some("events"));
    for i in 0..5 {
        let mut o =
            common::fixture::observation(&format!("ev{i}"), EventKind::Update, AppState::Finished);
        o.terminated_at = Some(wall0 - Duration::from_secs(3600));
        engine.observe(scope.clone(), o).unwrap();
    }
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    let signal = signals.lock().unwrap().last().cloned().expect("a campaign");
    signal.lead_until(
        tokio::time::Instant::now() + Duration::from_secs(3600),
        "test",
    );
    while d.0.load(Ordering::SeqCst) < 5 {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    let st: serde_json::Value = serde_json::from_str(&engine.status_json(&scope)).unwrap();
    assert_eq!(st["events_failed"], 5, "{st}");
    let warns = logs.messages(2, "are not recorded (HTTP 403)");
    let ours: Vec<_> = warns
        .iter()
        .filter(|(_, m)| m.contains("scope <default context>:events "))
        .collect();
    println!("{ours:#?}");
    assert_eq!(
        ours.len(),
        1,
        "one WARN for the cause, not one per Event: {warns:#?}"
    );
    let text = exposition::prometheus(std::slice::from_ref(&st));
    assert!(
        text.lines()
            .any(|l| l.starts_with("podsweep_events_failed_total{") && l.ends_with(" 5")),
        "{text}"
    );
    engine.close_async(Duration::from_secs(5)).await;
}
