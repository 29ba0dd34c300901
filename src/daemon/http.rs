//! The daemon's HTTP endpoints: `GET /healthz`, `GET /livez`, `GET /metrics` (Prometheus text,
//! or OpenMetrics when the `Accept` header asks for it), `GET /status`.
//!
//! `/livez` (the liveness probe) answers `ok` whenever the process serves HTTP, whatever the
//! scopes' health: restarting a daemon cannot fix an HA backend or API server outage.
//! `/healthz` (the readiness probe) answers 200 only while every scope is healthy.
//!
//! # Guarantees
//! * Probes are always answered: a connection whose request line is `GET /livez` or `GET /healthz`
//!   is served from slots of its own ([`MAX_PROBES`]), which no other connection takes, however
//!   many arrive. Each probe connection answers one request and closes (as the kubelet's do).
//! * At most [`MAX_CONNECTIONS`] other connections are open at once, and a new one is always
//!   served: past the cap the oldest open one is closed to make room. A slow or idle client can
//!   neither take the descriptors the election and Kubernetes connections need nor keep a probe
//!   or a scrape from being answered at once.
//! * A new connection is told apart by its first bytes, read without consuming them; until they
//!   come it waits among at most [`MAX_PENDING`] such connections (the oldest closed past the
//!   cap), for at most [`HEADER_READ_TIMEOUT`].
//! * A client has [`HEADER_READ_TIMEOUT`] to send a request's headers, and a connection lives at
//!   most [`CONNECTION_LIFETIME`], however it is used; then it is closed.
//! * A request's buffered headers and body are bounded ([`MAX_BUF`]).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::exposition;
use crate::engine::Engine;

/// Connections other than probes served at once.
pub const MAX_CONNECTIONS: usize = 32;
/// Probe connections (`/livez`, `/healthz`) served at once, apart from the others.
pub const MAX_PROBES: usize = 8;
/// New connections whose first bytes have not come yet, at once.
pub const MAX_PENDING: usize = 64;
/// Time allowed to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a connection is kept, whatever it does.
pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);
/// Read buffer of a connection (hyper's minimum).
const MAX_BUF: usize = 8192;

/// The request lines of the probes, as a connection's first bytes.
const PROBES: [&[u8]; 4] = [
    b"GET /livez ",
    b"GET /livez?",
    b"GET /healthz ",
    b"GET /healthz?",
];

/// Which slots a connection takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pool {
    /// Its first bytes have not come yet.
    Pending,
    /// Its request line is a probe's.
    Probe,
    Other,
}

impl Pool {
    fn cap(self) -> usize {
        match self {
            Pool::Pending => MAX_PENDING,
            Pool::Probe => MAX_PROBES,
            Pool::Other => MAX_CONNECTIONS,
        }
    }
}

/// The open connections, oldest first: each with its id, its pool and what closes it.
#[derive(Default)]
struct Open {
    next: u64,
    conns: VecDeque<(u64, Pool, CancellationToken)>,
}

impl Open {
    /// Makes room in `pool` for a connection (closing the pool's oldest past its cap) and
    /// registers it there; a connection that was pending (`id`) moves.
    fn admit(open: &Mutex<Open>, pool: Pool, id: Option<u64>) -> (u64, CancellationToken) {
        let mut o = open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = id {
            o.conns.retain(|(i, _, _)| *i != id);
        }
        while o.conns.iter().filter(|(_, p, _)| *p == pool).count() >= pool.cap() {
            if let Some(at) = o.conns.iter().position(|(_, p, _)| *p == pool) {
                if let Some((_, _, oldest)) = o.conns.remove(at) {
                    oldest.cancel();
                }
            }
        }
        let id = id.unwrap_or_else(|| {
            o.next += 1;
            o.next
        });
        let token = CancellationToken::new();
        o.conns.push_back((id, pool, token.clone()));
        (id, token)
    }

    fn remove(open: &Mutex<Open>, id: u64) {
        let mut o = open.lock().unwrap_or_else(|p| p.into_inner());
        o.conns.retain(|(i, _, _)| *i != id);
    }
}

