//! The `kyuubi.ha.*` keys: which backend elects the leaders, and its settings (the types and
//! their parsing).

use std::time::Duration;

use super::{keys, parse_bool, ConfigError, ETCD_CLIENT_CLASS, MAX_TIME, ZK_CLIENT_CLASS};

/// Which HA backend elects the cleanup leaders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HaSettings {
    /// No HA backend: every server cleans up on its own (Kyuubi today).
    Local,
    ZooKeeper(ZkSettings),
    Etcd(EtcdSettings),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdSettings {
    /// Endpoints from `kyuubi.ha.addresses`, each `http(s)://host:port` (a bare `host:port` gets
    /// `http://`, or `https://` when TLS is on).
    pub endpoints: Vec<String>,
    /// Kyuubi's `kyuubi.ha.namespace`; election names live under `/<namespace>-podsweep/elections/`.
    pub namespace: String,
    /// The TTL of podsweep's own election lease (`ha.etcd.leaseTimeout`), whole seconds
    /// rounded up. Kyuubi's `kyuubi.ha.etcd.lease.timeout` is its server registrations' and is
    /// not read: its 10 s default would cost 18 keep-alives a minute per server.
    pub lease_ttl: Duration,
    pub tls: Option<EtcdTls>,
}

impl EtcdSettings {
    /// The key prefix under which every scope's election lives.
    pub fn root(&self) -> String {
        format!("/{}-podsweep/elections", self.namespace.trim_matches('/'))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdTls {
    pub ca: String,
    pub cert: String,
    pub key: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkSettings {
    /// Connect string, `host:port[,host:port...][/chroot]`.
    pub addresses: String,
    /// Kyuubi's `kyuubi.ha.namespace`; podsweep's latches live under `/<namespace>-podsweep`.
    pub namespace: String,
    pub session_timeout: Duration,
    pub connection_timeout: Duration,
    /// `kyuubi.ha.zookeeper.auth.type`.
    pub auth: ZkAuth,
    /// `kyuubi.ha.zookeeper.auth.digest` (`user:password`): added as `digest` auth whenever set,
    /// whatever the auth type, as Kyuubi does.
    pub digest: Option<String>,
    /// Kyuubi's connection retry keys; podsweep keeps retrying forever (a cleanup leader must come
    /// back), using the base and maximum waits for its backoff.
    pub retry: ZkRetry,
}

impl Default for ZkSettings {
    fn default() -> Self {
        ZkSettings {
            addresses: String::new(),
            namespace: "kyuubi".into(),
            session_timeout: Duration::from_millis(60_000),
            connection_timeout: Duration::from_millis(15_000),
            auth: ZkAuth::None,
            digest: None,
            retry: ZkRetry::default(),
        }
    }
}

/// `kyuubi.ha.zookeeper.auth.type`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZkAuth {
    None,
    /// Digest auth from `kyuubi.ha.zookeeper.auth.digest`.
    Digest,
    /// SASL/GSSAPI; needs a build with the `kerberos` feature.
    Kerberos {
        principal: Option<String>,
        keytab: Option<String>,
        server_principal: Option<String>,
    },
}

impl ZkAuth {
    /// Nodes podsweep creates get world-read + creator-all ACLs unless the auth type is NONE.
    pub fn secure_acls(&self) -> bool {
        !matches!(self, ZkAuth::None)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZkRetry {
    /// `ONE_TIME`, `N_TIME`, `EXPONENTIAL_BACKOFF`, `BOUNDED_EXPONENTIAL_BACKOFF`, `UNTIL_ELAPSED`.
    pub policy: String,
    pub max_retries: u32,
    pub base_wait: Duration,
    pub max_wait: Duration,
}

impl Default for ZkRetry {
    fn default() -> Self {
        ZkRetry {
            policy: "EXPONENTIAL_BACKOFF".into(),
            max_retries: 3,
            base_wait: Duration::from_millis(1000),
            max_wait: Duration::from_millis(30_000),
        }
    }
}

impl ZkSettings {
    /// The ZooKeeper path under which every scope's latch lives.
    pub fn root(&self) -> String {
        format!("/{}-podsweep/latches", self.namespace.trim_matches('/'))
    }
}

/// What a scope's election is keyed by (`ha.electionKey`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionKeyKind {
    /// The cluster's identity (its root CA certificate) and the namespace: one election per
    /// namespace whatever URL a server reaches the cluster by (podsweep 0.2's layout).
    Cluster,
    /// The API server's URL and the namespace (podsweep 0.1's layout).
    Url,
}

/// How a scope's election is keyed, and whether podsweep 0.1's election is joined first
/// (`src/identity.rs` has the layouts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ElectionLayout {
    pub key: ElectionKeyKind,
    /// `ha.legacyElection`: with the cluster key, first win the URL-keyed election that 0.1
    /// servers campaign in, so that they and this server never lead at once.
    pub legacy: bool,
}

impl Default for ElectionLayout {
    fn default() -> Self {
        ElectionLayout {
            key: ElectionKeyKind::Cluster,
            legacy: true,
        }
    }
}

pub(super) fn parse_election_layout<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<ElectionLayout, ConfigError> {
    let key = match get(keys::HA_ELECTION_KEY)
        .map(str::to_ascii_uppercase)
        .as_deref()
    {
        None | Some("CLUSTER") => ElectionKeyKind::Cluster,
        Some("URL") => ElectionKeyKind::Url,
        Some(_) => {
            return Err(ConfigError::invalid(
                keys::HA_ELECTION_KEY,
                get(keys::HA_ELECTION_KEY).unwrap_or(""),
                "expected CLUSTER or URL",
            ))
        }
    };
    let legacy = parse_bool(
        keys::HA_LEGACY_ELECTION,
        get(keys::HA_LEGACY_ELECTION),
        true,
    )?;
    Ok(ElectionLayout {
        key,
        // With URL keys the scope is in 0.1's election itself.
        legacy: legacy && key == ElectionKeyKind::Cluster,
    })
}

/// `ha.singleServer`: the operator says this server is the only one cleaning its scopes.
pub(super) fn parse_single_server<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<bool, ConfigError> {
    parse_bool(keys::HA_SINGLE_SERVER, get(keys::HA_SINGLE_SERVER), false)
}

/// Whether `kyuubi.ha.addresses` is the server's private embedded ZooKeeper (`ha.embedded`).
fn embedded<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Result<bool, ConfigError> {
    parse_bool(keys::HA_EMBEDDED, get(keys::HA_EMBEDDED), false)
}

/// Self-watch mode with no HA backend shared by the servers (none configured, or the server's
/// private embedded ZooKeeper) is refused unless the operator says this server runs alone
/// (`ha.singleServer`): every server would lead every scope on its own and delete each pod once
/// per server. The error names the key and both ways out. Servers fed by Kyuubi's informers keep
/// the local fallback (each cleans on its own, as Kyuubi does without podsweep).
pub fn require_backend(settings: &super::Settings) -> Result<(), ConfigError> {
    if settings.watch.is_none() || settings.ha != HaSettings::Local || settings.single_server {
        return Ok(());
    }
    let get = |k: &str| settings.get(k);
    let why = match get(keys::HA_ADDRESSES).or_else(|| get(keys::HA_ZK_QUORUM)) {
        Some(a) => format!(
            "{} ({a}) is this server's private embedded ZooKeeper ({} is true)",
            keys::HA_ADDRESSES,
            keys::HA_EMBEDDED
        ),
        None => format!(
            "neither {} nor {} is set",
            keys::HA_ADDRESSES,
            keys::HA_ZK_QUORUM
        ),
    };
    Err(ConfigError::invalid(
        keys::HA_SINGLE_SERVER,
        get(keys::HA_SINGLE_SERVER).unwrap_or("false"),
        format!(
            "self-watch mode ({} = true, as the drop-in and the daemon run) has no HA backend: \
             {why}, so every server running it would lead every Kubernetes context and \
             namespace on its own and delete each pod once per server. Set {} (or {}) to the \
             ZooKeeper or etcd the servers share, or, if this server is the only one cleaning \
             its contexts and namespaces, set {} = true (the daemon: --single-server)",
            keys::WATCH_ENABLED,
            keys::HA_ADDRESSES,
            keys::HA_ZK_QUORUM,
            keys::HA_SINGLE_SERVER
        ),
    ))
}

/// The HA backend. `warn_embedded`: log the embedded ZooKeeper's WARN (not when the server is
/// to be refused for it, [`require_backend`], whose error says it).
pub(super) fn parse_ha<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    warn_embedded: bool,
) -> Result<HaSettings, ConfigError> {
    // Checked whatever the backend (used only on etcd), so a bad value is refused at once.
    let lease_ttl = election_lease_ttl(get)?;
    let addresses = get(keys::HA_ADDRESSES).or_else(|| get(keys::HA_ZK_QUORUM));
    let Some(addresses) = addresses else {
        return Ok(HaSettings::Local);
    };
    if embedded(get)? {
        if !warn_embedded {
            return Ok(HaSettings::Local);
        }
        tracing::warn!(
            "{} is true: {addresses} is this server's private embedded ZooKeeper, which no other \
             server shares, so electing through it would make every server a leader. podsweep \
             falls back to local cleanup (as Kyuubi does today); configure {} to a shared \
             ZooKeeper or etcd for coordinated cleanup",
            keys::HA_EMBEDDED,
            keys::HA_ADDRESSES
        );
        return Ok(HaSettings::Local);
    }
    let class = get(keys::HA_CLIENT_CLASS).unwrap_or(ZK_CLIENT_CLASS);
    let namespace = get(keys::HA_NAMESPACE)
        .or_else(|| get(keys::HA_ZK_NAMESPACE))
        .unwrap_or("kyuubi")
        .to_owned();
    if namespace.trim_matches('/').is_empty() || namespace.contains("//") {
        return Err(ConfigError::invalid(
            keys::HA_NAMESPACE,
            &namespace,
            "must name a ZooKeeper node",
        ));
    }
    match class {
        ZK_CLIENT_CLASS => {}
        ETCD_CLIENT_CLASS => return parse_etcd(get, addresses, namespace, lease_ttl),
        other => {
            return Err(ConfigError::invalid(
                keys::HA_CLIENT_CLASS,
                other,
                format!("expected {ZK_CLIENT_CLASS} or {ETCD_CLIENT_CLASS}"),
            ))
        }
    }
    // Every time key is at most MAX_TIME; the session timeout also fits the protocol's 32-bit
    // milliseconds.
    let max_ms = |key: &str| {
        if key == keys::ZK_SESSION_TIMEOUT {
            Duration::from_millis(i32::MAX as u64)
        } else {
            MAX_TIME
        }
    };
    let ms = |key: &str, default: u64| -> Result<Duration, ConfigError> {
        match get(key) {
            None => Ok(Duration::from_millis(default)),
            Some(v) => match v.parse::<u64>() {
                Ok(n) if n > 0 && Duration::from_millis(n) <= max_ms(key) => {
                    Ok(Duration::from_millis(n))
                }
                _ => Err(ConfigError::invalid(
                    key,
                    v,
                    format!(
                        "expected a positive number of milliseconds, at most {}",
                        max_ms(key).as_millis()
                    ),
                )),
            },
        }
    };
    let digest = get(keys::ZK_AUTH_DIGEST).map(str::to_owned);
    if let Some(d) = &digest {
        if !d.contains(':') {
            return Err(ConfigError::invalid(
                keys::ZK_AUTH_DIGEST,
                "<hidden>",
                "expected user:password",
            ));
        }
    }
    let auth = match get(keys::ZK_AUTH_TYPE)
        .map(str::to_ascii_uppercase)
        .as_deref()
    {
        None | Some("NONE") => ZkAuth::None,
        Some("DIGEST") => {
            if digest.is_none() {
                return Err(ConfigError::invalid(
                    keys::ZK_AUTH_DIGEST,
                    "",
                    format!("required when {} is DIGEST", keys::ZK_AUTH_TYPE),
                ));
            }
            ZkAuth::Digest
        }
        Some("KERBEROS") => {
            if !cfg!(feature = "kerberos") {
                return Err(ConfigError::invalid(
                    keys::ZK_AUTH_TYPE,
                    "KERBEROS",
                    "this podsweep build has no Kerberos support; rebuild with the `kerberos` \
                     cargo feature (needs libkrb5 at build and run time)",
                ));
            }
            ZkAuth::Kerberos {
                principal: get(keys::ZK_AUTH_PRINCIPAL)
                    .or_else(|| get(keys::KINIT_PRINCIPAL))
                    .map(str::to_owned),
                keytab: get(keys::ZK_AUTH_KEYTAB)
                    .or_else(|| get(keys::KINIT_KEYTAB))
                    .map(str::to_owned),
                server_principal: get(keys::ZK_AUTH_SERVER_PRINCIPAL).map(str::to_owned),
            }
        }
        Some(_) => {
            return Err(ConfigError::invalid(
                keys::ZK_AUTH_TYPE,
                get(keys::ZK_AUTH_TYPE).unwrap_or(""),
                "expected NONE, DIGEST or KERBEROS",
            ))
        }
    };
    let policy = get(keys::ZK_RETRY_POLICY)
        .unwrap_or("EXPONENTIAL_BACKOFF")
        .to_ascii_uppercase();
    if !matches!(
        policy.as_str(),
        "ONE_TIME"
            | "N_TIME"
            | "EXPONENTIAL_BACKOFF"
            | "BOUNDED_EXPONENTIAL_BACKOFF"
            | "UNTIL_ELAPSED"
    ) {
        return Err(ConfigError::invalid(
            keys::ZK_RETRY_POLICY,
            &policy,
            "expected ONE_TIME, N_TIME, EXPONENTIAL_BACKOFF, BOUNDED_EXPONENTIAL_BACKOFF or UNTIL_ELAPSED",
        ));
    }
    let max_retries = match get(keys::ZK_MAX_RETRIES) {
        None => 3,
        Some(v) => v.parse::<u32>().map_err(|_| {
            ConfigError::invalid(keys::ZK_MAX_RETRIES, v, "expected a whole number")
        })?,
    };
    Ok(HaSettings::ZooKeeper(ZkSettings {
        addresses: addresses.to_owned(),
        namespace,
        session_timeout: ms(keys::ZK_SESSION_TIMEOUT, 60_000)?,
        connection_timeout: ms(keys::ZK_CONNECTION_TIMEOUT, 15_000)?,
        auth,
        digest,
        retry: ZkRetry {
            policy,
            max_retries,
            base_wait: ms(keys::ZK_BASE_RETRY_WAIT, 1000)?,
            max_wait: ms(keys::ZK_MAX_RETRY_WAIT, 30_000)?,
        },
    }))
}

fn parse_etcd<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    addresses: &str,
    namespace: String,
    lease_ttl: Duration,
) -> Result<HaSettings, ConfigError> {
    let tls = if parse_bool(keys::ETCD_SSL_ENABLED, get(keys::ETCD_SSL_ENABLED), false)? {
        let need = |key: &str| {
            get(key).map(str::to_owned).ok_or_else(|| {
                ConfigError::invalid(
                    key,
                    "",
                    format!("required when {} is true", keys::ETCD_SSL_ENABLED),
                )
            })
        };
        Some(EtcdTls {
            ca: need(keys::ETCD_SSL_CA)?,
            cert: need(keys::ETCD_SSL_CERT)?,
            key: need(keys::ETCD_SSL_KEY)?,
        })
    } else {
        None
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoints = Vec::new();
    for raw in addresses
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        let url = if raw.contains("://") {
            raw.to_owned()
        } else {
            format!("{scheme}://{raw}")
        };
        let uri: http::Uri = url.parse().map_err(|_| {
            ConfigError::invalid(
                keys::HA_ADDRESSES,
                addresses,
                "expected etcd endpoints host:port[,host:port]",
            )
        })?;
        if uri.host().is_none() || !matches!(uri.scheme_str(), Some("http") | Some("https")) {
            return Err(ConfigError::invalid(
                keys::HA_ADDRESSES,
                addresses,
                "expected etcd endpoints host:port or http(s)://host:port",
            ));
        }
        endpoints.push(url);
    }
    Ok(HaSettings::Etcd(EtcdSettings {
        endpoints,
        namespace,
        lease_ttl,
        tls,
    }))
}

/// The TTL of podsweep's etcd election lease when the key is unset: a keep-alive every 10 s
/// (6 a minute, a Kubernetes node's lease heartbeat), and a crashed leader's scopes taken over
/// within 30 s (sooner than on ZooKeeper, where Kyuubi's session timeout is 60 s).
pub const DEFAULT_ELECTION_LEASE: Duration = Duration::from_secs(30);

/// `ha.etcd.leaseTimeout` in whole seconds (etcd grants leases in seconds), rounded up.
fn election_lease_ttl<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Result<Duration, ConfigError> {
    let Some(v) = get(keys::ETCD_ELECTION_LEASE) else {
        return Ok(DEFAULT_ELECTION_LEASE);
    };
    let d = super::positive_time(keys::ETCD_ELECTION_LEASE, v)?;
    Ok(Duration::from_secs(
        d.as_secs() + u64::from(d.subsec_nanos() > 0),
    ))
}
