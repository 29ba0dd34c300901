//! Leader election: one small interface, several backends.
//!
//! Every scope campaigns on its own, with its own leader; the ZooKeeper and etcd backends carry
//! all the scopes of one server (one backend instance) on one coordination session (one
//! ZooKeeper session, or one etcd lease with one keep-alive), through one shared campaign loop
//! (`driver`). A backend reports what it knows through a [`LeaderSignal`]; the sweeper reads it
//! through an [`ElectionHandle`].
//!
//! # Guarantees
//! * [`ElectionHandle::may_act`] is true only while the backend says `Leading` **and** the local
//!   monotonic lease deadline set by the backend has not passed. A backend extends the deadline
//!   only after a successful round trip to its server, counted from when the request was *sent*,
//!   so a process that was frozen wakes up with an expired lease and sends nothing.
//! * Leadership is an efficiency lock, not a correctness lock: the Kubernetes API cannot check a
//!   fencing token. Two leaders may overlap for at most the lease margin; the cost is a duplicate
//!   DELETE that ends in 404 or 409.
//!
//! * [`ElectionHandle::step_down`] releases leadership (the campaign is cancelled, so the backend
//!   resigns) and keeps this candidate out of the election for the hold time; then it campaigns
//!   again. A candidate that steps down every time it leads therefore holds leadership at most
//!   once per hold time.
//! * [`Authority::within_lease`] drops a DELETE still in flight (connecting, or waiting for its
//!   answer) the moment the lease deadline passes without renewal, so no request is written
//!   after the lease lapsed, however long the connection takes.
//!
//! * A panic of a scope's election task is caught ([`crate::restart`]): the scope reports
//!   `Following` without a lease and unhealthy with the reason, and campaigns again after a
//!   backoff. A ZooKeeper latch node of the failed campaign is deleted by its client; an etcd key
//!   stays on the lease and is won again by the next campaign.
//!
//! # Caveats
//! * A backend must release leadership before its campaign future returns after cancellation.
//! * A campaign that panicked does not give its use of the server's shared session back: the
//!   session then stays open until the engine is dropped, not until its last scope ends.

mod driver;
pub mod etcd;
pub mod inspect;
pub mod layout;
pub mod local;
pub mod store;
pub mod zookeeper;

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, Instant};
use tokio_util::sync::CancellationToken;

use crate::identity::ElectionKeys;
use crate::metrics::{ScopeMetrics, UNHEALTHY_ELECTION_RESTARTED};
use crate::pause::PauseKind;
use crate::restart::Restarts;
use crate::scope::Scope;

/// What a candidate knows about its own leadership of one scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// Another candidate leads, or the election has not been decided yet.
    Following,
    /// This candidate leads and may delete.
    Leading,
    /// This candidate led, but contact with the backend is in doubt (disconnected, or close to its
    /// lease deadline). It sends nothing until contact is confirmed again.
    Paused,
    /// The backend cannot be reached; nobody here may act.
    NoQuorum,
}

impl Leadership {
    pub fn as_str(self) -> &'static str {
        match self {
            Leadership::Following => "FOLLOWING",
            Leadership::Leading => "LEADING",
            Leadership::Paused => "PAUSED",
            Leadership::NoQuorum => "NO_QUORUM",
        }
    }
}

/// A leadership state with when it began and why.
#[derive(Clone, Debug)]
pub struct Status {
    pub leadership: Leadership,
    pub since: Instant,
    pub reason: String,
}

type LeaseCell = Arc<Mutex<Option<Instant>>>;

/// The backend's side: how a campaign reports its state.
#[derive(Clone)]
pub struct LeaderSignal {
    status: Arc<watch::Sender<Status>>,
    lease: LeaseCell,
}

impl LeaderSignal {
    fn new() -> (Self, watch::Receiver<Status>, LeaseCell) {
        let (tx, rx) = watch::channel(Status {
            leadership: Leadership::Following,
            since: Instant::now(),
            reason: "campaign starting".into(),
        });
        let lease: LeaseCell = Arc::default();
        (
            LeaderSignal {
                status: Arc::new(tx),
                lease: lease.clone(),
            },
            rx,
            lease,
        )
    }

