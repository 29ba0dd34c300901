//! The `zookeeper` backend: one Curator-compatible leader latch per scope.
//!
//! Every scope campaigns in its own ZooKeeper session. A candidate creates an
//! `EPHEMERAL_SEQUENTIAL` node `<root>/<scope>/_c_<uuid>-latch-<seq>` whose data is its identity
//! (the Kyuubi server id), as Curator's `LeaderLatch` does; the lowest sequence number leads and
//! every other candidate watches only its predecessor.
//!
//! # Guarantees
//! * `Leading` is reported only after a round trip on our own latch node has confirmed that it
//!   exists and is owned by our current session.
//! * While leading, a heartbeat runs every third of the negotiated session timeout `T`: `sync`
//!   then `exists` on our latch node, pipelined, so a reply also shows that the server we talk to
//!   reached the quorum leader after the request was sent. Each confirmed heartbeat extends the
//!   local lease to `sent + 2/3 T`, where `sent` is taken before the requests go out. The session
//!   cannot expire before about `sent + T`, so the lease ends about `T/3` before a successor
//!   can be elected. A process that was frozen (SIGSTOP, long GC, VM pause) wakes up with an
//!   expired lease, so [`ElectionHandle::may_act`](super::ElectionHandle::may_act) is false
//!   before anything else runs.
//! * `Disconnected` while leading reports `Paused` at once; it does not wait for the session to
//!   expire. `SyncConnected` is followed by a fresh round trip on the latch node before `Leading`
//!   is reported again, within the same session.
//! * `Expired`, `AuthFailed`, `Closed`, a missing latch node or a node owned by another session
//!   end the session: the candidate reports `Following`, drops the session and campaigns again
//!   with a brand-new one.
//! * On cancellation a leader reports `Paused`, deletes its latch node (bounded by a short
//!   timeout) and only then reports `Following` with reason `closed`; the next candidate is
//!   notified by its watch and leads within milliseconds.
//! * While no server can be reached, the state is `NoQuorum`; connection attempts are retried
//!   forever with capped exponential backoff and jitter, from
//!   `kyuubi.ha.zookeeper.connection.base.retry.wait` up to `...max.retry.wait` (each delay drawn
//!   from the upper half of the current step). A cleanup leader must come back after any outage,
//!   so `...retry.policy` and `...max.retries` are accepted for compatibility but only logged at
//!   the start of each campaign; within a session the client reconnects on its own until the
//!   session expires.
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
//!   background task and to the closing session; if the process exits at once, the node lingers
//!   until the session expires. Only leaders wait for the deletion.
//! * A follower reports `NoQuorum` whenever its connection is down, even if the session is still
//!   alive on the servers; acting is impossible either way.
//! * Read-only sessions are never requested, and a `ConnectedReadOnly` state is treated as
//!   disconnected.
//! * With secure ACLs every server must authenticate as the same identity (one digest user, or
//!   Kerberos principals that the ZooKeeper servers map to one name, e.g. with
//!   `kerberos.removeHostFromPrincipal`): a scope directory created by one identity does not
//!   let another create latch nodes in it (`NoAuth`; the campaign retries with backoff and logs
//!   every failure), exactly as with Kyuubi's own nodes.

use std::future::{pending, Future};
use std::pin::Pin;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use zookeeper_client::{
    Client, CreateMode, Error as ZkError, LockClient, LockOptions, LockPrefix, SessionState, Stat,
    StateWatcher,
};

use super::{Backend, LeaderSignal, Leadership};
use crate::config::{ZkAuth, ZkSettings};
use crate::scope::Scope;

mod connect;

use super::backoff::Backoff;
use connect::{connector, log_settings, node_acls};

/// Curator's `LeaderLatch` node name.
pub const LATCH_NAME: &str = "latch-";

/// Upper bound on the latch deletion at close.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);

/// Leader election through ZooKeeper: one session and one latch per scope.
#[derive(Clone, Debug)]
pub struct ZooKeeperBackend {
    settings: ZkSettings,
}

impl ZooKeeperBackend {
    pub fn new(settings: ZkSettings) -> Self {
        ZooKeeperBackend { settings }
    }

    /// The latch directory of `scope`: `<root>/<encoded scope>`.
    pub fn latch_dir(&self, scope: &Scope) -> String {
        format!("{}/{}", self.settings.root(), scope.encoded())
    }
}

impl Backend for ZooKeeperBackend {
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
        let campaign = Campaign {
            dir: self.latch_dir(&scope),
            settings: self.settings.clone(),
            scope: scope.to_string(),
            identity,
            signal,
            cancel,
        };
        Box::pin(campaign.run())
    }
}

/// Why one session ended.
enum End {
    /// The cancel token fired; leadership, if any, has been released.
    Cancelled,
    /// The session or the latch is gone; start over with a new session.
    Lost(String),
}

