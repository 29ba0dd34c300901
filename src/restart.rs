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
//!   (`health.alertAfter`) without failing again.
//! * Every task of a scope is restarted this way (cleanup loop, election, pod watch), with the
//!   one [`Backoff`] type of the crate.

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::time::{sleep_until, Instant};
use tracing::error;

use crate::backoff::Backoff;
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
    backoff: Backoff,
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
            backoff: Backoff::exact(RESTART_BASE, RESTART_MAX),
            clear_at: None,
        }
    }

    /// The metrics of the scope the task belongs to.
    pub fn metrics(&self) -> &Arc<ScopeMetrics> {
        &self.metrics
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
                    self.backoff.reset();
                    self.metrics.clear_unhealthy(self.bit);
                }
            }
        }
    }

    /// After a panic: one ERROR, the restart counted, the scope unhealthy with the reason.
    /// Returns how long to wait before running the task again.
    pub fn failed(&mut self, what: &str) -> Duration {
        let delay = self.backoff.next_delay();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::UNHEALTHY_RESTARTED;

    /// Issue 25, item 5: the wait before a failed task runs again doubles while it keeps failing
    /// and goes back to the base once it has run `healthy_after` without failing (before, the
    /// cleanup task's own loop doubled it up to a minute and never reset it).
    #[tokio::test(start_paused = true)]
    async fn the_restart_wait_doubles_and_resets_after_a_healthy_run() {
        let metrics = Arc::new(ScopeMetrics::default());
        let healthy_after = Duration::from_secs(120);
        let mut r = Restarts::new(
            "cleanup",
            "s".into(),
            metrics.clone(),
            UNHEALTHY_RESTARTED,
            healthy_after,
        );
        let short = || async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            panic!("deliberate failure");
        };
        let mut waits = Vec::new();
        for _ in 0..3 {
            let out: Result<(), String> = r.guard(short()).await;
            assert!(out.is_err());
            let d = r.failed("deliberate failure");
            waits.push(d.as_secs());
            tokio::time::sleep(d).await;
        }
        assert_eq!(waits, [1, 2, 4]);
        assert!(metrics.is_unhealthy(UNHEALTHY_RESTARTED));
        // It now runs well for longer than healthy_after, then fails again: the base wait.
        let long = || async {
            tokio::time::sleep(Duration::from_secs(300)).await;
            panic!("a failure much later");
        };
        let out: Result<(), String> = r.guard(long()).await;
        assert!(out.is_err());
        assert!(
            !metrics.is_unhealthy(UNHEALTHY_RESTARTED),
            "healthy again after running {healthy_after:?}"
        );
        assert_eq!(r.failed("a failure much later"), Duration::from_secs(1));
    }
}
