//! `scripts/bench memory`: native memory per tracked terminated pod, and the takeover reconcile.
//!
//! `cargo bench --bench memory -- memory [--smoke]` prints one JSON line per size on stdout
//! (`{"bench": "memory", "pods": N, ...}`), progress on stderr. Sizes: 100,000 and 1,000,000 pods;
//! `--smoke`: 1,000 and 10,000.
//!
//! Each size runs in a child process (this binary again) so that its RSS figures start clean:
//! 1. An engine as Kyuubi runs it (cleanup kind ALL, retain 1 h, the process-wide runtime) with a
//!    hand-driven election backend (this server follows) and a recording deleter in place of the
//!    Kubernetes API. A running driver pod starts the scope; then the engine idles: baseline.
//! 2. N distinct terminated driver pods (Kyuubi-like tag, name and UID lengths, terminated 30 s
//!    ago, so nothing is due for an hour) go through `Engine::observe`. The strings are generated
//!    on the fly and moved into the engine, so the bench itself holds none of them. Done when the
//!    scope's `tracked` gauge reads N; live heap delta / N = bytes per pod while following.
//! 3. The backend makes this server leader. Done when the sweeper has handled the transition
//!    (status `leader` = 1, then a duplicate observation sent after that has been processed, so the
//!    handler has returned). Kubernetes API calls = DELETEs that reached the recorder (expected 0:
//!    nothing is due, and the reconcile works from memory). Live heap delta / N while leading.
//!    Followers arm their timers too (the sweeper inserts every new record into its deadline queue
//!    whatever the leadership), so both figures come out the same; a takeover allocates nothing
//!    per pod.
//! 4. Where the bytes go: a standalone `Tracker` (the real type) fed the same N pods (records and
//!    their UID index), then the same tracker with every pod's timer armed (the timer entries),
//!    and the engine's table of what each scope task was told (`seen_table`: a 16-byte UID and a
//!    word per pod, which answers an informer's repeated events on its own thread).
//!
//! Heap bytes are counted by a `#[global_allocator]` around the system allocator: requested sizes,
//! so malloc's own headers and size-class rounding are not included (the RSS figures, from
//! `/proc/self/status` VmRSS, are the cross-check that includes them).

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant as StdInstant, SystemTime};

use common::manual::ManualBackend;
use common::recorder::{self, Recorder};
use podsweep::clock::Clock;
use podsweep::config::{keys, Settings};
use podsweep::engine::Engine;
use podsweep::ident::Ident;
use podsweep::model::{AppState, CleanupKind, EventKind, Observation};
use podsweep::scope::Scope;
use podsweep::seen::{Head, SeenPods};
use podsweep::tracker::{Record, Tracker};

/// Counts live heap bytes (allocated - freed) and their peak.
struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static FREED: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn note_alloc(size: usize) {
    let live = (ALLOCATED.fetch_add(size, Relaxed) + size).saturating_sub(FREED.load(Relaxed));
    PEAK.fetch_max(live, Relaxed);
}

// SAFETY: every call is forwarded unchanged to the system allocator; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            note_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) };
        FREED.fetch_add(layout.size(), Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            FREED.fetch_add(layout.size(), Relaxed);
            note_alloc(new_size);
        }
        p
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Live heap bytes now.
fn live() -> usize {
    // Read FREED first: a concurrent free between the two loads can only make this read high.
    let freed = FREED.load(Relaxed);
    ALLOCATED.load(Relaxed).saturating_sub(freed)
}

/// Restarts peak tracking from the current live bytes.
fn reset_peak() {
    PEAK.store(live(), Relaxed);
}

/// Resident set size of this process in bytes (VmRSS), 0 if unreadable.
fn rss() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// CPU time of this process so far (user + system, all threads), from `/proc/self/stat`.
fn cpu() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            // Fields after the command name (which may hold spaces) start at field 3 (state).
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// The 1-minute load average (other builds share this machine), 0 if unreadable.
fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

const CHILD_ENV: &str = "PODSWEEP_MEMORY_PODS";

