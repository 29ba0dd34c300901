//! The `etcd` backend: one etcd v3 election per scope, all of one server's elections on one lease
//! with one keep-alive.
//!
//! A backend instance (one per podsweep engine, i.e. per Kyuubi server) opens one connection and
//! grants one lease of `ha.etcd.leaseTimeout` (whole seconds, 30 by default) per identity when its first
//! scope campaigns, and shares them with every scope (the campaign loop is [`super::driver`]'s,
//! shared with ZooKeeper). Each scope campaigns through etcd's election service on
//! `/<namespace>-podsweep/elections/<encoded scope>` with its identity (the Kyuubi server id) as
//! the value. etcd keeps one key `<name>/<lease id in hex>` per candidate, attached to its lease;
//! the key with the lowest create revision leads. Scopes have independent leaders.
//!
//! # Guarantees
//! * Nothing but `NoQuorum` is reported before real requests (`status`, a lease grant) have
//!   been answered: the client connects lazily, so this is how health is proven.
//! * The lease is kept alive here, one request in flight at a time, every
//!   [`LeaseTiming::period`] (about TTL/3) over one keep-alive stream, for all scopes. The lease
//!   deadline of every leading scope is `sent + TTL - margin`, with `sent` taken *before* the
//!   request that the server acknowledged with a TTL above zero: the server cannot expire the
//!   lease before `sent + TTL`, so acting stops at least `margin` (max(TTL/3, 1 s), at most
//!   TTL/2) before a successor can be elected. A frozen process (SIGSTOP, long GC, VM pause)
//!   wakes up past its deadline, so [`ElectionHandle::may_act`](super::ElectionHandle::may_act)
//!   is false before anything runs.
//! * `Leading` needs the campaign to return **and** a read showing that the leader key still
//!   exists, was created at the campaign's revision and is attached to our lease.
//! * A leader watches its own leader key: deleted (by an operator, or by a resign of an earlier
//!   campaign that landed late) or replaced, it stops leading at once and campaigns again, so it
//!   never leads beside the candidate that the deletion made leader.
//! * A failed keep-alive, or a keep-alive stream that breaks while idle (the connection went
//!   down), pauses every leader at once; an overdue keep-alive pauses them when less than half a
//!   period is left. After the next confirmed keep-alive each reads its key again and leads. A
//!   reply with TTL 0 (lease gone) means `Following` for every scope and a fresh start with one
//!   new lease.
//! * While etcd cannot be reached the state is `NoQuorum`; connections and campaigns are
//!   retried with capped exponential backoff and jitter (one connection attempt at a time for
//!   all scopes). Campaign calls are cancellable, and HTTP/2 keep-alive (also while idle) plus a
//!   connect timeout stop a frozen server from hanging one forever.
//! * On cancellation a leader pauses and resigns with its leader key (bounded by a short
//!   timeout), then reports `Following` with reason `closed`: the next candidate's pending
//!   campaign returns within milliseconds. A waiting candidate drops its campaign call and
//!   deletes its key. Only that scope's key goes; the lease is revoked when the last scope using
//!   it has ended.
//! * A waiting candidate does not rely on etcd's campaign call alone to learn that its turn came
//!   (etcd 3.4.23 left some open): one DELETE-only watch per session on the election root wakes
//!   it when a key of its election goes, and a call still open [`wakeups::WAKE_GRACE`] later
//!   while its key is the first is made again (module `wakeups`).
//!
//! # Caveats
//! * Leadership is an efficiency lock, not a correctness lock. Jepsen (etcd 3.4.3) found that
//!   an etcd lock can be granted after its lease expired, and nothing fences a stale leader;
//!   the Kubernetes API cannot check a fencing token anyway. Deletes carry UID preconditions,
//!   so an overlap costs a duplicate DELETE that ends in 404 or 409.
//! * etcd raises TTLs below its minimum (1.5 election timeouts) and refreshes every lease to a
//!   full TTL plus an election timeout whenever it elects a leader of its own, so failover
//!   after a crash can take longer than the configured TTL. The local deadline uses the
//!   configured TTL (the granted one is never lower), which is the conservative side.
//! * A leader with no keep-alive confirmed for a whole TTL reports `NoQuorum` but keeps its
//!   lease and campaign: if etcd comes back with the lease alive (a restart refreshes it), it
//!   leads again without losing its place.
//! * The margin also absorbs clock rate differences; a much faster server clock can eat it.

