//! Tests of the Kyuubi key parsing.

use super::*;

use crate::config::conf_of as conf;

#[test]
fn defaults_are_kyuubis() {
    let s = Settings::from_map(HashMap::new()).unwrap();
    assert_eq!(s.kind, CleanupKind::None);
    assert_eq!(s.retain, Duration::from_secs(300));
    assert_eq!(s.ha, HaSettings::Local);
    assert!(s.context_allow.is_empty() && s.namespace_allow.is_empty());
}

#[test]
fn errors_name_the_key() {
    let e = Settings::from_map(conf(&[(keys::CLEANUP_KIND, "SOME")])).unwrap_err();
    assert_eq!(e.key(), keys::CLEANUP_KIND);
    assert!(e.to_string().contains(keys::CLEANUP_KIND));
    let e = Settings::from_map(conf(&[(keys::RETAIN_PERIOD, "soon")])).unwrap_err();
    assert_eq!(e.key(), keys::RETAIN_PERIOD);
    let e = Settings::from_map(conf(&[(keys::RETAIN_PERIOD, "0")])).unwrap_err();
    assert_eq!(e.key(), keys::RETAIN_PERIOD);
    let e = Settings::from_map(conf(&[
        (keys::HA_ADDRESSES, "127.0.0.1:2181"),
        (keys::ZK_SESSION_TIMEOUT, "ten"),
    ]))
    .unwrap_err();
    assert_eq!(e.key(), keys::ZK_SESSION_TIMEOUT);
    let e = Settings::from_map(conf(&[
        (keys::HA_ADDRESSES, "127.0.0.1:2181"),
        (keys::HA_CLIENT_CLASS, "com.example.Nope"),
    ]))
    .unwrap_err();
    assert_eq!(e.key(), keys::HA_CLIENT_CLASS);
}

#[test]
fn kinds_and_lists() {
    let s = Settings::from_map(conf(&[
        (keys::CLEANUP_KIND, "completed"),
        (keys::CONTEXT_ALLOW_LIST, "a, b,,"),
        (keys::NAMESPACE_ALLOW_LIST, "spark"),
    ]))
    .unwrap();
    assert_eq!(s.kind, CleanupKind::Completed);
    assert_eq!(s.context_allow.len(), 2);
    assert!(s.namespace_allow.contains("spark"));
}

#[test]
fn etcd_from_kyuubis_client_class() {
    let base = [
        (keys::HA_ADDRESSES, "127.0.0.1:2379, http://10.0.0.2:2379"),
        (keys::HA_CLIENT_CLASS, ETCD_CLIENT_CLASS),
        (keys::ETCD_ELECTION_LEASE, "PT12.2S"),
        // Kyuubi's registrations' lease: not podsweep's.
        (keys::ETCD_LEASE_TIMEOUT, "PT5S"),
    ];
    let s = Settings::from_map(conf(&base)).unwrap();
    let HaSettings::Etcd(e) = s.ha else {
        panic!("expected etcd")
    };
    assert_eq!(
        e.endpoints,
        ["http://127.0.0.1:2379", "http://10.0.0.2:2379"]
    );
    assert_eq!(
        e.lease_ttl,
        Duration::from_secs(13),
        "whole seconds, rounded up"
    );
    assert_eq!(e.root(), "/kyuubi-podsweep/elections");
    assert!(e.tls.is_none());
    let mut tls = base.to_vec();
    tls.push((keys::ETCD_SSL_ENABLED, "true"));
    tls.push((keys::ETCD_SSL_CA, "/ca.pem"));
    tls.push((keys::ETCD_SSL_CERT, "/c.pem"));
    let e = Settings::from_map(conf(&tls)).unwrap_err();
    assert_eq!(e.key(), keys::ETCD_SSL_KEY, "the missing key is named");
    tls.push((keys::ETCD_SSL_KEY, "/k.pem"));
    let HaSettings::Etcd(e) = Settings::from_map(conf(&tls)).unwrap().ha else {
        panic!("expected etcd")
    };
    assert_eq!(e.endpoints[0], "https://127.0.0.1:2379");
    assert_eq!(e.tls.unwrap().key, "/k.pem");
    let e = Settings::from_map(conf(&[
        (keys::HA_ADDRESSES, "127.0.0.1:2379"),
        (keys::HA_CLIENT_CLASS, ETCD_CLIENT_CLASS),
        (keys::ETCD_ELECTION_LEASE, "PT0S"),
    ]))
    .unwrap_err();
    assert_eq!(e.key(), keys::ETCD_ELECTION_LEASE);
    // Unset: 30 s, whatever Kyuubi's own lease timeout says.
    let HaSettings::Etcd(e) = Settings::from_map(conf(&[
        (keys::HA_ADDRESSES, "127.0.0.1:2379"),
        (keys::HA_CLIENT_CLASS, ETCD_CLIENT_CLASS),
        (keys::ETCD_LEASE_TIMEOUT, "PT10S"),
    ]))
    .unwrap()
    .ha
    else {
        panic!("expected etcd")
    };
    assert_eq!(e.lease_ttl, Duration::from_secs(30));
    let e = Settings::from_map(conf(&[(keys::ETCD_ELECTION_LEASE, "soon")])).unwrap_err();
    assert_eq!(e.key(), keys::ETCD_ELECTION_LEASE, "checked on any backend");
}