/// Which pool a new connection belongs to, from its first bytes (read, not consumed); `None`
/// when it closes, or sends nothing within [`HEADER_READ_TIMEOUT`].
async fn classify(stream: &TcpStream) -> Option<Pool> {
    let until = tokio::time::Instant::now() + HEADER_READ_TIMEOUT;
    let mut buf = [0u8; 16];
    loop {
        let n = tokio::time::timeout_at(until, stream.peek(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        let head = &buf[..n];
        if PROBES.iter().any(|p| head.starts_with(p)) {
            return Some(Pool::Probe);
        }
        if !PROBES.iter().any(|p| p.starts_with(head)) {
            return Some(Pool::Other);
        }
        // A probe's request line still arriving: look again shortly.
        tokio::time::sleep(Duration::from_millis(2)).await;
        if tokio::time::Instant::now() >= until {
            return None;
        }
    }
}

/// Serves until `shutdown` fires (connections already open finish their request).
pub async fn serve(listener: TcpListener, engine: Arc<Engine>, shutdown: CancellationToken) {
    let open = Arc::new(Mutex::new(Open::default()));
    loop {
        let stream = tokio::select! {
            _ = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    debug!("accept failed: {e}");
                    // e.g. out of file descriptors: do not spin.
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let (id, closed) = Open::admit(&open, Pool::Pending, None);
        let (engine, open) = (engine.clone(), open.clone());
        tokio::spawn(async move {
            let pool = tokio::select! {
                p = classify(&stream) => p,
                _ = closed.cancelled() => None,
            };
            let Some(pool) = pool else {
                Open::remove(&open, id);
                return;
            };
            let (id, closed) = Open::admit(&open, pool, Some(id));
            let svc = hyper::service::service_fn(move |req| {
                let engine = engine.clone();
                async move { Ok::<_, Infallible>(answer(&engine, &req)) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(MAX_BUF)
                // A probe's slot serves one probe.
                .keep_alive(pool != Pool::Probe)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::select! {
                r = tokio::time::timeout(CONNECTION_LIFETIME, conn) => match r {
                    Ok(Err(e)) => debug!("HTTP connection ended: {e}"),
                    Err(_) => debug!("HTTP connection closed after {CONNECTION_LIFETIME:?}"),
                    Ok(Ok(())) => {}
                },
                _ = closed.cancelled() => debug!("HTTP connection closed to make room for a new one"),
            }
            Open::remove(&open, id);
        });
    }
}

fn reply(code: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    r
}

/// The answer to one request.
pub fn answer(engine: &Engine, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    const JSON: &str = "application/json";
    if req.method() != Method::GET {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            JSON,
            r#"{"error":"only GET is served"}"#.into(),
        );
    }
    if req.uri().path() == "/livez" {
        return reply(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into());
    }
    let status = engine.status_all_json();
    // The scopes this daemon serves, then the configured ones the allow lists refused.
    let scopes = || -> Vec<serde_json::Value> {
        let mut all = serde_json::from_str::<serde_json::Value>(&status)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default();
        all.extend(engine.refused_configured());
        all
    };
    match req.uri().path() {
        "/healthz" => {
            let scopes = scopes();
            let reasons = exposition::health_reasons(&scopes);
            let pauses = exposition::pause_lines(&scopes);
            if reasons.is_empty() {
                // Healthy; the pauses that are normal (a short Retry-After...) follow, one a line.
                let mut body = "ok\n".to_owned();
                for p in pauses {
                    body.push_str(&p);
                    body.push('\n');
                }
                reply(StatusCode::OK, "text/plain; charset=utf-8", body)
            } else {
                let body =
                    serde_json::json!({ "healthy": false, "reasons": reasons, "pauses": pauses });
                reply(StatusCode::SERVICE_UNAVAILABLE, JSON, body.to_string())
            }
        }
        "/metrics" => {
            // OpenMetrics when the scraper asks for it (Prometheus does), else the 0.0.4 text.
            let format = exposition::Format::from_accept(
                req.headers()
                    .get(header::ACCEPT)
                    .and_then(|a| a.to_str().ok()),
            );
            reply(
                StatusCode::OK,
                format.content_type(),
                exposition::metrics(&scopes(), format),
            )
        }
        "/status" => reply(
            StatusCode::OK,
            JSON,
            serde_json::Value::Array(scopes()).to_string(),
        ),
        _ => reply(
            StatusCode::NOT_FOUND,
            JSON,
            r#"{"error":"not found: GET /healthz, /livez, /metrics or /status"}"#.into(),
        ),
    }
}