pub(crate) mod inspect;
mod lease;
mod store;
mod wakeups;

use std::error::Error as _;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Certificate, Client, ConnectOptions, Error as EtcdError, EventType, Identity, LeaderKey,
    PutOptions, ResignOptions, TlsOptions, WatchOptions, WatchResponse,
};
use futures::future::BoxFuture;
use tokio::sync::watch;
use tokio::time::{timeout, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

pub use self::lease::LeaseTiming;
use self::lease::{send_beat, KeepAlive, Reply};
use self::wakeups::{Wakeups, WAKE_GRACE};
use super::driver::{
    self, poll_some, sleep_until_some, spawn_upkeep, Connect, Fault, Health, Pool, Seat, Session,
};
use super::store::ScopeStore;
use super::{Backend, LeaderSignal};
use crate::backoff::Backoff;
use crate::config::{keys, EtcdSettings, EtcdTls};
use crate::scope::Scope;

/// First delay after a failed connection, campaign or lost lease.
const BACKOFF_BASE: Duration = Duration::from_millis(100);
/// Longest delay between two connection or campaign attempts.
const BACKOFF_CAP: Duration = Duration::from_secs(10);
/// First delay after a failed keep-alive; the cap is one keep-alive period.
const BEAT_RETRY_BASE: Duration = Duration::from_millis(50);
/// Upper bound on each unary request (status, grant, get, revoke).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause before a broken watch of the leader key is read and opened again.
const LOST_WATCH_RETRY: Duration = Duration::from_secs(1);
/// Upper bound on resign + revoke at close.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(2);
/// TCP connect timeout per endpoint.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// HTTP/2 ping interval (pings go out only after this long without a frame from the server).
/// etcd answers pings more frequent than `--grpc-keepalive-min-time` (5 s by default) with
/// GOAWAY `too_many_pings`, so this stays above it.
const H2_PING_INTERVAL: Duration = Duration::from_secs(6);
/// How long an HTTP/2 ping may stay unanswered before the connection is dropped.
const H2_PING_TIMEOUT: Duration = Duration::from_secs(3);

/// Leader election through etcd: one connection and one lease per server, one election per scope
/// on that lease.
#[derive(Clone, Debug)]
pub struct EtcdBackend {
    settings: EtcdSettings,
    pool: Arc<Pool<EtcdConnect>>,
}

impl EtcdBackend {
    pub fn new(settings: EtcdSettings) -> Self {
        let pool = Arc::new(Pool::new(EtcdConnect {
            settings: settings.clone(),
            timing: LeaseTiming::new(settings.lease_ttl),
        }));
        EtcdBackend { settings, pool }
    }

    /// The election name of `scope`: `<root>/<encoded scope>`.
    pub fn election_name(&self, scope: &Scope) -> String {
        election_name(&self.settings, scope)
    }
}

fn election_name(settings: &EtcdSettings, scope: &Scope) -> String {
    format!("{}/{}", settings.root(), scope.encoded())
}

/// The key where the leader of `scope` says who it is and since when:
/// `/<namespace>-podsweep/leaders/<encoded scope>`.
fn leader_record(settings: &EtcdSettings, scope: &Scope) -> String {
    format!("{}/{}", leaders_root(settings), scope.encoded())
}

fn leaders_root(settings: &EtcdSettings) -> String {
    format!(
        "{}/leaders",
        crate::election::layout::podsweep_root(&settings.namespace)
    )
}

impl Backend for EtcdBackend {
    fn lists_servers(&self) -> bool {
        true
    }

    fn name(&self) -> &'static str {
        "etcd"
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

    fn store(&self, identity: &super::Identity) -> Option<Arc<dyn ScopeStore>> {
        Some(Arc::new(store::EtcdStore {
            settings: self.settings.clone(),
            pool: self.pool.clone(),
            identity: identity.clone(),
        }))
    }

    fn out_of_contact(&self, identity: &str) -> bool {
        self.pool.out_of_contact(identity)
    }
}

/// Opens etcd sessions: a connection, a lease, and its keep-alive.
struct EtcdConnect {
    settings: EtcdSettings,
    timing: LeaseTiming,
}

impl Connect for EtcdConnect {
    type Session = EtcdSession;

    /// Connects, proves health with `status`, and grants the session's lease.
    fn connect(&self, identity: &str) -> BoxFuture<'static, Result<EtcdSession, String>> {
        let (settings, timing) = (self.settings.clone(), self.timing);
        let identity = identity.to_owned();
        Box::pin(async move {
            let endpoints = settings.endpoints.join(",");
            let fail = |what: &str, e: String| format!("cannot {what} etcd at {endpoints}: {e}");
            let mut options = ConnectOptions::new()
                .with_keep_alive(H2_PING_INTERVAL, H2_PING_TIMEOUT)
                .with_keep_alive_while_idle(true)
                .with_connect_timeout(CONNECT_TIMEOUT)
                .with_require_leader(true);
            if let Some(tls) = &settings.tls {
                options = options.with_tls(tls_options(tls)?);
            }
            let mut client = bounded(Client::connect(&settings.endpoints, Some(options)))
                .await
                .map_err(|e| fail("connect to", e))?;
            let status = bounded(client.status())
                .await
                .map_err(|e| fail("reach", e))?;
            let ttl = timing.ttl.as_secs() as i64;
            let grant = bounded(client.lease_grant(ttl, None))
                .await
                .map_err(|e| fail("grant a lease on", e))?;
            info!(
                %identity,
                version = status.version(),
                lease = %hex(grant.id()),
                requested_ttl_s = ttl,
                granted_ttl_s = grant.ttl(),
                "connected to etcd at {endpoints}"
            );
            Ok(EtcdSession::start(client, grant.id(), settings, timing))
        })
    }

    fn backoff(&self) -> (Duration, Duration) {
        (BACKOFF_BASE, BACKOFF_CAP)
    }
}

