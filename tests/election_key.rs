//! One cluster, one election per namespace, whatever URL a server uses (issue 25, item 4; issue
//! 32, item 2). Each scope task's election runs under the cluster's identity (the digest of the
//! CA certificate its `kube-root-ca.crt` ConfigMap publishes), read when the task starts and
//! again every ten minutes: servers that reach one cluster by different URLs campaign under one
//! key. Where it cannot be read (403, 404) the scope is held: no campaign, paused
//! `cluster_identity`, unhealthy, one ERROR; only `ha.electionKey=URL` elects under the URL.
//! By default a server first wins podsweep 0.1's URL-keyed election, then the cluster's.
//! (The real API server, two URLs, a kubeconfig and the in-cluster environment:
//! `realapi.ClusterIdentitySuite`; a fleet with mixed RBAC, the ConfigMap re-created and a
//! rolling upgrade from 0.1: `tests/day2_identity.rs`.)

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

/// Records the key of every campaign (and of every campaign that ended); leads each election at
/// once when `leads`.
#[derive(Default, Clone)]
struct Keys(Arc<Mutex<Vec<Scope>>>, Arc<Mutex<Vec<Scope>>>, bool);

impl Keys {
    fn leading() -> Self {
        Keys(Arc::default(), Arc::default(), true)
    }

    fn started(&self) -> Vec<Scope> {
        self.0.lock().unwrap().clone()
    }

    fn ended(&self) -> Vec<Scope> {
        self.1.lock().unwrap().clone()
    }
}

impl Backend for Keys {
    fn name(&self) -> &'static str {
        "recording"
    }

    fn campaign(
        &self,
        scope: Scope,
        _identity: String,
        signal: LeaderSignal,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        self.0.lock().unwrap().push(scope.clone());
        let (ended, leads) = (self.1.clone(), self.2);
        Box::pin(async move {
            if leads {
                let forever = tokio::time::Instant::now() + Duration::from_secs(1 << 30);
                signal.lead_until(forever, "recording backend");
            }
            cancel.cancelled().await;
            signal.follow("closed");
            ended.lock().unwrap().push(scope);
        })
    }
}

const NO_LEGACY: (&str, &str) = (keys::HA_LEGACY_ELECTION, "false");

fn engine(url: &str, backend: &Keys, identities: IdentitySource) -> Engine {
    engine_with(url, backend, identities, &[NO_LEGACY])
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
    let keys = backend.started();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_eq!(keys[0], keys[1], "one election for one namespace");
    assert_eq!(
        keys[0],
        Scope::new(Some("cluster:uid-of-spark"), Some("spark"))
    );
    for e in [&by_ip, &by_name] {
        let st = status(e, &scope);
        assert_eq!(st["election_scope"], "cluster:uid-of-spark:spark", "{st}");
        assert_eq!(st["election_scope_read"], true);
        assert_eq!(st["election_key_kind"], "cluster");
        assert_eq!(st["election_layout"], 2);
    }
    by_ip.close_async(Duration::from_secs(1)).await;
    by_name.close_async(Duration::from_secs(1)).await;
}

