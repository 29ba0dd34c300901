//! Issue 10, "wrongful or early deletes": each test is one defect of the review, on the mock API
//! server and paused time (see `common::fixture`).

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::fixture::{start, status_reply, Fixture};
use common::manual::ManualBackend;
use futures::future::BoxFuture;
use podsweep::clock::Clock;
use podsweep::config::{keys, Settings};
use podsweep::deleter::{Outcome, OutcomeClass, PodDeleter};
use podsweep::engine::Engine;
use podsweep::model::{AppState, EventKind};
use podsweep::scope::Scope;
use podsweep::sweeper::DeleterSource;
use tokio::time::{advance, Instant};

/// Item 1: with Kyuubi's CONTAINER state source a container waiting in `ErrImagePull` maps to
/// FAILED; once the image pulls it runs. The running pod must not be deleted one retain period
/// after the brief FAILED, and it is tracked again when it really terminates.
#[tokio::test(start_paused = true)]
async fn a_pod_running_again_after_a_brief_failed_is_not_deleted() {
    start();
    let mut f = Fixture::new("ALL").await;
    f.lead().await;
    f.observe(f.pod("img", EventKind::Update, AppState::Failed, None));
    advance(Duration::from_secs(20)).await;
    f.observe(f.pod("img", EventKind::Update, AppState::Running, None));
    f.settle().await;
    assert!(
        f.next_delete(Duration::from_secs(3600)).await.is_none(),
        "the running driver is never deleted"
    );
    assert_eq!(f.status()["tracked"], 0);
    assert_eq!(f.status()["disarmed"], 1);
    // It terminates for real: one retain period (60 s) from then.
    f.observe(f.pod("img", EventKind::Update, AppState::Finished, Some(0)));
    assert!(f.next_delete(Duration::from_secs(59)).await.is_none());
    let (path, _, send) = f
        .next_delete(Duration::from_secs(2))
        .await
        .expect("deleted after its real termination");
    assert_eq!(path, "/api/v1/namespaces/spark/pods/driver-img");
    send.send_response(status_reply(200, "", None));
}

/// Item 2: Kyuubi keeps the first terminal state it saw. FAILED then FINISHED for one UID is
/// judged FAILED, which COMPLETED does not delete.
#[tokio::test(start_paused = true)]
async fn failed_then_finished_is_judged_by_the_first_terminal_state() {
    start();
    let mut f = Fixture::new("COMPLETED").await;
    f.lead().await;
    f.observe(f.pod("flip", EventKind::Update, AppState::Failed, Some(0)));
    f.observe(f.pod("flip", EventKind::Update, AppState::Finished, Some(0)));
    f.observe(f.pod("ok", EventKind::Update, AppState::Finished, Some(0)));
    let (path, _, send) = f
        .next_delete(Duration::from_secs(61))
        .await
        .expect("the pod that only FINISHED");
    assert_eq!(path, "/api/v1/namespaces/spark/pods/driver-ok");
    send.send_response(status_reply(200, "", None));
    assert!(
        f.next_delete(Duration::from_secs(3600)).await.is_none(),
        "FAILED came first: kept under COMPLETED"
    );
    assert_eq!(f.status()["spared"], 1);
}

/// Item 3: the kubelet writes `finishedAt` with the node's clock. A node 3 minutes behind must
/// not make the deletion of a pod podsweep watched run 3 minutes early: at most the stated
/// tolerance (10 s).
#[tokio::test(start_paused = true)]
async fn a_node_clock_three_minutes_behind_hastens_by_at_most_the_tolerance() {
    start();
    let mut f = Fixture::new("ALL").await;
    f.lead().await;
    f.observe(f.pod("skewed", EventKind::Update, AppState::Running, None));
    f.settle().await;
    advance(Duration::from_secs(3600)).await;
    // It ends now; its finishedAt (node clock) says 3 minutes ago.
    f.observe(f.pod("skewed", EventKind::Update, AppState::Finished, Some(180)));
    let t0 = Instant::now();
    assert!(
        f.next_delete(Duration::from_secs(49)).await.is_none(),
        "retain 60 s minus the 10 s tolerance at most"
    );
    let (_, _, send) = f
        .next_delete(Duration::from_secs(2))
        .await
        .expect("due 50 s after it ended");
    let took = Instant::now().duration_since(t0);
    assert!(took >= Duration::from_secs(50), "{took:?}");
    send.send_response(status_reply(200, "", None));
}

