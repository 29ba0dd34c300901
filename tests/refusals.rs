//! Issue 32 §4, on paused time: refused DELETEs (403, 422) count against the pace. A scope whose
//! DELETEs are refused sends one probe per retry interval instead of every due pod, a new
//! leader's term starts from one DELETE in flight, the first accepted DELETE resumes the full
//! pace without a restart, and a leader whose account the API server says may delete (the
//! refusal comes from admission) does not step down. The same on the real kube-apiserver with a
//! fleet electing through ZooKeeper: tests/emergency_stop.rs.

mod common;

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::fixture::{start, IDLE_RELEASE, STEP_DOWN_AFTER};
use common::manual::ManualBackend;
use futures::future::BoxFuture;
use podsweep::clock::Clock;
use podsweep::config::keys;
use podsweep::deleter::{Access, Outcome, OutcomeClass, PodDeleter};
use podsweep::engine::Engine;
use podsweep::model::{AppState, EventKind};
use podsweep::scope::Scope;
use podsweep::sweeper::DeleterSource;
use tokio::time::Instant;

/// Answers every DELETE with the status it is set to (200, 403, 422) and records each one; its
/// access review answers what it is told.
struct Switch {
    code: AtomicU16,
    access: Mutex<Access>,
    /// Every DELETE: when, which pod, the status it got.
    sent: Mutex<Vec<(Instant, String, u16)>>,
}

impl Switch {
    fn new(code: u16) -> Arc<Self> {
        Arc::new(Switch {
            code: AtomicU16::new(code),
            access: Mutex::new(Access::Unknown("not asked".into())),
            sent: Mutex::default(),
        })
    }

    fn set(&self, code: u16) {
        self.code.store(code, Ordering::SeqCst);
    }

    /// DELETEs sent since `t0` answered `code`.
    fn count(&self, code: u16, t0: Instant) -> usize {
        let sent = self.sent.lock().unwrap();
        sent.iter()
            .filter(|(t, _, c)| *c == code && *t >= t0)
            .count()
    }

    fn source(self: &Arc<Self>) -> DeleterSource {
        let me = self.clone();
        Arc::new(move |_| {
            let d: Arc<dyn PodDeleter> = me.clone();
            Box::pin(async move { Ok(d) })
        })
    }
}

impl PodDeleter for Switch {
    fn delete(&self, _name: &str, uid: &str, _dry_run: bool) -> BoxFuture<'static, Outcome> {
        let code = self.code.load(Ordering::SeqCst);
        self.sent
            .lock()
            .unwrap()
            .push((Instant::now(), uid.to_owned(), code));
        let class = match code {
            200 => OutcomeClass::Accepted,
            403 => OutcomeClass::Forbidden,
            _ => OutcomeClass::Other,
        };
        Box::pin(async move {
            Outcome {
                class,
                code: Some(code),
                reason: if code == 403 { "Forbidden" } else { "Invalid" }.into(),
                message: "pods \"p\" is forbidden: the test says no".into(),
                retry_after: None,
                flow: None,
            }
        })
    }

    fn review(&self) -> BoxFuture<'static, Access> {
        let access = self.access.lock().unwrap().clone();
        Box::pin(async move { access })
    }
}

fn scope() -> Scope {
    Scope::new(None, Some("spark"))
}

fn wall0() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

/// An engine on a hand-driven election, with `n` pods that ended an hour ago.
async fn engine_with_pods(
    deleter: &Arc<Switch>,
    n: usize,
    extra: &[(&str, &str)],
) -> (Engine, ManualBackend) {
    let backend = ManualBackend::default();
    let handle = ManualBackend {
        signals: backend.signals.clone(),
        ended: backend.ended.clone(),
    };
    let conf: Vec<(&str, &str)> = [
        (keys::CLEANUP_KIND, "ALL"),
        (keys::RETAIN_PERIOD, "PT1M"),
        (IDLE_RELEASE, "P365D"),
        (STEP_DOWN_AFTER, "P365D"),
    ]
    .into_iter()
    .chain(extra.iter().copied())
    .collect();
    let e = common::fixture::engine(&conf, backend, deleter.source(), Clock::derived(wall0()));
    for i in 0..n {
        let mut o = common::fixture::observation(
            &format!("p{i:03}"),
            EventKind::Update,
            AppState::Finished,
        );
        o.terminated_at = Some(wall0() - Duration::from_secs(3600));
        e.observe(scope(), o).unwrap();
    }
    settle().await;
    (e, handle)
}

async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

fn lead(backend: &ManualBackend) {
    let signal = backend
        .signals
        .lock()
        .unwrap()
        .last()
        .cloned()
        .expect("a campaign");
    signal.lead_until(Instant::now() + Duration::from_secs(24 * 3600), "test");
}

fn status(e: &Engine) -> serde_json::Value {
    serde_json::from_str(&e.status_json(&scope())).unwrap()
}