/// One server's etcd connection and lease, kept alive by its own task.
struct EtcdSession {
    client: Client,
    lease: i64,
    settings: EtcdSettings,
    timing: LeaseTiming,
    health: watch::Receiver<Health>,
    stop: CancellationToken,
    /// This session's waiting candidates, woken when a key of their election goes.
    wakeups: Arc<Wakeups>,
}

impl EtcdSession {
    fn start(client: Client, lease: i64, settings: EtcdSettings, timing: LeaseTiming) -> Self {
        let (tx, health) = watch::channel(Health::Up { until: None });
        let stop = CancellationToken::new();
        let (alive, stopping) = (client.clone(), stop.clone());
        spawn_upkeep("etcd keep-alive", tx, move |tx| {
            Box::pin(keep_alive(alive, lease, timing, tx, stopping))
        });
        let wakeups = Arc::new(Wakeups::default());
        tokio::spawn(wakeups::watch_deletes(
            client.clone(),
            settings.root(),
            wakeups.clone(),
            stop.clone(),
        ));
        EtcdSession {
            client,
            lease,
            settings,
            timing,
            health,
            stop,
            wakeups,
        }
    }
}

impl Drop for EtcdSession {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Session for EtcdSession {
    fn describe(&self) -> String {
        format!("etcd lease {}", hex(self.lease))
    }

    fn health(&self) -> watch::Receiver<Health> {
        self.health.clone()
    }

    /// Pause when less than half a keep-alive period is left.
    fn margin(&self) -> Duration {
        self.timing.period / 2
    }

    fn stable_after(&self) -> Duration {
        self.timing.ttl
    }