fn main() {
    if let Ok(n) = std::env::var(CHILD_ENV) {
        let Ok(n) = n.parse::<usize>() else {
            eprintln!("[memory] bad {CHILD_ENV}={n}");
            std::process::exit(2);
        };
        std::process::exit(match child(n) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("[memory] {n} pods: {e}");
                1
            }
        });
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    if let Some(name) = args.iter().find(|a| !a.starts_with('-')) {
        if name != "memory" {
            eprintln!("[memory] nothing named {name:?} here (this bench is \"memory\")");
            return;
        }
    }
    let sizes: &[usize] = if smoke {
        &[1_000, 10_000]
    } else {
        &[100_000, 1_000_000]
    };
    let Ok(exe) = std::env::current_exe() else {
        eprintln!("[memory] cannot find this executable");
        std::process::exit(1);
    };
    let mut failed = false;
    for &n in sizes {
        // The child prints its JSON line on the inherited stdout.
        match Command::new(&exe).env(CHILD_ENV, n.to_string()).status() {
            Ok(s) if s.success() => {}
            Ok(s) => {
                eprintln!("[memory] {n} pods: child failed ({s})");
                failed = true;
            }
            Err(e) => {
                eprintln!("[memory] {n} pods: cannot start child: {e}");
                failed = true;
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}

/// A UUID-shaped string (version 4 layout, 36 characters), deterministic in `(i, salt)`.
fn uuid(i: u64, salt: u64) -> String {
    fn mix(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    let a = mix(i.wrapping_mul(4).wrapping_add(salt));
    let b = mix(a ^ salt.rotate_left(32));
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | ((b >> 48) & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

/// Terminated driver pod `i` as Kyuubi's informer reports it.
fn pod(i: u64, terminated_at: SystemTime) -> Observation {
    let tag = uuid(i, 1);
    Observation {
        kind: EventKind::Update,
        pod_name: format!("kyuubi-spark-{tag}-driver"),
        tag,
        pod_uid: uuid(i, 2),
        state: AppState::Finished,
        has_app_selector: true,
        terminated_at: Some(terminated_at),
        deletion_requested: false,
        annotations: None,
    }
}

fn status(engine: &Engine, scope: &Scope) -> serde_json::Value {
    serde_json::from_str(&engine.status_json(scope)).unwrap_or_default()
}

fn field(v: &serde_json::Value, name: &str) -> u64 {
    v[name].as_u64().unwrap_or(0)
}

/// Polls the scope's status until `done` holds; `Err` after `limit`.
fn wait_for(
    engine: &Engine,
    scope: &Scope,
    limit: Duration,
    poll: Duration,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> Result<(), String> {
    let start = StdInstant::now();
    loop {
        let st = status(engine, scope);
        if done(&st) {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(format!(
                "timed out after {limit:?} waiting for {what}: {st}"
            ));
        }
        std::thread::sleep(poll);
    }
}

fn per_pod(bytes: isize, n: usize) -> f64 {
    (bytes as f64 / n as f64 * 10.0).round() / 10.0
}

fn mb(bytes: isize) -> f64 {
    (bytes as f64 / (1024.0 * 1024.0) * 10.0).round() / 10.0
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}

/// One size, in this (child) process: prints one JSON line.
fn child(n: usize) -> Result<(), String> {
    let rt = podsweep::engine::runtime().map_err(|e| e.to_string())?;
    let recorder = Arc::new(Recorder::default());
    let backend = ManualBackend::default();
    let signals = backend.signals.clone();
    let conf: HashMap<String, String> =
        [(keys::CLEANUP_KIND, "ALL"), (keys::RETAIN_PERIOD, "PT1H")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
    let settings = Settings::from_map(conf).map_err(|e| e.to_string())?;
    let engine = Engine::with_parts(
        settings,
        "server-a",
        Arc::new(backend),
        recorder::source(recorder.clone()),
        Clock::System,
        rt.handle().clone(),
    )
    .map_err(|e| e.to_string())?;
    let scope = Scope::new(Some("kind-kyuubi"), Some("spark"));
    let terminated_at = SystemTime::now() - Duration::from_secs(30);

    // A running driver pod starts the scope, its campaign and its sweeper; it reaches the scope's
    // task (counted in `observed`) and is only remembered as running, not tracked for deletion.
    let mut warm = pod(u64::MAX, terminated_at);
    warm.state = AppState::Running;
    engine
        .observe(scope.clone(), warm)
        .map_err(|e| e.to_string())?;
    let signal = {
        let start = StdInstant::now();
        loop {
            let got = signals
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .last()
                .cloned();
            if let Some(s) = got {
                break s;
            }
            if start.elapsed() > Duration::from_secs(10) {
                return Err("the scope's campaign never started".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    wait_for(
        &engine,
        &scope,
        Duration::from_secs(10),
        Duration::from_millis(5),
        "the scope to start",
        |st| st["known"] == true && st["leadership"] == "FOLLOWING",
    )?;
    // Let the scope task build its deleter and go idle.
    std::thread::sleep(Duration::from_millis(200));
    let base = live() as isize;
    let rss_base = rss() as isize;
    reset_peak();

    // Following: observe N terminated pods.
    eprintln!("[memory] {n} pods: observing while following");
    let t0 = StdInstant::now();
    let cpu0 = cpu();
    let mut sent = 0usize;
    for i in 0..n {
        engine
            .observe(scope.clone(), pod(i as u64, terminated_at))
            .map_err(|e| e.to_string())?;
        sent += 1;
        // Keep the backlog in the engine's queue bounded, as an informer's pace would.
        if sent.is_multiple_of(8192) {
            while (sent as u64 + 1).saturating_sub(field(&status(&engine, &scope), "observed"))
                > 65_536
            {
                std::thread::sleep(Duration::from_micros(500));
            }
        }
    }
    wait_for(
        &engine,
        &scope,
        Duration::from_secs(120),
        Duration::from_millis(1),
        "all pods tracked",
        |st| field(st, "tracked") == n as u64 && field(st, "observed") == n as u64 + 1,
    )?;
    let observe_all = t0.elapsed();
    let observe_cpu = cpu().saturating_sub(cpu0);
    let following = live() as isize - base;
    let peak_observing = PEAK.load(Relaxed) as isize - base;
    let rss_following = rss() as isize;
    let st_following = status(&engine, &scope);

    // Takeover: this server becomes leader.
    eprintln!("[memory] {n} pods: taking over");
    reset_peak();
    let t1 = StdInstant::now();
    signal.lead_until(
        tokio::time::Instant::now() + Duration::from_secs(24 * 3600),
        "bench takeover",
    );
    wait_for(
        &engine,
        &scope,
        Duration::from_secs(60),
        Duration::from_micros(50),
        "the sweeper to lead",
        |st| field(st, "leader") == 1,
    )?;
    let leader_flag = t1.elapsed();
    // The handler has returned once an observation sent after its flag has been processed.
    engine
        .observe(scope.clone(), pod(0, terminated_at))
        .map_err(|e| e.to_string())?;
    wait_for(
        &engine,
        &scope,
        Duration::from_secs(60),
        Duration::from_micros(50),
        "the takeover reconcile",
        |st| field(st, "observed") == n as u64 + 2,
    )?;
    let reconcile = t1.elapsed();
    let leading = live() as isize - base;
    let peak_takeover = PEAK.load(Relaxed) as isize - base;
    let rss_leading = rss() as isize;
    // Give a mistaken DELETE time to show up.
    std::thread::sleep(Duration::from_millis(300));
    let st_leading = status(&engine, &scope);
    let api_calls = recorder.count();

    engine.close(Duration::from_secs(30));
    let after_close = live() as isize - base;
    drop(engine);

    // Where the bytes go: the tracker alone, then a model of the sweeper's timer structures.
    eprintln!("[memory] {n} pods: breakdown");
    let (tracker_bytes, timer_bytes, seen_bytes) = breakdown(n, terminated_at, rt);

    let strings = {
        let p = pod(0, terminated_at);
        // Heap bytes of one record's strings: UID and tag are UUIDs (kept inline, 0), the name is
        // shared by every pod whose name has the same shape around its tag (0 per pod here);
        // what they were as Strings: tag + name + UID as an Arc<str> (two counts + bytes).
        (0, p.tag.len() + p.pod_name.len() + p.pod_uid.len() + 16)
    };
    let line = serde_json::json!({
        "pods": n,
        "bytes_per_pod_following": per_pod(following, n),
        "bytes_per_pod_leading": per_pod(leading, n),
        "reconcile_on_takeover_ms": ms(reconcile),
        "kubernetes_api_calls": api_calls,
        "observe_all_ms": ms(observe_all),
        "observe_per_sec": (n as f64 / observe_all.as_secs_f64()).round(),
        "observe_all_cpu_ms": ms(observe_cpu),
        "loadavg_1m": loadavg(),
        "leader_flag_ms": ms(leader_flag),
        "peak_bytes_per_pod_observing": per_pod(peak_observing, n),
        "peak_extra_bytes_takeover": (peak_takeover - leading).max(0),
        "timers_armed_following": field(&st_following, "scheduled"),
        "timers_armed_leading": field(&st_leading, "scheduled"),
        "due_leading": field(&st_leading, "due"),
        "deletes_sent": field(&st_leading, "deletes_sent"),
        "breakdown_bytes_per_pod": {
            "tracker_records_and_index": per_pod(tracker_bytes, n),
            "tracker_timers": per_pod(timer_bytes, n),
            "seen_table": per_pod(seen_bytes, n),
            "strings_in_tracker": strings.0,
            "strings_as_separate_allocations_were": strings.1,
            "size_of_record": std::mem::size_of::<Record>(),
            "size_of_ident": std::mem::size_of::<Ident>(),
        },
        "queued_max_following": field(&st_following, "queued_max"),
        "live_bytes_left_after_close": after_close,
        "rss_cross_check": {
            "note": "process VmRSS, includes malloc overhead and freed-but-kept pages",
            "baseline_mb": mb(rss_base),
            "following_mb": mb(rss_following),
            "leading_mb": mb(rss_leading),
        },
        "rss_delta_mb": mb(rss_leading - rss_base),
        "heap_bytes": "requested sizes via a counting global allocator; delta over the idle engine",
    });
    common::bench::line("memory", line);
    Ok(())
}

/// Heap bytes of a standalone [`Tracker`] holding the N pods (records and UID index), of arming
/// every pod's timer in it, and of the engine's table of what each pod's scope task was told
/// ([`SeenPods`], which answers repeated events on the informer's thread).
fn breakdown(
    n: usize,
    terminated_at: SystemTime,
    rt: &tokio::runtime::Runtime,
) -> (isize, isize, isize) {
    let _enter = rt.enter();
    let mut uids: Vec<Ident> = Vec::with_capacity(n);
    let before = live() as isize;
    let mut tracker = Tracker::new(Duration::from_secs(4200));
    let now_wall = SystemTime::now();
    let now = tokio::time::Instant::now();
    // `uids` was allocated before `before`; its idents are inline (UUIDs), so it holds no heap
    // bytes of its own.
    for i in 0..n {
        let obs = pod(i as u64, terminated_at);
        let uid = Ident::new(&obs.pod_uid);
        tracker.observe(&uid, &obs, CleanupKind::All, now_wall, now);
        uids.push(uid);
    }
    let tracker_bytes = live() as isize - before;

    let before = live() as isize;
    for uid in &uids {
        tracker.arm(uid, now + Duration::from_secs(3570));
    }
    let timer_bytes = live() as isize - before;
    drop((tracker, uids));

    let before = live() as isize;
    let seen = SeenPods::default();
    for i in 0..n {
        let obs = pod(i as u64, terminated_at);
        seen.admit(&Head::of(&obs), now_wall);
    }
    let seen_bytes = live() as isize - before;
    drop(seen);
    (tracker_bytes, timer_bytes, seen_bytes)
}
