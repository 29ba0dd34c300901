//! Refused DELETEs (403, and the other 4xx answers but 404, 409 and 429): how they hold a scope's
//! pace back, and whether stepping down can help.
//!
//! A refusal says nothing of the API server's load, but a burst of refused DELETEs is load all
//! the same, and in an emergency stop (the Role loses `delete`) every due pod would be refused,
//! by every leader in turn. So refusals count against the pace:
//!
//! * A refusal halves the adaptive limit (as a 429 does, `adaptive`) and the scope goes on with
//!   one DELETE in flight, doubled by each DELETE that completes (the slow start of `deletes`).
//! * Two refusals in a row (no DELETE completed between them) open a **refusal episode**: from
//!   then on one DELETE at a time leaves, the *probe*, at most one per `forbidden.retryInterval`
//!   after a 403 (after another refusal, the backoff of 1 s doubling up to `retry.maxWait`); the
//!   other due pods stay due, and a refused probe's pod goes back to the end of the queue, so the
//!   next probe tries another pod.
//! * The first DELETE that completes (200, 404, 409) ends the episode, without a restart: the
//!   scope resumes from one DELETE in flight, doubled by each DELETE that completes, up to its
//!   full pace.
//! * Every leadership term starts the same way, from one DELETE in flight (`on_leadership`): a
//!   new leader does not know whether the last term ended in refusals, and one refused DELETE
//!   tells it.
//! * When an episode opens, and at each step-down decision, the leader asks the API server
//!   whether its account may delete the namespace's pods (a `SelfSubjectAccessReview`, which
//!   every authenticated account may ask). If it may, the refusal comes from admission (a
//!   ValidatingAdmissionPolicy, a webhook) that refuses every server alike: stepping down cannot
//!   help, and the leader stays (unhealthy, with the reason). If RBAC denies it, or the answer is
//!   not known, it steps down after `ha.stepDownAfter`, as before: another server's account may
//!   be allowed.
//!
//! # Guarantees
//! * While an episode lasts, at most one DELETE of the scope is in flight and at most one leaves
//!   per probe interval (1 min after a 403 by default), whatever the number of due pods.
//! * Nothing is lost: a refused pod stays tracked and due (or waits for its retry); an episode
//!   ends by itself at the first DELETE that completes.
//!
//! # Caveats
//! * A pod that admission refuses on its own, among pods that go, costs one slow start each time
//!   it is retried; two such pods in a row open an episode, which the next DELETE that completes
//!   ends (at the next probe, up to `forbidden.retryInterval` later).
//! * "Allowed" means the authorizer allows this server's account; an admission rule that refuses
//!   some accounts and not others is taken for one that refuses every server.

use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{info, warn};

use super::Sweeper;
use crate::deleter::{Access, Outcome, OutcomeClass};
use crate::schedule;

/// Refusals in a row (no DELETE completed between them) that open an episode.
pub(super) const EPISODE_AFTER: u32 = 2;

/// Whether an answer refuses the DELETE: 403, or another 4xx that is neither 404, 409 nor 429
/// (400, 401, 422, ...). A client-side failure without an HTTP answer is no refusal.
pub(super) fn is_refusal(o: &Outcome) -> bool {
    match o.class {
        OutcomeClass::Forbidden => true,
        OutcomeClass::Other => o.code.is_some_and(|c| (400..500).contains(&c)),
        _ => false,
    }
}

/// The refusals of one scope.
#[derive(Default)]
pub(super) struct Refusals {
    /// Refused answers since the last DELETE that completed.
    in_a_row: u32,
    episode: Option<Episode>,
    /// Access reviews under way.
    pub(super) reviews: JoinSet<Access>,
    /// The latest review's answer.
    access: Option<Access>,
}

/// A refusal episode: the scope probes.
pub(super) struct Episode {
    since: Instant,
    /// Refused answers in the episode.
    refused: u64,
    /// Refused probes (the backoff of refusals other than 403).
    probes: u32,
    /// When the next DELETE may leave.
    next: Instant,
    /// The last refusal, for the pause's detail and the logs.
    last: String,
}

impl Refusals {
    /// While an episode lasts: when the next probe may leave.
    pub(super) fn probe_at(&self) -> Option<Instant> {
        self.episode.as_ref().map(|e| e.next)
    }

    /// Whether an episode lasts, with what holds it (for the backoff pause's detail).
    pub(super) fn holding(&self) -> Option<(Instant, &str)> {
        self.episode.as_ref().map(|e| (e.next, e.last.as_str()))
    }
}

