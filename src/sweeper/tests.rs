//! Unit tests of the sweeper internals: interleavings that need another thread to happen in a
//! running engine, driven here step by step.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::supervise::{new_sweeper, SHUTDOWN_ANSWERS_WAIT};
use super::*;
use crate::deleter::{Outcome, OutcomeClass};
use crate::election::{Backend, LeaderSignal};
use crate::model::{AppState, EventKind};

/// Hands every campaign's signal to the test.
#[derive(Default)]
struct Manual(Arc<Mutex<Vec<LeaderSignal>>>);

impl Backend for Manual {
    fn name(&self) -> &'static str {
        "manual"
    }

    fn campaign(
        &self,
        _scope: Scope,
        _identity: String,
        signal: LeaderSignal,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        self.0.lock().unwrap().push(signal);
        Box::pin(async move { cancel.cancelled().await })
    }
}

/// A sweeper of scope `ns` (kind ALL, retain 60 s) whose election the test drives by hand through
/// the returned signal; its deleter is the test's to set.
async fn manual_sweeper(ns: &str) -> (Sweeper, LeaderSignal) {
    let signals = Arc::new(Mutex::new(Vec::new()));
    let backend: Arc<dyn Backend> = Arc::new(Manual(signals.clone()));
    let scope = Scope::new(None, Some(ns));
    let election = ElectionHandle::start(&backend, scope.clone(), "me".into());
    tokio::task::yield_now().await;
    let signal = signals.lock().unwrap()[0].clone();
    let cfg = SweeperConfig::new(CleanupKind::All, Duration::from_secs(60));
    let source: DeleterSource = Arc::new(|_| Box::pin(async { Err("unused".to_owned()) }));
    let sw = new_sweeper(
        scope,
        cfg,
        Clock::System,
        election,
        source,
        Box::new(|_| true),
        Arc::default(),
    );
    (sw, signal)
}

/// Driver pod `driver-<i>`, finished an hour ago: overdue under any short retain period.
fn finished_long_ago(i: usize) -> Observation {
    Observation {
        kind: EventKind::Update,
        tag: format!("t{i}"),
        pod_name: format!("driver-{i}"),
        pod_uid: format!("u-{i}"),
        state: AppState::Finished,
        has_app_selector: true,
        terminated_at: Some(SystemTime::now() - Duration::from_secs(3600)),
        deletion_requested: false,
        annotations: None,
    }
}

/// Never answers: a DELETE stays in flight.
struct Silent;

impl PodDeleter for Silent {
    fn delete(&self, _name: &str, _uid: &str, _dry_run: bool) -> BoxFuture<'static, Outcome> {
        Box::pin(async {
            std::future::pending::<()>().await;
            Outcome {
                class: OutcomeClass::Accepted,
                code: None,
                reason: String::new(),
                message: String::new(),
                retry_after: None,
                flow: None,
            }
        })
    }
}

/// Item 12 of issue 10: the backend flips Leading -> Paused -> Leading while the sweeper handles
/// a pod that just became due. The dispatch sees Paused and holds the pod back; the next look at
/// the status already says Leading again, the same state as before. That status change must
/// still dispatch the held-back pod.
#[tokio::test(start_paused = true)]
async fn a_paused_leading_flip_seen_as_one_change_still_dispatches() {
    let (mut sw, signal) = manual_sweeper("flip").await;
    sw.deleter = Some(Arc::new(Silent));
    signal.lead_until(Instant::now() + Duration::from_secs(3600), "won");
    let st = sw.election.status();
    sw.on_status(&st);
    assert_eq!(sw.last_leadership, Leadership::Leading);
    let obs = Observation {
        kind: EventKind::Update,
        tag: "t".into(),
        pod_name: "driver-flip".into(),
        pod_uid: "u-flip".into(),
        state: AppState::Finished,
        has_app_selector: true,
        // Not due yet: its timer is armed, and fired by hand below.
        terminated_at: Some(SystemTime::now()),
        deletion_requested: false,
        annotations: None,
    };
    sw.on_observe(&obs, false);
    let uid = Uid::new("u-flip");
    assert_eq!(sw.tracker.armed(), 1);
    // The pod's timer fires while the backend has just paused.
    signal.pause("blip");
    assert!(sw.make_due(uid, SystemTime::now()));
    sw.dispatch();
    assert!(sw.inflight.is_empty(), "held back while paused");
    // Resumed before the sweeper looked at the status again: it only sees Leading.
    signal.lead_until(
        Instant::now() + Duration::from_secs(3600),
        "confirmed again",
    );
    let st = sw.election.status();
    assert_eq!(st.leadership, sw.last_leadership);
    sw.on_status(&st);
    assert_eq!(sw.inflight.len(), 1, "the held-back pod is dispatched");
}

