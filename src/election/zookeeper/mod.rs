//! The `zookeeper` backend: one Curator-compatible leader latch per scope, all of one server's
//! latches in one ZooKeeper session.
//!
//! A backend instance (one per podsweep engine, i.e. per Kyuubi server) opens one session per
//! identity when its first scope campaigns and shares it with every scope (the campaign loop is
//! [`super::driver`]'s, shared with etcd). In it, each scope's candidate creates an
//! `EPHEMERAL_SEQUENTIAL` node `<root>/<scope>/_c_<uuid>-latch-<seq>` whose data is its identity
//! (the Kyuubi server id), as Curator's `LeaderLatch` does; the lowest sequence number leads and
//! every other candidate watches only its predecessor. Scopes have independent leaders.
//!
//! # Guarantees
//! * `Leading` is reported only after a round trip on our own latch node has confirmed that it
//!   exists and is owned by our current session.
//! * While the session holds a won seat, one heartbeat runs every third of the negotiated session
//!   timeout `T` for all its scopes: a `sync` of `/`, whose reply shows that the server we talk to
//!   reached the quorum leader after the request was sent (`heartbeat`, which also says what each
//!   periodic packet buys). Each confirmed heartbeat extends the local lease of every leading
//!   scope to `sent + 2/3 T`, where `sent` is taken before the request goes out. A session whose
//!   scopes all wait sends no heartbeat: the client's pings keep it alive. The session cannot expire before about `sent + T`, so the
//!   lease ends about `T/3` before a successor can be elected. A process that was frozen
//!   (SIGSTOP, long GC, VM pause) wakes up with an expired lease, so
//!   [`ElectionHandle::may_act`](super::ElectionHandle::may_act) is false before anything else
//!   runs.
//! * `Disconnected` pauses every leading scope at once; it does not wait for the session to
//!   expire. `SyncConnected` is followed by a fresh round trip on each leader's latch node before
//!   it reports `Leading` again, within the same session.
//! * `Expired`, `AuthFailed` or `Closed` end the session: every scope reports `Following`, and
//!   each campaigns again (after its backoff) on one brand-new session. A leader's latch node
//!   that is deleted (watched) or found owned by another session ends that scope's term only: it
//!   campaigns again in the same session.
//! * On cancellation a leader reports `Paused`, deletes its latch node (bounded by a short
//!   timeout) and only then reports `Following` with reason `closed`; the next candidate is
//!   notified by its watch and leads within milliseconds. Only that scope's node goes; the
//!   session is closed when the last scope using it has ended.
//! * While no server can be reached, the state is `NoQuorum`; connection attempts are retried
//!   forever with capped exponential backoff and jitter, from
//!   `kyuubi.ha.zookeeper.connection.base.retry.wait` up to `...max.retry.wait` (each delay drawn
//!   from the upper half of the current step); one attempt at a time for all scopes. A cleanup
//!   leader must come back after any outage, so `...retry.policy` and `...max.retries` are
//!   accepted for compatibility but only logged when a session is opened; within a session the
//!   client reconnects on its own until the session expires.
//!
//! # Authentication and ACLs (as Kyuubi)
//! * `kyuubi.ha.zookeeper.auth.digest` (`user:password`), when set, is added as `digest` auth to
//!   every session, whatever the auth type; the client sends it again on every reconnection.
//! * Unless the auth type is `NONE`, every node podsweep creates (the parents of the latch
//!   directory, the directory itself and the latch nodes) gets world-read plus creator-all
//!   (`auth` scheme: every identity of the creating session); otherwise the nodes are open.
//! * `KERBEROS` (only in builds with the `kerberos` feature) connects with SASL/GSSAPI. The
//!   server principal `service/host@REALM` gives the GSSAPI service and host (defaults:
//!   `zookeeper` and the host of the connect string). The client cannot log in from a keytab:
//!   it uses the process's Kerberos credential cache (the default cache or `KRB5CCNAME`; MIT
//!   krb5 can also acquire from the client keytab named by `KRB5_CLIENT_KTNAME`). In a kerberized
//!   Kyuubi server that cache is the one Kyuubi's kinit auxiliary service (`kyuubi.kinit.*`)
//!   fills and re-kinits periodically; Kyuubi's own ZooKeeper client logs in through JAAS with
//!   the principal and keytab instead. The configured principal and keytab are logged at INFO
//!   and not used otherwise.
//!
//! # Caveats
//! * The lease is a local bound, not a fencing token: a server clock that runs fast, a session
//!   touch that reaches the quorum leader late (it is relayed every half tick), or `sync + read`
//!   not being linearizable (ZOOKEEPER-1675) can eat into the `T/3` margin.
//! * A follower cancelled while waiting leaves the deletion of its own node to the client's
//!   background task (the session stays open for the other scopes); if the process exits at
//!   once, the node lingers until the session expires. Only leaders wait for the deletion.
//! * A follower reports `NoQuorum` whenever its connection is down, even if the session is still
//!   alive on the servers; acting is impossible either way.
//! * Read-only sessions are never requested, and a `ConnectedReadOnly` state is treated as
//!   disconnected.
//! * With secure ACLs every server must authenticate as the same identity (one digest user, or
//!   Kerberos principals that the ZooKeeper servers map to one name, e.g. with
//!   `kerberos.removeHostFromPrincipal`): a scope directory created by one identity does not
//!   let another create latch nodes in it (`NoAuth`; the campaign retries with backoff and logs
//!   every failure), exactly as with Kyuubi's own nodes.

