//! The driver's session pool: one coordination session per server identity, opened by the first
//! scope that needs it, shared by every scope, replaced once when it is lost, and closed by the
//! last scope that releases it; and the turns that keep one candidacy per (identity, election)
//! at a time.
//!
//! One scope's campaign loop on top of it ([`super::drive`]) is in the parent module.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use tracing::info;

use super::{Connect, Health, Session};

struct Entry<S> {
    session: Arc<S>,
    users: usize,
}

struct Slot<S> {
    current: Option<Entry<S>>,
    /// Connection attempts so far, and the error of the last one.
    attempts: u64,
    last_error: Option<String>,
    /// One connection attempt at a time.
    connecting: Arc<tokio::sync::Mutex<()>>,
}

impl<S> Slot<S> {
    fn new() -> Self {
        Slot {
            current: None,
            attempts: 0,
            last_error: None,
            connecting: Arc::default(),
        }
    }
}

/// Held while one candidacy of an (identity, election) pair runs.
pub(super) type Turn = Arc<tokio::sync::Mutex<()>>;

/// The sessions of one backend instance: one per identity.
pub(crate) struct Pool<C: Connect> {
    pub(super) connector: C,
    slots: Mutex<HashMap<String, Slot<C::Session>>>,
    /// One candidacy per (identity, election) at a time, so that a scope started again while
    /// its previous campaign is still releasing does not share its key or node.
    turns: Mutex<HashMap<(String, String), Turn>>,
}

impl<C: Connect> fmt::Debug for Pool<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let live = slots.values().filter(|s| s.current.is_some()).count();
        f.debug_struct("Pool").field("sessions", &live).finish()
    }
}

/// Whether a session can still be used: not lost, and its upkeep task (heartbeats, keep-alive)
/// still runs (a task that ended without saying so dropped its sender: the session is dead).
pub(super) fn is_live<S: Session>(s: &S) -> bool {
    let health = s.health();
    health.has_changed().is_ok() && !matches!(*health.borrow(), Health::Lost(_))
}

