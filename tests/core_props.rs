//! Property tests (proptest) of the pure core: deadline math (`schedule`), the per-scope tracker
//! (`tracker`) and configuration parsing (`config`). Part of the fault matrix's fuzzed input
//! (issue 13); the JVM side fuzzes `observe`/`create` through JNI (`scripts/chaos fuzz`).
//!
//! `PROPTEST_CASES` sets the cases per property (proptest's default, 256, in `cargo test`).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use podsweep::config::{keys, Settings, ETCD_CLIENT_CLASS, ZK_CLIENT_CLASS};
use podsweep::model::{AppState, CleanupKind, EventKind, Observation};
use podsweep::schedule::{self, SKEW_TOLERANCE};
use podsweep::tracker::{Tracker, Uid, Verdict};
use proptest::prelude::*;

/// Wall times around 2026, milliseconds apart, far past and far future included.
fn wall() -> impl Strategy<Value = SystemTime> {
    prop_oneof![
        8 => (1_700_000_000_000u64..1_900_000_000_000).prop_map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        1 => (0u64..1_000_000).prop_map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        1 => (4_000_000_000_000u64..253_402_300_799_000).prop_map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
    ]
}

fn retain() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        (0u64..7 * 24 * 3600 * 1000).prop_map(Duration::from_millis),
    ]
}

proptest! {
    /// Never due before the retain period has passed since the pod's own termination time (or
    /// since now, for a time in the future), nor — for a pod seen running — since the last running
    /// sighting (bounded by the skew tolerance); never later than now + retain.
    #[test]
    fn never_due_before_the_deadline(
        terminated_at in proptest::option::of(wall()),
        first_seen in wall(),
        seen_running in proptest::option::of(wall()),
        retain in retain(),
        now in wall(),
    ) {
        let deadline = schedule::deadline(terminated_at, first_seen, seen_running, retain, now);
        let left = schedule::time_left(terminated_at, first_seen, seen_running, retain, now);
        let pod_time = terminated_at.unwrap_or(first_seen);
        prop_assert!(deadline >= pod_time.min(now) + retain);
        prop_assert!(deadline <= now + retain);
        if let Some(r) = seen_running {
            let watched = first_seen.checked_sub(SKEW_TOLERANCE).unwrap_or(first_seen);
            prop_assert!(deadline >= r.max(watched).min(now) + retain);
        }
        // Due (no time left) exactly when the deadline has come.
        prop_assert_eq!(left.is_zero(), deadline <= now);
        if !left.is_zero() {
            prop_assert_eq!(now + left, deadline);
        }
    }

    /// Retry delays: at least a server's Retry-After, at most the cap (or the Retry-After), and
    /// never zero.
    #[test]
    fn retry_delay_is_bounded(
        attempt in 0u32..100,
        retry_after in proptest::option::of((0u64..10_000_000).prop_map(Duration::from_millis)),
        cap in (1u64..3_600_000).prop_map(Duration::from_millis),
        jitter in prop_oneof![-10.0f64..10.0, Just(f64::NAN), Just(f64::INFINITY)],
    ) {
        let d = schedule::retry_delay(attempt, retry_after, cap, jitter);
        if let Some(ra) = retry_after {
            prop_assert!(d >= ra);
        }
        prop_assert!(d <= cap.max(retry_after.unwrap_or(Duration::ZERO)));
        prop_assert!(!d.is_zero());
    }
}

// ------------------------------------------------------------------------------------------------
// tracker

#[derive(Clone, Debug)]
struct Event {
    uid: usize,
    kind: EventKind,
    state: AppState,
    driver: bool,
    deletion_requested: bool,
    terminated: bool,
}

fn state() -> impl Strategy<Value = AppState> {
    prop_oneof![
        Just(AppState::Pending),
        Just(AppState::Running),
        Just(AppState::Finished),
        Just(AppState::Killed),
        Just(AppState::Failed),
        Just(AppState::Zombie),
        Just(AppState::NotFound),
        Just(AppState::Unknown),
    ]
}