use std::future::pending;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};
use zookeeper_client::{
    Client, CreateMode, Error as ZkError, EventType, LockOptions, LockPrefix, OwnedLockClient,
};

use super::driver::{self, spawn_upkeep, Connect, Fault, Health, Pool, Seat, Session};
use super::store::ScopeStore;
use super::{Backend, Identity, LeaderSignal};
use crate::config::{ZkAuth, ZkSettings};
use crate::scope::Scope;

mod connect;
mod heartbeat;
pub(crate) mod inspect;
mod store;

use connect::{connector, log_settings, node_acls};
use heartbeat::{ends_session, heartbeats, Beat, Held, Seats};

/// Curator's `LeaderLatch` node name.
pub const LATCH_NAME: &str = "latch-";

/// Upper bound on the latch deletion at close.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// Leader election through ZooKeeper: one session per server, one latch per scope in it.
#[derive(Clone, Debug)]
pub struct ZooKeeperBackend {
    settings: ZkSettings,
    pool: Arc<Pool<ZkConnect>>,
}

impl ZooKeeperBackend {
    pub fn new(settings: ZkSettings) -> Self {
        let pool = Arc::new(Pool::new(ZkConnect {
            settings: settings.clone(),
        }));
        ZooKeeperBackend { settings, pool }
    }

    /// The latch directory of `scope`: `<root>/<encoded scope>`.
    pub fn latch_dir(&self, scope: &Scope) -> String {
        latch_dir(&self.settings, scope)
    }
}

fn latch_dir(settings: &ZkSettings, scope: &Scope) -> String {
    format!("{}/{}", settings.root(), scope.encoded())
}

impl Backend for ZooKeeperBackend {
    fn lists_servers(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "zookeeper"
    }

    fn campaign(
        &self,
        scope: Scope,
        identity: String,
        signal: LeaderSignal,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        Box::pin(driver::drive(
            self.pool.clone(),
            scope,
            identity,
            signal,
            cancel,
        ))
    }

    fn store(&self, identity: &Identity) -> Option<Arc<dyn ScopeStore>> {
        Some(Arc::new(store::ZkStore {
            settings: self.settings.clone(),
            pool: self.pool.clone(),
            identity: identity.clone(),
        }))
    }

    fn out_of_contact(&self, identity: &str) -> bool {
        self.pool.out_of_contact(identity)
    }
}

/// Opens ZooKeeper sessions.
struct ZkConnect {
    settings: ZkSettings,
}

impl Connect for ZkConnect {
    type Session = ZkSession;

    fn connect(&self, identity: &str) -> BoxFuture<'static, Result<ZkSession, String>> {
        let s = self.settings.clone();
        let identity = identity.to_owned();
        Box::pin(async move {
            log_settings(&identity, &s);
            let connecting = connector(&s).connect(&s.addresses);
            let limit = s.session_timeout + s.connection_timeout;
            let why = match timeout(limit, connecting).await {
                Ok(Ok(client)) => return Ok(ZkSession::start(client, s, &identity)),
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no session within {limit:?}"),
            };
            // The client reports a failed SASL handshake only in its own log, as a connection
            // failure.
            let hint = match s.auth {
                ZkAuth::Kerberos { .. } => {
                    " (KERBEROS: is there a valid ticket in the credential cache?)"
                }
                _ => "",
            };
            Err(format!(
                "cannot connect to ZooKeeper at {}: {why}{hint}",
                s.addresses
            ))
        })
    }

    fn backoff(&self) -> (Duration, Duration) {
        (self.settings.retry.base_wait, self.settings.retry.max_wait)
    }
}

