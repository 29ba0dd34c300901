//! The ZooKeeper backend against a real three-server ensemble: losing the server of the leader's
//! session, losing quorum (with whole engines and a recording deleter), and Kyuubi's digest ACLs.
//!
//! Tests take a lock so that only one ensemble runs at a time: three JVMs plus timing assertions
//! need the CPU. Every scenario samples who may act every 20 ms from a dedicated thread and
//! asserts that no two candidates of a scope ever may act in the same sample.
//!
//! Run with `--nocapture` to see the measured figures (lines starting with `figure:`).

mod common;
#[path = "common/sampler.rs"]
mod sampler;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::recorder::{self, Recorder};
use common::zk::{inspector, latch_nodes, wait_contenders, ZkEnsemble};
use podsweep::config::{keys, HaSettings, Settings, ZkAuth, ZkRetry, ZkSettings};
use podsweep::election::zookeeper::ZooKeeperBackend;
use podsweep::election::{Backend, ElectionHandle, Leadership};
use podsweep::engine::Engine;
use podsweep::model::{AppState, EventKind, Observation};
use podsweep::scope::Scope;
use podsweep::sweeper::DeleterSource;
use sampler::{check_one_at_a_time, may_act, Probe, Sample, Sampler};
use tokio::time::{sleep, Instant};
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError, Permission};

/// One ensemble at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const NAMESPACE: &str = "kyuubi_ensemble";
/// Requested and negotiated (the servers allow 0.4 s to 4 s).
const SESSION_MS: u64 = 2000;

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_test_writer()
        .try_init();
}

fn settings(addresses: &str) -> ZkSettings {
    ZkSettings {
        addresses: addresses.to_owned(),
        namespace: NAMESPACE.to_owned(),
        session_timeout: Duration::from_millis(SESSION_MS),
        connection_timeout: Duration::from_millis(15_000),
        retry: ZkRetry {
            base_wait: Duration::from_millis(100),
            max_wait: Duration::from_millis(1000),
            ..ZkRetry::default()
        },
        ..ZkSettings::default()
    }
}

fn candidate(s: ZkSettings, scope: &Scope, identity: &str) -> ElectionHandle {
    let backend: Arc<dyn Backend> = Arc::new(ZooKeeperBackend::new(s));
    ElectionHandle::start(&backend, scope.clone(), identity.to_owned())
}

fn latch_dir(scope: &Scope) -> String {
    ZooKeeperBackend::new(settings("unused:1")).latch_dir(scope)
}

fn session() -> Duration {
    Duration::from_millis(SESSION_MS)
}

/// Polls `probes` every 10 ms until exactly one is true; returns its index and the time taken.
async fn wait_one(what: &str, probes: &[Probe], within: Duration) -> (usize, Duration) {
    let t0 = Instant::now();
    loop {
        let acting: Vec<usize> = (0..probes.len()).filter(|&i| probes[i]()).collect();
        if let [one] = acting[..] {
            return (one, t0.elapsed());
        }
        assert!(
            t0.elapsed() < within,
            "{what}: not exactly one leader within {within:?}: {acting:?}"
        );
        sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_for(what: &str, within: Duration, mut cond: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < within, "{what}: not within {within:?}");
        sleep(Duration::from_millis(10)).await;
    }
    t0.elapsed()
}

