//! Issue 10, item 9, in a process of its own: it counts every WARN and ERROR the process-wide log
//! layer delivers, so no other test may log meanwhile.

mod common;

use std::time::Duration;

use common::fixture::{capture, start, status_reply, Fixture};
use podsweep::config::keys;
use podsweep::model::EventKind;
use tokio::time::Instant;

/// Item 9: an expired token (401) and a failing API server (503) give one summary line per class
/// per scope per interval (`failures.summaryInterval`, PT1M here), quoting the first pod, not
/// one line per pod per retry.
#[tokio::test(start_paused = true)]
async fn failures_are_summarised_per_scope_not_logged_per_pod() {
    start();
    let logs = capture();
    // A bucket that never empties: the pacing is not what this test is about.
    let mut f = Fixture::with_conf(
        "ALL",
        &[(keys::RATE_QPS, "1000"), (keys::RATE_BURST, "1000")],
    )
    .await;
    f.lead().await;
    f.observe_finished("s9-", 30, EventKind::Update, 600);
    let t0 = Instant::now();
    let mut answered = 0;
    let mut last = Duration::ZERO;
    while Instant::now().duration_since(t0) < Duration::from_secs(600) {
        let Some((path, _, send)) = f.next_delete(Duration::from_secs(120)).await else {
            break;
        };
        let n: usize = path.rsplit('-').next().unwrap().parse().unwrap();
        if n.is_multiple_of(2) {
            send.send_response(status_reply(401, "Unauthorized", None));
        } else {
            send.send_response(status_reply(503, "ServiceUnavailable", None));
        }
        answered += 1;
        last = Instant::now().duration_since(t0);
    }
    // 401s are refusals (issue 32: one probe per forbidden.retryInterval while they last), 503s
    // are retried with backoff: fewer answers than one per retry of each pod, but to the end.
    assert!(
        answered >= 10 && last >= Duration::from_secs(540),
        "retried all along: {answered} answers, the last at {last:?}"
    );
    let ours = logs.messages(2, "driver-s9-");
    let summaries = ours.iter().filter(|(_, m)| m.contains("pod(s)")).count();
    assert_eq!(summaries, ours.len(), "only summaries: {ours:#?}");
    assert!(
        (2..=2 * 11).contains(&summaries),
        "one per class per minute at most: {summaries}"
    );
    assert!(ours.iter().any(|(l, m)| *l == 1 && m.contains("401")));
    assert!(ours.iter().any(|(l, m)| *l == 2 && m.contains("503")));
}
