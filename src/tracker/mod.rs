//! Per-scope records of terminated Kyuubi Spark driver pods, the UIDs already cleaned, the
//! records' timers and the set of overdue records.
//!
//! Pure state: no I/O, no runtime. The sweeper asks [`Tracker::observe`] what an event means,
//! arms timers here ([`Tracker::arm`]) and takes the expired ones ([`Tracker::take_expired`]).
//!
//! This module holds the records and the per-pod state machine (what an observation, a due-now
//! request, a settled DELETE or a fresh list means for a UID); `timers` holds the queues (the
//! timers and the overdue set, and the stage moves that keep them).
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
//!   its termination is never dated earlier (see [`crate::schedule::anchor`]). A watch that
//!   carries only terminated pods tells of a pod's entry instead ([`Tracker::entered`]): it counts
//!   as seen running then.
//! * Times are kept in whole milliseconds, rounded up: a deadline computed from a record is never
//!   earlier than one computed from the exact times. A record keeps 48 bits of them (up to the
//!   year 10889); a later time counts as that latest one, never as an earlier time (and a pod's
//!   own time past it is bounded by now in [`crate::schedule::anchor`] anyway).
//! * A record has at most one armed timer; arming it again replaces the earlier one, and a record
//!   that is removed loses its timer. Timers fire in deadline order.
//! * The oldest overdue record (stage other than `Scheduled`) is found from the overdue set alone
//!   ([`Tracker::oldest_overdue`], O(log due)), never from a scan of every record.
//!
//! # Memory
//! One tracked pod costs one slab entry, the [`Record`] (80 bytes: UID and tag 16 bytes each,
//! inline when they are UUIDs; the pod name one pointer, shared with the pods whose names have the
//! same shape around their tag; its five times 6 bytes each; its stage and marks one byte), a
//! 4-byte index in the UID table and one 8-byte timer entry; the engine adds 24 bytes for the pod
//! in the scope's table of what its task was told ([`crate::seen`]). `cargo bench --bench memory
//! -- memory` measures the whole, with the tables' spare room (`benches/memory.rs`; the figures
//! are in `docs/performance.md`). A leader with the scope watch keeps one more set entry per pod
//! only that watch told it of (`sources`).

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

mod sources;
mod timers;

/// The most records a tracker holds (a timer entry packs a record's slot into 24 bits): far more
/// terminated pods than one namespace can hold in practice (the API server's own PodGC starts at
/// 12,500 cluster-wide). A terminated pod past it is not tracked.
pub const MAX_TRACKED: usize = 1 << 24;

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

/// The latest millisecond a record keeps (48 bits: the year 10889 of the wall clock).
const MS_MAX: u64 = (1 << 48) - 1;

/// Wall-clock milliseconds since the epoch, rounded up (0 stands for "none"; a time past
/// [`MS_MAX`] counts as that).
fn ms_ceil(t: SystemTime) -> u64 {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let ms = d.as_millis() + u128::from(!d.subsec_nanos().is_multiple_of(1_000_000));
    u64::try_from(ms).unwrap_or(u64::MAX).clamp(1, MS_MAX)
}

/// A millisecond time of a record in 6 bytes (up to [`MS_MAX`]; 0 stands for "none"), so that
/// the record's five times take 30 bytes instead of 40.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Ms([u16; 3]);

impl Ms {
    const NONE: Ms = Ms([0; 3]);

    /// `ms` as it is: every caller passes [`ms_ceil`]'s or the timer clock's milliseconds, which
    /// are at most [`MS_MAX`] (a larger one would count as that, never as an earlier time).
    fn new(ms: u64) -> Self {
        let ms = ms.min(MS_MAX);
        Ms([ms as u16, (ms >> 16) as u16, (ms >> 32) as u16])
    }

    fn get(self) -> u64 {
        u64::from(self.0[0]) | (u64::from(self.0[1]) << 16) | (u64::from(self.0[2]) << 32)
    }

