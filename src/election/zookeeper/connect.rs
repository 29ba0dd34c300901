//! How a campaign talks to ZooKeeper: the connector of each session (digest auth, Kerberos), the
//! ACLs of the nodes it creates, and the backoff between sessions.

use tracing::info;
use zookeeper_client::{Acl, Acls, Client, Connector, Permission};

use crate::config::{ZkAuth, ZkSettings};

/// The ZooKeeper release whose protocol podsweep speaks: 3.4, the oldest Kyuubi uses.
pub(super) const ZK_PROTOCOL: (u32, u32, u32) = (3, 4, 0);

/// Kyuubi's secure ACL: anyone may read, the creator's authenticated identities may do anything.
static SECURE_ACLS: [Acl; 2] = [
    Acl::new_const(Permission::READ, "world", "anyone"),
    Acl::new_const(Permission::ALL, "auth", ""),
];

/// The ACLs of every node podsweep creates (latch nodes and their parents), as Kyuubi's ACL
/// provider chooses them: world-read plus creator-all unless the auth type is `NONE`, otherwise
/// open.
pub(super) fn node_acls(auth: &ZkAuth) -> Acls<'static> {
    if auth.secure_acls() {
        Acls::new(&SECURE_ACLS)
    } else {
        Acls::anyone_all()
    }
}

/// A connector for one new session: timeouts, the `digest` auth whenever a digest is configured
/// (whatever the auth type, as Kyuubi does), and SASL/GSSAPI for `KERBEROS`.
///
/// Auth packets are sent again on every connection of the session, so reconnects keep them.
///
/// The session speaks the protocol of ZooKeeper 3.4 ([`ZK_PROTOCOL`]), which every server since
/// understands: Kyuubi's own ZooKeeper is 3.4 (its default build relocates ZooKeeper 3.4.14, its
/// `EmbeddedZookeeper` among it), and a 3.4 server answers a 3.5 `create2` with "unimplemented
/// operation", so no latch could be created there. podsweep needs nothing newer: its latch nodes
/// are plain ephemeral sequential nodes and it never reads the `Stat` of a create.
pub(super) fn connector(s: &ZkSettings) -> Connector {
    let (major, minor, patch) = ZK_PROTOCOL;
    let mut connector = Client::connector()
        .with_server_version(major, minor, patch)
        .with_session_timeout(s.session_timeout)
        .with_connection_timeout(s.connection_timeout)
        .with_fail_eagerly();
    if let Some(digest) = &s.digest {
        connector = connector.with_auth("digest", digest.as_bytes());
    }
    #[cfg(feature = "kerberos")]
    if let ZkAuth::Kerberos {
        server_principal, ..
    } = &s.auth
    {
        connector = connector.with_sasl(gssapi(server_principal.as_deref()));
    }
    connector
}

#[cfg(feature = "kerberos")]
fn gssapi(server_principal: Option<&str>) -> zookeeper_client::GssapiSaslOptions {
    let mut options = zookeeper_client::SaslOptions::gssapi();
    if let Some(p) = server_principal {
        let (service, host) = split_server_principal(p);
        options = options.with_username(service);
        if let Some(host) = host {
            options = options.with_hostname(host);
        }
    }
    options
}

/// Splits a ZooKeeper server principal `service[/host][@REALM]` into the GSSAPI service name and
/// host; the realm is left to the Kerberos configuration. An empty service means `zookeeper`.
#[cfg_attr(not(feature = "kerberos"), allow(dead_code))]
pub(super) fn split_server_principal(principal: &str) -> (String, Option<String>) {
    let name = principal.split('@').next().unwrap_or("");
    let (service, host) = match name.split_once('/') {
        Some((service, host)) => (service, Some(host).filter(|h| !h.is_empty())),
        None => (name, None),
    };
    let service = if service.is_empty() {
        "zookeeper"
    } else {
        service
    };
    (service.to_owned(), host.map(str::to_owned))
}

/// Logs, once per session, the settings that podsweep accepts but applies differently from
/// Kyuubi's Curator client.
pub(super) fn log_settings(identity: &str, s: &ZkSettings) {
    let r = &s.retry;
    info!(
        %identity,
        policy = %r.policy,
        max_retries = r.max_retries,
        base_wait_ms = r.base_wait.as_millis() as u64,
        max_wait_ms = r.max_wait.as_millis() as u64,
        "ZooKeeper retry policy {} with {} retries is accepted, but podsweep reconnects forever: \
         capped exponential backoff from the base wait up to the max wait",
        r.policy,
        r.max_retries
    );
    if let ZkAuth::Kerberos {
        principal,
        keytab,
        server_principal,
    } = &s.auth
    {
        info!(
            %identity,
            principal = principal.as_deref().unwrap_or("<unset>"),
            keytab = keytab.as_deref().unwrap_or("<unset>"),
            server_principal = server_principal.as_deref().unwrap_or("zookeeper/<host>"),
            "ZooKeeper SASL/GSSAPI: the client uses the process's Kerberos credential cache \
             (kinit, e.g. Kyuubi's kinit service, or KRB5CCNAME; MIT krb5 can also use \
             KRB5_CLIENT_KTNAME); it cannot log in from the configured principal and keytab"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acls_follow_the_auth_type() {
        let open = node_acls(&ZkAuth::None);
        assert_eq!(&*open, &*Acls::anyone_all());
        for auth in [
            ZkAuth::Digest,
            ZkAuth::Kerberos {
                principal: None,
                keytab: None,
                server_principal: None,
            },
        ] {
            let acls = node_acls(&auth);
            let entries: Vec<(&str, &str, Permission)> = acls
                .iter()
                .map(|a| (a.scheme(), a.id(), a.permission()))
                .collect();
            assert_eq!(
                entries,
                [
                    ("world", "anyone", Permission::READ),
                    ("auth", "", Permission::ALL)
                ]
            );
        }
    }

    #[test]
    fn server_principal_splits_into_service_and_host() {
        let split = |p| split_server_principal(p);
        assert_eq!(
            split("zookeeper/zk1.example.com@EXAMPLE.COM"),
            ("zookeeper".to_owned(), Some("zk1.example.com".to_owned()))
        );
        assert_eq!(split("zk@EXAMPLE.COM"), ("zk".to_owned(), None));
        assert_eq!(split("zookeeper"), ("zookeeper".to_owned(), None));
        assert_eq!(
            split("/zk1@R"),
            ("zookeeper".to_owned(), Some("zk1".to_owned()))
        );
        assert_eq!(split("zookeeper/@R"), ("zookeeper".to_owned(), None));
    }
}
