//! What a scope's task was last told about each pod, so that an event that would change nothing
//! there is answered on the caller's (informer) thread instead of being queued.
//!
//! An informer sends a pod's every status change, and Kyuubi's resyncs repeat them: most events
//! of a Kyuubi driver pod say again what its scope's task already knows ("still running", "still
//! FAILED"). [`SeenPods`] keeps, per pod UID, the kind of the last event handed on:
//!
//! * **running** (any non-terminal state): a later non-terminal event is answered here; only the
//!   time it was seen is kept, and handed on ([`Admit::Forward::seen_running`]) with the pod's
//!   terminal event, so the task's clock-skew bound uses the last time the pod was seen running,
//!   as if every event had reached it;
//! * **terminal**: a later terminal event is answered here unless it brings the termination time
//!   the first one lacked (the tracker keeps the first terminal state, and only a missing time is
//!   filled in later);
//! * a DELETE event or a deletion timestamp removes the UID and is always handed on.
//!
//! Anything else is handed on: the first event of a pod, a non-terminal event after a terminal one
//! (the task disarms the pod), a terminal event after non-terminal ones. So a dropped event is one
//! the tracker would have ignored; the table never decides what is deleted.
//!
//! Only canonical UUID UIDs (every Kubernetes UID) are kept; other UIDs are always handed on. The
//! table of a scope lives as long as its task: the engine clears it when the task is released.

use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::model::Observation;

/// A pod's last event handed on, in one word (a table entry is its 16-byte UID and this):
/// terminal ([`TERMINAL`], with [`TIMED`] when a termination time was handed on), or running,
/// with the last time it was seen so in the low 48 bits (ms since the epoch) and [`SEEN_SINCE`]
/// when that is later than the event handed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Last(u64);

const TERMINAL: u64 = 1 << 63;
const TIMED: u64 = 1 << 62;
const SEEN_SINCE: u64 = 1 << 61;
const MS: u64 = (1 << 48) - 1;

impl Last {
    fn running(ms: u64) -> Self {
        Last(ms & MS)
    }

    /// Terminal, with the fingerprint of the pod's annotations in the low 32 bits.
    fn terminal(timed: bool, annotations: u32) -> Self {
        Last(TERMINAL | if timed { TIMED } else { 0 } | u64::from(annotations))
    }

    fn is_terminal(self) -> bool {
        self.0 & TERMINAL != 0
    }

    /// A terminal event with (`timed`) or without a termination time, and with the same
    /// annotations, says nothing new.
    fn knows_terminal(self, timed: bool, annotations: u32) -> bool {
        self.is_terminal()
            && (self.0 & TIMED != 0 || !timed)
            && self.0 & u64::from(u32::MAX) == u64::from(annotations)
    }

    /// Running, seen so again at `ms`.
    fn seen_again(&mut self, ms: u64) {
        let ms = (self.0 & MS).max(ms & MS);
        self.0 = ms | SEEN_SINCE;
    }

    /// Whether `head` says nothing new to a task last told `self`: a non-terminal event after a
    /// non-terminal one (its sighting is kept, at `now`), or a terminal event after a terminal
    /// one that brings no termination time the first lacked.
    fn repeated_by(&mut self, head: &Head, now: impl FnOnce() -> SystemTime) -> bool {
        if !head.terminal && !self.is_terminal() {
            self.seen_again(millis(now()));
            return true;
        }
        head.terminal && self.knows_terminal(head.timed, head.annotations)
    }

    /// When last seen running, if later than the event handed on.
    fn seen_since(self) -> Option<SystemTime> {
        (!self.is_terminal() && self.0 & SEEN_SINCE != 0)
            .then(|| UNIX_EPOCH + Duration::from_millis(self.0 & MS))
    }
}

/// What to do with an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// The task knows it already: drop the event.
    Known,
    /// Hand it on; for a terminal event of a pod seen running since its last event handed on,
    /// first tell the task when it was last seen running.
    Forward { seen_running: Option<SystemTime> },
}

/// The facts of an event [`SeenPods`] decides on: all the JVM's hot path reads before it knows
/// whether it needs the pod's name and tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    /// The UID, when it is a canonical UUID ([`crate::ident::uuid_bytes`]).
    pub uid: Option<[u8; 16]>,
    pub terminal: bool,
    /// A DELETE event or a deletion timestamp.
    pub cleaned: bool,
    pub timed: bool,
    /// The fingerprint of the pod's annotations ([`crate::model::PodAnnotations::fingerprint`]),
    /// read for terminal events only (0 otherwise).
    pub annotations: u32,
}

impl Head {
    pub fn of(obs: &Observation) -> Self {
        Head {
            uid: crate::ident::uuid_bytes(obs.pod_uid.as_bytes()),
            terminal: obs.state.is_terminated(),
            cleaned: obs.is_cleaned(),
            timed: obs.terminated_at.is_some(),
            annotations: if obs.state.is_terminated() {
                crate::model::PodAnnotations::fingerprint(obs.annotations.as_deref())
            } else {
                0
            },
        }
    }
}

