//! Retention beyond Kyuubi's one retain period, on paused time with a mocked API server: the
//! failed drivers' own period, per-pod annotations (an override bounded both ways, an opt-out,
//! a malformed value) and the per-scope cap (oldest first, whatever the annotations say).

mod common;

use std::time::Duration;

use common::fixture::{capture, start, status_reply, Fixture};
use podsweep::config::keys;
use podsweep::model::{AppState, EventKind, PodAnnotations};

/// Answers every DELETE that arrives within `within` with 200; returns the pod names in order.
async fn deletes(f: &mut Fixture, within: Duration) -> Vec<String> {
    let mut out = Vec::new();
    let until = tokio::time::Instant::now() + within;
    loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        let Some((path, body, send)) = f.next_delete(left).await else {
            return out;
        };
        assert!(body["preconditions"]["uid"].is_string(), "{body}");
        send.send_response(status_reply(200, "", None));
        out.push(path.rsplit('/').next().unwrap_or_default().to_owned());
        f.settle().await;
    }
}

fn annotated(
    f: &Fixture,
    uid: &str,
    state: AppState,
    retain: Option<&str>,
    keep: Option<&str>,
) -> podsweep::model::Observation {
    let mut o = f.pod(uid, EventKind::Update, state, Some(0));
    o.annotations = PodAnnotations::of(retain, keep);
    o
}

#[tokio::test(start_paused = true)]
async fn failed_drivers_keep_their_own_retain_period() {
    start();
    let mut f = Fixture::with_conf("ALL", &[(keys::FAILED_RETAIN_PERIOD, "PT10M")]).await;
    f.lead().await;
    f.observe(f.pod("ok", EventKind::Update, AppState::Finished, Some(0)));
    f.observe(f.pod("bad", EventKind::Update, AppState::Failed, Some(0)));
    f.observe(f.pod("oom", EventKind::Update, AppState::Killed, Some(0)));
    assert!(deletes(&mut f, Duration::from_secs(59)).await.is_empty());
    assert_eq!(deletes(&mut f, Duration::from_secs(2)).await, ["driver-ok"]);
    assert!(deletes(&mut f, Duration::from_secs(530)).await.is_empty());
    let mut late = deletes(&mut f, Duration::from_secs(12)).await;
    late.sort();
    assert_eq!(late, ["driver-bad", "driver-oom"]);
}

#[tokio::test(start_paused = true)]
async fn kyuubis_one_period_when_the_key_is_unset() {
    start();
    let mut f = Fixture::new("ALL").await;
    f.lead().await;
    f.observe(f.pod("ok", EventKind::Update, AppState::Finished, Some(0)));
    f.observe(f.pod("bad", EventKind::Update, AppState::Failed, Some(0)));
    assert!(deletes(&mut f, Duration::from_secs(59)).await.is_empty());
    let mut both = deletes(&mut f, Duration::from_secs(2)).await;
    both.sort();
    assert_eq!(both, ["driver-bad", "driver-ok"]);
}

