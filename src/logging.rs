//! `tracing` events -> a sink (the JVM's SLF4J through `jni`), off the calling thread.
//!
//! # Guarantees
//! * A slow sink never blocks cleanup: records go through a bounded buffer; when it is full the
//!   record is dropped and counted ([`dropped`]).
//! * `log` records from dependencies come through `tracing-log`.
//! * podsweep's own targets are passed at the configured level; dependencies only at WARN and up.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

use once_cell::sync::OnceCell;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Where formatted records end up.
pub trait LogSink: Send + Sync + 'static {
    /// `level`: 1 ERROR, 2 WARN, 3 INFO, 4 DEBUG, 5 TRACE.
    fn emit(&self, level: i32, target: &str, message: &str);
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
    own_max: Level,
}

impl<S: Subscriber> Layer<S> for ChannelLayer {
    fn enabled(&self, meta: &tracing::Metadata<'_>, _ctx: Context<'_, S>) -> bool {
        let max = if meta.target().starts_with("podsweep") {
            self.own_max
        } else {
            Level::WARN
        };
        *meta.level() <= max
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
        let (tx, rx) = sync_channel::<Record>(BUFFER);
        let spawned = std::thread::Builder::new()
            .name("podsweep-log".into())
            .spawn(move || {
                while let Ok(rec) = rx.recv() {
                    sink.emit(rec.level, &rec.target, &rec.message);
                }
            });
        if spawned.is_err() {
            return;
        }
        let subscriber = tracing_subscriber::registry().with(ChannelLayer { tx, own_max });
        if tracing::subscriber::set_global_default(subscriber).is_ok() {
            let _ = tracing_log::LogTracer::init();
            installed = true;
        }
    });
    installed
}