/// One UID and what its pod's last event handed on said.
#[derive(Clone, Copy)]
struct Entry {
    uid: [u8; 16],
    last: Last,
}

/// The entries in the order they were first recorded, and a hash index of positions into them.
/// The random part of a lookup is a 4-byte index slot (and hashbrown's control byte), not a
/// 24-byte bucket in a table five times the size; and pods that come round in the order they were
/// first seen (an informer's relist returns them in the API server's key order) are read in
/// order, which the CPU's prefetcher follows. Removal swaps the last entry into the hole.
#[derive(Default)]
struct Table {
    index: HashTable<u32>,
    entries: Vec<Entry>,
    /// Events answered from this table since it was last cleared.
    answered: u64,
}

impl Table {
    fn position(&self, hash: u64, uid: &[u8; 16]) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(hash, |&i| {
                entries.get(i as usize).is_some_and(|e| e.uid == *uid)
            })
            .map(|&i| i as usize)
    }

    fn get_mut(&mut self, hash: u64, uid: &[u8; 16]) -> Option<&mut Last> {
        let i = self.position(hash, uid)?;
        self.entries.get_mut(i).map(|e| &mut e.last)
    }

    /// Records `last` for `uid`, which is not held. A table full to `u32::MAX` records nothing:
    /// the UID's events are then all handed on, as for a UID that is not a UUID.
    fn insert(&mut self, hasher: &RandomState, hash: u64, uid: [u8; 16], last: Last) {
        let Ok(i) = u32::try_from(self.entries.len()) else {
            return;
        };
        let entries = &self.entries;
        self.index.insert_unique(hash, i, |&j| {
            entries
                .get(j as usize)
                .map_or(0, |e| hasher.hash_one(e.uid))
        });
        self.entries.push(Entry { uid, last });
    }

    fn remove(&mut self, hasher: &RandomState, hash: u64, uid: &[u8; 16]) {
        let entries = &self.entries;
        let Ok(found) = self.index.find_entry(hash, |&i| {
            entries.get(i as usize).is_some_and(|e| e.uid == *uid)
        }) else {
            return;
        };
        let (i, _) = found.remove();
        let hole = i as usize;
        self.entries.swap_remove(hole);
        // The entry that was last now sits in the hole: point its index slot there.
        if let Some(moved) = self.entries.get(hole) {
            let from = self.entries.len();
            let hash = hasher.hash_one(moved.uid);
            if let Some(slot) = self.index.find_mut(hash, |&j| j as usize == from) {
                *slot = i;
            }
        }
    }
}

