//! What holds a scope back, right now: one entry per cause, each with when it started and, when
//! known, when it ends. Read by the scope's status (`pause_reason`, `paused_until_ms`,
//! `pause_ms`, `pauses`), the JVM's metric set and the daemon's `/metrics` and `/healthz`.
//!
//! # Guarantees
//! * One entry per [`PauseKind`] at most: a cause that comes again while its pause is open
//!   extends it (its start is kept, its end and detail are the latest), so a Retry-After answered
//!   again and again reads as one pause that has lasted since the first.
//! * A pause that lasts [`LONG_PAUSE`] or more is logged twice per scope, whatever the number of
//!   pods it holds back: one WARN when it starts (or once it has lasted that long; checked every
//!   few seconds by the scope task), one INFO when it ends, with how long it lasted.
//! * A pause opened with [`Pauses::open_expiring`] ends by itself at its end time.
//!
//! # Caveats
//! * Times are read from tokio's clock (paused in tests) and shown as epoch milliseconds
//!   computed from the wall clock at the time of reading.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

/// A pause this long or longer is logged when it starts (or once it has lasted that long) and
/// when it ends.
pub const LONG_PAUSE: Duration = Duration::from_secs(30);
/// A pause of the same cause that opens again within this time of its end continues it: a round
/// of retries that all fail again does not end a backoff, and its start (and log line) is kept.
pub const REOPEN_WITHIN: Duration = Duration::from_secs(10);

/// Why a scope is held back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PauseKind {
    /// The allow lists refuse the scope: it is never tracked (open-ended).
    Refused,
    /// No reachable leader: this server's HA session (ZooKeeper connection, etcd lease) is lost
    /// or without quorum (`PAUSED` / `NO_QUORUM`; open-ended).
    HaSessionLost,
    /// This server stepped down after it could not delete; it stays out of the election until
    /// the hold ends.
    StepDownHold,
    /// A task of the scope (cleanup loop, election, pod watch) failed and runs again at the end.
    Restarting,
    /// The leader's pod watch cannot list or watch the scope's pods; it lists again at the end.
    WatchFailing,
    /// The API server asked the scope to wait (`Retry-After` on a 429, or on a 5xx): no DELETE
    /// of the scope leaves before the end, and the pause lasts until a DELETE after it is not
    /// throttled again.
    RetryAfter,
    /// Every DELETE due failed and waits for its retry (backoff; 403s retry slowly); the next
    /// one leaves at the end.
    Backoff,
    /// The scope does not campaign yet: this server's identity in the elections (the address the
    /// Kyuubi server binds) is not confirmed; at the end it campaigns under the provisional one.
    ServerIdPending,
    /// The scope does not campaign yet: which cluster it is in (its election key) is being read
    /// from the API server; it is read again at the end.
    ClusterIdentity,
    /// The scope's Kubernetes client cannot be built (bad credentials file, CA, URL): nothing is
    /// deleted; it is built again at the end.
    ClientUnavailable,
    /// This server leads, but its first list of the term waits: the watches of recent terms
    /// ended soon after their lists, so lists are spaced out; it lists at the end.
    ListPacing,
}

impl PauseKind {
    /// Every kind, most severe first (the first open one is the scope's `pause_reason`).
    pub const ALL: [PauseKind; 11] = [
        PauseKind::Refused,
        PauseKind::HaSessionLost,
        PauseKind::ClientUnavailable,
        PauseKind::StepDownHold,
        PauseKind::Restarting,
        PauseKind::ServerIdPending,
        PauseKind::ClusterIdentity,
        PauseKind::WatchFailing,
        PauseKind::ListPacing,
        PauseKind::RetryAfter,
        PauseKind::Backoff,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PauseKind::Refused => "refused",
            PauseKind::HaSessionLost => "ha_session_lost",
            PauseKind::StepDownHold => "step_down_hold",
            PauseKind::Restarting => "restarting",
            PauseKind::WatchFailing => "watch_failing",
            PauseKind::RetryAfter => "retry_after",
            PauseKind::Backoff => "backoff",
            PauseKind::ServerIdPending => "server_id_pending",
            PauseKind::ClusterIdentity => "cluster_identity",
            PauseKind::ClientUnavailable => "client_unavailable",
            PauseKind::ListPacing => "list_pacing",
        }
    }

    /// The kind's slot in a scope's table (its declaration order).
    fn index(self) -> usize {
        self as usize
    }
}

#[derive(Clone, Debug)]
struct Entry {
    since: Instant,
    until: Option<Instant>,
    /// Ends by itself at `until`.
    expires: bool,
    detail: String,
    /// Its start was logged (it is a long pause): its end is logged too.
    logged: bool,
    /// When it was closed; it is kept for [`REOPEN_WITHIN`] in case it opens again.
    closed_at: Option<Instant>,
}

impl Entry {
    /// Open at `now`: not closed, and not past the end it expires at.
    fn is_open(&self, now: Instant) -> bool {
        self.closed_at.is_none() && !(self.expires && self.until.is_some_and(|u| u <= now))
    }
}

