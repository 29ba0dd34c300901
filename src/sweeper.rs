//! One task per scope: tracks terminated pods, arms one timer per pod, and, while this server
//! leads the scope, sends the DELETEs that are due.
//!
//! # Guarantees
//! * A DELETE is dispatched only for a tracked record in stage `Due`, while the election says this
//!   server may act; the dispatched task checks again right before sending, so a lease that ran out
//!   in between (e.g. a frozen process waking up) stops it.
//! * Losing leadership (Following, NoQuorum) aborts every DELETE in flight at once and puts the
//!   records back to `Due`; nothing is dropped. `Paused` stops new DELETEs and lets those already
//!   sent finish.
//! * On gaining leadership every record already due is dispatched: the reconcile works from memory
//!   and makes no LIST call.
//! * Failed DELETEs (403, 429, 5xx, transport, other) are retried with capped exponential backoff,
//!   honouring `Retry-After`, until the pod is gone or leadership ends. A pod is never dropped.
//!
//! # Caveats
//! * An aborted DELETE may already have reached the API server; the next leader's DELETE then ends
//!   in 404 or 409 (already absent / replaced), which counts as done.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, Id, JoinSet};
use tokio::time::{sleep_until, Instant};
use tokio_util::time::{delay_queue, DelayQueue};
use tracing::{debug, error, info, warn};

use crate::clock::Clock;
use crate::config::{CleanupKind, Tuning};
use crate::deleter::{Outcome, OutcomeClass, PodDeleter};
use crate::election::{ElectionHandle, Leadership, Status};
use crate::metrics::ScopeMetrics;
use crate::model::Observation;
use crate::schedule;
use crate::scope::Scope;
use crate::tracker::{Stage, Tracker, Verdict};

/// Builds the deleter of a scope (a kube client for it); retried until it succeeds.
pub type DeleterSource =
    Arc<dyn Fn(Scope) -> BoxFuture<'static, Result<Arc<dyn PodDeleter>, String>> + Send + Sync>;

/// How a sweeper behaves.
#[derive(Clone, Debug)]
pub struct SweeperConfig {
    pub kind: CleanupKind,
    pub retain: Duration,
    /// Pacing, in-flight cap, dry run, retry waits.
    pub tuning: Tuning,
    /// How long a cleaned UID is remembered.
    pub tombstone_ttl: Duration,
    /// Wait between attempts to build the scope's Kubernetes client.
    pub client_retry: Duration,
    /// A scope without a reachable leader for this long is reported unhealthy.
    pub leaderless_alert: Duration,
    /// How often the age of the oldest overdue pod is measured.
    pub overdue_probe: Duration,
}

impl SweeperConfig {
    pub fn new(kind: CleanupKind, retain: Duration) -> Self {
        SweeperConfig {
            kind,
            retain,
            tuning: Tuning::default(),
            tombstone_ttl: retain.max(Duration::from_secs(600)) + Duration::from_secs(600),
            client_retry: Duration::from_secs(30),
            leaderless_alert: Duration::from_secs(120),
            overdue_probe: Duration::from_secs(5),
        }
    }
}

/// A token bucket: `qps` tokens a second, at most `burst` saved up.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    last: Instant,
    qps: f64,
    burst: f64,
}

impl Bucket {
    fn new(qps: f64, burst: u32) -> Self {
        Bucket {
            tokens: f64::from(burst),
            last: Instant::now(),
            qps,
            burst: f64::from(burst),
        }
    }

    /// Takes a token, or says how long until one is there.
    fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let gained = now.duration_since(self.last).as_secs_f64() * self.qps;
        self.tokens = (self.tokens + gained).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.qps))
        }
    }
}

/// Messages to a scope task.
#[derive(Debug)]
pub enum Command {
    Observe(Box<Observation>),
    Shutdown,
}

