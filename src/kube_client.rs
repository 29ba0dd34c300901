//! Kyuubi's Kubernetes client keys -> a kube-rs client for one scope.
//!
//! Mirrors Kyuubi's `getKubernetesConf(context, namespace)` overlay: for scope `(c, ns)`, keys
//! `kyuubi.kubernetes.c.<rest>` and then `kyuubi.kubernetes.c.ns.<rest>` override
//! `kyuubi.kubernetes.<rest>`; then `kyuubi.kubernetes.context = c` and
//! `kyuubi.kubernetes.namespace = ns`. The namespace-level overlay exists only with a context.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use thiserror::Error;

use crate::config::keys;
use crate::scope::Scope;

pub const MASTER: &str = "kyuubi.kubernetes.master.address";
pub const OAUTH_TOKEN: &str = "kyuubi.kubernetes.authenticate.oauthToken";
pub const OAUTH_TOKEN_FILE: &str = "kyuubi.kubernetes.authenticate.oauthTokenFile";
pub const CA_CERT_FILE: &str = "kyuubi.kubernetes.authenticate.caCertFile";
pub const CLIENT_CERT_FILE: &str = "kyuubi.kubernetes.authenticate.clientCertFile";
pub const CLIENT_KEY_FILE: &str = "kyuubi.kubernetes.authenticate.clientKeyFile";
pub const TRUST_CERTS: &str = "kyuubi.kubernetes.trust.certificates";

const PREFIX: &str = "kyuubi.kubernetes";
const SA_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

#[derive(Debug, Error)]
pub enum KubeClientError {
    #[error("{key}: {message}")]
    Invalid { key: String, message: String },
    #[error("cannot load the Kubernetes configuration (kubeconfig or in-cluster): {0}")]
    Infer(String),
    #[error("cannot build the Kubernetes client: {0}")]
    Build(String),
}

fn invalid(key: &str, message: impl Into<String>) -> KubeClientError {
    KubeClientError::Invalid {
        key: key.to_owned(),
        message: message.into(),
    }
}

/// Kyuubi's per-context / per-namespace overlay of the server configuration.
pub fn scope_conf(raw: &HashMap<String, String>, scope: &Scope) -> HashMap<String, String> {
    let mut conf = raw.clone();
    if let Some(ctx) = &scope.context {
        let mut rekey = |prefix: String| {
            let mut found: Vec<(String, String)> = raw
                .iter()
                .filter_map(|(k, v)| {
                    k.strip_prefix(&prefix)
                        .map(|rest| (format!("{PREFIX}.{rest}"), v.clone()))
                })
                .collect();
            found.sort();
            conf.extend(found);
        };
        rekey(format!("{PREFIX}.{ctx}."));
        if let Some(ns) = &scope.namespace {
            rekey(format!("{PREFIX}.{ctx}.{ns}."));
        }
        conf.insert(keys::KUBE_CONTEXT.to_owned(), ctx.clone());
    }
    if let Some(ns) = &scope.namespace {
        conf.insert(keys::KUBE_NAMESPACE.to_owned(), ns.clone());
    }
    conf
}

fn get<'a>(conf: &'a HashMap<String, String>, key: &str) -> Option<&'a str> {
    conf.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// The namespace a scope's pods live in.
pub fn namespace(conf: &HashMap<String, String>) -> String {
    get(conf, keys::KUBE_NAMESPACE)
        .unwrap_or("default")
        .to_owned()
}

/// The cluster and namespace a scope names: the election key of its cleanup, so that two scopes
/// over the same pods (`(None, ns)` and `(ctx, ns)` when `ctx` is the default context; two
/// contexts on one API server) elect one leader between them.
///
/// The cluster is the API server URL its client talks to, normalised (scheme, host and port in
/// lower case, the default port written out, no trailing `/`): `master.address` after the
/// overlay; else the server of the kubeconfig context it names (`kyuubi.kubernetes.context`,
/// else the kubeconfig's current context); else, without a kubeconfig, the in-cluster address
/// (`KUBERNETES_SERVICE_HOST` / `_PORT`). The namespace is the one its pods live in
/// ([`namespace`]). Reads the kubeconfig file, never the network.
///
/// # Errors
/// A cluster that cannot be told (a context the kubeconfig lacks, no kubeconfig and not in a
/// pod, a URL that does not parse), described.
pub fn resolve(raw: &HashMap<String, String>, scope: &Scope) -> Result<Scope, String> {
    resolve_with(raw, &read_kubeconfig(), scope)
}