impl<C: Connect> Pool<C> {
    pub(crate) fn new(connector: C) -> Self {
        Pool {
            connector,
            slots: Mutex::default(),
            turns: Mutex::default(),
        }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot<C::Session>>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the live session of `identity`, or opens one; one attempt at a time, and callers
    /// that waited for a failed attempt get its error instead of trying again at once.
    pub(super) async fn acquire(&self, identity: &str) -> Result<Arc<C::Session>, String> {
        let take = |slot: &mut Slot<C::Session>| -> Option<Arc<C::Session>> {
            let entry = slot.current.as_mut().filter(|e| is_live(&*e.session))?;
            entry.users += 1;
            Some(entry.session.clone())
        };
        let (gate, seen) = {
            let mut slots = self.slots();
            let slot = slots.entry(identity.to_owned()).or_insert_with(Slot::new);
            if let Some(s) = take(slot) {
                return Ok(s);
            }
            (slot.connecting.clone(), slot.attempts)
        };
        let _gate = gate.lock().await;
        {
            let mut slots = self.slots();
            if let Some(slot) = slots.get_mut(identity) {
                if let Some(s) = take(slot) {
                    return Ok(s);
                }
                if slot.attempts > seen {
                    if let Some(e) = &slot.last_error {
                        return Err(e.clone());
                    }
                }
            }
        }
        let connected = self.connector.connect(identity).await;
        let mut slots = self.slots();
        let slot = slots.entry(identity.to_owned()).or_insert_with(Slot::new);
        slot.attempts += 1;
        match connected {
            Ok(session) => {
                let session = Arc::new(session);
                slot.last_error = None;
                slot.current = Some(Entry {
                    session: session.clone(),
                    users: 1,
                });
                Ok(session)
            }
            Err(e) => {
                slot.last_error = Some(e.clone());
                Err(e)
            }
        }
    }

    /// The live session of `identity`, if one is open, without taking a use of it (the stores
    /// of [`crate::election::store`] never open one of their own).
    pub(crate) fn peek(&self, identity: &str) -> Option<Arc<C::Session>> {
        let slots = self.slots();
        let entry = slots.get(identity)?.current.as_ref()?;
        is_live(&*entry.session).then(|| entry.session.clone())
    }

    /// Whether the live session of `identity` is in contact now ([`Health::Up`]).
    pub(crate) fn is_up(&self, identity: &str) -> bool {
        self.peek(identity)
            .is_some_and(|s| matches!(*s.health().borrow(), Health::Up { .. }))
    }

    /// A scope is done with `session`; the last one closes it.
    pub(super) async fn release(&self, identity: &str, session: Arc<C::Session>) {
        let closing = {
            let mut slots = self.slots();
            let Some(slot) = slots.get_mut(identity) else {
                return;
            };
            let last = match slot.current.as_mut() {
                Some(e) if Arc::ptr_eq(&e.session, &session) => {
                    e.users = e.users.saturating_sub(1);
                    e.users == 0
                }
                // A replaced (lost) session: it goes when its last holder drops it.
                _ => false,
            };
            if last {
                slot.current = None;
            }
            last
        };
        if closing {
            info!(
                identity,
                "last scope released {}; closing it",
                session.describe()
            );
            session.close().await;
        }
    }

    pub(super) fn turn(&self, identity: &str, election: String) -> Turn {
        let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
        // Forget the turns nobody holds or waits for.
        turns.retain(|_, t| Arc::strong_count(t) > 1);
        turns
            .entry((identity.to_owned(), election))
            .or_default()
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use std::future::pending;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use futures::future::BoxFuture;
    use tokio::sync::watch;
    use tokio::time::sleep;

    use super::*;
    use crate::election::driver::Seat;
    use crate::scope::Scope;

    /// Sessions that count how often they were opened and closed.
    #[derive(Default)]
    struct Counting {
        opened: Arc<AtomicUsize>,
        closed: Arc<AtomicUsize>,
        fail: Arc<std::sync::atomic::AtomicBool>,
        /// Each session's upkeep task (as `spawn_upkeep` runs one) panics when this is notified.
        crash: Option<Arc<tokio::sync::Notify>>,
    }

    struct Fake {
        health: Arc<watch::Sender<Health>>,
        closed: Arc<AtomicUsize>,
    }

    impl Connect for Counting {
        type Session = Fake;

        fn connect(&self, _identity: &str) -> BoxFuture<'static, Result<Fake, String>> {
            let (opened, closed) = (self.opened.clone(), self.closed.clone());
            let fail = self.fail.load(Ordering::SeqCst);
            let crash = self.crash.clone();
            Box::pin(async move {
                // Long enough for every other caller to queue up behind this attempt.
                sleep(Duration::from_millis(20)).await;
                if fail {
                    return Err("refused".into());
                }
                opened.fetch_add(1, Ordering::SeqCst);
                let (tx, _) = watch::channel(Health::Up { until: None });
                let Some(crash) = crash else {
                    return Ok(Fake {
                        health: Arc::new(tx),
                        closed,
                    });
                };
                let (give, take) = tokio::sync::oneshot::channel();
                super::super::spawn_upkeep("test upkeep", tx, move |health| {
                    let _ = give.send(health);
                    Box::pin(async move {
                        crash.notified().await;
                        panic!("deliberate upkeep failure");
                    })
                });
                let health = take.await.map_err(|e| e.to_string())?;
                Ok(Fake { health, closed })
            })
        }

        fn backoff(&self) -> (Duration, Duration) {
            (Duration::from_millis(1), Duration::from_millis(1))
        }
    }

    impl Session for Fake {
        fn describe(&self) -> String {
            "fake".into()
        }
        fn health(&self) -> watch::Receiver<Health> {
            self.health.subscribe()
        }
        fn margin(&self) -> Duration {
            Duration::ZERO
        }
        fn stable_after(&self) -> Duration {
            Duration::ZERO
        }
        fn election(&self, scope: &Scope) -> String {
            scope.encoded()
        }
        fn contend(
            self: Arc<Self>,
            _scope: &Scope,
            _identity: &str,
        ) -> BoxFuture<'static, Result<Box<dyn Seat>, String>> {
            Box::pin(pending())
        }
        fn abandon(self: Arc<Self>, _scope: &Scope) -> BoxFuture<'static, ()> {
            Box::pin(async {})
        }
        fn close(self: Arc<Self>) -> BoxFuture<'static, ()> {
            self.closed.fetch_add(1, Ordering::SeqCst);
            Box::pin(async {})
        }
    }

    #[tokio::test]
    async fn one_session_per_identity_shared_and_closed_by_the_last_user() {
        let c = Counting::default();
        let (opened, closed, fail) = (c.opened.clone(), c.closed.clone(), c.fail.clone());
        let pool = Arc::new(Pool::new(c));
        let grabs = (0..20).map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { pool.acquire("server-a").await })
        });
        let mut sessions = Vec::new();
        for g in grabs {
            sessions.push(g.await.expect("task").expect("session"));
        }
        assert_eq!(opened.load(Ordering::SeqCst), 1);
        assert!(sessions.iter().all(|s| Arc::ptr_eq(s, &sessions[0])));
        // Another identity gets its own.
        let other = pool.acquire("server-b").await.expect("session");
        assert_eq!(opened.load(Ordering::SeqCst), 2);

        let last = sessions.pop().expect("one");
        for s in sessions {
            pool.release("server-a", s).await;
        }
        assert_eq!(closed.load(Ordering::SeqCst), 0);
        pool.release("server-a", last).await;
        assert_eq!(closed.load(Ordering::SeqCst), 1);

        // A lost session is replaced by one new session for everybody.
        let again = pool.acquire("server-b").await.expect("session");
        assert!(Arc::ptr_eq(&again, &other));
        other.health.send_replace(Health::Lost("expired".into()));
        let renewed: Vec<_> = futures::future::join_all((0..5).map(|_| pool.acquire("server-b")))
            .await
            .into_iter()
            .map(|r| r.expect("session"))
            .collect();
        assert_eq!(opened.load(Ordering::SeqCst), 3);
        assert!(renewed.iter().all(|s| !Arc::ptr_eq(s, &other)));

        // Callers queued behind a failed attempt get its error rather than trying again at once.
        fail.store(true, Ordering::SeqCst);
        renewed[0]
            .health
            .send_replace(Health::Lost("expired".into()));
        let failed = futures::future::join_all((0..5).map(|_| pool.acquire("server-b"))).await;
        assert!(failed
            .iter()
            .all(|r| r.as_ref().err().map(String::as_str) == Some("refused")));
        assert_eq!(opened.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_session_whose_upkeep_task_panicked_is_lost_and_replaced() {
        let crash = Arc::new(tokio::sync::Notify::new());
        let c = Counting {
            crash: Some(crash.clone()),
            ..Counting::default()
        };
        let opened = c.opened.clone();
        let pool = Pool::new(c);
        let first = pool.acquire("server-a").await.expect("session");
        let mut health = first.health();
        assert!(is_live(&*first));
        // The heartbeat (keep-alive) task dies: the session says so, with the reason.
        crash.notify_one();
        tokio::time::timeout(
            Duration::from_secs(5),
            health.wait_for(|h| matches!(h, Health::Lost(_))),
        )
        .await
        .expect("the session is reported lost")
        .expect("its health is readable");
        let why = format!("{:?}", *health.borrow());
        assert!(
            why.contains("test upkeep task failed: deliberate upkeep failure"),
            "{why}"
        );
        assert!(!is_live(&*first));
        // Nobody gets it again: the next caller gets a new session.
        let second = pool.acquire("server-a").await.expect("session");
        assert!(!Arc::ptr_eq(&first, &second));
        assert_eq!(opened.load(Ordering::SeqCst), 2);
    }
}
