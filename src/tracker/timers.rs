//! The tracker's queues: the records' timers (a heap of deadlines on the tracker's own millisecond
//! clock, stale entries skipped and compacted) and the overdue set (records past their deadline,
//! ordered by it), with the stage moves that keep the set and the per-stage counts.
//!
//! What an event means for a pod (the per-pod state machine) is in the parent module.

use std::cmp::Reverse;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::{from_ms, ms_ceil, Ms, Stage, Tracker, Uid, CAPPED};

/// A timer entry in one word: the timer's millisecond (40 bits: 34 years of the timer clock) above
/// the record's slot (24 bits, [`super::MAX_TRACKED`]); ordered by time first.
fn pack(ms: u64, slot: u32) -> u64 {
    (ms.min((1 << 40) - 1) << 24) | u64::from(slot & 0x00ff_ffff)
}

fn unpack(key: u64) -> (u64, u32) {
    (key >> 24, (key & 0x00ff_ffff) as u32)
}

impl Tracker {
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
        self.counts[rec.stage() as usize] -= 1;
        self.counts[stage as usize] += 1;
        if let Some(by_age) = &mut self.by_age {
            // The cap counts the pods that wait for their retain period.
            match (rec.stage() == Stage::Scheduled, stage == Stage::Scheduled) {
                (true, false) => {
                    by_age.remove(&(rec.age_key(), slot));
                }
                (false, true) => {
                    by_age.insert((rec.age_key(), slot));
                }
                _ => {}
            }
        }
        rec.set_stage_bits(stage);
        if stage == Stage::Scheduled {
            // Waiting for its retain period again: whatever made it due before (the cap) no
            // longer does; the cap marks it again if it still holds.
            rec.flags &= !CAPPED;
            if !rec.overdue_since.is_none() {
                self.overdue.remove(&(rec.overdue_since.get(), slot));
                rec.overdue_since = Ms::NONE;
            }
        } else if rec.overdue_since.is_none() {
            let since = ms_ceil(deadline.unwrap_or_else(SystemTime::now));
            rec.overdue_since = Ms::new(since);
            self.overdue.insert((since, slot));
        }
        true
    }

    /// Keeps the `Scheduled` records in age order from now on, so [`Tracker::over_cap`] finds the
    /// oldest in O(log n). Costs one ordered-set entry per waiting pod: only scopes with a cap.
    pub fn enable_cap(&mut self) {
        if self.by_age.is_some() {
            return;
        }
        let set = self
            .records
            .iter()
            .filter(|(_, r)| r.stage() == Stage::Scheduled)
            .map(|(slot, r)| (r.age_key(), slot as u32))
            .collect();
        self.by_age = Some(set);
    }

    /// The oldest pod waiting for its retain period while more than `cap` do (needs
    /// [`Tracker::enable_cap`]); moving it out of `Scheduled` takes it off the count. An entry of
    /// the age index that no longer stands for a waiting record (bookkeeping drift: its record
    /// gone, its slot reused, its stage or age changed) is never named: it is dropped and
    /// counted ([`Tracker::cap_drift`]), so each call ends within the index's size.
    pub fn over_cap(&mut self, cap: usize) -> Option<Uid> {
        loop {
            let by_age = self.by_age.as_mut()?;
            if by_age.len() <= cap {
                return None;
            }
            let (age, slot) = *by_age.first()?;
            match self.records.get(slot as usize) {
                Some(r) if r.stage() == Stage::Scheduled && r.age_key() == age => {
                    return Some(r.uid.clone())
                }
                _ => {
                    by_age.remove(&(age, slot));
                    self.cap_drift += 1;
                }
            }
        }
    }

    /// Stale entries [`Tracker::over_cap`] found in the age index and dropped, ever.
    pub fn cap_drift(&self) -> u64 {
        self.cap_drift
    }

    /// Notes that the cap made a record due.
    pub fn mark_capped(&mut self, uid: &Uid) {
        if let Some(slot) = self.slot(uid) {
            self.records[slot as usize].flags |= CAPPED;
        }
    }

    /// Sets what a record's annotations ask for; true when it changed.
    pub fn set_policy(&mut self, uid: &Uid, policy: super::Policy) -> bool {
        let Some(slot) = self.slot(uid) else {
            return false;
        };
        let rec = &mut self.records[slot as usize];
        let word = policy.word();
        if rec.policy == word {
            return false;
        }
        rec.policy = word;
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
        // 0 means "no timer": the earliest timer is at 1 ms; the latest fits a packed entry
        // (34 years of the timer clock: a later one fires then, never earlier).
        u64::try_from(ms)
            .unwrap_or(u64::MAX)
            .clamp(1, (1 << 40) - 1)
    }

    /// Arms (or re-arms) the record's timer for `at` (rounded up to the millisecond); false if
    /// there is no record for `uid`.
    pub fn arm(&mut self, uid: &Uid, at: Instant) -> bool {
        let Some(slot) = self.slot(uid) else {
            return false;
        };
        let ms = self.timer_ms(at);
        let rec = &mut self.records[slot as usize];
        if rec.timer_at.get() == ms {
            return true;
        }
        if rec.timer_at.is_none() {
            self.armed += 1;
        }
        rec.timer_at = Ms::new(ms);
        self.timers.push(Reverse(pack(ms, slot)));
        self.compact_timers();
        true
    }

    /// Disarms the record's timer, if it has one.
    pub fn disarm(&mut self, uid: &Uid) {
        if let Some(slot) = self.slot(uid) {
            let rec = &mut self.records[slot as usize];
            if !rec.timer_at.is_none() {
                rec.timer_at = Ms::NONE;
                self.armed -= 1;
                self.compact_timers();
            }
        }
    }

    /// Disarms every timer.
    pub fn disarm_all(&mut self) {
        for (_, rec) in self.records.iter_mut() {
            rec.timer_at = Ms::NONE;
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
            .is_some_and(|r| r.timer_at.get() == ms)
    }

    /// When the earliest armed timer fires, if one is armed.
    pub fn next_timer(&mut self) -> Option<Instant> {
        while let Some(Reverse(key)) = self.timers.peek().copied() {
            let (ms, slot) = unpack(key);
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
        while let Some(Reverse(key)) = self.timers.peek().copied() {
            let (ms, slot) = unpack(key);
            if !self.is_live(ms, slot) {
                self.timers.pop();
                continue;
            }
            if ms > now_ms {
                return None;
            }
            self.timers.pop();
            let rec = &mut self.records[slot as usize];
            rec.timer_at = Ms::NONE;
            self.armed -= 1;
            return Some(rec.uid.clone());
        }
        None
    }

    /// Drops stale timer entries once they outnumber the live ones (amortised O(1) per entry).
    pub(super) fn compact_timers(&mut self) {
        if self.timers.len() > 2 * self.armed + 64 {
            let records = &self.records;
            self.timers.retain(|Reverse(key)| {
                let (ms, slot) = unpack(*key);
                records
                    .get(slot as usize)
                    .is_some_and(|r| r.timer_at.get() == ms)
            });
        }
    }
}