/// [`resolve`] with the kubeconfig already read ([`read_kubeconfig`]).
pub fn resolve_with(
    raw: &HashMap<String, String>,
    kubeconfig: &Result<kube::config::Kubeconfig, String>,
    scope: &Scope,
) -> Result<Scope, String> {
    let conf = scope_conf(raw, scope);
    let cluster = match get(&conf, MASTER) {
        Some(m) => normalise_url(m)?,
        None => match kubeconfig {
            Ok(kc) => {
                let name = get(&conf, keys::KUBE_CONTEXT)
                    .map(str::to_owned)
                    .or(kc.current_context.clone())
                    .ok_or("the kubeconfig names no current context")?;
                let ctx = kc
                    .contexts
                    .iter()
                    .find(|c| c.name == name)
                    .and_then(|c| c.context.as_ref())
                    .ok_or_else(|| format!("the kubeconfig has no context {name:?}"))?;
                let server = kc
                    .clusters
                    .iter()
                    .find(|c| c.name == ctx.cluster)
                    .and_then(|c| c.cluster.as_ref())
                    .and_then(|c| c.server.as_deref())
                    .ok_or_else(|| {
                        format!("the kubeconfig has no server for cluster {:?}", ctx.cluster)
                    })?;
                normalise_url(server)?
            }
            Err(e) => {
                let host = std::env::var("KUBERNETES_SERVICE_HOST").ok();
                let port = std::env::var("KUBERNETES_SERVICE_PORT").ok();
                match (host, port) {
                    (Some(h), Some(p)) if get(&conf, keys::KUBE_CONTEXT).is_none() => {
                        let h = if h.contains(':') { format!("[{h}]") } else { h };
                        normalise_url(&format!("https://{h}:{p}"))?
                    }
                    _ => return Err(format!("no kubeconfig ({e}) and not in a pod")),
                }
            }
        },
    };
    Ok(Scope::new(Some(&cluster), Some(&namespace(&conf))))
}

/// The kubeconfig [`resolve`] reads: read once per engine (off the informer threads), at its
/// start.
pub fn read_kubeconfig() -> Result<kube::config::Kubeconfig, String> {
    kube::config::Kubeconfig::read().map_err(|e| e.to_string())
}

/// The ConfigMap Kubernetes publishes in every namespace (the cluster's root CA certificate; by
/// the root CA publisher of kube-controller-manager, in every cluster since 1.21).
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// Why [`cluster_identity`] has no answer.
#[derive(Debug, Error)]
pub enum IdentityError {
    /// The API server answered that it will not tell (401: the token is not accepted; 403: the
    /// RBAC rule is missing; 404: the ConfigMap is not published; another 4xx but 408 and 429),
    /// or the ConfigMap holds no certificate: asking again changes nothing until an operator
    /// acts.
    #[error("{0}")]
    Unreadable(String),
    /// No answer yet (the client cannot be built, the server cannot be reached, 5xx, 408, 429):
    /// ask again later.
    #[error("{0}")]
    Transient(String),
}

/// The identity of the cluster a scope's client reaches, the same whichever URL reaches it (an
/// IP address or a DNS name, a load balancer or the server itself, in-cluster or through a
/// kubeconfig), and the same after the ConfigMap it is read from is deleted and published again:
/// the first 128 bits of the SHA-256 of the cluster's root CA certificate (`ca.crt` of the
/// namespace's [`ROOT_CA_CONFIGMAP`], with surrounding white space trimmed), as 32 hex digits.
/// One `GET`; RBAC: `get` on `configmaps` named `kube-root-ca.crt` in the namespace.
pub async fn cluster_identity(conf: &HashMap<String, String>) -> Result<String, IdentityError> {
    let ns = namespace(conf);
    let client = build_client(conf)
        .await
        .map_err(|e| IdentityError::Transient(e.to_string()))?;
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> = kube::Api::namespaced(client, &ns);
    let what = format!("GET configmaps/{ROOT_CA_CONFIGMAP} in namespace {ns}");
    match api.get(ROOT_CA_CONFIGMAP).await {
        Ok(cm) => {
            let ca = cm
                .data
                .as_ref()
                .and_then(|d| d.get("ca.crt"))
                .map(|c| c.trim())
                .filter(|c| !c.is_empty())
                .ok_or_else(|| IdentityError::Unreadable(format!("{what}: it holds no ca.crt")))?;
            Ok(ca_digest(ca))
        }
        // A refusal that asking again will not change; a timeout (408) or a throttle (429) will.
        Err(kube::Error::Api(status))
            if (400..500).contains(&status.code) && status.code != 408 && status.code != 429 =>
        {
            Err(IdentityError::Unreadable(format!(
                "{what}: HTTP {} {}",
                status.code, status.message
            )))
        }
        Err(e) => Err(IdentityError::Transient(format!("{what}: {e}"))),
    }
}

