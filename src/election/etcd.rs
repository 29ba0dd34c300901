//! The `etcd` backend: one etcd v3 election per scope, kept alive by our own lease keep-alive.
//!
//! Every scope campaigns on its own connection. A candidate grants a lease of
//! `kyuubi.ha.etcd.lease.timeout` (whole seconds) and campaigns through etcd's election service
//! on `/<namespace>-podsweep/elections/<encoded scope>` with its identity (the Kyuubi server id)
//! as the value. etcd keeps one key `<name>/<lease id in hex>` per candidate, attached to its
//! lease; the key with the lowest create revision leads.
//!
//! # Guarantees
//! * Nothing but `NoQuorum` is reported before real requests (`status`, a lease grant) have
//!   been answered: the client connects lazily, so this is how health is proven.
//! * The lease is kept alive here, one request in flight at a time, every
//!   [`LeaseTiming::period`] (about TTL/3) over one keep-alive stream. The lease deadline is
//!   `sent + TTL - margin`, with `sent` taken *before* the request that the server acknowledged
//!   with a TTL above zero: the server cannot expire the lease before `sent + TTL`, so acting
//!   stops at least `margin` (max(TTL/3, 1 s), at most TTL/2) before a successor can be
//!   elected. A frozen process (SIGSTOP, long GC, VM pause) wakes up past its deadline, so
//!   [`ElectionHandle::may_act`](super::ElectionHandle::may_act) is false before anything runs.
//! * `Leading` needs the campaign to return **and** a read showing that the leader key still
//!   exists, was created at the campaign's revision and is attached to our lease.
//! * A failed keep-alive, or a keep-alive stream that breaks while idle (the connection went
//!   down), pauses a leader at once; an overdue keep-alive pauses it when less than half a
//!   period is left. The next confirmed keep-alive restores `Leading`. A reply with TTL 0
//!   (lease gone) means `Following` and a fresh start with a new lease.
//! * While etcd cannot be reached the state is `NoQuorum`; connections and campaigns are
//!   retried with capped exponential backoff and jitter. Campaign calls are cancellable, and
//!   HTTP/2 keep-alive (also while idle) plus a connect timeout stop a frozen server from
//!   hanging one forever.
//! * On cancellation a leader pauses, resigns with its leader key and revokes its lease
//!   (bounded by a short timeout), then reports `Following` with reason `closed`: the next
//!   candidate's pending campaign returns within milliseconds. A waiting candidate drops its
//!   campaign call and revokes its lease, so its key disappears.
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

mod lease;

use std::error::Error as _;
use std::future::{pending, Future};
use std::time::Duration;

use etcd_client::{
    Certificate, Client, ConnectOptions, Error as EtcdError, Identity, LeaderKey, ResignOptions,
    TlsOptions,
};
use futures::future::BoxFuture;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

pub use self::lease::LeaseTiming;
use self::lease::{send_beat, KeepAlive, Reply};
use super::backoff::Backoff;
use super::{Backend, LeaderSignal, Leadership};
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

/// Leader election through etcd: one connection, lease and election per scope.
#[derive(Clone, Debug)]
pub struct EtcdBackend {
    settings: EtcdSettings,
}

impl EtcdBackend {
    pub fn new(settings: EtcdSettings) -> Self {
        EtcdBackend { settings }
    }

    /// The election name of `scope`: `<root>/<encoded scope>`.
    pub fn election_name(&self, scope: &Scope) -> String {
        format!("{}/{}", self.settings.root(), scope.encoded())
    }
}

impl Backend for EtcdBackend {
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
        let campaign = Campaign {
            name: self.election_name(&scope),
            timing: LeaseTiming::new(self.settings.lease_ttl),
            settings: self.settings.clone(),
            scope: scope.to_string(),
            identity,
            signal,
            cancel,
        };
        Box::pin(campaign.run())
    }
}

/// Why one session (one lease) ended.
enum End {
    /// The cancel token fired; leadership, if any, has been released.
    Cancelled,
    /// The lease is gone on the server; start over with a new lease.
    Lost(String),
}

