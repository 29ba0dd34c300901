//! The test fixture of the sweeper tests: an engine with a hand-driven election ([`ManualBackend`])
//! and a kube-rs client whose HTTP service is a tower-test mock, so every DELETE is seen and
//! answered by the test, on paused tokio time.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use http::{Request, Response};
use http_body_util::BodyExt;
use kube::client::Body;
use podsweep::clock::Clock;
use podsweep::config::{keys, Settings};
use podsweep::deleter::{KubeDeleter, OutcomeClass, PodDeleter};
use podsweep::election::LeaderSignal;
use podsweep::engine::Engine;
use podsweep::model::{AppState, EventKind, Observation};
use podsweep::scope::Scope;
use podsweep::sweeper::DeleterSource;
use tokio::time::{timeout, Instant};
use tower_test::mock::{Handle, SendResponse};

use super::manual::ManualBackend;

/// Keys added by issue 10, spelled out so these tests also build against older engines.
pub const IDLE_RELEASE: &str =
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.scope.releaseAfterIdle";
pub const STEP_DOWN_AFTER: &str =
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.stepDownAfter";

pub type Mock = Handle<Request<Body>, Response<Body>>;

pub struct Fixture {
    pub engine: Engine,
    pub mock: Mock,
    pub signals: Arc<Mutex<Vec<LeaderSignal>>>,
    /// Campaigns that have ended (cancelled), in the order they ended.
    pub ended: Arc<std::sync::atomic::AtomicUsize>,
    pub wall0: SystemTime,
    pub scope: Scope,
}

impl Fixture {
    pub async fn new(kind: &str) -> Self {
        Self::with_conf(kind, &[]).await
    }

    pub async fn with_conf(kind: &str, extra: &[(&str, &str)]) -> Self {
        let (service, mock) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "spark");
        let source: DeleterSource = Arc::new(move |_scope| {
            let d: Arc<dyn PodDeleter> = Arc::new(KubeDeleter::new(client.clone(), "spark"));
            Box::pin(async move { Ok(d) })
        });
        // Scopes are not released when idle, and leaders do not step down, in these tests
        // (tests/safety.rs covers both). The mock answers a DELETE only once the test polls it
        // again, which can be long in paused time.
        let conf: HashMap<String, String> = [
            (keys::CLEANUP_KIND, kind),
            (keys::RETAIN_PERIOD, "PT1M"),
            (IDLE_RELEASE, "P365D"),
            (STEP_DOWN_AFTER, "P365D"),
        ]
        .into_iter()
        .chain(extra.iter().copied())
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let backend = ManualBackend::default();
        let signals = backend.signals.clone();
        let ended = backend.ended.clone();
        let wall0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let engine = Engine::with_parts(
            Settings::from_map(conf).unwrap(),
            "server-a",
            Arc::new(backend),
            source,
            Clock::derived(wall0),
            tokio::runtime::Handle::current(),
        )
        .unwrap();
        let f = Fixture {
            engine,
            mock,
            signals,
            ended,
            wall0,
            scope: Scope::new(None, Some("spark")),
        };
        // A running driver pod starts the scope (and its campaign) without being tracked.
        f.observe(f.pod("warm-up", EventKind::Add, AppState::Running, None));
        f
    }

    pub fn pod(
        &self,
        uid: &str,
        kind: EventKind,
        state: AppState,
        ended_secs_ago: Option<u64>,
    ) -> Observation {
        let now = self.wall0 + Instant::now().duration_since(start());
        let mut obs = observation(uid, kind, state);
        obs.terminated_at = ended_secs_ago.map(|s| now - Duration::from_secs(s));
        obs
    }

    pub fn observe(&self, obs: Observation) {
        self.engine.observe(self.scope.clone(), obs).unwrap();
    }

    /// Observes `n` finished driver pods, uids `<prefix>0` .. `<prefix>{n-1}`, that ended
    /// `ended_secs_ago` seconds ago.
    pub fn observe_finished(&self, prefix: &str, n: usize, kind: EventKind, ended_secs_ago: u64) {
        for i in 0..n {
            self.observe(self.pod(
                &format!("{prefix}{i}"),
                kind,
                AppState::Finished,
                Some(ended_secs_ago),
            ));
        }
    }

    /// Lets spawned tasks run without moving the clock.
    pub async fn settle(&self) {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    pub async fn signal(&self) -> LeaderSignal {
        self.settle().await;
        self.signals
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("a campaign started")
    }

    pub async fn lead(&self) {
        self.signal()
            .await
            .lead_until(Instant::now() + Duration::from_secs(24 * 3600), "test");
        self.settle().await;
    }

    pub fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.engine.status_json(&self.scope)).unwrap()
    }

    pub fn outcome(&self, class: OutcomeClass) -> u64 {
        self.status()["outcomes"][class.as_str()].as_u64().unwrap()
    }

    /// The next DELETE within `within` of paused time, or None. An access review the leader
    /// asks for meanwhile (after refused DELETEs) is answered "denied".
    pub async fn next_delete(
        &mut self,
        within: Duration,
    ) -> Option<(String, serde_json::Value, SendResponse<Response<Body>>)> {
        let until = Instant::now() + within;
        let (req, send) = loop {
            let left = until.saturating_duration_since(Instant::now());
            let (req, send) = timeout(left, self.mock.next_request()).await.ok()??;
            if req.method() == http::Method::POST
                && req.uri().path().ends_with("/selfsubjectaccessreviews")
            {
                send.send_response(access_reply(false));
                continue;
            }
            break (req, send);
        };
        assert_eq!(req.method(), http::Method::DELETE);
        let path = req.uri().path().to_owned();
        let body = req.into_body().collect().await.unwrap().to_bytes();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        Some((path, json, send))
    }
}