/// An API server under API Priority and Fairness, in small: `seats` requests are served at once
/// (each takes 50 ms); one more is answered 429 with a `Retry-After` that doubles with every
/// rejection round (1, 2, 4, 8 s, as seen on a real kube-apiserver).
struct Apf {
    seats: usize,
    busy: Arc<Mutex<usize>>,
    rejected: Arc<Mutex<u32>>,
    accepted: Arc<Mutex<Vec<String>>>,
    /// In flight (served) at each accepted request's start.
    concurrency: Arc<Mutex<Vec<usize>>>,
}

impl PodDeleter for Apf {
    fn delete(&self, name: &str, _uid: &str, _dry_run: bool) -> BoxFuture<'static, Outcome> {
        let (busy, rejected, accepted, concurrency) = (
            self.busy.clone(),
            self.rejected.clone(),
            self.accepted.clone(),
            self.concurrency.clone(),
        );
        let (seats, name) = (self.seats, name.to_owned());
        Box::pin(async move {
            {
                let mut b = busy.lock().unwrap();
                if *b >= seats {
                    let mut r = rejected.lock().unwrap();
                    *r += 1;
                    let wait = 1u64 << (*r / 8).min(3);
                    return Outcome {
                        class: OutcomeClass::Throttled,
                        code: Some(429),
                        reason: "TooManyRequests".into(),
                        message: "too many requests".into(),
                        retry_after: Some(Duration::from_secs(wait)),
                        flow: None,
                    };
                }
                *b += 1;
                concurrency.lock().unwrap().push(*b);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            *busy.lock().unwrap() -= 1;
            accepted.lock().unwrap().push(name);
            Outcome {
                class: OutcomeClass::Accepted,
                code: Some(200),
                reason: String::new(),
                message: String::new(),
                retry_after: None,
                flow: None,
            }
        })
    }
}

