//! The campaign driver shared by the ZooKeeper and etcd backends: one coordination session per
//! server, and one small loop per scope on top of it.
//!
//! A backend supplies a [`Connect`] (how to open a session: a ZooKeeper session, or an etcd
//! connection with one lease and its keep-alive) and, per session, how to enter one scope's
//! election ([`Session::contend`]) and hold a won seat ([`Seat`]). This module owns the rest:
//!
//! * [`Pool`] (in `pool`): one session per server identity (a Kyuubi server has one), opened by
//!   the first scope that needs it, shared by every scope, and closed (ZooKeeper session closed,
//!   etcd lease revoked) when the last scope using it ends. A session that is lost (expired, lease
//!   gone) is replaced by one new session, which every scope then campaigns on again.
//! * [`drive`] (here, with the backend traits): one scope's loop: session → contend → confirm →
//!   lead while the session's [`Health`] allows → pause / follow → retry with backoff, until
//!   cancelled; on cancellation a won seat is released (pause, then delete the latch node /
//!   resign) before `closed`.
//!
//! The session proves liveness for every scope at once: it publishes [`Health::Up`] with a local
//! deadline counted from when its last confirmed heartbeat (ZooKeeper `sync`, sent while one of
//! its seats is won) or keep-alive (etcd) was *sent*. A scope leads only after its own seat was confirmed by one round
//! trip (its latch node exists and belongs to this session; its election key is ours), and its
//! lease deadline is the later of that confirmation's bound and the session's. Every transition
//! out of `Up` (disconnected, heartbeat failed, no keep-alive for a TTL) pauses every leading scope
//! at once, and each confirms its seat again before it leads again.

use std::future::pending;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::sync::watch;
use tokio::time::{sleep, sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::{LeaderSignal, Leadership};
use crate::backoff::Backoff;
use crate::scope::Scope;

mod pool;

use self::pool::is_live;
pub(crate) use self::pool::Pool;

/// What a session knows about its own liveness; shared by every scope on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Health {
    /// In contact. `until`: leaders may act until then (a confirmed heartbeat or keep-alive,
    /// counted from when it was sent); `None` until the first one is confirmed.
    Up { until: Option<Instant> },
    /// Contact in doubt (disconnected, a heartbeat or keep-alive failed): leaders pause,
    /// followers report `NoQuorum`.
    Doubt(String),
    /// Nothing confirmed for a whole lease: everybody reports `NoQuorum`.
    Down(String),
    /// The session is gone for good (expired, closed, lease gone): start over on a new one.
    Lost(String),
}

/// Runs a session's upkeep task (ZooKeeper heartbeats, the etcd keep-alive) on the current
/// runtime. A panic there is caught: one ERROR, and the session's health becomes
/// [`Health::Lost`] with the reason, so that every scope on it pauses and campaigns again on a
/// new session; a dead session is never reused as healthy.
pub(crate) fn spawn_upkeep<F>(what: &'static str, health: watch::Sender<Health>, task: F)
where
    F: FnOnce(Arc<watch::Sender<Health>>) -> BoxFuture<'static, ()>,
{
    let health = Arc::new(health);
    let run = task(health.clone());
    tokio::spawn(async move {
        if let Err(panic) = std::panic::AssertUnwindSafe(run).catch_unwind().await {
            let why = crate::logging::panic_message(panic.as_ref());
            error!("The {what} task failed: {why}; its session is given up and a new one opened");
            health.send_replace(Health::Lost(format!("the {what} task failed: {why}")));
        }
    });
}

/// Why a seat operation failed.
pub(crate) enum Fault {
    /// The seat is gone (latch node deleted or owned by another session, key replaced): this
    /// scope campaigns again.
    Lost(String),
    /// A transient failure: try again shortly.
    Retry(String),
}

/// How a backend opens sessions.
pub(crate) trait Connect: Send + Sync + 'static {
    type Session: Session;

    /// Opens one session for `identity` and proves it healthy with a round trip.
    fn connect(&self, identity: &str) -> BoxFuture<'static, Result<Self::Session, String>>;

    /// Backoff between failed connections or campaigns: (base, cap).
    fn backoff(&self) -> (Duration, Duration);
}

