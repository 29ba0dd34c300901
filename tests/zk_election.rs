//! The ZooKeeper election backend against a real ZooKeeper server: the election suite
//! (`common::election`, shared with `tests/etcd_election.rs`) and the scenarios only ZooKeeper
//! has (a disconnected session that pauses and resumes, digest and Kerberos authentication, every
//! session expiring at once).
//!
//! Each test starts its own server (see `common::zk`) and takes `SERIAL`: the timing assertions
//! need the CPU. Run with `--nocapture` to see the measured figures (lines starting with
//! `figure:`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use podsweep::config::ZkSettings;
use podsweep::election::zookeeper::ZooKeeperBackend;
use podsweep::election::{Backend, ElectionHandle, Leadership};
use podsweep::scope::Scope;
use tokio::time::{sleep, timeout, Instant};

use common::election::{
    campaign_everywhere, election_suite, init_logs, owners_of, wait_candidates, wait_sessions,
    wait_state, ElectionServer, SERIAL,
};
use common::zk::{election_settings as settings, latch_dir, latch_nodes, ZkOptions, ZkServer};

election_suite!(ZkServer);

fn backend(addr: &str, session_ms: u64) -> Arc<dyn Backend> {
    ZkServer::backend(addr, Duration::from_millis(session_ms))
}

// ---------------------------------------------------------------------------------------------
// ZooKeeper's own scenarios
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disconnect_pauses_and_the_same_session_resumes() {
    let _serial = SERIAL.lock().await;
    init_logs();
    // A long session, so that a slow JVM restart still fits in it (the client gives up on its
    // session 7/5 of the timeout after it last heard from the server).
    let session_ms = 8000;
    let mut server = ZkServer::start_with(ZkOptions {
        max_session: Duration::from_secs(10),
        ..ZkOptions::default()
    });
    let scope = Scope::new(None, None);
    let dir = latch_dir(&scope);
    let a = ElectionHandle::start(
        &backend(&server.addr(), session_ms),
        scope,
        "server-a".into(),
    );
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let before = latch_nodes(&server.addr(), &dir).await;
    assert_eq!(before.len(), 1);

    let t0 = Instant::now();
    server.stop();
    let paused = wait_state(&a, Leadership::Paused, Duration::from_millis(session_ms)).await;
    assert!(!a.may_act());
    eprintln!("figure: paused {paused:?} after the server died (session timeout {session_ms} ms)");
    assert!(
        paused < Duration::from_millis(session_ms / 2),
        "pause must not wait for expiry"
    );

    server.restart();
    let restarted = t0.elapsed();
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    eprintln!(
        "figure: server back after {restarted:?}; leading again {:?} after the outage began",
        t0.elapsed()
    );
    assert!(a.may_act());
    let after = latch_nodes(&server.addr(), &dir).await;
    assert_eq!(after, before, "same latch node, same session");
    assert!(
        a.status().reason.contains("reconnected"),
        "{}",
        a.status().reason
    );
    a.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_auth_is_sent_on_every_new_session() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let session_ms = 1000;
    let mut server = ZkServer::start();
    let zk: Arc<dyn Backend> = Arc::new(ZooKeeperBackend::new(ZkSettings {
        auth: podsweep::config::ZkAuth::Digest,
        digest: Some("podsweep:secret".into()),
        retry: podsweep::config::ZkRetry {
            base_wait: Duration::from_millis(100),
            max_wait: Duration::from_millis(500),
            ..Default::default()
        },
        ..settings(&server.addr(), Duration::from_millis(session_ms))
    }));
    let scope = Scope::new(Some("kind-dev"), Some("digest"));
    let dir = latch_dir(&scope);
    let a = ElectionHandle::start(&zk, scope, "server-a".into());
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let first = latch_nodes(&server.addr(), &dir).await;
    assert_eq!(first.len(), 1);

    // Longer than the client waits for its session (7/5 of the timeout): a brand-new session.
    server.stop();
    wait_state(&a, Leadership::Paused, Duration::from_secs(5)).await;
    sleep(Duration::from_millis(session_ms * 2)).await;
    server.restart();
    let back = wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let second = latch_nodes(&server.addr(), &dir).await;
    assert_eq!(second.len(), 1, "{second:?}");
    assert_ne!(second[0].owner, first[0].owner, "a new session");
    eprintln!("figure: leading again {back:?} after the restart, in a new session");
    // Creator-all needs an authenticated identity: the new session still carries the digest.
    let inspect = common::zk::inspector(&server.addr()).await;
    let (acls, _) = inspect
        .get_acl(&format!("{dir}/{}", second[0].name))
        .await
        .expect("world-readable ACL");
    let ids: Vec<String> = acls
        .iter()
        .map(|a| format!("{}:{}", a.scheme(), a.id()))
        .collect();
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(ids[0], "world:anyone");
    assert!(ids[1].starts_with("digest:podsweep:"), "{ids:?}");
    a.close().await;
}

