//! Kyuubi configuration keys -> typed podsweep settings.
//!
//! podsweep reads Kyuubi's own keys with Kyuubi's defaults, so a server passes its `KyuubiConf`
//! as it is. Every error names the key it came from.
//!
//! This module holds the key names, the error and [`Settings`] with the stock cleanup keys; each
//! key family has its own submodule: `ha` (the HA backend and its settings), `tuning` (DELETE
//! pacing and retries), `watch` (self-watch mode), `time` (Kyuubi's time values); `table` is the
//! one table of every key, `redact` keeps secrets out of logs and messages.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use thiserror::Error;

use crate::model::CleanupKind;

mod ha;
pub mod redact;
mod retention;
pub mod table;
mod time;
mod tuning;
mod watch;

use self::ha::{parse_ha, parse_single_server};
use self::tuning::parse_tuning;

pub use self::ha::{
    require_backend, ElectionKeyKind, ElectionLayout, EtcdSettings, EtcdTls, HaSettings, ZkAuth,
    ZkRetry, ZkSettings,
};
pub use self::retention::{Retention, ScopeWatch};
pub use self::time::{parse_duration, parse_time, MAX_TIME};
pub use self::tuning::{Tuning, MAX_QPS, MIN_QPS};
pub use self::watch::{init_list_scopes, WatchSettings};