/// The engine's side of a running scope task.
pub struct ScopeHandle {
    pub tx: mpsc::UnboundedSender<Command>,
    pub metrics: Arc<ScopeMetrics>,
    pub status: tokio::sync::watch::Receiver<Status>,
    pub task: tokio::task::JoinHandle<()>,
}

/// Starts the task of one scope on the current runtime.
pub fn spawn(
    scope: Scope,
    cfg: SweeperConfig,
    clock: Clock,
    election: ElectionHandle,
    source: DeleterSource,
) -> ScopeHandle {
    let (tx, rx) = mpsc::unbounded_channel();
    let metrics = Arc::new(ScopeMetrics::default());
    let status = election.watch();
    let sweeper = Sweeper {
        tracker: Tracker::new(cfg.tombstone_ttl),
        bucket: Bucket::new(cfg.tuning.qps, cfg.tuning.burst),
        finishing: HashMap::new(),
        forbidden: HashMap::new(),
        forbidden_summary_at: None,
        scope,
        cfg,
        clock,
        election,
        source,
        deleter: None,
        queue: DelayQueue::new(),
        keys: HashMap::new(),
        due: VecDeque::new(),
        inflight: JoinSet::new(),
        inflight_uid: HashMap::new(),
        inflight_abort: HashMap::new(),
        poke_at: None,
        leaderless_alert_at: None,
        metrics: metrics.clone(),
    };
    let task = tokio::spawn(sweeper.run(rx));
    ScopeHandle {
        tx,
        metrics,
        status,
        task,
    }
}

type Uid = Arc<str>;

/// Delay of the first summary of forbidden pods after the first 403.
const FIRST_FORBIDDEN_SUMMARY: Duration = Duration::from_secs(5);

struct Sweeper {
    scope: Scope,
    cfg: SweeperConfig,
    clock: Clock,
    election: ElectionHandle,
    source: DeleterSource,
    deleter: Option<Arc<dyn PodDeleter>>,
    tracker: Tracker,
    queue: DelayQueue<Uid>,
    keys: HashMap<Uid, delay_queue::Key>,
    due: VecDeque<Uid>,
    inflight: JoinSet<(Uid, Option<Outcome>)>,
    inflight_uid: HashMap<Id, Uid>,
    inflight_abort: HashMap<Uid, AbortHandle>,
    /// When dispatch was held back by an expired lease while still `Leading`: look again then.
    poke_at: Option<Instant>,
    /// When a leaderless scope is to be reported unhealthy.
    leaderless_alert_at: Option<Instant>,
    bucket: Bucket,
    /// Records cancelled by an event while their DELETE was in flight, kept until it ends.
    finishing: HashMap<Uid, crate::tracker::Record>,
    /// Pods whose last DELETE was forbidden (403), with the API's message.
    forbidden: HashMap<Uid, String>,
    /// When the next summary of forbidden pods may be logged.
    forbidden_summary_at: Option<Instant>,
    metrics: Arc<ScopeMetrics>,
}