#[tokio::test(start_paused = true)]
async fn annotations_lengthen_within_the_maximum_and_never_shorten() {
    start();
    let logs = capture();
    let mut f = Fixture::with_conf(
        "ALL",
        &[
            (keys::ANNOTATIONS_ENABLED, "true"),
            (keys::ANNOTATIONS_MAX_RETAIN, "PT30M"),
        ],
    )
    .await;
    f.lead().await;
    f.observe(annotated(
        &f,
        "five",
        AppState::Finished,
        Some("PT5M"),
        None,
    ));
    f.observe(annotated(
        &f,
        "long",
        AppState::Finished,
        Some("PT2H"),
        None,
    ));
    f.observe(annotated(
        &f,
        "short",
        AppState::Finished,
        Some("1000"),
        None,
    ));
    f.observe(annotated(&f, "kept", AppState::Failed, None, Some("true")));
    f.observe(annotated(
        &f,
        "garbled",
        AppState::Finished,
        Some("soon"),
        None,
    ));
    // Taken before the next one (events of a pod waiting together are merged into one).
    f.settle().await;
    f.observe(annotated(
        &f,
        "garbled",
        AppState::Finished,
        Some("soon"),
        None,
    ));
    // The operator's minute, for the short one and the unreadable one.
    assert!(deletes(&mut f, Duration::from_secs(59)).await.is_empty());
    let mut first = deletes(&mut f, Duration::from_secs(2)).await;
    first.sort();
    assert_eq!(first, ["driver-garbled", "driver-short"]);
    assert!(deletes(&mut f, Duration::from_secs(238)).await.is_empty());
    assert_eq!(
        deletes(&mut f, Duration::from_secs(2)).await,
        ["driver-five"]
    );
    // PT2H counts as the maximum, PT30M.
    assert!(deletes(&mut f, Duration::from_secs(1496)).await.is_empty());
    assert_eq!(
        deletes(&mut f, Duration::from_secs(4)).await,
        ["driver-long"]
    );
    // keep: not in hours (the test's lease lasts a day).
    assert!(deletes(&mut f, Duration::from_secs(6 * 3600))
        .await
        .is_empty());
    let st = f.status();
    assert_eq!(st["kept"], 1, "{st}");
    assert_eq!(st["annotations_malformed"], 2, "{st}");
    let warns = logs.messages(2, "podsweep.org/retain-period=\"soon\"");
    assert_eq!(warns.len(), 1, "one WARN per pod: {warns:?}");
    // Turned off, the annotation is lifted: the kept pod is long overdue.
    f.observe(annotated(&f, "kept", AppState::Failed, None, Some("false")));
    assert_eq!(
        deletes(&mut f, Duration::from_secs(1)).await,
        ["driver-kept"]
    );
}

#[tokio::test(start_paused = true)]
async fn annotations_are_ignored_unless_enabled() {
    start();
    let mut f = Fixture::new("ALL").await;
    f.lead().await;
    f.observe(annotated(
        &f,
        "kept",
        AppState::Finished,
        Some("PT1H"),
        Some("true"),
    ));
    assert!(deletes(&mut f, Duration::from_secs(59)).await.is_empty());
    assert_eq!(
        deletes(&mut f, Duration::from_secs(2)).await,
        ["driver-kept"]
    );
}

#[tokio::test(start_paused = true)]
async fn the_cap_deletes_the_oldest_first_whatever_the_annotations_say() {
    start();
    let mut f = Fixture::with_conf(
        "ALL",
        &[
            (keys::RETAIN_PERIOD, "PT1H"),
            (keys::MAX_TERMINATED_PODS, "3"),
            (keys::ANNOTATIONS_ENABLED, "true"),
        ],
    )
    .await;
    f.lead().await;
    // Five pods that ended 50, 40, 30, 20 and 10 s ago (p0 to p4), the oldest kept by its
    // annotation, fed newest first, then in a shuffled order: whatever the order they arrive
    // in, the two oldest go (a cap that took them in arrival order would take p4 and p3, or
    // p2 and p4).
    let ages = [50u64, 40, 30, 20, 10];
    for i in [4usize, 3, 2, 1, 0] {
        let mut o = f.pod(
            &format!("p{i}"),
            EventKind::Update,
            AppState::Finished,
            Some(ages[i]),
        );
        if i == 0 {
            o.annotations = PodAnnotations::of(None, Some("true"));
        }
        f.observe(o);
    }
    let mut gone = deletes(&mut f, Duration::from_secs(1)).await;
    gone.sort();
    assert_eq!(gone, ["driver-p0", "driver-p1"], "the two oldest, at once");
    let st = f.status();
    assert_eq!(st["capped"], 2, "{st}");
    assert_eq!(st["tracked"], 3, "{st}");
    // A sixth pod, and a seventh older than every pod left: the oldest of those left go, each
    // in its turn (the seventh at once, then p2).
    f.observe(f.pod("p5", EventKind::Update, AppState::Finished, Some(0)));
    assert_eq!(deletes(&mut f, Duration::from_secs(1)).await, ["driver-p2"]);
    f.observe(f.pod("p6", EventKind::Update, AppState::Finished, Some(45)));
    assert_eq!(deletes(&mut f, Duration::from_secs(1)).await, ["driver-p6"]);
    // The rest wait for their hour.
    assert!(deletes(&mut f, Duration::from_secs(3000)).await.is_empty());
}

