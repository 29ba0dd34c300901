//! What an engine reports: a scope's leadership and its JSON status (the task's counters and
//! state, its election key, the watch's figures, and the status of a scope the allow lists
//! refused), one scope or all of them.
//!
//! The scopes' lifecycle (resolving, admitting, starting and releasing their tasks) is in the
//! parent module.

use std::collections::HashMap;

use crate::election::Leadership;
use crate::pause::PauseKind;
use crate::scope::Scope;
use crate::sweeper::ScopeHandle;

use super::Engine;

impl Engine {
    /// This server's leadership of a scope, if the scope is known here.
    pub fn leadership(&self, scope: &Scope) -> Option<Leadership> {
        let key = self.known_key(scope)?;
        let scopes = self.scopes.read().unwrap_or_else(|p| p.into_inner());
        scopes.get(&key).map(|h| h.status.borrow().leadership)
    }

    /// A JSON snapshot of a scope's state and counters (those of the task that serves it, with
    /// every scope naming the same cluster and namespace).
    ///
    /// Every text in it (reasons, details, the last failure, which quote answers of the API
    /// server and errors of the HA backend) is scrubbed of the configuration's secrets and of
    /// URL passwords ([`crate::config::redact::scrub`]), as podsweep's log lines are.
    pub fn status_json(&self, scope: &Scope) -> String {
        let key = self.known_key(scope);
        let scopes = self.scopes.read().unwrap_or_else(|p| p.into_inner());
        let mut v = self.status_value(&scopes, scope, key.as_ref().unwrap_or(scope));
        if v["known"] == false {
            v["scope"] = scope.to_string().into();
            v["context"] = scope.context.clone().into();
            v["namespace"] = scope.namespace.clone().into();
            drop(scopes);
            if let Some(refused) = self.refused_value(scope) {
                return scrubbed(refused).to_string();
            }
        }
        scrubbed(v).to_string()
    }

    /// The status of a scope the allow lists refused: unknown, unhealthy, paused for good.
    fn refused_value(&self, scope: &Scope) -> Option<serde_json::Value> {
        let refused = self.refused.read().unwrap_or_else(|p| p.into_inner());
        let (why, since_ms) = refused.get(scope)?;
        let reason = format!("the scope is refused: {why}; its pods are never tracked");
        Some(serde_json::json!({
            "known": false,
            "leadership": "UNKNOWN",
            "scope": scope.to_string(),
            "context": scope.context,
            "namespace": scope.namespace,
            "refused": true,
            "healthy": false,
            "health_reason": reason,
            "health_reasons": [reason],
            "paused": true,
            "pause_reason": PauseKind::Refused.as_str(),
            "paused_until_ms": null,
            "pause_ms": crate::metrics::epoch_ms().saturating_sub(*since_ms),
            "pause_detail": why,
            "pauses": [{
                "reason": PauseKind::Refused.as_str(),
                "detail": why,
                "since_ms": since_ms,
                "until_ms": null,
                "pause_ms": crate::metrics::epoch_ms().saturating_sub(*since_ms),
                "unhealthy": true,
            }],
            "backend": self.backend.name(),
            "server_id": self.server_id(),
        }))
    }

    /// The status of every scope of the configuration the allow lists refused (self-watch
    /// mode; JNI mode's refused scopes are not listed), sorted by scope.
    pub fn refused_configured(&self) -> Vec<serde_json::Value> {
        let Some(w) = &self.settings.watch else {
            return Vec::new();
        };
        let mut scopes: Vec<&Scope> = w.scopes.iter().collect();
        scopes.sort();
        scopes.dedup();
        scopes
            .into_iter()
            .filter_map(|s| self.refused_value(s))
            .map(scrubbed)
            .collect()
    }

