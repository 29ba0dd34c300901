//! Self-watch mode: podsweep watches the driver pods itself instead of being fed by Kyuubi's
//! informers (the drop-in provider for stock Kyuubi, the standalone daemon).

use super::{keys, parse_bool, parse_kind, ConfigError};
use crate::kyuubi_state::{StateConfig, StateSource, DEFAULT_STATE_CONTAINER};
use crate::model::CleanupKind;
use crate::scope::Scope;
use crate::watch::WatchOptions;

/// Everything self-watch mode needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSettings {
    /// The kind this mode applies (`watch.kind`, else the stock key's value).
    pub kind: CleanupKind,
    /// The key the kind came from, for logs.
    pub kind_key: &'static str,
    /// The scopes to campaign for, in configuration order, before the allow lists.
    pub scopes: Vec<Scope>,
    /// Kyuubi's state source and state container.
    pub state: StateConfig,
}

/// Reads the watch keys; `None` unless `watch.enabled` is true.
pub(super) fn parse_watch<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
    stock_kind: CleanupKind,
) -> Result<Option<WatchSettings>, ConfigError> {
    if !parse_bool(keys::WATCH_ENABLED, get(keys::WATCH_ENABLED), false)? {
        return Ok(None);
    }
    let (kind, kind_key) = match get(keys::WATCH_KIND) {
        Some(v) => (parse_kind(keys::WATCH_KIND, v)?, keys::WATCH_KIND),
        None => (stock_kind, keys::CLEANUP_KIND),
    };
    let state = parse_state(get)?;
    let scopes = named_scopes(get);
    for s in &scopes {
        if let Some(ns) = &s.namespace {
            let key = match get(keys::INIT_LIST) {
                Some(_) => keys::INIT_LIST,
                None => keys::KUBE_NAMESPACE,
            };
            crate::names::check_namespace(ns).map_err(|m| ConfigError::invalid(key, ns, m))?;
        }
    }
    Ok(Some(WatchSettings {
        kind,
        kind_key,
        scopes,
        state,
    }))
}

/// The scopes a configuration names, in its order: Kyuubi's
/// `kyuubi.kubernetes.client.initialize.list`, else `kyuubi.kubernetes.context` /
/// `kyuubi.kubernetes.namespace` (the clients Kyuubi creates at its start).
pub(super) fn named_scopes<'a>(get: &impl Fn(&str) -> Option<&'a str>) -> Vec<Scope> {
    match get(keys::INIT_LIST) {
        Some(list) => init_list_scopes(list),
        None => vec![Scope::new(
            get(keys::KUBE_CONTEXT),
            get(keys::KUBE_NAMESPACE),
        )],
    }
}

/// What the leaders' pod watches ask for (read by every mode: the self-watch, and the leaders'
/// scope-wide watch beside owner-scoped informers, which streams but takes no field selector).
pub(super) fn parse_watch_options<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<WatchOptions, ConfigError> {
    let d = WatchOptions::default();
    Ok(WatchOptions {
        phase_selector: parse_bool(
            keys::WATCH_PHASE_SELECTOR,
            get(keys::WATCH_PHASE_SELECTOR),
            d.phase_selector,
        )?,
        streaming_list: parse_bool(
            keys::WATCH_STREAMING_LIST,
            get(keys::WATCH_STREAMING_LIST),
            d.streaming_list,
        )?,
    })
}

/// Kyuubi's state source and state container (read by every mode: the leaders' scope-wide
/// watch beside owner-scoped informers maps pods too).
pub(super) fn parse_state<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<StateConfig, ConfigError> {
    let source = match get(keys::STATE_SOURCE) {
        None => StateSource::Pod,
        Some(v) if v.eq_ignore_ascii_case("POD") => StateSource::Pod,
        Some(v) if v.eq_ignore_ascii_case("CONTAINER") => StateSource::Container,
        Some(v) => {
            return Err(ConfigError::invalid(
                keys::STATE_SOURCE,
                v,
                "expected POD or CONTAINER",
            ))
        }
    };
    let container = get(keys::STATE_CONTAINER)
        .unwrap_or(DEFAULT_STATE_CONTAINER)
        .to_owned();
    Ok(StateConfig { source, container })
}

/// Kyuubi's parsing of `kyuubi.kubernetes.client.initialize.list`: entries split at commas,
/// trimmed, empty ones dropped; each split at colons as Java's `String.split` does (trailing
/// empty parts dropped): `ctx:ns` is both, `ctx` is the context alone, an empty part is absent,
/// anything with more parts is `(None, None)`. Duplicates are dropped, the order kept.
pub fn init_list_scopes(list: &str) -> Vec<Scope> {
    let mut out: Vec<Scope> = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let mut parts: Vec<&str> = entry.split(':').collect();
        while parts.len() > 1 && parts.last().is_some_and(|p| p.is_empty()) {
            parts.pop();
        }
        if parts.len() == 1 && parts[0].is_empty() {
            // Java: "::".split(":") is an empty array, which Kyuubi maps to (None, None).
            parts.clear();
        }
        let scope = match parts.as_slice() {
            [ctx, ns] => Scope::new(Some(ctx), Some(ns)),
            [ctx] => Scope::new(Some(ctx), None),
            _ => Scope::new(None, None),
        };
        if !out.contains(&scope) {
            out.push(scope);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(c: Option<&str>, n: Option<&str>) -> Scope {
        Scope::new(c, n)
    }

    #[test]
    fn init_list_parses_as_kyuubi() {
        let table: &[(&str, Vec<Scope>)] = &[
            ("ctx:ns", vec![s(Some("ctx"), Some("ns"))]),
            ("ctx", vec![s(Some("ctx"), None)]),
            (":ns", vec![s(None, Some("ns"))]),
            ("ctx:", vec![s(Some("ctx"), None)]),
            ("ctx::", vec![s(Some("ctx"), None)]),
            (":", vec![s(None, None)]),
            ("::", vec![s(None, None)]),
            ("a:b:c", vec![s(None, None)]),
            ("a::b", vec![s(None, None)]),
            (
                " a:x , ,b:y,a:x ",
                vec![s(Some("a"), Some("x")), s(Some("b"), Some("y"))],
            ),
            ("", vec![]),
        ];
        for (input, want) in table {
            assert_eq!(&init_list_scopes(input), want, "input {input:?}");
        }
    }
}
