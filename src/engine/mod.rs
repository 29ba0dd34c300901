//! One podsweep instance per Kyuubi server: scopes, their elections and sweepers, on one runtime.
//!
//! This module holds the scopes' lifecycle (building the engine, resolving and admitting scopes,
//! starting, releasing and closing their tasks, taking events); `status` holds what the engine
//! reports (leadership, the JSON status of one scope or all).
//!
//! # Guarantees
//! * [`Engine::observe`] never blocks on the network: it validates, looks the scope up (creating
//!   its task on first use) and queues the event.
//! * A namespace that is not a DNS-1123 label, or a pod name that is not a DNS-1123 subdomain, is
//!   refused (`IllegalArgumentException` naming the argument): it cannot name a pod. On the JVM's
//!   hot path ([`Engine::observe_in`]) a pod name is read and checked only for an event that can
//!   lead to a DELETE or ends a record; a running pod's name is never used.
//! * Events of a scope reach its task in the order they were observed; while they stream in, the
//!   task takes them in batches without being woken per event (it is never held back).
//! * Pods in a scope outside `kyuubi.kubernetes.context.allow.list` /
//!   `kyuubi.kubernetes.namespace.allow.list` are refused, never tracked, by Kyuubi's rule: only
//!   a context or namespace the scope names is checked (an absent one is allowed). The first event
//!   of a refused scope gets the error and one WARN is logged; later events of that scope are
//!   ignored quietly.
//! * Every event of a Kyuubi driver pod that could change what its scope's task knows reaches the
//!   task, in order: a pod observed running again is disarmed there. An event that says again
//!   what the task was last told of that pod (still running, still terminated with no new
//!   termination time) is answered on the caller's thread ([`crate::seen`]), with the time a
//!   running pod was last seen handed on with its terminal event; `observed_known` counts them.
//! * Scopes that name the same cluster and namespace ([`kube_client::resolve`]: `(None, ns)` and
//!   `(ctx, ns)` when `ctx` is the default context, two contexts on one API server) are served by
//!   one task; its election runs under the namespace's identity (the UID of its
//!   `kube-root-ca.crt` ConfigMap, read when the task starts), so servers that reach the cluster
//!   by different URLs elect one leader; its status carries that key as `election_scope`, and
//!   each scope is reported under its own name. A scope whose identity cannot be read is elected
//!   under its URL, one whose cluster cannot be told under its own name (a WARN each).
//! * Under cleanup kind NONE (Kyuubi's default) only the pods handed to [`Engine::due_now`] are
//!   tracked, and their DELETE events (or deletion timestamps) still reach the task, so a
//!   follower forgets a pod the leader deleted.
//! * Every task of a scope (cleanup loop, election, pod watch) is supervised: a panic is logged,
//!   reported in the scope's health with the reason, and the task runs again after a backoff.
//! * [`Engine::close`] deletes nothing; it stops every scope task and releases leadership.
//! * In self-watch mode (`...cleanupTerminatedDriverPod.watch.enabled`), every configured scope
//!   the allow lists accept campaigns at once, its leader watches its pods
//!   ([`crate::watch`]), scopes are never released when idle, and [`Engine::observe`] is refused
//!   (`IllegalStateException`): the engine's own watch is the only source of its records.
//!   Without an HA backend the servers share (none, or a private embedded ZooKeeper) an engine
//!   built from Kyuubi's keys ([`Engine::new`], `PodSweeper.create`) is refused in this mode
//!   (a [`ConfigError`] naming `ha.singleServer`) unless the server runs alone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use once_cell::sync::OnceCell;
use thiserror::Error;
use tracing::{info, warn};

use crate::clock::Clock;
use crate::config::{keys, ConfigError, HaSettings, Settings};
use crate::deleter::{KubeDeleter, PodDeleter};
use crate::election::etcd::EtcdBackend;
use crate::election::local::LocalBackend;
use crate::election::zookeeper::ZooKeeperBackend;
use crate::election::{Backend, ElectionHandle, Identity};
use crate::kube_client;
use crate::metrics::ScopeMetrics;
use crate::model::{CleanupKind, Observation};
use crate::scope::Scope;
use crate::seen::{Admit, Head, SeenPods};
use crate::sweeper::{self, Command, DeleterSource, Release, ScopeHandle, SweeperConfig};
use crate::watch::{self, Watches};

mod owned;
mod status;

