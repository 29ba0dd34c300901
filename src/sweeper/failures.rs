//! Failed DELETEs, summarised: one line per outcome class per scope per interval, quoting the
//! first pod's answer, instead of one line per pod per retry.
//!
//! 403s give an ERROR that names the missing RBAC grant; other refusals (401, 400, 422, ...) an
//! ERROR; 429, 5xx and transport failures a WARN. How refusals hold the pace back: `refusals`. The first summary comes a few seconds after the
//! first failure (so it counts a whole burst), the next ones every
//! `failures.summaryInterval` while failures go on.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{error, warn};

use super::Uid;
use crate::config::Tuning;
use crate::deleter::{Outcome, OutcomeClass};
use crate::scope::Scope;

/// Delay of the first summary after the first failure.
const FIRST_SUMMARY: Duration = Duration::from_secs(5);

/// The failures of one class within the current interval.
struct ClassLog {
    /// Pods that failed in the interval and are still tracked.
    pods: HashSet<Uid>,
    /// Pods that failed in the interval and are gone since (a later attempt deleted them, or
    /// someone else did): a burst that resolved within the interval is still reported.
    gone: usize,
    attempts: u64,
    /// The first failure of the interval: pod name and answer.
    first: String,
}

#[derive(Default)]
pub(super) struct Failures {
    classes: BTreeMap<usize, (OutcomeClass, ClassLog)>,
    next_at: Option<Instant>,
}

impl Failures {
    pub(super) fn next_at(&self) -> Option<Instant> {
        self.next_at
    }

    pub(super) fn record(&mut self, uid: &Uid, pod: &str, outcome: &Outcome) {
        let (_, log) = self
            .classes
            .entry(outcome.class.index())
            .or_insert_with(|| {
                (
                    outcome.class,
                    ClassLog {
                        pods: HashSet::new(),
                        gone: 0,
                        attempts: 0,
                        first: format!("pod {pod}: {outcome}"),
                    },
                )
            });
        log.pods.insert(uid.clone());
        log.attempts += 1;
        if self.next_at.is_none() {
            self.next_at = Some(Instant::now() + FIRST_SUMMARY);
        }
    }

    /// The pod is gone: it is no longer pending, but its failures are still reported.
    pub(super) fn forget(&mut self, uid: &Uid) {
        for (_, log) in self.classes.values_mut() {
            if log.pods.remove(uid) {
                log.gone += 1;
            }
        }
    }

    /// Logs one line per class that failed in the interval, then starts the next interval.
    pub(super) fn summarise(&mut self, scope: &Scope, tuning: &Tuning) {
        let classes = std::mem::take(&mut self.classes);
        let mut any = false;
        for (class, log) in classes.into_values() {
            let pending = log.pods.len();
            let n = pending + log.gone;
            if n == 0 {
                continue;
            }
            // Pods still failing keep the next summary coming; a resolved burst is told once.
            any |= pending > 0;
            let (attempts, first) = (log.attempts, &log.first);
            match class {
                OutcomeClass::Forbidden => error!(
                    scope = %scope,
                    "DELETE is forbidden for {n} pod(s) in scope {scope} ({pending} still \
                     pending): {first}. Pending pods are kept; while DELETEs are refused one at \
                     a time probes every ~{:?}; grant the Kyuubi service account `delete` on \
                     pods in this namespace",
                    tuning.forbidden_retry
                ),
                OutcomeClass::Other => error!(
                    scope = %scope,
                    "DELETE was refused for {n} pod(s) in scope {scope} ({attempts} attempts, \
                     {pending} still pending), first {first}. Pending pods are kept and retried \
                     with backoff (at most {:?} apart), one DELETE at a time while they are \
                     refused",
                    tuning.retry_max_wait
                ),
                _ => warn!(
                    scope = %scope,
                    "DELETE did not complete for {n} pod(s) in scope {scope} ({attempts} \
                     attempts, {}, {pending} still pending), first {first}. Pending pods are \
                     retried with backoff",
                    class.as_str()
                ),
            }
        }
        self.next_at = any.then(|| Instant::now() + tuning.failures_summary);
    }
}
