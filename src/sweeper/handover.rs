//! Whether a leader that cannot delete hands the scope over: the stall check of
//! `ha.stepDownAfter`, and, while its DELETEs are refused, whether a step-down can help.
//!
//! A leader that completed no DELETE for `ha.stepDownAfter` while DELETEs were due steps down, so
//! that a server that can delete takes over; but a step-down that cannot help only moves the
//! refusals to the next server (and each new term lists the pods again). So while the scope's
//! DELETEs are refused (a refusal episode, `refusals`):
//!
//! * If the API server says this server's account may delete the pods (its access review), the
//!   refusal comes from admission, which refuses every server alike: it keeps the leadership.
//! * Otherwise it reads, on its HA session, the election's participants and the scope's
//!   `refused` record (the servers refused in this episode, each written by the server itself
//!   when its DELETEs began to be refused), and steps down only if a participant is not in it.
//!   The first DELETE that completes, on any server, clears the record.
//! * When either cannot be read (no session, `local`, an error) it steps down, as before.
//!
//! # Guarantees
//! * In an emergency stop that refuses every server the leadership changes at most once per
//!   other server (each new leader is refused, writes itself into the record, and the last one
//!   finds every other participant there), then stays; a server whose account may delete takes
//!   over from one whose account may not.
//! * Every decision not to step down is logged (ERROR) and read in the scope's health reason.
//!
//! # Caveats
//! * A record entry older than [`STALE_AFTER`] counts as absent (the server may have been given
//!   its grant back since): in a refusal that lasts hours the leadership may move once more per
//!   that time. A refused server writes its entry again every [`REFRESH_EVERY`] while it probes.
//! * The record is cleared by the first DELETE that completes on a server that knows of it (it
//!   read the record when its term began, or wrote into it).

use std::time::Duration;

use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{debug, error};

use super::Sweeper;
use crate::election::store::{Entry, Shelf};
use crate::metrics::UNHEALTHY_CANNOT_DELETE;
use crate::pause::PauseKind;
use crate::tracker::Stage;

/// A `refused` entry older than this counts as absent.
pub(super) const STALE_AFTER: Duration = Duration::from_secs(3600);
/// A refused server writes its entry again after this long.
pub(super) const REFRESH_EVERY: Duration = Duration::from_secs(600);

/// What a store call of the handover came back with.
pub(super) enum Reply {
    /// The `refused` record, read when a term began: whether it holds anything.
    Seen(bool),
    /// The election's participants and the `refused` record, for the step-down decision.
    Decide(Result<(Vec<String>, Vec<Entry>), String>, String),
}

/// The handover's state.
#[derive(Default)]
pub(super) struct Handover {
    pub(super) calls: JoinSet<Reply>,
    /// This server knows the `refused` record may hold entries: its first completed DELETE
    /// clears it.
    clear_pending: bool,
    /// When this server last wrote its own entry.
    written: Option<Instant>,
}

impl Sweeper {
    /// Steps down when this leader has completed no DELETE for `step_down_after` while DELETEs
    /// were due (and not held back by a server's `Retry-After`), unless that cannot help.
    pub(super) fn check_stall(&mut self, now: Instant) {
        let overdue = self.tracker.len() - self.tracker.count(Stage::Scheduled);
        if overdue == 0 || self.gate.closed_until(now).is_some() {
            self.work_since = None;
            return;
        }
        let work_since = *self.work_since.get_or_insert(now);
        let Some(leading_since) = self.leading_since else {
            return;
        };
        let stalled_since = work_since.max(leading_since).max(self.last_progress);
        let window = self.cfg.step_down_after;
        if now.duration_since(stalled_since) < window {
            return;
        }
        let why = match (&self.deleter_error, &self.last_failure) {
            (Some(e), _) => format!("the Kubernetes client cannot be built: {e}"),
            (None, Some(f)) => format!("last answer: {f}"),
            (None, None) => "no answer yet".to_owned(),
        };
        let reason = format!(
            "this server completed no DELETE for {window:?} while {overdue} pod(s) were due ({why})"
        );
        // One report per window, whatever happens next.
        self.last_progress = now;
        self.metrics.set_unhealthy(UNHEALTHY_CANNOT_DELETE, &reason);
        if let Some(why) = self.step_down_futile() {
            return self.keep_leading(&reason, &why);
        }
        if self.refusals.probe_at().is_some() {
            if let Some((store, key, _)) = self.election.shared() {
                // Whether another server could do better: read the elections and the record.
                if self.handover.calls.is_empty() {
                    let reason = reason.clone();
                    // With layout 1 won first, the other servers wait in that election, not in
                    // the scope's own (which only its winner joins).
                    let elections = self.election.participant_keys();
                    self.handover.calls.spawn(async move {
                        let read = async {
                            let mut who = Vec::new();
                            for election in &elections {
                                who.extend(store.participants(election).await?);
                            }
                            who.sort();
                            who.dedup();
                            let refused = store.list(&key, Shelf::Refused).await?;
                            Ok((who, refused))
                        };
                        Reply::Decide(read.await, reason)
                    });
                }
                return;
            }
        }
        self.step_down_now(&reason);
    }