/// The first 128 bits of the SHA-256 of `ca`, as 32 lower-case hex digits.
pub fn ca_digest(ca: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, ca.as_bytes());
    digest.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `scheme://host:port[/path]` in lower case with the port written out and no trailing `/`.
fn normalise_url(url: &str) -> Result<String, String> {
    let uri: http::Uri = url
        .trim()
        .parse()
        .map_err(|e| format!("API server URL {url:?}: {e}"))?;
    let scheme = uri
        .scheme_str()
        .ok_or_else(|| format!("API server URL {url:?} has no scheme"))?
        .to_ascii_lowercase();
    let host = uri
        .host()
        .ok_or_else(|| format!("API server URL {url:?} has no host"))?
        .to_ascii_lowercase();
    let port = uri
        .port_u16()
        .unwrap_or(if scheme == "http" { 80 } else { 443 });
    let path = uri.path().trim_end_matches('/');
    Ok(format!("{scheme}://{host}:{port}{path}"))
}

/// Checks the values that can be checked without I/O; each error names its key.
pub fn validate(conf: &HashMap<String, String>) -> Result<(), KubeClientError> {
    if let Some(m) = get(conf, MASTER) {
        let uri: http::Uri = m
            .parse()
            .map_err(|e| invalid(MASTER, format!("not a URL ({e}): {m:?}")))?;
        if !matches!(uri.scheme_str(), Some("http") | Some("https")) || uri.host().is_none() {
            return Err(invalid(
                MASTER,
                format!("expected http(s)://host[:port], got {m:?}"),
            ));
        }
    }
    if let Some(v) = get(conf, TRUST_CERTS) {
        if !v.eq_ignore_ascii_case("true") && !v.eq_ignore_ascii_case("false") {
            return Err(invalid(
                TRUST_CERTS,
                format!("expected true or false, got {v:?}"),
            ));
        }
    }
    if let Some(ns) = get(conf, keys::KUBE_NAMESPACE) {
        crate::names::check_namespace(ns).map_err(|m| invalid(keys::KUBE_NAMESPACE, m))?;
    }
    if get(conf, OAUTH_TOKEN).is_some() && get(conf, OAUTH_TOKEN_FILE).is_some() {
        return Err(invalid(
            OAUTH_TOKEN,
            format!("{OAUTH_TOKEN} and {OAUTH_TOKEN_FILE} are mutually exclusive"),
        ));
    }
    Ok(())
}