/// One open pause, as read.
#[derive(Clone, Debug, PartialEq)]
pub struct Pause {
    pub kind: PauseKind,
    /// How long it has lasted.
    pub lasted: Duration,
    /// How long until it ends; `None` when open-ended (or its end has passed and it waits for an
    /// answer, see [`PauseKind::RetryAfter`]).
    pub left: Option<Duration>,
    pub detail: String,
}

/// The open pauses of one scope.
#[derive(Debug, Default)]
pub struct Pauses {
    /// The scope's name, for the log lines.
    scope: OnceLock<String>,
    entries: Mutex<[Option<Entry>; PauseKind::ALL.len()]>,
    /// Whether any entry is open (a cheap check for the scope task's tick).
    any: AtomicBool,
}

impl Pauses {
    /// Names the scope in the log lines (once; later calls are ignored).
    pub fn set_scope(&self, scope: &str) {
        let _ = self.scope.set(scope.to_owned());
    }

    fn scope(&self) -> &str {
        self.scope.get().map_or("?", String::as_str)
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, [Option<Entry>; PauseKind::ALL.len()]> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens a pause of `kind` (or extends the open one: its start is kept) that ends at `until`
    /// (`None`: open-ended, or until it is closed).
    pub fn open(&self, kind: PauseKind, until: Option<Instant>, detail: &str) {
        self.put(kind, until, false, detail);
    }

    /// Opens a pause that ends by itself at `until`.
    pub fn open_expiring(&self, kind: PauseKind, until: Instant, detail: &str) {
        self.put(kind, Some(until), true, detail);
    }

    fn put(&self, kind: PauseKind, until: Option<Instant>, expires: bool, detail: &str) {
        let now = Instant::now();
        let mut entries = self.entries();
        let slot = &mut entries[kind.index()];
        let e = match slot {
            Some(e)
                if e.is_open(now)
                    || e.closed_at
                        .is_some_and(|c| now.duration_since(c) < REOPEN_WITHIN) =>
            {
                e.closed_at = None;
                e.until = until;
                e.expires = expires;
                if e.detail != detail {
                    e.detail = detail.to_owned();
                }
                e
            }
            _ => {
                if let Some(old) = slot.take() {
                    self.log_end(kind, &old, now);
                }
                slot.insert(Entry {
                    since: now,
                    until,
                    expires,
                    detail: detail.to_owned(),
                    logged: false,
                    closed_at: None,
                })
            }
        };
        // Known to be long at its start: logged now.
        if !e.logged && until.is_some_and(|u| u.saturating_duration_since(e.since) >= LONG_PAUSE) {
            e.logged = true;
            log_start(self.scope(), kind, e, now);
        }
        self.any.store(true, Relaxed);
    }

    /// Ends the pause of `kind`; true if one was open. (Its end is logged once it has not
    /// opened again for [`REOPEN_WITHIN`].)
    pub fn close(&self, kind: PauseKind) -> bool {
        let now = Instant::now();
        let mut entries = self.entries();
        match &mut entries[kind.index()] {
            Some(e) if e.is_open(now) => {
                e.closed_at = Some(now);
                true
            }
            _ => false,
        }
    }

    /// Whether a pause of `kind` is open.
    pub fn is_open(&self, kind: PauseKind) -> bool {
        self.get(kind).is_some()
    }

    /// The open pause of `kind`, if any.
    pub fn get(&self, kind: PauseKind) -> Option<Pause> {
        let now = Instant::now();
        let entries = self.entries();
        entries[kind.index()]
            .as_ref()
            .filter(|e| e.is_open(now))
            .map(|e| read(kind, e, now))
    }

    /// Every open pause, most severe first.
    pub fn all(&self) -> Vec<Pause> {
        let now = Instant::now();
        let entries = self.entries();
        PauseKind::ALL
            .iter()
            .filter_map(|&k| {
                entries[k.index()]
                    .as_ref()
                    .filter(|e| e.is_open(now))
                    .map(|e| read(k, e, now))
            })
            .collect()
    }

    /// The scope task's tick: ends the pauses whose time is up, and logs the start of those that
    /// have now lasted [`LONG_PAUSE`].
    pub fn check(&self) {
        if !self.any.load(Relaxed) {
            return;
        }
        let now = Instant::now();
        let mut ended = Vec::new();
        let mut entries = self.entries();
        for k in PauseKind::ALL {
            let slot = &mut entries[k.index()];
            let Some(e) = slot else { continue };
            let closed = e
                .closed_at
                .is_some_and(|c| now.duration_since(c) >= REOPEN_WITHIN);
            if closed || (e.expires && e.until.is_some_and(|u| u <= now)) {
                if let Some(old) = slot.take() {
                    ended.push((k, old));
                }
            } else if e.closed_at.is_none()
                && !e.logged
                && now.duration_since(e.since) >= LONG_PAUSE
            {
                e.logged = true;
                log_start(self.scope(), k, e, now);
            }
        }
        self.any.store(entries.iter().any(Option::is_some), Relaxed);
        drop(entries);
        for (k, old) in ended {
            self.log_end(k, &old, now);
        }
    }

    fn log_end(&self, kind: PauseKind, e: &Entry, now: Instant) {
        if !e.logged {
            return;
        }
        let end = match (e.closed_at, e.expires, e.until) {
            (Some(c), _, _) => c,
            (None, true, Some(u)) if u <= now => u,
            _ => now,
        };
        info!(
            scope = %self.scope(), pause = kind.as_str(),
            "Scope {} is no longer paused ({}) after {}s",
            self.scope(), kind.as_str(), end.duration_since(e.since).as_secs()
        );
    }

    /// The pause fields of a scope's status: `paused`, `pause_reason`, `paused_until_ms`,
    /// `pause_ms` (of the most severe open pause) and `pauses` (every open one). `unhealthy`
    /// tells which kinds make the scope unhealthy now.
    pub fn add_to(&self, v: &mut serde_json::Value, unhealthy: impl Fn(PauseKind) -> bool) {
        let all = self.all();
        let now_ms = crate::clock::epoch_ms();
        let list: Vec<serde_json::Value> = all
            .iter()
            .map(|p| {
                let lasted = p.lasted.as_millis() as u64;
                serde_json::json!({
                    "reason": p.kind.as_str(),
                    "detail": p.detail,
                    "since_ms": now_ms.saturating_sub(lasted),
                    "until_ms": p.left.map(|l| now_ms + l.as_millis() as u64),
                    "pause_ms": lasted,
                    "unhealthy": unhealthy(p.kind),
                })
            })
            .collect();
        let main = list.first().cloned().unwrap_or(serde_json::Value::Null);
        v["paused"] = (!list.is_empty()).into();
        v["pause_reason"] = main["reason"].clone();
        v["paused_until_ms"] = main["until_ms"].clone();
        v["pause_ms"] = main["pause_ms"].as_u64().unwrap_or(0).into();
        v["pause_detail"] = main["detail"].clone();
        v["pauses"] = list.into();
    }
}

fn read(kind: PauseKind, e: &Entry, now: Instant) -> Pause {
    Pause {
        kind,
        lasted: now.duration_since(e.since),
        left: e.until.filter(|u| *u > now).map(|u| u.duration_since(now)),
        detail: e.detail.clone(),
    }
}

fn log_start(scope: &str, kind: PauseKind, e: &Entry, now: Instant) {
    let until = match e.until {
        Some(u) if u > now => format!("for {}s more", u.duration_since(now).as_secs()),
        Some(_) => "until its next answer".to_owned(),
        None => "with no known end".to_owned(),
    };
    warn!(
        scope = %scope, pause = kind.as_str(),
        "Scope {scope} is paused ({}), {until}, for {}s so far: {}",
        kind.as_str(), now.duration_since(e.since).as_secs(), e.detail
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `metrics` reads the pauses; the pauses never read `metrics` back (issue 32: the two
    /// modules named each other).
    #[test]
    fn pauses_do_not_import_metrics() {
        let src = include_str!("pause.rs");
        let needle = ["crate", "::metrics"].concat();
        assert!(!src.contains(&needle), "pause.rs names {needle}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_cause_that_comes_again_extends_its_pause_and_expiring_ones_end() {
        let p = Pauses::default();
        p.set_scope("s");
        let t0 = Instant::now();
        p.open(
            PauseKind::RetryAfter,
            Some(t0 + Duration::from_secs(2)),
            "a",
        );
        tokio::time::advance(Duration::from_secs(3)).await;
        p.open(
            PauseKind::RetryAfter,
            Some(Instant::now() + Duration::from_secs(4)),
            "b",
        );
        let r = p.get(PauseKind::RetryAfter).unwrap();
        assert_eq!(r.lasted, Duration::from_secs(3));
        assert_eq!(r.left, Some(Duration::from_secs(4)));
        assert_eq!(r.detail, "b");
        p.open_expiring(
            PauseKind::StepDownHold,
            Instant::now() + Duration::from_secs(1),
            "held",
        );
        assert_eq!(
            p.all()[0].kind,
            PauseKind::StepDownHold,
            "most severe first"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!p.is_open(PauseKind::StepDownHold));
        p.check();
        assert!(p.close(PauseKind::RetryAfter));
        assert!(!p.close(PauseKind::RetryAfter));
        assert!(p.all().is_empty());
        // Opened again soon after its end: the same pause goes on.
        tokio::time::advance(Duration::from_secs(1)).await;
        p.open(PauseKind::RetryAfter, None, "c");
        assert_eq!(
            p.get(PauseKind::RetryAfter).unwrap().lasted,
            Duration::from_secs(6)
        );
        // Closed for longer than that: a new one starts.
        p.close(PauseKind::RetryAfter);
        tokio::time::advance(REOPEN_WITHIN).await;
        p.check();
        p.open(PauseKind::RetryAfter, None, "d");
        assert_eq!(p.get(PauseKind::RetryAfter).unwrap().lasted, Duration::ZERO);
    }
}
