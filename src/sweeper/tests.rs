//! Unit tests of the sweeper internals: interleavings that need another thread to happen in a
//! running engine, driven here step by step.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::supervise::new_sweeper;
use super::*;
use crate::deleter::{Outcome, OutcomeClass};
use crate::election::{Backend, LeaderSignal};
use crate::model::{AppState, EventKind};

/// Hands every campaign's signal to the test.
#[derive(Default)]
struct Manual(Arc<Mutex<Vec<LeaderSignal>>>);

impl Backend for Manual {
    fn name(&self) -> &'static str {
        "manual"
    }

    fn campaign(
        &self,
        _scope: Scope,
        _identity: String,
        signal: LeaderSignal,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        self.0.lock().unwrap().push(signal);
        Box::pin(async move { cancel.cancelled().await })
    }
}

/// Never answers: a DELETE stays in flight.
struct Silent;

impl PodDeleter for Silent {
    fn delete(&self, _name: &str, _uid: &str, _dry_run: bool) -> BoxFuture<'static, Outcome> {
        Box::pin(async {
            std::future::pending::<()>().await;
            Outcome {
                class: OutcomeClass::Accepted,
                code: None,
                reason: String::new(),
                message: String::new(),
                retry_after: None,
            }
        })
    }
}

/// Item 12 of issue 10: the backend flips Leading -> Paused -> Leading while the sweeper handles
/// a pod that just became due. The dispatch sees Paused and holds the pod back; the next look at
/// the status already says Leading again, the same state as before. That status change must
/// still dispatch the held-back pod.
#[tokio::test(start_paused = true)]
async fn a_paused_leading_flip_seen_as_one_change_still_dispatches() {
    let signals = Arc::new(Mutex::new(Vec::new()));
    let backend: Arc<dyn Backend> = Arc::new(Manual(signals.clone()));
    let scope = Scope::new(None, Some("flip"));
    let election = ElectionHandle::start(&backend, scope.clone(), "me".into());
    tokio::task::yield_now().await;
    let signal = signals.lock().unwrap()[0].clone();
    let cfg = SweeperConfig::new(CleanupKind::All, Duration::from_secs(60));
    let source: DeleterSource = Arc::new(|_| Box::pin(async { Err("unused".to_owned()) }));
    let mut sw = new_sweeper(
        scope,
        cfg,
        Clock::System,
        election,
        source,
        Box::new(|_| true),
        Arc::default(),
    );
    sw.deleter = Some(Arc::new(Silent));
    signal.lead_until(Instant::now() + Duration::from_secs(3600), "won");
    let st = sw.election.status();
    sw.on_status(&st);
    assert_eq!(sw.last_leadership, Leadership::Leading);
    let obs = Observation {
        kind: EventKind::Update,
        tag: "t".into(),
        pod_name: "driver-flip".into(),
        pod_uid: "u-flip".into(),
        state: AppState::Finished,
        has_app_selector: true,
        // Not due yet: its timer is armed, and fired by hand below.
        terminated_at: Some(SystemTime::now()),
        deletion_requested: false,
    };
    sw.on_observe(&obs);
    let uid = Uid::new("u-flip");
    assert_eq!(sw.tracker.armed(), 1);
    // The pod's timer fires while the backend has just paused.
    signal.pause("blip");
    assert!(sw.make_due(uid, SystemTime::now()));
    sw.dispatch();
    assert!(sw.inflight.is_empty(), "held back while paused");
    // Resumed before the sweeper looked at the status again: it only sees Leading.
    signal.lead_until(
        Instant::now() + Duration::from_secs(3600),
        "confirmed again",
    );
    let st = sw.election.status();
    assert_eq!(st.leadership, sw.last_leadership);
    sw.on_status(&st);
    assert_eq!(sw.inflight.len(), 1, "the held-back pod is dispatched");
}
