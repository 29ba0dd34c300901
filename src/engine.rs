//! One podsweep instance per Kyuubi server: scopes, their elections and sweepers, on one runtime.
//!
//! # Guarantees
//! * [`Engine::observe`] never blocks on the network: it validates, looks the scope up (creating
//!   its task on first use) and queues the event.
//! * Pods in a scope outside `kyuubi.kubernetes.context.allow.list` /
//!   `kyuubi.kubernetes.namespace.allow.list` are refused, never tracked.
//! * [`Engine::close`] deletes nothing; it stops every scope task and releases leadership.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use once_cell::sync::OnceCell;
use thiserror::Error;
use tracing::info;

use crate::clock::Clock;
use crate::config::{keys, CleanupKind, ConfigError, HaSettings, Settings};
use crate::deleter::{KubeDeleter, PodDeleter};
use crate::election::etcd::EtcdBackend;
use crate::election::local::LocalBackend;
use crate::election::zookeeper::ZooKeeperBackend;
use crate::election::{Backend, ElectionHandle, Leadership};
use crate::kube_client;
use crate::model::Observation;
use crate::scope::Scope;
use crate::sweeper::{self, Command, DeleterSource, ScopeHandle, SweeperConfig};

#[derive(Debug, Error)]
pub enum EngineError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{name}: {message}")]
    Argument { name: &'static str, message: String },
    #[error("{key} does not allow {what} {value:?}")]
    Disallowed {
        key: &'static str,
        what: &'static str,
        value: String,
    },
    #[error("podsweep is closed")]
    Closed,
    #[error("podsweep runtime: {0}")]
    Runtime(String),
}

/// The process-wide runtime that runs every engine's tasks.
pub fn runtime() -> Result<&'static tokio::runtime::Runtime, EngineError> {
    static RT: OnceCell<tokio::runtime::Runtime> = OnceCell::new();
    RT.get_or_try_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("podsweep-worker")
            .enable_all()
            .build()
    })
    .map_err(|e| EngineError::Runtime(e.to_string()))
}

pub struct Engine {
    settings: Arc<Settings>,
    server_id: String,
    backend: Arc<dyn Backend>,
    source: DeleterSource,
    clock: Clock,
    rt: tokio::runtime::Handle,
    sweeper_cfg: SweeperConfig,
    scopes: RwLock<HashMap<Scope, ScopeHandle>>,
    closed: AtomicBool,
}

impl Engine {
    /// An engine as a Kyuubi server runs it: backend from the HA keys, kube-rs clients from the
    /// Kubernetes keys, the system clock.
    pub fn new(
        settings: Settings,
        server_id: &str,
        rt: tokio::runtime::Handle,
    ) -> Result<Self, EngineError> {
        kube_client::validate(&settings.raw).map_err(|e| match e {
            kube_client::KubeClientError::Invalid { key, message } => {
                EngineError::Config(ConfigError::invalid(&key, "", message))
            }
            other => EngineError::Runtime(other.to_string()),
        })?;
        let backend: Arc<dyn Backend> = match &settings.ha {
            HaSettings::Local => Arc::new(LocalBackend),
            HaSettings::ZooKeeper(zk) => Arc::new(ZooKeeperBackend::new(zk.clone())),
            HaSettings::Etcd(e) => Arc::new(EtcdBackend::new(e.clone())),
        };
        let source = kube_source(settings.raw.clone());
        Self::with_parts(settings, server_id, backend, source, Clock::System, rt)
    }