#[test]
fn tuning_keys() {
    let s = Settings::from_map(HashMap::new()).unwrap();
    assert_eq!(s.tuning, Tuning::default());
    let s = Settings::from_map(conf(&[
        (keys::RATE_QPS, "2.5"),
        (keys::RATE_BURST, "5"),
        (keys::MAX_IN_FLIGHT, "3"),
        (keys::DRY_RUN, "true"),
        (keys::FORBIDDEN_RETRY, "PT5M"),
    ]))
    .unwrap();
    assert_eq!(s.tuning.qps, 2.5);
    assert_eq!(s.tuning.burst, 5);
    assert_eq!(s.tuning.max_in_flight, 3);
    assert!(s.tuning.dry_run);
    assert_eq!(s.tuning.forbidden_retry, Duration::from_secs(300));
    for (key, bad) in [
        (keys::RATE_QPS, "0"),
        (keys::RATE_QPS, "fast"),
        (keys::RATE_BURST, "-1"),
        (keys::MAX_IN_FLIGHT, "0"),
        (keys::DRY_RUN, "yes"),
        (keys::RETRY_MAX_WAIT, "PT0S"),
    ] {
        let e = Settings::from_map(conf(&[(key, bad)])).unwrap_err();
        assert_eq!(e.key(), key, "{bad}");
    }
}

#[test]
fn an_embedded_zookeeper_falls_back_to_local() {
    let s = Settings::from_map(conf(&[
        (keys::HA_ADDRESSES, "127.0.0.1:2181"),
        (keys::HA_EMBEDDED, "true"),
    ]))
    .unwrap();
    assert_eq!(s.ha, HaSettings::Local);
    let e = Settings::from_map(conf(&[
        (keys::HA_ADDRESSES, "127.0.0.1:2181"),
        (keys::HA_EMBEDDED, "maybe"),
    ]))
    .unwrap_err();
    assert_eq!(e.key(), keys::HA_EMBEDDED);
}

#[test]
fn self_watch_needs_an_ha_backend_unless_the_server_runs_alone() {
    let check = |pairs: &[(&str, &str)]| {
        let s = Settings::from_map(conf(pairs)).unwrap();
        (require_backend(&s), s.single_server)
    };
    let watch = (keys::WATCH_ENABLED, "true");
    let zk = (keys::HA_ADDRESSES, "zk-1:2181");
    let embedded = (keys::HA_EMBEDDED, "true");
    for refused in [
        vec![watch],
        vec![watch, (keys::HA_SINGLE_SERVER, "false")],
        vec![watch, zk, embedded],
        vec![watch, (keys::HA_ZK_QUORUM, "zk-1:2181"), embedded],
    ] {
        let (r, _) = check(&refused);
        let e = r.expect_err("refused");
        assert_eq!(e.key(), keys::HA_SINGLE_SERVER, "{refused:?}");
        let text = e.to_string();
        for named in [keys::HA_ADDRESSES, keys::HA_ZK_QUORUM, "--single-server"] {
            assert!(text.contains(named), "{named}: {text}");
        }
        let embedded_named = text.contains("embedded ZooKeeper");
        assert_eq!(embedded_named, refused.contains(&embedded), "{text}");
    }
    for fine in [
        vec![watch, (keys::HA_SINGLE_SERVER, "TRUE")],
        vec![watch, zk],
        vec![watch, (keys::HA_ZK_QUORUM, "zk-1:2181")],
        vec![watch, zk, embedded, (keys::HA_SINGLE_SERVER, "true")],
        // Fed by Kyuubi's informers: the local fallback, as Kyuubi does.
        vec![],
        vec![zk, embedded],
    ] {
        assert!(check(&fine).0.is_ok(), "{fine:?}");
    }
    assert!(check(&[(keys::HA_SINGLE_SERVER, "true")]).1);
    let e = Settings::from_map(conf(&[(keys::HA_SINGLE_SERVER, "alone")])).unwrap_err();
    assert_eq!(e.key(), keys::HA_SINGLE_SERVER);
}

