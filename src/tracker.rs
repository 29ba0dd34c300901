//! Per-scope records of terminated Kyuubi Spark driver pods, the UIDs already cleaned, the
//! records' timers and the set of overdue records.
//!
//! Pure state: no I/O, no runtime. The sweeper asks [`Tracker::observe`] what an event means,
//! arms timers here ([`Tracker::arm`]) and takes the expired ones ([`Tracker::take_expired`]).
//!
//! # Guarantees
//! * Only Kyuubi Spark driver pods (both labels) in a terminated state the cleanup kind deletes
//!   get a record. Running pods cost nothing.
//! * A DELETE event or a `deletionTimestamp` tombstones the UID: its record is dropped and no later
//!   event for that UID arms it again (tombstones are kept for `tombstone_ttl`, far longer than
//!   an informer takes to deliver a pod's last events).
//! * The first terminal state observed is the one the cleanup kind judges (as in Kyuubi): a UID
//!   whose first terminal state the kind rejects (e.g. FAILED under COMPLETED) is remembered as
//!   *spared*, and a later FINISHED of the same UID does not arm it.
//! * A non-terminal observation (the pod runs again, e.g. after `ImagePullBackOff` mapped to
//!   FAILED) ends the termination: the record is disarmed and the spared mark dropped, without a
//!   tombstone, so a later termination is tracked and judged afresh.
//! * The last time a driver pod was seen in a non-terminal state is kept while the pod lives, and
//!   its termination is never dated earlier (see [`crate::schedule::anchor`]).
//! * Times are kept in whole milliseconds, rounded up: a deadline computed from a record is never
//!   earlier than one computed from the exact times.
//! * A record has at most one armed timer; arming it again replaces the earlier one, and a record
//!   that is removed loses its timer. Timers fire in deadline order.
//! * The oldest overdue record (stage other than `Scheduled`) is found from the overdue set alone
//!   ([`Tracker::oldest_overdue`], O(log due)), never from a scan of every record.
//!
//! # Memory
//! One tracked pod costs one slab entry (the [`Record`], about 112 bytes, UID and tag inline when
//! they are UUIDs, the pod name shared with the pods whose names have the same shape around their
//! tag), a 4-byte index in the UID table and one 16-byte timer entry (see `benches/memory.rs`).

use std::cmp::Reverse;
use std::collections::hash_map::RandomState;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet, VecDeque};
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hashbrown::HashTable;
use slab::Slab;
use tokio::time::Instant;

use crate::ident::Ident;
use crate::model::{AppState, CleanupKind, Observation};

/// A pod UID as the tracker and the sweeper keep it.
pub type Uid = Ident;

/// Where a tracked pod is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Waiting for its deadline.
    Scheduled,
    /// Deadline passed; waiting for leadership or a free slot.
    Due,
    /// A DELETE is in flight.
    Deleting,
    /// The last DELETE failed; waiting to retry.
    Backoff,
}

/// Wall-clock milliseconds since the epoch, rounded up (0 stands for "none").
fn ms_ceil(t: SystemTime) -> u64 {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let ms = d.as_millis() + u128::from(!d.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(ms).unwrap_or(u64::MAX).max(1)
}

fn from_ms(ms: u64) -> Option<SystemTime> {
    (ms != 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

/// The parts of a pod name around its Kyuubi tag (Kyuubi names driver pods after the tag), shared
/// by every pod whose name has the same parts.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NameShape {
    before: Box<str>,
    after: Box<str>,
}

/// A pod name: its shape around the tag, or the name itself when it does not contain the tag.
#[derive(Clone, Debug, PartialEq, Eq)]
enum PodName {
    AroundTag(Arc<NameShape>),
    Plain(Arc<str>),
}

/// A terminated driver pod podsweep will delete when due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub uid: Uid,
    pub tag: Ident,
    name: PodName,
    /// Wall ms (rounded up); 0: none.
    terminated_at: u64,
    first_seen: u64,
    seen_running: u64,
    /// The armed timer, in ms on the tracker's timer clock; 0: none.
    timer_at: u64,
    /// Wall ms of the deadline while the record is overdue (in the overdue set); 0: not overdue.
    overdue_since: u64,
    /// Failed DELETE attempts so far.
    pub attempts: u32,
    pub state: AppState,
    /// Changed only through [`Tracker::set_stage`] / [`Tracker::set_due`], which keep the
    /// per-stage counts and the overdue set.
    pub stage: Stage,
    /// Kyuubi asked for the pod to be deleted at once ([`Tracker::due_now`]: the pod of a
    /// CANCELED batch, an orphan pod): due from the moment podsweep was told, whatever its state
    /// and the cleanup kind, and never disarmed by a later running state.
    pub immediate: bool,
}

impl Record {
    /// The pod's name.
    pub fn name(&self) -> String {
        match &self.name {
            PodName::Plain(n) => n.to_string(),
            PodName::AroundTag(s) => format!("{}{}{}", s.before, self.tag, s.after),
        }
    }

    /// When the pod terminated, as the pod says.
    pub fn terminated_at(&self) -> Option<SystemTime> {
        from_ms(self.terminated_at)
    }

    /// When podsweep first saw the pod terminated.
    pub fn first_seen(&self) -> SystemTime {
        from_ms(self.first_seen).unwrap_or(SystemTime::UNIX_EPOCH)
    }

    /// The last time the pod was seen in a non-terminal state, if it was.
    pub fn seen_running(&self) -> Option<SystemTime> {
        from_ms(self.seen_running)
    }
}

/// What an observation means for the schedule.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to do.
    Ignore,
    /// A new record: arm its timer.
    Arm,
    /// The deadline of an existing record moved (a termination time arrived): re-arm.
    Rearm,
    /// The pod is cleaned: cancel whatever was pending for it (the record is gone).
    Cancel(Record),
    /// The pod is not terminated any more: cancel whatever was pending for it (the record is
    /// gone, without a tombstone: it may terminate again).
    Disarm(Record),
    /// Kyuubi asked for the pod to be deleted at once: its record is due now.
    DueNow,
}

