//! Self-watch mode: the leader of a scope watches its driver pods with kube-rs and feeds each
//! event to the scope's task as the same observation the JNI path feeds.
//!
//! # Guarantees
//! * **Only the leader watches.** A scope's watch starts when its election says `Leading` and
//!   stops at once when it says anything else (Following, Paused, NoQuorum, a step-down) or the
//!   engine closes. A fleet of N servers holds one pod watch per scope, not N.
//! * The watch's first list is the new leader's reconcile: every driver pod in it is observed
//!   with its own termination time, so a deadline keeps the clock it had under the old leader.
//! * After every list (the first, and a relist after `410 Gone`), tracked pods absent from it are
//!   cancelled and tombstoned without a DELETE (they are gone). When the watch stops, the scope
//!   task drops its records (`crate::sweeper` module `watched`): a follower keeps nothing that a
//!   later term could delete without a fresh list. Beside the informers (`scopeWatch`), it drops
//!   only what this watch alone told (other servers' pods); its informer's records stay.
//! * Any error of the watch (a failed list or watch, an expiry, a broken stream, an API server
//!   that went away) may have lost events: the scope drops its records as when the watch stops,
//!   and a fresh list arms them again, after a backoff (0.8 s doubling to 5 min, jittered, reset
//!   after a watch that lasted a minute past its list; none after an expiry, unless the last one
//!   was less than a minute ago): no tight loop, and no DELETE on facts a missed event may have
//!   made stale. The backoff is kept across leadership terms: a term that ends less than a minute
//!   after its list counts as a failed stream, so a leadership that flaps does not relist at once
//!   each time. A stream the server ends cleanly (its timeout) is resumed from its last
//!   resourceVersion. Building the Kubernetes client is retried from 1 s doubling to 1 min.
//! * A list proves nothing about the watch after it: the watch counts as working (and
//!   `watch_failing_ms` goes back to 0) only once it delivers an event or lasts a minute past its
//!   list. A watch failing that way for `health.alertAfter` makes the scope unhealthy,
//!   with the last error, until it works again or the term ends.
//! * The watch task is supervised ([`crate::restart`]): a panic drops the scope's records, makes
//!   the scope unhealthy with the reason, and the task runs again after a backoff.
//! * The pods are observed through Kyuubi 1.12.0's state mapping ([`crate::kyuubi_state`]).
//! * **What it asks for** ([`lists`]): in self-watch mode with Kyuubi's `POD` state source, only
//!   the driver pods past Running (a field selector on `status.phase`): running pods cost no list
//!   entry and no event. A pod that terminates enters the selection (ADDED) and counts as seen
//!   running just before ([`crate::tracker::Tracker::entered`]), so its deadline keeps the floor
//!   a pod seen running has; a pod that leaves it is observed as running again, never as deleted.
//!   The first state of a stream comes as a streaming list where the API server offers one, else
//!   as a list (a refused streaming list is no error).
//! * **What it keeps** ([`slim`]): each pod is decoded into [`WatchedPod`], the fields podsweep
//!   reads; the rest of the JSON is skipped, never built.
//!
//! # Caveats
//! * `watch_streams` in the scope status counts lists started (each leadership term's first
//!   list and every list after an error); a watch resumed from the last resourceVersion after its
//!   stream ended cleanly is the same stream and is not counted. `watching` is true from a list
//!   that worked to the next error: a leader whose list fails watches nothing.
//! * A leader whose list fails (or whose client cannot be built) is unhealthy at once, until a
//!   list works or the term ends; from the first error to the next list that works the scope is
//!   paused (`watch_failing`, until the next list), except after an expiry that relists at once.
//! * A pod that carries no termination time is dated by its first observation, so a relist
//!   restarts its clock.

mod lists;
mod metrics;
mod pace;
mod scopes;
mod slim;

pub use self::lists::{ListMode, WatchOptions, PHASE_SELECTOR, STREAMING_RETRY_AFTER};
pub use self::metrics::WatchMetrics;
pub use self::scopes::Watches;
pub use self::slim::WatchedPod;

