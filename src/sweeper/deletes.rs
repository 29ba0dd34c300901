//! Sending DELETEs: pacing (token bucket, scope-wide pause), dispatch, and what each outcome
//! does to its record.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, error, info};

use super::{Sweeper, Uid, UNANSWERED_HOLD};
use crate::deleter::{Outcome, OutcomeClass};
use crate::election::Leadership;
use crate::metrics::{ScopeMetrics, UNHEALTHY_CANNOT_DELETE};
use crate::pause::PauseKind;
use crate::schedule;
use crate::tracker::Stage;

/// A token bucket: `qps` tokens a second, at most `burst` saved up.
#[derive(Debug)]
pub(super) struct Bucket {
    tokens: f64,
    last: Instant,
    qps: f64,
    burst: f64,
}

impl Bucket {
    pub(super) fn new(qps: f64, burst: u32) -> Self {
        Bucket {
            tokens: f64::from(burst),
            last: Instant::now(),
            qps,
            burst: f64::from(burst),
        }
    }

    /// Takes a token, or says how long until one is there (from 1 ms to 1,000 s, the wait at
    /// the slowest accepted rate).
    pub(super) fn take(&mut self, now: Instant) -> Result<(), Duration> {
        let gained = now.duration_since(self.last).as_secs_f64() * self.qps;
        self.tokens = (self.tokens + gained).min(self.burst);
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            // At least 1 ms: a wait rounded down to zero would spin without time passing.
            let most = Duration::from_secs(1000);
            Err(Duration::try_from_secs_f64((1.0 - self.tokens) / self.qps)
                .unwrap_or(most)
                .clamp(Duration::from_millis(1), most))
        }
    }
}

/// The scope-wide pause after a 429 (or a 5xx with `Retry-After`): no DELETE of any pod of the
/// scope leaves before it has passed. Shared with the tasks that send, which check it last.
#[derive(Debug, Default)]
pub(super) struct Gate(Mutex<Option<Instant>>);

impl Gate {
    /// Closes the gate until `until` (never shortens a longer pause).
    fn close_until(&self, until: Instant) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *g = Some(g.map_or(until, |u| u.max(until)));
    }

    /// When the gate opens, if it is closed at `now`.
    pub(super) fn closed_until(&self, now: Instant) -> Option<Instant> {
        let g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        g.filter(|u| *u > now)
    }
}

impl Sweeper {
    fn poke(&mut self, at: Instant) {
        self.poke_at = Some(self.poke_at.map_or(at, |p| p.min(at)));
    }

    pub(super) fn dispatch(&mut self) {
        // Applying a pod's waiting events (below) may ask for a dispatch: the loop under way
        // goes on with whatever they made due.
        if self.dispatching {
            return;
        }
        self.dispatching = true;
        self.dispatch_now();
        self.dispatching = false;
    }

