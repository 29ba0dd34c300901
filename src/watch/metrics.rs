//! A scope's watch counters, for its status (`watching`, `watch_streams`, ...), and how the
//! watch's health is judged from them.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};
use std::time::Duration;

use super::lists::ListMode;

/// A scope's watch counters, for its status.
#[derive(Debug, Default)]
pub struct WatchMetrics {
    /// This server holds the scope's pod watch now.
    pub watching: AtomicBool,
    /// Lists started (see the module's caveats).
    pub streams: AtomicU64,
    /// Errors met by the watch (failed lists and watches, expiries, client builds).
    pub errors: AtomicU64,
    /// Pod events received.
    pub events: AtomicU64,
    /// How the last stream's first state came: 0 none yet, 1 streaming, 2 list.
    list_mode: AtomicU8,
    /// The field selector of the watch, if any.
    pub(super) selector: Option<&'static str>,
    /// Epoch milliseconds of the first error since the watch last worked; 0 when it works.
    failing_since_ms: AtomicU64,
    /// The last error's text.
    last_error: std::sync::Mutex<String>,
}

impl WatchMetrics {
    pub(super) fn new(selector: Option<&'static str>) -> Self {
        WatchMetrics {
            selector,
            ..Default::default()
        }
    }

    /// Adds `watching`, `watch_streams`, `watch_errors`, `watch_events`, `watch_failing_ms`,
    /// `watch_last_error`, `watch_list_mode` and `watch_field_selector` to a status object.
    pub fn add_to(&self, v: &mut serde_json::Value) {
        v["watching"] = self.watching.load(Relaxed).into();
        v["watch_streams"] = self.streams.load(Relaxed).into();
        v["watch_errors"] = self.errors.load(Relaxed).into();
        v["watch_events"] = self.events.load(Relaxed).into();
        let since = self.failing_since_ms.load(Relaxed);
        v["watch_failing_ms"] = match since {
            0 => 0,
            t => crate::metrics::epoch_ms().saturating_sub(t),
        }
        .into();
        v["watch_last_error"] = match since {
            0 => serde_json::Value::Null,
            _ => self.last_error().into(),
        };
        v["watch_list_mode"] = match self.list_mode.load(Relaxed) {
            1 => ListMode::Streaming.as_str().into(),
            2 => ListMode::List.as_str().into(),
            _ => serde_json::Value::Null,
        };
        v["watch_field_selector"] = self.selector.into();
    }

    /// The mode of the stream that starts.
    pub(super) fn stream_mode(&self, mode: ListMode) {
        let m = match mode {
            ListMode::Streaming => 1,
            ListMode::List => 2,
        };
        self.list_mode.store(m, Relaxed);
    }

    pub(super) fn last_error(&self) -> String {
        self.last_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(super) fn failed(&self, error: String) {
        self.errors.fetch_add(1, Relaxed);
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = error;
        let _ = self.failing_since_ms.compare_exchange(
            0,
            crate::metrics::epoch_ms().max(1),
            Relaxed,
            Relaxed,
        );
    }

    /// How long the watch has been failing (zero while it works).
    pub(super) fn failing_for(&self) -> Duration {
        match self.failing_since_ms.load(Relaxed) {
            0 => Duration::ZERO,
            t => Duration::from_millis(crate::metrics::epoch_ms().saturating_sub(t)),
        }
    }

    /// The watch works: it received an event after its list, or has lasted
    /// [`super::pace::RETRY_RESET_AFTER`] past its list (a list alone proves nothing about the
    /// watch).
    pub(super) fn working(&self) {
        self.failing_since_ms.store(0, Relaxed);
    }
}
