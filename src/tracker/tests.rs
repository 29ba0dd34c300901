//! The tracker's unit tests: the per-pod state machine (kinds, tombstones, spared and running
//! UIDs, self-watch lists), the records' names and times, the timers and the overdue set.

use super::*;
use crate::model::EventKind;

fn obs(kind: EventKind, uid: &str, state: AppState) -> Observation {
    Observation {
        kind,
        tag: "tag-1".into(),
        pod_name: "driver-1".into(),
        pod_uid: uid.into(),
        state,
        has_app_selector: true,
        terminated_at: None,
        deletion_requested: false,
        annotations: None,
    }
}

fn u(s: &str) -> Uid {
    Ident::new(s)
}

fn run(t: &mut Tracker, o: &Observation, kind: CleanupKind, now: Instant) -> Verdict {
    let uid = u(&o.pod_uid);
    t.observe(&uid, o, kind, SystemTime::UNIX_EPOCH, now)
}

#[test]
fn only_terminated_driver_pods_are_tracked() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(600));
    assert_eq!(
        run(
            &mut t,
            &obs(EventKind::Add, "u1", AppState::Running),
            CleanupKind::All,
            now
        ),
        Verdict::Ignore
    );
    let mut no_selector = obs(EventKind::Update, "u2", AppState::Finished);
    no_selector.has_app_selector = false;
    assert_eq!(
        run(&mut t, &no_selector, CleanupKind::All, now),
        Verdict::Ignore
    );
    let mut no_tag = obs(EventKind::Update, "u3", AppState::Finished);
    no_tag.tag.clear();
    assert_eq!(run(&mut t, &no_tag, CleanupKind::All, now), Verdict::Ignore);
    assert_eq!(
        run(
            &mut t,
            &obs(EventKind::Update, "u4", AppState::Finished),
            CleanupKind::All,
            now
        ),
        Verdict::Arm
    );
    assert_eq!(
        run(
            &mut t,
            &obs(EventKind::Update, "u4", AppState::Finished),
            CleanupKind::All,
            now
        ),
        Verdict::Ignore
    );
    assert_eq!(t.len(), 1);
}

#[test]
fn kinds_decide_on_the_first_terminal_state() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(600));
    assert_eq!(
        run(
            &mut t,
            &obs(EventKind::Update, "f", AppState::Failed),
            CleanupKind::Completed,
            now
        ),
        Verdict::Ignore
    );
    assert_eq!(
        run(
            &mut t,
            &obs(EventKind::Update, "k", AppState::Killed),
            CleanupKind::Completed,
            now
        ),
        Verdict::Ignore
    );
    assert_eq!(
        run(
            &mut t,
            &obs(EventKind::Update, "ok", AppState::Finished),
            CleanupKind::Completed,
            now
        ),
        Verdict::Arm
    );
    assert_eq!(
        run(
            &mut t,
            &obs(EventKind::Update, "f2", AppState::Failed),
            CleanupKind::All,
            now
        ),
        Verdict::Arm
    );
    // FAILED came first for "f": a later FINISHED of the same UID is not deleted either.
    assert_eq!(
        run(
            &mut t,
            &obs(EventKind::Update, "f", AppState::Finished),
            CleanupKind::Completed,
            now
        ),
        Verdict::Ignore
    );
    assert_eq!(t.spared_count(), 2);
    assert_eq!(
        run(
            &mut t,
            &obs(EventKind::Update, "n", AppState::Finished),
            CleanupKind::None,
            now
        ),
        Verdict::Ignore
    );
}

#[test]
fn delete_event_and_deletion_timestamp_cancel_forever() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(600));
    assert_eq!(
        run(
            &mut t,
            &obs(EventKind::Update, "u", AppState::Finished),
            CleanupKind::All,
            now
        ),
        Verdict::Arm
    );
    let verdict = run(
        &mut t,
        &obs(EventKind::Delete, "u", AppState::Finished),
        CleanupKind::All,
        now,
    );
    assert!(matches!(verdict, Verdict::Cancel(_)));
    // Whatever follows for that UID never arms it again.
    for kind in [EventKind::Add, EventKind::Update] {
        assert_eq!(
            run(
                &mut t,
                &obs(kind, "u", AppState::Finished),
                CleanupKind::All,
                now
            ),
            Verdict::Ignore
        );
    }
    let mut deleting = obs(EventKind::Update, "v", AppState::Finished);
    deleting.deletion_requested = true;
    assert_eq!(
        run(&mut t, &deleting, CleanupKind::All, now),
        Verdict::Ignore
    );
    assert_eq!(
        run(
            &mut t,
            &obs(EventKind::Update, "v", AppState::Finished),
            CleanupKind::All,
            now
        ),
        Verdict::Ignore
    );
    assert!(t.is_empty());
}