/// Issue 32, item 2: a server that may not read the identity (403 while the RBAC rule reaches
/// only some accounts, 404, 401) never elects under another key than its peers: the scope is
/// held (no campaign), unhealthy and paused with the reason, one ERROR per cause, and it
/// campaigns under the cluster's key once the rule is granted, without a restart. Before: it
/// campaigned under its URL at once, a second leader beside the peers that could read it.
#[tokio::test(start_paused = true)]
async fn an_unreadable_identity_holds_the_scope_until_it_can_be_read() {
    start();
    let logs = capture();
    let backend = Keys::default();
    let granted = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let g = granted.clone();
    let ids: IdentitySource = Arc::new(move |_| {
        let granted = g.load(Ordering::SeqCst);
        Box::pin(async move {
            if granted {
                Ok("ca-1".to_owned())
            } else {
                Err(IdentityError::Unreadable(
                    "GET configmaps/kube-root-ca.crt in namespace spark: HTTP 403 forbidden".into(),
                ))
            }
        })
    });
    let e = engine("https://127.0.0.1:6443", &backend, ids);
    let scope = Scope::new(None, Some("spark"));
    let obs = common::fixture::observation("p", EventKind::Update, AppState::Running);
    e.observe(scope.clone(), obs).unwrap();
    for _ in 0..5 {
        tokio::time::advance(Duration::from_secs(30)).await;
        settle().await;
    }
    assert!(
        backend.started().is_empty(),
        "held: no campaign under any key"
    );
    let st = status(&e, &scope);
    assert_eq!(st["pause_reason"], "cluster_identity", "{st}");
    assert_eq!(st["healthy"], false, "{st}");
    assert!(
        st["health_reason"].as_str().unwrap().contains("HTTP 403"),
        "{st}"
    );
    assert_eq!(st["election_scope_read"], false, "{st}");
    let errors = logs.messages(1, "cannot read which cluster it is in");
    assert_eq!(errors.len(), 1, "one ERROR per cause: {errors:?}");
    assert!(errors[0].1.contains("electionKey=URL"), "{errors:?}");
    // The rule is granted: the next read (at most a minute later) works.
    granted.store(true, Ordering::SeqCst);
    for _ in 0..7 {
        tokio::time::advance(Duration::from_secs(10)).await;
        settle().await;
    }
    assert_eq!(
        backend.started(),
        [Scope::new(Some("cluster:ca-1"), Some("spark"))]
    );
    let st = status(&e, &scope);
    assert_eq!(st["healthy"], true, "{st}");
    assert_eq!(st["paused"], false, "{st}");
    e.close_async(Duration::from_secs(1)).await;
}