    fn set_lease(&self, until: Option<Instant>) {
        let mut cell = self.lease.lock().unwrap_or_else(|p| p.into_inner());
        *cell = until;
    }

    fn transition(&self, to: Leadership, reason: &str) {
        self.status.send_if_modified(|s| {
            if s.leadership == to {
                // Same state, new cause (e.g. a different connection error): keep `since`.
                if s.reason != reason {
                    s.reason = reason.to_owned();
                    return true;
                }
                return false;
            }
            *s = Status {
                leadership: to,
                since: Instant::now(),
                reason: reason.to_owned(),
            };
            true
        });
    }

    /// Leading, with the right to act until `until` (a local monotonic deadline).
    pub fn lead_until(&self, until: Instant, reason: &str) {
        self.set_lease(Some(until));
        self.transition(Leadership::Leading, reason);
    }

    /// Moves the lease deadline of a current leader; does not change the state.
    pub fn extend_until(&self, until: Instant) {
        self.set_lease(Some(until));
    }

    /// Still holding leadership on the server, but acting is suspended.
    pub fn pause(&self, reason: &str) {
        self.transition(Leadership::Paused, reason);
    }

    pub fn follow(&self, reason: &str) {
        self.set_lease(None);
        self.transition(Leadership::Following, reason);
    }

    pub fn no_quorum(&self, reason: &str) {
        self.set_lease(None);
        self.transition(Leadership::NoQuorum, reason);
    }

    pub fn current(&self) -> Leadership {
        self.status.borrow().leadership
    }
}

/// A leader-election backend.
pub trait Backend: Send + Sync + 'static {
    /// Short name for logs and status: `local`, `zookeeper`, `etcd`.
    fn name(&self) -> &'static str;

    /// Campaigns for `scope` as `identity` until `cancel` fires, reporting through `signal`.
    ///
    /// The future must survive backend outages (retrying with backoff) and, once `cancel` fires,
    /// release leadership before it returns.
    fn campaign(
        &self,
        scope: Scope,
        identity: String,
        signal: LeaderSignal,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ()>;

    /// Whether stepping down hands leadership to another server (false for `local`, where every
    /// server leads its own scopes).
    fn can_step_down(&self) -> bool {
        true
    }

    /// The records this server shares with the other servers of its scopes
    /// ([`store::ScopeStore`]), through its session; `None` for `local`, which shares nothing.
    fn store(&self, _identity: &Identity) -> Option<Arc<dyn store::ScopeStore>> {
        None
    }

    /// Whether this server is known to be out of contact with the backend now (its session in
    /// doubt or lost, or its last attempt to open one failed): what it hands to a scope's leader
    /// through the store would not reach it soon. Never for `local`.
    fn out_of_contact(&self, _identity: &str) -> bool {
        false
    }

    /// Whether every server campaigns in the servers' own election for its whole life
    /// ([`inspect::presence_scope`]), so that `podsweep status` and `podsweep uninstall` see the
    /// servers whose scopes are all idle: ZooKeeper and etcd, the backends those verbs read.
    fn lists_servers(&self) -> bool {
        false
    }
}

/// A request to give up leadership for a while.
struct StepDown {
    hold: Duration,
    reason: String,
}

/// How long campaigns wait for a server's identity to be confirmed ([`Identity::pending`])
/// before they go on under the provisional one.
pub const IDENTITY_WAIT: Duration = Duration::from_secs(120);

/// This server's id in the elections. Usually fixed when the engine starts; a Kyuubi server that
/// binds port 0 learns its address only after podsweep started, so its identity may be
/// *pending*: campaigns wait (at most [`IDENTITY_WAIT`]) until it is confirmed, and nothing is
/// deleted meanwhile (pods are tracked and wait).
#[derive(Clone, Debug)]
pub struct Identity {
    state: Arc<watch::Sender<IdentityState>>,
    warned: Arc<std::sync::atomic::AtomicBool>,
}

#[derive(Clone, Debug)]
struct IdentityState {
    id: String,
    settled: bool,
}

