//! Pod DELETE with a UID precondition, and the class of every outcome.
//!
//! # Guarantees
//! * Every DELETE names the pod and carries `preconditions.uid`, so a re-created pod with the same
//!   name is never deleted (the API server answers 409 instead).
//! * Every result falls in exactly one [`OutcomeClass`]; status code, reason, message and any
//!   `Retry-After` are kept for logs and retries, and so is which API Priority and Fairness level
//!   and flow schema classified the request (the `X-Kubernetes-PF-*` headers) when the API
//!   server says it.
//! * kube-rs's own retry layer is turned off for the client used here (see `kube_client`), so a
//!   429 or 503 reaches the classifier instead of being hidden behind retries.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use http::{HeaderMap, StatusCode};
use http_body_util::BodyExt;
use kube::core::params::{DeleteParams, Preconditions};
use kube::core::Request;
use serde::Deserialize;

/// What became of one DELETE.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutcomeClass {
    /// Deletion started or done (200/202).
    Accepted,
    /// The pod is already gone (404).
    AlreadyAbsent,
    /// The name now belongs to another pod: the UID precondition failed (409).
    Replaced,
    /// RBAC denies the DELETE (403).
    Forbidden,
    /// The API server asks us to slow down (429).
    Throttled,
    /// The API server failed (5xx).
    ServerError,
    /// No HTTP answer: connect, reset, timeout.
    Transport,
    /// Anything else (unexpected status, unreadable reply).
    Other,
}

impl OutcomeClass {
    pub const ALL: [OutcomeClass; 8] = [
        OutcomeClass::Accepted,
        OutcomeClass::AlreadyAbsent,
        OutcomeClass::Replaced,
        OutcomeClass::Forbidden,
        OutcomeClass::Throttled,
        OutcomeClass::ServerError,
        OutcomeClass::Transport,
        OutcomeClass::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeClass::Accepted => "accepted",
            OutcomeClass::AlreadyAbsent => "already_absent",
            OutcomeClass::Replaced => "replaced",
            OutcomeClass::Forbidden => "forbidden",
            OutcomeClass::Throttled => "throttled",
            OutcomeClass::ServerError => "server_error",
            OutcomeClass::Transport => "transport",
            OutcomeClass::Other => "other",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    /// True when the pod with this UID is gone or going: nothing is left to do for it.
    pub fn is_done(self) -> bool {
        matches!(
            self,
            OutcomeClass::Accepted | OutcomeClass::AlreadyAbsent | OutcomeClass::Replaced
        )
    }
}

/// One classified DELETE result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub class: OutcomeClass,
    /// HTTP status, when there was an answer.
    pub code: Option<u16>,
    /// The API `Status.reason` (e.g. `Forbidden`), or the transport error kind.
    pub reason: String,
    /// The API `Status.message`, or the transport error text.
    pub message: String,
    /// From the `Retry-After` header, or `Status.details.retryAfterSeconds`.
    pub retry_after: Option<Duration>,
    /// The API Priority and Fairness level and flow schema that classified the request, from the
    /// answer's headers (absent without an answer, or from an API server without APF).
    pub flow: Option<Flow>,
}

/// Which API Priority and Fairness priority level and flow schema classified a request: the UIDs
/// the API server names in `X-Kubernetes-PF-PriorityLevel-UID` and
/// `X-Kubernetes-PF-FlowSchema-UID`, on the requests it served and on those it rejected (429) alike.
/// `kubectl get prioritylevelconfigurations,flowschemas -o custom-columns=NAME:.metadata.name,UID:.metadata.uid`
/// names them.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Flow {
    pub priority_level_uid: String,
    pub flow_schema_uid: String,
}

/// The response header naming the priority level that classified a request.
pub const PRIORITY_LEVEL_HEADER: &str = "x-kubernetes-pf-prioritylevel-uid";
/// The response header naming the flow schema that classified a request.
pub const FLOW_SCHEMA_HEADER: &str = "x-kubernetes-pf-flowschema-uid";

