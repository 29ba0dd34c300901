//! A small pods-only Kubernetes API server on loopback, for the self-watch tests: list, HTTP
//! watch (with `410 Gone` for a resourceVersion older than the last [`PodsApi::compact`]),
//! DELETE with a UID precondition (404, 409 as a real server answers), and faults: dropped watch
//! streams, an unavailable server (503 to everything, streams cut), and one client cut off
//! ([`PodsApi::cut`]).
//!
//! Requests are attributed to their sender by the bearer token it sends ([`PodsApi::token`]), so
//! every client can use one address (one cluster, as in production) and still be told apart; a
//! listener of its own ([`PodsApi::listen`]) tags its requests too.
//!
//! Pods are kept as JSON; every change gets the next resourceVersion and an event that open
//! watches of its namespace receive. Every DELETE of a single pod is recorded. Lists and watches
//! take a label selector and a field selector on `status.phase` (`common::pods_fields`); a
//! streaming list (`sendInitialEvents`) is refused (422), as by an API server without the
//! WatchList feature, so a client lists instead. A removed pod's DELETED event carries a
//! deletionTimestamp, as a real API server's does.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

type Body = BoxBody<Bytes, Infallible>;

/// One DELETE of a single pod.
#[derive(Clone, Debug)]
pub struct DeleteRecord {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub status: u16,
    /// Its sender: the tag of its bearer token ([`PodsApi::token`]) or of the listener it came
    /// through ([`PodsApi::listen`]); `""` for neither.
    pub via: String,
    /// When the request arrived (before any hold or delay).
    pub arrived: std::time::Instant,
    /// When it arrived, in wall time (for deadlines).
    pub arrived_wall: SystemTime,
}

struct Watcher {
    /// Its sender's tag (see [`DeleteRecord::via`]).
    via: String,
    user_agent: String,
    namespace: String,
    selector: String,
    /// Its field selector (`common::pods_fields`).
    fields: String,
    tx: mpsc::UnboundedSender<Bytes>,
}

#[derive(Default)]
struct Store {
    pods: BTreeMap<(String, String), Value>,
    /// (resourceVersion, namespace, event line)
    history: Vec<(u64, String, Value)>,
    rv: u64,
    compacted: u64,
    watchers: Vec<Watcher>,
    /// Tags cut from the server: their requests are read and never answered, their streams get
    /// nothing (see [`PodsApi::cut`]).
    cut: std::collections::HashSet<String>,
}

#[derive(Default)]
struct Shared {
    store: Mutex<Store>,
    deletes: Mutex<Vec<DeleteRecord>>,
    down: AtomicBool,
    /// While set, every watch request is answered 500 (lists are served).
    watch_fail: AtomicBool,
    /// Milliseconds a DELETE waits before it is served.
    delete_delay_ms: AtomicU64,
    lists: AtomicU64,
    watches: AtomicU64,
    /// Streaming-list watch requests, refused (422) as without the WatchList feature.
    streaming_refused: AtomicU64,
    next_uid: AtomicU64,
    /// Bearer token -> the tag its requests are recorded with.
    tokens: Mutex<HashMap<String, String>>,
    healed: tokio::sync::Notify,
    /// Sender tags whose DELETE answers are held (the request is recorded as it arrives and
    /// served once the hold is lifted), and how many requests wait now per tag.
    held: Mutex<HashMap<String, usize>>,
    /// Every DELETE as it arrived (status 0: not answered yet when recorded).
    arrivals: Mutex<Vec<DeleteRecord>>,
    hold_tags: Mutex<std::collections::HashSet<String>>,
    released: tokio::sync::Notify,
}

/// The server; it stops when dropped.
pub struct PodsApi {
    pub url: String,
    shared: Arc<Shared>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Drop for PodsApi {
    fn drop(&mut self) {
        for t in self.tasks.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            t.abort();
        }
    }
}

/// The answer a request cut from the server gets: none, its connection is closed.
#[derive(Debug)]
struct Unanswered;

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("cut from the API server: closed without an answer")
    }
}

impl std::error::Error for Unanswered {}

/// Serves `shared` on `listener`; requests are tagged `via` (when empty: by their bearer token).
fn serve(listener: TcpListener, s: Arc<Shared>, via: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let (s, via) = (s.clone(), via.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let (s, via) = (s.clone(), via.clone());
                    async move { handle(&s, req, &via).await }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    })
}