    fn election(&self, scope: &Scope) -> String {
        election_name(&self.settings, scope)
    }

    /// One campaign call with the session's lease, then a read that confirms the leader key is
    /// ours.
    fn contend(
        self: Arc<Self>,
        scope: &Scope,
        identity: &str,
    ) -> BoxFuture<'static, Result<Box<dyn Seat>, String>> {
        let (mut election, kv) = (self.client.election_client(), self.client.kv_client());
        let (name, value, lease) = (self.election(scope), identity.to_owned(), self.lease);
        let (record, identity) = (leader_record(&self.settings, scope), identity.to_owned());
        let client = self.client.clone();
        let waiting = self.wakeups.register(&name);
        Box::pin(async move {
            let ours = format!("{name}/{}", hex(lease));
            let lose = take_lost_reply(&name, &identity);
            let call = election.campaign(name.clone(), value, lease);
            let campaign = async move {
                let won = call.await;
                if lose {
                    std::future::pending::<()>().await;
                }
                won
            };
            tokio::pin!(campaign);
            // etcd's campaign call can miss its turn (see `wakeups`): when a key of this
            // election goes and the call stays open, a read says whether our key leads.
            let won = loop {
                tokio::select! {
                    won = &mut campaign => break won,
                    _ = waiting.woken() => {}
                }
                tokio::select! {
                    won = &mut campaign => break won,
                    _ = tokio::time::sleep(WAKE_GRACE) => {}
                }
                if wakeups::is_first(kv.clone(), &name, ours.as_bytes()).await == Some(true) {
                    return Err(format!(
                        "etcd's campaign call for {name} had not returned {WAKE_GRACE:?} after \
                         our key {ours} became the first: campaigning again"
                    ));
                }
            };
            let won = won.map_err(|e| format!("campaign for {name} failed: {}", describe(&e)))?;
            let key = won
                .leader()
                .cloned()
                .ok_or("the campaign reply has no leader key")?;
            let seat = EtcdSeat {
                client,
                kv,
                name,
                lease,
                key,
            };
            // A key deleted or re-created meanwhile (lease expiry, or the server resigning a
            // cancelled earlier campaign of ours) is not leadership: campaign again.
            match seat.check().await {
                Ok(()) => {
                    seat.stamp(&record, &identity).await;
                    Ok(Box::new(seat) as Box<dyn Seat>)
                }
                Err(Fault::Lost(e) | Fault::Retry(e)) => Err(e),
            }
        })
    }

    /// A withdrawn campaign leaves its key `<name>/<lease>` (etcd resigns a cancelled campaign
    /// itself, but later); delete it now, so that only this scope's key goes.
    fn abandon(self: Arc<Self>, scope: &Scope) -> BoxFuture<'static, ()> {
        let key = format!("{}/{}", self.election(scope), hex(self.lease));
        let mut kv = self.client.kv_client();
        Box::pin(async move {
            match timeout(RELEASE_TIMEOUT, kv.delete(key.as_str(), None)).await {
                Ok(Ok(_)) => info!(%key, "campaign withdrawn; its key is deleted"),
                Ok(Err(e)) => {
                    warn!(%key, "cannot delete the withdrawn campaign's key: {}", describe(&e))
                }
                Err(_) => warn!(%key, "deleting the withdrawn campaign's key timed out"),
            }
        })
    }

    /// Revokes the lease (deleting every key still on it), bounded.
    fn close(self: Arc<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            self.stop.cancel();
            let mut c = self.client.clone();
            let lease = hex(self.lease);
            let limit = RELEASE_TIMEOUT.min(self.timing.ttl);
            match timeout(limit, c.lease_revoke(self.lease)).await {
                Ok(Ok(_)) => info!(%lease, "lease revoked"),
                Ok(Err(e)) if describe(&e).contains("lease not found") => {
                    info!(%lease, "lease already gone");
                }
                Ok(Err(e)) => warn!(
                    %lease,
                    "cannot revoke the lease: {}; it expires within its TTL", describe(&e)
                ),
                Err(_) => warn!(
                    %lease,
                    "lease revocation timed out after {limit:?}; the lease expires within its TTL"
                ),
            }
        })
    }
}

