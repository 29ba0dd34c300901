//! Which election a scope's task runs under: the cluster it cleans, whatever URL reaches it, and
//! the election layouts of podsweep's releases.
//!
//! # Layouts
//! * **Layout 1** (podsweep 0.1.0 and earlier): a scope is elected under the URL of its API
//!   server and its namespace, `c=<URL>.n=<namespace>`.
//! * **Layout 2** (0.2.0): under the cluster's identity and the namespace,
//!   `c=cluster:<digest>.n=<namespace>`, where the digest is the first 128 bits of the SHA-256
//!   of the cluster's root CA certificate, as the `kube-root-ca.crt` ConfigMap of the namespace
//!   publishes it (`ha.electionKey=CLUSTER`, the default). Every URL of one cluster (an IP
//!   address, a DNS name, a load balancer, in-cluster or through a kubeconfig) gives one key,
//!   and the ConfigMap deleted and published again (a GitOps prune, `kubectl delete cm --all`,
//!   the namespace re-created) gives the same one: its UID changes, its certificate does not.
//!   With `ha.electionKey=URL` a server keeps layout 1's key; the whole fleet must then say so.
//! * **Layout 2 beside layout 1** (`ha.legacyElection=true`, the default): a server of layout 2
//!   first wins layout 1's election of its URL and only then campaigns under layout 2's key, and
//!   it may act only while it holds both. A server of 0.1.0 running beside it (a rolling upgrade,
//!   a rollback) is in that first election, so the two never lead at once; servers of layout 2
//!   that reach the cluster by different URLs meet in the second.
//!
//! # Guarantees
//! * A scope whose cluster identity cannot be read (403: the RBAC rule is missing for this
//!   server's account; 404: the ConfigMap is not published; 401) does not campaign at all: it
//!   is held, paused `cluster_identity` and unhealthy with the reason, and the identity is read
//!   again with backoff (at most a minute apart), so an RBAC rule granted later is picked up
//!   without a restart. It never elects under another key than its peers would.
//! * The identity is read again every [`REREAD`] while the task lives; a changed identity (the
//!   cluster's CA rotated) ends the campaign under the old key and starts one under the new key,
//!   with a WARN. An identity that cannot be read again keeps the key already read.
//! * The local backend elects nothing and needs no identity.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, StreamExt};
use tracing::{error, info, warn};

use crate::backoff::Backoff;
use crate::config::{ElectionKeyKind, ElectionLayout};
use crate::kube_client::{self, IdentityError};
use crate::metrics::{ElectionShown, ScopeMetrics, UNHEALTHY_NO_IDENTITY};
use crate::pause::PauseKind;
use crate::scope::Scope;

/// The prefix of a layout 2 election key's cluster part.
pub const CLUSTER_PREFIX: &str = "cluster:";

/// This release's election layout (see the module docs).
pub const LAYOUT: u32 = 2;

/// How often a scope task reads its cluster's identity again.
pub const REREAD: Duration = Duration::from_secs(600);

/// Reads the identity of the cluster a scope's client reaches
/// ([`kube_client::cluster_identity`]).
pub type IdentitySource =
    Arc<dyn Fn(Scope) -> BoxFuture<'static, Result<String, IdentityError>> + Send + Sync>;

/// The cluster identities of a Kubernetes configuration: one `GET` per read.
pub fn kube_identities(raw: HashMap<String, String>) -> IdentitySource {
    let raw = Arc::new(raw);
    Arc::new(move |scope: Scope| {
        let conf = kube_client::scope_conf(&raw, &scope);
        Box::pin(async move { kube_client::cluster_identity(&conf).await })
    })
}

/// The keys one scope's election runs under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElectionKeys {
    /// The election the scope leads in.
    pub key: Scope,
    /// Layout 1's election, won first, when this server joins it (`ha.legacyElection`).
    pub legacy: Option<Scope>,
}

impl ElectionKeys {
    /// One election under `key`, nothing before it.
    pub fn single(key: Scope) -> Self {
        ElectionKeys { key, legacy: None }
    }

