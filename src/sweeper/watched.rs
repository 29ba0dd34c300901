//! Self-watch mode's two messages to a scope task (see `crate::watch`): a fresh list ended, and
//! the watch stopped or failed; and the end of the scope-wide watch beside the informers.
//!
//! # Guarantees
//! * A pod tracked here but absent from a fresh list is gone: its record is cancelled and its UID
//!   tombstoned, without a DELETE.
//! * When the watch stops (this server no longer leads) or fails (events may be lost), every
//!   record is dropped: nobody keeps it fresh, so it could otherwise be deleted later on stale
//!   facts (another leader, or anyone, may have deleted the pod meanwhile). Tombstones stay. The next leader's list arms the pods again from
//!   their own termination times, so the clock is kept.
//! * When the scope-wide watch beside the informers (`scopeWatch`) ends (the term ended, or the
//!   watch failed), the records and marks that only it told of are dropped, and the informer's
//!   stay: an ex-leader holds nothing of pods its informer never sees end.
//! * With a field selector (pods past Running), a terminated pod the watch tells of, which the
//!   tracker knows nothing of, counts as seen running just before (`entered`): its termination
//!   keeps the floor of a pod seen running.
//! * A DELETE still in flight when its record is dropped is let finish and reported; a record
//!   armed again for that UID meanwhile is not dispatched until it has ended, and is settled by
//!   it if it succeeded.

use std::collections::HashSet;

use tokio::time::Instant;
use tracing::{debug, info};

use super::{Sweeper, Uid};
use crate::deleter::Outcome;
use crate::metrics::ScopeMetrics;
use crate::model::Observation;
use crate::tracker::{Record, Stage};

impl Sweeper {
    pub(super) fn on_listed(&mut self, listed: &HashSet<Uid>) {
        let gone = self.tracker.retain_listed(listed, Instant::now());
        let n = gone.len();
        for (uid, rec) in gone {
            ScopeMetrics::inc(&self.metrics.cancelled);
            debug!(
                scope = %self.scope, pod = %rec.name(), uid = %uid,
                "Pod {} is absent from a fresh list: it is gone; its cleanup is cancelled", rec.name()
            );
            self.drop_record(uid, rec);
        }
        debug!(
            scope = %self.scope,
            "Listed {} driver pods of scope {}; {n} tracked pods were gone", listed.len(), self.scope
        );
    }

    pub(super) fn on_unwatched(&mut self) {
        let dropped = self.tracker.drop_unwatched();
        let n = dropped.len();
        for (uid, rec) in dropped {
            self.drop_record(uid, rec);
        }
        self.due.clear();
        if n > 0 {
            info!(
                scope = %self.scope,
                "The pod watch of scope {} stopped or failed: {n} tracked pods are dropped until \
                 the next list",
                self.scope
            );
        }
    }

    /// The scope-wide watch beside the informers ended: what only it told (other servers'
    /// pods, which this server's informer never sees end) is dropped; the informer's records
    /// stay.
    pub(super) fn on_scope_unwatched(&mut self) {
        let dropped = self.tracker.drop_watch_only();
        let n = dropped.len();
        for (uid, rec) in dropped {
            self.drop_record(uid, rec);
        }
        self.compact_due();
        if n > 0 {
            info!(
                scope = %self.scope,
                "The scope-wide pod watch of scope {} ended: {n} tracked pods only it had \
                 reported are dropped (their next leader lists them)",
                self.scope
            );
        }
    }

    /// A filtered watch's event of a terminated pod that may have just entered its selection:
    /// the pod was not terminated a moment before (the event's arrival less the informer's
    /// delivery margin), as if it had been seen running then, so its termination is not dated
    /// earlier than its first sighting less [`crate::schedule::SKEW_TOLERANCE`], as for a pod the
    /// watch saw running ([`crate::tracker::Tracker::entered`]).
    pub(super) fn entered(&mut self, obs: &Observation) {
        if !obs.state.is_terminated() || obs.is_cleaned() || !obs.is_kyuubi_driver() {
            return;
        }
        let at = self.clock.now();
        let at = at
            .checked_sub(crate::schedule::SKEW_TOLERANCE)
            .unwrap_or(at);
        self.tracker.entered(&Uid::new(&obs.pod_uid), at);
    }

    /// Drops what belongs to a record that is gone from the tracker (its timer went with it); a
    /// DELETE in flight for it finishes and is reported.
    fn drop_record(&mut self, uid: Uid, rec: Record) {
        self.unkeep(&rec);
        self.failures.forget(&uid);
        if self.inflight_abort.contains_key(&uid) {
            self.finishing.insert(uid, rec);
        }
    }

    /// After a DELETE ended: a record armed again for its UID while it was in flight waits no
    /// longer.
    pub(super) fn requeue_rearmed(&mut self, uid: &Uid) {
        if self
            .tracker
            .get(uid)
            .is_some_and(|r| r.stage() == Stage::Due)
        {
            self.due.push_front(uid.clone());
        }
    }

    /// A DELETE whose record was dropped while it was in flight succeeded: a record armed again
    /// for the same UID meanwhile is settled by it.
    pub(super) fn settle_rearmed(&mut self, uid: &Uid, outcome: &Outcome) {
        if !outcome.class.is_done() || self.tracker.get(uid).is_none() {
            return;
        }
        self.failures.forget(uid);
        if let Some(gone) = self.tracker.settle(uid, Instant::now()) {
            self.unkeep(&gone);
        }
        self.compact_due();
    }
}
