//! A scope task's inbox: its queue of commands, in which a pod's events wait coalesced.
//!
//! # Guarantees
//! * Memory is bounded by distinct pods, not by events: while events of a pod wait for the task,
//!   they are merged into one entry (one token in the queue), so a task that does not take
//!   commands (the wait before a failed task runs again, a batch of work) holds at most one
//!   entry per pod (per list of the pod watch, see below) however many events arrive.
//! * The merge keeps what the task would have concluded from every event, in order: the last
//!   event; before a terminal state, the last running state that preceded it (so the record is
//!   armed no earlier than it would have been); of two terminal states the first, as Kyuubi
//!   judges a pod by the first terminal state it saw (with a termination time only a later
//!   event had, and the later event's annotations); the latest time the pod was last seen running (answered on the caller's
//!   thread, [`crate::seen`]); and a DELETE event or deletion timestamp is final (nothing
//!   after it is kept).
//! * Events of one pod reach the task in order; events of different pods keep the order of each
//!   pod's first waiting event. A fresh list of the pod watch ([`Command::Listed`]) and the end of
//!   a watch ([`Command::Unwatched`], [`Command::ScopeUnwatched`]) are barriers: an event sent
//!   after one never merges into an entry queued before it.
//! * An entry remembers whether any of its events came from this server's informer: one that
//!   only the scope watch sent ([`Command::Watched`]) is marked so for the tracker
//!   (`crate::tracker`'s watch-only UIDs).
//! * The depth (entries and other commands waiting) is reported: `queued` and `queued_max` in
//!   the scope's status, `podsweep_queued_commands` in the daemon's metrics, `queued` in
//!   Kyuubi's MetricsSystem.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::mpsc;

use super::Command;
use crate::metrics::ScopeMetrics;
use crate::model::Observation;
use crate::tracker::Uid;

/// Which entry a [`Command::Pod`] token stands for: the pod, and the barrier epoch it was
/// queued in.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PodKey(Uid, u64);

/// What waits for the task about one pod, merged ([`Entry::merge`]).
#[derive(Debug, Default)]
pub(super) struct Entry {
    /// One of its events came from this server's informer (or a self-watch mode's watch), not
    /// only from the leader's scope-wide watch ([`Command::Watched`]).
    pub from_informer: bool,
    /// The latest time the pod was seen running by events answered on the caller's thread.
    pub seen_running: Option<SystemTime>,
    /// One of its events came as [`Command::Entered`] (a filtered watch's event of a terminated
    /// pod, which may be its entry into the selection).
    pub entered: bool,
    /// The last running state before [`Entry::last`], when that is a terminal state.
    pub running: Option<Observation>,
    pub last: Option<Observation>,
}

impl Entry {
    fn merge(&mut self, obs: Observation) {
        match &self.last {
            // The pod is gone or going: nothing later changes that.
            Some(l) if l.is_cleaned() => {}
            // A running state (or the end) replaces whatever waited: the task would have ended
            // in that state.
            _ if obs.is_cleaned() || !obs.state.is_terminated() => {
                self.running = None;
                self.last = Some(obs);
            }
            // Running, then terminal: both are kept, in order.
            Some(l) if !l.state.is_terminated() => {
                self.running = self.last.take();
                self.last = Some(obs);
            }
            // Terminal, then terminal: the first decides (Kyuubi keeps the first terminal state
            // it saw); a termination time the first lacked is taken from the later one, and the
            // pod's annotations are the later one's (the latest word on its retention).
            Some(_) => {
                if let Some(l) = &mut self.last {
                    if l.terminated_at.is_none() {
                        l.terminated_at = obs.terminated_at;
                    }
                    l.annotations = obs.annotations;
                }
            }
            None => self.last = Some(obs),
        }
    }

    fn saw_running(&mut self, at: SystemTime) {
        self.seen_running = Some(self.seen_running.map_or(at, |t| t.max(at)));
    }
}

/// The room for waiting entries an inbox keeps once none waits ([`PodQueue::take`]).
const KEEP_ROOM: usize = 1024;