/// One server's session with the coordination service.
pub(crate) trait Session: Send + Sync + 'static {
    /// For logs: `ZooKeeper session 0x…`, `etcd lease …`.
    fn describe(&self) -> String;

    fn health(&self) -> watch::Receiver<Health>;

    /// A leader pauses this long before its lease deadline.
    fn margin(&self) -> Duration;

    /// A session that lived this long resets the backoff when lost.
    fn stable_after(&self) -> Duration;

    /// The election of `scope`, for logs and the per-scope turn.
    fn election(&self, scope: &Scope) -> String;

    /// Enters the election of `scope` as `identity`; resolves once this candidate has won.
    /// Dropping the future withdraws (the backend cleans up what it created, at once or in the
    /// background); [`Session::abandon`] is then awaited.
    fn contend(
        self: Arc<Self>,
        scope: &Scope,
        identity: &str,
    ) -> BoxFuture<'static, Result<Box<dyn Seat>, String>>;

    /// Removes what a dropped [`Session::contend`] of `scope` may have left.
    fn abandon(self: Arc<Self>, scope: &Scope) -> BoxFuture<'static, ()>;

    /// Ends the session (closes it, revokes the lease); called when its last scope ended.
    fn close(self: Arc<Self>) -> BoxFuture<'static, ()>;
}

/// A won election of one scope on one session.
pub(crate) trait Seat: Send + Sync {
    /// How leadership was won, for logs and status.
    fn describe(&self) -> String;

    /// One round trip that shows the seat is still ours; `Some(until)` when the reply also
    /// bounds the lease (sent + allowed).
    fn confirm(&self) -> BoxFuture<'static, Result<Option<Instant>, Fault>>;

    /// Resolves if the seat disappears while the session lives (never, where that cannot be
    /// watched).
    fn lost(&self) -> BoxFuture<'static, String>;