impl Identity {
    /// An identity known from the start.
    pub fn fixed(id: &str) -> Self {
        Self::new(id, true)
    }

    /// A provisional identity, to be confirmed by [`Identity::confirm`].
    pub fn pending(provisional: &str) -> Self {
        Self::new(provisional, false)
    }

    fn new(id: &str, settled: bool) -> Self {
        let (tx, _) = watch::channel(IdentityState {
            id: id.to_owned(),
            settled,
        });
        Identity {
            state: Arc::new(tx),
            warned: Arc::default(),
        }
    }

    /// The id now (the provisional one until confirmed).
    pub fn current(&self) -> String {
        self.state.borrow().id.clone()
    }

    /// Whether the id is final.
    pub fn is_settled(&self) -> bool {
        self.state.borrow().settled
    }

    /// Makes `id` this server's final identity; campaigns waiting for it go on. Returns the id it
    /// replaces.
    pub fn confirm(&self, id: &str) -> String {
        let mut before = String::new();
        self.state.send_modify(|s| {
            before = std::mem::replace(&mut s.id, id.to_owned());
            s.settled = true;
        });
        before
    }

    /// Waits until the identity is confirmed, or `wait` has passed (then, once, a WARN: the
    /// provisional id stays in use); returns the id to campaign as.
    pub async fn settled(&self, wait: Duration) -> String {
        let mut rx = self.state.subscribe();
        if tokio::time::timeout(wait, rx.wait_for(|s| s.settled))
            .await
            .is_err()
            && !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                "This server's identity was not confirmed within {wait:?} (the address the \
                 Kyuubi server binds); podsweep campaigns as {}",
                self.current()
            );
        }
        self.current()
    }
}

/// The keys a scope's election runs under, as they become known ([`crate::identity`]): the
/// campaign starts with the first and starts again under each later one.
pub type ElectionKey = crate::identity::KeyStream;

/// Far enough ahead to never expire in a process's life, small enough to never overflow.
pub(crate) const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The sweeper's side of one scope's election.
pub struct ElectionHandle {
    status: watch::Receiver<Status>,
    lease: LeaseCell,
    /// podsweep 0.1's election, won first ([`crate::identity`]); leading for ever when there is
    /// none.
    gate: watch::Receiver<Status>,
    gate_lease: LeaseCell,
    /// The keys the election runs under now, once known.
    keys: watch::Receiver<Option<ElectionKeys>>,
    /// The records shared with the scope's other servers, through this backend.
    store: Option<Arc<dyn store::ScopeStore>>,
    cancel: CancellationToken,
    step_down: mpsc::UnboundedSender<StepDown>,
    can_step_down: bool,
    task: Option<JoinHandle<()>>,
    /// This server's identity in the election ([`ElectionHandle::shared`]).
    identity: Identity,
}

impl ElectionHandle {
    /// Starts a campaign on the current tokio runtime; a panic of its task is logged, reported
    /// in the status and restarted, and nothing else sees it.
    pub fn start(backend: &Arc<dyn Backend>, scope: Scope, identity: String) -> Self {
        let metrics = Arc::new(ScopeMetrics::default());
        Self::supervised(backend, scope, identity, metrics, Duration::from_secs(120))
    }

    /// [`ElectionHandle::start`] for a scope whose health is reported in `metrics`: a panic of
    /// the election task makes the scope unhealthy (with the reason) until the restarted task has
    /// run `healthy_after` without failing. Until it runs again the scope reports `Following`
    /// (no lease): a task that died while leading never keeps reading `Leading`.
    pub fn supervised(
        backend: &Arc<dyn Backend>,
        scope: Scope,
        identity: String,
        metrics: Arc<ScopeMetrics>,
        healthy_after: Duration,
    ) -> Self {
        let key = crate::identity::fixed_keys(scope.clone());
        Self::supervised_as(
            backend,
            scope,
            key,
            Identity::fixed(&identity),
            metrics,
            healthy_after,
        )
    }