impl PodsApi {
    /// Starts on a free loopback port, on the current runtime.
    pub async fn start() -> PodsApi {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let shared = Arc::new(Shared::default());
        let task = serve(listener, shared.clone(), String::new());
        PodsApi {
            url,
            shared,
            tasks: Mutex::new(vec![task]),
        }
    }

    /// Another address for the same pods (a server of its own: one client per listener), whose
    /// requests are recorded with `via = tag`. Call on the runtime that serves the API. A client
    /// of its own address is a cluster of its own to podsweep (the election key of a scope is its
    /// API server's URL): to tell the servers of one fleet apart, give each a
    /// [`PodsApi::token`] instead.
    pub async fn listen(&self, tag: &str) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let task = serve(listener, self.shared.clone(), tag.to_owned());
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(task);
        url
    }

    /// A bearer token whose requests (on any address of this server) are recorded with
    /// `via = tag`, and are subject to the faults of `tag` ([`PodsApi::hold_deletes`],
    /// [`PodsApi::cut`]). The same tag gives the same token.
    pub fn token(&self, tag: &str) -> String {
        let token = format!("podsweep-test-{tag}");
        self.shared
            .tokens
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(token.clone(), tag.to_owned());
        token
    }

    /// Cuts the sender `tag` from the server, or heals the cut: while cut, its requests are read
    /// and never answered (their connections held open, as across a black-holed network) and its
    /// watch streams get no events; when healed, those connections and streams are closed without
    /// an answer. A cut request is not recorded (it never reached the server) and changes nothing.
    pub fn cut(&self, tag: &str, on: bool) {
        let mut st = self.shared.store.lock().unwrap();
        if on {
            st.cut.insert(tag.to_owned());
        } else if st.cut.remove(tag) {
            st.watchers.retain(|w| w.via != tag);
            drop(st);
            self.shared.healed.notify_waiters();
        }
    }

    /// Whether `tag` is cut from the server now.
    pub fn is_cut(&self, tag: &str) -> bool {
        is_cut(&self.shared, tag)
    }

    /// While on, DELETEs from `tag` are recorded as they arrive but answered only
    /// once the hold is lifted (a leader whose DELETE is in flight).
    pub fn hold_deletes(&self, tag: &str, on: bool) {
        let mut tags = self
            .shared
            .hold_tags
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if on {
            tags.insert(tag.to_owned());
        } else {
            tags.remove(tag);
            self.shared.released.notify_waiters();
        }
    }

    /// DELETEs from `tag` waiting for their answer now.
    pub fn held(&self, tag: &str) -> usize {
        let held = self.shared.held.lock().unwrap_or_else(|p| p.into_inner());
        held.get(tag).copied().unwrap_or(0)
    }

    /// DELETE requests that arrived (answered or still held), in arrival order.
    pub fn arrivals(&self) -> Vec<DeleteRecord> {
        self.shared
            .arrivals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Adds a pod (`metadata.name` required; uid, namespace and resourceVersion are set here).
    pub fn create(&self, namespace: &str, mut pod: Value) -> String {
        let n = self.shared.next_uid.fetch_add(1, Ordering::Relaxed);
        let uid = format!("uid-{n}-{}", pod["metadata"]["name"].as_str().unwrap_or(""));
        pod["metadata"]["uid"] = uid.clone().into();
        pod["metadata"]["namespace"] = namespace.into();
        let mut st = self.shared.store.lock().unwrap();
        store(&mut st, namespace, pod, "ADDED");
        uid
    }

    /// Removes a pod as another client would (a DELETED event).
    pub fn remove(&self, namespace: &str, name: &str) -> bool {
        let mut st = self.shared.store.lock().unwrap();
        remove(&mut st, namespace, name)
    }

    pub fn exists(&self, namespace: &str, name: &str) -> bool {
        let st = self.shared.store.lock().unwrap();
        st.pods
            .contains_key(&(namespace.to_owned(), name.to_owned()))
    }

    /// Forgets the event history: a watch from an older resourceVersion gets `410 Gone`.
    pub fn compact(&self) {
        let mut st = self.shared.store.lock().unwrap();
        st.compacted = st.rv;
        st.history.clear();
    }

    /// Ends every open watch stream.
    pub fn drop_watches(&self) {
        self.shared.store.lock().unwrap().watchers.clear();
    }

    /// While down, every request is answered 503 and open watch streams are cut.
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
        if down {
            self.drop_watches();
        }
    }

    /// While set, every watch request is answered 500 and open streams are cut; lists are
    /// served as usual.
    pub fn set_watch_fail(&self, fail: bool) {
        self.shared.watch_fail.store(fail, Ordering::SeqCst);
        if fail {
            self.drop_watches();
        }
    }

    /// Every DELETE waits this long before it is served (a slow answer).
    pub fn set_delete_delay(&self, delay: Duration) {
        self.shared
            .delete_delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Watch streams open now.
    pub fn open_watches(&self) -> usize {
        let mut st = self.shared.store.lock().unwrap();
        st.watchers.retain(|w| !w.tx.is_closed());
        st.watchers.len()
    }

    /// Watch streams open now whose label selector is exactly `selector`.
    pub fn open_watches_for(&self, selector: &str) -> usize {
        let mut st = self.shared.store.lock().unwrap();
        st.watchers.retain(|w| !w.tx.is_closed());
        st.watchers
            .iter()
            .filter(|w| w.selector == selector)
            .count()
    }

    /// User agents of the watch streams open now.
    pub fn watch_agents(&self) -> Vec<String> {
        let mut st = self.shared.store.lock().unwrap();
        st.watchers.retain(|w| !w.tx.is_closed());
        st.watchers.iter().map(|w| w.user_agent.clone()).collect()
    }

    pub fn watch_requests(&self) -> u64 {
        self.shared.watches.load(Ordering::SeqCst)
    }

    /// Streaming-list requests (`sendInitialEvents`), each refused as by an API server without
    /// the WatchList feature (counted in [`PodsApi::watch_requests`] too).
    pub fn streaming_refused(&self) -> u64 {
        self.shared.streaming_refused.load(Ordering::SeqCst)
    }

    pub fn list_requests(&self) -> u64 {
        self.shared.lists.load(Ordering::SeqCst)
    }

    pub fn deletes(&self) -> Vec<DeleteRecord> {
        self.shared.deletes.lock().unwrap().clone()
    }

    /// DELETE requests naming `name`, whatever their answer.
    pub fn deletes_of(&self, name: &str) -> usize {
        self.deletes().iter().filter(|d| d.name == name).count()
    }
}

