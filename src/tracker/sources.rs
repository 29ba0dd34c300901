//! Where a scope's knowledge of a pod came from: this server's own informer, or only the
//! leader's scope-wide watch (`scopeWatch`, beside Kyuubi's owner-scoped informers, which see
//! only their own server's pods).
//!
//! # Guarantees
//! * A UID is *watch-only* while the tracker holds something of it (a record, a running mark, a
//!   spared mark) that only the scope watch told: the first event of it from the informer (or a
//!   due-now request, which comes from the informer's server) clears the mark, and the mark goes
//!   with the last thing held of the UID.
//! * [`Tracker::drop_watch_only`] drops every watch-only record and mark at once, and nothing the
//!   informer told. It is called when the scope watch's term ends (or its watch fails): this
//!   server would never see those pods end, so a record kept would grow with every leadership
//!   change and cost a DELETE answered 404 at its next term. Tombstones stay; the next leader's
//!   list arms the pods again from their own termination times.
//! * Without a scope watch nothing here costs anything: the set stays empty and is not probed.
//! * A self-watch with a field selector (pods past Running) tells of a pod's entry into its
//!   selection instead of its running states ([`Tracker::entered`]): it counts as seen running
//!   then, for a UID the tracker knows nothing of.
//!
//! # Memory
//! One set entry per watch-only UID (the UID, inline for a UUID, and the set's spare room), on
//! the leader only.

use std::time::SystemTime;

use tokio::time::Instant;

use super::{Record, Tracker, Uid, Verdict};
use crate::model::{CleanupKind, Observation};

impl Tracker {
    /// A watch that carries only terminated pods (a field selector on the phase) told of `uid`,
    /// terminated, and may just have seen it enter its selection: the pod was not terminated a
    /// moment before, so it counts as seen running at `at`, as an unfiltered watch would have
    /// seen it. Nothing changes for a UID that is tombstoned, tracked, spared or already
    /// remembered as running (a change of a pod already known); the next [`Tracker::observe`]
    /// of the pod takes the time (and the entry) as for any pod seen running.
    pub fn entered(&mut self, uid: &Uid, at: SystemTime) {
        if self.tombstones.contains_key(uid)
            || self.slot(uid).is_some()
            || self.spared.contains(uid)
            || self.running.contains_key(uid)
        {
            return;
        }
        self.running.insert(uid.clone(), at);
    }

    /// [`Tracker::observe`], told whether the event came only from the scope watch
    /// (`from_watch`) or from this server's informer.
    pub fn observe_from(
        &mut self,
        uid: &Uid,
        obs: &Observation,
        kind: CleanupKind,
        now_wall: SystemTime,
        now: Instant,
        from_watch: bool,
    ) -> Verdict {
        let held = from_watch && self.holds(uid);
        let verdict = self.observe(uid, obs, kind, now_wall, now);
        if from_watch {
            if !held && self.holds(uid) {
                self.watch_only.insert(uid.clone());
            }
        } else {
            self.informer_knows(uid);
        }
        if !self.watch_only.is_empty() && !self.holds(uid) {
            self.watch_only.remove(uid);
        }
        verdict
    }

    /// This server's informer (or Kyuubi on it) told of `uid`: it is not watch-only.
    pub(super) fn informer_knows(&mut self, uid: &Uid) {
        if !self.watch_only.is_empty() {
            self.watch_only.remove(uid);
        }
    }

    /// Whether a record, a running mark or a spared mark of `uid` is held.
    fn holds(&self, uid: &Uid) -> bool {
        self.slot(uid).is_some() || self.running.contains_key(uid) || self.spared.contains(uid)
    }

    /// Drops every record and mark only the scope watch told of; returns the dropped records.
    pub fn drop_watch_only(&mut self) -> Vec<(Uid, Record)> {
        let uids: Vec<Uid> = self.watch_only.drain().collect();
        if self.watch_only.capacity() > 1024 {
            self.watch_only.shrink_to(1024);
        }
        let mut dropped = Vec::new();
        for uid in uids {
            self.running.remove(&uid);
            self.spared.remove(&uid);
            if let Some(rec) = self.remove(&uid) {
                dropped.push((uid, rec));
            }
        }
        dropped
    }

    /// UIDs of which something is held that only the scope watch told.
    pub fn watch_only_count(&self) -> usize {
        self.watch_only.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::{AppState, EventKind};

    fn terminated(uid: &str) -> Observation {
        Observation {
            kind: EventKind::Update,
            tag: "tag-1".into(),
            pod_name: "driver-1".into(),
            pod_uid: uid.into(),
            state: AppState::Finished,
            has_app_selector: true,
            terminated_at: None,
            deletion_requested: false,
            annotations: None,
        }
    }

    #[test]
    fn an_entry_counts_as_seen_running_for_a_pod_the_tracker_does_not_know() {
        let (now, wall) = (
            Instant::now(),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1000),
        );
        let mut t = Tracker::new(Duration::from_secs(600));
        let at = wall - Duration::from_secs(10);
        let fresh = Uid::new("u1");
        t.entered(&fresh, at);
        assert_eq!(t.running_count(), 1);
        let v = t.observe(&fresh, &terminated("u1"), CleanupKind::All, wall, now);
        assert_eq!(v, Verdict::Arm);
        assert_eq!(t.get(&fresh).and_then(Record::seen_running), Some(at));
        assert_eq!(t.running_count(), 0, "the entry is taken with the record");
        // A change of a pod already tracked, or of a cleaned one, changes nothing.
        t.entered(&fresh, wall);
        assert_eq!(t.get(&fresh).and_then(Record::seen_running), Some(at));
        assert_eq!(t.running_count(), 0);
        let gone = Uid::new("u2");
        let mut deleted = terminated("u2");
        deleted.deletion_requested = true;
        t.observe(&gone, &deleted, CleanupKind::All, wall, now);
        t.entered(&gone, at);
        assert_eq!(
            t.running_count(),
            0,
            "a tombstoned UID is not remembered as running"
        );
        // Kept by the kind: the entry is taken all the same.
        let spared = Uid::new("u3");
        t.entered(&spared, at);
        let mut failed = terminated("u3");
        failed.state = AppState::Failed;
        assert_eq!(
            t.observe(&spared, &failed, CleanupKind::Completed, wall, now),
            Verdict::Ignore
        );
        assert_eq!(t.running_count(), 0);
    }
}
