//! Per-scope records of terminated Kyuubi Spark driver pods, and the UIDs already cleaned.
//!
//! Pure state: no timers, no I/O. The sweeper asks [`Tracker::observe`] what an event means and
//! arms or cancels timers accordingly.
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

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::config::CleanupKind;
use crate::model::{AppState, Observation};

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

/// A terminated driver pod podsweep will delete when due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    pub tag: String,
    pub name: String,
    pub state: AppState,
    pub terminated_at: Option<SystemTime>,
    pub first_seen: SystemTime,
    /// The last time the pod was seen in a non-terminal state, if it was.
    pub seen_running: Option<SystemTime>,
    /// Changed only through [`Tracker::set_stage`], which keeps the per-stage counts.
    pub stage: Stage,
    /// Failed DELETE attempts so far.
    pub attempts: u32,
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
}

pub struct Tracker {
    records: HashMap<Arc<str>, Record>,
    /// UIDs whose first terminal state the cleanup kind rejected.
    spared: HashSet<Arc<str>>,
    /// Driver pods seen in a non-terminal state, and when last.
    running: HashMap<Arc<str>, SystemTime>,
    /// Records per stage, indexed by `Stage as usize`.
    counts: [usize; 4],
    tombstones: HashMap<Arc<str>, Instant>,
    tombstone_order: VecDeque<(Instant, Arc<str>)>,
    tombstone_ttl: Duration,
}

impl Tracker {
    pub fn new(tombstone_ttl: Duration) -> Self {
        Tracker {
            records: HashMap::new(),
            spared: HashSet::new(),
            running: HashMap::new(),
            counts: [0; 4],
            tombstones: HashMap::new(),
            tombstone_order: VecDeque::new(),
            tombstone_ttl,
        }
    }

    /// Applies one observation. `uid` must be `obs.pod_uid` as an `Arc<str>`.
    pub fn observe(
        &mut self,
        uid: &Arc<str>,
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
        if let Some(rec) = self.records.get_mut(uid) {
            if rec.terminated_at.is_none() && obs.terminated_at.is_some() {
                rec.terminated_at = obs.terminated_at;
                return Verdict::Rearm;
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
        self.records.insert(
            uid.clone(),
            Record {
                tag: obs.tag.clone(),
                name: obs.pod_name.clone(),
                state: obs.state,
                terminated_at: obs.terminated_at,
                first_seen: now_wall,
                seen_running,
                stage: Stage::Scheduled,
                attempts: 0,
            },
        );
        Verdict::Arm
    }

    /// Marks a UID done after a DELETE settled it (accepted, absent, or replaced).
    pub fn settle(&mut self, uid: &Arc<str>, now: Instant) -> Option<Record> {
        self.tombstone(uid.clone(), now);
        self.remove(uid)
    }

    fn remove(&mut self, uid: &str) -> Option<Record> {
        let rec = self.records.remove(uid)?;
        self.counts[rec.stage as usize] -= 1;
        Some(rec)
    }

    /// Moves a record to `stage`; false if there is no record for `uid`.
    pub fn set_stage(&mut self, uid: &str, stage: Stage) -> bool {
        let Some(rec) = self.records.get_mut(uid) else {
            return false;
        };
        self.counts[rec.stage as usize] -= 1;
        self.counts[stage as usize] += 1;
        rec.stage = stage;
        true
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

    pub fn get(&self, uid: &str) -> Option<&Record> {
        self.records.get(uid)
    }

    /// Mutable access to a record; its stage must be changed through [`Tracker::set_stage`].
    pub fn get_mut(&mut self, uid: &str) -> Option<&mut Record> {
        self.records.get_mut(uid)
    }

    pub fn is_tombstoned(&self, uid: &str) -> bool {
        self.tombstones.contains_key(uid)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &Record)> {
        self.records.iter()
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

    /// UIDs of all records in a stage.
    pub fn uids_in(&self, stage: Stage) -> Vec<Arc<str>> {
        self.records
            .iter()
            .filter(|(_, r)| r.stage == stage)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Self-watch mode, the watch stopped: drops every record and every spared or running UID
    /// (nobody keeps them fresh now); tombstones stay. Returns the dropped records.
    pub fn drop_unwatched(&mut self) -> Vec<(Arc<str>, Record)> {
        self.spared.clear();
        self.running.clear();
        self.counts = [0; 4];
        self.records.drain().collect()
    }

    /// Self-watch mode, a fresh list ended: every tracked UID absent from `listed` belongs to a
    /// pod that is gone, so it is tombstoned and its record (if any) returned.
    pub fn retain_listed(
        &mut self,
        listed: &HashSet<Arc<str>>,
        now: Instant,
    ) -> Vec<(Arc<str>, Record)> {
        self.spared.retain(|u| listed.contains(u));
        self.running.retain(|u, _| listed.contains(u));
        let gone: Vec<Arc<str>> = self
            .records
            .keys()
            .filter(|u| !listed.contains(*u))
            .cloned()
            .collect();
        gone.into_iter()
            .filter_map(|u| {
                self.tombstone(u.clone(), now);
                self.remove(&u).map(|r| (u, r))
            })
            .collect()
    }

    fn tombstone(&mut self, uid: Arc<str>, now: Instant) {
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

    fn run(t: &mut Tracker, o: &Observation, kind: CleanupKind, now: Instant) -> Verdict {
        let uid: Arc<str> = Arc::from(o.pod_uid.as_str());
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
        assert!(!t.is_tombstoned("u"));
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
        assert!(t.is_tombstoned("u"));
        run(
            &mut t,
            &obs(EventKind::Add, "x", AppState::Running),
            CleanupKind::All,
            now + Duration::from_secs(61),
        );
        assert!(!t.is_tombstoned("u"));
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
        t.set_stage("b", Stage::Due);
        // A fresh list without "b" and "r": both are gone, "b" tombstoned.
        let listed: HashSet<Arc<str>> = [Arc::from("a")].into_iter().collect();
        let gone = t.retain_listed(&listed, now);
        assert_eq!(gone.len(), 1);
        assert_eq!(&*gone[0].0, "b");
        assert!(t.is_tombstoned("b") && t.running_count() == 0);
        assert_eq!(
            (t.len(), t.count(Stage::Due), t.count(Stage::Scheduled)),
            (1, 0, 1)
        );
        // The watch stops: every record goes, tombstones stay.
        let dropped = t.drop_unwatched();
        assert_eq!(dropped.len(), 1);
        assert!(t.is_empty() && t.count(Stage::Scheduled) == 0);
        assert!(t.is_tombstoned("gone") && t.is_tombstoned("b"));
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
}