/// Kyuubi's key names.
pub mod keys {
    pub const CLEANUP_KIND: &str = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind";
    pub const RETAIN_PERIOD: &str = "kyuubi.kubernetes.terminatedApplicationRetainPeriod";
    pub const CONTEXT_ALLOW_LIST: &str = "kyuubi.kubernetes.context.allow.list";
    pub const NAMESPACE_ALLOW_LIST: &str = "kyuubi.kubernetes.namespace.allow.list";
    pub const KUBE_CONTEXT: &str = "kyuubi.kubernetes.context";
    pub const KUBE_NAMESPACE: &str = "kyuubi.kubernetes.namespace";
    pub const HA_ADDRESSES: &str = "kyuubi.ha.addresses";
    pub const HA_ZK_QUORUM: &str = "kyuubi.ha.zookeeper.quorum";
    pub const HA_NAMESPACE: &str = "kyuubi.ha.namespace";
    pub const HA_ZK_NAMESPACE: &str = "kyuubi.ha.zookeeper.namespace";
    pub const HA_CLIENT_CLASS: &str = "kyuubi.ha.client.class";
    pub const ZK_SESSION_TIMEOUT: &str = "kyuubi.ha.zookeeper.session.timeout";
    pub const ZK_CONNECTION_TIMEOUT: &str = "kyuubi.ha.zookeeper.connection.timeout";
    pub const ZK_AUTH_TYPE: &str = "kyuubi.ha.zookeeper.auth.type";
    pub const ZK_AUTH_DIGEST: &str = "kyuubi.ha.zookeeper.auth.digest";
    pub const ZK_AUTH_PRINCIPAL: &str = "kyuubi.ha.zookeeper.auth.principal";
    pub const ZK_AUTH_KEYTAB: &str = "kyuubi.ha.zookeeper.auth.keytab";
    pub const ZK_AUTH_SERVER_PRINCIPAL: &str = "kyuubi.ha.zookeeper.auth.serverPrincipal";
    pub const KINIT_PRINCIPAL: &str = "kyuubi.kinit.principal";
    pub const KINIT_KEYTAB: &str = "kyuubi.kinit.keytab";
    pub const ZK_RETRY_POLICY: &str = "kyuubi.ha.zookeeper.connection.retry.policy";
    pub const ZK_MAX_RETRIES: &str = "kyuubi.ha.zookeeper.connection.max.retries";
    pub const ZK_BASE_RETRY_WAIT: &str = "kyuubi.ha.zookeeper.connection.base.retry.wait";
    pub const ZK_MAX_RETRY_WAIT: &str = "kyuubi.ha.zookeeper.connection.max.retry.wait";
    pub const ETCD_LEASE_TIMEOUT: &str = "kyuubi.ha.etcd.lease.timeout";
    pub const ETCD_ELECTION_LEASE: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.etcd.leaseTimeout";
    pub const ETCD_SSL_ENABLED: &str = "kyuubi.ha.etcd.ssl.enabled";
    pub const ETCD_SSL_CA: &str = "kyuubi.ha.etcd.ssl.ca.path";
    pub const ETCD_SSL_CERT: &str = "kyuubi.ha.etcd.ssl.client.certificate.path";
    pub const ETCD_SSL_KEY: &str = "kyuubi.ha.etcd.ssl.client.key.path";
    pub const RATE_QPS: &str = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.rateLimit.qps";
    pub const RATE_BURST: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.rateLimit.burst";
    pub const MAX_IN_FLIGHT: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.maxInFlight";
    pub const DRY_RUN: &str = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.dryRun";
    pub const RETRY_MAX_WAIT: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.retry.maxWait";
    pub const FORBIDDEN_RETRY: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.forbidden.retryInterval";
    /// How often failed DELETEs are summed up, every failure class (403, 429, 5xx, ...).
    pub const FAILURES_SUMMARY: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.failures.summaryInterval";
    /// The name `FAILURES_SUMMARY` had first; read when that key is absent (deprecated).
    pub const FORBIDDEN_SUMMARY_OLD: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.forbidden.summaryInterval";
    /// How long a scope may be in trouble (no leader, Retry-After, failing watch, restarts)
    /// before it is reported unhealthy.
    pub const HEALTH_ALERT_AFTER: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.health.alertAfter";
    /// The name `HEALTH_ALERT_AFTER` had first; read when that key is absent (deprecated).
    pub const LEADERLESS_ALERT_OLD: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.leaderlessAlertAfter";
    /// podsweep's own: the caller says `kyuubi.ha.addresses` points at a private embedded
    /// ZooKeeper that Kyuubi started for this server alone.
    pub const HA_EMBEDDED: &str = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.embedded";
    /// The operator says this server is the only one cleaning its scopes: without an HA backend
    /// it may clean them on its own (self-watch mode refuses to start otherwise).
    pub const HA_SINGLE_SERVER: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.singleServer";
    /// Read by the patched Kyuubi, not by the engine: `false` restores Kyuubi's own cleanup.
    pub const PODSWEEP_ENABLED: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.podsweep.enabled";
    /// Read by the drop-in provider, not by the engine: `false` switches it off.
    pub const DROPIN_ENABLED: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.dropin.enabled";
    /// Kyuubi's redaction pattern (`kyuubi.server.redaction.regex`).
    pub const REDACTION_REGEX: &str = "kyuubi.server.redaction.regex";
    pub const IDLE_RELEASE: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.scope.releaseAfterIdle";
    pub const STEP_DOWN_AFTER: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.stepDownAfter";
    /// What a scope's election is keyed by: the cluster's identity (`CLUSTER`) or the API
    /// server's URL (`URL`, podsweep 0.1's key).
    pub const HA_ELECTION_KEY: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.electionKey";
    /// Whether a server also campaigns, first, in podsweep 0.1's URL-keyed election.
    pub const HA_LEGACY_ELECTION: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.legacyElection";
    /// How often every scope's status is logged (the Java API's status logger, the daemon).
    pub const STATUS_LOG_INTERVAL: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.status.logInterval";
    /// Self-watch mode: podsweep watches the driver pods itself (drop-in provider, daemon).
    pub const WATCH_ENABLED: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.enabled";
    /// The cleanup kind in self-watch mode (default: the stock key's value).
    pub const WATCH_KIND: &str = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.kind";
    /// The leader's watch asks only for pods past Running (a field selector on the phase).
    pub const WATCH_PHASE_SELECTOR: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.phaseSelector";
    /// The leader's watch starts with a streaming list (WatchList) where offered.
    pub const WATCH_STREAMING_LIST: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.streamingList";
    pub const INIT_LIST: &str = "kyuubi.kubernetes.client.initialize.list";
    pub const STATE_SOURCE: &str = "kyuubi.kubernetes.application.state.source";
    pub const STATE_CONTAINER: &str = "kyuubi.kubernetes.application.state.container";
    /// The retain period of drivers that did not finish (FAILED, KILLED, NOT_FOUND).
    pub const FAILED_RETAIN_PERIOD: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.failed.retainPeriod";
    /// The most terminated driver pods a scope keeps (0: no cap).
    pub const MAX_TERMINATED_PODS: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.maxTerminatedPods";
    /// Whether the per-pod annotations are honoured.
    pub const ANNOTATIONS_ENABLED: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.annotations.enabled";
    /// The longest retain period an annotation may ask for.
    pub const ANNOTATIONS_MAX_RETAIN: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.annotations.maxRetainPeriod";
    /// Kubernetes Events for the DELETEs the leader sends.
    pub const EVENTS_ENABLED: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.events.enabled";
    pub const EVENTS_QPS: &str = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.events.qps";
    /// The DELETE pace follows the API server's answers (the rate and in-flight keys are the
    /// ceilings).
    pub const RATE_ADAPTIVE: &str =
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.rateLimit.adaptive";
    /// Kyuubi's proposed owner-scoped watch (apache/kyuubi#7756): each server's informer sees
    /// only the pods it submitted (and shared ones).
    pub const OWNER_SCOPED_WATCH: &str = "kyuubi.kubernetes.application.ownerScopedWatch.enabled";
    /// podsweep's own switch of the leader's scope-wide watch beside the informers.
    pub const SCOPE_WATCH: &str = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.scopeWatch";
}