/// A cap fed in a shuffled order, many pods at once: exactly the oldest go, whatever the order
/// of arrival.
#[tokio::test(start_paused = true)]
async fn the_cap_takes_the_oldest_whatever_the_order_of_arrival() {
    start();
    let mut f = Fixture::with_conf(
        "ALL",
        &[
            (keys::RETAIN_PERIOD, "PT1H"),
            (keys::MAX_TERMINATED_PODS, "10"),
            (keys::RATE_QPS, "1000"),
        ],
    )
    .await;
    f.lead().await;
    // 40 pods that ended 1..=40 minutes ago, in an order that is neither oldest nor newest first.
    let order: Vec<u64> = (0..40u64).map(|i| (i * 17) % 40).collect();
    for &i in &order {
        f.observe(f.pod(
            &format!("q{i:02}"),
            EventKind::Update,
            AppState::Finished,
            Some(60 * (i + 1)),
        ));
    }
    let mut gone = deletes(&mut f, Duration::from_secs(5)).await;
    gone.sort();
    let oldest: Vec<String> = (10..40u64).map(|i| format!("driver-q{i:02}")).collect();
    assert_eq!(gone, oldest, "the 30 oldest, not the first 30 to arrive");
    assert_eq!(f.status()["tracked"], 10);
}

/// A drain of 10,000 overdue pods with Events on: every pod is deleted, and the Events stay
/// within `events.qps` (a burst of 10, then 5 a second), the rest counted as dropped.
#[tokio::test(start_paused = true)]
async fn events_are_bounded_during_a_drain() {
    use common::manual::ManualBackend;
    use common::recorder::{self, Recorder};
    use podsweep::clock::Clock;
    use podsweep::scope::Scope;
    use std::sync::Arc;

    start();
    let rec = Arc::new(Recorder::default());
    let backend = ManualBackend::default();
    let signals = backend.signals.clone();
    let wall0 = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let engine = common::fixture::engine(
        &[
            (keys::CLEANUP_KIND, "ALL"),
            (keys::RETAIN_PERIOD, "PT1M"),
            (keys::EVENTS_ENABLED, "true"),
            (keys::RATE_QPS, "1000"),
        ],
        backend,
        recorder::source(rec.clone()),
        Clock::derived(wall0),
    );
    let scope = Scope::new(None, Some("spark"));
    let n = 10_000;
    for i in 0..n {
        let mut o =
            common::fixture::observation(&format!("p{i}"), EventKind::Update, AppState::Finished);
        o.terminated_at = Some(wall0 - Duration::from_secs(3600));
        engine.observe(scope.clone(), o).unwrap();
    }
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    let signal = signals.lock().unwrap().last().cloned().expect("a campaign");
    signal.lead_until(
        tokio::time::Instant::now() + Duration::from_secs(3600),
        "test",
    );
    let t0 = tokio::time::Instant::now();
    while rec.count() < n {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "{} deleted",
            rec.count()
        );
    }
    let took = t0.elapsed();
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    let st: serde_json::Value = serde_json::from_str(&engine.status_json(&scope)).unwrap();
    let sent = rec.events.lock().unwrap().len() as u64;
    let bound = 10 + (5.0 * took.as_secs_f64()).ceil() as u64;
    println!(
        "{n} deleted in {took:?} (paused time); {sent} Events, bound {bound}; status {}",
        st["events_dropped"]
    );
    assert!(sent <= bound, "{sent} Events > {bound}");
    assert!(sent >= 10, "{sent}");
    assert_eq!(
        st["events_sent"].as_u64().unwrap() + st["events_dropped"].as_u64().unwrap(),
        n as u64
    );
}