/// Issue 20, ramp-up: after a Retry-After pause the scope resumes with one DELETE in flight,
/// doubled by each DELETE that completes, not with a burst of `maxInFlight` that the API server
/// rejects again. Before the fix every round after a pause sent every due pod at once and all
/// but the 2 the server could take were rejected: 44 rejections in this run, against 24 with the
/// ramp (14 of them in the first burst, before any pause). Every pod is deleted either way, and
/// the pause is visible while it lasts.
#[tokio::test(start_paused = true)]
async fn after_a_retry_after_pause_the_scope_resumes_gently_and_loses_nothing() {
    let signals = Arc::new(Mutex::new(Vec::new()));
    let backend: Arc<dyn Backend> = Arc::new(Manual(signals.clone()));
    let scope = Scope::new(None, Some("apf"));
    let election = ElectionHandle::start(&backend, scope.clone(), "me".into());
    tokio::task::yield_now().await;
    let signal = signals.lock().unwrap()[0].clone();
    signal.lead_until(Instant::now() + Duration::from_secs(36_000), "won");
    let mut cfg = SweeperConfig::new(CleanupKind::All, Duration::from_secs(1));
    cfg.tuning.max_in_flight = 16;
    cfg.tuning.qps = 1000.0;
    cfg.tuning.burst = 1000;
    let apf = Apf {
        seats: 2,
        busy: Arc::default(),
        rejected: Arc::default(),
        accepted: Arc::default(),
        concurrency: Arc::default(),
    };
    let (rejected, accepted) = (apf.rejected.clone(), apf.accepted.clone());
    let deleter: Arc<dyn PodDeleter> = Arc::new(apf);
    let source: DeleterSource = Arc::new(move |_| {
        let d = deleter.clone();
        Box::pin(async move { Ok(d) })
    });
    let metrics: Arc<ScopeMetrics> = Arc::default();
    let h = spawn(
        scope,
        1,
        cfg,
        Clock::System,
        election,
        source,
        Box::new(|_| false),
        metrics.clone(),
    );
    for i in 0..16 {
        h.tx.send(Command::Observe(finished_long_ago(i))).unwrap();
    }
    // The first burst meets the server's two seats: 14 rejected, the scope paused.
    let mut saw_pause = false;
    for _ in 0..30_000 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        if let Some(p) = metrics.pauses.get(crate::pause::PauseKind::RetryAfter) {
            saw_pause = true;
            assert!(p.detail.contains("429"), "{p:?}");
        }
        if accepted.lock().unwrap().len() == 16 {
            break;
        }
    }
    let n_rejected = *rejected.lock().unwrap();
    println!(
        "accepted {}, rejected {n_rejected}",
        accepted.lock().unwrap().len()
    );
    assert!(saw_pause, "the Retry-After pause was visible");
    assert_eq!(accepted.lock().unwrap().len(), 16, "every pod deleted");
    // 14 in the first burst; after it, each round overshoots the 2 seats by at most what the
    // ramp doubled past them.
    assert!(
        n_rejected <= 14 + 12,
        "{n_rejected} rejections: the scope resumed with a burst after its pause"
    );
    // Once every pod is gone, the pause ends.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(!metrics.pauses.is_open(crate::pause::PauseKind::RetryAfter));
    h.tx.send(Command::Shutdown).unwrap();
    let _ = h.task.await;
}

/// Answers 200 once the test opens the gate: a DELETE stays in flight until then.
struct Gated(Arc<tokio::sync::Semaphore>);

impl PodDeleter for Gated {
    fn delete(&self, _name: &str, _uid: &str, _dry_run: bool) -> BoxFuture<'static, Outcome> {
        let gate = self.0.clone();
        Box::pin(async move {
            let _ = gate.acquire().await.map(|p| p.forget());
            Outcome {
                class: OutcomeClass::Accepted,
                code: Some(200),
                reason: String::new(),
                message: String::new(),
                retry_after: None,
                flow: None,
            }
        })
    }
}

/// A scope task of namespace `ns` (kind ALL, retain 1 s) that leads for ten hours, its DELETEs
/// held at the returned gate until the test lets them through (one permit each).
async fn gated_scope(
    ns: &str,
) -> (
    ScopeHandle,
    Arc<tokio::sync::Semaphore>,
    Arc<ScopeMetrics>,
    Duration,
) {
    let signals = Arc::new(Mutex::new(Vec::new()));
    let backend: Arc<dyn Backend> = Arc::new(Manual(signals.clone()));
    let scope = Scope::new(None, Some(ns));
    let election = ElectionHandle::start(&backend, scope.clone(), "me".into());
    tokio::task::yield_now().await;
    let signal = signals.lock().unwrap()[0].clone();
    signal.lead_until(Instant::now() + Duration::from_secs(36_000), "won");
    let cfg = SweeperConfig::new(CleanupKind::All, Duration::from_secs(1));
    let probe = cfg.overdue_probe;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let deleter: Arc<dyn PodDeleter> = Arc::new(Gated(gate.clone()));
    let source: DeleterSource = Arc::new(move |_| {
        let d = deleter.clone();
        Box::pin(async move { Ok(d) })
    });
    let metrics: Arc<ScopeMetrics> = Arc::default();
    let h = spawn(
        scope,
        1,
        cfg,
        Clock::System,
        election,
        source,
        Box::new(|_| false),
        metrics.clone(),
    );
    (h, gate, metrics, probe)
}