// ---------------------------------------------------------------------------------------------
// a) the server of the leader's session dies
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_server_of_the_leaders_session_leaves_one_leader() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let mut zk = ZkEnsemble::start();
    let cs = zk.connect_string();
    let scope = Scope::new(Some("kind-dev"), Some("member-loss"));
    let dir = latch_dir(&scope);
    let names = ["server-a", "server-b", "server-c"];
    let handles: Vec<ElectionHandle> = names
        .iter()
        .map(|n| candidate(settings(&cs), &scope, n))
        .collect();
    let probes: Vec<Probe> = handles.iter().map(may_act).collect();
    wait_one("first election", &probes, Duration::from_secs(20)).await;
    wait_contenders(&cs, &dir, 3).await;
    let sampler = Sampler::start(probes.clone());

    for round in 1..=2 {
        let (leader, _) = wait_one("before the kill", &probes, session()).await;
        let nodes = latch_nodes(&cs, &dir).await;
        assert_eq!(nodes[0].identity, names[leader], "{nodes:?}");
        let serving = zk
            .member_serving(nodes[0].owner)
            .expect("one member serves the leader's session");
        // Round 1: the server of the leader's session; round 2: the quorum leader, which
        // disconnects every session for a quorum election.
        let member = match round {
            1 => serving,
            _ => (0..zk.len())
                .find(|&i| zk.mode(i).as_deref() == Some("leader"))
                .expect("a quorum leader"),
        };
        let role = zk.mode(member).unwrap_or_default();
        let t0 = Instant::now();
        zk.stop(member);
        // The leader pauses on the disconnect; when its session moves to a surviving member
        // within milliseconds it leads again at once, so a pause shorter than the 10 ms poll
        // shows only as a state change after the kill.
        wait_for("the leader stops acting", session(), || {
            !probes[leader]() || handles[leader].status().since >= t0
        })
        .await;
        let paused = t0.elapsed();
        let (next, _) = wait_one("after the kill", &probes, session() * 4).await;
        let again = t0.elapsed();
        eprintln!(
            "figure: round {round}: killed member {member} ({role}); {} was served by member {serving} and stopped acting after {paused:?}; {} leads {again:?} after the kill",
            names[leader], names[next]
        );
        assert!(
            again < session() + Duration::from_secs(3),
            "round {round}: one leader again only after {again:?}"
        );
        // Stable: exactly one leader for a while, all three still contending.
        for _ in 0..25 {
            let acting = probes.iter().filter(|p| p()).count();
            assert_eq!(acting, 1, "round {round}: {acting} leaders");
            sleep(Duration::from_millis(20)).await;
        }
        wait_contenders(&cs, &dir, 3).await;
        zk.start_node(member);
    }

    let samples = sampler.finish();
    check_one_at_a_time("member loss", &samples, 0..3);
    for h in handles {
        h.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_pinned_to_the_killed_server_is_replaced_after_its_session_expires() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let mut zk = ZkEnsemble::start();
    let scope = Scope::new(Some("kind-dev"), Some("pinned"));
    let names = ["server-a", "server-b", "server-c"];
    // Candidate i knows only member i: it cannot move its session elsewhere.
    let handles: Vec<ElectionHandle> = names
        .iter()
        .enumerate()
        .map(|(i, n)| candidate(settings(&zk.addr(i)), &scope, n))
        .collect();
    let probes: Vec<Probe> = handles.iter().map(may_act).collect();
    let (leader, _) = wait_one("first election", &probes, Duration::from_secs(20)).await;
    wait_contenders(&zk.connect_string(), &latch_dir(&scope), 3).await;
    let sampler = Sampler::start(probes.clone());

    let role = zk.mode(leader).unwrap_or_default();
    let t0 = Instant::now();
    zk.stop(leader);
    wait_for("the leader stops acting", session(), || !probes[leader]()).await;
    let paused = t0.elapsed();
    let (next, _) = wait_one("after the kill", &probes, session() * 4).await;
    let failover = t0.elapsed();
    eprintln!(
        "figure: killed member {leader} ({role}), the only server of {}: it stopped acting after {paused:?}; {} leads {failover:?} after the kill (session timeout {SESSION_MS} ms)",
        names[leader], names[next]
    );
    assert_ne!(next, leader);
    assert!(
        failover > session() / 2,
        "the latch node lives until the session expires"
    );
    assert!(
        failover < session() + Duration::from_secs(3),
        "failover took {failover:?}"
    );
    // The pinned candidate gives its session up and finds no server.
    let mut rx = handles[leader].watch();
    // (The `Ref` that `wait_for` returns locks the channel: drop it at once.)
    let lost = tokio::time::timeout(
        session() * 3,
        rx.wait_for(|s| s.leadership == Leadership::NoQuorum),
    )
    .await
    .is_ok_and(|r| r.is_ok());
    assert!(lost, "{:?}", handles[leader].status());
    sleep(Duration::from_millis(300)).await;

    let samples = sampler.finish();
    check_one_at_a_time("pinned leader", &samples, 0..3);
    for h in handles {
        h.close().await;
    }
}

// ---------------------------------------------------------------------------------------------
// b) quorum loss, at the engine level
// ---------------------------------------------------------------------------------------------

const RETAIN_MS: u64 = 3000;

