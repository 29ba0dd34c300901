//! One task per scope: tracks terminated pods, arms one timer per pod, and, while this server
//! leads the scope, sends the DELETEs that are due.
//!
//! # Guarantees
//! * A DELETE is dispatched only for a tracked record in stage `Due`, while the election says this
//!   server may act; the dispatched task checks again right before sending, and the request is
//!   dropped if the lease lapses while it is still connecting or waiting (checked at send time).
//! * Losing leadership (Following, NoQuorum) aborts every DELETE in flight at once and puts the
//!   records back to `Due`; nothing is dropped. `Paused` stops new DELETEs and lets those already
//!   sent finish within the lease.
//! * A DELETE dropped unanswered because the lease lapsed (the API server may have carried it out)
//!   is not sent again by this server for [`UNANSWERED_HOLD`], so that a leader that pauses and
//!   resumes sees the pod's deletion before it would send a second DELETE.
//! * On gaining leadership, and on every status change that ends `Leading`, every record already
//!   due is dispatched: the reconcile works from memory and makes no LIST call.
//! * Failed DELETEs (403, 429, 5xx, transport, other) are retried with capped exponential backoff,
//!   honouring `Retry-After` (at most ten minutes), until the pod is gone or leadership ends. A
//!   429, or a 5xx with `Retry-After`, pauses the whole scope's DELETE stream until the wait has
//!   passed. Failures are logged as one summary per class per scope per interval.
//! * A pod observed running again (a non-terminal state) is disarmed; it may be armed again later.
//! * A leader that completes no DELETE for `ha.stepDownAfter` while DELETEs are due steps down and
//!   stays out of the election as long, so a server that can delete takes over.
//! * A scope task that fails is restarted (with its records re-armed from their deadlines) and the
//!   scope reports unhealthy; a scope with nothing tracked for the idle time releases its election
//!   and client and ends, to come back on its next event.
//!
//! # Caveats
//! * An aborted DELETE may already have reached the API server; the next leader's DELETE then ends
//!   in 404 or 409 (already absent / replaced), which counts as done.

mod adaptive;
mod deletes;
mod events;
mod failures;
mod handover;
mod inbox;
mod refusals;
mod retention;
mod shared;
mod supervise;
mod watched;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, Id, JoinSet};
use tokio::time::{sleep_until, Instant};
use tracing::{debug, error, info, warn};

use crate::clock::Clock;
use crate::config::Tuning;
use crate::deleter::{Outcome, PodDeleter};
use crate::election::{ElectionHandle, Leadership, Status};
use crate::metrics::{ScopeMetrics, UNHEALTHY_LEADERLESS, UNHEALTHY_THROTTLED};
use crate::model::{CleanupKind, Observation};
use crate::pause::PauseKind;
use crate::schedule;
use crate::scope::Scope;
pub(crate) use crate::tracker::Uid;
use crate::tracker::{Stage, Tracker, Verdict};

use self::deletes::{Bucket, Gate};
use self::failures::Failures;
pub use self::inbox::{Inbox, PodKey, PodQueue};
pub use self::supervise::{spawn, Release, ScopeHandle};

/// Builds the deleter of a scope (a kube client for it); retried until it succeeds.
pub type DeleterSource =
    Arc<dyn Fn(Scope) -> BoxFuture<'static, Result<Arc<dyn PodDeleter>, String>> + Send + Sync>;

/// What a DELETE task gives back: its pod, and what became of its request.
type Sent = (Uid, Answer);

/// What became of a DELETE task's request.
#[derive(Debug)]
enum Answer {
    /// Held back before it left (the lease ran out, or a 429 paused the scope meanwhile).
    NotSent,
    /// Sent, then dropped unanswered when the lease lapsed: the API server may have carried it
    /// out, and its watch event may still be on the way.
    Unanswered,
    /// The API server's answer, and how long it took.
    Answered(Outcome, Duration),
}

/// How long a pod whose DELETE went unanswered (the lease lapsed meanwhile) waits before it may
/// be sent again: long enough for the watch to tell its deletion, if the API server carried the
/// DELETE out, so that the same leader does not send a second one.
const UNANSWERED_HOLD: Duration = Duration::from_secs(5);

