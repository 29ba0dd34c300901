//! Issue 10, "growth over weeks" and the allow lists: what a long-running server keeps, on the
//! mock API server and paused time (see `common::fixture`).

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::fixture::{start, status_reply, Fixture, IDLE_RELEASE};
use common::manual::ManualBackend;
use podsweep::clock::Clock;
use podsweep::config::keys;
use podsweep::model::{AppState, EventKind};
use podsweep::scope::Scope;
use tokio::time::advance;

/// Item 10: on a follower, pods that became due and were then deleted by the leader (DELETE
/// events) leave nothing behind: the `due` gauge drops to zero and a takeover has nothing to do.
#[tokio::test(start_paused = true)]
async fn a_follower_forgets_due_pods_the_leader_deleted() {
    start();
    let mut f = Fixture::new("ALL").await;
    f.observe_finished("d", 200, EventKind::Update, 600);
    f.settle().await;
    advance(Duration::from_secs(1)).await;
    f.settle().await;
    assert_eq!(f.status()["due"], 200, "{}", f.status());
    // The leader (another server) deletes them: their DELETE events arrive here.
    f.observe_finished("d", 200, EventKind::Delete, 600);
    f.settle().await;
    assert_eq!(f.status()["due"], 0, "{}", f.status());
    assert_eq!(f.status()["tracked"], 0);
    f.lead().await;
    assert!(
        f.next_delete(Duration::from_secs(60)).await.is_none(),
        "a takeover sends nothing for pods already gone"
    );
}

/// Issue 25, item 2: under kind NONE (Kyuubi's default) a follower that Kyuubi handed 20 pods to
/// delete at once (CANCELED batches, `dueNow` on every server) forgets each when its DELETE event
/// arrives (the leader deleted it), so when this server leads later it sends nothing. Before, the
/// engine dropped every event of a NONE scope: the follower kept 20 due records, and its takeover
/// DELETEd 20 pods long gone (20 x 404).
#[tokio::test(start_paused = true)]
async fn under_kind_none_a_follower_forgets_pods_it_was_told_to_delete_at_once() {
    start();
    let mut f = Fixture::new("NONE").await;
    for i in 0..20 {
        let obs = f.pod(&format!("c{i}"), EventKind::Update, AppState::Running, None);
        assert!(f
            .engine
            .due_now(f.scope.clone(), obs, "its batch was canceled")
            .unwrap());
    }
    f.settle().await;
    assert_eq!(f.status()["tracked"], 20, "{}", f.status());
    assert_eq!(f.status()["due"], 20, "{}", f.status());
    // The leader (another server) deletes them: their DELETE events arrive here.
    for i in 0..20 {
        f.observe(f.pod(&format!("c{i}"), EventKind::Delete, AppState::Running, None));
    }
    f.settle().await;
    assert_eq!(f.status()["tracked"], 0, "{}", f.status());
    assert_eq!(f.status()["due"], 0);
    // A running pod's events still start nothing under NONE.
    f.observe(f.pod("other", EventKind::Update, AppState::Finished, Some(600)));
    f.settle().await;
    assert_eq!(f.status()["tracked"], 0);
    f.lead().await;
    assert!(
        f.next_delete(Duration::from_secs(60)).await.is_none(),
        "a takeover sends nothing for pods already gone"
    );
}

/// Item 11: a scope with nothing tracked for the idle time releases its election (and client)
/// and comes back on its next event; a scope that still tracks a pod is kept.
#[tokio::test(start_paused = true)]
async fn an_idle_scope_is_released_and_comes_back() {
    start();
    let mut f = Fixture::with_conf("ALL", &[(IDLE_RELEASE, "PT30M")]).await;
    f.lead().await;
    f.observe(f.pod("last", EventKind::Update, AppState::Finished, Some(600)));
    let (_, _, send) = f.next_delete(Duration::from_millis(10)).await.unwrap();
    send.send_response(status_reply(200, "", None));
    f.settle().await;
    // The warm-up pod is still running: the scope must keep watching it.
    f.observe(f.pod("warm-up", EventKind::Delete, AppState::Running, None));
    f.settle().await;
    assert_eq!(f.status()["known"], true);
    // Tombstones live max(retain, 10 min) + 10 min = 20 min, then 30 min idle.
    advance(Duration::from_secs(49 * 60)).await;
    f.settle().await;
    assert_eq!(f.status()["known"], true, "not before the idle time");
    assert_eq!(f.ended.load(Ordering::SeqCst), 0);
    advance(Duration::from_secs(2 * 60)).await;
    f.settle().await;
    assert_eq!(f.status()["known"], false, "{}", f.status());
    assert_eq!(f.ended.load(Ordering::SeqCst), 1, "its campaign ended");
    // The next event brings it back, with a campaign of its own.
    f.observe(f.pod("next", EventKind::Update, AppState::Finished, Some(600)));
    f.settle().await;
    assert_eq!(f.status()["known"], true);
    assert_eq!(f.signals.lock().unwrap().len(), 2);
    f.lead().await;
    let (path, _, send) = f.next_delete(Duration::from_millis(10)).await.unwrap();
    assert_eq!(path, "/api/v1/namespaces/spark/pods/driver-next");
    send.send_response(status_reply(200, "", None));
    // A scope that tracks a pod (waiting for its deadline) is never released.
    f.observe(f.pod("kept", EventKind::Update, AppState::Finished, Some(0)));
    f.settle().await;
    f.signal().await.follow("another server leads");
    advance(Duration::from_secs(6 * 3600)).await;
    f.settle().await;
    assert_eq!(f.status()["known"], true);
    assert_eq!(f.status()["tracked"], 1);
}