#[derive(Debug, Default)]
struct Waiting {
    epoch: u64,
    /// Boxed: the map keeps room for the deepest backlog, at a pointer (not an entry) per slot.
    entries: HashMap<PodKey, Box<Entry>>,
}

/// The entries of one scope's inbox, shared by its senders and its task.
#[derive(Debug, Default)]
pub struct PodQueue {
    waiting: Mutex<Waiting>,
}

impl PodQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The task takes the entry of a [`Command::Pod`] token. A burst (an informer's first list
    /// of every pod) grows the map; its slots hold boxed entries, so the room costs a key and a
    /// pointer per slot while the backlog lasts, and the map gives it back once the backlog has
    /// drained (shrinking an empty map only frees its table).
    pub(super) fn take(&self, key: &PodKey) -> Option<Entry> {
        let mut waiting = self.lock();
        let entry = waiting.entries.remove(key).map(|e| *e);
        if waiting.entries.is_empty() && waiting.entries.capacity() > KEEP_ROOM {
            waiting.entries.shrink_to(KEEP_ROOM);
        }
        entry
    }

    /// The entry of pod `uid` queued in epoch `epoch` (after the task's last barrier), taken
    /// ahead of its token (which then finds nothing): its newest events, for a check right
    /// before the pod's DELETE.
    pub(super) fn take_current(&self, uid: &Uid, epoch: u64) -> Option<Entry> {
        self.take(&PodKey(uid.clone(), epoch))
    }

    /// How many pods have an entry waiting.
    pub fn len(&self) -> usize {
        self.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The sending side of a scope task's queue of commands, which counts what it holds.
#[derive(Clone)]
pub struct Inbox {
    tx: mpsc::UnboundedSender<Command>,
    pods: Arc<PodQueue>,
    metrics: Arc<ScopeMetrics>,
}

impl Inbox {
    pub(super) fn new(
        tx: mpsc::UnboundedSender<Command>,
        pods: Arc<PodQueue>,
        metrics: Arc<ScopeMetrics>,
    ) -> Self {
        Inbox { tx, pods, metrics }
    }

    /// Queues a command; gives it back if the task has ended. An observation is merged into
    /// its pod's waiting entry ([`Inbox::observe`]).
    pub fn send(&self, cmd: Command) -> Result<(), Command> {
        match cmd {
            Command::Observe(obs) => self.observe(obs, None),
            Command::Watched(obs) => self.merge(obs, None, false),
            Command::Entered(obs) => self.merge_entered(obs),
            Command::Listed(_) | Command::Unwatched | Command::ScopeUnwatched => {
                let mut waiting = self.pods.lock();
                waiting.epoch += 1;
                self.push(cmd)
            }
            other => self.push(other),
        }
    }

    /// Queues one event of a pod, with the latest time it was seen running by events answered
    /// on the caller's thread: merged into the pod's waiting entry, or a new entry and token.
    pub fn observe(
        &self,
        obs: Observation,
        seen_running: Option<SystemTime>,
    ) -> Result<(), Command> {
        self.merge(obs, seen_running, true)
    }

    /// [`Inbox::observe`] of a [`Command::Entered`] event: its entry is marked so.
    fn merge_entered(&self, obs: Observation) -> Result<(), Command> {
        self.merge_as(obs, None, true, true)
    }

    /// [`Inbox::observe`], from this server's informer or only from the scope watch.
    fn merge(
        &self,
        obs: Observation,
        seen_running: Option<SystemTime>,
        from_informer: bool,
    ) -> Result<(), Command> {
        self.merge_as(obs, seen_running, from_informer, false)
    }

    fn merge_as(
        &self,
        obs: Observation,
        seen_running: Option<SystemTime>,
        from_informer: bool,
        entered: bool,
    ) -> Result<(), Command> {
        let give_back = |obs| match (from_informer, entered) {
            (_, true) => Command::Entered(obs),
            (true, false) => Command::Observe(obs),
            (false, false) => Command::Watched(obs),
        };
        if self.tx.is_closed() {
            return Err(give_back(obs));
        }
        let mut waiting = self.pods.lock();
        let key = PodKey(Uid::new(&obs.pod_uid), waiting.epoch);
        if let Some(e) = waiting.entries.get_mut(&key) {
            if let Some(at) = seen_running {
                e.saw_running(at);
            }
            e.from_informer |= from_informer;
            e.entered |= entered;
            e.merge(obs);
            return Ok(());
        }
        let mut e = Box::<Entry>::default();
        e.from_informer = from_informer;
        e.entered = entered;
        if let Some(at) = seen_running {
            e.saw_running(at);
        }
        e.merge(obs);
        waiting.entries.insert(key.clone(), e);
        // Queued under the lock, so the token never overtakes a barrier sent meanwhile.
        if self.push(Command::Pod(key.clone())).is_err() {
            // The task ended meanwhile: the event is given back, as an unmerged send would.
            let e = waiting.entries.remove(&key);
            return Err(e.and_then(|e| e.last).map_or(Command::Shutdown, give_back));
        }
        Ok(())
    }

    fn push(&self, cmd: Command) -> Result<(), Command> {
        // Counted before it is queued, so the task's count down never goes below zero.
        let depth = self.metrics.queued.fetch_add(1, Relaxed) + 1;
        self.metrics.queued_max.fetch_max(depth, Relaxed);
        self.tx.send(cmd).map_err(|e| {
            self.metrics.queued.fetch_sub(1, Relaxed);
            e.0
        })
    }

    /// Whether the task has ended.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::{AppState, EventKind};

    fn obs(uid: &str, kind: EventKind, state: AppState) -> Observation {
        Observation {
            kind,
            tag: "tag".into(),
            pod_name: "pod".into(),
            pod_uid: uid.into(),
            state,
            has_app_selector: true,
            terminated_at: None,
            deletion_requested: false,
            annotations: None,
        }
    }

    fn inbox() -> (
        Inbox,
        mpsc::UnboundedReceiver<Command>,
        Arc<PodQueue>,
        Arc<ScopeMetrics>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let pods = Arc::new(PodQueue::default());
        let metrics = Arc::new(ScopeMetrics::default());
        (
            Inbox::new(tx, pods.clone(), metrics.clone()),
            rx,
            pods,
            metrics,
        )
    }

    const A: &str = "00000000-0000-0000-0000-00000000000a";
    const B: &str = "00000000-0000-0000-0000-00000000000b";

    #[test]
    fn a_million_events_of_a_thousand_pods_hold_a_thousand_entries() {
        let (inbox, rx, pods, metrics) = inbox();
        for i in 0..1_000_000u32 {
            let uid = format!("00000000-0000-0000-0000-{:012x}", i % 1000);
            let state = if i % 2 == 0 {
                AppState::Running
            } else {
                AppState::Finished
            };
            inbox
                .observe(obs(&uid, EventKind::Update, state), None)
                .expect("queued");
        }
        assert_eq!(pods.len(), 1000);
        assert_eq!(rx.len(), 1000);
        assert_eq!(metrics.queued.load(Relaxed), 1000);
    }

    #[test]
    fn the_room_a_burst_took_is_given_back_once_it_has_drained() {
        let (inbox, mut rx, pods, _) = inbox();
        let room = || pods.lock().entries.capacity();
        for round in 0..2 {
            for i in 0..100_000u32 {
                let uid = format!("00000000-0000-0000-0000-{:012x}", i + 1);
                inbox
                    .observe(obs(&uid, EventKind::Update, AppState::Finished), None)
                    .expect("queued");
            }
            assert!(room() >= 100_000, "round {round}: {}", room());
            let mut taken = 0;
            while let Ok(cmd) = rx.try_recv() {
                if let Command::Pod(key) = cmd {
                    assert!(pods.take(&key).is_some_and(|e| e.last.is_some()));
                    taken += 1;
                }
            }
            assert_eq!((taken, pods.len()), (100_000, 0));
            assert!(room() <= 2 * KEEP_ROOM, "round {round}: {}", room());
        }
    }

    #[test]
    fn running_then_terminal_keeps_both_in_order_and_the_latest_seen_running() {
        let (inbox, mut rx, pods, _) = inbox();
        let t1 = SystemTime::UNIX_EPOCH + Duration::from_secs(10);
        let t2 = SystemTime::UNIX_EPOCH + Duration::from_secs(20);
        inbox
            .observe(obs(A, EventKind::Add, AppState::Pending), Some(t2))
            .unwrap();
        inbox
            .observe(obs(A, EventKind::Update, AppState::Running), Some(t1))
            .unwrap();
        inbox
            .observe(obs(A, EventKind::Update, AppState::Finished), None)
            .unwrap();
        inbox
            .observe(obs(B, EventKind::Update, AppState::Failed), None)
            .unwrap();
        let Ok(Command::Pod(first)) = rx.try_recv() else {
            panic!("a token")
        };
        let e = pods.take(&first).expect("the entry of A");
        assert_eq!(e.running.map(|o| o.state), Some(AppState::Running));
        assert_eq!(e.last.map(|o| o.state), Some(AppState::Finished));
        assert_eq!(e.seen_running, Some(t2));
        let Ok(Command::Pod(second)) = rx.try_recv() else {
            panic!("a token")
        };
        assert_eq!(second.0, Uid::new(B));
    }

    #[test]
    fn a_delete_is_final_and_a_running_state_replaces_a_terminal_one() {
        let (inbox, mut rx, pods, _) = inbox();
        inbox
            .observe(obs(A, EventKind::Update, AppState::Finished), None)
            .unwrap();
        inbox
            .observe(obs(A, EventKind::Update, AppState::Running), None)
            .unwrap();
        let Ok(Command::Pod(k)) = rx.try_recv() else {
            panic!("a token")
        };
        let e = pods.take(&k).expect("entry");
        assert!(e.running.is_none());
        assert_eq!(e.last.map(|o| o.state), Some(AppState::Running));

        inbox
            .observe(obs(B, EventKind::Delete, AppState::Failed), None)
            .unwrap();
        inbox
            .observe(obs(B, EventKind::Update, AppState::Running), None)
            .unwrap();
        let Ok(Command::Pod(k)) = rx.try_recv() else {
            panic!("a token")
        };
        let e = pods.take(&k).expect("entry");
        assert_eq!(e.last.map(|o| o.kind), Some(EventKind::Delete));
    }

    #[test]
    fn of_two_terminal_states_the_first_is_kept() {
        let (inbox, mut rx, pods, _) = inbox();
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(30);
        inbox
            .observe(obs(A, EventKind::Update, AppState::Failed), None)
            .unwrap();
        let mut finished = obs(A, EventKind::Update, AppState::Finished);
        finished.terminated_at = Some(at);
        inbox.observe(finished, None).unwrap();
        let Ok(Command::Pod(k)) = rx.try_recv() else {
            panic!("a token")
        };
        let last = pods.take(&k).and_then(|e| e.last).expect("an event");
        assert_eq!(last.state, AppState::Failed);
        assert_eq!(last.terminated_at, Some(at));
    }

    #[test]
    fn a_list_is_a_barrier_that_no_later_event_merges_across() {
        let (inbox, mut rx, pods, _) = inbox();
        inbox
            .observe(obs(A, EventKind::Add, AppState::Finished), None)
            .unwrap();
        inbox
            .send(Command::Listed(Box::new(
                std::iter::once(Uid::new(A)).collect(),
            )))
            .unwrap();
        inbox
            .observe(obs(A, EventKind::Update, AppState::Running), None)
            .unwrap();
        assert_eq!(pods.len(), 2);
        assert!(matches!(rx.try_recv(), Ok(Command::Pod(_))));
        assert!(matches!(rx.try_recv(), Ok(Command::Listed(_))));
        let Ok(Command::Pod(k)) = rx.try_recv() else {
            panic!("a token after the list")
        };
        assert_eq!(
            pods.take(&k).and_then(|e| e.last).map(|o| o.state),
            Some(AppState::Running)
        );
    }
}