/// Kyuubi's HA client class names.
pub const ZK_CLIENT_CLASS: &str = "org.apache.kyuubi.ha.client.zookeeper.ZookeeperDiscoveryClient";
pub const ETCD_CLIENT_CLASS: &str = "org.apache.kyuubi.ha.client.etcd.EtcdDiscoveryClient";

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{key}: {message} (got {value:?})")]
    Invalid {
        key: String,
        value: String,
        message: String,
    },
}

impl ConfigError {
    pub fn invalid(key: &str, value: &str, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            key: key.to_owned(),
            value: value.to_owned(),
            message: message.into(),
        }
    }

    /// The key the error is about.
    pub fn key(&self) -> &str {
        match self {
            ConfigError::Invalid { key, .. } => key,
        }
    }
}

/// Everything podsweep needs, parsed from a Kyuubi configuration map.
#[derive(Clone, Debug)]
pub struct Settings {
    pub kind: CleanupKind,
    pub retain: Duration,
    pub context_allow: BTreeSet<String>,
    pub namespace_allow: BTreeSet<String>,
    pub ha: HaSettings,
    /// How each scope's election is keyed (`ha.electionKey`, `ha.legacyElection`).
    pub election: ElectionLayout,
    /// `ha.singleServer`: this server is the only one cleaning its scopes, so without an HA
    /// backend it may clean them on its own in self-watch mode too ([`require_backend`]).
    pub single_server: bool,
    /// A scope with no reachable leader for this long is reported unhealthy (ERROR log, status).
    pub leaderless_alert: Duration,
    /// A leader that has not completed one DELETE for this long while DELETEs are due steps down
    /// and stays out of the election for as long again.
    pub step_down_after: Duration,
    /// A scope with nothing tracked for this long (and never less than the tombstone lifetime)
    /// releases its election and Kubernetes client until its next event.
    pub idle_release: Duration,
    /// How often every scope's status is logged, one line per scope.
    pub status_log_interval: Duration,
    /// How DELETEs are paced and retried.
    pub tuning: Tuning,
    /// Self-watch mode (`watch.enabled`): the scopes to watch and Kyuubi's state mapping.
    pub watch: Option<WatchSettings>,
    /// Retain periods by outcome, the per-scope cap, the per-pod annotations.
    pub retention: Retention,
    /// Kubernetes Events: `None` when off, else their rate per scope.
    pub events_qps: Option<f64>,
    /// Whether the leader of each scope also watches the whole scope beside the JVM's informers
    /// (they see only their own pods: Kyuubi's owner-scoped watch).
    pub scope_watch: bool,
    /// Kyuubi's state mapping (state source and container).
    pub state: crate::kyuubi_state::StateConfig,
    /// What the leaders' pod watches ask for (`watch.phaseSelector`, `watch.streamingList`).
    pub watch_options: crate::watch::WatchOptions,
    /// The raw configuration, kept for the per-scope Kubernetes client overlay.
    pub raw: HashMap<String, String>,
    /// Which of its values are secret ([`redact`]).
    pub redactor: redact::Redactor,
}