    /// Gives the seat up (bounded; failures are logged, the session's end removes it anyway).
    fn release(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// Why one term on one session ended.
enum End {
    /// Cancelled; a won seat has been released.
    Cancelled,
    /// This scope's seat or the whole session is gone: campaign again after a backoff.
    Lost(String),
}

/// Reports one scope's transitions and logs them.
struct Reporter {
    scope: String,
    identity: String,
    signal: LeaderSignal,
}

impl Reporter {
    fn log(&self, to: Leadership, reason: &str) {
        let from = self.signal.current();
        if from != to {
            let (scope, identity) = (&self.scope, &self.identity);
            let (from, to) = (from.as_str(), to.as_str());
            info!(%scope, %identity, "leadership {from} -> {to}: {reason}");
        }
    }

    fn lead_until(&self, until: Instant, reason: &str) {
        self.log(Leadership::Leading, reason);
        self.signal.lead_until(until, reason);
    }

    fn pause(&self, reason: &str) {
        self.log(Leadership::Paused, reason);
        self.signal.pause(reason);
    }

    fn follow(&self, reason: &str) {
        self.log(Leadership::Following, reason);
        self.signal.follow(reason);
    }

    fn no_quorum(&self, reason: &str) {
        self.log(Leadership::NoQuorum, reason);
        self.signal.no_quorum(reason);
    }
}

/// Campaigns for `scope` as `identity` on the pool's shared session until `cancel` fires.
pub(crate) async fn drive<C: Connect>(
    pool: Arc<Pool<C>>,
    scope: Scope,
    identity: String,
    signal: LeaderSignal,
    cancel: CancellationToken,
) {
    let (base, cap) = pool.connector.backoff();
    let mut backoff = Backoff::new(base, cap);
    let r = Reporter {
        scope: scope.to_string(),
        identity: identity.clone(),
        signal,
    };
    let rest = |delay: Duration| {
        let cancel = cancel.clone();
        async move {
            tokio::select! {
                biased;
                _ = cancel.cancelled() => false,
                _ = sleep(delay) => true,
            }
        }
    };
    // The session this scope keeps using after a failed campaign, while it lives.
    let mut kept: Option<Arc<C::Session>> = None;
    loop {
        let session = match kept.take() {
            Some(s) if is_live(&*s) => s,
            stale => {
                if let Some(s) = stale {
                    pool.release(&identity, s).await;
                }
                let acquired = tokio::select! {
                    biased;
                    _ = cancel.cancelled() => break,
                    s = pool.acquire(&identity) => s,
                };
                match acquired {
                    Ok(s) => s,
                    Err(reason) => {
                        // runbook: The HA backend cannot be reached
                        warn!(scope = %r.scope, "{reason}");
                        r.no_quorum(&reason);
                        if rest(backoff.next_delay()).await {
                            continue;
                        }
                        break;
                    }
                }
            }
        };
        let started = Instant::now();
        let turn = pool.turn(&identity, session.election(&scope));
        let end = tokio::select! {
            biased;
            _ = cancel.cancelled() => End::Cancelled,
            _held = turn.lock() => term(&session, &scope, &r, &cancel).await,
        };
        match end {
            End::Cancelled => {
                pool.release(&identity, session).await;
                break;
            }
            End::Lost(reason) => {
                let described = session.describe();
                warn!(scope = %r.scope, session = %described, "campaign ended: {reason}");
                r.follow(&reason);
                if started.elapsed() >= session.stable_after() {
                    backoff.reset();
                }
                // A failed campaign tries again on the same session; a lost session is let go.
                kept = Some(session);
                if !rest(backoff.next_delay()).await {
                    break;
                }
            }
        }
    }
    if let Some(s) = kept {
        pool.release(&identity, s).await;
    }
    r.follow("closed");
}

/// One scope's campaign on one session: contend, then lead until the seat or the session is
/// lost, or until cancellation.
async fn term<S: Session>(
    session: &Arc<S>,
    scope: &Scope,
    r: &Reporter,
    cancel: &CancellationToken,
) -> End {
    let mut health = session.health();
    let election = session.election(scope);
    let waiting = format!("campaigning for {election}");
    let report_waiting = |h: &Health| match h {
        Health::Up { .. } => r.follow(&waiting),
        Health::Doubt(why) | Health::Down(why) => r.no_quorum(why),
        Health::Lost(_) => {}
    };
    let initial = health.borrow_and_update().clone();
    if let Health::Lost(why) = initial {
        return End::Lost(why);
    }
    report_waiting(&initial);
    let mut contend = session.clone().contend(scope, &r.identity);
    let seat = loop {
        tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                drop(contend);
                session.clone().abandon(scope).await;
                return End::Cancelled;
            }
            changed = health.changed() => {
                if changed.is_err() {
                    return End::Lost(format!("{} ended", session.describe()));
                }
                let h = health.borrow_and_update().clone();
                if let Health::Lost(why) = h {
                    return End::Lost(why);
                }
                report_waiting(&h);
            }
            won = &mut contend => match won {
                Ok(seat) => break seat,
                Err(e) => return End::Lost(e),
            },
        }
    };
    let end = lead(session, &*seat, r, cancel, &mut health).await;
    if matches!(end, End::Cancelled) {
        if r.signal.current() == Leadership::Leading {
            r.pause("closing: releasing leadership");
        }
        seat.release().await;
    }
    end
}