/// The APF headers of an answer, if it has them (values longer than a UID are cut to 64 bytes).
pub fn flow_of(headers: &HeaderMap) -> Option<Flow> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().chars().take(64).collect::<String>())
            .filter(|v| !v.is_empty())
    };
    let priority_level_uid = get(PRIORITY_LEVEL_HEADER)?;
    Some(Flow {
        priority_level_uid,
        flow_schema_uid: get(FLOW_SCHEMA_HEADER).unwrap_or_default(),
    })
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.class.as_str())?;
        if let Some(code) = self.code {
            write!(f, " (HTTP {code}")?;
            if !self.reason.is_empty() {
                write!(f, " {}", self.reason)?;
            }
            write!(f, ")")?;
        } else if !self.reason.is_empty() {
            write!(f, " ({})", self.reason)?;
        }
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        if let Some(ra) = self.retry_after {
            write!(f, "; retry after {}s", ra.as_secs_f64())?;
        }
        if let Some(flow) = self.flow.as_ref().filter(|_| !self.class.is_done()) {
            write!(
                f,
                "; API Priority and Fairness level {} (flow schema {})",
                flow.priority_level_uid, flow.flow_schema_uid
            )?;
        }
        Ok(())
    }
}

/// What the API server's authorizer says of this server's `delete` on the pods of a namespace
/// (a `SelfSubjectAccessReview`): whether a refusal comes from RBAC (another server's account
/// may be allowed) or from admission (a policy or webhook that refuses every server alike).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// The account may delete pods there: a refused DELETE was refused after authorization.
    Allowed,
    /// The authorizer denies it (the reason it gives, if any).
    Denied(String),
    /// Not known: the review failed or was not asked (why).
    Unknown(String),
}

/// Sends one DELETE for a pod, by name, guarded by its UID.
pub trait PodDeleter: Send + Sync + 'static {
    fn delete(&self, name: &str, uid: &str, dry_run: bool) -> BoxFuture<'static, Outcome>;

    /// Asks the API server whether this server may delete the namespace's pods. The default
    /// does not know (deleters of tests and benches).
    fn review(&self) -> BoxFuture<'static, Access> {
        Box::pin(async { Access::Unknown("no access review for this deleter".into()) })
    }

    /// Records a Kubernetes Event about a pod of the deleter's namespace. The default records
    /// nothing (deleters of tests and benches).
    fn record(&self, _note: EventNote) -> BoxFuture<'static, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    /// Reads what podsweep must know of pod `name` before it deletes a pod it has not observed
    /// itself (a request another server handed over): `None` when there is no such pod. The
    /// default cannot read (deleters of tests and benches that never need it).
    fn inspect(&self, _name: &str) -> BoxFuture<'static, Result<Option<PodFacts>, String>> {
        Box::pin(async { Err("this deleter cannot read pods".to_owned()) })
    }
}

/// What [`PodDeleter::inspect`] reads of a pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodFacts {
    pub uid: String,
    /// Label `kyuubi-unique-tag`, if set.
    pub tag: Option<String>,
    /// Label `spark-app-selector` is set.
    pub has_app_selector: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

/// One Kubernetes Event (`events.k8s.io/v1`) about a driver pod, from its scope's leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventNote {
    pub pod: String,
    pub uid: String,
    /// `Warning` (a refused DELETE) rather than `Normal`.
    pub warning: bool,
    /// CamelCase, as Kubernetes reasons are: `Deleted`, `DeleteRefused`.
    pub reason: &'static str,
    pub note: String,
}

/// The reporting controller of podsweep's Events.
pub const EVENT_CONTROLLER: &str = "podsweep.org/cleanup";

