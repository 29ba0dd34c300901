//! `tracing` events -> a sink (the JVM's SLF4J through `jni`), off the calling thread.
//!
//! # Guarantees
//! * A slow sink never blocks cleanup: records go through a bounded buffer; when it is full the
//!   record is dropped and counted ([`dropped`]).
//! * `log` records from dependencies come through `tracing-log`.
//! * Levels are per target and checked before a record is formatted: podsweep's modules start at
//!   the level given to [`install`], dependencies at WARN. A sink that knows better (the JVM's
//!   SLF4J configuration) is asked at [`install`], on the installing thread, so the first records
//!   already follow it, and again every [`LEVEL_REFRESH`]; a level that is off in the JVM costs
//!   neither formatting nor a JNI call.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use once_cell::sync::OnceCell;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// The message of a caught panic (its `&str` or `String` payload).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// Where formatted records end up.
pub trait LogSink: Send + Sync + 'static {
    /// `level`: 1 ERROR, 2 WARN, 3 INFO, 4 DEBUG, 5 TRACE.
    fn emit(&self, level: i32, target: &str, message: &str);

    /// The most verbose level the sink wants for `target` (0 = off), if it knows.
    fn level_of(&self, _target: &str) -> Option<i32> {
        None
    }
}

/// How often the sink is asked for its levels again.
pub const LEVEL_REFRESH: Duration = Duration::from_secs(10);

/// Targets with a level of their own; anything else is a dependency ([`DEPS`]).
pub const TARGETS: &[&str] = &[
    "podsweep",
    "podsweep::engine",
    "podsweep::sweeper",
    "podsweep::deleter",
    "podsweep::config",
    "podsweep::kube_client",
    "podsweep::election",
    "podsweep::election::local",
    "podsweep::election::zookeeper",
    "podsweep::election::etcd",
];

/// The pseudo-target whose level applies to records of other crates.
pub const DEPS: &str = "deps";

static LEVELS: [AtomicI32; 11] = [const { AtomicI32::new(3) }; 11];

fn slot(target: &str) -> usize {
    if !target.starts_with("podsweep") {
        return TARGETS.len();
    }
    // The longest known prefix that ends at a module boundary.
    let mut best = 0;
    for (i, t) in TARGETS.iter().enumerate() {
        let at_boundary = target
            .strip_prefix(t)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"));
        if at_boundary && t.len() >= TARGETS[best].len() {
            best = i;
        }
    }
    best
}

/// Sets the most verbose level passed for a target of [`TARGETS`] or [`DEPS`] (0 = off).
pub fn set_level(target: &str, level: i32) {
    let i = if target == DEPS {
        TARGETS.len()
    } else {
        slot(target)
    };
    LEVELS[i].store(level.clamp(0, 5), Ordering::Relaxed);
}

/// The most verbose level passed for `target`.
pub fn level(target: &str) -> i32 {
    LEVELS[slot(target)].load(Ordering::Relaxed)
}

const BUFFER: usize = 8192;

static DROPPED: AtomicU64 = AtomicU64::new(0);
static INSTALLED: OnceCell<()> = OnceCell::new();

/// Records dropped because the buffer was full.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

pub fn level_number(level: &Level) -> i32 {
    match *level {
        Level::ERROR => 1,
        Level::WARN => 2,
        Level::INFO => 3,
        Level::DEBUG => 4,
        Level::TRACE => 5,
    }
}

struct Record {
    level: i32,
    target: String,
    message: String,
}

struct ChannelLayer {
    tx: SyncSender<Record>,
}

impl<S: Subscriber> Layer<S> for ChannelLayer {
    fn register_callsite(
        &self,
        _meta: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        // Levels change at run time: ask `enabled` every time.
        tracing::subscriber::Interest::sometimes()
    }

