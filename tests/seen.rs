//! Issue 12, the observe() path: an informer's repeated events of a Kyuubi driver pod are answered
//! on the caller's thread from what the scope's task was last told (`podsweep::seen`). These
//! tests use Kubernetes-shaped UIDs (canonical UUIDs, the only ones the table keeps) and check
//! that answering there changes nothing the task would have decided: the clock-skew bound, the
//! disarming of a pod running again, a termination time learnt late, deletions.

mod common;

use std::time::Duration;

use common::fixture::{start, status_reply, Fixture};
use podsweep::model::{AppState, EventKind};
use tokio::time::{advance, Instant};

const A: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";
const B: &str = "7c9e6679-7425-40de-944b-e07fc1f90ae7";

fn path(uid: &str) -> String {
    format!("/api/v1/namespaces/spark/pods/driver-{uid}")
}

/// The skew bound uses the last time the pod was seen running, though only its first running
/// event reached the task: the later ones were answered on the caller's thread and their time
/// is handed on with the terminal event. Seen running 2 s before it was seen finished, with a
/// finishedAt 3 minutes back (a node clock behind), it is dated 2 s back: due in 58 s. (Had the
/// task known only the first running event, an hour back, it would be due in 50 s, the
/// tolerance's floor.)
#[tokio::test(start_paused = true)]
async fn the_clock_skew_bound_uses_running_events_answered_on_the_callers_thread() {
    start();
    let mut f = Fixture::new("ALL").await;
    f.lead().await;
    f.observe(f.pod(A, EventKind::Update, AppState::Running, None));
    f.settle().await;
    for _ in 0..60 {
        advance(Duration::from_secs(60)).await;
        f.observe(f.pod(A, EventKind::Update, AppState::Running, None));
    }
    f.settle().await;
    assert_eq!(f.status()["observed_known"], 60, "{}", f.status());
    advance(Duration::from_secs(2)).await;
    f.observe(f.pod(A, EventKind::Update, AppState::Finished, Some(180)));
    let t0 = Instant::now();
    assert!(
        f.next_delete(Duration::from_secs(57)).await.is_none(),
        "one retain period from the last time seen running, 2 s back"
    );
    let (p, _, send) = f
        .next_delete(Duration::from_secs(2))
        .await
        .expect("due 58 s after it was seen finished");
    assert_eq!(p, path(A));
    assert!(Instant::now().duration_since(t0) >= Duration::from_secs(58));
    send.send_response(status_reply(200, "", None));
}

/// FAILED repeated (answered), then RUNNING (handed on: the task disarms it), RUNNING repeated
/// (answered): the running driver is never deleted; its real termination is tracked again.
#[tokio::test(start_paused = true)]
async fn a_pod_running_again_is_disarmed_whatever_repeats_came_between() {
    start();
    let mut f = Fixture::new("ALL").await;
    f.lead().await;
    for _ in 0..3 {
        f.observe(f.pod(A, EventKind::Update, AppState::Failed, None));
    }
    advance(Duration::from_secs(20)).await;
    for _ in 0..3 {
        f.observe(f.pod(A, EventKind::Update, AppState::Running, None));
    }
    f.settle().await;
    assert!(
        f.next_delete(Duration::from_secs(3600)).await.is_none(),
        "the running driver is never deleted"
    );
    // Observed: the fixture's warm-up pod, then 2 events handed on and 4 answered.
    let st = f.status();
    assert_eq!(
        (st["tracked"].as_u64(), st["disarmed"].as_u64()),
        (Some(0), Some(1)),
        "{st}"
    );
    assert_eq!(
        (st["observed"].as_u64(), st["observed_known"].as_u64()),
        (Some(7), Some(4)),
        "{st}"
    );
    f.observe(f.pod(A, EventKind::Update, AppState::Finished, Some(0)));
    f.observe(f.pod(A, EventKind::Update, AppState::Finished, Some(0)));
    assert!(f.next_delete(Duration::from_secs(59)).await.is_none());
    let (p, _, send) = f
        .next_delete(Duration::from_secs(2))
        .await
        .expect("deleted one retain period after its real termination");
    assert_eq!(p, path(A));
    send.send_response(status_reply(200, "", None));
}

/// A terminal event without a termination time, then repeats of it (answered), then one with
/// the time (handed on: the task dates the pod by it). Another pod's events are its own.
#[tokio::test(start_paused = true)]
async fn a_termination_time_learnt_late_is_handed_on() {
    start();
    let mut f = Fixture::new("ALL").await;
    f.lead().await;
    f.observe(f.pod(A, EventKind::Update, AppState::Failed, None));
    f.observe(f.pod(A, EventKind::Update, AppState::Failed, None));
    f.observe(f.pod(B, EventKind::Update, AppState::Running, None));
    // Its container says it finished 50 s ago: due in 10 s, not one retain period from now.
    f.observe(f.pod(A, EventKind::Update, AppState::Failed, Some(50)));
    f.observe(f.pod(A, EventKind::Update, AppState::Failed, Some(50)));
    f.observe(f.pod(B, EventKind::Update, AppState::Running, None));
    let (p, _, send) = f
        .next_delete(Duration::from_secs(11))
        .await
        .expect("dated by the time learnt late");
    assert_eq!(p, path(A));
    send.send_response(status_reply(200, "", None));
    f.settle().await;
    assert_eq!(f.status()["observed_known"], 3, "{}", f.status());
    assert!(
        f.next_delete(Duration::from_secs(3600)).await.is_none(),
        "B runs"
    );
}

/// A DELETE event always reaches the task and the pod is forgotten: later events of that UID go
/// to the task again, which knows the pod is gone and deletes nothing.
#[tokio::test(start_paused = true)]
async fn a_deleted_pod_is_forgotten_and_its_late_events_delete_nothing() {
    start();
    let mut f = Fixture::new("ALL").await;
    f.lead().await;
    f.observe(f.pod(A, EventKind::Update, AppState::Finished, Some(0)));
    advance(Duration::from_secs(30)).await;
    f.observe(f.pod(A, EventKind::Delete, AppState::Finished, Some(0)));
    f.observe(f.pod(A, EventKind::Update, AppState::Finished, Some(0)));
    f.settle().await;
    let st = f.status();
    assert_eq!(st["cancelled"], 1, "{st}");
    assert_eq!(st["observed_known"], 0, "{st}");
    assert!(f.next_delete(Duration::from_secs(3600)).await.is_none());
}
