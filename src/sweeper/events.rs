//! Kubernetes Events for the DELETEs a leader sends (`events.enabled`): one `Normal` event
//! `Deleted` in the pod's namespace for each driver pod it deleted, one `Warning` event
//! `DeleteRefused` for a DELETE the API server refused (403 and other 4xx but 404 and 409).
//!
//! # Guarantees
//! * Only the scope's leader sends DELETEs, so only it records Events.
//! * At most `events.qps` Events per second per scope (a burst of [`EVENT_BURST`]): a drain of
//!   10,000 pods cannot flood the API server; the Events past the bound are not sent and are
//!   counted (`events_dropped`). Events expire (an hour by default), so the counters stay the
//!   record.
//! * A dry run records no Event (it writes nothing).
//! * Recording never delays a DELETE: each Event is its own task, and a failed one is counted
//!   (`events_failed`, exported in `/metrics` and Kyuubi's gauges): the first failure of each
//!   cause (an HTTP status, an error kind) is a WARN per scope, the others DEBUG.

use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;
use tracing::{debug, warn};

use super::deletes::Bucket;
use super::{Sweeper, Uid};
use crate::deleter::{EventNote, Outcome, OutcomeClass};
use crate::metrics::ScopeMetrics;
use crate::tracker::Record;

/// Events a scope may send at once before `events.qps` paces them.
pub const EVENT_BURST: u32 = 10;

/// The causes of failed Events a scope has warned about.
pub(super) type Warned = Arc<Mutex<HashSet<String>>>;

pub(super) fn bucket(qps: Option<f64>) -> Option<Bucket> {
    qps.map(|q| Bucket::new(q, EVENT_BURST))
}

impl Sweeper {
    /// Records the Event an outcome calls for, if Events are on and the bound allows.
    pub(super) fn event_for(&mut self, uid: &Uid, rec: &Record, outcome: &Outcome, why: &str) {
        if self.cfg.tuning.dry_run {
            return;
        }
        let (warning, reason) = match outcome.class {
            OutcomeClass::Accepted => (false, "Deleted"),
            OutcomeClass::Forbidden | OutcomeClass::Other => (true, "DeleteRefused"),
            _ => return,
        };
        let (Some(bucket), Some(deleter)) = (self.event_bucket.as_mut(), self.deleter.clone())
        else {
            return;
        };
        if bucket.take(Instant::now()).is_err() {
            self.metrics.events_dropped.fetch_add(1, Relaxed);
            return;
        }
        let name = rec.name();
        let note = if warning {
            format!("podsweep could not delete the driver pod ({why}): {outcome}")
        } else {
            format!(
                "podsweep deleted the terminated driver pod ({}, kyuubi-unique-tag={}): {why}",
                rec.state.as_str(),
                rec.tag
            )
        };
        let ev = EventNote {
            pod: name.clone(),
            uid: uid.to_string(),
            warning,
            reason,
            note,
        };
        let metrics = self.metrics.clone();
        let scope = self.scope.clone();
        let warned = self.events_warned.clone();
        tokio::spawn(async move {
            match deleter.record(ev).await {
                Ok(()) => ScopeMetrics::inc(&metrics.events_sent),
                Err(e) => {
                    ScopeMetrics::inc(&metrics.events_failed);
                    let cause = cause_of(&e);
                    let first = {
                        let mut w = warned.lock().unwrap_or_else(|p| p.into_inner());
                        w.len() < WARNED_CAUSES && w.insert(cause.clone())
                    };
                    if first {
                        warn!(
                            scope = %scope,
                            "Kubernetes Events about the driver pods of scope {scope} are not \
                             recorded ({cause}): {e}. podsweep cleans on without them and counts \
                             them (events_failed); to record them, grant `create` and `patch` on \
                             events (events.k8s.io) in the namespace"
                        );
                    } else {
                        debug!(scope = %scope, pod = %name, "Event about pod {name} not recorded: {e}");
                    }
                }
            }
        });
    }
}

/// The causes of failed Events a scope warns about, at most this many (then only DEBUG).
const WARNED_CAUSES: usize = 16;

/// The cause of a failed Event, for its one WARN: the HTTP status the API server answered
/// (`HTTP 403`), else the kind of error (the text before its first `:`).
fn cause_of(e: &str) -> String {
    if let Some(at) = e.find("code: ") {
        let code: String = e[at + 6..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if !code.is_empty() {
            return format!("HTTP {code}");
        }
    }
    e.split(':')
        .next()
        .unwrap_or(e)
        .trim()
        .chars()
        .take(60)
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn causes() {
        let forbidden = "ApiError: events.events.k8s.io is forbidden: User \"x\" cannot create \
                         resource: Forbidden (ErrorResponse { status: \"Failure\", code: 403 })";
        assert_eq!(super::cause_of(forbidden), "HTTP 403");
        assert_eq!(
            super::cause_of("HyperError: error trying to connect: refused"),
            "HyperError"
        );
    }
}
