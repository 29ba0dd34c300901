//! podsweep's own configuration keys, described once.
//!
//! This table is the one source of truth for the keys podsweep adds to Kyuubi's configuration:
//! their names (the `keys::` constants), types, defaults, checks, documentation and which route
//! reads them. Everything else is generated from it or checked against it:
//!
//! * `docs/settings.md` ([`markdown`]); `tests` in this module fail when the file is stale
//!   (`PODSWEEP_UPDATE_DOCS=1 cargo test --lib config::table` rewrites it);
//! * the patch's `PodsweepConf` object ([`scala`]), whose `KyuubiConf.buildConf` entries put the
//!   keys into Kyuubi's own settings documentation; a test here fails when the diff
//!   (`java/kyuubi/kyuubi-1.12.0-podsweep.diff`) does not carry the generated text, and the JVM
//!   suites compare the entries the patched server registers with [`json`];
//! * `podsweep --list-keys [json|markdown|scala]` and `PodSweeper.configKeys()` (JNI) print it;
//! * the engine's parser: a test here checks that every default parses to the setting the parser
//!   uses when the key is unset, and that every value the check refuses is refused.

use std::fmt::Write as _;

use super::keys;

/// Kyuubi's type name of a key (`ConfigEntry.typ`), which the settings documentation prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    Boolean,
    Int,
    Double,
    /// Milliseconds or an ISO-8601 duration (`PT5M`), as Kyuubi's `timeConf`.
    Duration,
    String,
}

impl KeyType {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyType::Boolean => "boolean",
            KeyType::Int => "int",
            KeyType::Double => "double",
            KeyType::Duration => "duration",
            KeyType::String => "string",
        }
    }
}

/// What podsweep accepts beyond the type.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Check {
    None,
    /// A whole number in `[min, max]`.
    IntRange(i64, i64),
    /// A number in `[min, max]`.
    DoubleRange(f64, f64),
    /// A duration greater than zero and at most [`super::MAX_TIME`].
    PositiveDuration,
    /// One of these names, any case.
    OneOf(&'static [&'static str]),
}

/// Which podsweep route reads a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// The patched `KubernetesApplicationOperation` (and the engine it feeds).
    Patch,
    /// The drop-in provider for stock Kyuubi (self-watch mode).
    Dropin,
    /// The standalone daemon (self-watch mode).
    Daemon,
}

impl Route {
    pub fn as_str(self) -> &'static str {
        match self {
            Route::Patch => "patch",
            Route::Dropin => "drop-in",
            Route::Daemon => "daemon",
        }
    }
}

/// One of podsweep's own keys.
#[derive(Clone, Copy, Debug)]
pub struct KeyDoc {
    pub key: &'static str,
    /// The name of its entry in the patch's `PodsweepConf` object.
    pub const_name: &'static str,
    pub typ: KeyType,
    /// Its default as Kyuubi prints it (`ConfigEntry.defaultValStr`); `None`: no default.
    pub default: Option<&'static str>,
    /// What the default means when there is none (documentation only).
    pub fallback: Option<&'static str>,
    pub check: Check,
    pub doc: &'static str,
    /// The podsweep version that introduced the key.
    pub since: &'static str,
    pub routes: &'static [Route],
    /// Set by a server, not by operators: left out of the documentation, as Kyuubi's internal
    /// entries are.
    pub internal: bool,
}

impl KeyDoc {
    pub fn read_by(&self, route: Route) -> bool {
        self.routes.contains(&route)
    }

    /// Values the check refuses (every one must be refused by podsweep's parser and by the
    /// patch's `checkValue`).
    pub fn invalid_samples(&self) -> Vec<String> {
        let mut out: Vec<String> = match self.check {
            Check::None => Vec::new(),
            Check::IntRange(min, max) => vec![(min - 1).to_string(), (max + 1).to_string()],
            Check::DoubleRange(min, max) => {
                vec![format!("{}", min / 2.0), format!("{}", max * 2.0)]
            }
            Check::PositiveDuration => vec!["0".into(), "PT0S".into(), "P366D".into()],
            Check::OneOf(_) => vec!["SOMETIMES".into()],
        };
        match self.typ {
            KeyType::Boolean => out.push("yes".into()),
            KeyType::Int | KeyType::Double | KeyType::Duration => out.push("ten".into()),
            KeyType::String => {}
        }
        out
    }

    /// Values the check accepts, besides the default.
    pub fn valid_samples(&self) -> Vec<String> {
        match (self.typ, self.check) {
            (_, Check::IntRange(min, max)) => vec![min.to_string(), max.to_string()],
            (_, Check::DoubleRange(min, max)) => vec![min.to_string(), format!("{max:.1}")],
            (_, Check::PositiveDuration) => vec!["1".into(), "PT1.5S".into(), "P365D".into()],
            (_, Check::OneOf(names)) => names.iter().map(|n| n.to_ascii_lowercase()).collect(),
            (KeyType::Boolean, _) => vec!["TRUE".into(), "false".into()],
            _ => Vec::new(),
        }
    }
}

const ALL: &[Route] = &[Route::Patch, Route::Dropin, Route::Daemon];