/// Issue 25 §6: `oldest_overdue_ms` (the stalled-leader alerts read it) measures the pods past
/// their deadline, those whose DELETE is in flight or in backoff included, and reads 0 once the
/// last one is deleted. Before the fix the probe skipped an empty tracker, so the age of the last
/// overdue pod it had seen stayed in the gauge for good: an idle scope with no DELETE for 10
/// minutes then read as a stalled leader.
#[tokio::test(start_paused = true)]
async fn the_oldest_overdue_age_goes_back_to_zero_once_the_last_pod_is_deleted() {
    let (h, gate, metrics, probe) = gated_scope("overdue").await;
    let obs = Observation {
        kind: EventKind::Update,
        tag: "t".into(),
        pod_name: "driver-overdue".into(),
        pod_uid: "u-overdue".into(),
        state: AppState::Finished,
        has_app_selector: true,
        terminated_at: Some(SystemTime::now() - Duration::from_secs(3600)),
        deletion_requested: false,
        annotations: None,
    };
    h.tx.send(Command::Observe(obs)).unwrap();
    let oldest = || metrics.snapshot()["oldest_overdue_ms"].as_u64().unwrap();
    // Its DELETE is in flight (stage Deleting, not Due): overdue by about an hour (its deadline
    // is its termination plus the 1 s retain period).
    tokio::time::sleep(probe * 2).await;
    assert_eq!(metrics.snapshot()["inflight"], 1);
    assert_eq!(metrics.snapshot()["due"], 0);
    assert!(oldest() >= 3_590_000, "{}", oldest());
    gate.add_permits(1);
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if metrics.snapshot()["tracked"] == 0 {
            break;
        }
    }
    assert_eq!(metrics.snapshot()["tracked"], 0, "{}", metrics.snapshot());
    tokio::time::sleep(probe * 2).await;
    assert_eq!(
        oldest(),
        0,
        "the gauge kept the age of a pod deleted long ago"
    );
    h.tx.send(Command::Shutdown).unwrap();
    let _ = h.task.await;
}

/// Issue 32: a pod the cap made due, no longer over the cap when the scope's task restarts (a
/// younger pod went meanwhile), waits for its own deadline again and is not logged or evented
/// as "over the cap" when it goes.
#[tokio::test(start_paused = true)]
async fn after_a_restart_a_pod_back_under_the_cap_is_not_capped() {
    let backend: Arc<dyn Backend> = Arc::new(Manual::default());
    let scope = Scope::new(None, Some("capped"));
    let election = ElectionHandle::start(&backend, scope.clone(), "me".into());
    let mut cfg = SweeperConfig::new(CleanupKind::All, Duration::from_secs(3600));
    cfg.retention.max_terminated = 2;
    let source: DeleterSource = Arc::new(|_| Box::pin(async { Err("unused".to_owned()) }));
    let mut sw = new_sweeper(
        scope,
        cfg,
        Clock::System,
        election,
        source,
        Box::new(|_| true),
        Arc::default(),
    );
    let pod = |uid: &str, ago: u64, kind: EventKind| Observation {
        kind,
        tag: format!("t-{uid}"),
        pod_name: format!("driver-{uid}"),
        pod_uid: uid.into(),
        state: AppState::Finished,
        has_app_selector: true,
        terminated_at: Some(SystemTime::now() - Duration::from_secs(ago)),
        deletion_requested: kind == EventKind::Delete,
        annotations: None,
    };
    for (uid, ago) in [("a", 30), ("b", 20), ("c", 10)] {
        sw.on_observe(&pod(uid, ago, EventKind::Update), false);
    }
    let a = Uid::new("a");
    assert!(
        sw.tracker.get(&a).unwrap().capped(),
        "over the cap: the oldest"
    );
    sw.on_observe(&pod("c", 10, EventKind::Delete), false);
    sw.recover();
    let rec = sw.tracker.get(&a).unwrap();
    assert_eq!(rec.stage(), Stage::Scheduled, "two left: it waits again");
    assert!(!rec.capped(), "and is no longer marked as taken by the cap");
    assert!(sw.why(rec).contains("retain period"), "{}", sw.why(rec));
}