/// `ha.electionKey=URL` (podsweep 0.1's key, for a fleet that cannot grant the rule): the URL
/// key, with nothing read.
#[tokio::test(start_paused = true)]
async fn url_keys_when_the_operator_chose_them_read_nothing() {
    start();
    let backend = Keys::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let ids: IdentitySource = Arc::new(move |_| {
        c.fetch_add(1, Ordering::SeqCst);
        Box::pin(async { Ok("ca-1".to_owned()) })
    });
    let e = engine_with(
        "https://127.0.0.1:6443",
        &backend,
        ids,
        &[(keys::HA_ELECTION_KEY, "URL")],
    );
    let scope = Scope::new(None, Some("spark"));
    let obs = common::fixture::observation("p", EventKind::Update, AppState::Running);
    e.observe(scope.clone(), obs).unwrap();
    settle().await;
    assert_eq!(
        backend.started(),
        [Scope::new(Some("https://127.0.0.1:6443"), Some("spark"))]
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let st = status(&e, &scope);
    assert_eq!(st["election_key_kind"], "url", "{st}");
    assert_eq!(st["election_legacy"], Value::Null, "{st}");
    e.close_async(Duration::from_secs(1)).await;
}

/// By default (`ha.legacyElection=true`) a server first wins podsweep 0.1's election of its URL
/// and only then campaigns under the cluster's key; it leaves the second as soon as it loses the
/// first, and may act only while it holds both.
#[tokio::test(start_paused = true)]
async fn a_server_wins_the_url_election_first_then_the_clusters() {
    start();
    let backend = Keys::leading();
    let ids: IdentitySource = Arc::new(|_| Box::pin(async { Ok("ca-1".to_owned()) }));
    let e = engine_with("https://127.0.0.1:6443", &backend, ids, &[]);
    let scope = Scope::new(None, Some("spark"));
    let obs = common::fixture::observation("p", EventKind::Update, AppState::Running);
    e.observe(scope.clone(), obs).unwrap();
    settle().await;
    let url = Scope::new(Some("https://127.0.0.1:6443"), Some("spark"));
    let cluster = Scope::new(Some("cluster:ca-1"), Some("spark"));
    assert_eq!(backend.started(), [url.clone(), cluster.clone()]);
    let st = status(&e, &scope);
    assert_eq!(st["leadership"], "LEADING", "{st}");
    assert_eq!(st["election_scope"], "cluster:ca-1:spark", "{st}");
    assert_eq!(
        st["election_legacy"], "https://127.0.0.1:6443:spark",
        "{st}"
    );
    e.close_async(Duration::from_secs(1)).await;
    // Both seats are given back, the cluster's first.
    assert_eq!(backend.ended(), [cluster, url]);
}

/// The identity is read again every ten minutes; a changed one (the cluster's CA rotated) ends
/// the campaign under the old key and starts one under the new key. The ConfigMap published
/// again with the same certificate (a GitOps prune) changes nothing.
#[tokio::test(start_paused = true)]
async fn a_changed_identity_moves_the_election_to_the_new_key() {
    start();
    let logs = capture();
    let backend = Keys::leading();
    let ca = Arc::new(Mutex::new("ca-1".to_owned()));
    let reads = Arc::new(AtomicUsize::new(0));
    let (c, r) = (ca.clone(), reads.clone());
    let ids: IdentitySource = Arc::new(move |_| {
        r.fetch_add(1, Ordering::SeqCst);
        let now = c.lock().unwrap().clone();
        Box::pin(async move { Ok(now) })
    });
    let e = engine("https://127.0.0.1:6443", &backend, ids);
    let scope = Scope::new(None, Some("spark"));
    let obs = common::fixture::observation("p", EventKind::Update, AppState::Running);
    e.observe(scope.clone(), obs).unwrap();
    settle().await;
    let old = Scope::new(Some("cluster:ca-1"), Some("spark"));
    assert_eq!(backend.started(), std::slice::from_ref(&old));
    // Ten minutes later, the same certificate: nothing changes.
    tokio::time::advance(Duration::from_secs(601)).await;
    settle().await;
    assert_eq!(reads.load(Ordering::SeqCst), 2);
    assert_eq!(backend.started(), std::slice::from_ref(&old));
    // The CA rotated: the next read moves the election.
    *ca.lock().unwrap() = "ca-2".to_owned();
    tokio::time::advance(Duration::from_secs(601)).await;
    settle().await;
    let new = Scope::new(Some("cluster:ca-2"), Some("spark"));
    assert_eq!(backend.started(), [old.clone(), new.clone()]);
    assert_eq!(backend.ended(), [old]);
    assert_eq!(status(&e, &scope)["election_scope"], "cluster:ca-2:spark");
    assert_eq!(logs.messages(2, "the cluster's identity changed").len(), 1);
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
    assert!(backend.started().is_empty(), "no campaign yet");
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
        backend.started(),
        [Scope::new(Some("cluster:uid-1"), Some("spark"))]
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
        &[
            ("kyuubi.kubernetes.prod.master.address", "https://api:6443"),
            NO_LEGACY,
        ],
    );
    let named = Scope::new(Some("prod"), Some("spark"));
    let bare = Scope::new(None, Some("spark"));
    let obs = common::fixture::observation("p", EventKind::Update, AppState::Running);
    // The context-named alias sends first here; another server may see the bare one first.
    e.observe(named.clone(), obs.clone()).unwrap();
    e.observe(bare.clone(), obs).unwrap();
    settle().await;
    assert_eq!(backend.started().len(), 1, "one task, one election");
    let all: Vec<Value> = serde_json::from_str(&e.status_all_json()).unwrap();
    let names: Vec<&str> = all.iter().map(|s| s["scope"].as_str().unwrap()).collect();
    assert_eq!(names, ["<default context>:spark", "prod:spark"], "{all:?}");
    assert!(all
        .iter()
        .all(|s| s["election_scope"] == "cluster:uid-7:spark"));
    assert_eq!(status(&e, &bare)["scope"], "<default context>:spark");
    assert_eq!(status(&e, &named)["scope"], "prod:spark");
    e.close_async(Duration::from_secs(1)).await;
}