/// How a sweeper behaves.
#[derive(Clone, Debug)]
pub struct SweeperConfig {
    pub kind: CleanupKind,
    pub retain: Duration,
    /// Retain periods by outcome, the cap, the annotations (Kyuubi's one period by default).
    pub retention: crate::config::Retention,
    /// Kubernetes Events per second, when they are on.
    pub events_qps: Option<f64>,
    /// Pacing, in-flight cap, dry run, retry waits.
    pub tuning: Tuning,
    /// How long a cleaned UID is remembered.
    pub tombstone_ttl: Duration,
    /// Wait between attempts to build the scope's Kubernetes client.
    pub client_retry: Duration,
    /// A scope without a reachable leader for this long is reported unhealthy.
    pub leaderless_alert: Duration,
    /// A leader that completes no DELETE for this long while DELETEs are due steps down, and
    /// stays out of the election for as long.
    pub step_down_after: Duration,
    /// How often the age of the oldest overdue pod is measured (and the stall checked).
    pub overdue_probe: Duration,
    /// A scope with nothing tracked (no record, no spared UID, no live tombstone, nothing in
    /// flight) for this long releases its election and client.
    pub idle_release: Duration,
}

impl SweeperConfig {
    pub fn new(kind: CleanupKind, retain: Duration) -> Self {
        SweeperConfig {
            kind,
            retain,
            retention: crate::config::Retention::uniform(retain),
            events_qps: None,
            tuning: Tuning::default(),
            tombstone_ttl: retain.max(Duration::from_secs(600)) + Duration::from_secs(600),
            client_retry: Duration::from_secs(30),
            leaderless_alert: Duration::from_secs(120),
            step_down_after: Duration::from_secs(120),
            overdue_probe: Duration::from_secs(5),
            idle_release: Duration::from_secs(1800),
        }
    }
}

/// Messages to a scope task.
#[derive(Debug)]
pub enum Command {
    /// One pod event. [`Inbox::send`] merges it into the pod's waiting entry ([`Inbox::observe`]),
    /// so the task receives it as a [`Command::Pod`] token.
    Observe(Observation),
    /// The waiting entry of one pod ([`PodQueue`]): its coalesced events.
    Pod(PodKey),
    /// Self-watch mode: a fresh list of the scope's driver pods ended; these UIDs were in it.
    Listed(Box<std::collections::HashSet<Uid>>),
    /// Self-watch mode: this server stopped watching the scope's pods.
    Unwatched,
    /// One pod event from the leader's scope-wide watch beside the informers (`scopeWatch`):
    /// merged as [`Command::Observe`], and marked as told only by that watch.
    Watched(Observation),
    /// Self-watch mode with a field selector (pods past Running): a watch event of a terminated
    /// pod, which may be its entry into the selection, so it was not terminated just before.
    /// Merged as [`Command::Observe`]; a pod the tracker knows nothing of counts as seen running
    /// then ([`crate::tracker::Tracker::entered`]).
    Entered(Observation),
    /// The scope-wide watch beside the informers ended (the term ended, or the watch failed):
    /// what only it told is dropped ([`crate::tracker::Tracker::drop_watch_only`]).
    ScopeUnwatched,
    /// Kyuubi asks for this pod to be deleted at once (why, for the log: e.g. its batch was
    /// CANCELED); see [`crate::tracker::Tracker::due_now`].
    DueNow(Observation, Box<str>),
    Shutdown,
}

/// Why [`Sweeper::run`] returned.
enum Exit {
    /// Shutdown asked for, or the engine went away.
    Shutdown,
    /// Idle long enough: removed from the engine's table.
    Released,
}

/// After taking commands the task yields this many times (taking what arrived meanwhile after
/// each yield) before it waits on its queue again: while events stream in, the senders find no
/// waker to wake (a wake-up of a parked task costs the sending thread a system call), and an
/// event is never held back.
const INBOX_LINGER: u8 = 4;
/// The most commands taken at once before the task's other work gets a turn.
const INBOX_BATCH: usize = 4096;