use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use kube::runtime::watcher::{self, Event};
use kube::Api;
use tokio::sync::watch as status_watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use self::lists::{Lists, WATCH_TIMEOUT_SECS};
use self::pace::{Pace, RETRY_RESET_AFTER};
use crate::backoff::Backoff;
use crate::election::{Leadership, Status};
use crate::kyuubi_state::StateConfig;
use crate::metrics::{
    ScopeMetrics, UNHEALTHY_WATCH_CANNOT_LIST, UNHEALTHY_WATCH_FAILING, UNHEALTHY_WATCH_RESTARTED,
};
use crate::model::{AppState, EventKind};
use crate::pause::PauseKind;
use crate::restart::Restarts;
use crate::scope::Scope;
use crate::sweeper::{Command, Inbox, Uid};

/// Builds the Kubernetes client a scope's watch uses, and the namespace it watches.
pub type ClientSource =
    Arc<dyn Fn(Scope) -> BoxFuture<'static, Result<(kube::Client, String), String>> + Send + Sync>;

/// First wait after a failed client build; doubles up to [`CLIENT_RETRY_MAX`].
const CLIENT_RETRY_BASE: Duration = Duration::from_secs(1);
const CLIENT_RETRY_MAX: Duration = Duration::from_secs(60);

/// The engine's side of one scope's watch task.
pub struct WatchHandle {
    pub metrics: Arc<WatchMetrics>,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl WatchHandle {
    /// Stops the watch task; the returned handle resolves once it has ended.
    pub fn stop(self) -> JoinHandle<()> {
        self.cancel.cancel();
        self.task
    }
}

/// What the watch task of a scope needs.
pub struct WatchTask {
    pub scope: Scope,
    /// The scope's leadership, as its sweeper sees it.
    pub status: status_watch::Receiver<Status>,
    /// The scope task's queue.
    pub tx: Inbox,
    pub source: ClientSource,
    pub state: StateConfig,
    /// The scope's health: a watch task that fails, or a watch that keeps failing for
    /// `healthy_after`, makes it unhealthy.
    pub health: Arc<ScopeMetrics>,
    pub healthy_after: Duration,
    /// Beside the JVM's informers (whose events reach the same task in another order): the
    /// watch only adds observations, marked as its own (`Command::Watched`). It sends no
    /// `Listed` (a pod an informer reported after the list was taken would be taken for gone);
    /// when it stops or fails it sends `ScopeUnwatched`, which drops only what it alone told
    /// (the informers' records stay).
    pub additive: bool,
    /// The field selector and the streaming lists ([`lists`]).
    pub options: WatchOptions,
}

impl WatchTask {
    /// What the scope task is told when this watch stops or fails: every record goes
    /// (self-watch mode), or those only this watch told (beside the informers).
    fn unwatched(&self) -> Command {
        match self.additive {
            true => Command::ScopeUnwatched,
            false => Command::Unwatched,
        }
    }
}

/// Starts the watch task of a scope on the current runtime.
pub fn spawn(t: WatchTask) -> WatchHandle {
    let selector = lists::selector(t.options, &t.state, t.additive);
    let metrics = Arc::new(WatchMetrics::new(selector));
    let cancel = CancellationToken::new();
    let task = tokio::spawn(supervise(t, metrics.clone(), cancel.clone()));
    WatchHandle {
        metrics,
        cancel,
        task,
    }
}

/// Kubernetes clients from Kyuubi's keys (with the per-scope overlay), for watches: the read
/// timeout is longer than a watch request lasts, so a quiet watch is not cut.
pub fn kube_clients(raw: std::collections::HashMap<String, String>) -> ClientSource {
    let raw = Arc::new(raw);
    Arc::new(move |scope: Scope| {
        let conf = crate::kube_client::scope_conf(&raw, &scope);
        Box::pin(async move {
            let ns = crate::kube_client::namespace(&conf);
            let mut cfg = crate::kube_client::build_config(&conf)
                .await
                .map_err(|e| e.to_string())?;
            cfg.read_timeout = Some(Duration::from_secs(u64::from(WATCH_TIMEOUT_SECS) + 40));
            let client = kube::Client::try_from(cfg).map_err(|e| e.to_string())?;
            Ok((client, ns))
        })
    })
}

/// The scope task went away (the engine closed or dropped it).
struct Gone;

/// Runs the watch task; after a panic, the scope drops its records (events were lost), reports
/// unhealthy with the reason, and the task runs again after a backoff.
async fn supervise(mut t: WatchTask, metrics: Arc<WatchMetrics>, cancel: CancellationToken) {
    let mut restarts = Restarts::new(
        "pod watch",
        t.scope.to_string(),
        t.health.clone(),
        UNHEALTHY_WATCH_RESTARTED,
        t.healthy_after,
    );
    let mut pace = Pace::new();
    let mut lists = Lists::new(t.options.streaming_list);
    loop {
        let Err(what) = restarts
            .guard(run(&mut t, &metrics, &cancel, &mut pace, &mut lists))
            .await
        else {
            return;
        };
        metrics.watching.store(false, Relaxed);
        metrics.failed(format!("the watch task failed: {what}"));
        pace.ended(true, false);
        let delay = restarts.failed(&what);
        if t.tx.send(t.unwatched()).is_err() {
            return;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

async fn run(
    t: &mut WatchTask,
    metrics: &WatchMetrics,
    cancel: &CancellationToken,
    pace: &mut Pace,
    lists: &mut Lists,
) {
    loop {
        // Wait until this server leads the scope.
        loop {
            if t.status.borrow_and_update().leadership == Leadership::Leading {
                break;
            }
            tokio::select! {
                _ = cancel.cancelled() => return,
                changed = t.status.changed() => if changed.is_err() { return },
            }
        }
        info!(scope = %t.scope, "Leading scope {}: watching its driver pods", t.scope);
        let mut status = t.status.clone();
        let why = tokio::select! {
            _ = cancel.cancelled() => Err(Gone),
            r = not_leading(&mut status) => r,
            Gone = watch_pods(t, metrics, pace, lists) => Err(Gone),
        };
        // A stream cut short by the term's end counts as one that failed soon after its list.
        pace.ended(false, false);
        metrics.watching.store(false, Relaxed);
        metrics.working();
        t.health
            .clear_unhealthy(UNHEALTHY_WATCH_FAILING | UNHEALTHY_WATCH_CANNOT_LIST);
        t.health.pauses.close(PauseKind::WatchFailing);
        let sent = t.tx.send(t.unwatched()).map_err(|_| ());
        match why {
            Ok(reason) if sent.is_ok() => {
                info!(scope = %t.scope, "Stopped watching the driver pods of scope {} ({reason})", t.scope);
            }
            _ => return,
        }
    }
}

/// Resolves with the new state's description once the scope is not `Leading` any more.
async fn not_leading(status: &mut status_watch::Receiver<Status>) -> Result<String, Gone> {
    loop {
        {
            let st = status.borrow_and_update();
            if st.leadership != Leadership::Leading {
                return Ok(format!("{}: {}", st.leadership.as_str(), st.reason));
            }
        }
        status.changed().await.map_err(|_| Gone)?;
    }
}

/// Watches the scope's pods until the scope task goes away (never returns otherwise).
async fn watch_pods(
    t: &WatchTask,
    metrics: &WatchMetrics,
    pace: &mut Pace,
    lists: &mut Lists,
) -> Gone {
    let (client, ns) = match build_client(t, metrics).await {
        Ok(c) => c,
        Err(gone) => return gone,
    };
    let api: Api<WatchedPod> = Api::namespaced(client, &ns);
    let mut last_error: Option<String> = None;
    loop {
        pace.list(&t.health.pauses).await;
        let mut listed = false;
        let mode = lists.next_mode();
        metrics.stream_mode(mode);
        let stream = stream_once(t, metrics, &api, mode, &mut last_error, &mut listed);
        let error = match stream.await {
            Ok(e) => e,
            Err(gone) => return gone,
        };
        if mode == ListMode::Streaming && !listed && lists.refused(&error) {
            // Not offered here: a list at once, no error (what the partial stream told goes).
            info!(
                scope = %t.scope,
                "The API server does not offer streaming lists of the pods of scope {} ({error}): \
                 listing them instead, and streaming again in {} minutes",
                t.scope,
                STREAMING_RETRY_AFTER.as_secs() / 60
            );
            if t.tx.send(t.unwatched()).is_err() {
                return Gone;
            }
            continue;
        }
        // Nothing is watched until the next list has worked.
        metrics.watching.store(false, Relaxed);
        metrics.failed(error.to_string());
        let expired = note_error(t, &error, &mut last_error);
        // Events may have been missed: what the watch told is dropped, and the next list arms
        // it again from the pods themselves.
        if t.tx.send(t.unwatched()).is_err() {
            return Gone;
        }
        if t.tx.is_closed() {
            return Gone;
        }
        pace.ended(true, expired);
        // An expiry that relists at once is routine, not a pause.
        if !(expired && pace.next_at.is_none()) {
            t.health.pauses.open(
                PauseKind::WatchFailing,
                pace.next_at,
                &format!(
                    "the pod watch {}: {error}; its pods are listed again at the end",
                    if listed { "failed" } else { "cannot list" }
                ),
            );
        }
        // Unhealthy once the pause is there: a reader never sees the reason without its pause.
        report_failing(t, metrics);
        if !listed {
            cannot_list(t, &format!("its list failed: {error}"));
        }
    }
}

/// This server leads the scope but watches nothing: its list (or the client it needs) fails.
/// The scope is unhealthy at once, until a list works or the term ends.
fn cannot_list(t: &WatchTask, why: &str) {
    t.health.set_unhealthy(
        UNHEALTHY_WATCH_CANNOT_LIST,
        &format!("this server leads the scope but cannot list its driver pods ({why}): it watches nothing"),
    );
}

/// A watch that has failed, list after list, for `healthy_after` makes the scope unhealthy.
fn report_failing(t: &WatchTask, metrics: &WatchMetrics) {
    let failing = metrics.failing_for();
    if failing >= t.healthy_after {
        let why = metrics.last_error();
        t.health.set_unhealthy(
            UNHEALTHY_WATCH_FAILING,
            &format!(
                "its pod watch has failed for {}s, list after list: {why}",
                failing.as_secs()
            ),
        );
    }
}

/// The watch works again: the scope's watch health is cleared.
fn watch_works(t: &WatchTask, metrics: &WatchMetrics) {
    metrics.working();
    t.health.clear_unhealthy(UNHEALTHY_WATCH_FAILING);
}

/// Builds the scope's client, retrying with backoff.
async fn build_client(
    t: &WatchTask,
    metrics: &WatchMetrics,
) -> Result<(kube::Client, String), Gone> {
    let mut backoff = Backoff::exact(CLIENT_RETRY_BASE, CLIENT_RETRY_MAX);
    loop {
        match (t.source)(t.scope.clone()).await {
            Ok(c) => return Ok(c),
            Err(e) => {
                let wait = backoff.next_delay();
                metrics.failed(format!("cannot build the Kubernetes client: {e}"));
                cannot_list(t, &format!("cannot build the Kubernetes client: {e}"));
                t.health.pauses.open(
                    PauseKind::WatchFailing,
                    Some(Instant::now() + wait),
                    &format!("cannot build the Kubernetes client to watch the pods: {e}"),
                );
                warn!(
                    scope = %t.scope,
                    "Cannot build the Kubernetes client to watch scope {}: {e}; retrying in {wait:?}",
                    t.scope
                );
                if t.tx.is_closed() {
                    return Err(Gone);
                }
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// One kube-rs watcher, from its list until its first error (returned). A stream that ends
/// cleanly (the server's timeout) is resumed by kube-rs from its last resourceVersion.
async fn stream_once(
    t: &WatchTask,
    metrics: &WatchMetrics,
    api: &Api<WatchedPod>,
    mode: ListMode,
    last_error: &mut Option<String>,
    listed_ok: &mut bool,
) -> Result<watcher::Error, Gone> {
    let cfg = lists::config(metrics.selector, mode);
    let mut stream = std::pin::pin!(watcher::watcher(api.clone(), cfg));
    let selected = metrics.selector.is_some();
    let mut listed: Option<HashSet<Uid>> = None;
    // Once the list is done: when the watch has lasted long enough to count as working.
    let mut proven_at: Option<Instant> = None;
    loop {
        let next = tokio::select! {
            next = stream.next() => next,
            _ = sleep_until_some(proven_at) => {
                proven_at = None;
                watch_works(t, metrics);
                continue;
            }
        };
        let Some(event) = next else {
            // kube-rs's watcher never ends; if it did, start again.
            return Ok(watcher::Error::NoResourceVersion);
        };
        match event {
            Ok(Event::Init) => {
                metrics.streams.fetch_add(1, Relaxed);
                listed = Some(HashSet::new());
                debug!(
                    scope = %t.scope,
                    "Listing the driver pods of scope {} ({})", t.scope, mode.as_str()
                );
            }
            Ok(Event::InitApply(pod)) => {
                let seen = Seen::Listed(listed.as_mut());
                forward(t, metrics, &pod, EventKind::Add, seen)?;
            }
            Ok(Event::InitDone) => {
                // A list proves nothing about the watch that follows it; but the scope sees its
                // pods again: it is no longer held back.
                proven_at = Some(Instant::now() + RETRY_RESET_AFTER);
                *listed_ok = true;
                metrics.watching.store(true, Relaxed);
                t.health.clear_unhealthy(UNHEALTHY_WATCH_CANNOT_LIST);
                t.health.pauses.close(PauseKind::WatchFailing);
                if last_error.take().is_some() {
                    info!(scope = %t.scope, "Watching the driver pods of scope {} again", t.scope);
                }
                let uids = listed.take().unwrap_or_default();
                if !t.additive {
                    t.tx.send(Command::Listed(Box::new(uids)))
                        .map_err(|_| Gone)?;
                }
            }
            Ok(Event::Apply(pod)) => {
                watch_works(t, metrics);
                let seen = Seen::Watched { selected };
                forward(t, metrics, &pod, EventKind::Update, seen)?;
            }
            Ok(Event::Delete(pod)) => {
                watch_works(t, metrics);
                let seen = Seen::Watched { selected };
                forward(t, metrics, &pod, EventKind::Delete, seen)?;
            }
            Err(e) => return Ok(e),
        }
    }
}

/// Where a pod event comes from.
enum Seen<'a> {
    /// A list (or a streaming list's initial events): its UIDs are noted.
    Listed(Option<&'a mut HashSet<Uid>>),
    /// The watch after its list; `selected`: it has a field selector ([`lists`]).
    Watched { selected: bool },
}

/// Passes one pod event on as an observation (driver pods only); during a list, notes its UID.
///
/// With a field selector, a watch event is the pod's entry into the selection (ADDED) or a
/// change inside it (MODIFIED, of a pod podsweep already knows): the pod was not terminated just
/// before an entry, which the tracker counts as seen running then (`Command::Entered`). A DELETED
/// event without a deletionTimestamp is the pod leaving the selection (phases past Running:
/// it is Pending or Running again): it is observed as running, never as deleted.
fn forward(
    t: &WatchTask,
    metrics: &WatchMetrics,
    pod: &WatchedPod,
    kind: EventKind,
    seen: Seen<'_>,
) -> Result<(), Gone> {
    metrics.events.fetch_add(1, Relaxed);
    let left = matches!(seen, Seen::Watched { selected: true })
        && kind == EventKind::Delete
        && pod.metadata.deletion_timestamp.is_none();
    let kind = if left { EventKind::Update } else { kind };
    let Some(mut obs) = pod.observation(&t.state, kind) else {
        return Ok(());
    };
    if !obs.is_kyuubi_driver() || crate::names::check_pod_name(&obs.pod_name).is_err() {
        return Ok(());
    }
    if left {
        obs.state = AppState::Running;
        obs.annotations = None;
    }
    let entered = matches!(seen, Seen::Watched { selected: true })
        && !left
        && obs.state.is_terminated()
        && !obs.is_cleaned();
    if let Seen::Listed(Some(l)) = seen {
        l.insert(Uid::new(&obs.pod_uid));
    }
    let cmd = match (t.additive, entered) {
        (true, _) => Command::Watched(obs),
        (false, true) => Command::Entered(obs),
        (false, false) => Command::Observe(obs),
    };
    t.tx.send(cmd).map_err(|_| Gone)
}

/// An expiry is routine (INFO); another error is a WARN when it differs from the last one, else
/// DEBUG (the backoff spaces the retries). True for an expiry (410 Gone).
fn note_error(t: &WatchTask, e: &watcher::Error, last: &mut Option<String>) -> bool {
    if let watcher::Error::WatchError(status) = e {
        if status.code == 410 {
            info!(
                scope = %t.scope,
                "The pod watch of scope {} expired (410 Gone): listing again", t.scope
            );
            return true;
        }
    }
    let text = e.to_string();
    if last.as_deref() == Some(text.as_str()) {
        debug!(scope = %t.scope, "Pod watch of scope {} failed again: {text}", t.scope);
    } else {
        warn!(
            scope = %t.scope,
            "Pod watch of scope {} failed: {text}; its pods are listed again after a backoff",
            t.scope
        );
        *last = Some(text);
    }
    false
}

/// Sleeps until `deadline`; never resolves when there is none.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