    /// `cluster` (layout 2's key) or `url` (layout 1's).
    pub fn kind(&self) -> &'static str {
        let cluster = self
            .key
            .context
            .as_deref()
            .is_some_and(|c| c.starts_with(CLUSTER_PREFIX));
        if cluster {
            "cluster"
        } else {
            "url"
        }
    }

    fn shown(&self) -> ElectionShown {
        ElectionShown {
            key: self.key.to_string(),
            kind: self.kind(),
            legacy: self.legacy.as_ref().map(ToString::to_string),
        }
    }
}

/// The keys of a scope's election as they become known: the first once its identity is read,
/// another whenever it changes. Never ends.
pub type KeyStream = BoxStream<'static, ElectionKeys>;

/// One election under `key` for the task's whole life.
pub fn fixed_keys(key: Scope) -> KeyStream {
    let keys = ElectionKeys::single(key);
    stream::once(async move { keys })
        .chain(stream::pending())
        .boxed()
}

/// What [`election_keys`] needs of the engine.
pub struct KeyInputs {
    /// `None` (or the local backend): the URL key, nothing to read.
    pub identities: Option<IdentitySource>,
    pub layout: ElectionLayout,
    /// The scope, for logs and the read.
    pub scope: Scope,
    /// Its URL key (layout 1's key: [`kube_client::resolve`]).
    pub url_key: Scope,
    pub metrics: Arc<ScopeMetrics>,
    /// How often the identity is read again ([`REREAD`]; shorter in tests).
    pub reread: Duration,
}

/// The keys of one scope task's election (see the module docs for the rules).
pub fn election_keys(inputs: KeyInputs) -> KeyStream {
    let KeyInputs {
        identities,
        layout,
        scope,
        url_key,
        metrics,
        reread,
    } = inputs;
    let identities = match (identities, layout.key) {
        (Some(ids), ElectionKeyKind::Cluster) => ids,
        _ => {
            metrics.set_election(ElectionKeys::single(url_key.clone()).shown());
            return fixed_keys(url_key);
        }
    };
    let reader = Reader {
        identities,
        legacy: layout.legacy,
        scope,
        url_key,
        metrics,
        reread,
        last: None,
        warned: None,
    };
    stream::unfold(reader, |mut r| async move {
        let keys = r.next().await;
        Some((keys, r))
    })
    .boxed()
}

struct Reader {
    identities: IdentitySource,
    legacy: bool,
    scope: Scope,
    url_key: Scope,
    metrics: Arc<ScopeMetrics>,
    reread: Duration,
    /// The keys handed out last.
    last: Option<ElectionKeys>,
    /// The cause last logged about a read that failed, so each is logged once.
    warned: Option<String>,
}

impl Reader {
    fn keys(&self, identity: &str) -> ElectionKeys {
        let ns = self.url_key.namespace.as_deref();
        ElectionKeys {
            key: Scope::new(Some(&format!("{CLUSTER_PREFIX}{identity}")), ns),
            legacy: self.legacy.then(|| self.url_key.clone()),
        }
    }