#[test]
fn termination_time_arriving_later_rearms() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(600));
    assert_eq!(
        run(
            &mut t,
            &obs(EventKind::Update, "u", AppState::Failed),
            CleanupKind::All,
            now
        ),
        Verdict::Arm
    );
    let mut timed = obs(EventKind::Update, "u", AppState::Failed);
    timed.terminated_at = Some(SystemTime::UNIX_EPOCH);
    assert_eq!(run(&mut t, &timed, CleanupKind::All, now), Verdict::Rearm);
    assert_eq!(run(&mut t, &timed, CleanupKind::All, now), Verdict::Ignore);
}

#[test]
fn running_again_disarms_without_a_tombstone() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(600));
    let arm = run(
        &mut t,
        &obs(EventKind::Update, "u", AppState::Failed),
        CleanupKind::All,
        now,
    );
    assert_eq!(arm, Verdict::Arm);
    assert_eq!(t.count(Stage::Scheduled), 1);
    let v = run(
        &mut t,
        &obs(EventKind::Update, "u", AppState::Running),
        CleanupKind::All,
        now,
    );
    assert!(matches!(v, Verdict::Disarm(_)), "{v:?}");
    assert_eq!(t.count(Stage::Scheduled), 0);
    assert!(!t.is_tombstoned(&u("u")));
    let again = run(
        &mut t,
        &obs(EventKind::Update, "u", AppState::Finished),
        CleanupKind::All,
        now,
    );
    assert_eq!(again, Verdict::Arm, "a later termination is tracked afresh");
}

#[test]
fn tombstones_expire_after_their_ttl() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(60));
    run(
        &mut t,
        &obs(EventKind::Delete, "u", AppState::Finished),
        CleanupKind::All,
        now,
    );
    assert!(t.is_tombstoned(&u("u")));
    run(
        &mut t,
        &obs(EventKind::Add, "x", AppState::Running),
        CleanupKind::All,
        now + Duration::from_secs(61),
    );
    assert!(!t.is_tombstoned(&u("u")));
    assert_eq!(t.tombstone_count(), 0);
}

#[test]
fn self_watch_drops_and_relists() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(600));
    for (uid, state) in [
        ("a", AppState::Finished),
        ("b", AppState::Finished),
        ("r", AppState::Running),
        ("gone", AppState::Finished),
    ] {
        run(
            &mut t,
            &obs(EventKind::Update, uid, state),
            CleanupKind::All,
            now,
        );
    }
    run(
        &mut t,
        &obs(EventKind::Delete, "gone", AppState::Finished),
        CleanupKind::All,
        now,
    );
    t.set_stage(&u("b"), Stage::Due);
    // A fresh list without "b" and "r": both are gone, "b" tombstoned.
    let listed: HashSet<Uid> = [u("a")].into_iter().collect();
    let gone = t.retain_listed(&listed, now);
    assert_eq!(gone.len(), 1);
    assert_eq!(gone[0].0, u("b"));
    assert!(t.is_tombstoned(&u("b")) && t.running_count() == 0);
    assert_eq!(
        (t.len(), t.count(Stage::Due), t.count(Stage::Scheduled)),
        (1, 0, 1)
    );
    // The watch stops: every record goes, tombstones stay.
    let dropped = t.drop_unwatched();
    assert_eq!(dropped.len(), 1);
    assert!(t.is_empty() && t.count(Stage::Scheduled) == 0);
    assert!(t.is_tombstoned(&u("gone")) && t.is_tombstoned(&u("b")));
    // A later list arms "a" again, never "b".
    let again = |t: &mut Tracker, uid| {
        run(
            t,
            &obs(EventKind::Add, uid, AppState::Finished),
            CleanupKind::All,
            now,
        )
    };
    assert_eq!(again(&mut t, "a"), Verdict::Arm);
    assert_eq!(again(&mut t, "b"), Verdict::Ignore);
}

fn finished(uid: &str, tag: &str, name: &str) -> Observation {
    let mut o = obs(EventKind::Update, uid, AppState::Finished);
    o.tag = tag.into();
    o.pod_name = name.into();
    o
}