/// Keeps the session's lease alive, one keep-alive in flight at a time, every
/// [`LeaseTiming::period`], and publishes what the replies show.
async fn keep_alive(
    client: Client,
    lease: i64,
    t: LeaseTiming,
    health: Arc<watch::Sender<Health>>,
    stop: CancellationToken,
) {
    let leases = client.lease_client();
    let beat_at = |stream: Option<KeepAlive>, due: Instant| -> BoxFuture<'static, _> {
        Box::pin(send_beat(leases.clone(), lease, stream, due, t.window()))
    };
    let publish = |h: Health| {
        health.send_if_modified(|old| {
            let changed = *old != h;
            *old = h;
            changed
        });
    };
    // Always one keep-alive pending: waiting to be due, or in flight.
    let mut beat = Some(beat_at(None, Instant::now()));
    let mut backoff = Backoff::new(BEAT_RETRY_BASE, t.period);
    // When the last confirmed keep-alive was sent, and whether a whole TTL passed since.
    let mut last_ack: Option<Instant> = None;
    let mut stale = false;
    loop {
        let stale_at = last_ack.filter(|_| !stale).map(|sent| sent + t.ttl);
        tokio::select! {
            biased;
            _ = stop.cancelled() => return,
            (sent, reply, stream) = poll_some(&mut beat) => match reply {
                Reply::Alive => {
                    (last_ack, stale) = (Some(sent), false);
                    backoff.reset();
                    let until = sent + t.window();
                    let late = until <= Instant::now();
                    let due = if late { Instant::now() } else { sent + t.period };
                    beat = Some(beat_at(stream, due));
                    if late {
                        warn!(lease = %hex(lease), "keep-alive reply came too late to extend the lease");
                    } else {
                        publish(Health::Up { until: Some(until) });
                    }
                }
                Reply::Gone => {
                    publish(Health::Lost(format!("lease {} is gone (expired or revoked)", hex(lease))));
                    return;
                }
                Reply::Failed(e) => {
                    let reason = format!("lease keep-alive failed: {e}");
                    // runbook: etcd lease keep-alive failed
                    warn!(lease = %hex(lease), "{reason}");
                    beat = Some(beat_at(None, Instant::now() + backoff.next_delay()));
                    publish(Health::Doubt(reason));
                }
            },
            _ = sleep_until_some(stale_at) => {
                stale = true;
                let reason = format!(
                    "no keep-alive confirmed for a whole lease TTL ({:?}); it may have expired",
                    t.ttl
                );
                // runbook: etcd lease not confirmed for a whole TTL
                warn!(lease = %hex(lease), "{reason}");
                publish(Health::Down(reason));
            }
        }
    }
}

/// A won election: our leader key on the session's lease.
struct EtcdSeat {
    client: Client,
    kv: etcd_client::KvClient,
    name: String,
    lease: i64,
    key: LeaderKey,
}

impl EtcdSeat {
    /// The leader key still exists, was created at the campaign's revision and is on our lease.
    fn check(&self) -> BoxFuture<'static, Result<(), Fault>> {
        let mut kv = self.kv.clone();
        let (key, rev, lease) = (self.key.key().to_vec(), self.key.rev(), self.lease);
        Box::pin(async move {
            let shown = String::from_utf8_lossy(&key).into_owned();
            let got = bounded(kv.get(key, None)).await;
            let got =
                got.map_err(|e| Fault::Retry(format!("cannot read leader key {shown}: {e}")))?;
            match got.kvs().first() {
                Some(kv) if kv.create_revision() == rev && kv.lease() == lease => Ok(()),
                Some(kv) => Err(Fault::Lost(format!(
                    "leader key {shown} has create revision {} and lease {}, not {} and {}",
                    kv.create_revision(),
                    hex(kv.lease()),
                    rev,
                    hex(lease)
                ))),
                None => Err(Fault::Lost(format!("leader key {shown} vanished"))),
            }
        })
    }
}