    fn is_none(self) -> bool {
        self == Ms::NONE
    }
}

impl std::fmt::Debug for Ms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.get())
    }
}

fn from_ms(ms: u64) -> Option<SystemTime> {
    (ms != 0).then(|| SystemTime::UNIX_EPOCH + Duration::from_millis(ms))
}

/// The parts of a pod name around its Kyuubi tag (Kyuubi names driver pods after the tag), shared
/// by every pod whose name has the same parts; or, for a name without the tag, the name itself
/// (`around_tag` false, not shared). One pointer per record either way.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct NameShape {
    before: Box<str>,
    after: Box<str>,
    around_tag: bool,
}

/// A pod name.
type PodName = Arc<NameShape>;

/// A terminated driver pod podsweep will delete when due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub uid: Uid,
    pub tag: Ident,
    name: PodName,
    /// Wall ms (rounded up); none: 0.
    terminated_at: Ms,
    first_seen: Ms,
    seen_running: Ms,
    /// The armed timer, in ms on the tracker's timer clock; none: not armed.
    timer_at: Ms,
    /// Wall ms of the deadline while the record is overdue (in the overdue set); none: not
    /// overdue.
    overdue_since: Ms,
    /// Failed DELETE attempts so far.
    pub attempts: u32,
    /// The pod's own retain period from its annotations, in whole seconds rounded up
    /// ([`POLICY_NONE`]: the operator's; [`POLICY_KEEP`]: kept until the cap).
    policy: u32,
    pub state: AppState,
    /// The stage ([`STAGE_BITS`]), [`IMMEDIATE`] and [`CAPPED`], in one byte: see
    /// [`Record::stage`], [`Record::immediate`] and [`Record::capped`].
    flags: u8,
}

/// The bits of [`Record::flags`] that hold the stage (`Stage as u8`).
const STAGE_BITS: u8 = 0b11;
/// [`Record::immediate`].
const IMMEDIATE: u8 = 1 << 2;
/// [`Record::capped`].
const CAPPED: u8 = 1 << 3;

impl Stage {
    fn from_bits(flags: u8) -> Stage {
        match flags & STAGE_BITS {
            0 => Stage::Scheduled,
            1 => Stage::Due,
            2 => Stage::Deleting,
            _ => Stage::Backoff,
        }
    }
}

impl Record {
    /// Where the pod is in its life. Changed only through [`Tracker::set_stage`] /
    /// [`Tracker::set_due`], which keep the per-stage counts and the overdue set.
    pub fn stage(&self) -> Stage {
        Stage::from_bits(self.flags)
    }

    fn set_stage_bits(&mut self, stage: Stage) {
        self.flags = (self.flags & !STAGE_BITS) | stage as u8;
    }

    /// Kyuubi asked for the pod to be deleted at once ([`Tracker::due_now`]: the pod of a
    /// CANCELED batch, an orphan pod): due from the moment podsweep was told, whatever its state
    /// and the cleanup kind, and never disarmed by a later running state.
    pub fn immediate(&self) -> bool {
        self.flags & IMMEDIATE != 0
    }

    /// Made due by the scope's cap, before its retain period ended.
    pub fn capped(&self) -> bool {
        self.flags & CAPPED != 0
    }

    /// Since when the record is overdue (its deadline, or when the cap made it due), if it is.
    pub fn overdue_since(&self) -> Option<SystemTime> {
        from_ms(self.overdue_since.get())
    }

    /// The pod's name.
    pub fn name(&self) -> String {
        let s = &self.name;
        if s.around_tag {
            format!("{}{}{}", s.before, self.tag, s.after)
        } else {
            s.before.to_string()
        }
    }

    /// When the pod terminated, as the pod says.
    pub fn terminated_at(&self) -> Option<SystemTime> {
        from_ms(self.terminated_at.get())
    }