/// Takes every request at once (the API server carries it out), then answers after `answer_after`.
struct SlowAnswer {
    answer_after: Duration,
    calls: Arc<Mutex<Vec<String>>>,
}

impl PodDeleter for SlowAnswer {
    fn delete(&self, name: &str, _uid: &str, _dry_run: bool) -> BoxFuture<'static, Outcome> {
        self.calls.lock().unwrap().push(name.to_owned());
        let wait = self.answer_after;
        Box::pin(async move {
            tokio::time::sleep(wait).await;
            Outcome {
                class: OutcomeClass::Accepted,
                code: Some(200),
                reason: String::new(),
                message: String::new(),
                retry_after: None,
                flow: None,
            }
        })
    }
}

/// Issue 34's matrix (etcd 3.4 cell): a leader's DELETE reached the API server, its lease lapsed
/// before the answer came (LEADING -> PAUSED: lease deadline near), and the leader resumed. The
/// dropped request went back to `Due` and was sent again at once: a second DELETE of the same
/// pod, answered 404 (2 of 60 pods in that run). Now the pod waits for its deletion to be seen;
/// the watch's DELETE event ends it and nothing is sent twice.
#[tokio::test(start_paused = true)]
async fn a_delete_dropped_unanswered_at_a_lease_lapse_is_not_sent_again_on_resume() {
    let (mut sw, signal) = manual_sweeper("lapse").await;
    let calls = Arc::new(Mutex::new(Vec::new()));
    sw.deleter = Some(Arc::new(SlowAnswer {
        answer_after: Duration::from_secs(3),
        calls: calls.clone(),
    }));
    // A lease of 1 s: the answer (3 s) comes after it.
    signal.lead_until(Instant::now() + Duration::from_secs(1), "won");
    let st = sw.election.status();
    sw.on_status(&st);
    let mut obs = Observation {
        kind: EventKind::Update,
        tag: "t".into(),
        pod_name: "driver-lapse".into(),
        pod_uid: "u-lapse".into(),
        state: AppState::Finished,
        has_app_selector: true,
        terminated_at: Some(SystemTime::now()),
        deletion_requested: false,
        annotations: None,
    };
    sw.on_observe(&obs, false);
    let uid = Uid::new("u-lapse");
    assert!(sw.make_due(uid.clone(), SystemTime::now()));
    sw.dispatch();
    assert_eq!(sw.inflight.len(), 1);
    // The request leaves (the API server carries it out, then takes 3 s to answer).
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(calls.lock().unwrap().len(), 1, "the DELETE left");
    // The lease lapses with the request unanswered: the task drops it.
    signal.pause("lease deadline near");
    let done = sw.inflight.join_next_with_id().await.expect("a task");
    sw.on_done(done);
    assert_eq!(calls.lock().unwrap().len(), 1, "the DELETE left once");
    // Resumed: nothing is sent again while the watch may still tell the deletion.
    signal.lead_until(
        Instant::now() + Duration::from_secs(3600),
        "confirmed again",
    );
    let st = sw.election.status();
    sw.on_status(&st);
    assert!(sw.inflight.is_empty(), "no second DELETE on resume");
    // The watch tells the deletion: the record ends, and its hold never sends anything.
    obs.kind = EventKind::Delete;
    sw.on_observe(&obs, false);
    tokio::time::sleep(UNANSWERED_HOLD + Duration::from_secs(1)).await;
    sw.on_timers();
    assert!(sw.inflight.is_empty());
    assert_eq!(
        calls.lock().unwrap().len(),
        1,
        "one DELETE of the pod in all"
    );
    assert!(
        sw.tracker.get(&uid).is_none(),
        "the record ended with its deletion"
    );
}