    fn enabled(&self, meta: &tracing::Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        // kube-rs logs every failed request at ERROR without pod or scope; the sweeper already
        // logs each DELETE outcome with its class, so these pass only when dependencies are at DEBUG.
        if meta.target().starts_with("kube_client::client::builder") {
            return level(DEPS) >= 4;
        }
        level_number(meta.level()) <= level(meta.target())
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut v = MessageVisitor::default();
        event.record(&mut v);
        let mut message = v.message;
        if !v.fields.is_empty() {
            let _ = write!(message, " [{}]", v.fields.trim_end_matches(", "));
        }
        let meta = event.metadata();
        let target = meta
            .module_path()
            .filter(|_| meta.target().starts_with("log"))
            .unwrap_or(meta.target())
            .to_owned();
        // No secret of the configuration leaves in a log record (crate::config::redact).
        let message = match crate::config::redact::scrub(&message) {
            std::borrow::Cow::Borrowed(_) => message,
            std::borrow::Cow::Owned(scrubbed) => scrubbed,
        };
        let rec = Record {
            level: level_number(meta.level()),
            target,
            message,
        };
        if let Err(TrySendError::Full(_)) = self.tx.try_send(rec) {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[derive(Default)]
struct MessageVisitor {
    message: String,
    fields: String,
}

impl Visit for MessageVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else if !field.name().starts_with("log.") {
            let _ = write!(self.fields, "{}={}, ", field.name(), value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else if !field.name().starts_with("log.") {
            let _ = write!(self.fields, "{}={:?}, ", field.name(), value);
        }
    }
}

/// Installs the process-wide subscriber once; later calls do nothing and return false.
pub fn install(sink: Arc<dyn LogSink>, own_max: Level) -> bool {
    let mut installed = false;
    INSTALLED.get_or_init(|| {
        for t in TARGETS {
            set_level(t, level_number(&own_max));
        }
        set_level(DEPS, level_number(&Level::WARN));
        // Before any record: a record logged before the log thread's first refresh would
        // otherwise be judged by the default levels (a logger set to DEBUG would miss it).
        refresh_levels(sink.as_ref());
        let (tx, rx) = sync_channel::<Record>(BUFFER);
        let spawned = std::thread::Builder::new()
            .name("podsweep-log".into())
            .spawn(move || {
                let mut refreshed = Instant::now();
                loop {
                    match rx.recv_timeout(LEVEL_REFRESH) {
                        Ok(rec) => sink.emit(rec.level, &rec.target, &rec.message),
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                    if refreshed.elapsed() >= LEVEL_REFRESH {
                        refresh_levels(sink.as_ref());
                        refreshed = Instant::now();
                    }
                }
            });
        if spawned.is_err() {
            return;
        }
        let subscriber = tracing_subscriber::registry().with(ChannelLayer { tx });
        if tracing::subscriber::set_global_default(subscriber).is_ok() {
            let _ = tracing_log::LogTracer::init();
            installed = true;
        }
    });
    installed
}

fn refresh_levels(sink: &dyn LogSink) {
    for t in TARGETS.iter().copied().chain([DEPS]) {
        if let Some(l) = sink.level_of(t) {
            set_level(t, l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_map_to_the_longest_module_prefix() {
        assert_eq!(TARGETS[slot("podsweep::sweeper")], "podsweep::sweeper");
        assert_eq!(
            TARGETS[slot("podsweep::election::etcd::lease")],
            "podsweep::election::etcd"
        );
        assert_eq!(
            TARGETS[slot("podsweep::election::zookeeper")],
            "podsweep::election::zookeeper"
        );
        assert_eq!(TARGETS[slot("podsweep::electionx")], "podsweep");
        assert_eq!(TARGETS[slot("podsweep::tracker")], "podsweep");
        assert_eq!(slot("kube_client::client"), TARGETS.len());
        set_level("podsweep::deleter", 4);
        assert_eq!(level("podsweep::deleter"), 4);
        set_level("podsweep::deleter", 3);
    }
}