impl Sweeper {
    /// The wait before the next probe after a refused one.
    fn probe_interval(&self, outcome: &Outcome, probes: u32) -> Duration {
        let jitter = rand::random::<f64>();
        if outcome.class == OutcomeClass::Forbidden {
            self.cfg.tuning.forbidden_retry.mul_f64(0.9 + 0.2 * jitter)
        } else {
            schedule::retry_delay(
                probes,
                outcome.retry_after,
                self.cfg.tuning.retry_max_wait,
                jitter,
            )
        }
    }

    /// What one answered DELETE means for the refusals; true when it was a refusal and an
    /// episode lasts (the caller keeps the pod due instead of scheduling its retry).
    pub(super) fn note_refusal(&mut self, outcome: &Outcome) -> bool {
        let now = Instant::now();
        if outcome.class.is_done() {
            self.refusals.in_a_row = 0;
            self.clear_refused_record();
            if let Some(ep) = self.refusals.episode.take() {
                self.slow_start();
                self.refusals.access = None;
                info!(
                    scope = %self.scope,
                    "DELETEs of scope {} are accepted again after {} refused in {:?}; resuming \
                     from one DELETE in flight",
                    self.scope, ep.refused, now.duration_since(ep.since)
                );
            }
            return false;
        }
        if !is_refusal(outcome) {
            // A probe met something else (429, 5xx, transport): it waits as after a refusal.
            let wait = self.probe_interval(outcome, 1);
            if let Some(ep) = &mut self.refusals.episode {
                ep.next = now + wait;
            }
            return false;
        }
        self.refusals.in_a_row = self.refusals.in_a_row.saturating_add(1);
        self.slow_start();
        let probes = self.refusals.episode.as_ref().map_or(0, |e| e.probes) + 1;
        let wait = self.probe_interval(outcome, probes);
        if let Some(ep) = &mut self.refusals.episode {
            ep.refused += 1;
            ep.probes = probes;
            ep.next = now + wait;
            ep.last = outcome.to_string();
            self.note_refused_here();
            return true;
        }
        if self.refusals.in_a_row < EPISODE_AFTER {
            return false;
        }
        self.refusals.episode = Some(Episode {
            since: now,
            refused: u64::from(self.refusals.in_a_row),
            probes,
            next: now + wait,
            last: outcome.to_string(),
        });
        warn!(
            scope = %self.scope,
            "DELETEs of scope {} are refused ({outcome}): one DELETE at a time probes every \
             ~{wait:?} until one is accepted; {} pod(s) wait",
            self.scope, self.tracker.len()
        );
        self.start_review();
        self.note_refused_here();
        true
    }

    /// From one DELETE in flight again, doubled by each DELETE that completes.
    pub(super) fn slow_start(&mut self) {
        if self.cfg.tuning.max_in_flight > 1 {
            self.ramp = Some(1);
        }
    }

    /// Asks the API server whether this server's account may delete the scope's pods (at most
    /// one review at a time).
    pub(super) fn start_review(&mut self) {
        if !self.refusals.reviews.is_empty() {
            return;
        }
        if let Some(d) = &self.deleter {
            self.refusals.reviews.spawn(d.review());
        }
    }

    /// A review came back.
    pub(super) fn on_review(&mut self, done: Result<Access, tokio::task::JoinError>) {
        let access = done.unwrap_or_else(|e| Access::Unknown(format!("review task: {e}")));
        if self.refusals.episode.is_some() && self.refusals.access.as_ref() != Some(&access) {
            match &access {
                Access::Allowed => warn!(
                    scope = %self.scope,
                    "The API server says this server's account may delete pods in scope {}: \
                     its DELETEs are refused by admission (a policy or webhook), which would \
                     refuse every server alike, so this server keeps the leadership",
                    self.scope
                ),
                Access::Denied(why) => info!(
                    scope = %self.scope,
                    "The API server denies this server's account `delete` on pods in scope {} \
                     ({why}); another server's account may be allowed",
                    self.scope
                ),
                Access::Unknown(why) => info!(
                    scope = %self.scope,
                    "Cannot tell whether this server's account may delete pods in scope {}: {why}",
                    self.scope
                ),
            }
        }
        self.refusals.access = Some(access);
    }

    /// Why stepping down cannot help now, if it cannot: the scope's DELETEs are refused although
    /// the API server says this account may delete (admission refuses every server alike). Asks
    /// again for the next decision.
    pub(super) fn step_down_futile(&mut self) -> Option<String> {
        self.refusals.episode.as_ref()?;
        let futile = matches!(self.refusals.access, Some(Access::Allowed)).then(|| {
            "the API server says this server's account may delete pods here \
             (SelfSubjectAccessReview), so admission refuses the DELETEs and would refuse every \
             server alike"
                .to_owned()
        });
        self.start_review();
        futile
    }
}