    fn step_down_now(&mut self, reason: &str) {
        let window = self.cfg.step_down_after;
        if self.election.step_down(window, reason) {
            self.metrics.pauses.open_expiring(
                PauseKind::StepDownHold,
                Instant::now() + window,
                reason,
            );
            error!(
                scope = %self.scope,
                "Stepping down as cleanup leader of scope {}: {reason}. Another server may take \
                 over; this one stays out of the election for {window:?}",
                self.scope
            );
        } else {
            error!(
                scope = %self.scope,
                "Cleanup of scope {} is stuck: {reason}; there is no other server to hand over to",
                self.scope
            );
        }
    }

    fn keep_leading(&mut self, reason: &str, why: &str) {
        let reason = format!("{reason}; not stepping down: {why}");
        self.metrics.set_unhealthy(UNHEALTHY_CANNOT_DELETE, &reason);
        error!(
            scope = %self.scope,
            "Cleanup of scope {} is stuck and this server keeps the leadership: {reason}",
            self.scope
        );
    }

    /// A store call of the handover came back.
    pub(super) fn on_handover(&mut self, done: Result<Reply, tokio::task::JoinError>) {
        match done {
            Ok(Reply::Seen(any)) => self.handover.clear_pending |= any,
            Ok(Reply::Decide(read, reason)) => {
                if self.leading_since.is_none() || self.refusals.probe_at().is_none() {
                    // Not leading any more, or DELETEs go again: nothing to decide.
                    return;
                }
                match read {
                    Err(e) => {
                        debug!(scope = %self.scope, "Cannot read the election or the refused record: {e}");
                        self.step_down_now(&reason);
                    }
                    Ok((participants, refused)) => {
                        let now_ms = crate::clock::epoch_ms();
                        let fresh: Vec<&str> = refused
                            .iter()
                            .filter(|e| {
                                entry_ms(e).is_some_and(|at| {
                                    now_ms.saturating_sub(at) < STALE_AFTER.as_millis() as u64
                                })
                            })
                            .map(|e| e.name.as_str())
                            .collect();
                        let me = self.election.shared().map(|(_, _, me)| me);
                        let others: Vec<&String> = participants
                            .iter()
                            .filter(|p| Some(p.as_str()) != me.as_deref())
                            .filter(|p| !fresh.contains(&p.as_str()))
                            .collect();
                        if others.is_empty() {
                            let why = format!(
                                "every other server of the election ({}) was refused the same \
                                 way in this episode",
                                participants
                                    .iter()
                                    .filter(|p| Some(p.as_str()) != me.as_deref())
                                    .cloned()
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            );
                            self.keep_leading(&reason, &why);
                        } else {
                            self.step_down_now(&reason);
                        }
                    }
                }
            }
            Err(e) => debug!(scope = %self.scope, "A call of the handover failed: {e}"),
        }
    }

    /// A term began: does the scope's `refused` record hold anything (then this server's first
    /// completed DELETE clears it)?
    pub(super) fn read_refused_record(&mut self) {
        if let Some((store, key, _)) = self.election.shared() {
            self.handover.calls.spawn(async move {
                let any = store
                    .list(&key, Shelf::Refused)
                    .await
                    .is_ok_and(|l| !l.is_empty());
                Reply::Seen(any)
            });
        }
    }

    /// This server's DELETEs are refused: it writes itself into the scope's `refused` record
    /// (again after [`REFRESH_EVERY`]).
    pub(super) fn note_refused_here(&mut self) {
        let now = Instant::now();
        if self
            .handover
            .written
            .is_some_and(|w| now.duration_since(w) < REFRESH_EVERY)
        {
            return;
        }
        let Some((store, key, me)) = self.election.shared() else {
            return;
        };
        self.handover.written = Some(now);
        self.handover.clear_pending = true;
        let value = json!({ "at_ms": crate::clock::epoch_ms() })
            .to_string()
            .into_bytes();
        let scope = self.scope.clone();
        tokio::spawn(async move {
            let _ = store.remove(&key, Shelf::Refused, &me).await;
            if let Err(e) = store.create(&key, Shelf::Refused, &me, value).await {
                debug!(scope = %scope, "Cannot write this server into the refused record: {e}");
            }
        });
    }

    /// A DELETE completed: the refusal episode is over for the whole fleet, so the record goes.
    pub(super) fn clear_refused_record(&mut self) {
        self.handover.written = None;
        if !std::mem::take(&mut self.handover.clear_pending) {
            return;
        }
        let Some((store, key, _)) = self.election.shared() else {
            return;
        };
        let scope = self.scope.clone();
        tokio::spawn(async move {
            match store.list(&key, Shelf::Refused).await {
                Ok(entries) => {
                    for e in entries {
                        let _ = store.remove(&key, Shelf::Refused, &e.name).await;
                    }
                }
                Err(e) => debug!(scope = %scope, "Cannot clear the refused record: {e}"),
            }
        });
    }
}

/// When an entry was written (epoch ms), from its value.
fn entry_ms(e: &Entry) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(&e.value)
        .ok()?
        .get("at_ms")?
        .as_u64()
}
