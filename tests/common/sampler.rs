//! Samples "who may act now?" across candidates, every 20 ms on a dedicated thread, and checks
//! that no two candidates of a scope ever act in the same sample.
//!
//! Loaded by the test files that need it with `#[path = "common/sampler.rs"] mod sampler;`.
#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use podsweep::election::ElectionHandle;

/// "May this candidate act now?"
pub type Probe = Arc<dyn Fn() -> bool + Send + Sync>;

pub fn may_act(h: &ElectionHandle) -> Probe {
    let authority = h.authority();
    Arc::new(move || authority.may_act())
}

/// One sample: when (since the sampler started) and who may act.
#[derive(Clone, Debug)]
pub struct Sample {
    pub at: Duration,
    pub acting: Vec<bool>,
}

/// Samples every probe every 20 ms on its own thread, all probes back to back.
pub struct Sampler {
    started: std::time::Instant,
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<Sample>>>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    pub fn start(probes: Vec<Probe>) -> Sampler {
        let started = std::time::Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let (s, out) = (stop.clone(), samples.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let at = started.elapsed();
                let acting = probes.iter().map(|p| p()).collect();
                out.lock().unwrap().push(Sample { at, acting });
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        Sampler {
            started,
            stop,
            samples,
            thread: Some(thread),
        }
    }

    /// Time on the sampler's clock.
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn finish(mut self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.samples.lock().unwrap().clone()
    }
}

/// Panics if two probes of `group` act in the same sample; prints how many samples had no,
/// one or more actors, and the longest run without one.
pub fn check_one_at_a_time(name: &str, samples: &[Sample], group: std::ops::Range<usize>) {
    let counts: Vec<usize> = samples
        .iter()
        .map(|s| s.acting[group.clone()].iter().filter(|a| **a).count())
        .collect();
    let histogram = |n: usize| counts.iter().filter(|c| **c == n).count();
    let mut longest_gap = Duration::ZERO;
    let mut gap_start: Option<Duration> = None;
    for (s, c) in samples.iter().zip(&counts) {
        match (c, gap_start) {
            (0, None) => gap_start = Some(s.at),
            (0, Some(_)) => {}
            (_, Some(g)) => {
                longest_gap = longest_gap.max(s.at - g);
                gap_start = None;
            }
            _ => {}
        }
    }
    let span = samples.last().map(|s| s.at).unwrap_or_default();
    eprintln!(
        "figure: {name}: {} samples over {span:?}: {} with no leader, {} with one, {} with more; longest leaderless run {longest_gap:?}",
        samples.len(),
        histogram(0),
        histogram(1),
        counts.iter().filter(|c| **c > 1).count()
    );
    if let Some((s, _)) = samples.iter().zip(&counts).find(|(_, c)| **c > 1) {
        panic!("{name}: two candidates may act at once: {s:?}");
    }
}