/// Smaller: Kyuubi accepts a scope with no namespace (its `client.initialize.list` creates them)
/// whatever the namespace allow list says; a refused scope throws once and is then ignored.
#[tokio::test(start_paused = true)]
async fn allow_lists_follow_kyuubi_and_a_refusal_is_given_once() {
    start();
    let engine = common::fixture::engine(
        &[
            (keys::CLEANUP_KIND, "ALL"),
            (keys::NAMESPACE_ALLOW_LIST, "spark"),
            (keys::CONTEXT_ALLOW_LIST, "prod"),
        ],
        ManualBackend::default(),
        common::fixture::no_deleters(),
        Clock::System,
    );
    let obs = common::fixture::observation("a", EventKind::Update, AppState::Finished);
    engine.observe(Scope::new(None, None), obs.clone()).unwrap();
    engine
        .observe(Scope::new(Some("prod"), None), obs.clone())
        .unwrap();
    let refused = Scope::new(Some("prod"), Some("other"));
    let e = engine.observe(refused.clone(), obs.clone()).unwrap_err();
    assert!(e.to_string().starts_with(keys::NAMESPACE_ALLOW_LIST), "{e}");
    for _ in 0..3 {
        engine
            .observe(refused.clone(), obs.clone())
            .expect("later events of a refused scope are ignored quietly");
    }
    let st: serde_json::Value = serde_json::from_str(&engine.status_json(&refused)).unwrap();
    assert_eq!(st["known"], false, "never tracked");
    engine.close_async(Duration::from_secs(1)).await;
}

/// Issue 32 §5: with the scope watch on (Kyuubi's owner-scoped informers), a server never
/// releases a scope when it is idle. Its informer sees only its own pods, so it would never
/// bring the scope back for the pods of a leader that goes: nobody would campaign or watch, and
/// those pods would stay until a job landed on another server. Before: released after the
/// tombstones' 20 min and the 30 min idle time, its campaign ended.
#[tokio::test(start_paused = true)]
async fn with_the_scope_watch_an_idle_scope_keeps_campaigning() {
    start();
    let f = Fixture::with_conf(
        "ALL",
        &[
            (IDLE_RELEASE, "PT30M"),
            (keys::SCOPE_WATCH, "ON"),
            (keys::KUBE_NAMESPACE, "spark"),
        ],
    )
    .await;
    // Another server leads (its scope watch is the one that watches the pods).
    f.signal().await.follow("another server leads");
    f.observe(f.pod("own", EventKind::Update, AppState::Finished, Some(600)));
    f.settle().await;
    // That leader deletes this server's pod; the informer sees it go, and the warm-up pod too.
    f.observe(f.pod("own", EventKind::Delete, AppState::Finished, Some(600)));
    f.observe(f.pod("warm-up", EventKind::Delete, AppState::Running, None));
    f.settle().await;
    assert_eq!(f.status()["tracked"], 0, "{}", f.status());
    for _ in 0..6 {
        advance(Duration::from_secs(3600)).await;
        f.settle().await;
    }
    println!(
        "figure: after 6 h idle, known {} and campaigns ended {}",
        f.status()["known"],
        f.ended.load(Ordering::SeqCst)
    );
    assert_eq!(f.status()["known"], true, "{}", f.status());
    assert_eq!(f.ended.load(Ordering::SeqCst), 0, "its campaign goes on");
    assert_eq!(f.signals.lock().unwrap().len(), 1, "one campaign");
}