    /// [`ElectionHandle::supervised`] for an identity that may still be pending and an election
    /// key that may still be read: the campaign waits for both (the identity at most
    /// [`IDENTITY_WAIT`], [`Identity::settled`]), reporting `Following` with the reason and a
    /// pause with its cause and end. `scope` names the task in logs.
    pub fn supervised_as(
        backend: &Arc<dyn Backend>,
        scope: Scope,
        key: ElectionKey,
        identity: Identity,
        metrics: Arc<ScopeMetrics>,
        healthy_after: Duration,
    ) -> Self {
        let (signal, status, lease) = LeaderSignal::new();
        let (gate_signal, gate, gate_lease) = LeaderSignal::new();
        let (keys_tx, keys) = watch::channel(None);
        let store = backend.store(&identity);
        let cancel = CancellationToken::new();
        let (step_down, requests) = mpsc::unbounded_channel();
        let restarts = Restarts::new(
            "election",
            scope.to_string(),
            metrics.clone(),
            UNHEALTHY_ELECTION_RESTARTED,
            healthy_after,
        );
        let task = tokio::spawn(supervise(
            backend.clone(),
            key,
            identity.clone(),
            Signals {
                main: signal,
                gate: gate_signal,
                keys: keys_tx,
            },
            cancel.clone(),
            requests,
            restarts,
        ));
        ElectionHandle {
            status,
            lease,
            gate,
            gate_lease,
            keys,
            store,
            cancel,
            step_down,
            can_step_down: backend.can_step_down(),
            task: Some(task),
            identity,
        }
    }

    /// The records this scope shares with the other servers of its election, once its
    /// election key is known: the store, the key the election runs under now, and this server's
    /// id in the election. `None` for `local` (nothing shared) and until the key is read.
    pub fn shared(&self) -> Option<(Arc<dyn store::ScopeStore>, Scope, String)> {
        let store = self.store.clone()?;
        let key = self.keys()?.key;
        Some((store, key, self.identity.current()))
    }

    /// Gives up leadership and stays out of the election for `hold`; false (nothing done) when
    /// the backend has no other candidate to hand over to (`local`).
    pub fn step_down(&self, hold: Duration, reason: &str) -> bool {
        self.can_step_down
            && self
                .step_down
                .send(StepDown {
                    hold,
                    reason: reason.to_owned(),
                })
                .is_ok()
    }

    /// The elections whose participants could take this scope over: podsweep 0.1's, which every
    /// server joins first ([`crate::identity`], layout 1), and the scope's own, which only that
    /// election's winner joins. Empty until the keys are read.
    pub fn participant_keys(&self) -> Vec<Scope> {
        self.keys()
            .map(|k| k.legacy.into_iter().chain([k.key]).collect())
            .unwrap_or_default()
    }

    /// The keys the election runs under now (`None` until they are read).
    pub fn keys(&self) -> Option<ElectionKeys> {
        self.keys.borrow().clone()
    }

    /// The records this server shares with the scope's other servers (`None` for `local`).
    pub fn store(&self) -> Option<Arc<dyn store::ScopeStore>> {
        self.store.clone()
    }

    /// True when a DELETE may be sent now: leading, and the lease deadline is still ahead.
    pub fn may_act(&self) -> bool {
        self.authority().may_act()
    }

    /// A cheap, cloneable view that answers [`ElectionHandle::may_act`] from another task.
    pub fn authority(&self) -> Authority {
        Authority {
            status: self.status.clone(),
            lease: self.lease.clone(),
            gate: self.gate.clone(),
            gate_lease: self.gate_lease.clone(),
        }
    }

    /// The current lease deadline, if any: the earlier of the scope's election and the election
    /// won before it.
    pub fn lease_deadline(&self) -> Option<Instant> {
        self.authority().deadline()
    }

    pub fn status(&self) -> Status {
        self.status.borrow().clone()
    }

    /// A receiver that wakes on every state change.
    pub fn watch(&self) -> watch::Receiver<Status> {
        self.status.clone()
    }

