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
//!
//! # Memory
//! One set entry per watch-only UID (the UID, inline for a UUID, and the set's spare room), on
//! the leader only.

use std::time::SystemTime;

use tokio::time::Instant;

use super::{Record, Tracker, Uid, Verdict};
use crate::model::{CleanupKind, Observation};

impl Tracker {
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