impl Settings {
    /// Parses a Kyuubi configuration. An error about a secret key or value (Kyuubi's
    /// `kyuubi.server.redaction.regex`, podsweep's default pattern) carries
    /// `*********(redacted)` instead of the value, and every secret value is remembered so that
    /// no log line or exception message shows it ([`redact::scrub`]).
    pub fn from_map(raw: HashMap<String, String>) -> Result<Self, ConfigError> {
        let redactor = redact::Redactor::from_conf(&raw);
        redact::remember(&raw, &redactor);
        Self::parse(raw, redactor.clone()).map_err(|e| match e {
            ConfigError::Invalid {
                key,
                value,
                message,
            } => ConfigError::Invalid {
                value: redactor.shown(&key, &value).into_owned(),
                key,
                message,
            },
        })
    }

    fn parse(
        raw: HashMap<String, String>,
        redactor: redact::Redactor,
    ) -> Result<Self, ConfigError> {
        let get = |k: &str| raw.get(k).map(|v| v.trim()).filter(|v| !v.is_empty());
        for (old, key) in deprecated_in_use(&raw) {
            tracing::warn!("{old} is deprecated: its value is read because {key} is not set; rename it to {key}");
        }
        let stock_kind = match get(keys::CLEANUP_KIND) {
            None => CleanupKind::None,
            Some(v) => parse_kind(keys::CLEANUP_KIND, v)?,
        };
        let watch = self::watch::parse_watch(&get, stock_kind)?;
        // In self-watch mode the watch kind applies (the stock key stops Kyuubi's own cleaner).
        let kind = watch.as_ref().map_or(stock_kind, |w| w.kind);
        let retain = match get(keys::RETAIN_PERIOD) {
            None => Duration::from_secs(300),
            Some(v) => parse_time(keys::RETAIN_PERIOD, v)?,
        };
        if retain.is_zero() {
            return Err(ConfigError::invalid(
                keys::RETAIN_PERIOD,
                get(keys::RETAIN_PERIOD).unwrap_or(""),
                "must be greater than zero",
            ));
        }
        let list = |k: &str| -> BTreeSet<String> {
            get(k)
                .map(|v| {
                    v.split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let election = self::ha::parse_election_layout(&get)?;
        let single_server = parse_single_server(&get)?;
        let ha = parse_ha(&get, watch.is_none() || single_server)?;
        let leaderless_alert = match lookup(&get, keys::HEALTH_ALERT_AFTER) {
            None => Duration::from_secs(120),
            Some((key, v)) => positive_time(key, v)?,
        };
        let idle_release = match get(keys::IDLE_RELEASE) {
            None => Duration::from_secs(1800),
            Some(v) => positive_time(keys::IDLE_RELEASE, v)?,
        };
        let step_down_after = match get(keys::STEP_DOWN_AFTER) {
            None => Duration::from_secs(120),
            Some(v) => positive_time(keys::STEP_DOWN_AFTER, v)?,
        };
        let status_log_interval = match get(keys::STATUS_LOG_INTERVAL) {
            None => DEFAULT_STATUS_LOG_INTERVAL,
            Some(v) => positive_time(keys::STATUS_LOG_INTERVAL, v)?,
        };

        let retention = self::retention::parse_retention(&get, retain)?;
        let events_qps = self::retention::parse_events(&get)?;
        let scope_watch = self::retention::parse_scope_watch(&get)?.resolve(&get, watch.is_some());
        Ok(Settings {
            kind,
            retain,
            retention,
            events_qps,
            scope_watch,
            state: self::watch::parse_state(&get)?,
            watch_options: self::watch::parse_watch_options(&get)?,
            context_allow: list(keys::CONTEXT_ALLOW_LIST),
            namespace_allow: list(keys::NAMESPACE_ALLOW_LIST),
            ha,
            election,
            single_server,
            leaderless_alert,
            step_down_after,
            idle_release,
            status_log_interval,
            tuning: parse_tuning(&get)?,
            watch,
            raw: raw.clone(),
            redactor,
        })
    }

    /// The scopes the configuration names (`kyuubi.kubernetes.client.initialize.list`, else the
    /// configured context and namespace), as Kyuubi creates its clients at its start.
    pub fn configured_scopes(&self) -> Vec<crate::scope::Scope> {
        self::watch::named_scopes(&|k| self.get(k))
    }

    /// The value of a key, trimmed, if set and not empty.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.raw
            .get(key)
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
    }
}

/// The value of `key`, else that of its first deprecated name that is set
/// ([`table::alternatives`], as Kyuubi's `withAlternative` reads them), with the name that held
/// it (an error names the key the operator wrote).
pub(crate) fn lookup<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    key: &'static str,
) -> Option<(&'static str, &'a str)> {
    std::iter::once(key)
        .chain(table::alternatives(key).iter().copied())
        .find_map(|k| get(k).map(|v| (k, v)))
}

/// The deprecated names set in `raw` whose key is not set: `(old, new)` pairs, for one WARN each.
pub fn deprecated_in_use(raw: &HashMap<String, String>) -> Vec<(&'static str, &'static str)> {
    let set = |k: &str| raw.get(k).is_some_and(|v| !v.trim().is_empty());
    table::ALTERNATIVES
        .iter()
        .flat_map(|(key, olds)| olds.iter().map(move |old| (*old, *key)))
        .filter(|(old, key)| set(old) && !set(key))
        .collect()
}

/// The default of [`keys::STATUS_LOG_INTERVAL`].
pub const DEFAULT_STATUS_LOG_INTERVAL: Duration = Duration::from_secs(600);

/// A cleanup kind (Kyuubi's enum names, any case).
fn parse_kind(key: &str, v: &str) -> Result<CleanupKind, ConfigError> {
    match v.to_ascii_uppercase().as_str() {
        "NONE" => Ok(CleanupKind::None),
        "ALL" => Ok(CleanupKind::All),
        "COMPLETED" => Ok(CleanupKind::Completed),
        _ => Err(ConfigError::invalid(
            key,
            v,
            "expected NONE, ALL or COMPLETED",
        )),
    }
}

/// A time value that must be greater than zero (and, as every time value, at most a year).
fn positive_time(key: &str, v: &str) -> Result<Duration, ConfigError> {
    let t = parse_time(key, v)?;
    if t.is_zero() {
        return Err(ConfigError::invalid(key, v, "must be greater than zero"));
    }
    Ok(t)
}

pub(crate) fn parse_bool(
    key: &str,
    value: Option<&str>,
    default: bool,
) -> Result<bool, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(true),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(false),
        Some(v) => Err(ConfigError::invalid(key, v, "expected true or false")),
    }
}

/// A configuration map from key-value pairs (unit tests of the modules that read one).
#[cfg(test)]
pub(crate) fn conf_of(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[cfg(test)]
mod patch_docs;
#[cfg(test)]
mod tests;