pub struct Tracker {
    /// The records; a record's slab key is its slot.
    records: Slab<Record>,
    /// Slots by UID (hashes from `hasher`).
    index: HashTable<u32>,
    hasher: RandomState,
    /// Timers: (ms on the timer clock, slot), earliest first. An entry whose record is gone or
    /// whose record's `timer_at` differs is stale and skipped.
    timers: BinaryHeap<Reverse<(u64, u32)>>,
    /// Records with a timer armed.
    armed: usize,
    /// The timer clock's zero.
    base: Instant,
    /// Overdue records: (deadline wall ms, slot).
    overdue: BTreeSet<(u64, u32)>,
    shapes: HashSet<Arc<NameShape>>,
    /// The size of `shapes` after its last pruning.
    shapes_kept: usize,
    /// UIDs whose first terminal state the cleanup kind rejected.
    spared: HashSet<Uid>,
    /// Driver pods seen in a non-terminal state, and when last.
    running: HashMap<Uid, SystemTime>,
    /// Records per stage, indexed by `Stage as usize`.
    counts: [usize; 4],
    tombstones: HashMap<Uid, Instant>,
    tombstone_order: VecDeque<(Instant, Uid)>,
    tombstone_ttl: Duration,
}

impl Tracker {
    pub fn new(tombstone_ttl: Duration) -> Self {
        Tracker {
            records: Slab::new(),
            index: HashTable::new(),
            hasher: RandomState::new(),
            timers: BinaryHeap::new(),
            armed: 0,
            base: Instant::now(),
            overdue: BTreeSet::new(),
            shapes: HashSet::new(),
            shapes_kept: 0,
            spared: HashSet::new(),
            running: HashMap::new(),
            counts: [0; 4],
            tombstones: HashMap::new(),
            tombstone_order: VecDeque::new(),
            tombstone_ttl,
        }
    }

    fn slot(&self, uid: &Uid) -> Option<u32> {
        let hash = self.hasher.hash_one(uid);
        let records = &self.records;
        self.index
            .find(hash, |&s| {
                records.get(s as usize).is_some_and(|r| r.uid == *uid)
            })
            .copied()
    }

    fn insert(&mut self, rec: Record) {
        let hash = self.hasher.hash_one(&rec.uid);
        let slot = self.records.insert(rec) as u32;
        let (records, hasher) = (&self.records, &self.hasher);
        self.index.insert_unique(hash, slot, |&s| {
            records
                .get(s as usize)
                .map_or(0, |r| hasher.hash_one(&r.uid))
        });
    }

    fn shape(&mut self, tag: &str, name: &str) -> PodName {
        let Some(at) = (!tag.is_empty()).then(|| name.find(tag)).flatten() else {
            return PodName::Plain(Arc::from(name));
        };
        let probe = NameShape {
            before: name[..at].into(),
            after: name[at + tag.len()..].into(),
        };
        if let Some(s) = self.shapes.get(&probe) {
            return PodName::AroundTag(s.clone());
        }
        if self.shapes.len() >= 2 * self.shapes_kept + 64 {
            // Drop the shapes no record uses any more (amortised O(1) per shape).
            self.shapes.retain(|s| Arc::strong_count(s) > 1);
            self.shapes_kept = self.shapes.len();
        }
        let s = Arc::new(probe);
        self.shapes.insert(s.clone());
        PodName::AroundTag(s)
    }