/// One server's ZooKeeper session and its heartbeat task.
struct ZkSession {
    client: Client,
    settings: ZkSettings,
    health: watch::Receiver<Health>,
    stop: CancellationToken,
    /// The won seats of the session's scopes: the heartbeat runs while there is one.
    seats: Arc<Seats>,
}

impl ZkSession {
    fn start(client: Client, settings: ZkSettings, identity: &str) -> ZkSession {
        let session = client.session_id();
        let negotiated = client.session_timeout();
        info!(
            %identity,
            %session,
            negotiated_ms = negotiated.as_millis() as u64,
            requested_ms = settings.session_timeout.as_millis() as u64,
            "ZooKeeper session established; negotiated session timeout {negotiated:?}"
        );
        let (tx, health) = watch::channel(Health::Up { until: None });
        let stop = CancellationToken::new();
        let seats = Arc::new(Seats::default());
        let (beating, stopping, held) = (client.clone(), stop.clone(), seats.clone());
        spawn_upkeep("ZooKeeper heartbeat", tx, move |tx| {
            Box::pin(heartbeats(beating, tx, stopping, held))
        });
        ZkSession {
            client,
            settings,
            health,
            stop,
            seats,
        }
    }
}

impl Drop for ZkSession {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Session for ZkSession {
    fn describe(&self) -> String {
        format!("ZooKeeper session {}", self.client.session_id())
    }

    fn health(&self) -> watch::Receiver<Health> {
        self.health.clone()
    }

    fn margin(&self) -> Duration {
        Duration::ZERO
    }

    fn stable_after(&self) -> Duration {
        self.client.session_timeout()
    }

    fn election(&self, scope: &Scope) -> String {
        latch_dir(&self.settings, scope)
    }

    fn contend(
        self: Arc<Self>,
        scope: &Scope,
        identity: &str,
    ) -> BoxFuture<'static, Result<Box<dyn Seat>, String>> {
        let dir = self.election(scope);
        let identity = identity.to_owned();
        Box::pin(async move {
            let acls = node_acls(&self.settings.auth);
            let options = LockOptions::new(acls)
                .with_ancestor_options(CreateMode::Persistent.with_acls(acls))
                .map_err(|e| format!("invalid latch options: {e}"))?;
            let prefix = LockPrefix::new_curator(&dir, LATCH_NAME)
                .map_err(|e| format!("invalid latch path {dir}: {e}"))?;
            // Cancellation safe: a dropped attempt deletes its node in the background.
            let lock = self
                .client
                .lock(prefix, identity.as_bytes(), options)
                .await
                .map_err(|e| format!("latch {dir} failed: {e}"))?
                .into_owned();
            stamp(&self.client, lock.lock_path(), &identity).await;
            let seat: Box<dyn Seat> = Box::new(ZkSeat {
                client: self.client.clone(),
                lease: self.client.session_timeout() * 2 / 3,
                lock,
                _held: self.seats.hold(),
            });
            Ok(seat)
        })
    }

    fn abandon(self: Arc<Self>, _scope: &Scope) -> BoxFuture<'static, ()> {
        // The dropped latch attempt deletes its own node in the background.
        Box::pin(async {})
    }

    fn close(self: Arc<Self>) -> BoxFuture<'static, ()> {
        // Dropping the last handle of the client closes the session (ephemeral nodes go with it).
        Box::pin(async move {
            self.stop.cancel();
            drop(self);
        })
    }
}

/// Records since when this candidate leads: its latch node's data is set again to the same
/// server id, so the node's modification time (ZooKeeper's clock) is the start of the term, which
/// `podsweep status` reads. Bounded; a failure costs only that time (the status then shows when
/// the candidate joined), never the seat.
async fn stamp(client: &Client, path: &str, identity: &str) {
    let set = client.set_data(path, identity.as_bytes(), None);
    let failed = match timeout(RELEASE_TIMEOUT, set).await {
        Ok(Ok(_)) => return,
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("no reply within {RELEASE_TIMEOUT:?}"),
    };
    warn!(%path, "Cannot record the start of this leadership on the latch node: {failed}");
}

