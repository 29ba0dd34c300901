//! The etcd election backend against a real etcd server: the election suite
//! (`common::election`, shared with `tests/zk_election.rs`) and the scenarios only etcd has (the
//! leader's own key deleted, a restart within the lease TTL, TLS, one lease revoked).
//!
//! Each test starts its own server (see `common::etcd`); timing-sensitive tests take `SERIAL` so
//! that only one runs at a time. Run with `--nocapture` to see the measured figures (lines
//! starting with `figure:`).

mod common;

use std::sync::Arc;
use std::time::Duration;

use podsweep::config::EtcdTls;
use podsweep::election::etcd::EtcdBackend;
use podsweep::election::{Backend, ElectionHandle, Leadership};
use podsweep::scope::Scope;
use tokio::time::{sleep, timeout, Instant};

use common::election::{
    campaign_everywhere, election_suite, init_logs, owners_of, wait_candidates, wait_sessions,
    wait_state, ElectionServer, SERIAL,
};
use common::etcd::{election_settings, free_port, EtcdServer};

election_suite!(EtcdServer);

fn backend(endpoint: &str, ttl_s: u64) -> Arc<dyn Backend> {
    EtcdServer::backend(endpoint, Duration::from_secs(ttl_s))
}

fn settings(endpoint: &str, ttl_s: u64, tls: Option<EtcdTls>) -> podsweep::config::EtcdSettings {
    election_settings(endpoint, Duration::from_secs(ttl_s), tls)
}

// ---------------------------------------------------------------------------------------------
// etcd's own scenarios
// ---------------------------------------------------------------------------------------------

/// Issue 22, item 3: the leader's own election key is watched. When it disappears (an operator
/// deletes it, or a resign of an earlier campaign lands late), the next candidate leads, and the
/// old leader steps down instead of leading on beside it; it campaigns again, behind the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_key_disappears_steps_down() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = EtcdServer::start();
    let etcd = backend(&server.endpoint(), 3);
    let scope = Scope::new(None, Some("spark"));
    let a = ElectionHandle::start(&etcd, scope.clone(), "server-a".into());
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let b = ElectionHandle::start(&etcd, scope.clone(), "server-b".into());
    let found = wait_candidates(&server, &scope, 2).await;
    assert_eq!(found[0].identity, "server-a", "{found:?}");

    // An operator deletes the leader's key.
    let mut operator = server.client().await;
    operator
        .delete(found[0].key.as_str(), None)
        .await
        .expect("delete the leader's key");
    wait_state(&b, Leadership::Leading, Duration::from_secs(10)).await;
    let t0 = Instant::now();
    let mut a_status = a.watch();
    // (The borrow `wait_for` returns is dropped at once: it holds the channel's read lock.)
    let stepped_down = timeout(
        Duration::from_secs(5),
        a_status.wait_for(|s| s.leadership != Leadership::Leading),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    assert!(
        stepped_down,
        "server-a still leads {:?} after its key was deleted and server-b leads ({})",
        t0.elapsed(),
        a.status().reason
    );
    eprintln!(
        "figure: the old leader stepped down {:?} after the new one led ({})",
        t0.elapsed(),
        a.status().reason
    );
    // From now on one leader: a campaigns again behind b.
    let found = wait_candidates(&server, &scope, 2).await;
    assert_eq!(found[0].identity, "server-b", "{found:?}");
    assert_eq!(found[1].identity, "server-a", "{found:?}");
    for _ in 0..20 {
        assert!(!(a.may_act() && b.may_act()), "two leaders");
        assert_eq!(a.status().leadership, Leadership::Following);
        sleep(Duration::from_millis(50)).await;
    }
    a.close().await;
    b.close().await;
}