    /// Stops campaigning and waits until leadership is released.
    pub async fn close(mut self) {
        self.cancel.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

/// Answers "may this candidate act now?" for one scope; checked right before each DELETE.
#[derive(Clone)]
pub struct Authority {
    status: watch::Receiver<Status>,
    lease: LeaseCell,
    gate: watch::Receiver<Status>,
    gate_lease: LeaseCell,
}

impl Authority {
    /// Runs `request` while the lease holds: it is dropped (and `None` returned) when the lease
    /// deadline passes without renewal, or at once if there is no lease.
    pub async fn within_lease<F: Future>(&self, request: F) -> Option<F::Output> {
        tokio::pin!(request);
        loop {
            let until = self.deadline()?;
            tokio::select! {
                biased;
                out = &mut request => return Some(out),
                _ = sleep_until(until) => {}
            }
            if !self.may_act() {
                return None;
            }
        }
    }

    /// The earlier lease deadline of the scope's election and of the one won before it.
    fn deadline(&self) -> Option<Instant> {
        let read = |cell: &LeaseCell| *cell.lock().unwrap_or_else(|p| p.into_inner());
        Some(read(&self.lease)?.min(read(&self.gate_lease)?))
    }

    pub fn may_act(&self) -> bool {
        let leading = |s: &watch::Receiver<Status>| s.borrow().leadership == Leadership::Leading;
        if !leading(&self.status) || !leading(&self.gate) {
            return false;
        }
        matches!(self.deadline(), Some(until) if Instant::now() < until)
    }
}

impl Drop for ElectionHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// The signals one scope's campaigns report through: its election, and the election won before
/// it (podsweep 0.1's, [`crate::identity`]), which leads for ever when there is none.
struct Signals {
    main: LeaderSignal,
    gate: LeaderSignal,
    /// The keys the campaigns run under now.
    keys: watch::Sender<Option<ElectionKeys>>,
}

/// Runs [`campaigns`] until `cancel` fires, under the first keys `key` yields and again under
/// each later one; after a panic, reports `Following` (no lease) with the reason, and runs them
/// again after a backoff.
async fn supervise(
    backend: Arc<dyn Backend>,
    mut key: ElectionKey,
    identity: Identity,
    signals: Signals,
    cancel: CancellationToken,
    mut requests: mpsc::UnboundedReceiver<StepDown>,
    mut restarts: Restarts,
) {
    use futures::StreamExt;
    let signal = &signals.main;
    let metrics = restarts.metrics().clone();
    if !identity.is_settled() {
        let why = format!(
            "waiting for this server's identity (provisionally {}): the address the Kyuubi \
             server binds; at the end it campaigns under the provisional one",
            identity.current()
        );
        signal.follow(&why);
        let pauses = &metrics.pauses;
        pauses.open(
            PauseKind::ServerIdPending,
            Some(Instant::now() + IDENTITY_WAIT),
            &why,
        );
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = identity.settled(IDENTITY_WAIT) => {}
        }
        pauses.close(PauseKind::ServerIdPending);
    }
    let mut keys = match futures::FutureExt::now_or_never(key.next()) {
        Some(Some(keys)) => keys,
        _ => {
            signal
                .follow("reading which cluster and namespace the scope cleans (its election key)");
            tokio::select! {
                _ = cancel.cancelled() => return,
                keys = key.next() => match keys {
                    Some(keys) => keys,
                    None => return,
                },
            }
        }
    };
    loop {
        signals.keys.send_replace(Some(keys.clone()));
        let (ran, new) = {
            let term = cancel.child_token();
            let run = campaigns(&backend, &keys, &identity, &signals, &term, &mut requests);
            let guarded = restarts.guard(run);
            tokio::pin!(guarded);
            tokio::select! {
                ran = &mut guarded => (ran, None),
                next = key.next() => {
                    // A new key (the cluster's identity changed): leave the old election first.
                    term.cancel();
                    (guarded.await, next)
                }
            }
        };
        if let Some(new) = new {
            signal.follow(&format!(
                "the election key changed from {} to {}; campaigning under the new one",
                keys.key, new.key
            ));
            keys = new;
            if ran.is_ok() {
                continue;
            }
        }
        let Err(what) = ran else {
            return;
        };
        let delay = restarts.failed(&what);
        signal.follow(&format!(
            "the election task failed ({what}); campaigning again in {delay:?}"
        ));
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = sleep(delay) => {}
        }
    }
}