/// Issue 32: `keep` arrives while the pod is due and held back (its leader's lease is being
/// renewed), right behind another pod's event that makes the leader send: the pod's newest
/// events are read before its DELETE leaves, and it stays.
#[tokio::test(start_paused = true)]
async fn keep_added_while_the_pod_is_due_saves_it() {
    start();
    let mut f = Fixture::with_conf(
        "ALL",
        &[
            (keys::ANNOTATIONS_ENABLED, "true"),
            (keys::ANNOTATIONS_MAX_RETAIN, "PT30M"),
        ],
    )
    .await;
    let signal = f.signal().await;
    signal.lead_until(
        tokio::time::Instant::now() + Duration::from_millis(500),
        "test",
    );
    f.settle().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Due (ended 2 min ago, retain 1 min), but the lease has lapsed: it waits.
    f.observe(f.pod("x", EventKind::Update, AppState::Finished, Some(120)));
    f.settle().await;
    assert_eq!(f.status()["due"], 1);
    // The lease is renewed; before the leader looks again, another pod is due and x gets `keep`.
    signal.extend_until(tokio::time::Instant::now() + Duration::from_secs(24 * 3600));
    f.observe(f.pod("y", EventKind::Update, AppState::Finished, Some(120)));
    f.observe(annotated(&f, "x", AppState::Finished, None, Some("true")));
    assert_eq!(
        deletes(&mut f, Duration::from_secs(3600)).await,
        ["driver-y"]
    );
    let st = f.status();
    assert_eq!(
        (st["tracked"].as_u64(), st["kept"].as_u64()),
        (Some(1), Some(1)),
        "{st}"
    );
}

/// Issue 32: a longer retain period arrives while the pod waits for the retry of a failed
/// DELETE: the retry does not go, the pod goes at its new deadline.
#[tokio::test(start_paused = true)]
async fn a_longer_period_added_during_a_retry_wait_is_honoured() {
    start();
    let mut f = Fixture::with_conf(
        "ALL",
        &[
            (keys::ANNOTATIONS_ENABLED, "true"),
            (keys::ANNOTATIONS_MAX_RETAIN, "PT30M"),
        ],
    )
    .await;
    f.lead().await;
    f.observe(f.pod("x", EventKind::Update, AppState::Finished, Some(120)));
    let (_, _, send) = f.next_delete(Duration::from_millis(10)).await.unwrap();
    send.send_response(status_reply(500, "InternalError", None));
    f.settle().await;
    f.observe(annotated(&f, "x", AppState::Finished, Some("PT20M"), None));
    // 20 min from its end, 2 min ago: nothing for 17 min, then it goes.
    assert!(deletes(&mut f, Duration::from_secs(17 * 60))
        .await
        .is_empty());
    assert_eq!(
        deletes(&mut f, Duration::from_secs(120)).await,
        ["driver-x"]
    );
}

/// Issue 32: `keep` arrives while the pod's DELETE is in flight: that DELETE is cancelled (here
/// it has reached the mock, so its answer is lost), and the pod is never sent again.
#[tokio::test(start_paused = true)]
async fn keep_added_while_the_delete_is_in_flight_stops_any_retry() {
    start();
    let mut f = Fixture::with_conf(
        "ALL",
        &[
            (keys::ANNOTATIONS_ENABLED, "true"),
            (keys::ANNOTATIONS_MAX_RETAIN, "PT30M"),
        ],
    )
    .await;
    f.lead().await;
    f.observe(f.pod("x", EventKind::Update, AppState::Finished, Some(120)));
    let (_, _, send) = f.next_delete(Duration::from_millis(10)).await.unwrap();
    f.observe(annotated(&f, "x", AppState::Finished, None, Some("true")));
    f.settle().await;
    send.send_response(status_reply(503, "ServiceUnavailable", None));
    assert!(deletes(&mut f, Duration::from_secs(3600)).await.is_empty());
    assert_eq!(f.status()["kept"], 1, "{}", f.status());
}