/// The longest duration podsweep accepts, in milliseconds (365 days, [`super::MAX_TIME`]).
pub const MAX_TIME_MS: i64 = 365 * 24 * 3600 * 1000;

/// podsweep's own keys, in the order of the documentation.
pub static KEYS: &[KeyDoc] = &[
    KeyDoc {
        key: keys::PODSWEEP_ENABLED,
        const_name: "PODSWEEP_ENABLED",
        typ: KeyType::Boolean,
        default: Some("true"),
        fallback: None,
        check: Check::None,
        doc: "Whether the patched KubernetesApplicationOperation hands terminated Spark driver \
              pods to podsweep, whose elected leader of each Kubernetes context and namespace \
              deletes them once. false: every server deletes them on its own, as Kyuubi without \
              podsweep does.",
        since: "0.1.0",
        routes: &[Route::Patch],
        internal: false,
    },
    KeyDoc {
        key: keys::RATE_QPS,
        const_name: "RATE_LIMIT_QPS",
        typ: KeyType::Double,
        default: None,
        fallback: Some(
            "no ceiling while rateLimit.adaptive is true (the default); 10.0 when it is false",
        ),
        check: Check::DoubleRange(super::MIN_QPS, super::MAX_QPS),
        doc:
            "DELETE requests per second the cleanup leader of one Kubernetes context and \
              namespace sends at most (a token bucket of rateLimit.burst), from 0.001 to 1000000: \
              a ceiling over the adaptive pace, or the fixed pace when rateLimit.adaptive is false.",
        since: "0.1.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::RATE_ADAPTIVE,
        const_name: "RATE_LIMIT_ADAPTIVE",
        typ: KeyType::Boolean,
        default: Some("true"),
        fallback: None,
        check: Check::None,
        doc: "Whether the number of DELETE requests in flight follows the API server's answers: \
              it grows while they come back fast and without 429, and shrinks on a 429, a \
              Retry-After or a rising latency, below maxInFlight and rateLimit.qps. false: a \
              fixed pace of rateLimit.qps with maxInFlight requests in flight.",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::RATE_BURST,
        const_name: "RATE_LIMIT_BURST",
        typ: KeyType::Int,
        default: Some("20"),
        fallback: None,
        check: Check::IntRange(1, 1_000_000),
        doc: "How many DELETE requests the cleanup leader may send at once before \
              rateLimit.qps paces them.",
        since: "0.1.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::MAX_IN_FLIGHT,
        const_name: "MAX_IN_FLIGHT",
        typ: KeyType::Int,
        default: None,
        fallback: Some("64 while rateLimit.adaptive is true (the default); 8 when it is false"),
        check: Check::IntRange(1, 1_000_000),
        doc: "DELETE requests in flight at most, per Kubernetes context and namespace: the \
              ceiling of the adaptive limit.",
        since: "0.1.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::DRY_RUN,
        const_name: "DRY_RUN",
        typ: KeyType::Boolean,
        default: Some("false"),
        fallback: None,
        check: Check::None,
        doc: "Send every DELETE with dryRun=All: the API server checks it and deletes nothing; \
              the logs say Would delete.",
        since: "0.1.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::RETRY_MAX_WAIT,
        const_name: "RETRY_MAX_WAIT",
        typ: KeyType::Duration,
        default: Some("PT1M"),
        fallback: None,
        check: Check::PositiveDuration,
        doc: "The longest wait between retries of a DELETE that failed with 429, a 5xx or a \
              transport error (a longer Retry-After wins, up to 10 minutes).",
        since: "0.1.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::FORBIDDEN_RETRY,
        const_name: "FORBIDDEN_RETRY_INTERVAL",
        typ: KeyType::Duration,
        default: Some("PT1M"),
        fallback: None,
        check: Check::PositiveDuration,
        doc: "The wait between retries of a DELETE the API server refused with 403: such pods \
              are kept and retried until the permission is granted.",
        since: "0.1.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::FAILURES_SUMMARY,
        const_name: "FAILURES_SUMMARY_INTERVAL",
        typ: KeyType::Duration,
        default: Some("PT1M"),
        fallback: None,
        check: Check::PositiveDuration,
        doc: "Failed DELETEs are summed up in one log line per failure class (403, other \
              refusals, 429, 5xx, transport errors), per Kubernetes context and namespace, at \
              most once per this interval.",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::HEALTH_ALERT_AFTER,
        const_name: "HEALTH_ALERT_AFTER",
        typ: KeyType::Duration,
        default: Some("PT2M"),
        fallback: None,
        check: Check::PositiveDuration,
        doc: "A Kubernetes context and namespace in trouble for this long is reported \
              unhealthy, with one ERROR: without a reachable cleanup leader, with its DELETEs \
              held back by the API server's Retry-After, or with its pod watch failing. A \
              cleanup task restarted after a failure counts as recovered once it has run this \
              long.",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::STEP_DOWN_AFTER,
        const_name: "HA_STEP_DOWN_AFTER",
        typ: KeyType::Duration,
        default: Some("PT2M"),
        fallback: None,
        check: Check::PositiveDuration,
        doc: "A cleanup leader that completes no DELETE for this long while DELETEs are due \
              steps down and stays out of the election as long, so a server that can delete \
              takes over.",
        since: "0.1.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::ETCD_ELECTION_LEASE,
        const_name: "HA_ETCD_LEASE_TIMEOUT",
        typ: KeyType::Duration,
        default: Some("PT30S"),
        fallback: None,
        check: Check::PositiveDuration,
        doc: "On etcd: the TTL of each server's one election lease (whole seconds, rounded \
              up), for all its Kubernetes contexts and namespaces. A keep-alive goes every \
              third of it (6 a minute at the default); a leader stops acting a third of it \
              before its lease can expire; a crashed leader's scopes are taken over within \
              it. kyuubi.ha.etcd.lease.timeout stays the servers' registrations' own.",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::HA_ELECTION_KEY,
        const_name: "HA_ELECTION_KEY",
        typ: KeyType::String,
        default: Some("CLUSTER"),
        fallback: None,
        check: Check::OneOf(&["CLUSTER", "URL"]),
        doc: "What the cleanup election of each Kubernetes context and namespace is keyed by. \
              CLUSTER: the cluster's identity (the SHA-256 of the CA certificate in the \
              namespace's kube-root-ca.crt ConfigMap, which needs get on that one ConfigMap) and \
              the namespace, so servers that reach one cluster by different URLs elect one \
              leader; a server that cannot read it does not campaign (the scope is held and \
              unhealthy). URL: the API server's URL and the namespace, as podsweep 0.1 did; \
              then every server of the fleet must say URL.",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::HA_LEGACY_ELECTION,
        const_name: "HA_LEGACY_ELECTION",
        typ: KeyType::Boolean,
        default: Some("true"),
        fallback: None,
        check: Check::None,
        doc: "With ha.electionKey=CLUSTER: whether a server first wins podsweep 0.1's \
              URL-keyed election of its scope and only then campaigns under the cluster's key, \
              so that 0.1 servers running beside it (a rolling upgrade, a rollback) and it never \
              lead at once. Set it to false once no 0.1 server runs: it saves one election \
              node per scope and server.",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::IDLE_RELEASE,
        const_name: "SCOPE_RELEASE_AFTER_IDLE",
        typ: KeyType::Duration,
        default: Some("PT30M"),
        fallback: None,
        check: Check::PositiveDuration,
        doc: "A Kubernetes context and namespace with nothing to clean for this long releases \
              its election and Kubernetes client until its next pod event; never while scopeWatch \
              is on.",
        since: "0.1.0",
        routes: &[Route::Patch],
        internal: false,
    },
    KeyDoc {
        key: keys::FAILED_RETAIN_PERIOD,
        const_name: "FAILED_RETAIN_PERIOD",
        typ: KeyType::Duration,
        default: None,
        fallback: Some("the value of kyuubi.kubernetes.terminatedApplicationRetainPeriod"),
        check: Check::PositiveDuration,
        doc: "The retain period of driver pods whose application did not finish (FAILED, \
              KILLED, NOT_FOUND), so failed drivers can be kept longer than finished ones \
              without being kept for ever; finished ones keep \
              kyuubi.kubernetes.terminatedApplicationRetainPeriod. Applies where the cleanup \
              kind deletes them (ALL).",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::MAX_TERMINATED_PODS,
        const_name: "MAX_TERMINATED_PODS",
        typ: KeyType::Int,
        default: Some("0"),
        fallback: None,
        check: Check::IntRange(0, 10_000_000),
        doc: "At most this many terminated driver pods per Kubernetes context and namespace wait \
              for their retain period; past it the cleanup leader deletes the oldest (by \
              termination time) at once, whatever their annotations say. 0: no cap.",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::ANNOTATIONS_ENABLED,
        const_name: "ANNOTATIONS_ENABLED",
        typ: KeyType::Boolean,
        default: Some("false"),
        fallback: None,
        check: Check::None,
        doc: "Whether a driver pod's annotations podsweep.org/retain-period (a longer retain \
              period, at most annotations.maxRetainPeriod) and podsweep.org/keep=true (no \
              deletion by retain period; the cap still applies) are honoured. Jobs set them with \
              spark.kubernetes.driver.annotation.*; an annotation never makes a pod go sooner.",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::ANNOTATIONS_MAX_RETAIN,
        const_name: "ANNOTATIONS_MAX_RETAIN_PERIOD",
        typ: KeyType::Duration,
        default: Some("PT168H"),
        fallback: None,
        check: Check::PositiveDuration,
        doc: "The longest retain period a podsweep.org/retain-period annotation may ask for; a \
              longer one counts as this.",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::STATUS_LOG_INTERVAL,
        const_name: "STATUS_LOG_INTERVAL",
        typ: KeyType::Duration,
        default: Some("PT10M"),
        fallback: None,
        check: Check::PositiveDuration,
        doc: "How often each server logs the status of every Kubernetes context and namespace \
              it serves, one INFO line each (leader, health, pauses with cause and end, due \
              pods and retries, the last failure), under the logger org.podsweep.status; the \
              same status is the JMX MBean org.podsweep:type=PodSweeper.",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::EVENTS_ENABLED,
        const_name: "EVENTS_ENABLED",
        typ: KeyType::Boolean,
        default: Some("false"),
        fallback: None,
        check: Check::None,
        doc: "Whether the cleanup leader records a Kubernetes Event (events.k8s.io/v1) in the \
              pod's namespace when it deletes a driver pod or a DELETE is refused. Needs create \
              and patch on events.k8s.io events.",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::EVENTS_QPS,
        const_name: "EVENTS_QPS",
        typ: KeyType::Double,
        default: Some("5.0"),
        fallback: None,
        check: Check::DoubleRange(0.01, 1000.0),
        doc: "Events per second per Kubernetes context and namespace at most (a burst of 10); \
              the events past it are not sent and are counted (events_dropped).",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::SCOPE_WATCH,
        const_name: "SCOPE_WATCH",
        typ: KeyType::String,
        default: Some("AUTO"),
        fallback: None,
        check: Check::OneOf(&["AUTO", "ON", "OFF"]),
        doc: "Whether the cleanup leader of each Kubernetes context and namespace also watches \
              all its driver pods beside the informers, which must when an informer sees only \
              the pods its server submitted. AUTO: when \
              kyuubi.kubernetes.application.ownerScopedWatch.enabled is true. While it is on, \
              every configured context and namespace campaigns from the start and is never \
              released when idle, so a leader that goes always has a successor.",
        since: "0.2.0",
        routes: &[Route::Patch],
        internal: false,
    },
    KeyDoc {
        key: keys::HA_SINGLE_SERVER,
        const_name: "HA_SINGLE_SERVER",
        typ: KeyType::Boolean,
        default: Some("false"),
        fallback: None,
        check: Check::None,
        doc: "Whether this server is the only one cleaning its Kubernetes contexts and \
              namespaces, so that without an HA backend it may clean them on its own. In \
              self-watch mode (the drop-in, the daemon, watch.enabled) podsweep refuses to start \
              without kyuubi.ha.addresses (or kyuubi.ha.zookeeper.quorum) unless this is true, \
              since every server would lead every scope and delete every pod; a private embedded \
              ZooKeeper counts as none. The daemon's --single-server sets it. A server fed by \
              Kyuubi's informers cleans on its own without an HA backend, as Kyuubi does.",
        since: "0.2.0",
        routes: ALL,
        internal: false,
    },
    KeyDoc {
        key: keys::HA_EMBEDDED,
        const_name: "HA_EMBEDDED",
        typ: KeyType::Boolean,
        default: Some("false"),
        fallback: None,
        check: Check::None,
        doc: "Set by the server when kyuubi.ha.addresses is its private embedded ZooKeeper: \
              podsweep then cleans locally.",
        since: "0.1.0",
        routes: &[Route::Patch, Route::Dropin],
        internal: true,
    },
    KeyDoc {
        key: keys::WATCH_ENABLED,
        const_name: "WATCH_ENABLED",
        typ: KeyType::Boolean,
        default: Some("false"),
        fallback: None,
        check: Check::None,
        doc: "Self-watch mode: podsweep watches the driver pods itself, only on the elected \
              server of each Kubernetes context and namespace. The drop-in provider and the \
              daemon turn it on.",
        since: "0.1.0",
        routes: &[Route::Dropin, Route::Daemon],
        internal: false,
    },
    KeyDoc {
        key: keys::WATCH_KIND,
        const_name: "WATCH_KIND",
        typ: KeyType::String,
        default: None,
        fallback: Some("the value of kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind"),
        check: Check::OneOf(&["NONE", "ALL", "COMPLETED"]),
        doc: "The cleanup kind in self-watch mode (NONE, ALL or COMPLETED), so that stock \
              Kyuubi's own cleaner can be set to NONE while podsweep cleans.",
        since: "0.1.0",
        routes: &[Route::Dropin, Route::Daemon],
        internal: false,
    },
    KeyDoc {
        key: keys::WATCH_PHASE_SELECTOR,
        const_name: "WATCH_PHASE_SELECTOR",
        typ: KeyType::Boolean,
        default: Some("true"),
        fallback: None,
        check: Check::None,
        doc: "Whether the elected server's pod watch in self-watch mode asks the API server only \
              for the driver pods past Running (field selector \
              status.phase!=Pending,status.phase!=Running), so that running pods cost it no list \
              entry and no event; with kyuubi.kubernetes.application.state.source POD (Kyuubi's \
              default) only. With CONTAINER, or false, it watches every driver pod.",
        since: "0.2.0",
        routes: &[Route::Dropin, Route::Daemon],
        internal: false,
    },
    KeyDoc {
        key: keys::WATCH_STREAMING_LIST,
        const_name: "WATCH_STREAMING_LIST",
        typ: KeyType::Boolean,
        default: Some("true"),
        fallback: None,
        check: Check::None,
        doc: "Whether the elected server's pod watch gets the pods' first state as a streaming \
              list (sendInitialEvents, Kubernetes' WatchList feature) instead of a list, where \
              the API server offers one; where it refuses or fails one, the watch lists instead \
              and tries streaming again an hour later. false: always a list.",
        since: "0.2.0",
        routes: &[Route::Dropin, Route::Daemon],
        internal: false,
    },
    KeyDoc {
        key: keys::DROPIN_ENABLED,
        const_name: "DROPIN_ENABLED",
        typ: KeyType::Boolean,
        default: Some("true"),
        fallback: None,
        check: Check::None,
        doc: "Whether podsweep's drop-in provider runs when its jar is on the class path.",
        since: "0.1.0",
        routes: &[Route::Dropin],
        internal: false,
    },
];