type ScopeTable = Arc<RwLock<HashMap<Scope, ScopeHandle>>>;

pub use crate::identity::{kube_identities, IdentitySource};

/// Scopes resolved by [`Engine::scope_id`]: id `i` is `slots[i - 1]`. The ids are looked up
/// under a lock, once per scope by the JVM; the slots, on every event, without one: they are
/// only ever appended (under the ids' write lock, so a slot's index is its id - 1).
#[derive(Default)]
struct Interned {
    ids: RwLock<HashMap<Scope, u32>>,
    slots: boxcar::Vec<Arc<Slot>>,
}

impl Interned {
    fn slot(&self, scope_id: u32) -> Option<&Arc<Slot>> {
        self.slots.get(scope_id.checked_sub(1)? as usize)
    }
}

/// A scope known to the engine, for the engine's whole life.
struct Slot {
    scope: Scope,
    /// The cluster and namespace it names ([`kube_client::resolve`]): the key of its task and
    /// election, shared by every scope that names the same.
    key: Scope,
    /// The allow lists accepted it (checked on its first event, by its own name, whether or not
    /// a task already serves its key).
    admitted: AtomicBool,
    /// What the scope's current task was last told about each pod; cleared when the task is
    /// released.
    seen: SeenPods,
}

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
    #[error(
        "observe: {} is true: this engine watches its driver pods itself and takes no observe() calls",
        keys::WATCH_ENABLED
    )]
    WatchMode,
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
    /// This server's id in the elections (it may be confirmed after the start).
    identity: Identity,
    backend: Arc<dyn Backend>,
    source: DeleterSource,
    clock: Clock,
    rt: tokio::runtime::Handle,
    sweeper_cfg: SweeperConfig,
    /// Scope tasks by key ([`Slot::key`]).
    scopes: ScopeTable,
    /// Each scope's key, once resolved.
    keys: RwLock<HashMap<Scope, Scope>>,
    /// The kubeconfig, read once at the start ([`kube_client::resolve_with`]).
    kubeconfig: Result<kube::config::Kubeconfig, String>,
    /// Where each scope's election key is read ([`election_key`]); `None`: its URL key.
    identities: Option<IdentitySource>,
    /// Scopes the allow lists refused, with the error their first event got.
    refused: RwLock<HashMap<Scope, (String, u64)>>,
    interned: Arc<Interned>,
    next_id: AtomicU64,
    closed: AtomicBool,
    /// Self-watch mode's watch tasks (`None` when the JVM feeds the engine).
    watches: Option<Watches>,
    /// The leaders' scope-wide watches beside the JVM's informers (`scopeWatch`: informers that
    /// see only their own server's pods); they add events and drop nothing.
    scope_watches: Option<Watches>,
    /// This server's seat in the servers' own election
    /// ([`crate::election::inspect::presence_scope`]) for the engine's whole life, idle scopes
    /// or not, so `podsweep uninstall` never removes what a running server uses. `None` without
    /// an HA backend, and once closed.
    presence: std::sync::Mutex<Option<ElectionHandle>>,
}

impl Engine {
    /// An engine as a Kyuubi server runs it: backend from the HA keys, kube-rs clients from the
    /// Kubernetes keys, the system clock.
    pub fn new(
        settings: Settings,
        server_id: &str,
        rt: tokio::runtime::Handle,
    ) -> Result<Self, EngineError> {
        Self::with_identity(settings, Identity::fixed(server_id), rt)
    }

    /// [`Engine::new`] with an identity that may still be pending ([`Identity::pending`]): a
    /// Kyuubi server that binds port 0 confirms it once bound ([`Engine::confirm_server_id`]);
    /// until then the scopes track pods but do not campaign.
    pub fn with_identity(
        settings: Settings,
        identity: Identity,
        rt: tokio::runtime::Handle,
    ) -> Result<Self, EngineError> {
        kube_client::validate(&settings.raw).map_err(|e| match e {
            kube_client::KubeClientError::Invalid { key, message } => {
                EngineError::Config(ConfigError::invalid(&key, "", message))
            }
            other => EngineError::Runtime(other.to_string()),
        })?;
        crate::config::require_backend(&settings)?;
        let backend: Arc<dyn Backend> = match &settings.ha {
            HaSettings::Local => Arc::new(LocalBackend),
            HaSettings::ZooKeeper(zk) => Arc::new(ZooKeeperBackend::new(zk.clone())),
            HaSettings::Etcd(e) => Arc::new(EtcdBackend::new(e.clone())),
        };
        let source = kube_source(settings.raw.clone());
        let watch_source = watch::kube_clients(settings.raw.clone());
        let identities = kube_identities(settings.raw.clone());
        Self::assemble(
            settings,
            identity,
            backend,
            source,
            watch_source,
            Clock::System,
            rt,
            Some(identities),
        )
    }