/// The CA certificate this API server publishes in every namespace's `kube-root-ca.crt`.
pub const ROOT_CA: &str =
    "-----BEGIN CERTIFICATE-----\npods api test CA\n-----END CERTIFICATE-----\n";

/// The UID of namespace `ns`'s `kube-root-ca.crt` ConfigMap on this API server.
pub fn root_ca_uid(ns: &str) -> String {
    format!("root-ca-of-{ns}")
}

/// The cluster part of a scope's election key on this API server (`cluster:<digest of its CA>`).
pub fn cluster_key() -> String {
    format!(
        "cluster:{}",
        podsweep::kube_client::ca_digest(ROOT_CA.trim())
    )
}

/// Polls `cond` every 20 ms until it holds; panics naming `what` after `within`.
pub async fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = tokio::time::Instant::now();
    while !cond() {
        assert!(t0.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A Kyuubi Spark driver pod, terminated (`Succeeded`, exit 0) `ended_secs_ago` seconds ago, or
/// running when `None`.
pub fn driver_pod(name: &str, ended_secs_ago: Option<u64>) -> Value {
    let state = match ended_secs_ago {
        Some(s) => {
            let at = SystemTime::now() - Duration::from_secs(s);
            let ms = at
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_millis() as i64;
            let ts = jiff::Timestamp::from_millisecond(ms).unwrap().to_string();
            json!({"terminated": {"exitCode": 0, "finishedAt": ts}})
        }
        None => json!({"running": {"startedAt": "2026-01-01T00:00:00Z"}}),
    };
    let phase = if ended_secs_ago.is_some() {
        "Succeeded"
    } else {
        "Running"
    };
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {"kyuubi-unique-tag": format!("tag-{name}"), "spark-app-selector": format!("spark-{name}")}
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "spark-kubernetes-driver"}]},
        "status": {
            "phase": phase,
            "containerStatuses": [{
                "name": "spark-kubernetes-driver", "image": "spark:test", "ready": false,
                "restartCount": 0, "state": state
            }]
        }
    })
}

fn store(st: &mut Store, ns: &str, mut pod: Value, kind: &str) {
    st.rv += 1;
    pod["metadata"]["resourceVersion"] = st.rv.to_string().into();
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
    st.pods.insert((ns.to_owned(), name), pod.clone());
    emit(st, ns, json!({"type": kind, "object": pod}));
}