#[test]
fn records_keep_their_names_tags_and_times_exactly() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(600));
    let tag = "0f8fad5b-d9cb-469f-a165-70867728950e";
    let cases = [
        (
            "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
            tag,
            format!("kyuubi-spark-{tag}-driver"),
        ),
        ("uid-2", tag, format!("{tag}-driver")),
        ("uid-3", "not-a-uuid", "plain-name".to_owned()),
        ("uid-4", "t", "t".to_owned()),
    ];
    let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_456_789);
    for (uid, tag, name) in &cases {
        let mut o = finished(uid, tag, name);
        o.terminated_at = Some(at);
        assert_eq!(
            t.observe(&u(uid), &o, CleanupKind::All, at, now),
            Verdict::Arm
        );
    }
    for (uid, tag, name) in &cases {
        let r = t.get(&u(uid)).expect("tracked");
        assert_eq!(&r.name(), name);
        assert_eq!(&r.tag.to_string(), tag);
        assert_eq!(r.uid.to_string(), *uid);
        // Rounded up to the millisecond, never earlier.
        let ms = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_124);
        assert_eq!(r.terminated_at(), Some(ms));
        assert_eq!(r.first_seen(), ms);
        assert_eq!(r.seen_running(), None);
    }
    // Pods whose names have the same shape around their tag share it.
    let other = "1c4e28ba-2fa1-11d2-883f-0016d3cca427";
    t.observe(
        &u("uid-5"),
        &finished("uid-5", other, &format!("kyuubi-spark-{other}-driver")),
        CleanupKind::All,
        at,
        now,
    );
    assert_eq!(t.shapes.len(), 3);
}

#[test]
fn timers_fire_in_deadline_order_and_rearming_replaces() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(600));
    let wall = SystemTime::now();
    for i in 0..200u64 {
        let uid = format!("p{i}");
        t.observe(
            &u(&uid),
            &obs(EventKind::Update, &uid, AppState::Finished),
            CleanupKind::All,
            wall,
            now,
        );
        // Deadlines in a scrambled order: (i * 7919) mod 200 seconds.
        assert!(t.arm(&u(&uid), now + Duration::from_secs((i * 7919) % 200 + 1)));
    }
    assert_eq!(t.armed(), 200);
    // Re-arming moves a timer; a disarmed or removed record's timer never fires.
    t.arm(&u("p0"), now + Duration::from_millis(500));
    t.disarm(&u("p1"));
    run(
        &mut t,
        &obs(EventKind::Delete, "p2", AppState::Finished),
        CleanupKind::All,
        now,
    );
    assert_eq!(t.armed(), 198);
    // Rounded up to the millisecond on the tracker's clock: never earlier, less than 1 ms later.
    let first = t.next_timer().expect("armed");
    let want = now + Duration::from_millis(500);
    assert!(
        first >= want && first < want + Duration::from_millis(1),
        "{first:?}"
    );
    assert_eq!(t.take_expired(now), None);
    assert_eq!(t.take_expired(want - Duration::from_millis(1)), None);
    let mut fired = Vec::new();
    let mut last = now;
    while let Some(at) = t.next_timer() {
        assert!(at >= last, "timers fire in deadline order");
        last = at;
        let uid = t.take_expired(at).expect("due at its time");
        assert!(t.get(&uid).is_some());
        fired.push(uid.to_string());
    }
    assert_eq!(fired.len(), 198);
    assert_eq!(fired[0], "p0");
    assert!(!fired.contains(&"p1".to_owned()) && !fired.contains(&"p2".to_owned()));
    assert_eq!(t.armed(), 0);
    // Stale entries do not pile up.
    for i in 0..1000 {
        t.arm(&u("p3"), now + Duration::from_secs(5 + i % 3));
    }
    assert!(t.timers.len() <= 2 * t.armed() + 65, "{}", t.timers.len());
}