struct Sweeper {
    /// The waiting entries of the inbox's pod events ([`Command::Pod`]).
    pods: Arc<PodQueue>,
    scope: Scope,
    cfg: SweeperConfig,
    clock: Clock,
    election: ElectionHandle,
    source: DeleterSource,
    deleter: Option<Arc<dyn PodDeleter>>,
    /// Why the last attempt to build the deleter failed.
    deleter_error: Option<String>,
    build_at: Option<Instant>,
    /// The records, their timers and the overdue set.
    tracker: Tracker,
    /// UIDs in stage `Due`, oldest first; may hold stale entries (compacted, see `compact_due`).
    due: VecDeque<Uid>,
    inflight: JoinSet<Sent>,
    inflight_uid: HashMap<Id, Uid>,
    inflight_abort: HashMap<Uid, AbortHandle>,
    /// Records cancelled by an event while their DELETE was in flight, kept until it ends.
    finishing: HashMap<Uid, crate::tracker::Record>,
    /// The leadership state last acted on.
    last_leadership: Leadership,
    /// When dispatch was held back (lease, rate limit, scope pause): look again then.
    poke_at: Option<Instant>,
    /// When a leaderless scope is to be reported unhealthy.
    leaderless_alert_at: Option<Instant>,
    bucket: Bucket,
    /// Closed after a 429 (or a 5xx with Retry-After) until the wait has passed.
    gate: Arc<Gate>,
    failures: Failures,
    /// Since when this server leads (for the stall check).
    leading_since: Option<Instant>,
    /// Since when DELETEs have been due without a pause.
    work_since: Option<Instant>,
    /// The last answer that shows DELETEs get through (or the API server's own trouble).
    last_progress: Instant,
    /// The last failure, for the step-down reason.
    last_failure: Option<String>,
    /// When to check whether the idle scope may be released.
    idle_at: Option<Instant>,
    release: Release,
    metrics: Arc<ScopeMetrics>,
    /// Yields left before the task waits on its queue again (see [`INBOX_LINGER`]).
    linger: u8,
    /// Commands taken so far (wrapping).
    commands_taken: u64,
    /// DELETEs allowed in flight while the scope resumes after a Retry-After pause: 1 at first,
    /// doubled by each DELETE that completes, up to `maxInFlight` (then `None`).
    ramp: Option<usize>,
    /// The last failure that put a pod into backoff, for the backoff pause's detail.
    last_retry: String,
    /// While the backoff pause is open: the end it was opened with (so that the loop, which
    /// looks at every turn, writes it again only when it changes).
    backoff_until: Option<Option<Instant>>,
    /// The bound on WARNs about unreadable annotations.
    warn_bound: retention::WarnBound,
    /// The bound on Kubernetes Events (`None`: Events are off).
    event_bucket: Option<Bucket>,
    /// The causes of failed Events already warned about.
    events_warned: events::Warned,
    /// DELETEs in flight allowed, from the API server's answers.
    pace: adaptive::Pace,
    /// What the task shares with the scope's other servers through the HA backend.
    shared: shared::Shared,
    /// Refused DELETEs: the refusal episode and the access reviews (`refusals`).
    refusals: refusals::Refusals,
    /// Barriers (`Listed`, `Unwatched`) taken from the inbox: the epoch of the pods' entries
    /// that wait in the inbox after the last of them ([`PodQueue::take_current`]).
    barriers: u64,
    /// A dispatch is under way (an entry it applies may ask for another: that one waits).
    dispatching: bool,
    /// Whether a leader that cannot delete hands over (`handover`).
    handover: handover::Handover,
}