    /// Applies one observation. `uid` must be `obs.pod_uid` as a [`Uid`].
    pub fn observe(
        &mut self,
        uid: &Uid,
        obs: &Observation,
        kind: CleanupKind,
        now_wall: SystemTime,
        now: Instant,
    ) -> Verdict {
        self.prune(now);
        if self.tombstones.contains_key(uid) {
            return Verdict::Ignore;
        }
        if obs.is_cleaned() {
            self.tombstone(uid.clone(), now);
            self.spared.remove(uid);
            self.running.remove(uid);
            return match self.remove(uid) {
                Some(r) => Verdict::Cancel(r),
                None => Verdict::Ignore,
            };
        }
        if !obs.is_kyuubi_driver() {
            return Verdict::Ignore;
        }
        if !obs.state.is_terminated() {
            if self
                .slot(uid)
                .is_some_and(|s| self.records[s as usize].immediate)
            {
                // Deleted at once whatever its state: a pod of a canceled batch runs.
                return Verdict::Ignore;
            }
            self.spared.remove(uid);
            self.running.insert(uid.clone(), now_wall);
            return match self.remove(uid) {
                Some(r) => Verdict::Disarm(r),
                None => Verdict::Ignore,
            };
        }
        let seen_running = self.running.remove(uid);
        if self.spared.contains(uid) {
            // The first terminal state decided: the kind does not delete this pod.
            return Verdict::Ignore;
        }
        if let Some(slot) = self.slot(uid) {
            let rec = &mut self.records[slot as usize];
            if rec.terminated_at == 0 {
                if let Some(t) = obs.terminated_at {
                    rec.terminated_at = ms_ceil(t);
                    return Verdict::Rearm;
                }
            }
            return Verdict::Ignore;
        }
        if !obs.state.cleaned_by(kind) {
            if kind != CleanupKind::None {
                self.spared.insert(uid.clone());
            }
            return Verdict::Ignore;
        }
        self.counts[Stage::Scheduled as usize] += 1;
        let name = self.shape(&obs.tag, &obs.pod_name);
        self.insert(Record {
            uid: uid.clone(),
            tag: Ident::new(&obs.tag),
            name,
            state: obs.state,
            terminated_at: obs.terminated_at.map_or(0, ms_ceil),
            first_seen: ms_ceil(now_wall),
            seen_running: seen_running.map_or(0, ms_ceil),
            timer_at: 0,
            overdue_since: 0,
            stage: Stage::Scheduled,
            attempts: 0,
            immediate: false,
        });
        Verdict::Arm
    }

    /// Kyuubi asks for a driver pod to be deleted at once (the pod of a CANCELED batch, an orphan
    /// pod): whatever its state and the cleanup kind, its record is due now (an existing record
    /// becomes so), and a later running state does not disarm it. A pod already cleaned (a
    /// tombstone, a DELETE event, a `deletionTimestamp`) is not armed; a pod that is no Kyuubi
    /// driver pod is ignored. `uid` must be `obs.pod_uid` as a [`Uid`].
    pub fn due_now(
        &mut self,
        uid: &Uid,
        obs: &Observation,
        now_wall: SystemTime,
        now: Instant,
    ) -> Verdict {
        if obs.is_cleaned() || !obs.is_kyuubi_driver() {
            return self.observe(uid, obs, CleanupKind::None, now_wall, now);
        }
        self.prune(now);
        if self.tombstones.contains_key(uid) {
            return Verdict::Ignore;
        }
        self.spared.remove(uid);
        let seen_running = self.running.remove(uid);
        if let Some(slot) = self.slot(uid) {
            self.records[slot as usize].immediate = true;
            return Verdict::DueNow;
        }
        self.counts[Stage::Scheduled as usize] += 1;
        let name = self.shape(&obs.tag, &obs.pod_name);
        self.insert(Record {
            uid: uid.clone(),
            tag: Ident::new(&obs.tag),
            name,
            state: obs.state,
            terminated_at: obs.terminated_at.map_or(0, ms_ceil),
            first_seen: ms_ceil(now_wall),
            seen_running: seen_running.map_or(0, ms_ceil),
            timer_at: 0,
            overdue_since: 0,
            stage: Stage::Scheduled,
            attempts: 0,
            immediate: true,
        });
        Verdict::DueNow
    }

    /// A driver pod was seen in a non-terminal state at `at` by events answered on the caller's
    /// thread ([`crate::seen`]): its time last seen running moves up to `at`, as if they had come
    /// here. Only a pod already remembered as running is concerned.
    pub fn saw_running(&mut self, uid: &Uid, at: SystemTime) {
        if let Some(t) = self.running.get_mut(uid) {
            *t = (*t).max(at);
        }
    }

    /// Marks a UID done after a DELETE settled it (accepted, absent, or replaced).
    pub fn settle(&mut self, uid: &Uid, now: Instant) -> Option<Record> {
        self.tombstone(uid.clone(), now);
        self.remove(uid)
    }