/// etcd 3.4.23 left some campaign calls open after their turn came (4 and 5 of 200 scopes in
/// `benches/fleet_scale.rs`, the killed leader's lease expired). Here etcd's reply to the waiting
/// candidate's campaign call is hidden from it, so only podsweep's own watch of leaving
/// candidates can tell it that its key is now the first: it must lead anyway, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_call_that_misses_its_turn_is_made_again() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = EtcdServer::start();
    let settings = settings(&server.endpoint(), 3, None);
    let etcd: Arc<dyn Backend> = Arc::new(EtcdBackend::new(settings.clone()));
    let scope = Scope::new(None, Some("spark"));
    let name = EtcdBackend::new(settings).election_name(&scope);
    let a = ElectionHandle::start(&etcd, scope.clone(), "server-a".into());
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    podsweep::election::etcd::lose_next_campaign_reply(&name, "server-b");
    let b = ElectionHandle::start(&etcd, scope.clone(), "server-b".into());
    wait_candidates(&server, &scope, 2).await;
    let t0 = Instant::now();
    // a resigns: etcd answers b's campaign call, which b does not see.
    a.close().await;
    wait_state(&b, Leadership::Leading, Duration::from_secs(15)).await;
    eprintln!(
        "figure: the candidate whose campaign reply was lost led {:?} after the leader resigned",
        t0.elapsed()
    );
    let found = wait_candidates(&server, &scope, 1).await;
    assert_eq!(found[0].identity, "server-b", "{found:?}");
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_restart_within_the_ttl_is_survived_with_one_leader() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let ttl_s = 3;
    let mut server = EtcdServer::start();
    let etcd = backend(&server.endpoint(), ttl_s);
    let scope = Scope::new(None, None);
    let a = ElectionHandle::start(&etcd, scope.clone(), "server-a".into());
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    let b = ElectionHandle::start(&etcd, scope.clone(), "server-b".into());
    let before = wait_candidates(&server, &scope, 2).await;

    let t0 = Instant::now();
    server.stop();
    let paused = wait_state(&a, Leadership::Paused, Duration::from_secs(ttl_s)).await;
    assert!(!a.may_act() && !b.may_act());
    eprintln!("figure: leader paused {paused:?} after etcd was killed");
    sleep(Duration::from_millis(300)).await;
    server.restart();
    let back = t0.elapsed();
    eprintln!("figure: etcd serving again {back:?} after it was killed (lease TTL {ttl_s} s)");

    // Exactly one leader again, and it stays that way.
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut stable_since: Option<Instant> = None;
    loop {
        let (sa, sb) = (a.status().leadership, b.status().leadership);
        let one = matches!(
            (sa, sb),
            (Leadership::Leading, Leadership::Following)
                | (Leadership::Following, Leadership::Leading)
        );
        assert!(!(a.may_act() && b.may_act()), "two leaders may act at once");
        match (one, stable_since) {
            (true, None) => {
                stable_since = Some(Instant::now());
                eprintln!(
                    "figure: one leader again {:?} after etcd was killed ({} leads)",
                    t0.elapsed(),
                    if sa == Leadership::Leading { "a" } else { "b" }
                );
            }
            (true, Some(s)) if s.elapsed() > Duration::from_secs(1) => break,
            (false, _) => stable_since = None,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no single stable leader: a {} ({}), b {} ({})",
            sa.as_str(),
            a.status().reason,
            sb.as_str(),
            b.status().reason
        );
        sleep(Duration::from_millis(20)).await;
    }
    let leader = if a.may_act() { "server-a" } else { "server-b" };
    let after = server.candidates(&scope).await;
    assert_eq!(after.len(), 2, "{after:?}");
    assert_eq!(after[0].identity, leader, "the first key leads: {after:?}");
    if back < Duration::from_secs(ttl_s) {
        assert_eq!(after, before, "same keys, same leases across the restart");
    }
    a.close().await;
    b.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_client_identity_leads_and_a_wrong_ca_is_reported() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = EtcdServer::start_tls();
    let files = server.tls().expect("TLS server").clone();
    let tls = |ca: &std::path::Path| EtcdTls {
        ca: ca.display().to_string(),
        cert: files.client_cert.display().to_string(),
        key: files.client_key.display().to_string(),
    };
    let good: Arc<dyn Backend> = Arc::new(EtcdBackend::new(settings(
        &server.endpoint(),
        3,
        Some(tls(&files.ca)),
    )));
    let wrong: Arc<dyn Backend> = Arc::new(EtcdBackend::new(settings(
        &server.endpoint(),
        3,
        Some(tls(&files.other_ca)),
    )));
    let scope = Scope::new(Some("kind-dev"), Some("tls"));

    let a = ElectionHandle::start(&good, scope.clone(), "tls-good".into());
    wait_state(&a, Leadership::Leading, Duration::from_secs(15)).await;
    assert!(a.may_act());

    let w = ElectionHandle::start(&wrong, scope.clone(), "tls-wrong-ca".into());
    wait_state(&w, Leadership::NoQuorum, Duration::from_secs(10)).await;
    sleep(Duration::from_millis(500)).await;
    let s = w.status();
    eprintln!(
        "figure: wrong CA -> {} ({})",
        s.leadership.as_str(),
        s.reason
    );
    assert_eq!(s.leadership, Leadership::NoQuorum);
    assert!(!w.may_act());
    let reason = s.reason.to_lowercase();
    assert!(
        reason.contains("certificate") || reason.contains("tls") || reason.contains("issuer"),
        "the reason names the TLS problem: {}",
        s.reason
    );
    assert_eq!(server.candidates(&scope).await.len(), 1);
    w.close().await;
    a.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_tls_file_means_no_quorum_naming_the_file() {
    init_logs();
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing-ca.pem").display().to_string();
    let tls = EtcdTls {
        ca: missing.clone(),
        cert: dir.path().join("client.pem").display().to_string(),
        key: dir.path().join("client-key.pem").display().to_string(),
    };
    let endpoint = format!("https://127.0.0.1:{}", free_port());
    let etcd: Arc<dyn Backend> = Arc::new(EtcdBackend::new(settings(&endpoint, 3, Some(tls))));
    let h = ElectionHandle::start(&etcd, Scope::new(None, None), "no-files".into());
    wait_state(&h, Leadership::NoQuorum, Duration::from_secs(10)).await;
    let reason = h.status().reason;
    assert!(reason.contains(&missing), "{reason}");
    assert!(reason.contains("kyuubi.ha.etcd.ssl.ca.path"), "{reason}");
    h.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lease_recampaigns_every_scope_on_one_new_lease() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let server = EtcdServer::start();
    let (a, b) = (
        backend(&server.endpoint(), 3),
        backend(&server.endpoint(), 3),
    );
    let scopes: Vec<Scope> = (0..10)
        .map(|i| Scope::new(None, Some(&format!("tenant-{i}"))))
        .collect();
    let mut handles = campaign_everywhere(&server, &a, &b, &scopes).await;
    let before_a = owners_of(&server, &scopes, "server-a").await;
    let before_b = owners_of(&server, &scopes, "server-b").await;
    assert_eq!((before_a.len(), before_b.len()), (1, 1));
    assert_eq!(wait_sessions(&server, 2).await.len(), 2);

    // Server a's lease is revoked (as if it expired): all its keys go at once.
    let mut client = server.client().await;
    client.lease_revoke(before_a[0]).await.expect("revoke");

    // Server b now leads every scope; server a campaigns again on one new lease, in every scope.
    for (_, id, h) in &handles {
        if *id == "server-b" {
            wait_state(h, Leadership::Leading, Duration::from_secs(15)).await;
        }
    }
    for s in &scopes {
        wait_candidates(&server, s, 2).await;
    }
    let after_a = owners_of(&server, &scopes, "server-a").await;
    assert_eq!(after_a.len(), 1, "{after_a:?}");
    assert_ne!(after_a, before_a);
    assert_eq!(owners_of(&server, &scopes, "server-b").await, before_b);
    assert_eq!(wait_sessions(&server, 2).await.len(), 2);
    for (i, id, h) in &handles {
        if *id == "server-a" {
            assert_eq!(h.status().leadership, Leadership::Following, "scope {i}");
        }
    }

    // Leaders stay independent per scope: closing b's handle of scope 3 moves only scope 3.
    let pos = handles
        .iter()
        .position(|(i, id, _)| *i == 3 && *id == "server-b")
        .expect("handle");
    let (_, _, h) = handles.remove(pos);
    h.close().await;
    for (i, id, h) in &handles {
        let want = if *i == 3 { "server-a" } else { "server-b" };
        let state = if id == &want {
            Leadership::Leading
        } else {
            Leadership::Following
        };
        wait_state(h, state, Duration::from_secs(10)).await;
    }
    for (_, _, h) in handles {
        h.close().await;
    }
    wait_sessions(&server, 0).await;
}