/// The won phase: confirm the seat, lead while the session's health allows, pause when it does
/// not, and confirm again before leading again.
async fn lead<S: Session>(
    session: &Arc<S>,
    seat: &dyn Seat,
    r: &Reporter,
    cancel: &CancellationToken,
    health: &mut watch::Receiver<Health>,
) -> End {
    let margin = session.margin();
    let why_won = seat.describe();
    let mut why = why_won.clone();
    let mut lost = seat.lost();
    // A confirmation in flight, or when to send the next one.
    let mut confirm: Option<BoxFuture<'static, Result<Option<Instant>, Fault>>> = None;
    let mut retry_at: Option<Instant> = None;
    let mut confirmed = false;
    // The bound the last confirmation itself proved.
    let mut proven: Option<Instant> = None;
    // `Some` exactly while reporting `Leading`.
    let mut lease_until: Option<Instant> = None;
    let mut h = health.borrow_and_update().clone();
    loop {
        // Apply the current health.
        match &h {
            Health::Lost(why) => return End::Lost(why.clone()),
            Health::Up { until } => {
                if !confirmed && confirm.is_none() && retry_at.is_none() {
                    confirm = Some(seat.confirm());
                }
                let until = match (proven, *until) {
                    (Some(a), Some(b)) => Some(a.max(b)),
                    (a, b) => a.or(b),
                };
                let now = Instant::now();
                match until.filter(|u| confirmed && *u > now + margin) {
                    Some(u) if lease_until.is_some() => {
                        r.signal.extend_until(u);
                        lease_until = Some(u);
                    }
                    Some(u) => {
                        r.lead_until(u, &why);
                        lease_until = Some(u);
                    }
                    None => {}
                }
            }
            Health::Doubt(reason) => {
                (confirmed, proven, confirm, retry_at) = (false, None, None, None);
                if lease_until.take().is_some() || r.signal.current() == Leadership::Leading {
                    r.pause(reason);
                } else if r.signal.current() != Leadership::Paused {
                    r.no_quorum(reason);
                }
                why = format!("reconnected after \"{reason}\"; seat confirmed again");
            }
            Health::Down(reason) => {
                (confirmed, proven, confirm, retry_at) = (false, None, None, None);
                lease_until = None;
                r.no_quorum(reason);
                why = "lease confirmed alive again".into();
            }
        }
        let pause_at = lease_until.map(|u| u.checked_sub(margin).unwrap_or(u));
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return End::Cancelled,
            changed = health.changed() => {
                if changed.is_err() {
                    return End::Lost(format!("{} ended", session.describe()));
                }
                h = health.borrow_and_update().clone();
            }
            reason = &mut lost => return End::Lost(reason),
            done = poll_some(&mut confirm) => {
                confirm = None;
                match done {
                    Ok(bound) => {
                        confirmed = true;
                        proven = bound;
                        if bound.is_some_and(|b| b <= Instant::now()) {
                            warn!(scope = %r.scope, "confirmation came too late to extend the lease");
                        }
                    }
                    Err(Fault::Lost(reason)) => return End::Lost(reason),
                    Err(Fault::Retry(reason)) => {
                        // runbook: A leadership confirmation failed
                        warn!(scope = %r.scope, "confirming {why_won}: {reason}");
                        if lease_until.take().is_some() {
                            r.pause(&reason);
                        }
                        retry_at = Some(Instant::now() + Duration::from_millis(250));
                    }
                }
            }
            _ = sleep_until_some(retry_at) => retry_at = None,
            _ = sleep_until_some(pause_at) => {
                lease_until = None;
                (confirmed, proven) = (false, None);
                let reason = "lease deadline near without a newer confirmed heartbeat";
                // runbook: A leader paused: lease deadline near
                warn!(scope = %r.scope, "{reason}");
                r.pause(reason);
                why = "heartbeat confirmed again".into();
            }
        }
    }
}

/// Awaits the future in `slot`; never resolves when there is none.
pub(crate) async fn poll_some<T>(slot: &mut Option<BoxFuture<'static, T>>) -> T {
    match slot {
        Some(f) => f.await,
        None => pending().await,
    }
}

/// Sleeps until `deadline`; never resolves when there is none.
pub(crate) async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(d) => sleep_until(d).await,
        None => pending().await,
    }
}