    fn dispatch_now(&mut self) {
        let Some(deleter) = self.deleter.clone() else {
            return;
        };
        let now = Instant::now();
        if let Some(until) = self.gate.closed_until(now) {
            // The API server asked the scope to wait: nothing leaves before then.
            self.poke(until);
            return;
        }
        // Resuming after a Retry-After pause: fewer in flight until DELETEs get through again.
        // The adaptive limit (or maxInFlight), lower still while resuming.
        let limit = self.pace.limit();
        let mut cap = self.ramp.map_or(limit, |r| r.min(limit));
        // Refused DELETEs: one probe at a time, once its time has come (`refusals`).
        if let Some(next) = self.refusals.probe_at() {
            if next > now {
                self.poke(next);
                return;
            }
            cap = 1;
        }
        while self.inflight.len() < cap {
            if self.tracker.count(Stage::Due) == 0 {
                return;
            }
            if !self.election.may_act() {
                // Leading but the lease ran out: the backend is renewing it; look again soon.
                if self.election.status().leadership == Leadership::Leading {
                    self.poke(now + Duration::from_millis(200));
                }
                return;
            }
            let Some(uid) = self.due.pop_front() else {
                return;
            };
            let Some(rec) = self.tracker.get(&uid) else {
                continue;
            };
            if rec.stage() != Stage::Due {
                continue;
            }
            if self.inflight_abort.contains_key(&uid) {
                // A DELETE of this UID is still in flight (its record was dropped and armed
                // again meanwhile, in self-watch mode): `on_done` puts it back.
                continue;
            }
            if let Some(entry) = self.pods.take_current(&uid, self.barriers) {
                // Newer events of the pod wait in the inbox (an annotation that keeps it, a
                // deletion, a running state): they decide first, then it is looked at again.
                self.due.push_front(uid);
                self.apply_entry(entry);
                continue;
            }
            if self.cfg.tuning.dry_run {
                match self.dry_run_seen(&uid) {
                    // What earlier leaders reported is not read yet: send nothing yet.
                    super::shared::DryRun::Unknown => {
                        self.due.push_front(uid);
                        return;
                    }
                    super::shared::DryRun::Reported => {
                        self.settle_reported(&uid);
                        continue;
                    }
                    super::shared::DryRun::New => {}
                }
            }
            if let Err(wait) = self.bucket.take(now) {
                // Rate limit: this pod goes first once a token is there.
                self.due.push_front(uid);
                self.poke(now + wait);
                return;
            }
            let name = rec.name();
            self.tracker.set_stage(&uid, Stage::Deleting);
            let authority = self.election.authority();
            let gate = self.gate.clone();
            let deleter = deleter.clone();
            let metrics = self.metrics.clone();
            let dry_run = self.cfg.tuning.dry_run;
            let task_uid = uid.clone();
            let abort = self.inflight.spawn(async move {
                // The last checks before the request leaves: a lease that ran out since dispatch
                // (a frozen process, a lost session), or a scope paused by a 429 meanwhile.
                if !authority.may_act() || gate.closed_until(Instant::now()).is_some() {
                    return (task_uid, super::Answer::NotSent);
                }
                ScopeMetrics::inc(&metrics.deletes_sent);
                // Checked at send time: if the lease lapses while the request is still being
                // connected or answered, it is dropped, so nothing is written after the lapse.
                let uid = task_uid.to_string();
                let sent = Instant::now();
                let out = authority
                    .within_lease(deleter.delete(&name, &uid, dry_run))
                    .await;
                let answer = match out {
                    Some(o) => super::Answer::Answered(o, sent.elapsed()),
                    None => super::Answer::Unanswered,
                };
                (task_uid, answer)
            });
            self.inflight_uid.insert(abort.id(), uid.clone());
            self.inflight_abort.insert(uid, abort);
        }
    }

    pub(super) fn on_done(
        &mut self,
        done: Result<(tokio::task::Id, super::Sent), tokio::task::JoinError>,
    ) {
        let (uid, outcome) = match done {
            Ok((id, (uid, outcome))) => {
                self.inflight_uid.remove(&id);
                (uid, outcome)
            }
            Err(e) => {
                let Some(uid) = self.inflight_uid.remove(&e.id()) else {
                    return;
                };
                if e.is_panic() {
                    error!(scope = %self.scope, uid = %uid, "DELETE task panicked; the pod will be retried");
                }
                (uid, super::Answer::NotSent)
            }
        };
        let in_flight = self.inflight.len() + 1;
        self.inflight_abort.remove(&uid);
        self.requeue_rearmed(&uid);
        let deleting = self
            .tracker
            .get(&uid)
            .is_some_and(|r| r.stage() == Stage::Deleting);
        let outcome = match outcome {
            super::Answer::Answered(o, latency) => {
                self.pace.answered(&o, latency, in_flight, Instant::now());
                o
            }
            // Not sent (lease ran out, scope paused) or aborted (leadership lost): the pod waits.
            super::Answer::NotSent => {
                self.finishing.remove(&uid);
                if deleting {
                    self.tracker.set_stage(&uid, Stage::Due);
                    self.due.push_front(uid);
                }
                self.dispatch();
                return;
            }
            // Maybe carried out: the watch gets a while to say so before the pod may go again
            // (a leader paused and resumed would otherwise send a second DELETE, answered 404).
            super::Answer::Unanswered => {
                self.finishing.remove(&uid);
                if deleting {
                    debug!(scope = %self.scope, uid = %uid,
                        "DELETE dropped unanswered when the lease lapsed; the pod waits {UNANSWERED_HOLD:?} for its deletion to be seen");
                    self.tracker.set_stage(&uid, Stage::Backoff);
                    self.tracker.arm(&uid, Instant::now() + UNANSWERED_HOLD);
                }
                self.dispatch();
                return;
            }
        };
        self.metrics.outcome(outcome.class);
        self.metrics.apf_answer(&outcome);
        self.note_outcome(&outcome);
        let probing = self.note_refusal(&outcome);
        let (rec, cancelled) = match (deleting, self.finishing.remove(&uid)) {
            (true, _) => match self.tracker.get(&uid) {
                Some(rec) => (rec.clone(), false),
                None => return self.dispatch(),
            },
            // Cancelled by an event while in flight: report the outcome, nothing more to do.
            (false, Some(rec)) => (rec, true),
            // Disarmed (and maybe armed again) meanwhile: this answer is not about its record.
            (false, None) => return self.dispatch(),
        };
        self.report(&uid, &rec, &outcome);
        self.event_for(&uid, &rec, &outcome, &self.why(&rec));
        if cancelled {
            self.settle_rearmed(&uid, &outcome);
            self.dispatch();
            return;
        }
        if outcome.class.is_done() {
            if let Some(gone) = self.tracker.settle(&uid, Instant::now()) {
                self.unkeep(&gone);
            }
            if self.cfg.tuning.dry_run {
                self.note_reported(&uid);
            } else {
                self.shared_gone(&uid);
            }
            self.forget(&uid);
        } else {
            // The pause's detail quotes the answer, never a pod: it is logged once per pause.
            self.last_retry = outcome.to_string();
            self.failures.record(&uid, &rec.name(), &outcome);
            self.metrics
                .failed(outcome.class, format!("pod {}: {outcome}", rec.name()));
            if probing {
                // A refusal episode: the pod stays due, behind the others, for a later probe.
                self.keep_due(uid);
            } else {
                self.schedule_retry(uid, &outcome);
            }
        }
        // A slot is free: the next due pod may go.
        self.dispatch();
    }