/// Issue 32: a retain period longer than 365 days is readable: it asks for the most there is,
/// `annotations.maxRetainPeriod`, as documented (it read as malformed, the operator's period).
#[tokio::test(start_paused = true)]
async fn an_annotation_beyond_a_year_counts_as_the_maximum() {
    start();
    let mut f = Fixture::with_conf(
        "ALL",
        &[
            (keys::ANNOTATIONS_ENABLED, "true"),
            (keys::ANNOTATIONS_MAX_RETAIN, "PT30M"),
        ],
    )
    .await;
    f.lead().await;
    for (uid, v) in [("year", "P400D"), ("digits", "99999999999999999999999")] {
        f.observe(annotated(&f, uid, AppState::Finished, Some(v), None));
    }
    assert!(deletes(&mut f, Duration::from_secs(29 * 60))
        .await
        .is_empty());
    let mut both = deletes(&mut f, Duration::from_secs(2 * 60)).await;
    both.sort();
    assert_eq!(both, ["driver-digits", "driver-year"]);
    assert_eq!(f.status()["annotations_malformed"], 0);
}

/// Issue 32 §7: malformed annotations of several shapes each count as absent (the operator's
/// minute), are counted and warned about once per pod; a bad `keep` does not throw away a good
/// period beside it.
#[tokio::test(start_paused = true)]
async fn malformed_annotations_of_every_shape_count_as_absent() {
    start();
    let logs = capture();
    let mut f = Fixture::with_conf(
        "ALL",
        &[
            (keys::ANNOTATIONS_ENABLED, "true"),
            (keys::ANNOTATIONS_MAX_RETAIN, "PT30M"),
        ],
    )
    .await;
    f.lead().await;
    let periods = [
        "soon", "-PT5M", "PT", "", "  ", "1.5", "PT1.5M", "P1Y", "P1W", "5m", "0", "PT0S", "PT5M1H",
    ];
    for (i, v) in periods.iter().enumerate() {
        f.observe(annotated(
            &f,
            &format!("bad-period-{i:02}"),
            AppState::Finished,
            Some(v),
            None,
        ));
    }
    for (i, v) in ["yes", "1", "", "no", "TRUE!"].iter().enumerate() {
        f.observe(annotated(
            &f,
            &format!("bad-keep-{i}"),
            AppState::Finished,
            None,
            Some(v),
        ));
    }
    // A bad keep beside a good period: the period counts.
    f.observe(annotated(
        &f,
        "mixed",
        AppState::Finished,
        Some("PT5M"),
        Some("maybe"),
    ));
    let n = periods.len() + 5;
    assert!(deletes(&mut f, Duration::from_secs(59)).await.is_empty());
    let first = deletes(&mut f, Duration::from_secs(2)).await;
    assert_eq!(first.len(), n, "the operator's minute for each: {first:?}");
    assert!(!first.contains(&"driver-mixed".to_owned()));
    assert!(deletes(&mut f, Duration::from_secs(236)).await.is_empty());
    assert_eq!(
        deletes(&mut f, Duration::from_secs(4)).await,
        ["driver-mixed"]
    );
    let st = f.status();
    assert_eq!(st["annotations_malformed"], n as u64 + 1, "{st}");
    // One WARN per pod (at most 10 at once, then one a minute with a count of those left out).
    let warns = logs.messages(2, "which podsweep cannot read");
    let ours = warns
        .iter()
        .filter(|(_, m)| m.contains("driver-bad-") || m.contains("driver-mixed"))
        .count();
    assert_eq!(ours, 10, "the first ten, at once: {warns:#?}");
}
