//! The life of a scope task: start, restart after a failure, release when idle, shut down.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, error};

use super::deletes::{Bucket, Gate};
use super::failures::Failures;
use super::{Command, DeleterSource, Exit, Sweeper, SweeperConfig};
use crate::clock::Clock;
use crate::election::{ElectionHandle, Leadership, Status};
use crate::metrics::{ScopeMetrics, UNHEALTHY_RESTARTED};
use crate::pause::PauseKind;
use crate::scope::Scope;
use crate::tracker::Tracker;

/// Removes an idle scope from the engine's table: called with the task's receiver, it takes the
/// table's write lock (so no `observe` is sending meanwhile) and succeeds only if no command is
/// waiting. True when the scope may end.
pub type Release = Box<dyn Fn(&mpsc::UnboundedReceiver<Command>) -> bool + Send + Sync>;

/// The sending side of a scope task's queue of commands, which counts what it holds.
///
/// # Caveats
/// The queue has no bound: a dropped event could be the one that disarms a pod running again,
/// so no event is ever cut. It grows only while the task does not take commands (the wait
/// before a failed task runs again, at most a minute; a batch of work), and its depth is
/// reported: `queued` (now) and `queued_max` (the highest since the scope started) in the
/// scope's status, `podsweep_queued_commands` in the daemon's metrics.
#[derive(Clone)]
pub struct Inbox {
    tx: mpsc::UnboundedSender<Command>,
    metrics: Arc<ScopeMetrics>,
}

impl Inbox {
    /// Queues a command; gives it back if the task has ended.
    pub fn send(&self, cmd: Command) -> Result<(), Command> {
        // Counted before it is queued, so the task's count down never goes below zero.
        let depth = self.metrics.queued.fetch_add(1, Relaxed) + 1;
        self.metrics.queued_max.fetch_max(depth, Relaxed);
        self.tx.send(cmd).map_err(|e| {
            self.metrics.queued.fetch_sub(1, Relaxed);
            e.0
        })
    }

    /// Whether the task has ended.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// The engine's side of a running scope task.
pub struct ScopeHandle {
    /// Tells this handle from a later one of the same scope.
    pub id: u64,
    /// The scope the task serves (whose Kubernetes client it uses).
    pub scope: Scope,
    pub tx: Inbox,
    pub metrics: Arc<ScopeMetrics>,
    pub status: tokio::sync::watch::Receiver<Status>,
    pub task: tokio::task::JoinHandle<()>,
}

/// First wait before a failed scope task is restarted; it doubles up to [`RESTART_MAX`].
const RESTART_BASE: Duration = Duration::from_secs(1);
const RESTART_MAX: Duration = Duration::from_secs(60);

/// Starts the task of one scope on the current runtime.
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    scope: Scope,
    id: u64,
    cfg: SweeperConfig,
    clock: Clock,
    election: ElectionHandle,
    source: DeleterSource,
    release: Release,
    metrics: Arc<ScopeMetrics>,
) -> ScopeHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let status = election.watch();
    let sweeper = new_sweeper(
        scope.clone(),
        cfg,
        clock,
        election,
        source,
        release,
        metrics,
    );
    let metrics = sweeper.metrics.clone();
    let task = tokio::spawn(supervise(sweeper, rx));
    ScopeHandle {
        id,
        scope,
        tx: Inbox {
            tx,
            metrics: metrics.clone(),
        },
        metrics,
        status,
        task,
    }
}

/// A sweeper with nothing tracked and no Kubernetes client yet (built on its first run).
pub(super) fn new_sweeper(
    scope: Scope,
    cfg: SweeperConfig,
    clock: Clock,
    election: ElectionHandle,
    source: DeleterSource,
    release: Release,
    metrics: Arc<ScopeMetrics>,
) -> Sweeper {
    let (cfg_events, cfg_adaptive, cfg_ceiling) = (
        cfg.events_qps,
        cfg.tuning.adaptive,
        cfg.tuning.max_in_flight,
    );
    let mut tracker = Tracker::new(cfg.tombstone_ttl);
    if cfg.retention.max_terminated > 0 {
        tracker.enable_cap();
    }
    Sweeper {
        tracker,
        bucket: Bucket::new(cfg.tuning.qps, cfg.tuning.burst),
        gate: Arc::new(Gate::default()),
        failures: Failures::default(),
        finishing: HashMap::new(),
        scope,
        cfg,
        clock,
        election,
        source,
        deleter: None,
        deleter_error: None,
        build_at: Some(Instant::now()),
        due: VecDeque::new(),
        inflight: JoinSet::new(),
        inflight_uid: HashMap::new(),
        inflight_abort: HashMap::new(),
        last_leadership: Leadership::Following,
        poke_at: None,
        leaderless_alert_at: None,
        leading_since: None,
        work_since: None,
        last_progress: Instant::now(),
        last_failure: None,
        idle_at: None,
        restart_clear_at: None,
        release,
        metrics,
        linger: 0,
        commands_taken: 0,
        ramp: None,
        last_retry: String::new(),
        backoff_until: None,
        warn_bound: Default::default(),
        event_bucket: super::events::bucket(cfg_events),
        pace: super::adaptive::Pace::new(cfg_adaptive, cfg_ceiling),
    }
}

/// Runs the sweeper; if it fails (a panic), logs one ERROR, reports the scope unhealthy and runs
/// it again with the same records, election and queue of events.
async fn supervise(mut sweeper: Sweeper, mut rx: mpsc::UnboundedReceiver<Command>) {
    let mut delay = RESTART_BASE;
    loop {
        match AssertUnwindSafe(sweeper.run(&mut rx)).catch_unwind().await {
            Ok(Exit::Shutdown) | Ok(Exit::Released) => break,
            Err(panic) => {
                let what = crate::logging::panic_message(panic.as_ref());
                let reason = format!("the cleanup task failed ({what}) and was restarted");
                sweeper.metrics.set_unhealthy(UNHEALTHY_RESTARTED, &reason);
                sweeper.metrics.pauses.open_expiring(
                    PauseKind::Restarting,
                    Instant::now() + delay,
                    &reason,
                );
                ScopeMetrics::inc(&sweeper.metrics.restarts);
                error!(
                    scope = %sweeper.scope,
                    "Cleanup task of scope {} failed: {what}; restarting it in {delay:?} with its \
                     {} tracked pods (the scope reports unhealthy meanwhile)",
                    sweeper.scope, sweeper.tracker.len()
                );
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(RESTART_MAX);
                sweeper.recover();
                // Healthy again once it has run this long without failing.
                sweeper.restart_clear_at = Some(Instant::now() + sweeper.cfg.leaderless_alert);
            }
        }
    }
    sweeper.shutdown().await;
}

impl Sweeper {
    async fn shutdown(mut self) {
        self.inflight.abort_all();
        while self.inflight.join_next().await.is_some() {}
        self.metrics.leader.store(0, Relaxed);
        self.election.close().await;
        debug!(scope = %self.scope, "Scope task stopped; {} pods were tracked", self.tracker.len());
    }
}