/// Runs the backend's campaigns for one scope: one at a time, a new one after each step-down and
/// its hold time, until `cancel` fires.
async fn campaigns(
    backend: &Arc<dyn Backend>,
    keys: &ElectionKeys,
    identity: &Identity,
    signals: &Signals,
    cancel: &CancellationToken,
    requests: &mut mpsc::UnboundedReceiver<StepDown>,
) {
    loop {
        let term = cancel.child_token();
        let mut campaign = campaign(backend, keys, identity.current(), signals, term.clone());
        let request = tokio::select! {
            _ = &mut campaign => return,
            r = requests.recv() => r,
        };
        term.cancel();
        campaign.await;
        let Some(StepDown { hold, reason }) = request else {
            return;
        };
        signals.main.follow(&format!(
            "stepped down: {reason}; back in the election in {hold:?}"
        ));
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = sleep(hold) => {}
        }
        while requests.try_recv().is_ok() {}
    }
}

/// One campaign under `keys`: the scope's own election, after podsweep 0.1's when it joins it.
fn campaign(
    backend: &Arc<dyn Backend>,
    keys: &ElectionKeys,
    identity: String,
    signals: &Signals,
    cancel: CancellationToken,
) -> BoxFuture<'static, ()> {
    let main = signals.main.clone();
    match &keys.legacy {
        None => {
            signals
                .gate
                .lead_until(Instant::now() + FOREVER, "no election to win first");
            backend.campaign(keys.key.clone(), identity, main, cancel)
        }
        Some(legacy) => Box::pin(layered(
            backend.clone(),
            keys.key.clone(),
            legacy.clone(),
            identity,
            main,
            signals.gate.clone(),
            cancel,
        )),
    }
}

/// Campaigns in `legacy` (podsweep 0.1's election) and, only while this candidate leads there,
/// in `key`: so a 0.1 server, which campaigns in `legacy` alone, and this one never lead at once.
/// The scope's election is left as soon as the first one is lost (Following or NoQuorum; a
/// Paused first election pauses the second on its own, on the same session).
async fn layered(
    backend: Arc<dyn Backend>,
    key: Scope,
    legacy: Scope,
    identity: String,
    main: LeaderSignal,
    first_signal: LeaderSignal,
    cancel: CancellationToken,
) {
    let mut gate = first_signal.status.subscribe();
    // Not a child of `cancel`: the first seat is given back after the second.
    let first_cancel = CancellationToken::new();
    let first = backend.campaign(
        legacy.clone(),
        identity.clone(),
        first_signal.clone(),
        first_cancel.clone(),
    );
    tokio::pin!(first);
    let mut second: Option<(CancellationToken, BoxFuture<'static, ()>)> = None;
    loop {
        let st = gate.borrow_and_update().clone();
        match (st.leadership, second.is_some()) {
            (Leadership::Leading, false) if !cancel.is_cancelled() => {
                let term = cancel.child_token();
                let run =
                    backend.campaign(key.clone(), identity.clone(), main.clone(), term.clone());
                second = Some((term, run));
            }
            (Leadership::Following | Leadership::NoQuorum, true) => {
                if let Some((term, run)) = second.take() {
                    term.cancel();
                    run.await;
                }
            }
            _ => {}
        }
        if second.is_none() {
            let why = format!(
                "waiting to lead podsweep 0.1's election {legacy} first ({}: {})",
                st.leadership.as_str(),
                st.reason
            );
            match st.leadership {
                Leadership::NoQuorum => main.no_quorum(&why),
                _ => main.follow(&why),
            }
        }
        tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                if let Some((term, run)) = second.take() {
                    term.cancel();
                    run.await;
                }
                first_cancel.cancel();
                first.await;
                return;
            }
            // Ends only once cancelled (a backend's campaign survives outages).
            _ = &mut first => return,
            changed = gate.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            _ = async {
                match second.as_mut() {
                    Some((_, run)) => run.await,
                    None => std::future::pending().await,
                }
            } => second = None,
        }
    }
}