/// Only in `--features kerberos` builds: with no Kerberos ticket the SASL handshake fails, the
/// campaign reports `NoQuorum` with the reason and keeps retrying; nothing panics.
#[cfg(feature = "kerberos")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kerberos_without_a_ticket_never_leads() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = ZkServer::start();
    let zk: Arc<dyn Backend> = Arc::new(ZooKeeperBackend::new(ZkSettings {
        auth: podsweep::config::ZkAuth::Kerberos {
            principal: Some("kyuubi/host@EXAMPLE.COM".into()),
            keytab: Some("/nonexistent.keytab".into()),
            server_principal: Some("zookeeper/localhost@EXAMPLE.COM".into()),
        },
        ..settings(&server.addr(), Duration::from_millis(1000))
    }));
    let h = ElectionHandle::start(&zk, Scope::new(None, Some("krb")), "server-k".into());
    wait_state(&h, Leadership::NoQuorum, Duration::from_secs(10)).await;
    sleep(Duration::from_secs(2)).await;
    assert!(!h.may_act());
    eprintln!("figure: kerberos without a ticket: {:?}", h.status().reason);
    h.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_expiry_recampaigns_every_scope_on_one_new_session() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let mut server = ZkServer::start();
    let (a, b) = (backend(&server.addr(), 2000), backend(&server.addr(), 2000));
    let scopes: Vec<Scope> = (0..10)
        .map(|i| Scope::new(None, Some(&format!("tenant-{i}"))))
        .collect();
    let handles = campaign_everywhere(&server, &a, &b, &scopes).await;
    let before_a = owners_of(&server, &scopes, "server-a").await;
    let before_b = owners_of(&server, &scopes, "server-b").await;
    assert_eq!((before_a.len(), before_b.len()), (1, 1));

    // The server forgets every session: a restart with an empty data directory, so each client's
    // reconnection is answered with "session expired".
    server.stop();
    std::fs::remove_dir_all(server.data_dir()).expect("wipe the data directory");
    std::fs::create_dir_all(server.data_dir()).expect("recreate the data directory");
    for (_, _, h) in &handles {
        let mut rx = h.watch();
        let stopped = rx.wait_for(|s| s.leadership != Leadership::Leading);
        timeout(Duration::from_secs(10), stopped)
            .await
            .expect("nobody leads while the server is down")
            .expect("status");
        assert!(!h.may_act());
    }
    server.restart();

    // Every scope has exactly one leader again, each server on one new session.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let leaders: Vec<usize> = (0..scopes.len())
            .map(|i| {
                handles
                    .iter()
                    .filter(|(s, _, h)| *s == i && h.status().leadership == Leadership::Leading)
                    .count()
            })
            .collect();
        if leaders.iter().all(|&n| n == 1) {
            break;
        }
        assert!(Instant::now() < deadline, "leaders per scope {leaders:?}");
        sleep(Duration::from_millis(50)).await;
    }
    for s in &scopes {
        wait_candidates(&server, s, 2).await;
    }
    let after_a = owners_of(&server, &scopes, "server-a").await;
    let after_b = owners_of(&server, &scopes, "server-b").await;
    assert_eq!(
        (after_a.len(), after_b.len()),
        (1, 1),
        "{after_a:?} {after_b:?}"
    );
    assert_ne!(after_a, before_a);
    assert_ne!(after_b, before_b);
    assert_eq!(wait_sessions(&server, 2).await.len(), 2);
    // A leader of every scope may act; its rival may not.
    for i in 0..scopes.len() {
        let acting: Vec<&str> = handles
            .iter()
            .filter(|(s, _, h)| *s == i && h.may_act())
            .map(|(_, id, _)| *id)
            .collect();
        assert_eq!(acting.len(), 1, "scope {i}: {acting:?}");
    }
    for (_, _, h) in handles {
        h.close().await;
    }
    wait_sessions(&server, 0).await;
}
