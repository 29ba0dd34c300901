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
//!   (`events_failed`) and logged at DEBUG.

use std::sync::atomic::Ordering::Relaxed;

use tokio::time::Instant;
use tracing::debug;

use super::deletes::Bucket;
use super::{Sweeper, Uid};
use crate::deleter::{EventNote, Outcome, OutcomeClass};
use crate::metrics::ScopeMetrics;
use crate::tracker::Record;

/// Events a scope may send at once before `events.qps` paces them.
pub const EVENT_BURST: u32 = 10;

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
        tokio::spawn(async move {
            match deleter.record(ev).await {
                Ok(()) => ScopeMetrics::inc(&metrics.events_sent),
                Err(e) => {
                    ScopeMetrics::inc(&metrics.events_failed);
                    debug!(scope = %scope, pod = %name, "Event about pod {name} not recorded: {e}");
                }
            }
        });
    }
}