/// Builds the kube-rs configuration for an overlaid scope configuration.
///
/// With `master.address` set, the client talks to it with the configured credentials (and, inside
/// a pod, the service-account token and CA as fallbacks). Otherwise the kubeconfig (for
/// `kyuubi.kubernetes.context` if set) or the in-cluster configuration is used, with the
/// configured credentials on top.
pub async fn build_config(conf: &HashMap<String, String>) -> Result<kube::Config, KubeClientError> {
    validate(conf)?;
    let mut cfg = if let Some(master) = get(conf, MASTER) {
        let uri: http::Uri = master
            .parse()
            .map_err(|e| invalid(MASTER, format!("{e}")))?;
        let mut cfg = kube::Config::new(uri);
        let has_token = get(conf, OAUTH_TOKEN).is_some() || get(conf, OAUTH_TOKEN_FILE).is_some();
        let sa_token = Path::new(SA_DIR).join("token");
        if !has_token && get(conf, CLIENT_CERT_FILE).is_none() && sa_token.exists() {
            cfg.auth_info.token_file = Some(sa_token.to_string_lossy().into_owned());
        }
        let sa_ca = Path::new(SA_DIR).join("ca.crt");
        if get(conf, CA_CERT_FILE).is_none() && sa_ca.exists() {
            cfg.root_cert_file = Some(sa_ca);
        }
        cfg
    } else if let Some(ctx) = get(conf, keys::KUBE_CONTEXT) {
        let opts = kube::config::KubeConfigOptions {
            context: Some(ctx.to_owned()),
            ..Default::default()
        };
        kube::Config::from_kubeconfig(&opts).await.map_err(|e| {
            invalid(
                keys::KUBE_CONTEXT,
                format!("kubeconfig context {ctx:?}: {e}"),
            )
        })?
    } else {
        kube::Config::infer()
            .await
            .map_err(|e| KubeClientError::Infer(e.to_string()))?
    };
    cfg.default_namespace = namespace(conf);
    if let Some(v) = get(conf, TRUST_CERTS) {
        cfg.accept_invalid_certs = v.eq_ignore_ascii_case("true");
    }
    if let Some(t) = get(conf, OAUTH_TOKEN) {
        cfg.auth_info.token = Some(t.to_owned().into());
        cfg.auth_info.token_file = None;
    }
    if let Some(f) = get(conf, OAUTH_TOKEN_FILE) {
        cfg.auth_info.token_file = Some(f.to_owned());
        cfg.auth_info.token = None;
    }
    if let Some(f) = get(conf, CA_CERT_FILE) {
        let pem = std::fs::read(f).map_err(|e| invalid(CA_CERT_FILE, format!("{f}: {e}")))?;
        cfg.root_cert = Some(pem_certificates(&pem).map_err(|m| invalid(CA_CERT_FILE, m))?);
        cfg.root_cert_file = Some(f.into());
    }
    if let Some(f) = get(conf, CLIENT_CERT_FILE) {
        cfg.auth_info.client_certificate = Some(f.to_owned());
    }
    if let Some(f) = get(conf, CLIENT_KEY_FILE) {
        cfg.auth_info.client_key = Some(f.to_owned());
    }
    // The classifier must see 429/503/504 as they happen; podsweep retries on its own terms.
    cfg.default_retry = false;
    cfg.connect_timeout = Some(Duration::from_secs(10));
    cfg.read_timeout = Some(Duration::from_secs(30));
    // The API server's audit log (and a test's API server) tells podsweep's requests apart.
    cfg.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    Ok(cfg)
}

/// The `User-Agent` of every request podsweep sends to the Kubernetes API.
pub const USER_AGENT: &str = concat!("podsweep/", env!("CARGO_PKG_VERSION"));

/// A kube-rs client for one scope.
pub async fn build_client(conf: &HashMap<String, String>) -> Result<kube::Client, KubeClientError> {
    let cfg = build_config(conf).await?;
    kube::Client::try_from(cfg).map_err(|e| KubeClientError::Build(e.to_string()))
}