/// What woke the session loop.
enum Event {
    Cancelled,
    Beat(Instant, Reply, Option<KeepAlive>),
    /// A campaign ended: our confirmed leader key, or why to campaign again.
    Contest(Result<LeaderKey, String>),
    /// Less than half a period left before the lease deadline, no newer confirmation.
    Overdue,
    /// No keep-alive confirmed for a whole TTL.
    Stale,
    Retry,
}

/// One scope's campaign: everything the loop needs, owned.
struct Campaign {
    settings: EtcdSettings,
    timing: LeaseTiming,
    name: String,
    scope: String,
    identity: String,
    signal: LeaderSignal,
    cancel: CancellationToken,
}

impl Campaign {
    async fn run(self) {
        let mut backoff = Backoff::new(BACKOFF_BASE, BACKOFF_CAP);
        loop {
            let connected = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => break,
                r = self.connect() => r,
            };
            let (client, lease) = match connected {
                Ok(c) => c,
                Err(reason) => {
                    warn!(scope = %self.scope, "{reason}");
                    self.report(Leadership::NoQuorum, &reason);
                    if self.rest(backoff.next_delay()).await {
                        continue;
                    }
                    break;
                }
            };
            let started = Instant::now();
            match self.session(&client, lease).await {
                End::Cancelled => break,
                End::Lost(reason) => {
                    warn!(scope = %self.scope, lease = %hex(lease), "election ended: {reason}");
                    // The server answered, so it is reachable; we do not lead.
                    self.report(Leadership::Following, &reason);
                    if started.elapsed() >= self.timing.ttl {
                        backoff.reset();
                    }
                    if !self.rest(backoff.next_delay()).await {
                        break;
                    }
                }
            }
        }
        self.report(Leadership::Following, "closed");
    }

    /// Sleeps for `delay`; false if cancelled meanwhile.
    async fn rest(&self, delay: Duration) -> bool {
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => false,
            _ = sleep(delay) => true,
        }
    }

    /// Connects, proves health with `status`, and grants this session's lease.
    async fn connect(&self) -> Result<(Client, i64), String> {
        let endpoints = self.settings.endpoints.join(",");
        let fail = |what: &str, e: String| format!("cannot {what} etcd at {endpoints}: {e}");
        let mut options = ConnectOptions::new()
            .with_keep_alive(H2_PING_INTERVAL, H2_PING_TIMEOUT)
            .with_keep_alive_while_idle(true)
            .with_connect_timeout(CONNECT_TIMEOUT)
            .with_require_leader(true);
        if let Some(tls) = &self.settings.tls {
            options = options.with_tls(tls_options(tls)?);
        }
        let mut client = bounded(Client::connect(&self.settings.endpoints, Some(options)))
            .await
            .map_err(|e| fail("connect to", e))?;
        let status = bounded(client.status())
            .await
            .map_err(|e| fail("reach", e))?;
        let ttl = self.timing.ttl.as_secs() as i64;
        let grant = bounded(client.lease_grant(ttl, None))
            .await
            .map_err(|e| fail("grant a lease on", e))?;
        info!(
            scope = %self.scope,
            version = status.version(),
            lease = %hex(grant.id()),
            requested_ttl_s = ttl,
            granted_ttl_s = grant.ttl(),
            "connected to etcd at {endpoints}"
        );
        Ok((client, grant.id()))
    }

    /// Campaigns with `lease`, then leads until the lease or the key is lost, or until
    /// cancellation.
    async fn session(&self, client: &Client, lease: i64) -> End {
        let t = self.timing;
        let leases = client.lease_client();
        let beat_at = |stream: Option<KeepAlive>, due: Instant| -> BoxFuture<'static, _> {
            Box::pin(send_beat(leases.clone(), lease, stream, due, t.window()))
        };
        // Always one keep-alive pending: waiting to be due, or in flight.
        let mut beat = Some(beat_at(None, Instant::now()));
        let mut beat_backoff = Backoff::new(BEAT_RETRY_BASE, t.period);
        let mut contest = Some(self.contest(client, lease));
        let mut retry_at: Option<Instant> = None;
        let mut contest_backoff = Backoff::new(BACKOFF_BASE, BACKOFF_CAP);
        let mut leader: Option<LeaderKey> = None;
        // When the last confirmed keep-alive was sent.
        let mut last_ack: Option<Instant> = None;
        // `Some` exactly while this candidate reports `Leading`.
        let mut lease_until: Option<Instant> = None;
        let mut stale = false;
        let mut why = String::new();
        let campaigning = format!("campaigning for {}", self.name);
        self.report(Leadership::Following, &campaigning);
        loop {
            let pause_at = lease_until.map(|u| u.checked_sub(t.period / 2).unwrap_or(u));
            let stale_at = last_ack.filter(|_| !stale).map(|sent| sent + t.ttl);
            let event = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => Event::Cancelled,
                (sent, reply, stream) = poll_some(&mut beat) => Event::Beat(sent, reply, stream),
                r = poll_some(&mut contest) => {
                    contest = None;
                    Event::Contest(r)
                }
                _ = sleep_until_some(pause_at) => Event::Overdue,
                _ = sleep_until_some(stale_at) => Event::Stale,
                _ = sleep_until_some(retry_at) => Event::Retry,
            };
            match event {
                Event::Cancelled => {
                    drop(contest.take());
                    self.release(client, lease, leader.take()).await;
                    return End::Cancelled;
                }
                Event::Beat(sent, Reply::Alive, stream) => {
                    (last_ack, stale) = (Some(sent), false);
                    beat_backoff.reset();
                    let until = sent + t.window();
                    let late = until <= Instant::now();
                    let due = if late {
                        Instant::now()
                    } else {
                        sent + t.period
                    };
                    beat = Some(beat_at(stream, due));
                    if leader.is_none() {
                        self.report(Leadership::Following, &campaigning);
                    } else if late {
                        let late = "keep-alive reply came too late to extend the lease";
                        warn!(scope = %self.scope, "{late}");
                    } else {
                        if lease_until.is_some() {
                            self.signal.extend_until(until);
                        } else {
                            self.lead_until(until, &why);
                        }
                        lease_until = Some(until);
                    }
                }
                Event::Beat(_, Reply::Gone, _) => {
                    return End::Lost(format!("lease {} is gone (expired or revoked)", hex(lease)));
                }
                Event::Beat(_, Reply::Failed(e), _) => {
                    let reason = format!("lease keep-alive failed: {e}");
                    warn!(scope = %self.scope, lease = %hex(lease), "{reason}");
                    beat = Some(beat_at(None, Instant::now() + beat_backoff.next_delay()));
                    if leader.is_none() {
                        self.report(Leadership::NoQuorum, &reason);
                    } else if lease_until.take().is_some() {
                        self.report(Leadership::Paused, &reason);
                        why = "keep-alive confirmed again".into();
                    }
                }
                Event::Contest(Ok(key)) => {
                    let shown = String::from_utf8_lossy(key.key()).into_owned();
                    why = format!("won the election {} with key {shown}", self.name);
                    leader = Some(key);
                    // A keep-alive confirmed before the win still bounds the lease; with none
                    // recent enough, the next confirmed keep-alive reports `Leading`.
                    let now = Instant::now();
                    if let Some(until) = last_ack.map(|sent| sent + t.window()) {
                        if until > now + t.period / 2 {
                            self.lead_until(until, &why);
                            lease_until = Some(until);
                        }
                    }
                }
                Event::Contest(Err(e)) => {
                    let delay = contest_backoff.next_delay();
                    let name = &self.name;
                    warn!(scope = %self.scope, "campaign for {name} failed: {e}; retry in {delay:?}");
                    retry_at = Some(Instant::now() + delay);
                }
                Event::Overdue => {
                    lease_until = None;
                    let reason = "lease keep-alive overdue; paused before the lease deadline";
                    warn!(scope = %self.scope, "{reason}");
                    self.report(Leadership::Paused, reason);
                    why = "keep-alive confirmed again".into();
                }
                Event::Stale => {
                    (stale, lease_until) = (true, None);
                    let reason = format!(
                        "no keep-alive confirmed for a whole lease TTL ({:?}); it may have expired",
                        t.ttl
                    );
                    warn!(scope = %self.scope, "{reason}");
                    self.report(Leadership::NoQuorum, &reason);
                    why = "lease confirmed alive again".into();
                }
                Event::Retry => {
                    retry_at = None;
                    contest = Some(self.contest(client, lease));
                }
            }
        }
    }

    /// One campaign call with `lease`, then a read that confirms the leader key is ours.
    fn contest(
        &self,
        client: &Client,
        lease: i64,
    ) -> BoxFuture<'static, Result<LeaderKey, String>> {
        let (mut election, mut kv) = (client.election_client(), client.kv_client());
        let (name, value) = (self.name.clone(), self.identity.clone());
        Box::pin(async move {
            let won = election.campaign(name, value, lease).await;
            let won = won.map_err(|e| describe(&e))?;
            let key = won
                .leader()
                .cloned()
                .ok_or("the campaign reply has no leader key")?;
            // A key deleted or re-created meanwhile (lease expiry, or the server resigning a
            // cancelled earlier campaign of ours) is not leadership: campaign again.
            let shown = String::from_utf8_lossy(key.key()).into_owned();
            let got = bounded(kv.get(key.key(), None)).await;
            let got = got.map_err(|e| format!("cannot read leader key {shown}: {e}"))?;
            match got.kvs().first() {
                Some(kv) if kv.create_revision() == key.rev() && kv.lease() == lease => Ok(key),
                Some(kv) => Err(format!(
                    "leader key {shown} has create revision {} and lease {}, not {} and {}",
                    kv.create_revision(),
                    hex(kv.lease()),
                    key.rev(),
                    hex(lease)
                )),
                None => Err(format!(
                    "leader key {shown} vanished as the campaign returned"
                )),
            }
        })
    }

    /// Stops acting, resigns with `leader` (if any) and revokes `lease` (deleting our key),
    /// all within [`RELEASE_TIMEOUT`]; failures are only logged.
    async fn release(&self, client: &Client, lease: i64, leader: Option<LeaderKey>) {
        let mut c = client.clone();
        let limit = RELEASE_TIMEOUT.min(self.timing.ttl);
        let work = async {
            if let Some(key) = leader {
                if self.signal.current() == Leadership::Leading {
                    self.report(Leadership::Paused, "closing: releasing leadership");
                }
                match c.resign(Some(ResignOptions::new().with_leader(key))).await {
                    Ok(_) => info!(scope = %self.scope, "resigned; leadership released"),
                    Err(e) => warn!(scope = %self.scope, "cannot resign: {}", describe(&e)),
                }
            }
            c.lease_revoke(lease).await
        };
        let lease = hex(lease);
        match timeout(limit, work).await {
            Ok(Ok(_)) => info!(scope = %self.scope, %lease, "lease revoked"),
            Ok(Err(e)) if describe(&e).contains("lease not found") => {
                info!(scope = %self.scope, %lease, "lease already gone");
            }
            Ok(Err(e)) => warn!(
                scope = %self.scope, %lease,
                "cannot revoke the lease: {}; it expires within its TTL", describe(&e)
            ),
            Err(_) => warn!(
                scope = %self.scope, %lease,
                "release timed out after {limit:?}; the lease expires within its TTL"
            ),
        }
    }

    fn lead_until(&self, until: Instant, reason: &str) {
        self.log_transition(Leadership::Leading, reason);
        self.signal.lead_until(until, reason);
    }

    /// Reports `Paused`, `Following` or `NoQuorum`.
    fn report(&self, to: Leadership, reason: &str) {
        self.log_transition(to, reason);
        match to {
            Leadership::Paused => self.signal.pause(reason),
            Leadership::Following => self.signal.follow(reason),
            Leadership::NoQuorum => self.signal.no_quorum(reason),
            // Leading needs a deadline and goes through `lead_until`; never reached.
            Leadership::Leading => self.signal.pause(reason),
        }
    }

    fn log_transition(&self, to: Leadership, reason: &str) {
        let from = self.signal.current();
        if from != to {
            let (scope, identity) = (&self.scope, &self.identity);
            let (from, to) = (from.as_str(), to.as_str());
            info!(%scope, %identity, "leadership {from} -> {to}: {reason}");
        }
    }
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

/// A lease id as etcd prints it (and as it appears in election keys).
fn hex(lease: i64) -> String {
    format!("{lease:x}")
}

/// Awaits the future in `slot`; never resolves when there is none.
async fn poll_some<T>(slot: &mut Option<BoxFuture<'static, T>>) -> T {
    match slot {
        Some(f) => f.await,
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