#[test]
fn the_oldest_overdue_comes_from_the_overdue_set() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(600));
    let wall = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    for i in 0..10_000u64 {
        let uid = format!("p{i}");
        t.observe(
            &u(&uid),
            &obs(EventKind::Update, &uid, AppState::Finished),
            CleanupKind::All,
            wall,
            now,
        );
    }
    assert_eq!(t.oldest_overdue(), None);
    // 50 of the 10,000 become due, with deadlines in a scrambled order.
    for i in 0..50u64 {
        let deadline = wall + Duration::from_secs((i * 37) % 50);
        assert!(t.set_due(&u(&format!("p{}", i * 100)), deadline));
    }
    assert_eq!((t.overdue_count(), t.count(Stage::Due)), (50, 50));
    assert_eq!(t.oldest_overdue(), Some(wall));
    // Stage changes among the overdue stages keep a record's deadline.
    t.set_stage(&u("p0"), Stage::Deleting);
    t.set_stage(&u("p0"), Stage::Backoff);
    assert_eq!(t.oldest_overdue(), Some(wall));
    // The oldest settled: the next oldest is found.
    t.settle(&u("p0"), now);
    let next = (1..50u64).map(|i| (i * 37) % 50).min().unwrap_or_default();
    assert_eq!(t.oldest_overdue(), Some(wall + Duration::from_secs(next)));
    // Back to Scheduled (a restarted task re-arms everything): not overdue.
    for i in 1..50u64 {
        t.set_stage(&u(&format!("p{}", i * 100)), Stage::Scheduled);
    }
    assert_eq!((t.oldest_overdue(), t.overdue_count()), (None, 0));
    assert_eq!(t.count(Stage::Scheduled), 9_999);
}

#[test]
fn a_record_is_small() {
    // Two 16-byte idents, the name's pointer, five 6-byte times, two words, the state and the
    // flags byte.
    let size = std::mem::size_of::<Record>();
    eprintln!("size_of::<Record>() = {size}");
    assert!(size <= 80, "{size}");
}

#[test]
fn the_flags_byte_keeps_the_stage_and_both_marks_apart() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(600));
    let a = u("00000000-0000-0000-0000-00000000000a");
    let o = obs(EventKind::Update, &a.to_string(), AppState::Finished);
    assert_eq!(
        t.observe(&a, &o, CleanupKind::All, SystemTime::UNIX_EPOCH, now),
        Verdict::Arm
    );
    let flags = |t: &Tracker| {
        let r = t.get(&a).expect("tracked");
        (r.stage(), r.immediate(), r.capped())
    };
    assert_eq!(flags(&t), (Stage::Scheduled, false, false));
    t.mark_capped(&a);
    assert_eq!(flags(&t), (Stage::Scheduled, false, true));
    for stage in [Stage::Due, Stage::Deleting, Stage::Backoff] {
        assert!(t.set_stage(&a, stage));
        assert_eq!(flags(&t), (stage, false, true));
        assert_eq!(t.count(stage), 1);
    }
    // Back to waiting, the cap's mark goes (issue 32): the cap marks it again if it still holds.
    assert!(t.set_stage(&a, Stage::Scheduled));
    assert_eq!(flags(&t), (Stage::Scheduled, false, false));
    assert_eq!(t.count(Stage::Scheduled), 1);
    t.mark_capped(&a);
    assert_eq!(
        t.due_now(&a, &o, SystemTime::UNIX_EPOCH, now),
        Verdict::DueNow
    );
    for stage in [Stage::Backoff, Stage::Deleting, Stage::Due] {
        assert!(t.set_stage(&a, stage));
        assert_eq!(flags(&t), (stage, true, true));
    }
}

#[test]
fn record_times_keep_48_bits_and_count_later_ones_as_the_latest() {
    for ms in [0, 1, 1_700_000_000_123, (1 << 32) + 5, MS_MAX - 1, MS_MAX] {
        assert_eq!(Ms::new(ms).get(), ms);
        assert_eq!(Ms::new(ms).is_none(), ms == 0);
    }
    assert_eq!(Ms::new(MS_MAX + 1).get(), MS_MAX);
    assert_eq!(Ms::new(u64::MAX).get(), MS_MAX);
    let far = SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 50);
    assert_eq!(
        ms_ceil(far),
        MS_MAX,
        "a time past the year 10889 counts as the latest"
    );
    let near = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_700_000_000_123_000_001);
    assert_eq!(ms_ceil(near), 1_700_000_000_124, "rounded up");
    assert_eq!(
        from_ms(Ms::new(ms_ceil(near)).get()),
        Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_124))
    );
}

