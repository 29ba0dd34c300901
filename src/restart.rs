//! Supervision of a scope's election and watch tasks, as its cleanup loop is supervised
//! (`crate::sweeper`): a task that panics is run again after a backoff, and the scope reports
//! unhealthy with the reason meanwhile.
//!
//! # Guarantees
//! * A panic is caught where the task runs ([`Restarts::guard`]); [`Restarts::failed`] logs one
//!   ERROR naming the scope, the task and the panic, counts a restart, sets the task's unhealthy
//!   bit with the reason, and returns the wait before the next run: 1 s, doubling up to 1 min
//!   while the task keeps failing.
//! * The bit is cleared (and the wait reset) once the task has run for `healthy_after`
//!   (`ha.leaderlessAlertAfter`) without failing again.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::{sleep_until, Instant};
use tracing::error;

use crate::metrics::ScopeMetrics;
use crate::pause::PauseKind;

/// First wait before a failed task runs again; it doubles up to [`RESTART_MAX`].
pub const RESTART_BASE: Duration = Duration::from_secs(1);
pub const RESTART_MAX: Duration = Duration::from_secs(60);

/// How one task of a scope is restarted and reported.
pub struct Restarts {
    /// What the task is, for logs and the reason: "election", "pod watch".
    what: &'static str,
    scope: String,
    metrics: Arc<ScopeMetrics>,
    /// The task's `UNHEALTHY_*` bit.
    bit: u64,
    healthy_after: Duration,
    delay: Duration,
    /// When the bit is cleared, after a restart.
    clear_at: Option<Instant>,
}

impl Restarts {
    pub fn new(
        what: &'static str,
        scope: String,
        metrics: Arc<ScopeMetrics>,
        bit: u64,
        healthy_after: Duration,
    ) -> Self {
        Restarts {
            what,
            scope,
            metrics,
            bit,
            healthy_after,
            delay: RESTART_BASE,
            clear_at: None,
        }
    }

    /// Runs `task` to its end; `Err` with the panic's message if it panicked. Clears the
    /// unhealthy bit once the task has run `healthy_after` since its last restart.
    pub async fn guard<F: Future>(&mut self, task: F) -> Result<F::Output, String> {
        let task = AssertUnwindSafe(task).catch_unwind();
        tokio::pin!(task);
        loop {
            tokio::select! {
                biased;
                out = &mut task => return out.map_err(|p| message(p.as_ref())),
                _ = sleep_until_some(self.clear_at) => {
                    self.clear_at = None;
                    self.delay = RESTART_BASE;
                    self.metrics.clear_unhealthy(self.bit);
                }
            }
        }
    }

    /// After a panic: one ERROR, the restart counted, the scope unhealthy with the reason.
    /// Returns how long to wait before running the task again.
    pub fn failed(&mut self, what: &str) -> Duration {
        let delay = self.delay;
        let reason = format!(
            "the {} task failed ({what}) and is restarted in {delay:?}",
            self.what
        );
        self.metrics.set_unhealthy(self.bit, &reason);
        self.metrics
            .pauses
            .open_expiring(PauseKind::Restarting, Instant::now() + delay, &reason);
        ScopeMetrics::inc(&self.metrics.restarts);
        error!(
            scope = %self.scope,
            "The {} task of scope {} failed: {what}; restarting it in {delay:?} (the scope reports \
             unhealthy meanwhile)",
            self.what, self.scope
        );
        self.delay = (self.delay * 2).min(RESTART_MAX);
        self.clear_at = Some(Instant::now() + delay + self.healthy_after);
        delay
    }
}

fn message(panic: &(dyn Any + Send)) -> String {
    crate::logging::panic_message(panic)
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(d) => sleep_until(d).await,
        None => std::future::pending().await,
    }
}
