//! Issue 25, item 4: one cluster, one election per namespace, whatever URL a server uses. Each
//! scope task's election runs under the namespace's identity (the UID of its `kube-root-ca.crt`
//! ConfigMap), read once when the task starts: servers that reach one cluster by different URLs
//! campaign under one key. Where it cannot be read (403, 404) the scope is elected under its URL
//! with one WARN; while it cannot be read yet (unreachable) the scope waits, paused
//! `cluster_identity` with its end. (The real API server, two URLs, a kubeconfig and the
//! in-cluster environment: `realapi.ClusterIdentitySuite`.)

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::fixture::{capture, start};
use futures::future::BoxFuture;
use podsweep::clock::Clock;
use podsweep::config::{keys, Settings};
use podsweep::election::{Backend, LeaderSignal};
use podsweep::engine::{Engine, IdentitySource};
use podsweep::kube_client::IdentityError;
use podsweep::model::{AppState, EventKind};
use podsweep::scope::Scope;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// Records the key of every campaign.
#[derive(Default, Clone)]
struct Keys(Arc<Mutex<Vec<Scope>>>);

impl Backend for Keys {
    fn name(&self) -> &'static str {
        "recording"
    }

    fn campaign(
        &self,
        scope: Scope,
        _identity: String,
        _signal: LeaderSignal,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        self.0.lock().unwrap().push(scope);
        Box::pin(async move { cancel.cancelled().await })
    }
}

fn engine(url: &str, backend: &Keys, identities: IdentitySource) -> Engine {
    engine_with(url, backend, identities, &[])
}