fn event() -> impl Strategy<Value = Event> {
    (
        0usize..4,
        prop_oneof![
            4 => Just(EventKind::Add),
            8 => Just(EventKind::Update),
            1 => Just(EventKind::Delete)
        ],
        state(),
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.05),
        any::<bool>(),
    )
        .prop_map(
            |(uid, kind, state, driver, deletion_requested, terminated)| Event {
                uid,
                kind,
                state,
                driver,
                deletion_requested,
                terminated,
            },
        )
}

fn kind() -> impl Strategy<Value = CleanupKind> {
    prop_oneof![
        Just(CleanupKind::All),
        Just(CleanupKind::Completed),
        Just(CleanupKind::None)
    ]
}

proptest! {
    /// Random event sequences over a few UIDs, checked against a model of the rules:
    /// * a UID is never armed after a tombstone (a DELETE event or a deletionTimestamp);
    /// * the first terminal state since the pod last ran decides (a later FINISHED does not arm
    ///   a pod first seen FAILED under COMPLETED);
    /// * only Kyuubi driver pods in a state the kind cleans are armed, and each at most once per
    ///   termination;
    /// * a cancelled or disarmed record is the one that was armed.
    #[test]
    fn tracker_rules_hold(kind in kind(), events in prop::collection::vec(event(), 1..80)) {
        let mut tracker = Tracker::new(Duration::from_secs(3600));
        let now = tokio::time::Instant::now();
        let wall0 = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let uids: Vec<Uid> = (0..4).map(|i| Uid::new(&format!("uid-{i}"))).collect();
        // Model: tombstoned UIDs; per UID, the first terminal state since it last ran (or was
        // first seen), and whether it is armed now.
        let mut tombstoned = [false; 4];
        let mut first_terminal: [Option<AppState>; 4] = [None; 4];
        let mut armed = [false; 4];
        for (i, e) in events.iter().enumerate() {
            let obs = Observation {
                kind: e.kind,
                tag: if e.driver { format!("tag-{}", e.uid) } else { String::new() },
                pod_name: format!("driver-{}", e.uid),
                pod_uid: uids[e.uid].to_string(),
                state: e.state,
                has_app_selector: true,
                terminated_at: e.terminated.then(|| wall0 + Duration::from_secs(i as u64)),
                deletion_requested: e.deletion_requested,
                annotations: None,
            };
            let wall = wall0 + Duration::from_secs(i as u64);
            let v = tracker.observe(&uids[e.uid], &obs, kind, wall, now);
            let u = e.uid;
            let cleaned = e.kind == EventKind::Delete || e.deletion_requested;
            if tombstoned[u] {
                prop_assert_eq!(v, Verdict::Ignore, "event {} after the tombstone of uid {}", i, u);
                continue;
            }
            if cleaned {
                tombstoned[u] = true;
                match v {
                    Verdict::Cancel(_) => prop_assert!(armed[u]),
                    Verdict::Ignore => prop_assert!(!armed[u]),
                    other => prop_assert!(false, "a cleaned pod gave {:?}", other),
                }
                armed[u] = false;
                continue;
            }
            if !e.driver {
                prop_assert_eq!(v, Verdict::Ignore);
                continue;
            }
            if !e.state.is_terminated() {
                first_terminal[u] = None;
                match v {
                    Verdict::Disarm(_) => prop_assert!(armed[u]),
                    Verdict::Ignore => prop_assert!(!armed[u]),
                    other => prop_assert!(false, "a running pod gave {:?}", other),
                }
                armed[u] = false;
                continue;
            }
            let first = *first_terminal[u].get_or_insert(e.state);
            match v {
                Verdict::Arm => {
                    prop_assert!(!armed[u], "armed twice");
                    prop_assert!(first.cleaned_by(kind), "armed {:?} under {:?}", first, kind);
                    armed[u] = true;
                }
                Verdict::Rearm => prop_assert!(armed[u]),
                Verdict::Ignore => {
                    // Ignored: already armed, or the first terminal state is not cleaned.
                    prop_assert!(armed[u] || !first.cleaned_by(kind));
                }
                other => prop_assert!(false, "a terminated pod gave {:?}", other),
            }
            prop_assert_eq!(tracker.get(&uids[u]).is_some(), armed[u]);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// config

const KEYS: &[&str] = &[
    keys::CLEANUP_KIND,
    keys::RETAIN_PERIOD,
    keys::CONTEXT_ALLOW_LIST,
    keys::NAMESPACE_ALLOW_LIST,
    keys::KUBE_CONTEXT,
    keys::KUBE_NAMESPACE,
    keys::HA_ADDRESSES,
    keys::HA_ZK_QUORUM,
    keys::HA_NAMESPACE,
    keys::HA_CLIENT_CLASS,
    keys::ZK_SESSION_TIMEOUT,
    keys::ZK_CONNECTION_TIMEOUT,
    keys::ZK_AUTH_TYPE,
    keys::ZK_AUTH_DIGEST,
    keys::ZK_RETRY_POLICY,
    keys::ZK_MAX_RETRIES,
    keys::ZK_BASE_RETRY_WAIT,
    keys::ZK_MAX_RETRY_WAIT,
    keys::ETCD_LEASE_TIMEOUT,
    keys::ETCD_ELECTION_LEASE,
    keys::ETCD_SSL_ENABLED,
    keys::RATE_QPS,
    keys::RATE_BURST,
    keys::MAX_IN_FLIGHT,
    keys::DRY_RUN,
    keys::RETRY_MAX_WAIT,
    keys::FORBIDDEN_RETRY,
    keys::HEALTH_ALERT_AFTER,
    keys::IDLE_RELEASE,
    keys::STEP_DOWN_AFTER,
    keys::WATCH_ENABLED,
    keys::STATE_SOURCE,
];

fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("ALL".to_owned()),
        Just("COMPLETED".to_owned()),
        Just("none".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        Just(ZK_CLIENT_CLASS.to_owned()),
        Just(ETCD_CLIENT_CLASS.to_owned()),
        Just("127.0.0.1:2181,127.0.0.1:2182".to_owned()),
        Just("http://127.0.0.1:2379".to_owned()),
        Just("PT30S".to_owned()),
        Just("P365D".to_owned()),
        Just("-1".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("NaN".to_owned()),
        Just("1e308".to_owned()),
        Just("0.0000001".to_owned()),
        (-1_000_000_000i64..1_000_000_000).prop_map(|n| n.to_string()),
        "PT[0-9]{1,20}(\\.[0-9]{1,12})?[HMS]",
        "[a-zA-Z0-9 ,:/.=_-]{0,40}",
        any::<String>(),
    ]
}

proptest! {
    /// Random maps of Kyuubi's keys: parsing never panics, and a rejected map's error names one
    /// of the keys (the offending one, or a key the values require).
    #[test]
    fn config_parse_never_panics_and_names_the_key(
        pairs in prop::collection::vec((prop::sample::select(KEYS), value()), 0..12),
        noise in prop::collection::vec((any::<String>(), any::<String>()), 0..3),
    ) {
        let mut map: HashMap<String, String> = pairs
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        map.extend(noise);
        let keys_given: Vec<String> = map.keys().cloned().collect();
        let parsed = std::panic::catch_unwind(|| Settings::from_map(map));
        prop_assert!(parsed.is_ok(), "Settings::from_map panicked");
        if let Ok(Err(e)) = parsed {
            let key = e.key().to_owned();
            prop_assert!(
                keys_given.contains(&key) || KEYS.contains(&key.as_str()) || key.starts_with("kyuubi."),
                "error names no key: {}", e
            );
            prop_assert!(e.to_string().contains(&key), "message {:?} lacks the key", e.to_string());
        }
    }
}