    /// An engine with injected parts (tests, benches, the demo).
    pub fn with_parts(
        settings: Settings,
        server_id: &str,
        backend: Arc<dyn Backend>,
        source: DeleterSource,
        clock: Clock,
        rt: tokio::runtime::Handle,
    ) -> Result<Self, EngineError> {
        if server_id.trim().is_empty() {
            return Err(EngineError::Argument {
                name: "serverId",
                message: "must not be empty".into(),
            });
        }
        let mut sweeper_cfg = SweeperConfig::new(settings.kind, settings.retain);
        sweeper_cfg.leaderless_alert = settings.leaderless_alert;
        sweeper_cfg.tuning = settings.tuning.clone();
        match settings.kind {
            CleanupKind::None => info!(
                "podsweep {} started for server {server_id}: {} = NONE, so no driver pod is deleted",
                env!("CARGO_PKG_VERSION"),
                keys::CLEANUP_KIND
            ),
            kind => info!(
                "podsweep {} started for server {server_id}: cleanup kind {}, retain period {:?}, leader election via {}",
                env!("CARGO_PKG_VERSION"),
                kind.as_str(),
                settings.retain,
                backend.name()
            ),
        }
        Ok(Engine {
            settings: Arc::new(settings),
            server_id: server_id.to_owned(),
            backend,
            source,
            clock,
            rt,
            sweeper_cfg,
            scopes: RwLock::new(HashMap::new()),
            closed: AtomicBool::new(false),
        })
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Feeds one pod event. Non-blocking.
    pub fn observe(&self, scope: Scope, obs: Observation) -> Result<(), EngineError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        if obs.pod_uid.is_empty() {
            return Err(EngineError::Argument {
                name: "podUid",
                message: "must not be empty".into(),
            });
        }
        if obs.pod_name.is_empty() {
            return Err(EngineError::Argument {
                name: "podName",
                message: "must not be empty".into(),
            });
        }
        if self.settings.kind == CleanupKind::None || !obs.is_kyuubi_driver() {
            return Ok(());
        }
        let relevant = obs.is_cleaned() || obs.state.is_terminated();
        {
            let scopes = self.scopes.read().unwrap_or_else(|p| p.into_inner());
            if let Some(h) = scopes.get(&scope) {
                if relevant {
                    let _ = h.tx.send(Command::Observe(Box::new(obs)));
                }
                return Ok(());
            }
        }
        // First event of a scope: check the allow lists once; a refused scope is never stored.
        self.check_allowed(&scope)?;
        let mut scopes = self.scopes.write().unwrap_or_else(|p| p.into_inner());
        if self.closed.load(Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        let h = scopes
            .entry(scope.clone())
            .or_insert_with(|| self.start_scope(scope));
        if relevant {
            let _ = h.tx.send(Command::Observe(Box::new(obs)));
        }
        Ok(())
    }

    fn start_scope(&self, scope: Scope) -> ScopeHandle {
        let _enter = self.rt.enter();
        let election = ElectionHandle::start(&self.backend, scope.clone(), self.server_id.clone());
        sweeper::spawn(
            scope,
            self.sweeper_cfg.clone(),
            self.clock.clone(),
            election,
            self.source.clone(),
        )
    }

    fn check_allowed(&self, scope: &Scope) -> Result<(), EngineError> {
        let s = &self.settings;
        let context = scope
            .context
            .as_deref()
            .or_else(|| s.get(keys::KUBE_CONTEXT));
        if let Some(c) = context {
            if !s.context_allow.is_empty() && !s.context_allow.contains(c) {
                return Err(EngineError::Disallowed {
                    key: keys::CONTEXT_ALLOW_LIST,
                    what: "context",
                    value: c.to_owned(),
                });
            }
        }
        if !s.namespace_allow.is_empty() {
            let ns = match &scope.namespace {
                Some(ns) => ns.clone(),
                None => kube_client::namespace(&kube_client::scope_conf(&s.raw, scope)),
            };
            if !s.namespace_allow.contains(&ns) {
                return Err(EngineError::Disallowed {
                    key: keys::NAMESPACE_ALLOW_LIST,
                    what: "namespace",
                    value: ns,
                });
            }
        }
        Ok(())
    }

    /// This server's leadership of a scope, if the scope is known here.
    pub fn leadership(&self, scope: &Scope) -> Option<Leadership> {
        let scopes = self.scopes.read().unwrap_or_else(|p| p.into_inner());
        scopes.get(scope).map(|h| h.status.borrow().leadership)
    }

    /// A JSON snapshot of a scope's state and counters.
    pub fn status_json(&self, scope: &Scope) -> String {
        let scopes = self.scopes.read().unwrap_or_else(|p| p.into_inner());
        self.status_value(&scopes, scope).to_string()
    }

    /// A JSON array with the snapshot of every scope this server knows, sorted by scope.
    pub fn status_all_json(&self) -> String {
        let scopes = self.scopes.read().unwrap_or_else(|p| p.into_inner());
        let mut keys: Vec<&Scope> = scopes.keys().collect();
        keys.sort();
        serde_json::Value::Array(
            keys.into_iter()
                .map(|s| self.status_value(&scopes, s))
                .collect(),
        )
        .to_string()
    }

    fn status_value(
        &self,
        scopes: &HashMap<Scope, ScopeHandle>,
        scope: &Scope,
    ) -> serde_json::Value {
        let mut v = match scopes.get(scope) {
            None => serde_json::json!({ "known": false, "leadership": "UNKNOWN" }),
            Some(h) => {
                let st = h.status.borrow().clone();
                let mut v = h.metrics.snapshot();
                v["known"] = true.into();
                v["leadership"] = st.leadership.as_str().into();
                v["leadership_reason"] = st.reason.into();
                v["leadership_age_ms"] = (tokio::time::Instant::now()
                    .duration_since(st.since)
                    .as_millis() as u64)
                    .into();
                v
            }
        };
        v["scope"] = scope.to_string().into();
        v["context"] = scope.context.clone().into();
        v["namespace"] = scope.namespace.clone().into();
        v["backend"] = self.backend.name().into();
        v["server_id"] = self.server_id.clone().into();
        v["log_records_dropped"] = crate::logging::dropped().into();
        v
    }

    /// Stops every scope task and releases leadership; waits at most `timeout`.
    /// Must not be called from inside the engine's runtime.
    pub fn close(&self, timeout: Duration) {
        let handles = self.begin_close();
        if handles.is_empty() {
            return;
        }
        self.rt.block_on(finish_close(handles, timeout));
    }

    /// [`Engine::close`] for async callers.
    pub async fn close_async(&self, timeout: Duration) {
        let handles = self.begin_close();
        finish_close(handles, timeout).await;
    }

    fn begin_close(&self) -> Vec<ScopeHandle> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Vec::new();
        }
        let mut scopes = self.scopes.write().unwrap_or_else(|p| p.into_inner());
        let handles: Vec<ScopeHandle> = scopes.drain().map(|(_, h)| h).collect();
        for h in &handles {
            let _ = h.tx.send(Command::Shutdown);
        }
        info!(
            "podsweep for server {} closing: {} scopes, nothing is deleted on close",
            self.server_id,
            handles.len()
        );
        handles
    }
}

async fn finish_close(handles: Vec<ScopeHandle>, timeout: Duration) {
    let joins = futures::future::join_all(handles.into_iter().map(|h| h.task));
    let _ = tokio::time::timeout(timeout, joins).await;
}

impl Drop for Engine {
    fn drop(&mut self) {
        let handles = self.begin_close();
        drop(handles);
    }
}

/// Kubernetes deleters from Kyuubi's keys, one kube-rs client per scope.
pub fn kube_source(raw: HashMap<String, String>) -> DeleterSource {
    let raw = Arc::new(raw);
    Arc::new(move |scope: Scope| {
        let conf = kube_client::scope_conf(&raw, &scope);
        Box::pin(async move {
            let ns = kube_client::namespace(&conf);
            let client = kube_client::build_client(&conf)
                .await
                .map_err(|e| e.to_string())?;
            Ok(Arc::new(KubeDeleter::new(client, &ns)) as Arc<dyn PodDeleter>)
        })
    })
}