/// See the module documentation.
#[derive(Default)]
pub struct SeenPods {
    hasher: RandomState,
    /// One lock: a scope's events come from its informer's one thread. (Eight shards made a lap
    /// over the entries eight interleaved streams, which the prefetcher does not follow: the
    /// observe bench took 127 ns a call against 101 ns.)
    table: Mutex<Table>,
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl SeenPods {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the task already knows what this event says (then it is counted as answered, and
    /// a running pod's time seen is kept). Changes nothing else: an event that is not known goes
    /// through [`SeenPods::admit`].
    pub fn known(&self, head: &Head, now: impl FnOnce() -> SystemTime) -> bool {
        let Some(uid) = head.uid else {
            return false;
        };
        if head.cleaned {
            return false;
        }
        let hash = self.hasher.hash_one(uid);
        let mut table = self.table();
        let hit = table
            .get_mut(hash, &uid)
            .is_some_and(|last| last.repeated_by(head, now));
        if hit {
            table.answered += 1;
        }
        hit
    }

    /// Decides on an event about to be handed to the task, and records it when it is.
    pub fn admit(&self, head: &Head, now: SystemTime) -> Admit {
        let Some(uid) = head.uid else {
            return Admit::Forward { seen_running: None };
        };
        let hash = self.hasher.hash_one(uid);
        let mut table = self.table();
        if head.cleaned {
            table.remove(&self.hasher, hash, &uid);
            return Admit::Forward { seen_running: None };
        }
        let next = if head.terminal {
            Last::terminal(head.timed, head.annotations)
        } else {
            Last::running(millis(now))
        };
        let Some(last) = table.get_mut(hash, &uid) else {
            table.insert(&self.hasher, hash, uid, next);
            return Admit::Forward { seen_running: None };
        };
        if last.repeated_by(head, || now) {
            table.answered += 1;
            return Admit::Known;
        }
        let seen_running = if head.terminal {
            last.seen_since()
        } else {
            None
        };
        *last = next;
        Admit::Forward { seen_running }
    }

    /// Forgets every pod (the scope's task was released: the next one starts from nothing).
    pub fn clear(&self) {
        *self.table() = Table::default();
    }

    /// Events answered here since the last [`SeenPods::clear`].
    pub fn answered(&self) -> u64 {
        self.table().answered
    }

    /// UIDs held.
    pub fn len(&self) -> usize {
        self.table().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 16] = [7; 16];

    fn head(terminal: bool, timed: bool) -> Head {
        Head {
            uid: Some(A),
            terminal,
            cleaned: false,
            timed,
            annotations: 0,
        }
    }

    #[test]
    fn a_changed_annotation_of_a_terminated_pod_is_handed_on() {
        let s = SeenPods::default();
        let failed = head(true, true);
        assert_eq!(
            s.admit(&failed, at(1)()),
            Admit::Forward { seen_running: None }
        );
        assert!(s.known(&failed, at(2)));
        let annotated = Head {
            annotations: 7,
            ..failed
        };
        assert!(!s.known(&annotated, at(3)));
        assert_eq!(
            s.admit(&annotated, at(3)()),
            Admit::Forward { seen_running: None }
        );
        assert!(s.known(&annotated, at(4)));
        assert!(!s.known(&failed, at(5)), "the annotation was removed again");
    }

    fn at(ms: u64) -> impl FnOnce() -> SystemTime {
        move || UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn repeats_are_known_and_changes_are_handed_on() {
        let s = SeenPods::default();
        let running = head(false, false);
        assert!(!s.known(&running, at(1_000)));
        assert_eq!(
            s.admit(&running, at(1_000)()),
            Admit::Forward { seen_running: None }
        );
        assert!(s.known(&running, at(2_000)));
        assert!(s.known(&running, at(5_000)));
        // Terminal after running: handed on, with the last time seen running.
        let failed = head(true, false);
        assert!(!s.known(&failed, at(6_000)));
        assert_eq!(
            s.admit(&failed, at(6_000)()),
            Admit::Forward {
                seen_running: Some(UNIX_EPOCH + Duration::from_millis(5_000))
            }
        );
        assert!(s.known(&failed, at(7_000)));
        // The termination time the first terminal event lacked is handed on once.
        let timed = head(true, true);
        assert!(!s.known(&timed, at(7_000)));
        assert_eq!(
            s.admit(&timed, at(7_000)()),
            Admit::Forward { seen_running: None }
        );
        assert!(s.known(&timed, at(8_000)) && s.known(&failed, at(8_000)));
        // Running again after a terminal state: handed on (the task disarms the pod).
        assert!(!s.known(&running, at(9_000)));
        assert_eq!(
            s.admit(&running, at(9_000)()),
            Admit::Forward { seen_running: None }
        );
        assert_eq!(s.answered(), 5);
    }

    #[test]
    fn a_deletion_forgets_the_pod_and_is_always_handed_on() {
        let s = SeenPods::default();
        let failed = head(true, true);
        s.admit(&failed, at(1)());
        let deleted = Head {
            cleaned: true,
            ..failed
        };
        assert!(!s.known(&deleted, at(2)));
        assert_eq!(
            s.admit(&deleted, at(2)()),
            Admit::Forward { seen_running: None }
        );
        assert!(s.is_empty());
        assert!(
            !s.known(&failed, at(3)),
            "a terminal event after the deletion goes to the task"
        );
    }

    #[test]
    fn a_running_pod_seen_only_once_hands_on_no_time() {
        let s = SeenPods::default();
        s.admit(&head(false, false), at(1_000)());
        assert_eq!(
            s.admit(&head(true, true), at(2_000)()),
            Admit::Forward { seen_running: None }
        );
    }

    #[test]
    fn removing_a_pod_keeps_every_other_pod_found() {
        let s = SeenPods::default();
        let uid = |i: u16| {
            let mut b = [0u8; 16];
            b[..2].copy_from_slice(&i.to_be_bytes());
            b[15] = 9;
            b
        };
        let at_uid = |i: u16, terminal: bool, cleaned: bool| Head {
            uid: Some(uid(i)),
            terminal,
            cleaned,
            timed: true,
            annotations: 0,
        };
        for i in 0..2_000 {
            s.admit(&at_uid(i, true, false), at(1)());
        }
        // Every third pod deleted, in an order that empties holes both in the middle and at the
        // end of a table.
        for i in (0..2_000).rev().filter(|i| i % 3 == 0) {
            s.admit(&at_uid(i, true, true), at(2)());
        }
        for i in 0..2_000 {
            assert_eq!(
                s.known(&at_uid(i, true, false), at(3)),
                i % 3 != 0,
                "pod {i}"
            );
        }
        assert_eq!(s.len(), 2_000 - 667);
    }

    #[test]
    fn uids_that_are_not_uuids_are_always_handed_on_and_clear_forgets_all() {
        let s = SeenPods::default();
        let other = Head {
            uid: None,
            ..head(false, false)
        };
        for _ in 0..3 {
            assert!(!s.known(&other, at(1)));
            assert_eq!(
                s.admit(&other, at(1)()),
                Admit::Forward { seen_running: None }
            );
        }
        s.admit(&head(false, false), at(1)());
        assert!(s.known(&head(false, false), at(2)));
        s.clear();
        assert!(s.is_empty() && s.answered() == 0);
        assert!(!s.known(&head(false, false), at(3)));
    }
}
