//! Waiting on a scope's status (`Engine::status_json`): the observable end of the code path a
//! test asserts about, instead of a fixed sleep before asserting that something did not happen.

#![allow(dead_code)]

use std::time::Duration;

use podsweep::engine::Engine;
use podsweep::scope::Scope;
use serde_json::Value;

/// The status of `scope` on `engine`.
pub fn of(engine: &Engine, scope: &Scope) -> Value {
    serde_json::from_str(&engine.status_json(scope)).expect("status JSON")
}

/// Polls the status of `scope` every 20 ms until `pred` holds, and returns it; panics naming
/// `what`, with the last status, after `within`.
pub async fn wait_status(
    engine: &Engine,
    scope: &Scope,
    what: &str,
    within: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let t0 = tokio::time::Instant::now();
    loop {
        let st = of(engine, scope);
        if pred(&st) {
            return st;
        }
        assert!(t0.elapsed() < within, "{what}: not within {within:?}: {st}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A figure of a status (0 when absent).
pub fn n(st: &Value, key: &str) -> u64 {
    st[key].as_u64().unwrap_or(0)
}

/// The scope's task has nothing left to act on: no record (due, scheduled or in backoff), no
/// DELETE in flight, no command waiting in its queue. Such a task sends no DELETE until a new
/// event (or a new leadership term's list) arms a record.
pub fn idle(st: &Value) -> bool {
    n(st, "tracked") == 0 && n(st, "inflight") == 0 && n(st, "queued") == 0
}