    fn remove(&mut self, uid: &Uid) -> Option<Record> {
        let hash = self.hasher.hash_one(uid);
        let records = &self.records;
        let entry = self
            .index
            .find_entry(hash, |&s| {
                records.get(s as usize).is_some_and(|r| r.uid == *uid)
            })
            .ok()?;
        let (slot, _) = entry.remove();
        let rec = self.records.remove(slot as usize);
        self.counts[rec.stage as usize] -= 1;
        if rec.timer_at != 0 {
            self.armed -= 1;
        }
        if rec.overdue_since != 0 {
            self.overdue.remove(&(rec.overdue_since, slot));
        }
        self.compact_timers();
        Some(rec)
    }

    /// Moves a record to `stage`; false if there is no record for `uid`. A record that leaves
    /// `Scheduled` this way is overdue since now; [`Tracker::set_due`] gives its deadline.
    pub fn set_stage(&mut self, uid: &Uid, stage: Stage) -> bool {
        self.move_to(uid, stage, None)
    }

    /// Moves a record to `Due`, overdue since `deadline` (kept while it stays overdue).
    pub fn set_due(&mut self, uid: &Uid, deadline: SystemTime) -> bool {
        self.move_to(uid, Stage::Due, Some(deadline))
    }

    fn move_to(&mut self, uid: &Uid, stage: Stage, deadline: Option<SystemTime>) -> bool {
        let Some(slot) = self.slot(uid) else {
            return false;
        };
        let rec = &mut self.records[slot as usize];
        self.counts[rec.stage as usize] -= 1;
        self.counts[stage as usize] += 1;
        rec.stage = stage;
        if stage == Stage::Scheduled {
            if rec.overdue_since != 0 {
                self.overdue.remove(&(rec.overdue_since, slot));
                rec.overdue_since = 0;
            }
        } else if rec.overdue_since == 0 {
            rec.overdue_since = ms_ceil(deadline.unwrap_or_else(SystemTime::now));
            self.overdue.insert((rec.overdue_since, slot));
        }
        true
    }

    /// The deadline of the record that has been overdue longest (O(log due)).
    pub fn oldest_overdue(&self) -> Option<SystemTime> {
        self.overdue.first().and_then(|(ms, _)| from_ms(*ms))
    }

    /// How many records are overdue (stage other than `Scheduled`).
    pub fn overdue_count(&self) -> usize {
        self.overdue.len()
    }

    fn timer_ms(&self, at: Instant) -> u64 {
        let d = at.saturating_duration_since(self.base);
        let ms = d.as_millis() + u128::from(!d.subsec_nanos().is_multiple_of(1_000_000));
        // 0 means "no timer": the earliest timer is at 1 ms.
        u64::try_from(ms).unwrap_or(u64::MAX).max(1)
    }

    /// Arms (or re-arms) the record's timer for `at` (rounded up to the millisecond); false if
    /// there is no record for `uid`.
    pub fn arm(&mut self, uid: &Uid, at: Instant) -> bool {
        let Some(slot) = self.slot(uid) else {
            return false;
        };
        let ms = self.timer_ms(at);
        let rec = &mut self.records[slot as usize];
        if rec.timer_at == ms {
            return true;
        }
        if rec.timer_at == 0 {
            self.armed += 1;
        }
        rec.timer_at = ms;
        self.timers.push(Reverse((ms, slot)));
        self.compact_timers();
        true
    }

    /// Disarms the record's timer, if it has one.
    pub fn disarm(&mut self, uid: &Uid) {
        if let Some(slot) = self.slot(uid) {
            let rec = &mut self.records[slot as usize];
            if rec.timer_at != 0 {
                rec.timer_at = 0;
                self.armed -= 1;
                self.compact_timers();
            }
        }
    }

    /// Disarms every timer.
    pub fn disarm_all(&mut self) {
        for (_, rec) in self.records.iter_mut() {
            rec.timer_at = 0;
        }
        self.timers.clear();
        self.armed = 0;
    }

    /// How many records have a timer armed.
    pub fn armed(&self) -> usize {
        self.armed
    }

    fn is_live(&self, ms: u64, slot: u32) -> bool {
        self.records
            .get(slot as usize)
            .is_some_and(|r| r.timer_at == ms)
    }

    /// When the earliest armed timer fires, if one is armed.
    pub fn next_timer(&mut self) -> Option<Instant> {
        while let Some(Reverse((ms, slot))) = self.timers.peek().copied() {
            if self.is_live(ms, slot) {
                return Some(self.base + Duration::from_millis(ms));
            }
            self.timers.pop();
        }
        None
    }

    /// The UID of a record whose timer has fired by `now` (earliest first), its timer disarmed.
    pub fn take_expired(&mut self, now: Instant) -> Option<Uid> {
        let now_ms =
            u64::try_from(now.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX);
        while let Some(Reverse((ms, slot))) = self.timers.peek().copied() {
            if !self.is_live(ms, slot) {
                self.timers.pop();
                continue;
            }
            if ms > now_ms {
                return None;
            }
            self.timers.pop();
            let rec = &mut self.records[slot as usize];
            rec.timer_at = 0;
            self.armed -= 1;
            return Some(rec.uid.clone());
        }
        None
    }