/// The DELETE parameters podsweep always sends.
pub fn delete_params(uid: &str, dry_run: bool) -> DeleteParams {
    DeleteParams {
        dry_run,
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// [`PodDeleter`] over a kube-rs client.
#[derive(Clone)]
pub struct KubeDeleter {
    client: kube::Client,
    request: Request,
    namespace: String,
    recorder: std::sync::Arc<kube::runtime::events::Recorder>,
}

impl KubeDeleter {
    /// A deleter for the pods of `namespace`; the namespace and every pod name go into the
    /// request path percent-encoded, whatever they contain.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        let ns = crate::names::path_segment(namespace);
        let reporter = kube::runtime::events::Reporter {
            controller: EVENT_CONTROLLER.to_owned(),
            instance: gethostname::gethostname().into_string().ok(),
        };
        KubeDeleter {
            recorder: std::sync::Arc::new(kube::runtime::events::Recorder::new(
                client.clone(),
                reporter,
            )),
            client,
            request: Request::new(format!("/api/v1/namespaces/{ns}/pods")),
            namespace: namespace.to_owned(),
        }
    }
}

/// The longest wait for a `SelfSubjectAccessReview`.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);

impl PodDeleter for KubeDeleter {
    fn review(&self) -> BoxFuture<'static, Access> {
        use k8s_openapi::api::authorization::v1::{
            ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
        };
        let api: kube::Api<SelfSubjectAccessReview> = kube::Api::all(self.client.clone());
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(self.namespace.clone()),
                    verb: Some("delete".into()),
                    group: Some(String::new()),
                    resource: Some("pods".into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        Box::pin(async move {
            let params = kube::api::PostParams::default();
            let asked = api.create(&params, &review);
            match tokio::time::timeout(REVIEW_TIMEOUT, asked).await {
                Err(_) => Access::Unknown(format!("no answer within {REVIEW_TIMEOUT:?}")),
                Ok(Err(e)) => Access::Unknown(error_chain(&e)),
                Ok(Ok(r)) => match r.status {
                    Some(st) if st.allowed => Access::Allowed,
                    Some(st) => Access::Denied(st.reason.unwrap_or_default()),
                    None => Access::Unknown("the review came back without a status".into()),
                },
            }
        })
    }

    fn record(&self, note: EventNote) -> BoxFuture<'static, Result<(), String>> {
        use kube::runtime::events::{Event, EventType};
        let recorder = self.recorder.clone();
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(note.pod),
            namespace: Some(self.namespace.clone()),
            uid: Some(note.uid),
            ..Default::default()
        };
        let event = Event {
            type_: if note.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: note.reason.to_owned(),
            note: Some(note.note),
            action: "Delete".to_owned(),
            secondary: None,
        };
        Box::pin(async move {
            recorder
                .publish(&event, &reference)
                .await
                .map_err(|e| error_chain(&e))
        })
    }

    fn inspect(&self, name: &str) -> BoxFuture<'static, Result<Option<PodFacts>, String>> {
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(self.client.clone(), &self.namespace);
        let name = name.to_owned();
        Box::pin(async move {
            let pod = api
                .get_metadata_opt(&name)
                .await
                .map_err(|e| format!("GET pod {name}: {}", error_chain(&e)))?;
            Ok(pod.map(|p| {
                let meta = p.metadata;
                let label = |k: &str| meta.labels.as_ref().and_then(|l| l.get(k)).cloned();
                PodFacts {
                    uid: meta.uid.clone().unwrap_or_default(),
                    tag: label(crate::kyuubi_state::UNIQUE_TAG_LABEL),
                    has_app_selector: label(crate::kyuubi_state::APP_SELECTOR_LABEL).is_some(),
                    deleting: meta.deletion_timestamp.is_some(),
                }
            }))
        })
    }

    fn delete(&self, name: &str, uid: &str, dry_run: bool) -> BoxFuture<'static, Outcome> {
        let name = crate::names::path_segment(name);
        let built = self.request.delete(&name, &delete_params(uid, dry_run));
        let client = self.client.clone();
        Box::pin(async move {
            let req = match built {
                Ok(r) if dry_run => with_dry_run_query(r).map(kube::client::Body::from),
                Ok(r) => r.map(kube::client::Body::from),
                Err(e) => {
                    return Outcome {
                        class: OutcomeClass::Other,
                        code: None,
                        reason: "BadRequest".into(),
                        message: format!("cannot build the DELETE request: {e}"),
                        retry_after: None,
                        flow: None,
                    }
                }
            };
            match client.send(req).await {
                Err(e) => classify_transport(&e),
                Ok(resp) => {
                    let (parts, body) = resp.into_parts();
                    let bytes = match body.collect().await {
                        Ok(c) => c.to_bytes(),
                        Err(e) => {
                            return Outcome {
                                class: OutcomeClass::Transport,
                                code: Some(parts.status.as_u16()),
                                reason: "BodyRead".into(),
                                message: e.to_string(),
                                retry_after: None,
                                flow: flow_of(&parts.headers),
                            }
                        }
                    };
                    classify_response(parts.status, &parts.headers, &bytes)
                }
            }
        })
    }
}