/// A latch node that leads its directory.
struct ZkSeat {
    client: Client,
    /// How long a confirmed round trip allows acting, from when it was sent.
    lease: Duration,
    /// Deletes the node in the background when dropped (a no-op after `release`).
    lock: OwnedLockClient,
    /// Keeps the session's heartbeat running while the seat is held.
    _held: Held,
}

impl Seat for ZkSeat {
    fn describe(&self) -> String {
        format!("acquired latch {}", self.lock.lock_path())
    }

    /// `sync` + `exists` on our node: it must exist and belong to our session.
    fn confirm(&self) -> BoxFuture<'static, Result<Option<Instant>, Fault>> {
        let (client, path, lease) = (
            self.client.clone(),
            self.lock.lock_path().to_owned(),
            self.lease,
        );
        Box::pin(async move {
            let session = client.session_id();
            let beat = Beat::sync_and_stat(&client, &path);
            let sent = beat.sent;
            match beat.reply.await {
                Ok(Some(stat)) if stat.ephemeral_owner == session.0 => Ok(Some(sent + lease)),
                Ok(Some(stat)) => Err(Fault::Lost(format!(
                    "latch node {path} is owned by session {:#x}, not {session}",
                    stat.ephemeral_owner
                ))),
                Ok(None) => Err(Fault::Lost(format!("latch node {path} is gone"))),
                Err(e) if ends_session(&e) => Err(Fault::Lost(format!("confirming {path}: {e}"))),
                Err(e) => Err(Fault::Retry(format!("confirming {path}: {e}"))),
            }
        })
    }

    /// Watches our node; resolves when it is deleted while the session lives.
    fn lost(&self) -> BoxFuture<'static, String> {
        let (client, path) = (self.client.clone(), self.lock.lock_path().to_owned());
        Box::pin(async move {
            loop {
                match client.check_and_watch_stat(&path).await {
                    Ok((None, _)) => return format!("latch node {path} is gone"),
                    Ok((Some(_), watcher)) => {
                        let event = watcher.changed().await;
                        if event.event_type == EventType::NodeDeleted {
                            return format!("latch node {path} was deleted");
                        }
                        if event.event_type == EventType::Session {
                            // Session trouble is the session's heartbeat's business.
                            return pending().await;
                        }
                    }
                    Err(e) if ends_session(&e) => return pending().await,
                    Err(_) => {
                        // Disconnected: the session's health pauses leaders; look again later.
                        tokio::time::sleep(client.session_timeout() / 3).await;
                    }
                }
            }
        })
    }

    /// Deletes our node (bounded), so that the next candidate leads within milliseconds.
    fn release(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let path = self.lock.lock_path().to_owned();
            let limit = RELEASE_TIMEOUT.min(self.client.session_timeout());
            match timeout(limit, self.client.delete(&path, None)).await {
                Ok(Ok(())) | Ok(Err(ZkError::NoNode)) => {
                    info!(%path, "latch node deleted; leadership released");
                }
                Ok(Err(e)) => {
                    warn!(%path, "cannot delete latch node at close: {e}; the session close removes it");
                }
                Err(_) => {
                    warn!(%path, "latch node deletion timed out after {limit:?}; the session close or expiry removes it");
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latch_dir_uses_root_and_encoded_scope() {
        let backend = ZooKeeperBackend::new(ZkSettings {
            addresses: "127.0.0.1:2181".into(),
            namespace: "kyuubi".into(),
            session_timeout: Duration::from_secs(60),
            connection_timeout: Duration::from_secs(15),
            ..ZkSettings::default()
        });
        let scope = Scope::new(
            Some("arn:aws:eks:us-east-1:123:cluster/prod"),
            Some("spark"),
        );
        assert_eq!(
            backend.latch_dir(&scope),
            "/kyuubi-podsweep/latches/c=arn%3Aaws%3Aeks%3Aus-east-1%3A123%3Acluster%2Fprod.n=spark"
        );
        assert!(LockPrefix::new_curator(&backend.latch_dir(&scope), LATCH_NAME).is_ok());
        assert_eq!(backend.name(), "zookeeper");
    }
}