    /// Reads each scope's namespace identity with `identities` (its election key; an engine
    /// with injected parts elects each scope under its API server URL otherwise). Scopes started
    /// before (self-watch mode's configured scopes start with the engine) keep their key.
    pub fn with_namespace_identities(mut self, identities: IdentitySource) -> Self {
        self.identities = Some(identities);
        self
    }

    /// An engine with injected parts (tests, benches, the demo). In self-watch mode the pod
    /// watches use kube-rs clients built from the settings' Kubernetes keys.
    pub fn with_parts(
        settings: Settings,
        server_id: &str,
        backend: Arc<dyn Backend>,
        source: DeleterSource,
        clock: Clock,
        rt: tokio::runtime::Handle,
    ) -> Result<Self, EngineError> {
        let watch_source = watch::kube_clients(settings.raw.clone());
        Self::with_watch_clients(
            settings,
            server_id,
            backend,
            source,
            watch_source,
            clock,
            rt,
        )
    }

    /// [`Engine::with_parts`] whose self-watch mode builds its watch clients with `watch_source`
    /// (tests: fault injection).
    pub fn with_watch_clients(
        settings: Settings,
        server_id: &str,
        backend: Arc<dyn Backend>,
        source: DeleterSource,
        watch_source: watch::ClientSource,
        clock: Clock,
        rt: tokio::runtime::Handle,
    ) -> Result<Self, EngineError> {
        Self::assemble(
            settings,
            Identity::fixed(server_id),
            backend,
            source,
            watch_source,
            clock,
            rt,
            None,
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn assemble(
        settings: Settings,
        identity: Identity,
        backend: Arc<dyn Backend>,
        source: DeleterSource,
        watch_source: watch::ClientSource,
        clock: Clock,
        rt: tokio::runtime::Handle,
        identities: Option<IdentitySource>,
    ) -> Result<Self, EngineError> {
        let server_id = identity.current();
        if server_id.trim().is_empty() {
            return Err(EngineError::Argument {
                name: "serverId",
                message: "must not be empty".into(),
            });
        }
        let mut sweeper_cfg = SweeperConfig::new(settings.kind, settings.retain);
        sweeper_cfg.leaderless_alert = settings.leaderless_alert;
        sweeper_cfg.step_down_after = settings.step_down_after;
        sweeper_cfg.idle_release = settings.idle_release;
        sweeper_cfg.tuning = settings.tuning.clone();
        sweeper_cfg.retention = settings.retention.clone();
        sweeper_cfg.events_qps = settings.events_qps;
        let scope_watches = settings.scope_watch.then(|| {
            // A server whose informer sees only its own pods would never bring an idle scope
            // back for another server's pods (`owned`).
            sweeper_cfg.idle_release = crate::config::MAX_TIME;
            info!(
                "The informers see only part of each scope ({} = true, or {} = ON): the cleanup \
                 leader of each scope also watches all its driver pods",
                keys::OWNER_SCOPED_WATCH,
                keys::SCOPE_WATCH
            );
            Watches::additive(
                watch_source.clone(),
                settings.state.clone(),
                settings.leaderless_alert,
                settings.watch_options,
            )
        });
        let watches = settings.watch.as_ref().map(|w| {
            // Configured scopes campaign for the engine's whole life.
            sweeper_cfg.idle_release = crate::config::MAX_TIME;
            Watches::new(
                watch_source,
                w.state.clone(),
                settings.leaderless_alert,
                settings.watch_options,
            )
        });
        let kind_key = settings
            .watch
            .as_ref()
            .map_or(keys::CLEANUP_KIND, |w| w.kind_key);
        let server_id = if identity.is_settled() {
            server_id
        } else {
            format!("{server_id} (provisional, until the server confirms the address it binds)")
        };
        match settings.kind {
            CleanupKind::None => info!(
                "podsweep {} started for server {server_id}: {kind_key} = NONE, so no driver pod \
                 is deleted after its retain period (the pods Kyuubi asks to delete at once, \
                 e.g. of a canceled batch, are)",
                env!("CARGO_PKG_VERSION"),
            ),
            kind => info!(
                "podsweep {} started for server {server_id}: cleanup kind {}, retain period {:?}, leader election via {}",
                env!("CARGO_PKG_VERSION"),
                kind.as_str(),
                settings.retain,
                backend.name()
            ),
        }
        let engine = Engine {
            settings: Arc::new(settings),
            identity,
            backend,
            source,
            clock,
            rt,
            sweeper_cfg,
            scopes: Arc::default(),
            keys: RwLock::default(),
            kubeconfig: kube_client::read_kubeconfig(),
            identities,
            refused: RwLock::default(),
            interned: Arc::default(),
            next_id: AtomicU64::new(1),
            closed: AtomicBool::new(false),
            watches,
            scope_watches,
            presence: std::sync::Mutex::new(None),
        };
        engine.join_presence();
        engine.start_watched_scopes();
        engine.start_configured_scopes();
        Ok(engine)
    }

    /// Self-watch mode: every configured scope the allow lists accept campaigns at once.
    /// Campaigns in the servers' own election until the engine closes (on ZooKeeper and etcd,
    /// [`Backend::lists_servers`]).
    fn join_presence(&self) {
        if !self.backend.lists_servers() {
            return;
        }
        let scope = crate::election::inspect::presence_scope();
        let _rt = self.rt.enter();
        let handle = ElectionHandle::supervised_as(
            &self.backend,
            scope.clone(),
            crate::identity::fixed_keys(scope),
            self.identity.clone(),
            Arc::new(ScopeMetrics::default()),
            Duration::from_secs(120),
        );
        *self.presence.lock().unwrap_or_else(|p| p.into_inner()) = Some(handle);
    }

    fn start_watched_scopes(&self) {
        let (Some(w), Some(watches)) = (&self.settings.watch, &self.watches) else {
            return;
        };
        if self.settings.kind == CleanupKind::None {
            return;
        }
        info!(
            "podsweep watches driver pods itself ({} = true): cleanup kind {} (from {}), {} \
             scope(s) configured",
            keys::WATCH_ENABLED,
            self.settings.kind.as_str(),
            w.kind_key,
            w.scopes.len()
        );
        let mut scopes = self.scopes.write().unwrap_or_else(|p| p.into_inner());
        for scope in &w.scopes {
            if let Err(e) = self.check_allowed(scope) {
                warn!("Scope {scope} is not watched: {e}");
                let mut refused = self.refused.write().unwrap_or_else(|p| p.into_inner());
                refused.insert(scope.clone(), (e.to_string(), crate::metrics::epoch_ms()));
                continue;
            }
            let key = self.key_of(scope);
            if let Some(h) = scopes.get(&key) {
                warn!(
                    "Scope {scope} names the same cluster and namespace as scope {} ({key}): one \
                     watch and one election serve both",
                    h.scope
                );
                continue;
            }
            let h = self.start_scope(scope.clone(), key.clone(), None);
            let _enter = self.rt.enter();
            watches.start(&key, &h);
            scopes.insert(key, h);
        }
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// This server's id in the elections now.
    pub fn server_id(&self) -> String {
        self.identity.current()
    }

    /// Confirms this server's id (e.g. `host:port` once the Kyuubi server bound its port):
    /// campaigns waiting for it go on. Confirming the id it already has changes nothing.
    pub fn confirm_server_id(&self, id: &str) -> Result<(), EngineError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        if id.trim().is_empty() {
            return Err(EngineError::Argument {
                name: "serverId",
                message: "must not be empty".into(),
            });
        }
        if self.identity.is_settled() && self.identity.current() == id {
            return Ok(());
        }
        let before = self.identity.confirm(id);
        if before != id {
            info!("podsweep's server id is {id} (was {before}), the address the server bound");
        }
        Ok(())
    }

    /// Kyuubi asks for a driver pod to be deleted at once (the pod of a CANCELED batch, an
    /// orphan pod): the scope's leader sends its DELETE as soon as it may, with the UID
    /// precondition, whatever the pod's state and the cleanup kind (a scope of kind NONE starts
    /// its election for it). `why` is logged with it. Non-blocking; refused in self-watch mode.
    ///
    /// Whichever server Kyuubi asks, the leader hears of it: the scope's task hands the request
    /// to the leader through the HA backend's store ([`crate::election::store`], shelf
    /// `requests`), so a follower whose Kyuubi alone asks (it re-listed the pod after a restart;
    /// owner-scoped informers) gets the pod deleted within seconds, once.
    ///
    /// Returns whether the pod was taken: `false` when podsweep leaves it to the caller, so that
    /// the caller deletes it as it would without podsweep; never taken and dropped. Left to the
    /// caller: a pod without Kyuubi's driver labels, a scope the allow lists refused on an
    /// earlier event, every pod in a dry run (a dry run changes nothing of what Kyuubi does), and
    /// every pod while this server is known to be out of contact with the HA backend (a request
    /// could not reach the leader).
    pub fn due_now(&self, scope: Scope, obs: Observation, why: &str) -> Result<bool, EngineError> {
        self.check_observation(&obs, true)?;
        if !obs.is_kyuubi_driver() || self.settings.tuning.dry_run {
            return Ok(false);
        }
        if self.backend.out_of_contact(&self.identity.current()) {
            // runbook: Kyuubi deletes a pod itself: the HA backend is out of reach
            warn!(
                "Pod {} ({why}) is left to Kyuubi to delete: this server is out of contact with \
                 its HA backend ({}), so no cleanup leader would hear of it",
                obs.pod_name,
                self.backend.name()
            );
            return Ok(false);
        }
        let slot = self.slot(self.scope_id(scope)?)?;
        self.to_task(&slot, move |h| {
            let why: Box<str> = why.chars().take(200).collect::<String>().into();
            let _ = h.tx.send(Command::DueNow(obs, why));
        })
    }

    /// Feeds one pod event. Non-blocking.
    pub fn observe(&self, scope: Scope, obs: Observation) -> Result<(), EngineError> {
        self.check_observation(&obs, true)?;
        if !obs.is_kyuubi_driver() {
            return Ok(());
        }
        let slot = self.slot(self.scope_id(scope)?)?;
        let head = Head::of(&obs);
        if self.settings.kind == CleanupKind::None {
            return self.deliver_end(&slot, obs, head);
        }
        self.deliver(&slot, obs, head).map(drop)
    }

    /// A scope's id for [`Engine::observe_in`], the same for the engine's whole life (ids start
    /// at 1). The namespace is checked here (`IllegalArgumentException` naming it); the allow
    /// lists are applied by the scope's first event, as with [`Engine::observe`].
    pub fn scope_id(&self, scope: Scope) -> Result<u32, EngineError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        if let Some(id) = self
            .interned
            .ids
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&scope)
        {
            return Ok(*id);
        }
        if let Some(ns) = &scope.namespace {
            crate::names::check_namespace(ns).map_err(|message| EngineError::Argument {
                name: "namespace",
                message,
            })?;
        }
        // Resolved before the lock is taken: no other scope's first event waits for it.
        let key = self.key_of(&scope);
        let mut ids = self.interned.ids.write().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = ids.get(&scope) {
            return Ok(*id);
        }
        let id =
            u32::try_from(self.interned.slots.count() + 1).map_err(|_| EngineError::Argument {
                name: "scope",
                message: "too many distinct scopes".into(),
            })?;
        self.interned.slots.push(Arc::new(Slot {
            scope: scope.clone(),
            key,
            admitted: AtomicBool::new(false),
            seen: SeenPods::default(),
        }));
        ids.insert(scope, id);
        Ok(id)
    }