/// 200 due pods drained at 20 DELETEs a second; after 2 s every DELETE is refused with `code`
/// for five minutes, then accepted again. While refused, the scope sends at most a handful of
/// DELETEs (one probe per retry interval), not every due pod again and again; once accepted,
/// every pod goes, once, without a restart.
async fn refused_mid_drain(code: u16, bound: usize) {
    start();
    let sw = Switch::new(200);
    let (e, backend) = engine_with_pods(&sw, 200, &[(keys::RATE_QPS, "20")]).await;
    let t0 = Instant::now();
    lead(&backend);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = sw.count(200, t0);
    sw.set(code);
    let cut = Instant::now();
    tokio::time::sleep(Duration::from_secs(300)).await;
    let refused = sw.count(code, cut);
    let st = status(&e);
    println!(
        "{code}: {before} accepted before the cut, {refused} refused in 300 s (bound {bound}); \
         pause {} ({}), inflight_limit {}",
        st["pause_reason"], st["pause_detail"], st["inflight_limit"]
    );
    assert!(
        refused <= bound,
        "{refused} refused DELETEs in 300 s > {bound}"
    );
    assert!(refused >= 3, "it kept probing: {refused}");
    assert_eq!(st["pause_reason"], "backoff", "{st}");
    assert!(
        st["pause_detail"]
            .as_str()
            .is_some_and(|d| d.contains("DELETEs are refused")),
        "{st}"
    );
    // Given back: the next probe is accepted and the rest follow at the full pace.
    sw.set(200);
    let back = Instant::now();
    while sw.count(200, t0) < 200 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            back.elapsed() < Duration::from_secs(180),
            "{} of 200 deleted 180 s after the refusals ended",
            sw.count(200, t0)
        );
    }
    let took = back.elapsed();
    let accepted: Vec<String> = {
        let sent = sw.sent.lock().unwrap();
        sent.iter()
            .filter(|s| s.2 == 200)
            .map(|s| s.1.clone())
            .collect()
    };
    let distinct: std::collections::BTreeSet<&String> = accepted.iter().collect();
    println!("resumed: the last pod went {took:?} after the refusals ended");
    assert_eq!(distinct.len(), 200, "every pod once");
    assert_eq!(accepted.len(), 200, "none twice");
    settle().await;
    assert_eq!(status(&e)["tracked"], 0);
}

#[tokio::test(start_paused = true)]
async fn a_scope_refused_mid_drain_probes_instead_of_resending_every_pod() {
    // The first refusal slows to one DELETE in flight, the second opens the episode, then one
    // probe per forbidden.retryInterval (1 min +-10 %): at most 2 + 6 in five minutes.
    refused_mid_drain(403, 10).await;
}

#[tokio::test(start_paused = true)]
async fn a_scope_refused_otherwise_probes_with_backoff() {
    // 422: probes after 1, 2, 4, ... s up to retry.maxWait (1 min): 2 + 7 + 4 in five minutes.
    refused_mid_drain(422, 16).await;
}

/// Server A is refused and leads no more; server B, which tracks the same 100 due pods and never
/// sent a DELETE, takes over: its term starts from one DELETE in flight, so it sends two (the
/// slow start, then the episode), not 100.
#[tokio::test(start_paused = true)]
async fn a_new_leader_after_refusals_starts_with_one_delete_in_flight() {
    start();
    let (a_del, b_del) = (Switch::new(403), Switch::new(403));
    let (a, a_backend) = engine_with_pods(&a_del, 100, &[]).await;
    let (b, b_backend) = engine_with_pods(&b_del, 100, &[]).await;
    let t0 = Instant::now();
    lead(&a_backend);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let a_sent = a_del.count(403, t0);
    a_backend
        .signals
        .lock()
        .unwrap()
        .last()
        .unwrap()
        .follow("test: another server leads");
    let t1 = Instant::now();
    lead(&b_backend);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let b_sent = b_del.count(403, t1);
    println!("A sent {a_sent} in its first 10 s, B {b_sent} in its first 10 s");
    assert!(a_sent <= 2, "A: {a_sent}");
    assert!(b_sent <= 2, "B: {b_sent}");
    assert_eq!(status(&b)["tracked"], 100);
    a.close_async(Duration::from_secs(5)).await;
    b.close_async(Duration::from_secs(5)).await;
}

/// A leader whose DELETEs are all refused although the API server says its account may delete
/// (admission refuses them, and would refuse every server) does not step down after
/// `ha.stepDownAfter`: it stays, unhealthy, saying why. One whose account RBAC denies steps
/// down, as before.
#[tokio::test(start_paused = true)]
async fn a_step_down_that_cannot_help_does_not_happen() {
    start();
    for (access, steps_down) in [
        (Access::Allowed, false),
        (Access::Denied("no RBAC rule".into()), true),
    ] {
        let sw = Switch::new(403);
        *sw.access.lock().unwrap() = access.clone();
        let (e, backend) = engine_with_pods(&sw, 20, &[(STEP_DOWN_AFTER, "PT10S")]).await;
        lead(&backend);
        let t0 = Instant::now();
        let decided = loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let st = status(&e);
            if backend.ended.load(Ordering::SeqCst) > 0 || st["healthy"] == false {
                break st;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "no decision: {st}");
        };
        let reason = decided["health_reason"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let ended = backend.ended.load(Ordering::SeqCst);
        println!(
            "{access:?}: {:?} after {:?}: campaigns ended {ended}, {reason}",
            decided["leadership"],
            t0.elapsed()
        );
        assert!(reason.contains("completed no DELETE"), "{decided}");
        if steps_down {
            assert_eq!(ended, 1, "{decided}");
        } else {
            assert_eq!(ended, 0, "{decided}");
            assert!(reason.contains("not stepping down"), "{decided}");
            assert_eq!(decided["leadership"], "LEADING");
            // And still not one window later.
            tokio::time::sleep(Duration::from_secs(15)).await;
            assert_eq!(backend.ended.load(Ordering::SeqCst), 0);
        }
        e.close_async(Duration::from_secs(5)).await;
    }
}