    /// What an answer means for the scope as a whole: progress, and the scope-wide pause.
    fn note_outcome(&mut self, outcome: &Outcome) {
        let now = Instant::now();
        match outcome.class {
            // Answers that show DELETEs get through, or that the API server itself is in
            // trouble (a successor would meet the same): not this leader's failure.
            OutcomeClass::Accepted
            | OutcomeClass::AlreadyAbsent
            | OutcomeClass::Replaced
            | OutcomeClass::Throttled
            | OutcomeClass::ServerError => {
                self.last_progress = now;
                self.last_failure = None;
                if self.metrics.clear_unhealthy(UNHEALTHY_CANNOT_DELETE) {
                    info!(scope = %self.scope, "DELETEs of scope {} get through again", self.scope);
                }
            }
            _ => self.last_failure = Some(outcome.to_string()),
        }
        let pause = match (outcome.class, outcome.retry_after) {
            (OutcomeClass::Throttled, ra) => Some(ra.unwrap_or(Duration::from_secs(1))),
            (OutcomeClass::ServerError, Some(ra)) => Some(ra),
            _ => None,
        };
        if let Some(wait) = pause.filter(|w| !w.is_zero()) {
            self.gate.close_until(now + wait);
            self.poke(now + wait);
            // Resume gently: one DELETE in flight once the wait has passed, doubled by each
            // DELETE that completes (a burst of maxInFlight would meet the same answer).
            self.ramp = Some(1);
            let until = self.gate.closed_until(now);
            self.metrics.pauses.open(
                PauseKind::RetryAfter,
                until,
                &format!("the API server asked to wait {wait:?}: {outcome}"),
            );
        } else if self.gate.closed_until(now).is_none() {
            if outcome.class.is_done() {
                self.ramp = self
                    .ramp
                    .map(|r| r.saturating_mul(2))
                    .filter(|r| *r < self.cfg.tuning.max_in_flight);
            }
            if outcome.class != OutcomeClass::Throttled {
                // A DELETE sent after the wait got an answer that is not a throttle.
                self.end_retry_after();
            }
        }
    }

    /// One line per pod for the outcomes that end its cleanup; failures only at DEBUG (they are
    /// summarised per scope).
    fn report(&self, uid: &Uid, rec: &crate::tracker::Record, outcome: &Outcome) {
        let now_wall = self.clock.now();
        let deadline = self.deadline(rec, now_wall);
        let late = now_wall
            .duration_since(deadline)
            .unwrap_or_default()
            .as_secs_f64();
        let verb = if self.cfg.tuning.dry_run {
            "Would delete (server-side dry run)"
        } else {
            "Deleted"
        };
        let (name, tag, scope) = (&rec.name(), &rec.tag, &self.scope);
        match outcome.class {
            OutcomeClass::Accepted if rec.immediate() => {
                info!(
                    scope = %scope, pod = %name, uid = %uid, tag = %tag,
                    "{verb} driver pod {name} ({}, kyuubi-unique-tag={tag}) in scope {scope}, {late:.1}s after Kyuubi asked for its deletion",
                    rec.state.as_str()
                );
                self.metrics.record_lag(late);
            }
            OutcomeClass::Accepted if rec.capped() => {
                info!(
                    scope = %scope, pod = %name, uid = %uid, tag = %tag,
                    "{verb} terminated driver pod {name} ({}, kyuubi-unique-tag={tag}) in scope {scope} before its retain period ended: the scope was over its cap of {} terminated pods ({late:.1}s after)",
                    rec.state.as_str(), self.cfg.retention.max_terminated
                );
                self.metrics.record_lag(late);
            }
            OutcomeClass::Accepted => {
                info!(
                    scope = %scope, pod = %name, uid = %uid, tag = %tag,
                    "{verb} terminated driver pod {name} ({}, kyuubi-unique-tag={tag}) in scope {scope}, {late:.1}s after its deadline",
                    rec.state.as_str()
                );
                self.metrics.record_lag(late);
            }
            OutcomeClass::AlreadyAbsent => debug!(
                scope = %scope, pod = %name, uid = %uid,
                "Pod {name} is already gone (HTTP 404); nothing to do"
            ),
            OutcomeClass::Replaced => info!(
                scope = %scope, pod = %name, uid = %uid,
                "Pod name {name} now belongs to a newer pod (UID precondition, HTTP 409); left alone"
            ),
            _ => debug!(
                scope = %scope, pod = %name, uid = %uid, code = ?outcome.code,
                "DELETE of pod {name} in scope {scope} failed: {outcome}; retry {}",
                rec.attempts + 1
            ),
        }
    }

