//! Issue 35 §4: what each periodic ZooKeeper request buys, against a real ZooKeeper server.
//!
//! A session sends three kinds of periodic packets: the client library's pings (they keep the
//! session alive on the server and tell a dead connection within the connection timeout), and
//! podsweep's heartbeat, a `sync` every third of the session timeout `T`, whose reply proves the
//! server reached the quorum after the request was sent and so extends a leader's lease to
//! `sent + 2/3 T`. Only a leader acts on that lease; a session that leads no scope needs none, so
//! it sends no heartbeat (its pings are all the server hears). What the heartbeats guard must still
//! hold: a successor that took over keeps extending its lease past the first one its seat's
//! confirmation gave, and a deleted latch node ends its leader's term at once, long before any
//! lease or session would run out (the frozen leader that wakes without the right to act, and the
//! crashed one replaced after its session expired: `tests/zk_election.rs`'s election suite).
//!
//! Each test starts its own server and takes `SERIAL`. `--nocapture` shows the figures (lines
//! starting with `figure:`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use podsweep::election::{Backend, ElectionHandle, Leadership};
use podsweep::scope::Scope;
use tokio::time::{sleep, Instant};

use common::election::{init_logs, wait_candidates, wait_state, ElectionServer, SERIAL};
use common::zk::{four_letter, inspector, latch_dir, ZkOptions, ZkServer};

/// The session timeout asked for and granted (the server allows up to 30 ticks of 200 ms):
/// heartbeats every 2 s, a lease of 4 s; the client pings after 0.9 s without sending (3 of its
/// ticks of `T`/20, as its connection timeout, 15 s, is above 3/5 `T`).
const T: Duration = Duration::from_secs(6);

fn server() -> ZkServer {
    ZkServer::start_with(ZkOptions {
        max_session: Duration::from_secs(6),
        ..ZkOptions::default()
    })
}

fn backend(server: &ZkServer) -> Arc<dyn Backend> {
    ZkServer::backend(&server.addr(), T)
}

/// Packets the server received from session `sid` so far (`recved` of its connection in `cons`).
fn received_from(port: u16, sid: i64) -> Option<u64> {
    let wanted = format!("sid=0x{:x}", sid as u64);
    let reply = four_letter(port, "cons")?;
    let line = reply.lines().find(|l| l.contains(&wanted))?;
    line.split([',', '('])
        .find_map(|f| f.trim().strip_prefix("recved="))
        .and_then(|v| v.parse().ok())
}

/// Two servers, `a` leading and `b` waiting; the scope's candidates (leader first).
async fn leader_and_follower(
    server: &ZkServer,
    scope: &Scope,
) -> (ElectionHandle, ElectionHandle, i64, i64) {
    let a = ElectionHandle::start(&backend(server), scope.clone(), "server-a".into());
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let b = ElectionHandle::start(&backend(server), scope.clone(), "server-b".into());
    let found = wait_candidates(server, scope, 2).await;
    assert_eq!(found[0].identity, "server-a", "{found:?}");
    wait_state(&b, Leadership::Following, Duration::from_secs(15)).await;
    (a, b, found[0].owner, found[1].owner)
}

/// The follower's session sends pings only: at most one per 0.9 s of the window (before issue 35
/// it sent a `sync` and an `exists` every 2 s besides, and a ping between them: 3 packets in 2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_that_leads_nothing_sends_no_heartbeat() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = server();
    let scope = Scope::new(Some("kind-dev"), Some("heartbeat"));
    let (a, b, leader_sid, follower_sid) = leader_and_follower(&server, &scope).await;
    let port = server.port();
    let window = Duration::from_secs(12);
    let (l0, f0) = (
        received_from(port, leader_sid).expect("the leader's connection in cons"),
        received_from(port, follower_sid).expect("the follower's connection in cons"),
    );
    let t0 = Instant::now();
    let mut leader_kept_acting = true;
    while t0.elapsed() < window {
        leader_kept_acting &= a.may_act();
        sleep(Duration::from_millis(100)).await;
    }
    let (l1, f1) = (
        received_from(port, leader_sid).unwrap_or(0),
        received_from(port, follower_sid).unwrap_or(0),
    );
    let per_min = |n: u64| (n as f64 * 60.0 / t0.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    eprintln!(
        "figure: over {:?} at a {T:?} session, ZooKeeper received {} packets from the leader's \
         session ({}/min) and {} from the follower's ({}/min)",
        t0.elapsed(),
        l1 - l0,
        per_min(l1 - l0),
        f1 - f0,
        per_min(f1 - f0)
    );
    // Pings alone: one per 0.9 s of silence at most (and one more at either end of the window).
    let pings_at_most = (window.as_secs_f64() / 0.9).floor() as u64 + 2;
    assert!(
        f1 - f0 <= pings_at_most,
        "the follower's session sent {} packets in {window:?}: more than pings ({pings_at_most})",
        f1 - f0
    );
    // The leader's heartbeats went on: its lease never lapsed.
    assert!(leader_kept_acting, "the leader paused: {:?}", a.status());
    assert_eq!(b.status().leadership, Leadership::Following);
    a.close().await;
    b.close().await;
}

/// A follower that takes over starts heartbeating: it keeps leading (and may act) for twice the
/// 4 s lease its seat's confirmation alone gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_keeps_extending_its_lease() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = server();
    let scope = Scope::new(Some("kind-dev"), Some("takeover"));
    let (a, b, _, _) = leader_and_follower(&server, &scope).await;
    a.close().await;
    let took = wait_state(&b, Leadership::Leading, Duration::from_secs(5)).await;
    let t0 = Instant::now();
    let mut lapses = 0;
    while t0.elapsed() < T * 4 / 3 {
        if !b.may_act() || b.status().leadership != Leadership::Leading {
            lapses += 1;
        }
        sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "figure: the successor led {took:?} after the leader's close and kept leading for {:?} \
         ({lapses} samples without the right to act)",
        t0.elapsed()
    );
    assert_eq!(lapses, 0, "{:?}", b.status());
    b.close().await;
}

/// A leader's latch node deleted behind its back (an operator, a cleanup script) ends its term
/// within a second, through the node's watch, not when a lease or the session runs out; the
/// waiting server leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_latch_node_ends_the_term_at_once() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = server();
    let scope = Scope::new(Some("kind-dev"), Some("deleted-node"));
    let (a, b, _, _) = leader_and_follower(&server, &scope).await;
    let found = wait_candidates(&server, &scope, 2).await;
    let node = format!("{}/{}", latch_dir(&scope), found[0].key);
    let zk = inspector(&server.addr()).await;
    let t0 = Instant::now();
    zk.delete(&node, None)
        .await
        .expect("delete the leader's latch node");
    let mut rx = a.watch();
    // (The watch's read guard is dropped at once: holding it would block the election's updates.)
    let ended = tokio::time::timeout(
        Duration::from_secs(1),
        rx.wait_for(|s| s.leadership != Leadership::Leading),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    let noticed = t0.elapsed();
    assert!(
        ended,
        "the leader still leads {noticed:?} after its latch node was deleted: {:?}",
        a.status()
    );
    assert!(!a.may_act());
    let successor = wait_state(&b, Leadership::Leading, Duration::from_secs(5)).await;
    eprintln!(
        "figure: the leader stopped leading {noticed:?} after its latch node was deleted (lease \
         {:?}, session {T:?}); the follower led {successor:?} after that",
        T * 2 / 3
    );
    a.close().await;
    b.close().await;
}