    /// A JSON array with the snapshot of every scope this server cleans, sorted by scope: each
    /// of Kyuubi's scopes (`KubernetesInfo`) under its own name, so that a scope is named the
    /// same on every server whichever of its aliases (scopes naming the same cluster and
    /// namespace, served by one task) sent the first event; aliases carry the same figures and
    /// `election_scope`. In self-watch mode, every configured scope's task.
    pub fn status_all_json(&self) -> String {
        let scopes = self.scopes.read().unwrap_or_else(|p| p.into_inner());
        let mut named: Vec<(&Scope, &Scope)> = if self.watches.is_some() {
            scopes.iter().map(|(key, h)| (&h.scope, key)).collect()
        } else {
            self.interned
                .slots
                .iter()
                .map(|(_, slot)| slot)
                .filter(|slot| {
                    slot.admitted.load(std::sync::atomic::Ordering::Acquire)
                        && scopes.contains_key(&slot.key)
                })
                .map(|slot| (&slot.scope, &slot.key))
                .collect()
        };
        named.sort();
        named.dedup();
        serde_json::Value::Array(
            named
                .into_iter()
                .map(|(scope, key)| scrubbed(self.status_value(&scopes, scope, key)))
                .collect(),
        )
        .to_string()
    }

    /// The status of the task of `key` under the name of `scope`, with the key its election runs
    /// under as `election_scope`.
    fn status_value(
        &self,
        scopes: &HashMap<Scope, ScopeHandle>,
        scope: &Scope,
        key: &Scope,
    ) -> serde_json::Value {
        let mut v = match scopes.get(key) {
            None => serde_json::json!({ "known": false, "leadership": "UNKNOWN" }),
            Some(h) => {
                let st = h.status.borrow().clone();
                let mut v = h.metrics.snapshot();
                v["known"] = true.into();
                v["leadership"] = st.leadership.as_str().into();
                v["leadership_reason"] = st.reason.into();
                v["leadership_age_ms"] = (tokio::time::Instant::now()
                    .duration_since(st.since)
                    .as_millis() as u64)
                    .into();
                // Events the task already knew were answered on the caller's thread
                // ([`crate::seen`]): `observed` counts them too, `observed_known` them alone.
                let known = self.answered(key);
                let reached = v["observed"].as_u64().unwrap_or(0);
                v["observed"] = (reached + known).into();
                v["observed_known"] = known.into();
                v
            }
        };
        if let Some(w) = self.watches.as_ref().or(self.scope_watches.as_ref()) {
            w.add_status(key, &mut v);
        } else {
            v["watching"] = false.into();
            v["watch_streams"] = 0.into();
        }
        v["scope"] = scope.to_string().into();
        v["context"] = scope.context.clone().into();
        v["namespace"] = scope.namespace.clone().into();
        let election = scopes.get(key).and_then(|h| h.metrics.election());
        v["election_scope_read"] = election.is_some().into();
        v["election_key_kind"] = election.as_ref().map(|e| e.kind).into();
        v["election_legacy"] = election.as_ref().and_then(|e| e.legacy.clone()).into();
        v["election_layout"] = crate::identity::LAYOUT.into();
        // As numbers, for Kyuubi's gauges: the layout of the election the scope leads in (2: the
        // cluster's key, 1: a URL key) and whether podsweep 0.1's election is won first.
        v["election_key_layout"] = election
            .as_ref()
            .map(|e| if e.kind == "cluster" { 2 } else { 1 })
            .into();
        v["election_legacy_first"] = election
            .as_ref()
            .map(|e| u64::from(e.legacy.is_some()))
            .into();
        v["election_scope"] = election.map_or_else(|| key.to_string(), |e| e.key).into();
        v["backend"] = self.backend.name().into();
        v["server_id"] = self.identity.current().into();
        v["server_id_confirmed"] = self.identity.is_settled().into();
        v["log_records_dropped"] = crate::logging::dropped().into();
        v
    }
}

/// Fields that name things (a scope, a server, a state): shown as they are, whatever a secret
/// value happens to look like them.
const NAMES: [&str; 9] = [
    "scope",
    "context",
    "namespace",
    "election_scope",
    "server_id",
    "backend",
    "leadership",
    "pause_reason",
    "reason",
];

/// `v` with every text (reasons, details, errors) scrubbed of the configuration's secrets and
/// URL passwords; the names ([`NAMES`]) are kept.
fn scrubbed(v: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => match crate::config::redact::scrub(&s) {
            std::borrow::Cow::Borrowed(_) => Value::String(s),
            std::borrow::Cow::Owned(o) => Value::String(o),
        },
        Value::Array(a) => Value::Array(a.into_iter().map(scrubbed).collect()),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let v = if NAMES.contains(&k.as_str()) {
                        v
                    } else {
                        scrubbed(v)
                    };
                    (k, v)
                })
                .collect(),
        ),
        other => other,
    }
}