/// Issue 32 §5: what only the scope watch told (records, running and spared marks) is dropped
/// when its term ends; what this server's informer told stays, even when the watch told it too.
#[test]
fn only_what_the_scope_watch_alone_told_is_dropped() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(600));
    let at = SystemTime::UNIX_EPOCH;
    let kind = CleanupKind::Completed;
    let see = |t: &mut Tracker, uid: &str, state: AppState, from_watch: bool| {
        let o = obs(EventKind::Update, uid, state);
        t.observe_from(&u(uid), &o, kind, at, now, from_watch)
    };
    // Other owners' pods, seen by the watch alone: a record, a spared mark, a running mark.
    see(&mut t, "w-done", AppState::Finished, true);
    see(&mut t, "w-failed", AppState::Failed, true);
    see(&mut t, "w-running", AppState::Running, true);
    // This server's own pods, from its informer, some also reported by the watch.
    see(&mut t, "i-done", AppState::Finished, false);
    see(&mut t, "i-done", AppState::Finished, true);
    see(&mut t, "i-running", AppState::Running, true);
    see(&mut t, "i-running", AppState::Running, false);
    see(&mut t, "i-failed", AppState::Failed, false);
    // The watch saw it run, the informer then saw it end: not the watch's alone.
    see(&mut t, "mixed", AppState::Running, true);
    see(&mut t, "mixed", AppState::Finished, false);
    // Watch-only, and then gone (deleted): no mark is left behind.
    see(&mut t, "w-gone", AppState::Finished, true);
    let mut gone = obs(EventKind::Delete, "w-gone", AppState::Finished);
    gone.deletion_requested = true;
    t.observe_from(&u("w-gone"), &gone, kind, at, now, true);
    assert_eq!(t.watch_only_count(), 3);
    assert_eq!((t.len(), t.spared_count(), t.running_count()), (3, 2, 2));
    let mut dropped: Vec<String> = t
        .drop_watch_only()
        .into_iter()
        .map(|(uid, _)| uid.to_string())
        .collect();
    dropped.sort();
    assert_eq!(dropped, ["w-done"]);
    assert_eq!(t.watch_only_count(), 0);
    assert_eq!((t.len(), t.spared_count(), t.running_count()), (2, 1, 1));
    assert!(t.get(&u("i-done")).is_some() && t.get(&u("mixed")).is_some());
    // A due-now request comes from the informer's server: the pod is not the watch's alone.
    see(&mut t, "w-canceled", AppState::Running, true);
    let o = obs(EventKind::Update, "w-canceled", AppState::Running);
    assert_eq!(t.due_now(&u("w-canceled"), &o, at, now), Verdict::DueNow);
    assert_eq!(t.watch_only_count(), 0);
    assert!(t.drop_watch_only().is_empty());
}

/// Issue 32: the cap's age index out of step with the records (an entry left for a record that
/// is due, or for a slot now reused by a younger pod) never names a pod it does not stand for:
/// the stale entries are dropped and counted, and the oldest waiting pod is named.
#[test]
fn the_cap_never_names_a_pod_for_a_stale_entry() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(600));
    t.enable_cap();
    let at = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + s);
    for (uid, ended) in [("old", 10), ("mid", 20), ("new", 30)] {
        let mut o = obs(EventKind::Update, uid, AppState::Finished);
        o.terminated_at = Some(at(ended));
        assert_eq!(run(&mut t, &o, CleanupKind::All, now), Verdict::Arm);
    }
    // "old" is due; an entry for it is left behind, older than any (drift), and one for the
    // slot of "new" under an age that is not its own.
    assert!(t.set_due(&u("old"), at(10)));
    let old_slot = t.slot(&u("old")).unwrap();
    let new_slot = t.slot(&u("new")).unwrap();
    let by_age = t.by_age.as_mut().unwrap();
    by_age.insert((1, old_slot));
    by_age.insert((2, new_slot));
    assert_eq!(t.over_cap(1), Some(u("mid")), "the oldest waiting pod");
    assert_eq!(t.cap_drift(), 2);
    assert_eq!(t.over_cap(2), None, "two wait: not over a cap of two");
}

/// Issue 32: a pod the cap made due and that waits for its retain period again (the scope's task
/// was restarted, its annotations changed) is no longer marked as taken by the cap.
#[test]
fn back_to_waiting_a_pod_is_no_longer_capped() {
    let now = Instant::now();
    let mut t = Tracker::new(Duration::from_secs(600));
    t.enable_cap();
    let o = obs(EventKind::Update, "p", AppState::Finished);
    assert_eq!(run(&mut t, &o, CleanupKind::All, now), Verdict::Arm);
    assert!(t.set_due(&u("p"), SystemTime::UNIX_EPOCH));
    t.mark_capped(&u("p"));
    assert!(t.get(&u("p")).unwrap().capped());
    assert!(t.set_stage(&u("p"), Stage::Scheduled));
    assert!(!t.get(&u("p")).unwrap().capped());
}