/// The other side of the hold: the DELETE dropped unanswered had not been carried out (no
/// deletion is seen), so once the hold has passed the pod is sent again and deleted.
#[tokio::test(start_paused = true)]
async fn a_delete_dropped_unanswered_whose_pod_stays_is_sent_again_after_the_hold() {
    let (mut sw, signal) = manual_sweeper("lapse2").await;
    let calls = Arc::new(Mutex::new(Vec::new()));
    sw.deleter = Some(Arc::new(SlowAnswer {
        answer_after: Duration::from_secs(3),
        calls: calls.clone(),
    }));
    signal.lead_until(Instant::now() + Duration::from_secs(1), "won");
    let st = sw.election.status();
    sw.on_status(&st);
    let obs = Observation {
        kind: EventKind::Update,
        tag: "t".into(),
        pod_name: "driver-stays".into(),
        pod_uid: "u-stays".into(),
        state: AppState::Finished,
        has_app_selector: true,
        terminated_at: Some(SystemTime::now()),
        deletion_requested: false,
        annotations: None,
    };
    sw.on_observe(&obs, false);
    let uid = Uid::new("u-stays");
    assert!(sw.make_due(uid.clone(), SystemTime::now()));
    sw.dispatch();
    tokio::time::sleep(Duration::from_millis(10)).await;
    signal.pause("lease deadline near");
    let done = sw.inflight.join_next_with_id().await.expect("a task");
    sw.on_done(done);
    signal.lead_until(
        Instant::now() + Duration::from_secs(3600),
        "confirmed again",
    );
    let st = sw.election.status();
    sw.on_status(&st);
    assert!(
        sw.inflight.is_empty(),
        "held while its deletion may still be seen"
    );
    tokio::time::sleep(UNANSWERED_HOLD + Duration::from_secs(1)).await;
    sw.on_timers();
    assert_eq!(sw.inflight.len(), 1, "sent again once the hold has passed");
    let done = sw.inflight.join_next_with_id().await.expect("a task");
    sw.on_done(done);
    assert_eq!(calls.lock().unwrap().len(), 2);
    assert!(sw.tracker.get(&uid).is_none(), "deleted the second time");
}

/// A closing scope sends nothing new, but waits (up to `SHUTDOWN_ANSWERS_WAIT`) for the DELETEs
/// it already sent and reports their answers before it gives up leadership: dropped, a DELETE
/// may still be carried out by the API server (answered 504 to a client that left) while the
/// successor sends the pod again (issue 35's CI: a failover mid-drain, one pod deleted by an
/// answer nobody read). An answer that does not come within the wait is dropped.
#[tokio::test(start_paused = true)]
async fn a_closing_scope_waits_for_the_answers_of_the_deletes_it_sent() {
    for answered in [true, false] {
        let (h, gate, metrics, _) = gated_scope("closing").await;
        for i in 0..2 {
            h.tx.send(Command::Observe(finished_long_ago(i))).unwrap();
        }
        // The pods' DELETEs leave (as many as the scope's pace lets through at once) and wait at
        // the gate; the other pod stays due.
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            if metrics.snapshot()["inflight"].as_u64() > Some(0) {
                break;
            }
        }
        let sent = metrics.snapshot()["deletes_sent"].as_u64().unwrap_or(0);
        assert!(sent > 0, "{}", metrics.snapshot());
        let closing = Instant::now();
        h.tx.send(Command::Shutdown).unwrap();
        if answered {
            // The answers come half a second into the close.
            tokio::time::sleep(Duration::from_millis(500)).await;
            gate.add_permits(4);
        }
        let _ = h.task.await;
        let took = closing.elapsed();
        let accepted = metrics.outcome_count(OutcomeClass::Accepted);
        if answered {
            assert_eq!(accepted, sent, "{}", metrics.snapshot());
            assert!(took < SHUTDOWN_ANSWERS_WAIT, "closed after {took:?}");
        } else {
            assert_eq!(accepted, 0, "{}", metrics.snapshot());
            assert!(took >= SHUTDOWN_ANSWERS_WAIT, "closed after {took:?}");
        }
        assert_eq!(
            metrics.snapshot()["deletes_sent"].as_u64(),
            Some(sent),
            "nothing new is sent on close: {}",
            metrics.snapshot()
        );
    }
}