    fn schedule_retry(&mut self, uid: Uid, outcome: &Outcome) {
        let Some(attempts) = self.tracker.add_attempt(&uid) else {
            return;
        };
        self.tracker.set_stage(&uid, Stage::Backoff);
        ScopeMetrics::inc(&self.metrics.retries);
        let jitter = rand::random::<f64>();
        let delay = if outcome.class == OutcomeClass::Forbidden {
            // RBAC is fixed by people, not by retrying: retry slowly, never give up.
            self.cfg.tuning.forbidden_retry.mul_f64(0.9 + 0.2 * jitter)
        } else {
            schedule::retry_delay(
                attempts,
                outcome.retry_after,
                self.cfg.tuning.retry_max_wait,
                jitter,
            )
        };
        self.tracker.arm(&uid, Instant::now() + delay);
    }

    /// A refused pod of a refusal episode: counted as a retry, due again behind the others.
    fn keep_due(&mut self, uid: Uid) {
        if self.tracker.add_attempt(&uid).is_none() {
            return;
        }
        ScopeMetrics::inc(&self.metrics.retries);
        self.tracker.set_stage(&uid, Stage::Due);
        self.due.push_back(uid);
    }

    /// Gives the records a fresh start after the task failed: nothing in flight, every record
    /// armed again from its own deadline (overdue ones at once).
    pub(super) fn recover(&mut self) {
        self.inflight.abort_all();
        self.inflight = tokio::task::JoinSet::new();
        self.inflight_uid.clear();
        self.inflight_abort.clear();
        self.finishing.clear();
        self.dispatching = false;
        self.tracker.disarm_all();
        self.due.clear();
        self.poke_at = None;
        self.build_at = Some(Instant::now());
        self.last_leadership = Leadership::Following;
        let now_wall = self.clock.now();
        let armed: Vec<(Uid, Option<Duration>)> = self
            .tracker
            .iter()
            .map(|(uid, rec)| (uid.clone(), self.time_left(rec, now_wall)))
            .collect();
        let now = Instant::now();
        for (uid, left) in armed {
            self.tracker.set_stage(&uid, Stage::Scheduled);
            if let Some(left) = left {
                self.tracker.arm(&uid, now + left);
            }
        }
        self.enforce_cap(now_wall);
    }

    /// Why a record's pod goes, for its Event.
    pub(super) fn why(&self, rec: &crate::tracker::Record) -> String {
        if rec.immediate() {
            "Kyuubi asked for its deletion".to_owned()
        } else if rec.capped() {
            format!(
                "the namespace was over the cap of {} terminated driver pods",
                self.cfg.retention.max_terminated
            )
        } else {
            let retain = self.retain_of(rec).unwrap_or_default();
            format!("its retain period of {retain:?} has passed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token short of full by a rounding error must still mean a wait that lets time pass: a
    /// zero wait made the sweeper poll itself without end on paused time (and spin on real time).
    #[tokio::test(start_paused = true)]
    async fn a_bucket_wait_is_never_zero() {
        let mut b = Bucket::new(10.0, 1);
        let now = Instant::now();
        assert!(b.take(now).is_ok());
        b.tokens = 1.0 - 1e-12;
        let wait = b.take(now).unwrap_err();
        assert!(wait >= Duration::from_millis(1), "{wait:?}");
        let mut slow = Bucket::new(crate::config::MIN_QPS, 1);
        assert!(slow.take(now).is_ok());
        assert_eq!(slow.take(now).unwrap_err(), Duration::from_secs(1000));
    }
}