impl EtcdSeat {
    /// Records who leads and since when at `record` (JSON: `server`, `key`, `since_ms`), on the
    /// session's lease so that it goes with the server; `podsweep status` reads it, and trusts it
    /// only while `key` is the election's leader key. Bounded; a failure costs only that record.
    async fn stamp(&self, record: &str, identity: &str) {
        let value = serde_json::json!({
            "server": identity,
            "key": String::from_utf8_lossy(self.key.key()),
            "since_ms": crate::metrics::epoch_ms(),
        })
        .to_string();
        let mut kv = self.kv.clone();
        let put = kv.put(
            record,
            value,
            Some(PutOptions::new().with_lease(self.lease)),
        );
        if let Err(e) = bounded(put).await {
            warn!(key = %record, "Cannot record the start of this leadership in etcd: {e}");
        }
    }
}

impl Seat for EtcdSeat {
    fn describe(&self) -> String {
        let shown = String::from_utf8_lossy(self.key.key());
        format!("won the election {} with key {shown}", self.name)
    }

    /// The key check; the lease deadline comes from the session's keep-alives.
    fn confirm(&self) -> BoxFuture<'static, Result<Option<Instant>, Fault>> {
        let check = self.check();
        Box::pin(async move { check.await.map(|()| None) })
    }

    /// Watches our leader key from the revision after its creation: a DELETE (an operator, a
    /// resign of an earlier campaign that landed late) or a PUT that replaced it ends the seat,
    /// so this server steps down while the next candidate leads. A broken or cancelled watch
    /// (connection trouble, compaction) is followed by a read of the key and a new watch from
    /// that read's revision; meanwhile the session's keep-alive pauses leaders as it must.
    fn lost(&self) -> BoxFuture<'static, String> {
        let mut watcher = self.client.watch_client();
        let (key, rev, lease) = (self.key.key().to_vec(), self.key.rev(), self.lease);
        let check = self.kv.clone();
        Box::pin(async move {
            let shown = String::from_utf8_lossy(&key).into_owned();
            let mut from = rev + 1;
            loop {
                let options = WatchOptions::new().with_start_revision(from);
                if let Ok(Ok(mut stream)) =
                    timeout(REQUEST_TIMEOUT, watcher.watch(key.clone(), Some(options))).await
                {
                    while let Ok(Some(reply)) = stream.message().await {
                        if let Some(reason) = seat_event(&reply, &shown, rev, lease) {
                            return reason;
                        }
                        if reply.canceled() {
                            break;
                        }
                    }
                }
                tokio::time::sleep(LOST_WATCH_RETRY).await;
                let mut kv = check.clone();
                match bounded(kv.get(key.clone(), None)).await {
                    Ok(got) => {
                        match got.kvs().first() {
                            Some(kv) if kv.create_revision() == rev && kv.lease() == lease => {}
                            Some(_) => return format!("leader key {shown} was replaced"),
                            None => return format!("leader key {shown} vanished"),
                        }
                        from = got.header().map_or(from, |h| h.revision() + 1);
                    }
                    // etcd out of reach: the session's keep-alive reports it and pauses leaders.
                    Err(e) => {
                        debug!(key = %shown, "cannot read the leader key to watch it again: {e}");
                    }
                }
            }
        })
    }

    /// Resigns with our leader key (deleting it), bounded.
    fn release(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let mut c = self.client.clone();
            let name = self.name.clone();
            let resign = c.resign(Some(ResignOptions::new().with_leader(self.key.clone())));
            match timeout(RELEASE_TIMEOUT, resign).await {
                Ok(Ok(_)) => info!(election = %name, "resigned; leadership released"),
                Ok(Err(e)) => {
                    warn!(election = %name, "cannot resign: {}; the lease's end removes the key", describe(&e))
                }
                Err(_) => {
                    warn!(election = %name, "resign timed out after {RELEASE_TIMEOUT:?}; the lease's end removes the key")
                }
            }
        })
    }
}