fn engine(zk: &str, id: &str, recorder: Arc<Recorder>) -> Engine {
    let conf: HashMap<String, String> = [
        (keys::CLEANUP_KIND, "ALL".to_owned()),
        (keys::RETAIN_PERIOD, RETAIN_MS.to_string()),
        (keys::HA_ADDRESSES, zk.to_owned()),
        (keys::HA_NAMESPACE, NAMESPACE.to_owned()),
        (keys::ZK_SESSION_TIMEOUT, SESSION_MS.to_string()),
        (keys::ZK_BASE_RETRY_WAIT, "100".to_owned()),
        (keys::ZK_MAX_RETRY_WAIT, "1000".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let settings = Settings::from_map(conf).unwrap();
    let HaSettings::ZooKeeper(zk) = settings.ha.clone() else {
        panic!("zookeeper expected")
    };
    let source: DeleterSource = recorder::source(recorder);
    Engine::with_parts(
        settings,
        id,
        Arc::new(ZooKeeperBackend::new(zk)),
        source,
        podsweep::clock::Clock::System,
        tokio::runtime::Handle::current(),
    )
    .unwrap()
}

fn pod(uid: &str, kind: EventKind, state: AppState, at: Option<SystemTime>) -> Observation {
    Observation {
        kind,
        tag: format!("tag-{uid}"),
        pod_name: format!("driver-{uid}"),
        pod_uid: uid.to_owned(),
        state,
        has_app_selector: true,
        terminated_at: at,
        deletion_requested: false,
        annotations: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_loss_stops_every_leader_and_nothing_is_deleted_until_it_returns() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let mut zk = ZkEnsemble::start();
    let cs = zk.connect_string();
    let scope = Scope::new(Some("kind-dev"), Some("quorum"));
    let bare_scope = Scope::new(Some("kind-dev"), Some("quorum-bare"));
    let ids = ["server-a", "server-b", "server-c"];
    let recorders: Vec<Arc<Recorder>> = ids.iter().map(|_| Arc::default()).collect();
    let engines: Vec<Arc<Engine>> = ids
        .iter()
        .zip(&recorders)
        .map(|(id, r)| Arc::new(engine(&cs, id, r.clone())))
        .collect();
    for e in &engines {
        e.observe(
            scope.clone(),
            pod("warm", EventKind::Add, AppState::Running, None),
        )
        .unwrap();
    }
    let bare: Vec<ElectionHandle> = ["bare-a", "bare-b"]
        .iter()
        .map(|n| candidate(settings(&cs), &bare_scope, n))
        .collect();
    // Probes 0..3: engines leading; 3..5: bare candidates may act.
    let mut probes: Vec<Probe> = engines
        .iter()
        .map(|e| {
            let (e, s) = (e.clone(), scope.clone());
            Arc::new(move || e.leadership(&s) == Some(Leadership::Leading)) as Probe
        })
        .collect();
    probes.extend(bare.iter().map(may_act));
    let (leader, _) = wait_one("engines", &probes[..3], Duration::from_secs(20)).await;
    wait_one("bare candidates", &probes[3..], Duration::from_secs(20)).await;
    wait_contenders(&cs, &latch_dir(&scope), 3).await;
    wait_contenders(&cs, &latch_dir(&bare_scope), 2).await;
    let sampler = Sampler::start(probes.clone());

    // Keep the member that serves the leader's session: it stays connected while quorum goes.
    let nodes = latch_nodes(&cs, &latch_dir(&scope)).await;
    assert_eq!(nodes[0].identity, ids[leader]);
    let survivor = zk
        .member_serving(nodes[0].owner)
        .expect("a member serves it");
    let survivor_role = zk.mode(survivor).unwrap_or_default();
    let lost_at = sampler.now();
    let t0 = Instant::now();
    for i in (0..zk.len()).filter(|&i| i != survivor) {
        zk.stop(i);
    }
    let stopped = wait_for("nobody acts", session() * 2, || probes.iter().all(|p| !p())).await;
    let quiet_from = sampler.now();

    // Overdue pods, and pods that fall due during the outage, in every engine.
    let hour_ago = SystemTime::now() - Duration::from_secs(3600);
    let soon = SystemTime::now() - Duration::from_millis(RETAIN_MS) + Duration::from_millis(1500);
    let uids: Vec<String> = (0..8).map(|i| format!("p{i}")).collect();
    for e in &engines {
        for (i, u) in uids.iter().enumerate() {
            let at = if i < 5 { hour_ago } else { soon };
            e.observe(
                scope.clone(),
                pod(u, EventKind::Update, AppState::Finished, Some(at)),
            )
            .unwrap();
        }
    }
    // Past the point where every client gives its session up (7/5 of the timeout).
    sleep(session() * 3).await;
    let in_doubt =
        |l: Option<Leadership>| matches!(l, Some(Leadership::Paused | Leadership::NoQuorum));
    wait_for(
        "every candidate paused or without quorum",
        session(),
        || {
            engines.iter().all(|e| in_doubt(e.leadership(&scope)))
                && bare.iter().all(|h| in_doubt(Some(h.status().leadership)))
        },
    )
    .await;
    let states: Vec<&str> = engines
        .iter()
        .map(|e| e.leadership(&scope).map_or("NONE", |l| l.as_str()))
        .chain(bare.iter().map(|h| h.status().leadership.as_str()))
        .collect();
    let sent: usize = recorders.iter().map(|r| r.uids.lock().unwrap().len()).sum();
    assert_eq!(sent, 0, "a DELETE went out without quorum");
    let back_at = sampler.now();
    let outage = t0.elapsed();

    let t1 = Instant::now();
    for i in (0..zk.len()).filter(|&i| i != survivor) {
        zk.launch_node(i);
    }
    for i in (0..zk.len()).filter(|&i| i != survivor) {
        zk.wait_node(i);
    }
    let quorum_back = t1.elapsed();
    let (new_leader, _) = wait_one("engines after quorum", &probes[..3], session() * 4).await;
    wait_for("all pods deleted", Duration::from_secs(15), || {
        recorders
            .iter()
            .map(|r| r.uids.lock().unwrap().len())
            .sum::<usize>()
            >= uids.len()
    })
    .await;
    let all_deleted = t1.elapsed();
    wait_one("bare candidates after quorum", &probes[3..], session() * 4).await;
    sleep(Duration::from_millis(1500)).await;
    let samples = sampler.finish();

    eprintln!(
        "figure: quorum loss (kept member {survivor}, {survivor_role}): nobody acts {stopped:?} after the kill; states after {outage:?}: {states:?}; quorum back {quorum_back:?} after the restart; {} leads; all pods deleted {all_deleted:?} after the restart",
        ids[new_leader]
    );
    for (i, r) in recorders.iter().enumerate() {
        let mut got = r.uids.lock().unwrap().clone();
        got.sort();
        if i == new_leader {
            assert_eq!(got, uids, "the new leader deletes each pod once");
        } else {
            assert!(got.is_empty(), "{} sent {got:?}", ids[i]);
        }
    }
    let quiet: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.at >= quiet_from && s.at <= back_at)
        .collect();
    assert!(
        quiet.iter().all(|s| s.acting.iter().all(|a| !a)),
        "someone acted without quorum"
    );
    eprintln!(
        "figure: {} samples between {quiet_from:?} and {back_at:?} (loss at {lost_at:?}), none acting",
        quiet.len()
    );
    check_one_at_a_time("quorum loss, engines", &samples, 0..3);
    check_one_at_a_time("quorum loss, bare candidates", &samples, 3..5);
    for e in &engines {
        e.close_async(Duration::from_secs(5)).await;
    }
    for h in bare {
        h.close().await;
    }
}

// ---------------------------------------------------------------------------------------------
// c) digest ACLs
// ---------------------------------------------------------------------------------------------

fn digest_settings(cs: &str, auth: ZkAuth, digest: &str) -> ZkSettings {
    ZkSettings {
        auth,
        digest: Some(digest.to_owned()),
        ..settings(cs)
    }
}

/// `scheme:id` and the permission of each ACL entry.
async fn acl_of(client: &Client, path: &str) -> Vec<(String, Permission)> {
    let (acls, _) = client
        .get_acl(path)
        .await
        .unwrap_or_else(|e| panic!("get_acl {path}: {e}"));
    acls.iter()
        .map(|a| (format!("{}:{}", a.scheme(), a.id()), a.permission()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_acls_keep_other_identities_out_and_let_anyone_read() {
    let _serial = SERIAL.lock().await;
    init_logs();
    let zk = ZkEnsemble::start();
    let cs = zk.connect_string();
    let scope = Scope::new(Some("kind-dev"), Some("acl"));
    let dir = latch_dir(&scope);
    let ours = digest_settings(&cs, ZkAuth::Digest, "podsweep:secret");
    let a = candidate(ours.clone(), &scope, "server-a");
    wait_for("a leads", Duration::from_secs(20), || a.may_act()).await;
    let node = latch_nodes(&cs, &dir).await.remove(0);
    let latch = format!("{dir}/{}", node.name);

    // Every node podsweep created: world-read plus creator-all for the digest identity.
    let anonymous = inspector(&zk.addr(2)).await;
    let root = format!("/{NAMESPACE}-podsweep");
    for path in [
        root.clone(),
        format!("{root}/latches"),
        dir.clone(),
        latch.clone(),
    ] {
        let acl = acl_of(&anonymous, &path).await;
        assert_eq!(acl.len(), 2, "{path}: {acl:?}");
        assert_eq!(
            acl[0],
            ("world:anyone".to_owned(), Permission::READ),
            "{path}"
        );
        assert!(acl[1].0.starts_with("digest:podsweep:"), "{path}: {acl:?}");
        assert_eq!(acl[1].1, Permission::ALL, "{path}");
    }
    // World-read: anyone can see the latch and who holds it.
    let (data, _) = anonymous.get_data(&latch).await.expect("world-readable");
    assert_eq!(data, b"server-a");
    assert_eq!(
        anonymous.list_children(&dir).await.expect("listable"),
        std::slice::from_ref(&node.name)
    );

    // Another identity (and no identity) can change nothing.
    let intruder = Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .with_auth("digest", b"intruder:nope")
        .connect(&zk.addr(1))
        .await
        .expect("intruder connects");
    let mut refused = Vec::new();
    for (who, client) in [("intruder", &intruder), ("anonymous", &anonymous)] {
        for (what, r) in [
            ("delete latch", client.delete(&latch, None).await),
            ("delete dir", client.delete(&dir, None).await),
            (
                "set latch",
                client.set_data(&latch, b"mine", None).await.map(drop),
            ),
            (
                "create in dir",
                client
                    .create(
                        &format!("{dir}/_c_intruder-latch-"),
                        b"x",
                        &CreateMode::EphemeralSequential.with_acls(Acls::anyone_all()),
                    )
                    .await
                    .map(drop),
            ),
        ] {
            assert_eq!(r, Err(ZkError::NoAuth), "{who}: {what}");
            refused.push(format!("{who}: {what}"));
        }
    }
    eprintln!("figure: refused with NoAuth: {refused:?}");
    assert!(a.may_act(), "our latch survived");
    assert_eq!(latch_nodes(&cs, &dir).await, std::slice::from_ref(&node));

    // A podsweep candidate with another digest cannot even join the race.
    let stranger = candidate(
        digest_settings(&cs, ZkAuth::Digest, "intruder:nope"),
        &scope,
        "stranger",
    );
    sleep(Duration::from_millis(1500)).await;
    assert!(!stranger.may_act());
    assert_eq!(
        latch_nodes(&cs, &dir).await,
        std::slice::from_ref(&node),
        "the stranger's creates are refused (NoAuth, retried with backoff)"
    );
    stranger.close().await;

    // Servers sharing the digest hand over as usual.
    let b = candidate(ours, &scope, "server-b");
    wait_contenders(&cs, &dir, 2).await;
    let t0 = Instant::now();
    a.close().await;
    wait_for("b leads", Duration::from_secs(5), || b.may_act()).await;
    eprintln!("figure: handover under digest ACLs took {:?}", t0.elapsed());
    b.close().await;

    // Auth type NONE with a digest: the digest is still sent, the nodes stay open (as Kyuubi).
    let open_scope = Scope::new(Some("kind-dev"), Some("acl-open"));
    let open = candidate(
        ZkSettings {
            namespace: "kyuubi_open".into(),
            ..digest_settings(&cs, ZkAuth::None, "podsweep:secret")
        },
        &open_scope,
        "server-o",
    );
    wait_for("open candidate leads", Duration::from_secs(10), || {
        open.may_act()
    })
    .await;
    let open_dir = format!(
        "/kyuubi_open-podsweep/latches/{}",
        latch_dir(&open_scope).rsplit('/').next().unwrap_or("")
    );
    let open_node = latch_nodes(&cs, &open_dir).await.remove(0);
    let acl = acl_of(&anonymous, &format!("{open_dir}/{}", open_node.name)).await;
    assert_eq!(acl, [("world:anyone".to_owned(), Permission::ALL)]);
    open.close().await;
}