/// DER blobs of the CERTIFICATE blocks in a PEM bundle (the `pem` crate parses it).
fn pem_certificates(bundle: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let blocks = pem::parse_many(bundle).map_err(|e| format!("not a PEM bundle: {e}"))?;
    let certs: Vec<Vec<u8>> = blocks
        .into_iter()
        .filter(|b| b.tag() == "CERTIFICATE")
        .map(pem::Pem::into_contents)
        .collect();
    if certs.is_empty() {
        return Err("no CERTIFICATE block found".into());
    }
    Ok(certs)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::conf_of as conf;

    #[test]
    fn overlay_follows_kyuubi() {
        let raw = conf(&[
            (MASTER, "https://default:6443"),
            ("kyuubi.kubernetes.28.master.address", "https://ctx28:6443"),
            (
                "kyuubi.kubernetes.28.ns1.authenticate.oauthTokenFile",
                "/tok/ns1",
            ),
            (
                "kyuubi.kubernetes.28.authenticate.oauthTokenFile",
                "/tok/ctx",
            ),
            (keys::KUBE_NAMESPACE, "default-ns"),
        ]);
        let c = scope_conf(&raw, &Scope::new(Some("28"), Some("ns1")));
        assert_eq!(c[MASTER], "https://ctx28:6443");
        assert_eq!(c[OAUTH_TOKEN_FILE], "/tok/ns1", "namespace level wins");
        assert_eq!(c[keys::KUBE_CONTEXT], "28");
        assert_eq!(namespace(&c), "ns1");
        let c = scope_conf(&raw, &Scope::new(Some("28"), None));
        assert_eq!(c[OAUTH_TOKEN_FILE], "/tok/ctx");
        assert_eq!(namespace(&c), "default-ns");
        // No context: no overlay at all, only the namespace is set.
        let c = scope_conf(&raw, &Scope::new(None, Some("ns1")));
        assert_eq!(c[MASTER], "https://default:6443");
        assert!(!c.contains_key(OAUTH_TOKEN_FILE));
        assert_eq!(namespace(&c), "ns1");
    }

    #[test]
    fn a_scope_resolves_to_the_cluster_and_namespace_it_names() {
        let raw = conf(&[
            (MASTER, "HTTPS://API.Example:443/"),
            (keys::KUBE_CONTEXT, "prod"),
            (
                "kyuubi.kubernetes.other.master.address",
                "http://other:8080",
            ),
        ]);
        let one = resolve(&raw, &Scope::new(None, Some("spark"))).unwrap();
        assert_eq!(
            one,
            Scope::new(Some("https://api.example:443"), Some("spark"))
        );
        // The default context, named: the same cluster and namespace.
        assert_eq!(
            resolve(&raw, &Scope::new(Some("prod"), Some("spark"))).unwrap(),
            one
        );
        // No namespace: the default one.
        assert_eq!(
            resolve(&raw, &Scope::new(None, None)).unwrap(),
            Scope::new(Some("https://api.example:443"), Some("default"))
        );
        // Another context with its own API server: another cluster.
        assert_eq!(
            resolve(&raw, &Scope::new(Some("other"), Some("spark"))).unwrap(),
            Scope::new(Some("http://other:8080"), Some("spark"))
        );
        assert!(normalise_url("not a url").is_err());
    }

    #[test]
    fn validation_names_keys() {
        let e = validate(&conf(&[(MASTER, "not a url")])).unwrap_err();
        assert!(e.to_string().starts_with(MASTER), "{e}");
        let e = validate(&conf(&[(MASTER, "ftp://x")])).unwrap_err();
        assert!(e.to_string().starts_with(MASTER), "{e}");
        let e = validate(&conf(&[(TRUST_CERTS, "yes")])).unwrap_err();
        assert!(e.to_string().starts_with(TRUST_CERTS), "{e}");
        let e = validate(&conf(&[(OAUTH_TOKEN, "t"), (OAUTH_TOKEN_FILE, "/f")])).unwrap_err();
        assert!(e.to_string().contains(OAUTH_TOKEN_FILE), "{e}");
        let e = validate(&conf(&[(keys::KUBE_NAMESPACE, "x/../kube-system")])).unwrap_err();
        assert!(e.to_string().starts_with(keys::KUBE_NAMESPACE), "{e}");
        validate(&conf(&[(MASTER, "http://127.0.0.1:8080")])).unwrap();
    }

    #[tokio::test]
    async fn master_address_and_token_make_a_config() {
        let c = conf(&[
            (MASTER, "http://127.0.0.1:1"),
            (OAUTH_TOKEN, "server-a"),
            (TRUST_CERTS, "true"),
            (keys::KUBE_NAMESPACE, "spark"),
        ]);
        let cfg = build_config(&c).await.unwrap();
        assert_eq!(cfg.cluster_url.to_string(), "http://127.0.0.1:1/");
        assert_eq!(cfg.default_namespace, "spark");
        assert!(cfg.accept_invalid_certs);
        assert!(cfg.auth_info.token.is_some());
        assert!(!cfg.default_retry);
        assert!(cfg
            .headers
            .iter()
            .any(|(k, v)| k == http::header::USER_AGENT && v.to_str().ok() == Some(USER_AGENT)));
        assert!(USER_AGENT.starts_with("podsweep/"));
    }

    #[test]
    fn pem_decoding() {
        let pem = b"-----BEGIN CERTIFICATE-----\naGVs\nbG8=\n-----END CERTIFICATE-----\n";
        assert_eq!(pem_certificates(pem).unwrap(), vec![b"hello".to_vec()]);
        assert!(pem_certificates(b"nothing").is_err());
        let key = b"-----BEGIN PRIVATE KEY-----\naGk=\n-----END PRIVATE KEY-----\n";
        assert!(
            pem_certificates(key).is_err(),
            "only CERTIFICATE blocks count"
        );
        let bad = b"-----BEGIN CERTIFICATE-----\n@@@@\n-----END CERTIFICATE-----\n";
        assert!(pem_certificates(bad).is_err());
    }
}