impl Sweeper {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Command>) {
        let mut status = self.election.watch();
        // The backend may have decided before this task first ran (the local backend leads at
        // once): act on the state as it is now, then on every change of it.
        let initial = status.borrow_and_update().clone();
        let mut last_leadership = Leadership::Following;
        if initial.leadership != last_leadership {
            last_leadership = initial.leadership;
            self.on_leadership(&initial);
        }
        let mut build_at = Some(Instant::now());
        let mut probe = tokio::time::interval(self.cfg.overdue_probe);
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.update_gauges();
            tokio::select! {
                biased;
                cmd = rx.recv() => match cmd {
                    Some(Command::Observe(obs)) => self.on_observe(&obs),
                    Some(Command::Shutdown) | None => break,
                },
                changed = status.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    let st = status.borrow_and_update().clone();
                    if st.leadership != last_leadership {
                        last_leadership = st.leadership;
                        self.on_leadership(&st);
                    }
                }
                Some(done) = self.inflight.join_next_with_id(), if !self.inflight.is_empty() => {
                    self.on_done(done);
                }
                Some(expired) = self.queue.next(), if !self.queue.is_empty() => {
                    self.on_expired(expired.into_inner());
                }
                _ = sleep_until(build_at.unwrap_or_else(Instant::now)), if build_at.is_some() => {
                    build_at = self.build_deleter().await;
                }
                _ = sleep_until(self.poke_at.unwrap_or_else(Instant::now)), if self.poke_at.is_some() => {
                    self.poke_at = None;
                    self.dispatch();
                }
                _ = sleep_until(self.forbidden_summary_at.unwrap_or_else(Instant::now)), if self.forbidden_summary_at.is_some() => {
                    self.summarise_forbidden();
                }
                _ = probe.tick(), if !self.tracker.is_empty() => self.probe_overdue(),
                _ = sleep_until(self.leaderless_alert_at.unwrap_or_else(Instant::now)), if self.leaderless_alert_at.is_some() => {
                    self.leaderless_alert_at = None;
                    self.raise_leaderless_alert();
                }
            }
        }
        self.shutdown().await;
    }

    async fn build_deleter(&mut self) -> Option<Instant> {
        match (self.source)(self.scope.clone()).await {
            Ok(d) => {
                debug!(scope = %self.scope, "Kubernetes client ready");
                self.deleter = Some(d);
                self.dispatch();
                None
            }
            Err(e) => {
                error!(
                    scope = %self.scope,
                    "Cannot build the Kubernetes client for scope {}: {e}; pods wait, retrying in {:?}",
                    self.scope, self.cfg.client_retry
                );
                Some(Instant::now() + self.cfg.client_retry)
            }
        }
    }

    fn on_observe(&mut self, obs: &Observation) {
        ScopeMetrics::inc(&self.metrics.observed);
        let uid: Uid = Arc::from(obs.pod_uid.as_str());
        let now_wall = self.clock.now();
        match self
            .tracker
            .observe(&uid, obs, self.cfg.kind, now_wall, Instant::now())
        {
            Verdict::Ignore => {}
            Verdict::Arm => {
                let Some(rec) = self.tracker.get(&uid) else {
                    return;
                };
                let left = schedule::time_left(
                    rec.terminated_at,
                    rec.first_seen,
                    self.cfg.retain,
                    now_wall,
                );
                debug!(
                    scope = %self.scope, pod = %obs.pod_name, uid = %uid, tag = %obs.tag,
                    "Scheduled {} ({}) for deletion in {:.1}s", obs.pod_name, obs.state.as_str(), left.as_secs_f64()
                );
                let key = self.queue.insert(uid.clone(), left);
                self.keys.insert(uid, key);
            }
            Verdict::Rearm => {
                let (Some(rec), Some(key)) = (self.tracker.get(&uid), self.keys.get(&uid)) else {
                    return;
                };
                if rec.stage == Stage::Scheduled {
                    let left = schedule::time_left(
                        rec.terminated_at,
                        rec.first_seen,
                        self.cfg.retain,
                        now_wall,
                    );
                    self.queue.reset(key, left);
                }
            }
            Verdict::Cancel(rec) => {
                ScopeMetrics::inc(&self.metrics.cancelled);
                if let Some(key) = self.keys.remove(&uid) {
                    self.queue.remove(&key);
                }
                if self.inflight_abort.contains_key(&uid) {
                    // Most likely the event of our own DELETE, arriving before its HTTP answer:
                    // let the request finish so its outcome is logged and counted.
                    self.finishing.insert(uid.clone(), rec.clone());
                }
                self.forbidden.remove(&uid);
                debug!(
                    scope = %self.scope, pod = %rec.name, uid = %uid,
                    "Pod {} is already deleted or being deleted; its cleanup is cancelled", rec.name
                );
            }
        }
    }

    fn on_expired(&mut self, uid: Uid) {
        self.keys.remove(&uid);
        if let Some(rec) = self.tracker.get_mut(&uid) {
            rec.stage = Stage::Due;
            self.due.push_back(uid);
            self.dispatch();
        }
    }

    fn on_leadership(&mut self, st: &Status) {
        ScopeMetrics::inc(&self.metrics.transitions);
        self.track_health(st);
        let leading = st.leadership == Leadership::Leading;
        self.metrics
            .leader
            .store(u64::from(leading), std::sync::atomic::Ordering::Relaxed);
        match st.leadership {
            Leadership::Leading => {
                info!(
                    scope = %self.scope,
                    "Leading cleanup of scope {} ({}): {} pods tracked, {} already due",
                    self.scope, st.reason, self.tracker.len(), self.due.len()
                );
                self.dispatch();
            }
            Leadership::Paused => {
                warn!(
                    scope = %self.scope,
                    "Cleanup of scope {} paused ({}): no DELETE until contact is confirmed",
                    self.scope, st.reason
                );
            }
            Leadership::Following | Leadership::NoQuorum => {
                let aborted = self.inflight_abort.len();
                for (_, abort) in self.inflight_abort.drain() {
                    abort.abort();
                }
                info!(
                    scope = %self.scope,
                    "Not leading scope {} ({}: {}); {} DELETEs in flight cancelled",
                    self.scope, st.leadership.as_str(), st.reason, aborted
                );
            }
        }
    }

    /// Paused and NoQuorum mean no leader can act; Leading and Following mean one can.
    fn track_health(&mut self, st: &Status) {
        use std::sync::atomic::Ordering::Relaxed;
        let leaderless = matches!(st.leadership, Leadership::Paused | Leadership::NoQuorum);
        let since = self.metrics.leaderless_since_ms.load(Relaxed);
        if leaderless && since == 0 {
            self.metrics
                .leaderless_since_ms
                .store(crate::metrics::epoch_ms().max(1), Relaxed);
            self.leaderless_alert_at = Some(Instant::now() + self.cfg.leaderless_alert);
        } else if !leaderless && since != 0 {
            self.metrics.leaderless_since_ms.store(0, Relaxed);
            self.leaderless_alert_at = None;
            if self.metrics.unhealthy.swap(0, Relaxed) == 1 {
                info!(
                    scope = %self.scope,
                    "Scope {} has a cleanup leader again ({}: {}); {} pods tracked",
                    self.scope, st.leadership.as_str(), st.reason, self.tracker.len()
                );
            }
        }
    }

    fn raise_leaderless_alert(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.metrics.unhealthy.store(1, Relaxed);
        let st = self.election.status();
        error!(
            scope = %self.scope,
            "Scope {} has had no reachable cleanup leader for over {:?} ({}: {}); nothing is deleted \
             until the HA backend is reachable again, {} pods wait ({} already due)",
            self.scope, self.cfg.leaderless_alert, st.leadership.as_str(), st.reason,
            self.tracker.len(), self.due.len()
        );
    }

    fn dispatch(&mut self) {
        let Some(deleter) = self.deleter.clone() else {
            return;
        };
        while self.inflight.len() < self.cfg.tuning.max_in_flight {
            if self.due.is_empty() {
                return;
            }
            if !self.election.may_act() {
                // Leading but the lease ran out: the backend is renewing it; look again soon.
                if self.election.status().leadership == Leadership::Leading {
                    self.poke_at = Some(Instant::now() + Duration::from_millis(200));
                }
                return;
            }
            let Some(uid) = self.due.pop_front() else {
                return;
            };
            let Some(rec) = self.tracker.get_mut(&uid) else {
                continue;
            };
            if rec.stage != Stage::Due {
                continue;
            }
            let now = Instant::now();
            if let Err(wait) = self.bucket.take(now) {
                // Rate limit: this pod goes first once a token is there.
                self.due.push_front(uid);
                let at = now + wait;
                self.poke_at = Some(self.poke_at.map_or(at, |p| p.min(at)));
                return;
            }
            rec.stage = Stage::Deleting;
            let name = rec.name.clone();
            let authority = self.election.authority();
            let deleter = deleter.clone();
            let metrics = self.metrics.clone();
            let dry_run = self.cfg.tuning.dry_run;
            let task_uid = uid.clone();
            let abort = self.inflight.spawn(async move {
                // The last check before the request leaves: a lease that ran out since dispatch
                // (a frozen process, a lost session) stops it here.
                if !authority.may_act() {
                    return (task_uid, None);
                }
                ScopeMetrics::inc(&metrics.deletes_sent);
                let out = deleter.delete(&name, &task_uid, dry_run).await;
                (task_uid, Some(out))
            });
            self.inflight_uid.insert(abort.id(), uid.clone());
            self.inflight_abort.insert(uid, abort);
        }
    }

    fn on_done(&mut self, done: Result<(Id, (Uid, Option<Outcome>)), tokio::task::JoinError>) {
        let (uid, outcome) = match done {
            Ok((id, (uid, outcome))) => {
                self.inflight_uid.remove(&id);
                (uid, outcome)
            }
            Err(e) => {
                let Some(uid) = self.inflight_uid.remove(&e.id()) else {
                    return;
                };
                if e.is_panic() {
                    error!(scope = %self.scope, uid = %uid, "DELETE task panicked; the pod will be retried");
                }
                (uid, None)
            }
        };
        self.inflight_abort.remove(&uid);
        let Some(outcome) = outcome else {
            self.finishing.remove(&uid);
            // Not sent (lease ran out) or aborted (leadership lost): the pod waits, due.
            if let Some(rec) = self.tracker.get_mut(&uid) {
                rec.stage = Stage::Due;
                self.due.push_front(uid);
            }
            self.dispatch();
            return;
        };
        self.metrics.outcome(outcome.class);
        let (rec, cancelled) = match self.tracker.get(&uid).cloned() {
            Some(rec) => (rec, false),
            None => match self.finishing.remove(&uid) {
                // Cancelled by an event while in flight: report the outcome, nothing more to do.
                Some(rec) => (rec, true),
                None => {
                    self.dispatch();
                    return;
                }
            },
        };
        let now_wall = self.clock.now();
        let deadline =
            schedule::deadline(rec.terminated_at, rec.first_seen, self.cfg.retain, now_wall);
        let late = now_wall
            .duration_since(deadline)
            .unwrap_or_default()
            .as_secs_f64();
        let verb = if self.cfg.tuning.dry_run {
            "Would delete (server-side dry run)"
        } else {
            "Deleted"
        };
        let (name, tag, scope) = (&rec.name, &rec.tag, &self.scope);
        match outcome.class {
            OutcomeClass::Accepted => info!(
                scope = %scope, pod = %name, uid = %uid, tag = %tag,
                "{verb} terminated driver pod {name} ({}, kyuubi-unique-tag={tag}) in scope {scope}, {late:.1}s after its deadline",
                rec.state.as_str()
            ),
            OutcomeClass::AlreadyAbsent => debug!(
                scope = %scope, pod = %name, uid = %uid,
                "Pod {name} is already gone (HTTP 404); nothing to do"
            ),
            OutcomeClass::Replaced => info!(
                scope = %scope, pod = %name, uid = %uid,
                "Pod name {name} now belongs to a newer pod (UID precondition, HTTP 409); left alone"
            ),
            OutcomeClass::Forbidden => debug!(
                scope = %scope, pod = %name, uid = %uid,
                "DELETE of pod {name} in scope {scope} is forbidden: {outcome}"
            ),
            OutcomeClass::Other => error!(
                scope = %scope, pod = %name, uid = %uid, code = ?outcome.code,
                "DELETE of pod {name} in scope {scope} was refused: {outcome}; retry {}",
                rec.attempts + 1
            ),
            OutcomeClass::Throttled | OutcomeClass::ServerError | OutcomeClass::Transport => warn!(
                scope = %scope, pod = %name, uid = %uid, code = ?outcome.code,
                "DELETE of pod {name} in scope {scope} did not complete: {outcome}; retry {}",
                rec.attempts + 1
            ),
        }
        if outcome.class == OutcomeClass::Accepted {
            self.metrics.record_lag(late);
        }
        if cancelled {
            self.dispatch();
            return;
        }
        if outcome.class == OutcomeClass::Forbidden {
            self.forbidden.insert(uid.clone(), outcome.to_string());
            if self.forbidden_summary_at.is_none() {
                // The first summary waits a moment so that it counts a whole burst of 403s.
                self.forbidden_summary_at = Some(Instant::now() + FIRST_FORBIDDEN_SUMMARY);
            }
        } else {
            self.forbidden.remove(&uid);
        }
        if outcome.class.is_done() {
            self.tracker.settle(&uid, Instant::now());
        } else {
            self.schedule_retry(uid, &outcome);
        }
        // A slot is free: the next due pod may go.
        self.dispatch();
    }

    fn schedule_retry(&mut self, uid: Uid, outcome: &Outcome) {
        let Some(rec) = self.tracker.get_mut(&uid) else {
            return;
        };
        rec.attempts += 1;
        rec.stage = Stage::Backoff;
        ScopeMetrics::inc(&self.metrics.retries);
        let jitter = rand::random::<f64>();
        let delay = if outcome.class == OutcomeClass::Forbidden {
            // RBAC is fixed by people, not by retrying: retry slowly, never give up.
            self.cfg.tuning.forbidden_retry.mul_f64(0.9 + 0.2 * jitter)
        } else {
            schedule::retry_delay(
                rec.attempts,
                outcome.retry_after,
                self.cfg.tuning.retry_max_wait,
                jitter,
            )
        };
        let key = self.queue.insert(uid.clone(), delay);
        self.keys.insert(uid, key);
    }

    /// One ERROR per scope per interval for every pod RBAC keeps us from deleting.
    fn summarise_forbidden(&mut self) {
        self.forbidden
            .retain(|uid, _| self.tracker.get(uid).is_some());
        let Some(example) = self.forbidden.values().next() else {
            self.forbidden_summary_at = None;
            return;
        };
        error!(
            scope = %self.scope,
            "DELETE is forbidden for {} pod(s) in scope {}: {example}. They are kept and retried every \
             ~{:?}; grant the Kyuubi service account `delete` on pods in this namespace",
            self.forbidden.len(), self.scope, self.cfg.tuning.forbidden_retry
        );
        self.forbidden_summary_at = Some(Instant::now() + self.cfg.tuning.forbidden_summary);
    }

    /// The age of the oldest pod past its deadline (a gauge; O(tracked) every few seconds).
    fn probe_overdue(&self) {
        let now = self.clock.now();
        let oldest = self
            .tracker
            .iter()
            .filter(|(_, r)| r.stage != Stage::Scheduled)
            .filter_map(|(_, r)| {
                let d = schedule::deadline(r.terminated_at, r.first_seen, self.cfg.retain, now);
                now.duration_since(d).ok()
            })
            .max()
            .unwrap_or_default();
        ScopeMetrics::set(&self.metrics.oldest_overdue_ms, oldest.as_millis() as usize);
    }

    fn update_gauges(&self) {
        ScopeMetrics::set(&self.metrics.tracked, self.tracker.len());
        ScopeMetrics::set(&self.metrics.scheduled, self.queue.len());
        ScopeMetrics::set(&self.metrics.due, self.due.len());
        ScopeMetrics::set(&self.metrics.inflight, self.inflight.len());
    }

    async fn shutdown(mut self) {
        self.inflight.abort_all();
        while self.inflight.join_next().await.is_some() {}
        self.metrics
            .leader
            .store(0, std::sync::atomic::Ordering::Relaxed);
        self.election.close().await;
        debug!(scope = %self.scope, "Scope task stopped; {} pods were tracked", self.tracker.len());
    }
}