    /// Drops stale timer entries once they outnumber the live ones (amortised O(1) per entry).
    fn compact_timers(&mut self) {
        if self.timers.len() > 2 * self.armed + 64 {
            let records = &self.records;
            self.timers.retain(|Reverse((ms, slot))| {
                records
                    .get(*slot as usize)
                    .is_some_and(|r| r.timer_at == *ms)
            });
        }
    }

    /// How many records are in `stage` (O(1)).
    pub fn count(&self, stage: Stage) -> usize {
        self.counts[stage as usize]
    }

    /// UIDs spared by the cleanup kind (their first terminal state is not deleted).
    pub fn spared_count(&self) -> usize {
        self.spared.len()
    }

    /// Driver pods seen in a non-terminal state and not gone yet.
    pub fn running_count(&self) -> usize {
        self.running.len()
    }

    /// Nothing tracked: no record, no spared or running UID, and no tombstone younger than its
    /// TTL.
    pub fn is_idle(&mut self, now: Instant) -> bool {
        self.prune(now);
        self.records.is_empty()
            && self.spared.is_empty()
            && self.running.is_empty()
            && self.tombstones.is_empty()
    }

    /// When the youngest tombstone expires, if there is one.
    pub fn tombstones_expire_at(&self) -> Option<Instant> {
        self.tombstone_order
            .back()
            .map(|(at, _)| *at + self.tombstone_ttl)
    }

    pub fn get(&self, uid: &Uid) -> Option<&Record> {
        self.slot(uid).map(|s| &self.records[s as usize])
    }

    /// Counts a failed DELETE attempt of a record; returns the attempts so far.
    pub fn add_attempt(&mut self, uid: &Uid) -> Option<u32> {
        let slot = self.slot(uid)?;
        let rec = &mut self.records[slot as usize];
        rec.attempts = rec.attempts.saturating_add(1);
        Some(rec.attempts)
    }