pub fn start() -> Instant {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *START.get_or_init(Instant::now)
}

pub fn status_reply(code: u16, reason: &str, retry_after: Option<&str>) -> Response<Body> {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": if code < 300 { "Success" } else { "Failure" },
        "code": code, "reason": reason, "message": format!("mock says {reason}")
    });
    let mut b = Response::builder()
        .status(code)
        .header("content-type", "application/json");
    if let Some(ra) = retry_after {
        b = b.header("retry-after", ra);
    }
    b.body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

/// The API server's answer to a `SelfSubjectAccessReview`.
pub fn access_reply(allowed: bool) -> Response<Body> {
    let body = serde_json::json!({
        "kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
        "metadata": {}, "spec": {},
        "status": {"allowed": allowed, "reason": if allowed { "" } else { "mock denies" }}
    });
    Response::builder()
        .status(201)
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

/// Keeps every record the process-wide podsweep log layer delivers.
#[derive(Default)]
pub struct Capture(pub Mutex<Vec<(i32, String)>>);

impl podsweep::logging::LogSink for Capture {
    fn emit(&self, level: i32, _target: &str, message: &str) {
        self.0.lock().unwrap().push((level, message.to_owned()));
    }
}

/// The text of the marker records [`Capture::flush`] logs.
const LOG_BARRIER: &str = "podsweep-test log barrier";

impl Capture {
    /// The messages logged so far at `level` or more severe (1 ERROR, 2 WARN, ...) that contain
    /// `needle`: every record logged before the call is in ([`Capture::flush`]).
    pub fn messages(&self, level: i32, needle: &str) -> Vec<(i32, String)> {
        self.flush();
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(l, m)| *l <= level && m.contains(needle) && !m.contains(LOG_BARRIER))
            .cloned()
            .collect()
    }

    /// Waits until every record logged before the call has reached the sink. The log layer
    /// hands records over on its own thread, in the order they were logged: a marker record
    /// logged here is delivered after them. (A full buffer drops records: the marker is logged
    /// again each second until one arrives.)
    pub fn flush(&self) {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let marker = format!(
            "{LOG_BARRIER} {}.",
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let t0 = std::time::Instant::now();
        loop {
            tracing::error!(target: "podsweep", "{marker}");
            let next = std::time::Instant::now() + Duration::from_secs(1);
            while std::time::Instant::now() < next {
                if self
                    .0
                    .lock()
                    .unwrap()
                    .iter()
                    .any(|(_, m)| m.contains(&marker))
                {
                    return;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the log layer delivered no marker record in 30 s"
            );
        }
    }
}

pub fn capture() -> Arc<Capture> {
    static CAPTURE: std::sync::OnceLock<Arc<Capture>> = std::sync::OnceLock::new();
    CAPTURE
        .get_or_init(|| {
            let c = Arc::new(Capture::default());
            podsweep::logging::install(c.clone(), tracing::Level::DEBUG);
            c
        })
        .clone()
}

/// A Kyuubi driver pod's observation (uid `uid`, name `driver-<uid>`, tag `tag-<uid>`).
pub fn observation(uid: &str, kind: EventKind, state: AppState) -> Observation {
    Observation {
        kind,
        tag: format!("tag-{uid}"),
        pod_name: format!("driver-{uid}"),
        pod_uid: uid.to_owned(),
        state,
        has_app_selector: true,
        terminated_at: None,
        deletion_requested: false,
        annotations: None,
    }
}

/// A configuration map from pairs.
pub fn conf(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// An engine with Kyuubi keys `pairs`, the given election backend and deleters, on the current
/// runtime.
pub fn engine(
    pairs: &[(&str, &str)],
    backend: ManualBackend,
    source: DeleterSource,
    clock: Clock,
) -> Engine {
    Engine::with_parts(
        Settings::from_map(conf(pairs)).unwrap(),
        "server-a",
        Arc::new(backend),
        source,
        clock,
        tokio::runtime::Handle::current(),
    )
    .unwrap()
}

/// Deleters for tests that send nothing: built at once, and a DELETE never completes.
pub fn no_deleters() -> DeleterSource {
    struct Never;
    impl PodDeleter for Never {
        fn delete(
            &self,
            _name: &str,
            _uid: &str,
            _dry_run: bool,
        ) -> futures::future::BoxFuture<'static, podsweep::deleter::Outcome> {
            Box::pin(std::future::pending())
        }
    }
    Arc::new(|_| Box::pin(async { Ok(Arc::new(Never) as Arc<dyn PodDeleter>) }))
}