/// Item 4: a namespace or pod name that is not a Kubernetes name is refused at `observe`, naming
/// the argument; nothing reaches the API server.
#[tokio::test(start_paused = true)]
async fn names_that_are_not_kubernetes_names_are_refused() {
    start();
    let mut f = Fixture::new("ALL").await;
    f.lead().await;
    for ns in ["x/../kube-system", "ünïcode", "UPPER", "a b"] {
        let e = f
            .engine
            .observe(
                Scope::new(None, Some(ns)),
                f.pod("n", EventKind::Update, AppState::Finished, Some(600)),
            )
            .unwrap_err();
        assert!(e.to_string().starts_with("namespace:"), "{ns}: {e}");
    }
    for name in [
        "../../namespaces/kube-system/pods/etcd",
        "p?dryRun=None",
        "P",
    ] {
        let mut p = f.pod("n", EventKind::Update, AppState::Finished, Some(600));
        p.pod_name = name.to_owned();
        let e = f.engine.observe(f.scope.clone(), p).unwrap_err();
        assert!(e.to_string().starts_with("podName:"), "{name}: {e}");
    }
    assert!(f.next_delete(Duration::from_secs(600)).await.is_none());
}

/// What a [`SlowDeleter`] saw: when each DELETE was written.
type Written = Arc<Mutex<Vec<(String, Instant)>>>;

/// A deleter whose connection takes `connect` before the request is written.
struct SlowDeleter {
    connect: Duration,
    written: Written,
}

impl PodDeleter for SlowDeleter {
    fn delete(&self, name: &str, _uid: &str, _dry_run: bool) -> BoxFuture<'static, Outcome> {
        let (connect, written, name) = (self.connect, self.written.clone(), name.to_owned());
        Box::pin(async move {
            tokio::time::sleep(connect).await;
            written.lock().unwrap().push((name, Instant::now()));
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
}

/// Item 13: the lease is checked at send time. A connection that takes 10 s (kube's connect
/// timeout) must not write a DELETE after a lease that lapsed meanwhile.
#[tokio::test(start_paused = true)]
async fn a_slow_connection_never_writes_a_delete_after_the_lease_lapsed() {
    start();
    let written: Written = Arc::default();
    let w = written.clone();
    let source: DeleterSource = Arc::new(move |_| {
        let d: Arc<dyn PodDeleter> = Arc::new(SlowDeleter {
            connect: Duration::from_secs(10),
            written: w.clone(),
        });
        Box::pin(async move { Ok(d) })
    });
    let backend = ManualBackend::default();
    let signals = backend.signals.clone();
    let conf = [(keys::CLEANUP_KIND, "ALL"), (keys::RETAIN_PERIOD, "PT1M")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let engine = Engine::with_parts(
        Settings::from_map(conf).unwrap(),
        "server-a",
        Arc::new(backend),
        source,
        Clock::derived(std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)),
        tokio::runtime::Handle::current(),
    )
    .unwrap();
    let scope = Scope::new(None, Some("spark"));
    let mut obs = common::fixture::observation("slow", EventKind::Update, AppState::Finished);
    obs.terminated_at = Some(std::time::SystemTime::UNIX_EPOCH);
    engine.observe(scope.clone(), obs).unwrap();
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
    let signal = signals.lock().unwrap().last().cloned().unwrap();
    // Leading with a lease of 3 s that is never renewed (the backend lost contact).
    signal.lead_until(Instant::now() + Duration::from_secs(3), "short lease");
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        written.lock().unwrap().is_empty(),
        "written after the lease lapsed: {:?}",
        written.lock().unwrap()
    );
    // A renewed lease sends it (and the slow connection then completes within it).
    signal.extend_until(Instant::now() + Duration::from_secs(60));
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert_eq!(written.lock().unwrap().len(), 1);
    engine.close_async(Duration::from_secs(1)).await;
}

/// Item 4, second half: whatever reaches the deleter, the namespace and the pod name are encoded
/// as single path segments, so no name can change the path of the DELETE.
#[tokio::test]
async fn delete_paths_encode_the_namespace_and_the_name() {
    use http::{Request, Response};
    use kube::client::Body;
    let (service, mut mock) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let d = podsweep::deleter::KubeDeleter::new(client, "x/../kube-system");
    let sent = tokio::spawn(d.delete("a/../etcd-0", "u", false));
    let (req, send) = mock.next_request().await.expect("a request");
    assert_eq!(
        req.uri().path(),
        "/api/v1/namespaces/x%2F..%2Fkube-system/pods/a%2F..%2Fetcd-0"
    );
    send.send_response(status_reply(404, "NotFound", None));
    assert_eq!(sent.await.unwrap().class, OutcomeClass::AlreadyAbsent);
    let (service, mut mock) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let d = podsweep::deleter::KubeDeleter::new(kube::Client::new(service, "d"), "ünï");
    let sent = tokio::spawn(d.delete("p", "u", false));
    let (req, send) = mock.next_request().await.expect("a request");
    assert_eq!(req.uri().path(), "/api/v1/namespaces/%C3%BCn%C3%AF/pods/p");
    send.send_response(status_reply(404, "NotFound", None));
    sent.await.unwrap();
}