    /// When podsweep first saw the pod terminated.
    pub fn first_seen(&self) -> SystemTime {
        from_ms(self.first_seen.get()).unwrap_or(SystemTime::UNIX_EPOCH)
    }

    /// The last time the pod was seen in a non-terminal state, if it was.
    pub fn seen_running(&self) -> Option<SystemTime> {
        from_ms(self.seen_running.get())
    }

    /// What the pod's annotations ask for ([`Policy`]).
    pub fn policy(&self) -> Policy {
        match self.policy {
            POLICY_NONE => Policy::Default,
            POLICY_KEEP => Policy::Keep,
            s => Policy::Retain(Duration::from_secs(u64::from(s))),
        }
    }

    /// The time the cap orders pods by: when the pod terminated, else when it was first seen so.
    fn age_key(&self) -> u64 {
        if self.terminated_at.is_none() {
            self.first_seen.get()
        } else {
            self.terminated_at.get()
        }
    }
}

const POLICY_NONE: u32 = 0;
const POLICY_KEEP: u32 = u32::MAX;

/// What a pod's annotations ask for, once checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// The operator's retain period.
    Default,
    /// Its own retain period (bounded by the operator's settings where it is used).
    Retain(Duration),
    /// Not deleted by retain period; the cap still applies.
    Keep,
}

impl Policy {
    fn word(self) -> u32 {
        match self {
            Policy::Default => POLICY_NONE,
            Policy::Keep => POLICY_KEEP,
            Policy::Retain(d) => {
                let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
                u32::try_from(s)
                    .unwrap_or(POLICY_KEEP - 1)
                    .clamp(1, POLICY_KEEP - 1)
            }
        }
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
    timers: BinaryHeap<Reverse<u64>>,
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
    /// UIDs held (record, running, spared) only from the scope watch (`sources`).
    watch_only: HashSet<Uid>,
    /// Records per stage, indexed by `Stage as usize`.
    counts: [usize; 4],
    tombstones: HashMap<Uid, Instant>,
    tombstone_order: VecDeque<(Instant, Uid)>,
    tombstone_ttl: Duration,
    /// With a cap ([`Tracker::enable_cap`]): the `Scheduled` records by age, oldest first:
    /// (age key wall ms, slot).
    by_age: Option<BTreeSet<(u64, u32)>>,
    /// Stale entries of `by_age` dropped by [`Tracker::over_cap`].
    cap_drift: u64,
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
            watch_only: HashSet::new(),
            counts: [0; 4],
            tombstones: HashMap::new(),
            tombstone_order: VecDeque::new(),
            tombstone_ttl,
            by_age: None,
            cap_drift: 0,
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
        let age = rec.age_key();
        let slot = self.records.insert(rec) as u32;
        if let Some(by_age) = &mut self.by_age {
            by_age.insert((age, slot));
        }
        let (records, hasher) = (&self.records, &self.hasher);
        self.index.insert_unique(hash, slot, |&s| {
            records
                .get(s as usize)
                .map_or(0, |r| hasher.hash_one(&r.uid))
        });
    }

    fn shape(&mut self, tag: &str, name: &str) -> PodName {
        let Some(at) = (!tag.is_empty()).then(|| name.find(tag)).flatten() else {
            return Arc::new(NameShape {
                before: name.into(),
                after: "".into(),
                around_tag: false,
            });
        };
        let probe = NameShape {
            before: name[..at].into(),
            after: name[at + tag.len()..].into(),
            around_tag: true,
        };
        if let Some(s) = self.shapes.get(&probe) {
            return s.clone();
        }
        if self.shapes.len() >= 2 * self.shapes_kept + 64 {
            // Drop the shapes no record uses any more (amortised O(1) per shape).
            self.shapes.retain(|s| Arc::strong_count(s) > 1);
            self.shapes_kept = self.shapes.len();
        }
        let s = Arc::new(probe);
        self.shapes.insert(s.clone());
        s
    }