/// A heartbeat in flight: when it was sent, and the reply.
struct Beat<'a> {
    sent: Instant,
    reply: Pin<Box<dyn Future<Output = Result<Option<Stat>, ZkError>> + Send + 'a>>,
}

impl<'a> Beat<'a> {
    /// Sends `sync` and `exists` on `path` now; both are written when called, in this order.
    fn send(client: &'a Client, path: &str) -> Self {
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
}

/// One scope's campaign: everything the loop needs, owned.
struct Campaign {
    settings: ZkSettings,
    dir: String,
    scope: String,
    identity: String,
    signal: LeaderSignal,
    cancel: CancellationToken,
}

impl Campaign {
    async fn run(self) {
        log_settings(&self.scope, &self.settings);
        let mut backoff = Backoff::new(self.settings.retry.base_wait, self.settings.retry.max_wait);
        loop {
            let connected = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => break,
                r = self.connect() => r,
            };
            let client = match connected {
                Ok(client) => client,
                Err(reason) => {
                    warn!(scope = %self.scope, "{reason}");
                    self.no_quorum(&reason);
                    if self.rest(backoff.next_delay()).await {
                        continue;
                    }
                    break;
                }
            };
            let session = client.session_id();
            let negotiated = client.session_timeout();
            info!(
                scope = %self.scope,
                %session,
                negotiated_ms = negotiated.as_millis() as u64,
                requested_ms = self.settings.session_timeout.as_millis() as u64,
                "ZooKeeper session established; negotiated session timeout {negotiated:?}"
            );
            let started = Instant::now();
            match self.session(&client).await {
                End::Cancelled => break,
                End::Lost(reason) => {
                    warn!(scope = %self.scope, %session, "session abandoned: {reason}");
                    self.follow(&reason);
                    drop(client);
                    if started.elapsed() >= negotiated {
                        backoff.reset();
                    }
                    if !self.rest(backoff.next_delay()).await {
                        break;
                    }
                }
            }
        }
        self.follow("closed");
    }