/// Keys renamed after they were first published, with their earlier names: an earlier name is
/// read when the key is absent (Kyuubi's `withAlternative`: the patch's entries carry them), and
/// is documented as a deprecated alternative. Kept apart from [`KEYS`] so that the rows stay as
/// they are.
pub static ALTERNATIVES: &[(&str, &[&str])] = &[
    (keys::FAILURES_SUMMARY, &[keys::FORBIDDEN_SUMMARY_OLD]),
    (keys::HEALTH_ALERT_AFTER, &[keys::LEADERLESS_ALERT_OLD]),
];

/// The earlier names of a key, read when it is absent (deprecated); empty for most keys.
pub fn alternatives(key: &str) -> &'static [&'static str] {
    ALTERNATIVES
        .iter()
        .find(|(k, _)| *k == key)
        .map_or(&[], |(_, olds)| olds)
}

/// The entry of a key, if it is one of podsweep's own.
pub fn find(key: &str) -> Option<&'static KeyDoc> {
    KEYS.iter().find(|k| k.key == key)
}

fn json_string(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

/// The table as a JSON array (`podsweep --list-keys json`, `PodSweeper.configKeys()`): per key
/// `key`, `const`, `type`, `default` (null: none), `doc`, `since`, `routes`, `alternatives` (the
/// deprecated earlier names), `kyuubi_version` (the `version` of the patch's entry: the Kyuubi
/// release it targets), `internal`, `check`, and the `valid` / `invalid` sample values.
pub fn json() -> String {
    let rows: Vec<serde_json::Value> = KEYS
        .iter()
        .map(|k| {
            let check = match k.check {
                Check::None => serde_json::json!({ "kind": "none" }),
                Check::IntRange(min, max) => {
                    serde_json::json!({ "kind": "range", "min": min, "max": max })
                }
                Check::DoubleRange(min, max) => {
                    serde_json::json!({ "kind": "range", "min": min, "max": max })
                }
                Check::PositiveDuration => {
                    serde_json::json!({ "kind": "positive", "max_ms": MAX_TIME_MS })
                }
                Check::OneOf(names) => serde_json::json!({ "kind": "one_of", "values": names }),
            };
            serde_json::json!({
                "key": k.key,
                "const": k.const_name,
                "type": k.typ.as_str(),
                "default": k.default,
                "fallback": k.fallback,
                "doc": k.doc,
                "since": k.since,
                "routes": k.routes.iter().map(|r| r.as_str()).collect::<Vec<_>>(),
                "alternatives": alternatives(k.key),
                "kyuubi_version": KYUUBI_TARGET,
                "internal": k.internal,
                "check": check,
                "valid": k.valid_samples(),
                "invalid": k.invalid_samples(),
            })
        })
        .collect();
    serde_json::Value::Array(rows).to_string()
}

/// What the check says, in words, for the documentation.
fn check_words(k: &KeyDoc) -> String {
    match k.check {
        Check::None => String::new(),
        Check::IntRange(min, max) => format!("{min} to {max}"),
        Check::DoubleRange(min, max) => format!("{min} to {max}"),
        Check::PositiveDuration => "greater than 0, at most P365D".to_owned(),
        Check::OneOf(names) => names.join(", "),
    }
}

/// `docs/settings.md`: the table as Markdown.
pub fn markdown() -> String {
    let mut out = String::new();
    out.push_str(
        "<!-- Generated from podsweep's key table (src/config/table.rs) by `podsweep \
         --list-keys markdown`; `cargo test --lib config::table` fails when this file is stale, \
         `PODSWEEP_UPDATE_DOCS=1 cargo test --lib config::table` rewrites it. -->\n\n",
    );
    out.push_str("# podsweep's configuration keys\n\n");
    out.push_str(
        "podsweep reads Kyuubi's own keys with Kyuubi's defaults (see \
         [docs/configuration.md](configuration.md)) and adds the keys below, all under \
         `kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.`. The patched Kyuubi registers \
         the keys it reads with `KyuubiConf.buildConf`, so Kyuubi's own settings documentation \
         (`docs/configuration/settings.md`, generated by Kyuubi's `AllKyuubiConfiguration`) \
         lists them in its Kubernetes table with the same default, meaning and type, and the \
         Kyuubi release the patch targets as their version; `scripts/kyuubi settings` prints \
         those rows from the patched jar. A renamed key's earlier name is still read when the \
         key is absent (deprecated: podsweep logs one WARN; the patch's entry carries it with \
         `withAlternative`).\n\n",
    );
    out.push_str("| Key | Default | Meaning | Type | Accepted | Read by | Since |\n");
    out.push_str("|---|---|---|---|---|---|---|\n");
    for k in KEYS.iter().filter(|k| !k.internal) {
        let default = match (k.default, k.fallback) {
            (Some(d), _) => format!("`{d}`"),
            (None, Some(f)) => f.to_owned(),
            (None, None) => "unset".to_owned(),
        };
        let routes: Vec<&str> = k.routes.iter().map(|r| r.as_str()).collect();
        let olds: Vec<String> = alternatives(k.key)
            .iter()
            .map(|o| format!("`{o}`"))
            .collect();
        let doc = if olds.is_empty() {
            k.doc.to_owned()
        } else {
            format!(
                "{} Deprecated alternative, read when this key is absent: {}.",
                k.doc,
                olds.join(", ")
            )
        };
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} | {} |",
            k.key,
            default,
            doc,
            k.typ.as_str(),
            check_words(k),
            routes.join(", "),
            k.since
        );
    }
    out.push_str(
        "\nInternal, set by a server and not by operators (left out of Kyuubi's settings \
         documentation too):\n\n",
    );
    for k in KEYS.iter().filter(|k| k.internal) {
        let _ = writeln!(
            out,
            "- `{}` ({}, default `{}`): {}",
            k.key,
            k.typ.as_str(),
            k.default.unwrap_or("unset"),
            k.doc
        );
    }
    out
}

