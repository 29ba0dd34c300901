//! A ZooKeeper session's heartbeat: the round trips that extend its leaders' lease.
//!
//! What each periodic packet of a session buys (docs/safety.md, "What each periodic ZooKeeper
//! request buys"):
//! * The client library's **pings** (after a few seconds without sending: 3/8 of the connection
//!   timeout when that is at most 3/5 of the session timeout `T`, else 3/20 of `T`) keep the session
//!   alive on the server and tell a dead connection (no answer within the connection timeout:
//!   `Disconnected`, which pauses every leader at once). A ping's answer comes from the server the
//!   session is connected to, which may have lost the quorum: it cannot extend a lease.
//! * The **heartbeat**, a `sync` of `/` every third of `T`: its answer comes after the server
//!   forwarded it to the quorum's leader and applied what that leader had committed before, so it
//!   proves the session was alive in the quorum after the request was sent. Each one extends the
//!   lease of every leading scope to `sent + 2/3 T`.
//!
//! Only leaders act on the lease, so only a session with a won seat sends heartbeats: a session
//! whose scopes all wait sends pings alone, and its first won seat starts the heartbeat at once
//! (the seat's own confirmation, a `sync` and an `exists` of its latch node, gives its first
//! lease). The heartbeat used to send an `exists` of `/` after each `sync` as well, and to run on
//! every session: neither bought anything the `sync` of a leading session does not.
//!
//! # Guarantees
//! * While at least one seat of the session is held, a heartbeat leaves every `T/3` (or `T/12`
//!   after a failed one); each confirmed one publishes `Up { until: sent + 2/3 T }`.
//! * Connection state changes are published at once, held seat or not.
//!
//! # Caveats
//! * A session without a seat publishes no lease; its health changes only with the connection's
//!   state (`Disconnected` is told by the client within the connection timeout).

use std::future::{pending, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;
use tracing::warn;
use zookeeper_client::{Client, Error as ZkError, SessionState, Stat};

use super::super::driver::Health;

/// The path every heartbeat syncs (always exists; `sync` needs no permission).
const HEARTBEAT_PATH: &str = "/";

/// A round trip in flight: when it was sent, and the reply.
pub(super) struct Beat<'a> {
    pub(super) sent: Instant,
    pub(super) reply: Pin<Box<dyn Future<Output = Result<Option<Stat>, ZkError>> + Send + 'a>>,
}

impl<'a> Beat<'a> {
    /// Sends `sync` and `exists` on `path` now; both are written when called, in this order. A
    /// seat's confirmation: its latch node must exist, owned by this session.
    pub(super) fn sync_and_stat(client: &'a Client, path: &str) -> Self {
        let sent = Instant::now();
        let synced = client.sync(path);
        let stat = client.check_stat(path);
        let reply = async move {
            match synced.await {
                Ok(()) => stat.await,
                Err(ZkError::NoNode) => Ok(None),
                Err(e) => Err(e),
            }
        };
        Beat {
            sent,
            reply: Box::pin(reply),
        }
    }

    /// Sends a `sync` of `/` now: the session's heartbeat.
    fn sync(client: &'a Client) -> Self {
        let sent = Instant::now();
        let synced = client.sync(HEARTBEAT_PATH);
        Beat {
            sent,
            reply: Box::pin(async move { synced.await.map(|()| None) }),
        }
    }
}

/// Errors that mean the session is over.
pub(super) fn ends_session(e: &ZkError) -> bool {
    matches!(
        e,
        ZkError::SessionExpired
            | ZkError::SessionMoved
            | ZkError::AuthFailed
            | ZkError::ClientClosed
    )
}

/// The seats a session holds now; the heartbeat runs while there is one.
#[derive(Debug, Default)]
pub(super) struct Seats {
    held: AtomicUsize,
    first: Notify,
}

/// One held seat; dropping it gives the seat back.
#[derive(Debug)]
pub(super) struct Held(Arc<Seats>);

impl Seats {
    pub(super) fn hold(self: &Arc<Self>) -> Held {
        if self.held.fetch_add(1, Ordering::SeqCst) == 0 {
            self.first.notify_one();
        }
        Held(self.clone())
    }

    fn any(&self) -> bool {
        self.held.load(Ordering::SeqCst) > 0
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The session's heartbeat: a `sync` every third of the negotiated timeout `T` while a seat is
/// held; each confirmed one allows acting until `sent + 2/3 T`. Connection state changes are
/// published at once.
pub(super) async fn heartbeats(
    client: Client,
    health: Arc<watch::Sender<Health>>,
    stop: CancellationToken,
    seats: Arc<Seats>,
) {
    let negotiated = client.session_timeout();
    let lease = negotiated * 2 / 3;
    let period = (negotiated / 3).max(Duration::from_millis(1));
    let mut states = client.state_watcher();
    let mut beat: Option<Beat> = None;
    let mut next_beat = Instant::now();
    let publish = |h: Health| {
        health.send_if_modified(|old| {
            let changed = *old != h;
            *old = h;
            changed
        });
    };
    loop {
        let state = client.state();
        if state.is_terminated() {
            publish(Health::Lost(format!("ZooKeeper session {state}")));
            return;
        }
        let connected = state == SessionState::SyncConnected;
        let leading = seats.any();
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            state = states.changed() => match state {
                SessionState::Disconnected | SessionState::ConnectedReadOnly => {
                    beat = None;
                    publish(Health::Doubt("disconnected from ZooKeeper; session not confirmed".into()));
                }
                // Confirm at once, in the same session.
                SessionState::SyncConnected => {
                    publish(Health::Up { until: None });
                    next_beat = Instant::now();
                }
                other => {
                    publish(Health::Lost(format!("ZooKeeper session {other}")));
                    return;
                }
            },
            // The first seat of a session that held none: beat at once.
            _ = seats.first.notified(), if !leading => next_beat = Instant::now(),
            (sent, reply) = poll_beat(&mut beat) => {
                beat = None;
                match reply {
                    Ok(_) => {
                        next_beat = sent + period;
                        let until = sent + lease;
                        if until <= Instant::now() {
                            warn!("ZooKeeper heartbeat reply came too late to extend the lease");
                            continue;
                        }
                        publish(Health::Up { until: Some(until) });
                    }
                    Err(e) if ends_session(&e) => {
                        publish(Health::Lost(format!("heartbeat failed: {e}")));
                        return;
                    }
                    Err(e) => {
                        warn!("ZooKeeper heartbeat failed: {e}");
                        publish(Health::Doubt(format!("heartbeat failed: {e}")));
                        next_beat = Instant::now() + period / 4;
                    }
                }
            }
            _ = sleep_until(next_beat), if beat.is_none() && connected && leading => {
                beat = Some(Beat::sync(&client));
            }
        }
    }
}

/// The reply of the heartbeat in flight; never resolves when there is none.
async fn poll_beat(beat: &mut Option<Beat<'_>>) -> (Instant, Result<Option<Stat>, ZkError>) {
    match beat {
        Some(b) => (b.sent, b.reply.as_mut().await),
        None => pending().await,
    }
}