    /// Reads until the keys are known (the first time) or have changed (later).
    async fn next(&mut self) -> ElectionKeys {
        let mut backoff = Backoff::exact(Duration::from_secs(1), Duration::from_secs(60));
        if self.last.is_some() {
            tokio::time::sleep(self.reread).await;
        }
        loop {
            let read = (self.identities)(self.scope.clone()).await;
            let last = self.last.clone();
            let wait = match (read, &last) {
                (Ok(identity), last) => {
                    self.settled();
                    let keys = self.keys(&identity);
                    match last {
                        Some(old) if *old == keys => self.reread,
                        Some(old) => {
                            // runbook: The cluster's identity changed
                            warn!(
                                scope = %self.scope,
                                "Scope {}: the cluster's identity changed ({} -> {}): the CA \
                                 certificate in {} is another; the scope is elected again under \
                                 the new key",
                                self.scope, old.key, keys.key, kube_client::ROOT_CA_CONFIGMAP
                            );
                            return self.hand_out(keys);
                        }
                        None => {
                            info!(
                                scope = %self.scope,
                                "Scope {} cleans namespace {} of the cluster whatever URL reaches \
                                 it: it is elected as {}{}",
                                self.scope,
                                self.url_key.namespace.as_deref().unwrap_or("default"),
                                keys.key,
                                keys.legacy.as_ref().map_or(String::new(), |l| format!(
                                    ", after podsweep 0.1's election {l}"
                                ))
                            );
                            return self.hand_out(keys);
                        }
                    }
                }
                (Err(e), Some(_)) => {
                    // The key stays; the read is only a check for a change.
                    if self.first_time(&e.to_string()) {
                        warn!(
                            scope = %self.scope,
                            "Scope {}: cannot read the cluster's identity again ({e}); the \
                             scope stays elected under the key it read before",
                            self.scope
                        );
                    }
                    self.reread
                }
                (Err(IdentityError::Unreadable(why)), None) => {
                    let wait = backoff.next_delay();
                    self.hold(
                        &format!(
                            "this server may not read which cluster the scope is in ({why}); the \
                             scope does not campaign, so that it never elects apart from its \
                             peers. Grant get on configmaps named {} in the namespace \
                             (docs/kyuubi-integration.md, RBAC), or set {}=URL on every server",
                            kube_client::ROOT_CA_CONFIGMAP,
                            crate::config::keys::HA_ELECTION_KEY
                        ),
                        wait,
                    );
                    if self.first_time(&why) {
                        // runbook: A scope is held: its cluster identity cannot be read
                        error!(
                            scope = %self.scope,
                            "Scope {}: cannot read which cluster it is in ({why}); it is held \
                             (no campaign, no DELETE) until it can: grant get on configmaps \
                             named {} in the namespace, or set {}=URL on every server",
                            self.scope,
                            kube_client::ROOT_CA_CONFIGMAP,
                            crate::config::keys::HA_ELECTION_KEY
                        );
                    }
                    wait
                }
                (Err(IdentityError::Transient(why)), None) => {
                    let wait = backoff.next_delay();
                    // This server cannot reach the API server, so it could not delete either: it
                    // stays out of the election, and says so at once.
                    self.hold(
                        &format!(
                            "the API server has not told which cluster the scope is in: {why}; \
                             the scope does not campaign until it does"
                        ),
                        wait,
                    );
                    wait
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    fn hand_out(&mut self, keys: ElectionKeys) -> ElectionKeys {
        self.metrics.set_election(keys.shown());
        self.last = Some(keys.clone());
        keys
    }

    /// Whether `why` was not the cause logged last (and it is now): each cause is logged once.
    fn first_time(&mut self, why: &str) -> bool {
        if self.warned.as_deref() == Some(why) {
            return false;
        }
        self.warned = Some(why.to_owned());
        true
    }

    fn settled(&mut self) {
        self.warned = None;
        self.metrics.pauses.close(PauseKind::ClusterIdentity);
        self.metrics.clear_unhealthy(UNHEALTHY_NO_IDENTITY);
    }

    fn hold(&self, why: &str, wait: Duration) {
        // runbook: pause reason `cluster_identity`
        self.metrics.set_unhealthy(UNHEALTHY_NO_IDENTITY, why);
        self.metrics.pauses.open(
            PauseKind::ClusterIdentity,
            Some(tokio::time::Instant::now() + wait),
            &format!("{why}; it is read again at the end"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_say_their_kind() {
        let url = Scope::new(Some("https://10.0.0.1:6443"), Some("spark"));
        assert_eq!(ElectionKeys::single(url.clone()).kind(), "url");
        let cluster = ElectionKeys {
            key: Scope::new(Some("cluster:ab"), Some("spark")),
            legacy: Some(url),
        };
        assert_eq!(cluster.kind(), "cluster");
        let shown = cluster.shown();
        assert_eq!(shown.key, "cluster:ab:spark");
        assert_eq!(shown.legacy.as_deref(), Some("https://10.0.0.1:6443:spark"));
    }
}
