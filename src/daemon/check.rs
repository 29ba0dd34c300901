//! The daemon's configuration checks, shared by the daemon itself and `podsweep check`: whatever
//! the daemon would refuse at start, `check` refuses the same way, without starting anything.
//!
//! # Guarantees
//! * [`daemon_settings`] is the one path from `--config` and `--conf` to the daemon's
//!   [`Settings`]: the daemon and `podsweep check` cannot disagree on a file.
//! * Every refusal is one message that starts with the key it is about (or names the file that
//!   cannot be read, or the `--conf` argument that is not `KEY=VALUE`), with secrets redacted.
//! * A scope whose namespace comes from no key at all is refused: the daemon never falls back to
//!   `default` (Kyuubi's chart passes `kyuubi.kubernetes.namespace` on Kyuubi's command line, so
//!   its ConfigMap has none, and a daemon reading it would clean `default`).
//!
//! # Caveats
//! * The checks are offline: nothing reaches the HA backend or the API server, and the files the
//!   keys name (kubeconfig, TLS material, keytabs) are not opened; a daemon that passes `check`
//!   can still fail to connect (its `/healthz` says why).

use std::collections::HashMap;
use std::path::Path;

use super::conf;
use crate::config::{keys, HaSettings, Settings};
use crate::model::CleanupKind;

/// The daemon's settings from its file and overrides (self-watch forced on), or the message of
/// the first refusal.
pub fn daemon_settings(config: &Path, overrides: &[String]) -> Result<Settings, String> {
    let raw = conf::load(config, overrides).map_err(|e| e.to_string())?;
    validate(raw)
}

/// Parses and checks a daemon's configuration (self-watch already forced on).
pub fn validate(raw: HashMap<String, String>) -> Result<Settings, String> {
    let settings = Settings::from_map(raw).map_err(|e| e.to_string())?;
    crate::kube_client::validate(&settings.raw).map_err(|e| e.to_string())?;
    if settings.kind == CleanupKind::None {
        return Err(format!(
            "{}: NONE (or unset, and {} is NONE): the daemon would delete nothing; set it to ALL \
             or COMPLETED",
            keys::WATCH_KIND,
            keys::CLEANUP_KIND
        ));
    }
    check_namespaces(&settings)?;
    crate::config::require_backend(&settings).map_err(|e| e.to_string())?;
    Ok(settings)
}

/// Every scope must name its namespace: through its entry of
/// `kyuubi.kubernetes.client.initialize.list`, or `kyuubi.kubernetes.namespace` (after Kyuubi's
/// per-context overlay).
fn check_namespaces(settings: &Settings) -> Result<(), String> {
    let Some(watch) = &settings.watch else {
        return Ok(());
    };
    for scope in &watch.scopes {
        let conf = crate::kube_client::scope_conf(&settings.raw, scope);
        let named = conf
            .get(keys::KUBE_NAMESPACE)
            .is_some_and(|v| !v.trim().is_empty());
        if named {
            continue;
        }
        return Err(match settings.get(keys::INIT_LIST) {
            Some(list) => format!(
                "{}: the entry {:?} names no namespace and {} is not set: the daemon does not \
                 assume \"default\"; write the entry as context:namespace or set {} (got {list:?})",
                keys::INIT_LIST,
                scope.context.as_deref().unwrap_or(""),
                keys::KUBE_NAMESPACE,
                keys::KUBE_NAMESPACE,
            ),
            None => format!(
                "{}: not set, nor {}: the daemon does not assume \"default\". Kyuubi's own Helm \
                 chart passes the namespace on Kyuubi's command line, not in its ConfigMap: give \
                 it to the daemon (--conf {}=NAMESPACE; podsweep's chart passes the namespaces of \
                 its Roles)",
                keys::KUBE_NAMESPACE,
                keys::INIT_LIST,
                keys::KUBE_NAMESPACE,
            ),
        });
    }
    Ok(())
}