    /// The slot of a scope id.
    fn slot(&self, scope_id: u32) -> Result<Arc<Slot>, EngineError> {
        self.interned
            .slot(scope_id)
            .cloned()
            .ok_or_else(|| EngineError::Argument {
                name: "scope",
                message: format!("{scope_id} is not a scope id of this engine"),
            })
    }

    /// The key of a scope: the cluster and namespace it names ([`kube_client::resolve`]),
    /// resolved once. A scope whose cluster cannot be told keys its own task and election, as
    /// before, with one WARN.
    fn key_of(&self, scope: &Scope) -> Scope {
        if let Some(k) = self
            .keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(scope)
        {
            return k.clone();
        }
        let key = kube_client::resolve_with(&self.settings.raw, &self.kubeconfig, scope)
            .unwrap_or_else(|e| {
                warn!(
                "Scope {scope}: cannot tell which cluster it names ({e}); it is elected on its own \
                 name, so a scope that names the same pods otherwise gets a leader of its own"
            );
                scope.clone()
            });
        let mut keys = self.keys.write().unwrap_or_else(|p| p.into_inner());
        keys.entry(scope.clone()).or_insert(key).clone()
    }

    /// The key of a scope already known to this engine.
    fn known_key(&self, scope: &Scope) -> Option<Scope> {
        self.keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(scope)
            .cloned()
    }

