//! The engine's table of watch tasks, one per configured scope in self-watch mode.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::{spawn, ClientSource, WatchHandle, WatchMetrics, WatchOptions, WatchTask};
use crate::kyuubi_state::StateConfig;
use crate::scope::Scope;
use crate::sweeper::ScopeHandle;

/// Self-watch mode's part of an engine.
pub struct Watches {
    source: ClientSource,
    state: StateConfig,
    /// How long a watch may keep failing (and a restarted watch task must run) before the
    /// scope is healthy again: `health.alertAfter`.
    healthy_after: Duration,
    /// Beside the JVM's informers: events are added, nothing is dropped (see `WatchTask`).
    additive: bool,
    /// The field selector and the streaming lists (`watch.phaseSelector`,
    /// `watch.streamingList`).
    options: WatchOptions,
    handles: Mutex<HashMap<Scope, WatchHandle>>,
}

impl Watches {
    pub fn new(
        source: ClientSource,
        state: StateConfig,
        healthy_after: Duration,
        options: WatchOptions,
    ) -> Self {
        Watches {
            source,
            state,
            healthy_after,
            additive: false,
            options,
            handles: Mutex::default(),
        }
    }

    /// The leaders' watches beside the JVM's informers ([`WatchTask::additive`]).
    pub fn additive(
        source: ClientSource,
        state: StateConfig,
        healthy_after: Duration,
        options: WatchOptions,
    ) -> Self {
        Watches {
            additive: true,
            ..Self::new(source, state, healthy_after, options)
        }
    }

    /// Starts the watch task of the scope task of `key` that has just started (on the current
    /// runtime); it watches with the Kubernetes client of the task's scope.
    pub fn start(&self, key: &Scope, h: &ScopeHandle) {
        let scope = key;
        let handle = spawn(WatchTask {
            scope: h.scope.clone(),
            status: h.status.clone(),
            tx: h.tx.clone(),
            source: self.source.clone(),
            state: self.state.clone(),
            health: h.metrics.clone(),
            healthy_after: self.healthy_after,
            additive: self.additive,
            options: self.options,
        });
        let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = handles.insert(scope.clone(), handle) {
            drop(old.stop());
        }
    }

    /// Adds the scope's watch counters to its status (zeros when it has no watch).
    pub fn add_status(&self, scope: &Scope, v: &mut serde_json::Value) {
        let handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        match handles.get(scope) {
            Some(h) => h.metrics.add_to(v),
            None => WatchMetrics::default().add_to(v),
        }
    }

    /// Stops every watch task; the handles resolve once they have ended.
    pub fn stop_all(&self) -> Vec<JoinHandle<()>> {
        let mut handles = self.handles.lock().unwrap_or_else(|p| p.into_inner());
        handles.drain().map(|(_, h)| h.stop()).collect()
    }
}