#[test]
fn zookeeper_auth_and_retry_keys() {
    let zk = |pairs: &[(&str, &str)]| {
        let mut all = vec![(keys::HA_ADDRESSES, "127.0.0.1:2181")];
        all.extend_from_slice(pairs);
        Settings::from_map(conf(&all))
    };
    let HaSettings::ZooKeeper(z) = zk(&[]).unwrap().ha else {
        panic!()
    };
    assert_eq!(z.auth, ZkAuth::None);
    assert!(!z.auth.secure_acls());
    assert_eq!(z.retry, ZkRetry::default());
    let HaSettings::ZooKeeper(z) = zk(&[
        (keys::ZK_AUTH_TYPE, "DIGEST"),
        (keys::ZK_AUTH_DIGEST, "kyuubi:secret"),
        (keys::ZK_RETRY_POLICY, "bounded_exponential_backoff"),
        (keys::ZK_BASE_RETRY_WAIT, "200"),
    ])
    .unwrap()
    .ha
    else {
        panic!()
    };
    assert_eq!(z.auth, ZkAuth::Digest);
    assert!(z.auth.secure_acls());
    assert_eq!(z.digest.as_deref(), Some("kyuubi:secret"));
    assert_eq!(z.retry.policy, "BOUNDED_EXPONENTIAL_BACKOFF");
    assert_eq!(z.retry.base_wait, Duration::from_millis(200));
    let e = zk(&[(keys::ZK_AUTH_TYPE, "DIGEST")]).unwrap_err();
    assert_eq!(e.key(), keys::ZK_AUTH_DIGEST);
    let e = zk(&[(keys::ZK_AUTH_DIGEST, "no-colon")]).unwrap_err();
    assert_eq!(e.key(), keys::ZK_AUTH_DIGEST);
    assert!(
        !e.to_string().contains("no-colon"),
        "the secret is not echoed"
    );
    let e = zk(&[(keys::ZK_AUTH_TYPE, "LDAP")]).unwrap_err();
    assert_eq!(e.key(), keys::ZK_AUTH_TYPE);
    let e = zk(&[(keys::ZK_RETRY_POLICY, "FOREVER")]).unwrap_err();
    assert_eq!(e.key(), keys::ZK_RETRY_POLICY);
    #[cfg(not(feature = "kerberos"))]
    {
        let e = zk(&[(keys::ZK_AUTH_TYPE, "KERBEROS")]).unwrap_err();
        assert_eq!(e.key(), keys::ZK_AUTH_TYPE);
        assert!(e.to_string().contains("kerberos"), "{e}");
    }
}

#[test]
fn zookeeper_from_ha_keys_with_deprecated_fallbacks() {
    let s = Settings::from_map(conf(&[
        (keys::HA_ZK_QUORUM, "127.0.0.1:2181"),
        (keys::HA_ZK_NAMESPACE, "kyuubi_prod"),
        (keys::ZK_SESSION_TIMEOUT, "8000"),
    ]))
    .unwrap();
    let HaSettings::ZooKeeper(zk) = s.ha else {
        panic!("expected zookeeper")
    };
    assert_eq!(zk.addresses, "127.0.0.1:2181");
    assert_eq!(zk.root(), "/kyuubi_prod-podsweep/latches");
    assert_eq!(zk.session_timeout, Duration::from_millis(8000));
    assert_eq!(zk.connection_timeout, Duration::from_millis(15000));
}