    /// Sleeps for `delay`; false if cancelled meanwhile.
    async fn rest(&self, delay: Duration) -> bool {
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => false,
            _ = sleep(delay) => true,
        }
    }

    async fn connect(&self) -> Result<Client, String> {
        let s = &self.settings;
        let connecting = connector(s).connect(&s.addresses);
        let limit = s.session_timeout + s.connection_timeout;
        let why = match timeout(limit, connecting).await {
            Ok(Ok(client)) => return Ok(client),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no session within {limit:?}"),
        };
        // The client reports a failed SASL handshake only in its own log, as a connection failure.
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
    }

    /// Contends for the latch in `client`'s session, then leads until the session or the latch
    /// is lost, or until cancellation.
    async fn session(&self, client: &Client) -> End {
        let mut states = client.state_watcher();
        let acls = node_acls(&self.settings.auth);
        let options = match LockOptions::new(acls)
            .with_ancestor_options(CreateMode::Persistent.with_acls(acls))
        {
            Ok(options) => options,
            Err(e) => return End::Lost(format!("invalid latch options: {e}")),
        };
        let prefix = match LockPrefix::new_curator(&self.dir, LATCH_NAME) {
            Ok(prefix) => prefix,
            Err(e) => return End::Lost(format!("invalid latch path {}: {e}", self.dir)),
        };
        self.follow("waiting for the latch");
        let lock: LockClient<'_> = {
            let contend = client.lock(prefix, self.identity.as_bytes(), options);
            tokio::pin!(contend);
            loop {
                tokio::select! {
                    biased;
                    _ = self.cancel.cancelled() => return End::Cancelled,
                    state = states.changed() => match state {
                        SessionState::Disconnected | SessionState::ConnectedReadOnly => {
                            self.no_quorum("disconnected from ZooKeeper while following");
                        }
                        SessionState::SyncConnected => {
                            self.follow("reconnected to ZooKeeper; waiting for the latch");
                        }
                        other => return End::Lost(format!("session {other} while following")),
                    },
                    r = &mut contend => match r {
                        Ok(lock) => break lock,
                        Err(e) => return End::Lost(format!("latch {} failed: {e}", self.dir)),
                    },
                }
            }
        };
        let path = lock.lock_path().to_owned();
        debug!(scope = %self.scope, %path, "latch acquired; confirming ownership");
        let end = self.lead(client, &path, &mut states).await;
        if matches!(end, End::Cancelled) {
            self.release(client, &path).await;
        }
        // Deletes the node in the background if it still exists (a no-op after `release`).
        drop(lock);
        end
    }

    /// The leading phase: heartbeats, lease extension, pause and resume.
    async fn lead(&self, client: &Client, path: &str, states: &mut StateWatcher) -> End {
        let negotiated = client.session_timeout();
        let lease = negotiated * 2 / 3;
        let period = (negotiated / 3).max(Duration::from_millis(1));
        let session = client.session_id();
        let mut beat: Option<Beat> = None;
        let mut next_beat = Instant::now();
        // `Some` exactly while this candidate reports `Leading`.
        let mut lease_until: Option<Instant> = None;
        let mut why = format!("acquired latch {path}");
        loop {
            let state = client.state();
            if state.is_terminated() {
                return End::Lost(format!("ZooKeeper session {state}"));
            }
            let connected = state == SessionState::SyncConnected;
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return End::Cancelled,
                state = states.changed() => match state {
                    SessionState::Disconnected | SessionState::ConnectedReadOnly => {
                        beat = None;
                        if lease_until.take().is_some() {
                            self.pause("disconnected from ZooKeeper; session not confirmed");
                        }
                        why = "reconnected to ZooKeeper; latch node confirmed".into();
                    }
                    // Re-check our node at once, in the same session.
                    SessionState::SyncConnected => next_beat = Instant::now(),
                    other => return End::Lost(format!("ZooKeeper session {other}")),
                },
                (sent, reply) = poll_beat(&mut beat) => {
                    beat = None;
                    match reply {
                        Ok(Some(stat)) if stat.ephemeral_owner == session.0 => {
                            next_beat = sent + period;
                            let until = sent + lease;
                            if until <= Instant::now() {
                                warn!(scope = %self.scope, %path, "heartbeat reply came too late to extend the lease");
                                continue;
                            }
                            if lease_until.is_some() {
                                self.signal.extend_until(until);
                            } else {
                                self.lead_until(until, &why);
                            }
                            lease_until = Some(until);
                        }
                        Ok(Some(stat)) => {
                            return End::Lost(format!(
                                "latch node {path} is owned by session {:#x}, not {session}",
                                stat.ephemeral_owner
                            ));
                        }
                        Ok(None) => return End::Lost(format!("latch node {path} is gone")),
                        Err(e @ (ZkError::SessionExpired
                        | ZkError::SessionMoved
                        | ZkError::AuthFailed
                        | ZkError::ClientClosed)) => {
                            return End::Lost(format!("heartbeat on {path} failed: {e}"));
                        }
                        Err(e) => {
                            warn!(scope = %self.scope, %path, "heartbeat failed: {e}");
                            if lease_until.take().is_some() {
                                self.pause(&format!("heartbeat failed: {e}"));
                                why = "heartbeat confirmed again".into();
                            }
                            next_beat = Instant::now() + period / 4;
                        }
                    }
                }
                _ = sleep_until_some(lease_until) => {
                    warn!(scope = %self.scope, %path, "lease deadline passed without a confirmed heartbeat");
                    lease_until = None;
                    beat = None;
                    self.pause("lease deadline passed without a confirmed heartbeat");
                    why = "heartbeat confirmed again".into();
                    next_beat = Instant::now();
                }
                _ = sleep_until(next_beat), if beat.is_none() && connected => {
                    beat = Some(Beat::send(client, path));
                }
            }
        }
    }

    /// Gives up leadership: stop acting, delete our node, then report `closed`.
    async fn release(&self, client: &Client, path: &str) {
        if self.signal.current() == Leadership::Leading {
            self.pause("closing: releasing leadership");
        }
        let limit = RELEASE_TIMEOUT.min(client.session_timeout());
        match timeout(limit, client.delete(path, None)).await {
            Ok(Ok(())) | Ok(Err(ZkError::NoNode)) => {
                info!(scope = %self.scope, %path, "latch node deleted; leadership released");
            }
            Ok(Err(e)) => {
                warn!(scope = %self.scope, %path, "cannot delete latch node at close: {e}; the session close removes it");
            }
            Err(_) => {
                warn!(scope = %self.scope, %path, "latch node deletion timed out after {limit:?}; the session close or expiry removes it");
            }
        }
    }

    fn lead_until(&self, until: Instant, reason: &str) {
        self.log_transition(Leadership::Leading, reason);
        self.signal.lead_until(until, reason);
    }

    fn pause(&self, reason: &str) {
        self.log_transition(Leadership::Paused, reason);
        self.signal.pause(reason);
    }

    fn follow(&self, reason: &str) {
        self.log_transition(Leadership::Following, reason);
        self.signal.follow(reason);
    }

    fn no_quorum(&self, reason: &str) {
        self.log_transition(Leadership::NoQuorum, reason);
        self.signal.no_quorum(reason);
    }

    fn log_transition(&self, to: Leadership, reason: &str) {
        let from = self.signal.current();
        if from != to {
            info!(
                scope = %self.scope,
                identity = %self.identity,
                "leadership {} -> {}: {reason}",
                from.as_str(),
                to.as_str()
            );
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

/// Sleeps until `deadline`; never resolves when there is none.
async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(d) => sleep_until(d).await,
        None => pending().await,
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
