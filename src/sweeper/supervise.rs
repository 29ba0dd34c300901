//! The life of a scope task: start, restart after a failure, release when idle, shut down.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::debug;

use super::deletes::{Bucket, Gate};
use super::failures::Failures;
use super::inbox::{Inbox, PodQueue};
use super::{Command, DeleterSource, Exit, Sweeper, SweeperConfig};
use crate::clock::Clock;
use crate::election::{ElectionHandle, Leadership, Status};
use crate::metrics::{ScopeMetrics, UNHEALTHY_RESTARTED};
use crate::restart::Restarts;
use crate::scope::Scope;
use crate::tracker::Tracker;

/// Removes an idle scope from the engine's table: called with the task's receiver, it takes the
/// table's write lock (so no `observe` is sending meanwhile) and succeeds only if no command is
/// waiting. True when the scope may end.
pub type Release = Box<dyn Fn(&mpsc::UnboundedReceiver<Command>) -> bool + Send + Sync>;

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
    let pods = sweeper.pods.clone();
    let task = tokio::spawn(supervise(sweeper, rx));
    ScopeHandle {
        id,
        scope,
        tx: Inbox::new(tx, pods, metrics.clone()),
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
        pods: Arc::new(PodQueue::default()),
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
        shared: Default::default(),
        refusals: Default::default(),
        handover: Default::default(),
        barriers: 0,
        dispatching: false,
        events_warned: Default::default(),
    }
}

/// Runs the sweeper; if it fails (a panic), logs one ERROR, reports the scope unhealthy and runs
/// it again with the same records, election and queue of events, after the backoff of every
/// scope task ([`Restarts`]: 1 s doubling up to a minute, back to 1 s once it has run
/// `health.alertAfter` without failing).
async fn supervise(mut sweeper: Sweeper, mut rx: mpsc::UnboundedReceiver<Command>) {
    let mut restarts = Restarts::new(
        "cleanup",
        sweeper.scope.to_string(),
        sweeper.metrics.clone(),
        UNHEALTHY_RESTARTED,
        sweeper.cfg.leaderless_alert,
    );
    loop {
        match restarts.guard(sweeper.run(&mut rx)).await {
            Ok(Exit::Shutdown) | Ok(Exit::Released) => break,
            Err(what) => {
                let delay = restarts.failed(&format!(
                    "{what}; {} tracked pods are kept",
                    sweeper.tracker.len()
                ));
                tokio::time::sleep(delay).await;
                sweeper.recover();
            }
        }
    }
    sweeper.shutdown().await;
}

/// How long a closing scope waits for the answers of the DELETEs it already sent before it
/// drops them and gives up leadership.
pub(super) const SHUTDOWN_ANSWERS_WAIT: Duration = Duration::from_secs(2);

impl Sweeper {
    async fn shutdown(mut self) {
        // Nothing new leaves (`dispatch` sends nothing without a deleter), but the DELETEs already
        // sent are answered, reported and recorded before leadership goes: dropping one loses its
        // answer, not the request, which the API server may still carry out (answered 504 to a
        // client that left) while the successor, not knowing, sends the pod again. Each DELETE
        // stays within the lease (`within_lease`), so a lost leadership ends them anyway.
        self.deleter = None;
        let wait = tokio::time::sleep(SHUTDOWN_ANSWERS_WAIT);
        tokio::pin!(wait);
        while !self.inflight.is_empty() {
            tokio::select! {
                done = self.inflight.join_next_with_id() => match done {
                    Some(done) => self.on_done(done),
                    None => break,
                },
                _ = &mut wait => break,
            }
        }
        self.inflight.abort_all();
        while self.inflight.join_next().await.is_some() {}
        self.metrics.leader.store(0, Relaxed);
        self.election.close().await;
        debug!(scope = %self.scope, "Scope task stopped; {} pods were tracked", self.tracker.len());
    }
}