impl Sweeper {
    async fn run(&mut self, rx: &mut mpsc::UnboundedReceiver<Command>) -> Exit {
        let mut status = self.election.watch();
        // The backend may have decided before this task first ran (the local backend leads at
        // once): act on the state as it is now, then on every change of it.
        let initial = status.borrow_and_update().clone();
        self.on_status(&initial);
        let mut probe = tokio::time::interval(self.cfg.overdue_probe);
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.update_gauges();
            self.update_backoff_pause();
            self.update_idle();
            let timer_at = self.tracker.next_timer();
            tokio::select! {
                biased;
                cmd = rx.recv(), if self.linger == 0 => {
                    let Some(cmd) = cmd else {
                        return Exit::Shutdown;
                    };
                    if self.on_command(cmd) || self.drain(rx) {
                        return Exit::Shutdown;
                    }
                    self.linger = INBOX_LINGER;
                }
                // Lingering: the receiver is not polled, so it holds no waker and senders wake
                // nothing; what they queue meanwhile is taken after each yield.
                _ = tokio::task::yield_now(), if self.linger > 0 => {
                    self.linger -= 1;
                    let before = self.commands_taken;
                    if self.drain(rx) {
                        return Exit::Shutdown;
                    }
                    if self.commands_taken != before {
                        self.linger = INBOX_LINGER;
                    }
                }
                changed = status.changed() => {
                    if changed.is_err() {
                        return Exit::Shutdown;
                    }
                    let st = status.borrow_and_update().clone();
                    self.on_status(&st);
                }
                Some(done) = self.inflight.join_next_with_id(), if !self.inflight.is_empty() => {
                    self.on_done(done);
                }
                Some(done) = self.shared.tasks.join_next(), if !self.shared.tasks.is_empty() => {
                    self.on_shared(done);
                }
                _ = sleep_until_some(timer_at) => self.on_timers(),
                _ = sleep_until_some(self.build_at) => self.build_deleter().await,
                _ = sleep_until_some(self.poke_at) => {
                    self.poke_at = None;
                    self.dispatch();
                }
                Some(done) = self.refusals.reviews.join_next(), if !self.refusals.reviews.is_empty() => {
                    self.on_review(done);
                }
                Some(done) = self.handover.calls.join_next(), if !self.handover.calls.is_empty() => {
                    self.on_handover(done);
                }
                _ = sleep_until_some(self.failures.next_at()) => {
                    self.failures.summarise(&self.scope, &self.cfg.tuning);
                }
                _ = probe.tick() => {
                    self.probe();
                    self.check_pauses();
                }
                _ = sleep_until_some(self.leaderless_alert_at) => {
                    self.leaderless_alert_at = None;
                    self.raise_leaderless_alert();
                }
                _ = sleep_until_some(self.idle_at) => {
                    if self.try_release(rx) {
                        return Exit::Released;
                    }
                }
            }
        }
    }

    /// Takes the commands already queued (at most [`INBOX_BATCH`]); true when the task is to end.
    fn drain(&mut self, rx: &mut mpsc::UnboundedReceiver<Command>) -> bool {
        for _ in 0..INBOX_BATCH {
            match rx.try_recv() {
                Ok(cmd) => {
                    if self.on_command(cmd) {
                        return true;
                    }
                }
                Err(mpsc::error::TryRecvError::Empty) => return false,
                Err(mpsc::error::TryRecvError::Disconnected) => return true,
            }
        }
        false
    }

    /// Applies one command; true when the task is to end.
    fn on_command(&mut self, cmd: Command) -> bool {
        self.commands_taken = self.commands_taken.wrapping_add(1);
        self.metrics.queued.fetch_sub(1, Relaxed);
        match cmd {
            Command::Observe(obs) => self.on_observe(&obs, false),
            Command::Watched(obs) => self.on_observe(&obs, true),
            Command::Entered(obs) => {
                self.entered(&obs);
                self.on_observe(&obs, false)
            }
            Command::Pod(key) => {
                if let Some(e) = self.pods.take(&key) {
                    self.apply_entry(e);
                }
            }
            Command::Listed(uids) => {
                self.barriers += 1;
                self.on_listed(&uids)
            }
            Command::Unwatched => {
                self.barriers += 1;
                self.on_unwatched()
            }
            Command::ScopeUnwatched => {
                self.barriers += 1;
                self.on_scope_unwatched()
            }
            Command::DueNow(obs, why) => self.on_due_now(&obs, &why),
            Command::Shutdown => return true,
        }
        false
    }

    /// Applies the coalesced events of one pod, in order.
    fn apply_entry(&mut self, e: inbox::Entry) {
        // Only the scope watch told of it: the tracker marks it so (watch-only records).
        let from_watch = !e.from_informer;
        if let Some(running) = &e.running {
            self.on_observe(running, from_watch);
        }
        if let (Some(at), Some(last)) = (e.seen_running, &e.last) {
            self.tracker.saw_running(&Uid::new(&last.pod_uid), at);
        }
        if let (true, Some(last)) = (e.entered, &e.last) {
            self.entered(last);
        }
        if let Some(last) = &e.last {
            self.on_observe(last, from_watch);
        }
    }

    async fn build_deleter(&mut self) {
        match (self.source)(self.scope.clone()).await {
            Ok(d) => {
                debug!(scope = %self.scope, "Kubernetes client ready");
                self.deleter = Some(d);
                self.deleter_error = None;
                self.build_at = None;
                self.metrics.pauses.close(PauseKind::ClientUnavailable);
                self.metrics
                    .clear_unhealthy(crate::metrics::UNHEALTHY_NO_CLIENT);
                self.dispatch();
            }
            Err(e) => {
                error!(
                    scope = %self.scope,
                    "Cannot build the Kubernetes client for scope {}: {e}; pods wait, retrying in {:?}",
                    self.scope, self.cfg.client_retry
                );
                let retry = Instant::now() + self.cfg.client_retry;
                self.metrics.set_unhealthy(
                    crate::metrics::UNHEALTHY_NO_CLIENT,
                    &format!("the Kubernetes client of the scope cannot be built: {e}"),
                );
                self.metrics.pauses.open(
                    PauseKind::ClientUnavailable,
                    Some(retry),
                    &format!(
                        "the Kubernetes client cannot be built: {e}; it is built again at the end"
                    ),
                );
                self.deleter_error = Some(e);
                self.build_at = Some(retry);
            }
        }
    }

    /// Time left until a record is due; `None` for a pod kept by its annotation (only the cap
    /// deletes it).
    fn time_left(
        &self,
        rec: &crate::tracker::Record,
        now_wall: std::time::SystemTime,
    ) -> Option<Duration> {
        let retain = self.retain_of(rec)?;
        if rec.immediate() {
            return Some(Duration::ZERO);
        }
        Some(schedule::time_left(
            rec.terminated_at(),
            rec.first_seen(),
            rec.seen_running(),
            retain,
            now_wall,
        ))
    }

    fn deadline(
        &self,
        rec: &crate::tracker::Record,
        now_wall: std::time::SystemTime,
    ) -> std::time::SystemTime {
        if rec.immediate() {
            // Due from the moment Kyuubi asked.
            return rec.first_seen();
        }
        match (rec.capped(), self.retain_of(rec)) {
            (false, Some(retain)) => schedule::deadline(
                rec.terminated_at(),
                rec.first_seen(),
                rec.seen_running(),
                retain,
                now_wall,
            ),
            // Due since the cap made it so.
            _ => rec.overdue_since().unwrap_or(now_wall),
        }
    }

    /// One pod event; `from_watch`: only the scope-wide watch beside the informers told it.
    fn on_observe(&mut self, obs: &Observation, from_watch: bool) {
        ScopeMetrics::inc(&self.metrics.observed);
        let uid = Uid::new(&obs.pod_uid);
        if obs.is_cleaned() {
            // Gone (or going): whatever the scope's servers share about it goes too.
            self.shared_gone(&uid);
        }
        let now_wall = self.clock.now();
        match self.tracker.observe_from(
            &uid,
            obs,
            self.cfg.kind,
            now_wall,
            Instant::now(),
            from_watch,
        ) {
            Verdict::Ignore => {
                // A terminated pod's annotations may have changed.
                if self.apply_annotations(&uid, obs) {
                    self.rearm(uid, now_wall);
                }
            }
            Verdict::Arm => {
                self.apply_annotations(&uid, obs);
                let Some(rec) = self.tracker.get(&uid) else {
                    return;
                };
                let left = self.time_left(rec, now_wall);
                debug!(
                    scope = %self.scope, pod = %obs.pod_name, uid = %uid, tag = %obs.tag,
                    "Scheduled {} ({}) for deletion in {:?}", obs.pod_name, obs.state.as_str(), left
                );
                self.rearm(uid, now_wall);
                self.enforce_cap(now_wall);
            }
            Verdict::Rearm => {
                self.apply_annotations(&uid, obs);
                self.rearm(uid, now_wall);
            }
            Verdict::Cancel(rec) => {
                self.unkeep(&rec);
                ScopeMetrics::inc(&self.metrics.cancelled);
                self.forget(&uid);
                if self.inflight_abort.contains_key(&uid) {
                    // Most likely the event of our own DELETE, arriving before its HTTP answer:
                    // let the request finish so its outcome is logged and counted.
                    self.finishing.insert(uid.clone(), rec.clone());
                }
                debug!(
                    scope = %self.scope, pod = %rec.name(), uid = %uid,
                    "Pod {} is already deleted or being deleted; its cleanup is cancelled", rec.name()
                );
            }
            Verdict::DueNow => self.make_due_now(uid, now_wall),
            Verdict::Disarm(rec) => {
                self.unkeep(&rec);
                ScopeMetrics::inc(&self.metrics.disarmed);
                self.forget(&uid);
                if let Some(abort) = self.inflight_abort.remove(&uid) {
                    abort.abort();
                }
                info!(
                    scope = %self.scope, pod = %rec.name(), uid = %uid,
                    "Pod {} is {} again after {}; its cleanup is disarmed until it terminates again",
                    rec.name(), obs.state.as_str(), rec.state.as_str()
                );
            }
        }
    }

    /// Kyuubi asks for a pod to be deleted at once: the leader sends its DELETE (with the UID
    /// precondition) as soon as it may, whatever the cleanup kind and the pod's state.
    fn on_due_now(&mut self, obs: &Observation, why: &str) {
        ScopeMetrics::inc(&self.metrics.observed);
        let uid = Uid::new(&obs.pod_uid);
        let now_wall = self.clock.now();
        match self.tracker.due_now(&uid, obs, now_wall, Instant::now()) {
            Verdict::DueNow => {
                info!(
                    scope = %self.scope, pod = %obs.pod_name, uid = %uid, tag = %obs.tag,
                    "Pod {} ({}, kyuubi-unique-tag={}) is to be deleted now: {why}",
                    obs.pod_name, obs.state.as_str(), obs.tag
                );
                // Whoever leads hears of it, now or after a failover.
                self.post_request(obs, why);
                self.make_due_now(uid, now_wall);
            }
            Verdict::Cancel(rec) => {
                ScopeMetrics::inc(&self.metrics.cancelled);
                self.shared_gone(&uid);
                self.forget(&uid);
                if self.inflight_abort.contains_key(&uid) {
                    self.finishing.insert(uid.clone(), rec);
                }
            }
            _ => debug!(
                scope = %self.scope, pod = %obs.pod_name, uid = %uid,
                "Pod {} is already gone or being deleted; nothing to do ({why})", obs.pod_name
            ),
        }
    }

    /// A record Kyuubi wants deleted at once: due now unless it is already due, in flight or
    /// waiting for a retry.
    fn make_due_now(&mut self, uid: Uid, now_wall: std::time::SystemTime) {
        if self
            .tracker
            .get(&uid)
            .is_some_and(|r| r.stage() == Stage::Scheduled)
        {
            self.tracker.disarm(&uid);
            if self.make_due(uid, now_wall) {
                self.dispatch();
            }
        }
    }

    /// Drops the failure entry and any stale due entry of a UID whose record is gone or settled
    /// (its timer went with it).
    fn forget(&mut self, uid: &Uid) {
        self.failures.forget(uid);
        self.compact_due();
    }

    /// Drops due entries whose record is gone or not due any more, once they outnumber the live
    /// ones (amortised O(1) per entry).
    fn compact_due(&mut self) {
        let live = self.tracker.count(Stage::Due);
        if self.due.len() > 2 * live + 64 {
            let tracker = &self.tracker;
            self.due
                .retain(|u| tracker.get(u).is_some_and(|r| r.stage() == Stage::Due));
        }
    }

    /// Arms a scheduled record's timer for `left` from now; a record already overdue (a server
    /// that starts, a late termination time) is due at once, not on the next millisecond of the
    /// timer clock.
    fn schedule(&mut self, uid: Uid, left: Duration, now_wall: std::time::SystemTime) {
        if left.is_zero() {
            self.tracker.disarm(&uid);
            if self.make_due(uid, now_wall) {
                self.dispatch();
            }
        } else {
            self.tracker.arm(&uid, Instant::now() + left);
        }
    }

    /// Every timer that has fired: its record is due.
    fn on_timers(&mut self) {
        let now = Instant::now();
        let now_wall = self.clock.now();
        let mut any = false;
        while let Some(uid) = self.tracker.take_expired(now) {
            any |= self.make_due(uid, now_wall);
        }
        if any {
            self.dispatch();
        }
    }

    /// A record's timer fired: it is due (overdue since its deadline, for the probe).
    fn make_due(&mut self, uid: Uid, now_wall: std::time::SystemTime) -> bool {
        let Some(rec) = self.tracker.get(&uid) else {
            return false;
        };
        let deadline = self.deadline(rec, now_wall);
        if self.tracker.set_due(&uid, deadline) {
            self.due.push_back(uid);
            return true;
        }
        false
    }

    /// Every status change: a new leadership state, or a new term / reason of the same one.
    fn on_status(&mut self, st: &Status) {
        if st.leadership != self.last_leadership {
            self.last_leadership = st.leadership;
            self.on_leadership(st);
        } else if st.leadership == Leadership::Leading {
            // A short Paused -> Leading flip may have come and gone between two looks: pods that
            // became due meanwhile were held back, so look again.
            self.dispatch();
        }
    }

    fn on_leadership(&mut self, st: &Status) {
        ScopeMetrics::inc(&self.metrics.transitions);
        self.track_health(st);
        let leading = st.leadership == Leadership::Leading;
        self.metrics.leader.store(u64::from(leading), Relaxed);
        self.leading_since = leading.then(Instant::now);
        match st.leadership {
            Leadership::Leading => self.shared_begin_term(),
            Leadership::Following | Leadership::NoQuorum => self.shared_end_term(),
            Leadership::Paused => {}
        }
        match st.leadership {
            Leadership::Leading => {
                // Every term starts from one DELETE in flight: the last one may have ended in
                // refusals (`refusals`), which the scope's refused record may tell (`handover`).
                self.slow_start();
                self.read_refused_record();
                info!(
                    scope = %self.scope,
                    "Leading cleanup of scope {} ({}): {} pods tracked, {} already due",
                    self.scope, st.reason, self.tracker.len(), self.tracker.count(Stage::Due)
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
        let leaderless = matches!(st.leadership, Leadership::Paused | Leadership::NoQuorum);
        let since = self.metrics.leaderless_since_ms.load(Relaxed);
        if leaderless {
            self.metrics.pauses.open(
                PauseKind::HaSessionLost,
                None,
                &format!("{}: {}", st.leadership.as_str(), st.reason),
            );
        } else {
            self.metrics.pauses.close(PauseKind::HaSessionLost);
        }
        if leaderless && since == 0 {
            self.metrics
                .leaderless_since_ms
                .store(crate::metrics::epoch_ms().max(1), Relaxed);
            self.leaderless_alert_at = Some(Instant::now() + self.cfg.leaderless_alert);
        } else if !leaderless && since != 0 {
            self.metrics.leaderless_since_ms.store(0, Relaxed);
            self.leaderless_alert_at = None;
            if self.metrics.clear_unhealthy(UNHEALTHY_LEADERLESS) {
                info!(
                    scope = %self.scope,
                    "Scope {} has a cleanup leader again ({}: {}); {} pods tracked",
                    self.scope, st.leadership.as_str(), st.reason, self.tracker.len()
                );
            }
        }
    }

    fn raise_leaderless_alert(&mut self) {
        let st = self.election.status();
        let reason = format!(
            "no reachable cleanup leader for over {:?} ({}: {})",
            self.cfg.leaderless_alert,
            st.leadership.as_str(),
            st.reason
        );
        self.metrics.set_unhealthy(UNHEALTHY_LEADERLESS, &reason);
        error!(
            scope = %self.scope,
            "Scope {} has had {reason}; nothing is deleted until the HA backend is reachable \
             again, {} pods wait ({} already due)",
            self.scope, self.tracker.len(), self.tracker.count(Stage::Due)
        );
    }

    /// Every few seconds: the oldest overdue pod's age (from the overdue set, O(log due); 0 once
    /// nothing is overdue, so that the stalled-leader alerts never read the age of a pod deleted
    /// long ago), and whether a leader is stuck.
    fn probe(&mut self) {
        if self.tracker.is_empty() {
            ScopeMetrics::set(&self.metrics.oldest_overdue_ms, 0);
            return;
        }
        let now = self.clock.now();
        let oldest = self
            .tracker
            .oldest_overdue()
            .and_then(|d| now.duration_since(d).ok())
            .unwrap_or_default();
        ScopeMetrics::set(&self.metrics.oldest_overdue_ms, oldest.as_millis() as usize);
        self.check_stall(Instant::now());
    }

    /// Schedules the idle check while nothing is tracked, cancels it otherwise.
    fn update_idle(&mut self) {
        let candidate = self.tracker.is_empty()
            && self.tracker.spared_count() == 0
            && self.tracker.running_count() == 0
            && self.inflight.is_empty()
            && self.finishing.is_empty();
        if !candidate {
            self.idle_at = None;
        } else if self.idle_at.is_none() {
            let now = Instant::now();
            let from = self
                .tracker
                .tombstones_expire_at()
                .map_or(now, |t| t.max(now));
            self.idle_at = Some(from + self.cfg.idle_release);
        }
    }

    /// Releases the scope if it is still idle and no event is waiting; true if released.
    fn try_release(&mut self, rx: &mpsc::UnboundedReceiver<Command>) -> bool {
        let now = Instant::now();
        if !self.tracker.is_idle(now) {
            // A tombstone younger than its TTL: look again once it has expired.
            let from = self.tracker.tombstones_expire_at().unwrap_or(now).max(now);
            self.idle_at = Some(from + self.cfg.idle_release);
            return false;
        }
        if !(self.release)(rx) {
            self.idle_at = Some(now + self.cfg.overdue_probe);
            return false;
        }
        info!(
            scope = %self.scope,
            "Scope {} tracked nothing for {:?}: its election and Kubernetes client are released \
             until its next event",
            self.scope, self.cfg.idle_release
        );
        true
    }

    /// The scope-wide pauses the task itself tracks, every few seconds: a Retry-After pause that
    /// is over (nothing is due or this server does not lead, so no answer will end it) ends, and
    /// one that has lasted `health.alertAfter` makes the scope unhealthy; then the start of
    /// a long pause is logged, and pauses whose time is up end.
    fn check_pauses(&mut self) {
        let now = Instant::now();
        if let Some(p) = self.metrics.pauses.get(PauseKind::RetryAfter) {
            let idle = self.inflight.is_empty() && self.tracker.count(Stage::Due) == 0;
            let leading = self.last_leadership == Leadership::Leading;
            if self.gate.closed_until(now).is_none() && (idle || !leading) {
                self.end_retry_after();
            } else if p.lasted >= self.cfg.leaderless_alert {
                self.metrics.set_unhealthy(
                    UNHEALTHY_THROTTLED,
                    &format!(
                        "the API server has held the scope's DELETEs back (Retry-After) for {}s: {}",
                        p.lasted.as_secs(),
                        p.detail
                    ),
                );
            }
        }
        self.metrics.pauses.check();
    }

    /// The Retry-After pause is over.
    pub(super) fn end_retry_after(&mut self) {
        if self.metrics.pauses.close(PauseKind::RetryAfter)
            && self.metrics.clear_unhealthy(UNHEALTHY_THROTTLED)
        {
            info!(
                scope = %self.scope,
                "The API server no longer holds the DELETEs of scope {} back", self.scope
            );
        }
    }

    /// The backoff pause: this server leads, DELETEs failed and every one still due waits for
    /// its retry (none due now, none in flight, no Retry-After pause); it ends at the next timer.
    fn update_backoff_pause(&mut self) {
        let now = Instant::now();
        let open = self.last_leadership == Leadership::Leading
            && self.inflight.is_empty()
            && self.gate.closed_until(now).is_none();
        // A refusal episode: the due pods wait for the next probe.
        let probing = self
            .refusals
            .holding()
            .filter(|(next, _)| *next > now && self.tracker.count(Stage::Due) > 0);
        let retrying =
            self.tracker.count(Stage::Backoff) > 0 && self.tracker.count(Stage::Due) == 0;
        if open && (probing.is_some() || retrying) {
            let until = match probing {
                Some((next, _)) => Some(next),
                None => self.tracker.next_timer(),
            };
            if self.backoff_until == Some(until) {
                return;
            }
            self.backoff_until = Some(until);
            let detail = match probing {
                Some((_, last)) => format!(
                    "DELETEs are refused: one DELETE probes at the end, {} pod(s) wait; last \
                     answer: {last}",
                    self.tracker.count(Stage::Due) + self.tracker.count(Stage::Backoff)
                ),
                None => format!(
                    "{} pod(s) wait for their retry after failed DELETEs; last answer: {}",
                    self.tracker.count(Stage::Backoff),
                    self.last_retry
                ),
            };
            self.metrics.pauses.open(PauseKind::Backoff, until, &detail);
        } else if self.backoff_until.take().is_some() {
            self.metrics.pauses.close(PauseKind::Backoff);
        }
    }

    fn update_gauges(&self) {
        ScopeMetrics::set(&self.metrics.tracked, self.tracker.len());
        ScopeMetrics::set(&self.metrics.scheduled, self.tracker.armed());
        ScopeMetrics::set(&self.metrics.due, self.tracker.count(Stage::Due));
        ScopeMetrics::set(&self.metrics.inflight, self.inflight.len());
        ScopeMetrics::set(&self.metrics.spared, self.tracker.spared_count());
        ScopeMetrics::set(&self.metrics.running, self.tracker.running_count());
        ScopeMetrics::set(&self.metrics.watch_only, self.tracker.watch_only_count());
        ScopeMetrics::set(&self.metrics.inflight_limit, self.pace.limit());
    }
}

/// Sleeps until `deadline`; never resolves when there is none.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(d) => sleep_until(d).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests;