fn remove(st: &mut Store, ns: &str, name: &str) -> bool {
    let Some(mut pod) = st.pods.remove(&(ns.to_owned(), name.to_owned())) else {
        return false;
    };
    st.rv += 1;
    pod["metadata"]["resourceVersion"] = st.rv.to_string().into();
    // As a real API server's last state of a deleted pod: its deletion was requested first.
    if pod["metadata"]["deletionTimestamp"].is_null() {
        pod["metadata"]["deletionTimestamp"] = jiff::Timestamp::now().to_string().into();
        pod["metadata"]["deletionGracePeriodSeconds"] = 0.into();
    }
    emit(st, ns, json!({"type": "DELETED", "object": pod}));
    true
}

fn emit(st: &mut Store, ns: &str, event: Value) {
    let rv = st.rv;
    let line = line(&event);
    st.watchers.retain(|w| {
        if w.namespace != ns
            || !passes(&w.selector, &w.fields, &event["object"])
            || st.cut.contains(&w.via)
        {
            return true;
        }
        w.tx.send(line.clone()).is_ok()
    });
    st.history.push((rv, ns.to_owned(), event));
}

fn line(v: &Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

/// The label and the field selector both match. Pods change only by creation and removal here,
/// so a pod never enters or leaves a field selection while it exists.
fn passes(selector: &str, fields: &str, pod: &Value) -> bool {
    matches(selector, pod) && super::pods_fields::matches(fields, pod) == Ok(true)
}

/// `key` (exists) and `key=value` terms, comma-separated.
fn matches(selector: &str, pod: &Value) -> bool {
    let labels = &pod["metadata"]["labels"];
    selector
        .split(',')
        .filter(|t| !t.is_empty())
        .all(|term| match term.split_once('=') {
            Some((k, v)) => labels[k].as_str() == Some(v),
            None => labels.get(term).is_some(),
        })
}

fn full(code: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(v.to_string())).boxed());
    *r.status_mut() = code;
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

/// The tag of a request: its listener's, else its bearer token's, else `""`.
fn sender(s: &Shared, req: &Request<Incoming>, listener: &str) -> String {
    if !listener.is_empty() {
        return listener.to_owned();
    }
    req.headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .and_then(|t| {
            s.tokens
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(t.trim())
                .cloned()
        })
        .unwrap_or_default()
}

fn is_cut(s: &Shared, tag: &str) -> bool {
    s.store.lock().unwrap().cut.contains(tag)
}