    /// A new record for `uid`, `Scheduled`, from what `obs` says of the pod.
    fn add(
        &mut self,
        uid: &Uid,
        obs: &Observation,
        now_wall: SystemTime,
        seen_running: Option<SystemTime>,
        immediate: bool,
    ) {
        self.counts[Stage::Scheduled as usize] += 1;
        let name = self.shape(&obs.tag, &obs.pod_name);
        self.insert(Record {
            uid: uid.clone(),
            tag: Ident::new(&obs.tag),
            name,
            state: obs.state,
            terminated_at: Ms::new(obs.terminated_at.map_or(0, ms_ceil)),
            first_seen: Ms::new(ms_ceil(now_wall)),
            seen_running: Ms::new(seen_running.map_or(0, ms_ceil)),
            timer_at: Ms::NONE,
            overdue_since: Ms::NONE,
            attempts: 0,
            policy: POLICY_NONE,
            flags: Stage::Scheduled as u8 | if immediate { IMMEDIATE } else { 0 },
        });
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
                .is_some_and(|s| self.records[s as usize].immediate())
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
            if rec.terminated_at.is_none() {
                if let Some(t) = obs.terminated_at {
                    let before = rec.age_key();
                    rec.terminated_at = Ms::new(ms_ceil(t));
                    let after = rec.age_key();
                    let scheduled = rec.stage() == Stage::Scheduled;
                    if let (Some(by_age), true) = (&mut self.by_age, scheduled) {
                        by_age.remove(&(before, slot));
                        by_age.insert((after, slot));
                    }
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
        if self.records.len() >= MAX_TRACKED {
            return Verdict::Ignore;
        }
        self.add(uid, obs, now_wall, seen_running, false);
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
            return self.observe_from(uid, obs, CleanupKind::None, now_wall, now, false);
        }
        self.prune(now);
        if self.tombstones.contains_key(uid) {
            return Verdict::Ignore;
        }
        self.informer_knows(uid);
        self.spared.remove(uid);
        let seen_running = self.running.remove(uid);
        if let Some(slot) = self.slot(uid) {
            self.records[slot as usize].flags |= IMMEDIATE;
            return Verdict::DueNow;
        }
        if self.records.len() >= MAX_TRACKED {
            return Verdict::Ignore;
        }
        self.add(uid, obs, now_wall, seen_running, true);
        Verdict::DueNow
    }

    /// Marks a tracked record as one Kyuubi asked to delete at once (another server's Kyuubi,
    /// through the store); true when it was not marked so before.
    pub fn mark_immediate(&mut self, uid: &Uid) -> bool {
        let Some(slot) = self.slot(uid) else {
            return false;
        };
        let rec = &mut self.records[slot as usize];
        let before = rec.flags & IMMEDIATE != 0;
        rec.flags |= IMMEDIATE;
        !before
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
        self.informer_knows(uid);
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
        self.counts[rec.stage() as usize] -= 1;
        if !rec.timer_at.is_none() {
            self.armed -= 1;
        }
        if !rec.overdue_since.is_none() {
            self.overdue.remove(&(rec.overdue_since.get(), slot));
        }
        if let (Some(by_age), Stage::Scheduled) = (&mut self.by_age, rec.stage()) {
            by_age.remove(&(rec.age_key(), slot));
        }
        self.compact_timers();
        Some(rec)
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
        self.watch_only.clear();
        self.counts = [0; 4];
        self.index.clear();
        self.timers.clear();
        self.armed = 0;
        self.overdue.clear();
        if let Some(by_age) = &mut self.by_age {
            by_age.clear();
        }
        let records = std::mem::take(&mut self.records);
        records
            .into_iter()
            .map(|(_, mut r)| {
                r.timer_at = Ms::NONE;
                r.overdue_since = Ms::NONE;
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
mod tests;