/// A dry-run DELETE also says so in its URL (`dryRun=All`, besides the body's `dryRun`), so the
/// API server's audit log, which records the URL, shows that nothing was meant to be deleted.
fn with_dry_run_query(mut req: http::Request<Vec<u8>>) -> http::Request<Vec<u8>> {
    let uri = req.uri().to_string();
    let sep = if uri.contains('?') { '&' } else { '?' };
    if let Ok(u) = format!("{uri}{sep}dryRun=All").parse() {
        *req.uri_mut() = u;
    }
    req
}

/// Classifies an error raised before any HTTP answer arrived.
pub fn classify_transport(e: &kube::Error) -> Outcome {
    let reason = match e {
        kube::Error::HyperError(_) => "HyperError",
        kube::Error::Service(_) => "ServiceError",
        _ => "ClientError",
    };
    let class = match e {
        kube::Error::HyperError(_) | kube::Error::Service(_) => OutcomeClass::Transport,
        _ => OutcomeClass::Other,
    };
    Outcome {
        class,
        code: None,
        reason: reason.into(),
        message: error_chain(e),
        retry_after: None,
        flow: None,
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(src) = cur {
        let next = src.to_string();
        if !s.contains(&next) {
            s.push_str(": ");
            s.push_str(&next);
        }
        cur = src.source();
    }
    s
}

/// Classifies an HTTP answer to a DELETE.
pub fn classify_response(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Outcome {
    let code = status.as_u16();
    // Read as the few fields podsweep uses: a 200's body (the whole deleted pod) is scanned, not
    // built into a tree. A body that is not JSON, or whose fields have other types, reads as none.
    let parsed: AnswerBody = serde_json::from_slice(body).unwrap_or_default();
    let is_status = parsed.kind.as_deref() == Some("Status");
    let field = |v: &Option<Cow<str>>| -> String {
        v.as_deref()
            .filter(|_| is_status)
            .unwrap_or_default()
            .to_owned()
    };
    let class = match code {
        200..=299 => OutcomeClass::Accepted,
        404 => OutcomeClass::AlreadyAbsent,
        409 => OutcomeClass::Replaced,
        403 => OutcomeClass::Forbidden,
        429 => OutcomeClass::Throttled,
        500..=599 => OutcomeClass::ServerError,
        _ => OutcomeClass::Other,
    };
    let mut message = field(&parsed.message);
    if message.is_empty() && !status.is_success() {
        message = String::from_utf8_lossy(&body[..body.len().min(512)])
            .trim()
            .to_owned();
    }
    let mut reason = field(&parsed.reason);
    if reason.is_empty() && !status.is_success() {
        reason = status.canonical_reason().unwrap_or_default().to_owned();
    }
    let details_retry = parsed
        .details
        .and_then(|d| d.retry_after_seconds)
        .map(Duration::from_secs);
    let retry_after = headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after)
        .or(details_retry)
        .map(|d| d.min(MAX_RETRY_AFTER));
    Outcome {
        class,
        code: Some(code),
        reason,
        message,
        retry_after,
        flow: flow_of(headers),
    }
}

/// What podsweep reads of an answer's body: a `Status`'s reason and message, and the retry hint
/// in its details. Every other field is skipped unread.
#[derive(Default, Deserialize)]
struct AnswerBody<'a> {
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    reason: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
    #[serde(default)]
    details: Option<AnswerDetails>,
}