/// A Scala string literal.
fn scala_string(s: &str) -> String {
    // JSON's escapes are valid Scala escapes for the characters the docs use.
    json_string(s)
}

/// A Scala string literal broken into pieces joined with `+` so no line is longer than about
/// 100 characters (Kyuubi's style).
fn scala_doc(s: &str, indent: &str) -> String {
    const WIDTH: usize = 100;
    // `.doc("` before the first piece, `" +` after every piece.
    let room = WIDTH.saturating_sub(indent.len() + 10).max(40);
    let mut pieces: Vec<String> = Vec::new();
    let mut current = String::new();
    for word in s.split(' ') {
        if !current.is_empty() && current.len() + 1 + word.len() > room {
            current.push(' ');
            pieces.push(std::mem::take(&mut current));
            current.push_str(word);
        } else {
            if !current.is_empty() {
                current.push(' ');
            }
            current.push_str(word);
        }
    }
    pieces.push(current);
    let quoted: Vec<String> = pieces.iter().map(|p| scala_string(p)).collect();
    quoted.join(&format!(" +\n{indent}  "))
}

/// The Kyuubi release the patch targets: the `version` of its keys in Kyuubi's settings.
pub const KYUUBI_TARGET: &str = "1.12.0";

/// The license header of Kyuubi's source files (the patch's new files carry it, as Kyuubi's
/// apache-rat check requires).
pub const ASF_HEADER: &str = "/*
 * Licensed to the Apache Software Foundation (ASF) under one or more
 * contributor license agreements.  See the NOTICE file distributed with
 * this work for additional information regarding copyright ownership.
 * The ASF licenses this file to You under the Apache License, Version 2.0
 * (the \"License\"); you may not use this file except in compliance with
 * the License.  You may obtain a copy of the License at
 *
 *    http://www.apache.org/licenses/LICENSE-2.0
 *
 * Unless required by applicable law or agreed to in writing, software
 * distributed under the License is distributed on an \"AS IS\" BASIS,
 * WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 * See the License for the specific language governing permissions and
 * limitations under the License.
 */
";

/// A default duration as Kyuubi writes one: `Duration.ofMinutes(1).toMillis`, in the largest
/// unit that divides it.
fn scala_duration(t: std::time::Duration) -> String {
    let ms = t.as_millis();
    let units = [
        (86_400_000u128, "Days"),
        (3_600_000, "Hours"),
        (60_000, "Minutes"),
        (1_000, "Seconds"),
    ];
    for (size, unit) in units {
        if ms > 0 && ms.is_multiple_of(size) {
            return format!("Duration.of{unit}({}).toMillis", ms / size);
        }
    }
    format!("Duration.ofMillis({ms}).toMillis")
}

/// The patch's `PodsweepConf.scala`: one `KyuubiConf.buildConf` entry per key the patched
/// server reads, with the table's type, check, default, documentation and version.
pub fn scala() -> String {
    let patch: Vec<&KeyDoc> = KEYS.iter().filter(|k| k.read_by(Route::Patch)).collect();
    // Kyuubi builds with -Ywarn-unused:imports and -Xfatal-warnings: import only what is used.
    let mut entries = vec!["ConfigEntry"];
    if patch.iter().any(|k| k.default.is_none()) {
        entries.push("OptionalConfigEntry");
    }
    let mut out = String::new();
    out.push_str(ASF_HEADER);
    out.push_str(
        "\n// podsweep for Apache Kyuubi. GENERATED from podsweep's key table (src/config/table.rs,\n\
         // `podsweep --list-keys scala`): change the table, not this file.\n\
         package org.apache.kyuubi.engine\n\n",
    );
    if patch
        .iter()
        .any(|k| k.typ == KeyType::Duration && k.default.is_some())
    {
        out.push_str("import java.time.Duration\n\n");
    }
    // One line each, sorted as Kyuubi's scalafmt sorts them (`rewrite.imports.sort = scalastyle`).
    let mut imports: Vec<&str> = entries;
    imports.extend(["ConfigAudience.SERVER", "KyuubiConf.buildConf"]);
    imports.sort_unstable();
    for name in imports {
        let _ = writeln!(out, "import org.apache.kyuubi.config.{name}");
    }
    out.push_str(
        "\n\
         /**\n \
         * podsweep's keys, registered with KyuubiConf so that Kyuubi's settings documentation\n \
         * lists them and Kyuubi checks their values.\n \
         */\n\
         object PodsweepConf {\n\n",
    );
    let _ = writeln!(
        out,
        "  /** The podsweep release this server is built with: its jar must be the same. */\n  \
         val PODSWEEP_VERSION: String = {}\n",
        scala_string(env!("CARGO_PKG_VERSION"))
    );
    let mut first = true;
    for k in &patch {
        if !first {
            out.push('\n');
        }
        first = false;
        let (scala_type, builder) = match k.typ {
            KeyType::Boolean => ("Boolean", "booleanConf"),
            KeyType::Int => ("Int", "intConf"),
            KeyType::Double => ("Double", "doubleConf"),
            KeyType::Duration => ("Long", "timeConf"),
            KeyType::String => ("String", "stringConf"),
        };
        let entry = if k.default.is_some() {
            "ConfigEntry"
        } else {
            "OptionalConfigEntry"
        };
        let _ = writeln!(out, "  val {}: {entry}[{scala_type}] =", k.const_name);
        let _ = writeln!(out, "    buildConf({})", scala_string(k.key));
        if k.internal {
            out.push_str("      .internal\n");
        }
        let _ = writeln!(out, "      .doc({})", scala_doc(k.doc, "      "));
        let _ = writeln!(out, "      .version({})", scala_string(KYUUBI_TARGET));
        for old in alternatives(k.key) {
            let line = format!("      .withAlternative({})", scala_string(old));
            if line.len() <= 100 {
                let _ = writeln!(out, "{line}");
            } else {
                // Kyuubi's scalastyle allows 100 characters a line.
                let _ = writeln!(
                    out,
                    "      .withAlternative(\n        {})",
                    scala_string(old)
                );
            }
        }
        out.push_str("      .audience(SERVER)\n");
        let _ = writeln!(out, "      .{builder}");
        match k.check {
            Check::None => {}
            Check::IntRange(min, max) => {
                let _ = writeln!(
                    out,
                    "      .checkValue(v => v >= {min} && v <= {max}, {})",
                    scala_string(&format!("must be from {min} to {max}"))
                );
            }
            Check::DoubleRange(min, max) => {
                let _ = writeln!(
                    out,
                    "      .checkValue(v => v >= {min:?} && v <= {max:?}, {})",
                    scala_string(&format!("must be from {min} to {max}"))
                );
            }
            Check::PositiveDuration => {
                let _ = writeln!(
                    out,
                    "      .checkValue(v => v > 0L && v <= {MAX_TIME_MS}L, {})",
                    scala_string("must be greater than 0 and at most P365D")
                );
            }
            Check::OneOf(names) => {
                let set: Vec<String> = names.iter().map(|n| scala_string(n)).collect();
                let _ = writeln!(out, "      .transformToUpperCase");
                let _ = writeln!(out, "      .checkValues(Set({}))", set.join(", "));
            }
        }
        match (k.typ, k.default) {
            (_, None) => out.push_str("      .createOptional\n"),
            (KeyType::Duration, Some(d)) => {
                let t = super::parse_time(k.key, d).unwrap_or_default();
                let _ = writeln!(out, "      .createWithDefault({})", scala_duration(t));
            }
            (KeyType::String, Some(d)) => {
                let _ = writeln!(out, "      .createWithDefault({})", scala_string(d));
            }
            (_, Some(d)) => {
                let _ = writeln!(out, "      .createWithDefault({d})");
            }
        }
    }
    out.push_str(
        "\n  /** Every entry above: reading each checks a configuration Kyuubi's way. */\n",
    );
    let names: Vec<&str> = patch.iter().map(|k| k.const_name).collect();
    let _ = writeln!(
        out,
        "  val entries: Seq[ConfigEntry[_]] = Seq(\n    {})",
        names.join(",\n    ")
    );
    out.push_str("}\n");
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::path::Path;

    use super::super::Settings;
    use super::*;

    fn repo(path: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
    }

    /// The settings parsed from `pairs` on top of what a key needs to be read at all.
    fn parse(pairs: &[(&str, &str)]) -> Result<Settings, super::super::ConfigError> {
        let mut conf: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        // The watch keys are read only in self-watch mode, ha.embedded only with an HA address.
        if !conf.contains_key(keys::WATCH_ENABLED) {
            conf.insert(keys::WATCH_ENABLED.to_owned(), "true".to_owned());
        }
        conf.insert(keys::HA_ADDRESSES.to_owned(), "127.0.0.1:2181".to_owned());
        Settings::from_map(conf)
    }

    /// What a key means to the engine, for comparing a default with the unset key.
    fn meaning(s: &Settings) -> String {
        format!(
            "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
            s.single_server,
            s.retention,
            s.events_qps,
            s.scope_watch,
            s.tuning,
            s.status_log_interval,
            s.leaderless_alert,
            s.step_down_after,
            s.idle_release,
            s.watch.as_ref().map(|w| (w.kind, w.kind_key)),
            s.ha
        )
    }

    #[test]
    fn every_default_is_what_the_parser_uses_when_the_key_is_unset() {
        for k in KEYS {
            let Some(d) = k.default else { continue };
            // Read by the JVM side, not by the engine (the engine ignores them).
            if matches!(k.key, keys::PODSWEEP_ENABLED | keys::DROPIN_ENABLED) {
                continue;
            }
            // The key unset, everything else as `parse` sets it.
            let mut conf: HashMap<String, String> = HashMap::new();
            conf.insert(keys::HA_ADDRESSES.to_owned(), "127.0.0.1:2181".to_owned());
            if k.key != keys::WATCH_ENABLED {
                conf.insert(keys::WATCH_ENABLED.to_owned(), "true".to_owned());
            }
            let unset = meaning(&Settings::from_map(conf).unwrap());
            let set = parse(&[(k.key, d)]).unwrap_or_else(|e| panic!("{}: {e}", k.key));
            assert_eq!(meaning(&set), unset, "{} = {d}", k.key);
        }
    }

    #[test]
    fn the_parser_refuses_what_the_check_refuses_and_takes_what_it_takes() {
        for k in KEYS {
            if matches!(k.key, keys::PODSWEEP_ENABLED | keys::DROPIN_ENABLED) {
                continue;
            }
            for bad in k.invalid_samples() {
                let e = parse(&[(k.key, &bad)])
                    .err()
                    .unwrap_or_else(|| panic!("{} = {bad} was accepted", k.key));
                assert_eq!(e.key(), k.key, "{bad}");
            }
            for good in k.valid_samples() {
                if let Err(e) = parse(&[(k.key, &good)]) {
                    panic!("{} = {good} was refused: {e}", k.key);
                }
            }
        }
    }

    #[test]
    fn keys_are_unique_and_podsweeps_own() {
        let mut seen = std::collections::HashSet::new();
        for k in KEYS {
            assert!(seen.insert(k.key), "{} twice", k.key);
            assert!(
                k.key
                    .starts_with("kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."),
                "{}",
                k.key
            );
            assert!(!k.doc.contains("  "), "{}: double space in the doc", k.key);
        }
    }

    /// Compares a generated file with the committed one; `PODSWEEP_UPDATE_DOCS=1` rewrites it.
    fn check_generated(path: &str, want: &str) {
        let file = repo(path);
        if std::env::var("PODSWEEP_UPDATE_DOCS").as_deref() == Ok("1") {
            std::fs::write(&file, want).expect("write the generated file");
            return;
        }
        let have = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(
            have == want,
            "{path} is stale: run `PODSWEEP_UPDATE_DOCS=1 cargo test --lib config::table` \
             (or `podsweep --list-keys markdown > {path}`)"
        );
    }

    #[test]
    fn docs_settings_md_is_current() {
        check_generated("docs/settings.md", &markdown());
    }

    #[test]
    fn every_documented_key_is_in_the_configuration_guide() {
        let guide =
            std::fs::read_to_string(repo("docs/configuration.md")).expect("docs/configuration.md");
        for k in KEYS.iter().filter(|k| !k.internal) {
            let short = k
                .key
                .trim_start_matches("kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.");
            assert!(
                guide.contains(&format!("`{short}`")) || guide.contains(k.key),
                "docs/configuration.md does not mention {}",
                k.key
            );
        }
    }

    /// The diff's new file `PodsweepConf.scala`, without the `+` of its lines.
    fn scala_in_diff() -> Option<String> {
        let diff = std::fs::read_to_string(repo("java/kyuubi/kyuubi-1.12.0-podsweep.diff")).ok()?;
        let start = diff.find(
            "+++ b/kyuubi-server/src/main/scala/org/apache/kyuubi/engine/PodsweepConf.scala",
        )?;
        let body = diff[start..].split_once("\n@@")?.1.split_once('\n')?.1;
        let mut out = String::new();
        for line in body.lines() {
            match line.strip_prefix('+') {
                Some(l) => {
                    out.push_str(l);
                    out.push('\n');
                }
                None => break,
            }
        }
        Some(out)
    }

    #[test]
    fn the_patch_carries_the_generated_conf_object() {
        let generated = scala();
        let in_diff = scala_in_diff().expect(
            "the diff has no new file kyuubi-server/.../engine/PodsweepConf.scala; \
             `podsweep --list-keys scala` prints it",
        );
        assert!(
            in_diff == generated,
            "PodsweepConf.scala in java/kyuubi/kyuubi-1.12.0-podsweep.diff is not what the key \
             table generates: replace that new file's lines with `podsweep --list-keys scala` \
             (each prefixed with +) and fix its hunk's line count"
        );
    }

    #[test]
    fn json_lists_every_key_with_its_samples() {
        let v: serde_json::Value = serde_json::from_str(&json()).unwrap();
        let rows = v.as_array().unwrap();
        assert_eq!(rows.len(), KEYS.len());
        let qps = rows.iter().find(|r| r["key"] == keys::RATE_QPS).unwrap();
        assert_eq!(qps["type"], "double");
        assert!(qps["default"].is_null());
        assert!(qps["invalid"].as_array().unwrap().len() >= 2);
        let kind = rows.iter().find(|r| r["key"] == keys::WATCH_KIND).unwrap();
        assert!(kind["default"].is_null());
    }
}