    pub fn is_tombstoned(&self, uid: &Uid) -> bool {
        self.tombstones.contains_key(uid)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Uid, &Record)> {
        self.records.iter().map(|(_, r)| (&r.uid, r))
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    pub fn tombstone_count(&self) -> usize {
        self.tombstones.len()
    }

    /// Self-watch mode, the watch stopped: drops every record and every spared or running UID
    /// (nobody keeps them fresh now); tombstones stay. Returns the dropped records.
    pub fn drop_unwatched(&mut self) -> Vec<(Uid, Record)> {
        self.spared.clear();
        self.running.clear();
        self.counts = [0; 4];
        self.index.clear();
        self.timers.clear();
        self.armed = 0;
        self.overdue.clear();
        let records = std::mem::take(&mut self.records);
        records
            .into_iter()
            .map(|(_, mut r)| {
                r.timer_at = 0;
                r.overdue_since = 0;
                (r.uid.clone(), r)
            })
            .collect()
    }

    /// Self-watch mode, a fresh list ended: every tracked UID absent from `listed` belongs to a
    /// pod that is gone, so it is tombstoned and its record (if any) returned.
    pub fn retain_listed(&mut self, listed: &HashSet<Uid>, now: Instant) -> Vec<(Uid, Record)> {
        self.spared.retain(|u| listed.contains(u));
        self.running.retain(|u, _| listed.contains(u));
        let gone: Vec<Uid> = self
            .records
            .iter()
            .filter(|(_, r)| !listed.contains(&r.uid))
            .map(|(_, r)| r.uid.clone())
            .collect();
        gone.into_iter()
            .filter_map(|u| {
                self.tombstone(u.clone(), now);
                self.remove(&u).map(|r| (u, r))
            })
            .collect()
    }

    fn tombstone(&mut self, uid: Uid, now: Instant) {
        if self.tombstones.insert(uid.clone(), now).is_none() {
            self.tombstone_order.push_back((now, uid));
        }
    }

    fn prune(&mut self, now: Instant) {
        while let Some((at, _)) = self.tombstone_order.front() {
            if now.saturating_duration_since(*at) < self.tombstone_ttl {
                break;
            }
            if let Some((_, uid)) = self.tombstone_order.pop_front() {
                self.tombstones.remove(&uid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::EventKind;

    fn obs(kind: EventKind, uid: &str, state: AppState) -> Observation {
        Observation {
            kind,
            tag: "tag-1".into(),
            pod_name: "driver-1".into(),
            pod_uid: uid.into(),
            state,
            has_app_selector: true,
            terminated_at: None,
            deletion_requested: false,
        }
    }

    fn u(s: &str) -> Uid {
        Ident::new(s)
    }

    fn run(t: &mut Tracker, o: &Observation, kind: CleanupKind, now: Instant) -> Verdict {
        let uid = u(&o.pod_uid);
        t.observe(&uid, o, kind, SystemTime::UNIX_EPOCH, now)
    }

    #[test]
    fn only_terminated_driver_pods_are_tracked() {
        let now = Instant::now();
        let mut t = Tracker::new(Duration::from_secs(600));
        assert_eq!(
            run(
                &mut t,
                &obs(EventKind::Add, "u1", AppState::Running),
                CleanupKind::All,
                now
            ),
            Verdict::Ignore
        );
        let mut no_selector = obs(EventKind::Update, "u2", AppState::Finished);
        no_selector.has_app_selector = false;
        assert_eq!(
            run(&mut t, &no_selector, CleanupKind::All, now),
            Verdict::Ignore
        );
        let mut no_tag = obs(EventKind::Update, "u3", AppState::Finished);
        no_tag.tag.clear();
        assert_eq!(run(&mut t, &no_tag, CleanupKind::All, now), Verdict::Ignore);
        assert_eq!(
            run(
                &mut t,
                &obs(EventKind::Update, "u4", AppState::Finished),
                CleanupKind::All,
                now
            ),
            Verdict::Arm
        );
        assert_eq!(
            run(
                &mut t,
                &obs(EventKind::Update, "u4", AppState::Finished),
                CleanupKind::All,
                now
            ),
            Verdict::Ignore
        );
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn kinds_decide_on_the_first_terminal_state() {
        let now = Instant::now();
        let mut t = Tracker::new(Duration::from_secs(600));
        assert_eq!(
            run(
                &mut t,
                &obs(EventKind::Update, "f", AppState::Failed),
                CleanupKind::Completed,
                now
            ),
            Verdict::Ignore
        );
        assert_eq!(
            run(
                &mut t,
                &obs(EventKind::Update, "k", AppState::Killed),
                CleanupKind::Completed,
                now
            ),
            Verdict::Ignore
        );
        assert_eq!(
            run(
                &mut t,
                &obs(EventKind::Update, "ok", AppState::Finished),
                CleanupKind::Completed,
                now
            ),
            Verdict::Arm
        );
        assert_eq!(
            run(
                &mut t,
                &obs(EventKind::Update, "f2", AppState::Failed),
                CleanupKind::All,
                now
            ),
            Verdict::Arm
        );
        // FAILED came first for "f": a later FINISHED of the same UID is not deleted either.
        assert_eq!(
            run(
                &mut t,
                &obs(EventKind::Update, "f", AppState::Finished),
                CleanupKind::Completed,
                now
            ),
            Verdict::Ignore
        );
        assert_eq!(t.spared_count(), 2);
        assert_eq!(
            run(
                &mut t,
                &obs(EventKind::Update, "n", AppState::Finished),
                CleanupKind::None,
                now
            ),
            Verdict::Ignore
        );
    }

    #[test]
    fn delete_event_and_deletion_timestamp_cancel_forever() {
        let now = Instant::now();
        let mut t = Tracker::new(Duration::from_secs(600));
        assert_eq!(
            run(
                &mut t,
                &obs(EventKind::Update, "u", AppState::Finished),
                CleanupKind::All,
                now
            ),
            Verdict::Arm
        );
        let verdict = run(
            &mut t,
            &obs(EventKind::Delete, "u", AppState::Finished),
            CleanupKind::All,
            now,
        );
        assert!(matches!(verdict, Verdict::Cancel(_)));
        // Whatever follows for that UID never arms it again.
        for kind in [EventKind::Add, EventKind::Update] {
            assert_eq!(
                run(
                    &mut t,
                    &obs(kind, "u", AppState::Finished),
                    CleanupKind::All,
                    now
                ),
                Verdict::Ignore
            );
        }
        let mut deleting = obs(EventKind::Update, "v", AppState::Finished);
        deleting.deletion_requested = true;
        assert_eq!(
            run(&mut t, &deleting, CleanupKind::All, now),
            Verdict::Ignore
        );
        assert_eq!(
            run(
                &mut t,
                &obs(EventKind::Update, "v", AppState::Finished),
                CleanupKind::All,
                now
            ),
            Verdict::Ignore
        );
        assert!(t.is_empty());
    }

    #[test]
    fn termination_time_arriving_later_rearms() {
        let now = Instant::now();
        let mut t = Tracker::new(Duration::from_secs(600));
        assert_eq!(
            run(
                &mut t,
                &obs(EventKind::Update, "u", AppState::Failed),
                CleanupKind::All,
                now
            ),
            Verdict::Arm
        );
        let mut timed = obs(EventKind::Update, "u", AppState::Failed);
        timed.terminated_at = Some(SystemTime::UNIX_EPOCH);
        assert_eq!(run(&mut t, &timed, CleanupKind::All, now), Verdict::Rearm);
        assert_eq!(run(&mut t, &timed, CleanupKind::All, now), Verdict::Ignore);
    }

    #[test]
    fn running_again_disarms_without_a_tombstone() {
        let now = Instant::now();
        let mut t = Tracker::new(Duration::from_secs(600));
        let arm = run(
            &mut t,
            &obs(EventKind::Update, "u", AppState::Failed),
            CleanupKind::All,
            now,
        );
        assert_eq!(arm, Verdict::Arm);
        assert_eq!(t.count(Stage::Scheduled), 1);
        let v = run(
            &mut t,
            &obs(EventKind::Update, "u", AppState::Running),
            CleanupKind::All,
            now,
        );
        assert!(matches!(v, Verdict::Disarm(_)), "{v:?}");
        assert_eq!(t.count(Stage::Scheduled), 0);
        assert!(!t.is_tombstoned(&u("u")));
        let again = run(
            &mut t,
            &obs(EventKind::Update, "u", AppState::Finished),
            CleanupKind::All,
            now,
        );
        assert_eq!(again, Verdict::Arm, "a later termination is tracked afresh");
    }

    #[test]
    fn tombstones_expire_after_their_ttl() {
        let now = Instant::now();
        let mut t = Tracker::new(Duration::from_secs(60));
        run(
            &mut t,
            &obs(EventKind::Delete, "u", AppState::Finished),
            CleanupKind::All,
            now,
        );
        assert!(t.is_tombstoned(&u("u")));
        run(
            &mut t,
            &obs(EventKind::Add, "x", AppState::Running),
            CleanupKind::All,
            now + Duration::from_secs(61),
        );
        assert!(!t.is_tombstoned(&u("u")));
        assert_eq!(t.tombstone_count(), 0);
    }

    #[test]
    fn self_watch_drops_and_relists() {
        let now = Instant::now();
        let mut t = Tracker::new(Duration::from_secs(600));
        for (uid, state) in [
            ("a", AppState::Finished),
            ("b", AppState::Finished),
            ("r", AppState::Running),
            ("gone", AppState::Finished),
        ] {
            run(
                &mut t,
                &obs(EventKind::Update, uid, state),
                CleanupKind::All,
                now,
            );
        }
        run(
            &mut t,
            &obs(EventKind::Delete, "gone", AppState::Finished),
            CleanupKind::All,
            now,
        );
        t.set_stage(&u("b"), Stage::Due);
        // A fresh list without "b" and "r": both are gone, "b" tombstoned.
        let listed: HashSet<Uid> = [u("a")].into_iter().collect();
        let gone = t.retain_listed(&listed, now);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].0, u("b"));
        assert!(t.is_tombstoned(&u("b")) && t.running_count() == 0);
        assert_eq!(
            (t.len(), t.count(Stage::Due), t.count(Stage::Scheduled)),
            (1, 0, 1)
        );
        // The watch stops: every record goes, tombstones stay.
        let dropped = t.drop_unwatched();
        assert_eq!(dropped.len(), 1);
        assert!(t.is_empty() && t.count(Stage::Scheduled) == 0);
        assert!(t.is_tombstoned(&u("gone")) && t.is_tombstoned(&u("b")));
        // A later list arms "a" again, never "b".
        let again = |t: &mut Tracker, uid| {
            run(
                t,
                &obs(EventKind::Add, uid, AppState::Finished),
                CleanupKind::All,
                now,
            )
        };
        assert_eq!(again(&mut t, "a"), Verdict::Arm);
        assert_eq!(again(&mut t, "b"), Verdict::Ignore);
    }

    fn finished(uid: &str, tag: &str, name: &str) -> Observation {
        let mut o = obs(EventKind::Update, uid, AppState::Finished);
        o.tag = tag.into();
        o.pod_name = name.into();
        o
    }

    #[test]
    fn records_keep_their_names_tags_and_times_exactly() {
        let now = Instant::now();
        let mut t = Tracker::new(Duration::from_secs(600));
        let tag = "0f8fad5b-d9cb-469f-a165-70867728950e";
        let cases = [
            (
                "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
                tag,
                format!("kyuubi-spark-{tag}-driver"),
            ),
            ("uid-2", tag, format!("{tag}-driver")),
            ("uid-3", "not-a-uuid", "plain-name".to_owned()),
            ("uid-4", "t", "t".to_owned()),
        ];
        let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
        for (uid, tag, name) in &cases {
            let mut o = finished(uid, tag, name);
            o.terminated_at = Some(at);
            assert_eq!(
                t.observe(&u(uid), &o, CleanupKind::All, at, now),
                Verdict::Arm
            );
        }
        for (uid, tag, name) in &cases {
            let r = t.get(&u(uid)).expect("tracked");
            assert_eq!(&r.name(), name);
            assert_eq!(&r.tag.to_string(), tag);
            assert_eq!(r.uid.to_string(), *uid);
            // Rounded up to the millisecond, never earlier.
            let ms = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_124);
            assert_eq!(r.terminated_at(), Some(ms));
            assert_eq!(r.first_seen(), ms);
            assert_eq!(r.seen_running(), None);
        }
        // Pods whose names have the same shape around their tag share it.
        let other = "1c4e28ba-2fa1-11d2-883f-0016d3cca427";
        t.observe(
            &u("uid-5"),
            &finished("uid-5", other, &format!("kyuubi-spark-{other}-driver")),
            CleanupKind::All,
            at,
            now,
        );
        assert_eq!(t.shapes.len(), 3);
    }

    #[test]
    fn timers_fire_in_deadline_order_and_rearming_replaces() {
        let now = Instant::now();
        let mut t = Tracker::new(Duration::from_secs(600));
        let wall = SystemTime::now();
        for i in 0..200u64 {
            let uid = format!("p{i}");
            t.observe(
                &u(&uid),
                &obs(EventKind::Update, &uid, AppState::Finished),
                CleanupKind::All,
                wall,
                now,
            );
            // Deadlines in a scrambled order: (i * 7919) mod 200 seconds.
            assert!(t.arm(&u(&uid), now + Duration::from_secs((i * 7919) % 200 + 1)));
        }
        assert_eq!(t.armed(), 200);
        // Re-arming moves a timer; a disarmed or removed record's timer never fires.
        t.arm(&u("p0"), now + Duration::from_millis(500));
        t.disarm(&u("p1"));
        run(
            &mut t,
            &obs(EventKind::Delete, "p2", AppState::Finished),
            CleanupKind::All,
            now,
        );
        assert_eq!(t.armed(), 198);
        // Rounded up to the millisecond on the tracker's clock: never earlier, less than 1 ms later.
        let first = t.next_timer().expect("armed");
        let want = now + Duration::from_millis(500);
        assert!(
            first >= want && first < want + Duration::from_millis(1),
            "{first:?}"
        );
        assert_eq!(t.take_expired(now), None);
        assert_eq!(t.take_expired(want - Duration::from_millis(1)), None);
        let mut fired = Vec::new();
        let mut last = now;
        while let Some(at) = t.next_timer() {
            assert!(at >= last, "timers fire in deadline order");
            last = at;
            let uid = t.take_expired(at).expect("due at its time");
            assert!(t.get(&uid).is_some());
            fired.push(uid.to_string());
        }
        assert_eq!(fired.len(), 198);
        assert_eq!(fired[0], "p0");
        assert!(!fired.contains(&"p1".to_owned()) && !fired.contains(&"p2".to_owned()));
        assert_eq!(t.armed(), 0);
        // Stale entries do not pile up.
        for i in 0..1000 {
            t.arm(&u("p3"), now + Duration::from_secs(5 + i % 3));
        }
        assert!(t.timers.len() <= 2 * t.armed() + 65, "{}", t.timers.len());
    }

    #[test]
    fn the_oldest_overdue_comes_from_the_overdue_set() {
        let now = Instant::now();
        let mut t = Tracker::new(Duration::from_secs(600));
        let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        for i in 0..10_000u64 {
            let uid = format!("p{i}");
            t.observe(
                &u(&uid),
                &obs(EventKind::Update, &uid, AppState::Finished),
                CleanupKind::All,
                wall,
                now,
            );
        }
        assert_eq!(t.oldest_overdue(), None);
        // 50 of the 10,000 become due, with deadlines in a scrambled order.
        for i in 0..50u64 {
            let deadline = wall + Duration::from_secs((i * 37) % 50);
            assert!(t.set_due(&u(&format!("p{}", i * 100)), deadline));
        }
        assert_eq!((t.overdue_count(), t.count(Stage::Due)), (50, 50));
        assert_eq!(t.oldest_overdue(), Some(wall));
        // Stage changes among the overdue stages keep a record's deadline.
        t.set_stage(&u("p0"), Stage::Deleting);
        t.set_stage(&u("p0"), Stage::Backoff);
        assert_eq!(t.oldest_overdue(), Some(wall));
        // The oldest settled: the next oldest is found.
        t.settle(&u("p0"), now);
        let next = (1..50u64).map(|i| (i * 37) % 50).min().unwrap_or_default();
        assert_eq!(t.oldest_overdue(), Some(wall + Duration::from_secs(next)));
        // Back to Scheduled (a restarted task re-arms everything): not overdue.
        for i in 1..50u64 {
            t.set_stage(&u(&format!("p{}", i * 100)), Stage::Scheduled);
        }
        assert_eq!((t.oldest_overdue(), t.overdue_count()), (None, 0));
        assert_eq!(t.count(Stage::Scheduled), 9_999);
    }
}