#[derive(Deserialize)]
struct AnswerDetails {
    #[serde(rename = "retryAfterSeconds", default)]
    retry_after_seconds: Option<u64>,
}

/// The longest wait a server's `Retry-After` (header or `retryAfterSeconds`) can impose: ten
/// minutes. Larger values (or an HTTP date years ahead) are taken as ten minutes, so no answer of
/// the server can put a timer out of range or park a scope for good.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// `Retry-After`: delay-seconds, or an HTTP date (then the time left until it); not clamped.
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let when = httpdate::parse_http_date(v).ok()?;
    Some(
        when.duration_since(std::time::SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_body(code: u16, reason: &str, message: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "code": code, "reason": reason, "message": message
        }))
        .unwrap()
    }

    #[test]
    fn every_status_has_one_class() {
        let table = [
            (200, OutcomeClass::Accepted),
            (202, OutcomeClass::Accepted),
            (404, OutcomeClass::AlreadyAbsent),
            (409, OutcomeClass::Replaced),
            (403, OutcomeClass::Forbidden),
            (429, OutcomeClass::Throttled),
            (500, OutcomeClass::ServerError),
            (503, OutcomeClass::ServerError),
            (400, OutcomeClass::Other),
            (401, OutcomeClass::Other),
        ];
        for (code, class) in table {
            let st = StatusCode::from_u16(code).unwrap();
            let out = classify_response(st, &HeaderMap::new(), &status_body(code, "R", "M"));
            assert_eq!(out.class, class, "code {code}");
            assert_eq!(out.code, Some(code));
        }
    }

    #[test]
    fn details_are_kept() {
        let body = status_body(
            403,
            "Forbidden",
            "pods \"p\" is forbidden: User cannot delete",
        );
        let out = classify_response(StatusCode::FORBIDDEN, &HeaderMap::new(), &body);
        assert_eq!(out.reason, "Forbidden");
        assert!(out.message.contains("is forbidden"));
        let shown = out.to_string();
        assert!(
            shown.contains("403") && shown.contains("Forbidden") && shown.contains("cannot delete")
        );
    }

    #[test]
    fn non_json_error_body_is_kept_as_message() {
        let out = classify_response(
            StatusCode::BAD_GATEWAY,
            &HeaderMap::new(),
            b"<html>bad gateway</html>",
        );
        assert_eq!(out.class, OutcomeClass::ServerError);
        assert_eq!(out.reason, "Bad Gateway");
        assert!(out.message.contains("bad gateway"));
    }

    #[test]
    fn retry_after_header_and_details() {
        let mut h = HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, "7".parse().unwrap());
        let out = classify_response(StatusCode::TOO_MANY_REQUESTS, &h, b"{}");
        assert_eq!(out.retry_after, Some(Duration::from_secs(7)));
        let body = serde_json::to_vec(&serde_json::json!({
            "kind": "Status", "code": 429, "reason": "TooManyRequests", "message": "slow down",
            "details": {"retryAfterSeconds": 3}
        }))
        .unwrap();
        let out = classify_response(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new(), &body);
        assert_eq!(out.retry_after, Some(Duration::from_secs(3)));
    }

    #[test]
    fn http_dates() {
        assert_eq!(
            parse_retry_after("Thu, 01 Jan 1970 00:00:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("yesterday"), None);
        let later =
            httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(3600));
        let left = parse_retry_after(&later).unwrap();
        assert!(left > Duration::from_secs(3500) && left <= Duration::from_secs(3600));
    }

    /// Issue 10, item 6: a server cannot impose a wait beyond `MAX_RETRY_AFTER`.
    #[test]
    fn retry_after_is_clamped_to_ten_minutes() {
        for ra in ["99999999999", "Fri, 01 Jan 9999 00:00:00 GMT", "601"] {
            let mut h = HeaderMap::new();
            h.insert(http::header::RETRY_AFTER, ra.parse().unwrap());
            let out = classify_response(StatusCode::TOO_MANY_REQUESTS, &h, b"{}");
            assert_eq!(out.retry_after, Some(MAX_RETRY_AFTER), "{ra}");
        }
        let body = serde_json::to_vec(&serde_json::json!({
            "kind": "Status", "code": 429, "details": {"retryAfterSeconds": 18446744073709551615u64}
        }))
        .unwrap();
        let out = classify_response(StatusCode::TOO_MANY_REQUESTS, &HeaderMap::new(), &body);
        assert_eq!(out.retry_after, Some(MAX_RETRY_AFTER));
    }

    /// Issue 35 §2: the API server's `X-Kubernetes-PF-*` headers say which priority level and
    /// flow schema classified the request; a failure's text names them.
    #[test]
    fn apf_headers_name_the_priority_level() {
        let mut h = HeaderMap::new();
        h.insert(http::header::RETRY_AFTER, "1".parse().unwrap());
        h.insert(PRIORITY_LEVEL_HEADER, "pl-uid".parse().unwrap());
        h.insert(FLOW_SCHEMA_HEADER, "fs-uid".parse().unwrap());
        let body = status_body(429, "TooManyRequests", "Too many requests");
        let out = classify_response(StatusCode::TOO_MANY_REQUESTS, &h, &body);
        let flow = Flow {
            priority_level_uid: "pl-uid".into(),
            flow_schema_uid: "fs-uid".into(),
        };
        assert_eq!(out.flow, Some(flow.clone()));
        assert_eq!(out.retry_after, Some(Duration::from_secs(1)));
        assert!(
            out.to_string()
                .ends_with("; API Priority and Fairness level pl-uid (flow schema fs-uid)"),
            "{out}"
        );
        let served = classify_response(StatusCode::OK, &h, b"{}");
        assert_eq!(served.flow, Some(flow));
        assert!(!served.to_string().contains("Priority"), "{served}");
        assert_eq!(
            classify_response(StatusCode::OK, &HeaderMap::new(), b"{}").flow,
            None
        );
    }

    #[test]
    fn only_a_status_body_gives_a_reason_and_message() {
        // A 200 carries the deleted pod: nothing of it is read as a reason or message, even
        // where the pod has fields of those names.
        let pod = serde_json::to_vec(&serde_json::json!({
            "kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "uid": "u", "labels": {"kyuubi-unique-tag": "t"}},
            "status": {"phase": "Succeeded", "reason": "Completed", "message": "done",
                "conditions": [{"type": "Ready", "status": "False"}]}
        }))
        .unwrap();
        let out = classify_response(StatusCode::OK, &HeaderMap::new(), &pod);
        assert_eq!(out.class, OutcomeClass::Accepted);
        assert_eq!((out.reason.as_str(), out.message.as_str()), ("", ""));
        assert_eq!(out.retry_after, None);
        // A Status with fields of other types, or a body that is not JSON: the HTTP reason and
        // the body's text, as for any answer without a readable Status.
        for body in [
            &br#"{"kind":"Status","reason":7,"message":["m"]}"#[..],
            &b"upstream connect error"[..],
        ] {
            let out = classify_response(StatusCode::SERVICE_UNAVAILABLE, &HeaderMap::new(), body);
            assert_eq!(out.class, OutcomeClass::ServerError);
            assert_eq!(out.reason, "Service Unavailable");
            assert_eq!(out.message, String::from_utf8_lossy(body));
        }
        // An escaped message is read whole.
        let out = classify_response(
            StatusCode::FORBIDDEN,
            &HeaderMap::new(),
            br#"{"kind":"Status","reason":"Forbidden","message":"pods \"p\" is forbidden"}"#,
        );
        assert_eq!(out.message, r#"pods "p" is forbidden"#);
    }

    #[test]
    fn params_carry_the_uid() {
        let dp = delete_params("u-1", false);
        let v = serde_json::to_value(&dp).unwrap();
        assert_eq!(
            v.pointer("/preconditions/uid").and_then(|u| u.as_str()),
            Some("u-1")
        );
    }
}