/// What `podsweep check` prints for a configuration the daemon accepts.
pub fn summary(file: &Path, settings: &Settings) -> String {
    let kind_key = settings
        .watch
        .as_ref()
        .map_or(keys::CLEANUP_KIND, |w| w.kind_key);
    let scopes = settings
        .watch
        .as_ref()
        .map(|w| {
            w.scopes
                .iter()
                .map(|s| {
                    let ns = crate::kube_client::namespace(&crate::kube_client::scope_conf(
                        &settings.raw,
                        s,
                    ));
                    format!("{}:{ns}", s.context.as_deref().unwrap_or(""))
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default();
    let ha = match &settings.ha {
        HaSettings::Local => format!(
            "none: this daemon alone ({} = true)",
            keys::HA_SINGLE_SERVER
        ),
        HaSettings::ZooKeeper(z) => {
            format!("zookeeper at {} (namespace {})", z.addresses, z.namespace)
        }
        HaSettings::Etcd(e) => format!(
            "etcd at {} (namespace {})",
            e.endpoints.join(","),
            e.namespace
        ),
    };
    let dry_run = settings.get(keys::DRY_RUN).unwrap_or("false");
    format!(
        "{}: the daemon accepts it\n  cleanup kind   {} ({kind_key})\n  retain period  {}s\n  \
         scopes         {scopes} (context:namespace; an empty context is the default one)\n  \
         HA backend     {ha}\n  dry run        {dry_run}\n",
        file.display(),
        settings.kind.as_str(),
        settings.retain.as_secs(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        let mut m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        m.insert(keys::WATCH_ENABLED.to_owned(), "true".to_owned());
        m.insert(keys::WATCH_KIND.to_owned(), "ALL".to_owned());
        m.entry(keys::HA_ADDRESSES.to_owned())
            .or_insert_with(|| "zk-0:2181".to_owned());
        m
    }

    #[test]
    fn no_ha_backend_is_refused_unless_the_daemon_runs_alone() {
        let mut alone = raw(&[(keys::KUBE_NAMESPACE, "spark")]);
        alone.remove(keys::HA_ADDRESSES);
        let e = validate(alone.clone()).unwrap_err();
        assert!(e.starts_with(keys::HA_SINGLE_SERVER), "{e}");
        alone.insert(keys::HA_SINGLE_SERVER.to_owned(), "true".to_owned());
        let s = validate(alone).unwrap();
        let text = summary(Path::new("k.conf"), &s);
        assert!(
            text.contains("HA backend     none: this daemon alone"),
            "{text}"
        );
    }

    #[test]
    fn a_scope_without_a_namespace_key_is_refused_naming_the_key() {
        let e = validate(raw(&[])).unwrap_err();
        assert!(e.starts_with(keys::KUBE_NAMESPACE), "{e}");
        assert!(e.contains("\"default\""), "{e}");
        let e = validate(raw(&[(keys::INIT_LIST, "prod,:spark")])).unwrap_err();
        assert!(e.starts_with(keys::INIT_LIST), "{e}");
        assert!(e.contains("\"prod\""), "{e}");
    }

    #[test]
    fn a_namespace_from_any_key_is_accepted() {
        for pairs in [
            vec![(keys::KUBE_NAMESPACE, "spark")],
            vec![(keys::KUBE_NAMESPACE, "default")],
            vec![(keys::INIT_LIST, ":a,:b")],
            vec![(keys::INIT_LIST, "prod"), (keys::KUBE_NAMESPACE, "spark")],
            vec![
                (keys::INIT_LIST, "prod"),
                ("kyuubi.kubernetes.prod.namespace", "spark"),
            ],
        ] {
            let s = validate(raw(&pairs)).unwrap_or_else(|e| panic!("{pairs:?}: {e}"));
            assert!(s.watch.is_some());
        }
    }

    #[test]
    fn the_summary_names_kind_scopes_and_backend() {
        let s = validate(raw(&[
            (keys::INIT_LIST, ":a,prod:b"),
            (keys::HA_ADDRESSES, "zk-0:2181"),
        ]))
        .unwrap();
        let text = summary(Path::new("k.conf"), &s);
        assert!(
            text.starts_with("k.conf: the daemon accepts it\n"),
            "{text}"
        );
        assert!(text.contains("scopes         :a, prod:b"), "{text}");
        assert!(
            text.contains("HA backend     zookeeper at zk-0:2181 (namespace kyuubi)"),
            "{text}"
        );
        assert!(text.contains(keys::WATCH_KIND), "{text}");
    }
}