/// An engine whose API server is `url`, with `extra` keys (e.g. a context's overlay).
fn engine_with(
    url: &str,
    backend: &Keys,
    identities: IdentitySource,
    extra: &[(&str, &str)],
) -> Engine {
    let conf = [
        (keys::CLEANUP_KIND, "ALL"),
        ("kyuubi.kubernetes.master.address", url),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    Engine::with_parts(
        Settings::from_map(conf).unwrap(),
        "server",
        Arc::new(backend.clone()),
        common::fixture::no_deleters(),
        Clock::System,
        tokio::runtime::Handle::current(),
    )
    .unwrap()
    .with_namespace_identities(identities)
}

fn status(e: &Engine, scope: &Scope) -> Value {
    serde_json::from_str(&e.status_json(scope)).unwrap()
}

async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn two_urls_of_one_cluster_campaign_under_one_key() {
    start();
    let backend = Keys::default();
    let ids: IdentitySource = Arc::new(|scope: Scope| {
        Box::pin(async move { Ok(format!("uid-of-{}", scope.namespace.unwrap_or_default())) })
    });
    let by_ip = engine("https://127.0.0.1:6443", &backend, ids.clone());
    let by_name = engine("https://kubernetes.example:443", &backend, ids);
    let scope = Scope::new(None, Some("spark"));
    let obs = common::fixture::observation("p", EventKind::Update, AppState::Running);
    by_ip.observe(scope.clone(), obs.clone()).unwrap();
    by_name.observe(scope.clone(), obs).unwrap();
    settle().await;
    let keys = backend.0.lock().unwrap().clone();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!(keys[0], keys[1], "one election for one namespace");
    assert_eq!(
        keys[0],
        Scope::new(Some("ns-uid:uid-of-spark"), Some("spark"))
    );
    for e in [&by_ip, &by_name] {
        let st = status(e, &scope);
        assert_eq!(st["election_scope"], "ns-uid:uid-of-spark:spark", "{st}");
        assert_eq!(st["election_scope_read"], true);
    }
    by_ip.close_async(Duration::from_secs(1)).await;
    by_name.close_async(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn an_unreadable_identity_falls_back_to_the_url_with_one_warn() {
    start();
    let logs = capture();
    let backend = Keys::default();
    let ids: IdentitySource = Arc::new(|_| {
        Box::pin(async {
            Err(IdentityError::Unreadable(
                "GET configmaps/kube-root-ca.crt in namespace spark: HTTP 403 forbidden".into(),
            ))
        })
    });
    let e = engine("https://127.0.0.1:6443", &backend, ids);
    let scope = Scope::new(None, Some("spark"));
    let obs = common::fixture::observation("p", EventKind::Update, AppState::Running);
    e.observe(scope.clone(), obs).unwrap();
    settle().await;
    assert_eq!(
        backend.0.lock().unwrap().clone(),
        [Scope::new(Some("https://127.0.0.1:6443"), Some("spark"))]
    );
    let warns = logs.messages(2, "cannot read which cluster it is in");
    assert_eq!(warns.len(), 1, "{warns:?}");
    assert!(warns[0].1.contains("HTTP 403") && warns[0].1.contains("kube-root-ca.crt"));
    e.close_async(Duration::from_secs(1)).await;
}

#[tokio::test(start_paused = true)]
async fn an_identity_not_readable_yet_is_a_pause_then_the_campaign_starts() {
    start();
    let backend = Keys::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let ids: IdentitySource = Arc::new(move |_| {
        let n = c.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move {
            if n < 3 {
                Err(IdentityError::Transient("connection refused".into()))
            } else {
                Ok("uid-1".to_owned())
            }
        })
    });
    let e = engine("https://127.0.0.1:6443", &backend, ids);
    let scope = Scope::new(None, Some("spark"));
    let obs = common::fixture::observation("p", EventKind::Update, AppState::Running);
    e.observe(scope.clone(), obs).unwrap();
    settle().await;
    let st = status(&e, &scope);
    assert_eq!(st["pause_reason"], "cluster_identity", "{st}");
    // This server cannot reach the API server (it could not delete either): unhealthy at once.
    assert_eq!(st["healthy"], false, "{st}");
    assert!(st["health_reason"]
        .as_str()
        .unwrap()
        .contains("has not told which cluster the scope is in"));
    assert!(st["paused_until_ms"].as_u64().is_some(), "an end: {st}");
    assert!(st["pause_detail"]
        .as_str()
        .unwrap()
        .contains("connection refused"));
    assert!(backend.0.lock().unwrap().is_empty(), "no campaign yet");
    // Reads 1 s, 2 s, 4 s apart: the fourth works and the scope campaigns.
    for _ in 0..3 {
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(status(&e, &scope)["healthy"], false);
    // The fourth, 4 s later, works: healthy, and the scope campaigns.
    for _ in 0..4 {
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 4);
    assert_eq!(status(&e, &scope)["healthy"], true);
    assert_eq!(
        backend.0.lock().unwrap().clone(),
        [Scope::new(Some("ns-uid:uid-1"), Some("spark"))]
    );
    assert_eq!(status(&e, &scope)["paused"], false);
    e.close_async(Duration::from_secs(1)).await;
}

/// Scopes that alias (two of Kyuubi's `KubernetesInfo` naming one cluster and namespace) share
/// one task and one election; each is reported under its own name, whichever sent the first
/// event, so a scope's name (status, Kyuubi's metric names) is the same on every server.
#[tokio::test(start_paused = true)]
async fn aliasing_scopes_are_each_reported_under_their_own_name() {
    start();
    let backend = Keys::default();
    let ids: IdentitySource = Arc::new(|_| Box::pin(async { Ok("uid-7".to_owned()) }));
    let e = engine_with(
        "https://api:6443",
        &backend,
        ids,
        &[("kyuubi.kubernetes.prod.master.address", "https://api:6443")],
    );
    let named = Scope::new(Some("prod"), Some("spark"));
    let bare = Scope::new(None, Some("spark"));
    let obs = common::fixture::observation("p", EventKind::Update, AppState::Running);
    // The context-named alias sends first here; another server may see the bare one first.
    e.observe(named.clone(), obs.clone()).unwrap();
    e.observe(bare.clone(), obs).unwrap();
    settle().await;
    assert_eq!(backend.0.lock().unwrap().len(), 1, "one task, one election");
    let all: Vec<Value> = serde_json::from_str(&e.status_all_json()).unwrap();
    let names: Vec<&str> = all.iter().map(|s| s["scope"].as_str().unwrap()).collect();
    assert_eq!(names, ["<default context>:spark", "prod:spark"], "{all:?}");
    assert!(all
        .iter()
        .all(|s| s["election_scope"] == "ns-uid:uid-7:spark"));
    assert_eq!(status(&e, &bare)["scope"], "<default context>:spark");
    assert_eq!(status(&e, &named)["scope"], "prod:spark");
    e.close_async(Duration::from_secs(1)).await;
}