    /// Events of the scopes of `key` answered on the caller's thread ([`crate::seen`]).
    fn answered(&self, key: &Scope) -> u64 {
        self.interned
            .slots
            .iter()
            .filter(|(_, s)| &s.key == key)
            .map(|(_, s)| s.seen.answered())
            .sum()
    }

    /// Whether the scope's task already knows what an event of a Kyuubi driver pod says, so the
    /// caller can drop it without reading its strings ([`crate::seen`]): the JVM's hot path asks
    /// this before [`Engine::observe_in`]. Answers only from what was handed on before, so an
    /// event it does not know goes through `observe_in`, which decides again.
    pub fn known(&self, scope_id: u32, head: &Head) -> Result<bool, EngineError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        if self.watches.is_some() {
            return Err(EngineError::WatchMode);
        }
        if self.settings.kind == CleanupKind::None {
            return Ok(false);
        }
        let Some(slot) = self.interned.slot(scope_id) else {
            return Ok(false);
        };
        // No lock on the scope table: a table the release of the task is clearing can only
        // answer for a pod the released task had settled (an idle task tracks nothing), whose
        // later events the next task would have to look up against the API server's 404.
        Ok(slot.seen.known(head, || self.clock.recent()))
    }

    /// [`Engine::observe`] for a scope resolved once by [`Engine::scope_id`]: the JVM's hot path.
    /// The pod name is checked only when the event can lead to a DELETE or ends a record (a
    /// terminal state, a DELETE event, a deletionTimestamp): a running pod's name is not read,
    /// and the caller may leave it empty. `head` is what the caller asked [`Engine::known`] with;
    /// it must be `Head::of(&obs)`, and is checked to be (an `IllegalArgumentException` naming
    /// `head` otherwise): what the scope's task is told is recorded from it, so a summary that
    /// disagreed with its event would make later events of that pod be answered wrongly.
    pub fn observe_in(
        &self,
        scope_id: u32,
        obs: Observation,
        head: Head,
    ) -> Result<(), EngineError> {
        let own = Head::of(&obs);
        if head != own {
            return Err(EngineError::Argument {
                name: "head",
                message: format!("{head:?} does not summarise the event it comes with ({own:?})"),
            });
        }
        let full = obs.state.is_terminated() || obs.is_cleaned();
        self.check_observation(&obs, full)?;
        if !obs.is_kyuubi_driver() {
            return Ok(());
        }
        let slot = self.slot(scope_id)?;
        if self.settings.kind == CleanupKind::None {
            return self.deliver_end(&slot, obs, head);
        }
        self.deliver(&slot, obs, head).map(drop)
    }

    fn check_observation(&self, obs: &Observation, check_name: bool) -> Result<(), EngineError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        if self.watches.is_some() {
            return Err(EngineError::WatchMode);
        }
        if obs.pod_uid.is_empty() {
            return Err(EngineError::Argument {
                name: "podUid",
                message: "must not be empty".into(),
            });
        }
        if check_name {
            crate::names::check_pod_name(&obs.pod_name).map_err(|message| {
                EngineError::Argument {
                    name: "podName",
                    message,
                }
            })?;
        }
        Ok(())
    }

    /// Hands a checked observation of a Kyuubi driver pod to its scope's task (unless the task
    /// knows it already, [`crate::seen`]), starting the task on the scope's first event.
    fn deliver(&self, slot: &Arc<Slot>, obs: Observation, head: Head) -> Result<bool, EngineError> {
        self.to_task(slot, |h| send(h, &slot.seen, &head, obs, self.clock.now()))
    }

    /// Kind NONE: the scope's task tracks only the pods Kyuubi handed to [`Engine::due_now`],
    /// so of the other events only one that ends a record (a DELETE event, a deletion
    /// timestamp) goes to it, and only if a task runs: a server that did not delete such a pod
    /// itself (a follower) forgets it when its informer sees it go, so a later leader never
    /// deletes it again. Nothing else is sent, and no task is started.
    fn deliver_end(
        &self,
        slot: &Arc<Slot>,
        obs: Observation,
        head: Head,
    ) -> Result<(), EngineError> {
        if !obs.is_cleaned() || !slot.admitted.load(Ordering::Acquire) {
            return Ok(());
        }
        let scopes = self.scopes.read().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = scopes.get(&slot.key) {
            send(h, &slot.seen, &head, obs, self.clock.now());
        }
        Ok(())
    }

    /// Hands something to the task of `slot`'s key (`give`), once the allow lists admit the
    /// scope, starting the task if none serves the key yet. False when it was not handed on (a
    /// scope the allow lists refused on an earlier event).
    fn to_task(
        &self,
        slot: &Arc<Slot>,
        give: impl FnOnce(&ScopeHandle),
    ) -> Result<bool, EngineError> {
        if !slot.admitted.load(Ordering::Acquire) && !self.admit(slot)? {
            return Ok(false);
        }
        {
            let scopes = self.scopes.read().unwrap_or_else(|p| p.into_inner());
            if let Some(h) = scopes.get(&slot.key) {
                give(h);
                return Ok(true);
            }
        }
        // First event of the key (or the first since its task was released when idle).
        let mut scopes = self.scopes.write().unwrap_or_else(|p| p.into_inner());
        if self.closed.load(Ordering::Acquire) {
            return Err(EngineError::Closed);
        }
        let h = scopes
            .entry(slot.key.clone())
            .or_insert_with(|| self.start_scope(slot.scope.clone(), slot.key.clone(), Some(slot)));
        give(h);
        Ok(true)
    }

    /// The allow lists' verdict on a scope's first event, by its own name: `Err` for the first
    /// event of a refused scope, `Ok(false)` for its later ones (ignored quietly).
    fn admit(&self, slot: &Slot) -> Result<bool, EngineError> {
        let scope = &slot.scope;
        if let Some(ns) = &scope.namespace {
            crate::names::check_namespace(ns).map_err(|message| EngineError::Argument {
                name: "namespace",
                message,
            })?;
        }
        if self
            .refused
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(scope)
        {
            return Ok(false);
        }
        if let Err(e) = self.check_allowed(scope) {
            warn!(
                "Scope {scope} is refused: {e}; its pods are never tracked, and its later events \
                 are ignored without a further error"
            );
            let mut refused = self.refused.write().unwrap_or_else(|p| p.into_inner());
            refused.insert(scope.clone(), (e.to_string(), crate::metrics::epoch_ms()));
            return Err(e);
        }
        slot.admitted.store(true, Ordering::Release);
        Ok(true)
    }

    /// Starts the task of the scopes of `key`, with the Kubernetes client of `scope` (the first
    /// of them); the election is the key's. The slots of the key are cleared when the task is
    /// released (self-watch mode's scopes have none and are never released).
    fn start_scope(&self, scope: Scope, key: Scope, slot: Option<&Arc<Slot>>) -> ScopeHandle {
        let _enter = self.rt.enter();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let metrics = Arc::new(ScopeMetrics::default());
        metrics.pauses.set_scope(&scope.to_string());
        let election = ElectionHandle::supervised_as(
            &self.backend,
            key.clone(),
            crate::identity::election_keys(crate::identity::KeyInputs {
                identities: self
                    .identities
                    .clone()
                    .filter(|_| self.backend.name() != "local"),
                layout: self.settings.election,
                scope: scope.clone(),
                url_key: key.clone(),
                metrics: metrics.clone(),
                reread: crate::identity::REREAD,
            }),
            self.identity.clone(),
            metrics.clone(),
            self.sweeper_cfg.leaderless_alert,
        );
        let release: Release = match (&self.watches, slot) {
            // A configured scope is never released: no event would bring it back.
            (Some(_), _) | (None, None) => Box::new(|_| false),
            (None, Some(_)) => release_from(&self.scopes, &self.interned, key.clone(), id),
        };
        let h = sweeper::spawn(
            scope,
            id,
            self.sweeper_cfg.clone(),
            self.clock.clone(),
            election,
            self.source.clone(),
            release,
            metrics,
        );
        if let Some(w) = &self.scope_watches {
            w.start(&key, &h);
        }
        h
    }

    /// Kyuubi's `checkKubernetesInfo`: a context or namespace the scope names must be in its
    /// list when the list is not empty; an absent one (Kyuubi's `None`) is not checked.
    fn check_allowed(&self, scope: &Scope) -> Result<(), EngineError> {
        let s = &self.settings;
        if let Some(c) = &scope.context {
            if !s.context_allow.is_empty() && !s.context_allow.contains(c) {
                return Err(EngineError::Disallowed {
                    key: keys::CONTEXT_ALLOW_LIST,
                    what: "context",
                    value: c.to_owned(),
                });
            }
        }
        if let Some(ns) = &scope.namespace {
            if !s.namespace_allow.is_empty() && !s.namespace_allow.contains(ns) {
                return Err(EngineError::Disallowed {
                    key: keys::NAMESPACE_ALLOW_LIST,
                    what: "namespace",
                    value: ns.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Stops every scope task and releases leadership; waits at most `timeout`.
    /// Must not be called from inside the engine's runtime.
    pub fn close(&self, timeout: Duration) {
        let (handles, watches) = self.begin_close();
        if handles.is_empty() && watches.is_empty() {
            return;
        }
        self.rt.block_on(finish_close(handles, watches, timeout));
    }

    /// [`Engine::close`] for async callers.
    pub async fn close_async(&self, timeout: Duration) {
        let (handles, watches) = self.begin_close();
        finish_close(handles, watches, timeout).await;
    }

    fn begin_close(&self) -> (Vec<ScopeHandle>, Vec<tokio::task::JoinHandle<()>>) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return (Vec::new(), Vec::new());
        }
        // Watches stop first: nothing new reaches the scope tasks while they shut down.
        let mut watches = self
            .watches
            .as_ref()
            .map(Watches::stop_all)
            .unwrap_or_default();
        if let Some(w) = &self.scope_watches {
            watches.extend(w.stop_all());
        }
        // Its seat in the servers' own election goes with it, awaited like the scopes' elections,
        // so `podsweep uninstall` run right after the stop finds no server left.
        let presence = self
            .presence
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(p) = presence {
            watches.push(self.rt.spawn(p.close()));
        }
        let mut scopes = self.scopes.write().unwrap_or_else(|p| p.into_inner());
        let handles: Vec<ScopeHandle> = scopes.drain().map(|(_, h)| h).collect();
        // Their tasks are gone: what they were told is of no use any more.
        for (_, slot) in self.interned.slots.iter() {
            slot.seen.clear();
        }
        for h in &handles {
            let _ = h.tx.send(Command::Shutdown);
        }
        info!(
            "podsweep for server {} closing: {} scopes, nothing is deleted on close",
            self.identity.current(),
            handles.len()
        );
        (handles, watches)
    }
}

async fn finish_close(
    handles: Vec<ScopeHandle>,
    watches: Vec<tokio::task::JoinHandle<()>>,
    timeout: Duration,
) {
    let joins = futures::future::join_all(handles.into_iter().map(|h| h.task).chain(watches));
    let _ = tokio::time::timeout(timeout, joins).await;
}

impl Drop for Engine {
    fn drop(&mut self) {
        let closing = self.begin_close();
        drop(closing);
    }
}

/// How an idle scope task removes itself from the table: under the write lock, only if it is
/// still this task's entry and no event is waiting in its queue.
fn release_from(scopes: &ScopeTable, interned: &Arc<Interned>, key: Scope, id: u64) -> Release {
    let table = Arc::downgrade(scopes);
    let interned = Arc::downgrade(interned);
    Box::new(move |rx| {
        let Some(table) = table.upgrade() else {
            return true;
        };
        let mut scopes = table.write().unwrap_or_else(|p| p.into_inner());
        if !rx.is_empty() {
            return false;
        }
        if scopes.get(&key).is_some_and(|h| h.id == id) {
            scopes.remove(&key);
            // The next task starts from nothing: it must be told everything again, by every
            // scope of its key.
            if let Some(interned) = interned.upgrade() {
                for (_, slot) in interned.slots.iter().filter(|(_, s)| s.key == key) {
                    slot.seen.clear();
                }
            }
        }
        true
    })
}

/// Hands an event to a scope's task unless the task knows it already; a terminal event of a pod
/// seen running since its last event handed on is preceded by the time it was last seen so.
fn send(h: &ScopeHandle, seen: &SeenPods, head: &Head, obs: Observation, now: SystemTime) {
    match seen.admit(head, now) {
        Admit::Known => {}
        Admit::Forward { seen_running } => {
            let _ = h.tx.observe(obs, seen_running);
        }
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