async fn handle(
    s: &Shared,
    req: Request<Incoming>,
    listener: &str,
) -> Result<Response<Body>, Unanswered> {
    let arrived = std::time::Instant::now();
    let arrived_wall = SystemTime::now();
    let via = sender(s, &req, listener);
    let via = via.as_str();
    let method = req.method().clone();
    let user_agent = req
        .headers()
        .get(hyper::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let path = req.uri().path().to_owned();
    let query: HashMap<String, String> = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| {
            let v = percent_encoding::percent_decode_str(v).decode_utf8_lossy();
            (k.to_owned(), v.into_owned())
        })
        .collect();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    if is_cut(s, via) {
        // Read, never answered; the connection is closed once the cut heals.
        wait_while(&s.healed, || is_cut(s, via)).await;
        return Err(Unanswered);
    }
    if s.down.load(Ordering::SeqCst) {
        return Ok(full(
            StatusCode::SERVICE_UNAVAILABLE,
            &status(503, "ServiceUnavailable", "down for the test"),
        ));
    }
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    Ok(match (method, parts.as_slice()) {
        (Method::GET, ["api", "v1", "namespaces", ns, "pods"]) => {
            let selector = query.get("labelSelector").cloned().unwrap_or_default();
            let fields = query.get("fieldSelector").cloned().unwrap_or_default();
            if let Err(e) = super::pods_fields::matches(&fields, &json!({})) {
                return Ok(full(
                    StatusCode::BAD_REQUEST,
                    &status(400, "BadRequest", &e),
                ));
            }
            if query.get("watch").map(String::as_str) == Some("true") {
                s.watches.fetch_add(1, Ordering::SeqCst);
                if query.contains_key("sendInitialEvents") {
                    // As an API server without the WatchList feature answers a streaming list.
                    s.streaming_refused.fetch_add(1, Ordering::SeqCst);
                    return Ok(full(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        &status(
                            422,
                            "Invalid",
                            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for \
                             watch unless the WatchList feature gate is enabled",
                        ),
                    ));
                }
                if s.watch_fail.load(Ordering::SeqCst) {
                    return Ok(full(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        &status(500, "InternalError", "watch failing for the test"),
                    ));
                }
                watch(
                    s,
                    ns,
                    (&selector, &fields),
                    query.get("resourceVersion"),
                    user_agent,
                    via,
                )
            } else {
                s.lists.fetch_add(1, Ordering::SeqCst);
                let st = s.store.lock().unwrap();
                let items: Vec<Value> = st
                    .pods
                    .iter()
                    .filter(|((n, _), p)| n == ns && matches(&selector, p))
                    .filter(|(_, p)| super::pods_fields::matches(&fields, p) == Ok(true))
                    .map(|(_, p)| p.clone())
                    .collect();
                full(
                    StatusCode::OK,
                    &json!({"apiVersion": "v1", "kind": "PodList",
                            "metadata": {"resourceVersion": st.rv.to_string()}, "items": items}),
                )
            }
        }
        // What kube-controller-manager's root CA publisher leaves in every namespace of a real
        // cluster: podsweep reads its UID as the namespace's identity (its election key).
        (Method::GET, ["api", "v1", "namespaces", ns, "configmaps", "kube-root-ca.crt"]) => full(
            StatusCode::OK,
            &json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "kube-root-ca.crt", "namespace": ns,
                                 "uid": root_ca_uid(ns)},
                    "data": {"ca.crt": ROOT_CA}}),
        ),
        (Method::DELETE, ["api", "v1", "namespaces", ns, "pods", name]) => {
            let opts: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            let uid = opts["preconditions"]["uid"].as_str().map(str::to_owned);
            let record = |status| DeleteRecord {
                namespace: ns.to_string(),
                name: name.to_string(),
                uid: uid.clone(),
                status,
                via: via.to_owned(),
                arrived,
                arrived_wall,
            };
            s.arrivals
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(record(0));
            hold(s, via).await;
            let delay = s.delete_delay_ms.load(Ordering::SeqCst);
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            let mut st = s.store.lock().unwrap();
            let key = (ns.to_string(), name.to_string());
            let (code, reply) = match st.pods.get(&key).cloned() {
                None => (
                    404,
                    status(404, "NotFound", &format!("pods \"{name}\" not found")),
                ),
                Some(p) if uid.is_some() && p["metadata"]["uid"].as_str() != uid.as_deref() => (
                    409,
                    status(409, "Conflict", "Precondition failed: UID in precondition"),
                ),
                Some(p) => {
                    remove(&mut st, ns, name);
                    (200, p)
                }
            };
            drop(st);
            s.deletes.lock().unwrap().push(record(code));
            full(StatusCode::from_u16(code).unwrap(), &reply)
        }
        _ => full(
            StatusCode::METHOD_NOT_ALLOWED,
            &status(405, "MethodNotAllowed", "not served here"),
        ),
    })
}

/// Waits while DELETEs through `via` are held.
async fn hold(s: &Shared, via: &str) {
    let is_held = || {
        s.hold_tags
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(via)
    };
    if !is_held() {
        return;
    }
    let bump = |d: isize| {
        let mut held = s.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(via.to_owned()).or_default();
        *n = n.saturating_add_signed(d);
    };
    bump(1);
    wait_while(&s.released, is_held).await;
    bump(-1);
}

/// Waits until `cond` no longer holds; whoever ends it notifies `changed` (`notify_waiters`).
async fn wait_while(changed: &tokio::sync::Notify, cond: impl Fn() -> bool) {
    while cond() {
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if !cond() {
            break;
        }
        notified.await;
    }
}

fn watch(
    s: &Shared,
    ns: &str,
    (selector, fields): (&str, &str),
    from: Option<&String>,
    user_agent: String,
    via: &str,
) -> Response<Body> {
    let from: u64 = from.and_then(|v| v.parse().ok()).unwrap_or(0);
    let (tx, rx) = mpsc::unbounded_channel::<Bytes>();
    {
        let mut st = s.store.lock().unwrap();
        if from != 0 && from < st.compacted {
            let gone = status(
                410,
                "Expired",
                &format!("too old resource version: {from} ({})", st.compacted),
            );
            let _ = tx.send(line(&json!({"type": "ERROR", "object": gone})));
            drop(tx);
        } else {
            for (rv, n, ev) in &st.history {
                if *rv > from && n == ns && passes(selector, fields, &ev["object"]) {
                    let _ = tx.send(line(ev));
                }
            }
            st.watchers.push(Watcher {
                via: via.to_owned(),
                user_agent,
                namespace: ns.to_owned(),
                selector: selector.to_owned(),
                fields: fields.to_owned(),
                tx,
            });
        }
    }
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) })
            .map(|b| Ok::<_, Infallible>(Frame::data(b)));
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r
}
