//! The daemon's HTTP endpoints: `GET /healthz`, `GET /metrics`, `GET /status`.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::exposition;
use crate::engine::Engine;

/// Serves until `shutdown` fires (connections already open finish their request).
pub async fn serve(listener: TcpListener, engine: Arc<Engine>, shutdown: CancellationToken) {
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
        let engine = engine.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let engine = engine.clone();
                async move { Ok::<_, Infallible>(answer(&engine, &req)) }
            });
            if let Err(e) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc)
                .await
            {
                debug!("HTTP connection ended: {e}");
            }
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
    let status = engine.status_all_json();
    let scopes = || -> Vec<serde_json::Value> {
        serde_json::from_str::<serde_json::Value>(&status)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .unwrap_or_default()
    };
    match req.uri().path() {
        "/healthz" => {
            let reasons = exposition::health_reasons(&scopes());
            if reasons.is_empty() {
                reply(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".into())
            } else {
                let body = serde_json::json!({ "healthy": false, "reasons": reasons });
                reply(StatusCode::SERVICE_UNAVAILABLE, JSON, body.to_string())
            }
        }
        "/metrics" => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            exposition::prometheus(&scopes()),
        ),
        "/status" => reply(StatusCode::OK, JSON, status),
        _ => reply(
            StatusCode::NOT_FOUND,
            JSON,
            r#"{"error":"not found: GET /healthz, /metrics or /status"}"#.into(),
        ),
    }
}