/// Whether a watch reply on our leader key ends the seat: the key deleted, or put anew (another
/// create revision or lease).
fn seat_event(reply: &WatchResponse, shown: &str, rev: i64, lease: i64) -> Option<String> {
    reply.events().iter().find_map(|ev| match ev.event_type() {
        EventType::Delete => Some(format!("leader key {shown} was deleted")),
        EventType::Put => ev
            .kv()
            .filter(|kv| kv.create_revision() != rev || kv.lease() != lease)
            .map(|_| format!("leader key {shown} was replaced")),
    })
}

/// TLS options from `kyuubi.ha.etcd.ssl.*`: the CA and the client identity, read from files.
fn tls_options(tls: &EtcdTls) -> Result<TlsOptions, String> {
    let read = |key: &str, path: &str| {
        std::fs::read(path).map_err(|e| format!("cannot read {key} file {path}: {e}"))
    };
    let ca = read(keys::ETCD_SSL_CA, &tls.ca)?;
    let cert = read(keys::ETCD_SSL_CERT, &tls.cert)?;
    let key = read(keys::ETCD_SSL_KEY, &tls.key)?;
    Ok(TlsOptions::new()
        .ca_certificate(Certificate::from_pem(ca))
        .identity(Identity::from_pem(cert, key)))
}

/// Runs one unary request with [`REQUEST_TIMEOUT`]; errors come back described.
async fn bounded<T>(request: impl Future<Output = Result<T, EtcdError>>) -> Result<T, String> {
    match timeout(REQUEST_TIMEOUT, request).await {
        Ok(result) => result.map_err(|e| describe(&e)),
        Err(_) => Err(format!("no reply within {REQUEST_TIMEOUT:?}")),
    }
}

/// An error with its whole source chain (TLS and connection causes sit deep inside).
pub fn describe(e: &EtcdError) -> String {
    let (mut out, mut source) = match e {
        EtcdError::GRpcStatus(s) => (format!("gRPC {:?}: {}", s.code(), s.message()), s.source()),
        EtcdError::TransportError(t) => (format!("transport error: {t}"), t.source()),
        EtcdError::IoError(io) => (format!("io error: {io}"), io.source()),
        other => (other.to_string(), None),
    };
    while let Some(cause) = source {
        let text = cause.to_string();
        if !out.contains(&text) {
            out = format!("{out}: {text}");
        }
        source = cause.source();
    }
    out
}

/// Campaign replies to hide: (election name, identity); see [`lose_next_campaign_reply`].
#[cfg(feature = "etcd-test-hooks")]
static LOST_REPLIES: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// Test support, with the `etcd-test-hooks` feature only (never in a shipped build): the next
/// reply etcd sends to a campaign call of `identity` in election `name` goes unseen, as etcd
/// 3.4.23 was seen to leave campaign calls open (module `wakeups`); the candidate then has only
/// its own watch of leaving candidates to find its turn.
#[cfg(feature = "etcd-test-hooks")]
pub fn lose_next_campaign_reply(name: &str, identity: &str) {
    let mut lost = LOST_REPLIES.lock().unwrap_or_else(|e| e.into_inner());
    lost.push((name.to_owned(), identity.to_owned()));
}

#[cfg(feature = "etcd-test-hooks")]
fn take_lost_reply(name: &str, identity: &str) -> bool {
    let mut lost = LOST_REPLIES.lock().unwrap_or_else(|e| e.into_inner());
    let at = lost.iter().position(|(n, i)| n == name && i == identity);
    at.map(|at| lost.remove(at)).is_some()
}

/// Without the `etcd-test-hooks` feature no reply is ever hidden.
#[cfg(not(feature = "etcd-test-hooks"))]
fn take_lost_reply(_name: &str, _identity: &str) -> bool {
    false
}

/// A lease id as etcd prints it (and as it appears in election keys).
fn hex(lease: i64) -> String {
    format!("{lease:x}")
}