/// Issue 10, item 6: values whose timers or token-bucket waits would overflow are refused at
/// start, naming their key, instead of panicking a scope task later.
#[test]
fn unbounded_durations_and_rates_are_refused_naming_the_key() {
    for (key, bad) in [
        (keys::RETAIN_PERIOD, "P800D"),
        (keys::RETAIN_PERIOD, "99999999999999"),
        (keys::RETRY_MAX_WAIT, "P1000D"),
        (keys::FORBIDDEN_RETRY, "P366D"),
        (keys::HEALTH_ALERT_AFTER, "P400D"),
        (keys::STEP_DOWN_AFTER, "P400D"),
        (keys::STEP_DOWN_AFTER, "PT0S"),
        (keys::IDLE_RELEASE, "P366D"),
        (keys::RATE_QPS, "1e-300"),
        (keys::RATE_QPS, "0.0001"),
        (keys::RATE_QPS, "1e300"),
        (keys::RATE_QPS, "NaN"),
    ] {
        let e = Settings::from_map(conf(&[(key, bad)])).unwrap_err();
        assert_eq!(e.key(), key, "{bad}");
        assert!(e.to_string().starts_with(key), "{e}");
    }
    let s = Settings::from_map(conf(&[
        (keys::RETAIN_PERIOD, "P365D"),
        (keys::RATE_QPS, "0.001"),
    ]))
    .unwrap();
    assert_eq!(s.retain, MAX_TIME);
    let d = Settings::from_map(HashMap::new()).unwrap();
    assert_eq!(d.step_down_after, Duration::from_secs(120));
    assert_eq!(d.idle_release, Duration::from_secs(1800));
}

#[test]
fn an_error_never_shows_a_secret_value() {
    // A value the default pattern marks secret (it mentions a token).
    let e = Settings::from_map(conf(&[(keys::RATE_QPS, "token-5f2a9c")])).unwrap_err();
    assert_eq!(e.key(), keys::RATE_QPS);
    assert!(!e.to_string().contains("token-5f2a9c"), "{e}");
    assert!(e.to_string().contains(redact::REPLACEMENT), "{e}");
    // A key the configured pattern marks secret.
    let e = Settings::from_map(conf(&[
        (keys::REDACTION_REGEX, "ha\\.addresses"),
        (keys::HA_ADDRESSES, "http://zk-7d1e:2379,::nonsense::"),
        (keys::HA_CLIENT_CLASS, ETCD_CLIENT_CLASS),
    ]))
    .unwrap_err();
    assert_eq!(e.key(), keys::HA_ADDRESSES);
    assert!(!e.to_string().contains("zk-7d1e"), "{e}");
    // Other values are shown, to help whoever fixes them.
    let e = Settings::from_map(conf(&[(keys::RATE_QPS, "ten")])).unwrap_err();
    assert!(e.to_string().contains("\"ten\""), "{e}");
}

/// Renamed keys: the earlier name is read when the new one is absent, the new one wins when both
/// are set, and an error names the key that holds the bad value.
#[test]
fn renamed_keys_read_their_deprecated_names() {
    let cases = [
        (keys::FAILURES_SUMMARY, keys::FORBIDDEN_SUMMARY_OLD),
        (keys::HEALTH_ALERT_AFTER, keys::LEADERLESS_ALERT_OLD),
    ];
    let read = |s: &Settings, key: &str| {
        if key == keys::FAILURES_SUMMARY {
            s.tuning.failures_summary
        } else {
            s.leaderless_alert
        }
    };
    for (key, old) in cases {
        assert_eq!(super::table::alternatives(key), &[old]);
        assert!(
            super::table::find(old).is_none(),
            "{old} is not a row of its own"
        );
        let s = Settings::from_map(conf(&[(old, "PT7S")])).unwrap();
        assert_eq!(read(&s, key), Duration::from_secs(7), "{old} alone");
        let s = Settings::from_map(conf(&[(old, "PT7S"), (key, "PT9S")])).unwrap();
        assert_eq!(
            read(&s, key),
            Duration::from_secs(9),
            "{key} wins over {old}"
        );
        let e = Settings::from_map(conf(&[(old, "PT0S")])).unwrap_err();
        assert_eq!(e.key(), old);
        let e = Settings::from_map(conf(&[(old, "PT7S"), (key, "ten")])).unwrap_err();
        assert_eq!(e.key(), key);
        assert_eq!(
            super::deprecated_in_use(&conf(&[(old, "PT7S")])),
            vec![(old, key)]
        );
        assert!(super::deprecated_in_use(&conf(&[(old, "PT7S"), (key, "PT9S")])).is_empty());
    }
    // Every renamed key is a row of the table; the generated object reads its earlier names.
    let scala = super::table::scala();
    for (key, olds) in super::table::ALTERNATIVES {
        assert!(super::table::find(key).is_some(), "{key}");
        for old in *olds {
            let one_line = format!(".withAlternative(\"{old}\")");
            let two_lines = format!(".withAlternative(\n        \"{old}\")");
            assert!(
                scala.contains(&one_line) || scala.contains(&two_lines),
                "{old}"
            );
        }
    }
}
