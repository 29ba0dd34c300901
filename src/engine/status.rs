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
    pub fn status_json(&self, scope: &Scope) -> String {
        let key = self.known_key(scope);
        let scopes = self.scopes.read().unwrap_or_else(|p| p.into_inner());
        let mut v = self.status_value(&scopes, key.as_ref().unwrap_or(scope));
        if v["known"] == false {
            v["scope"] = scope.to_string().into();
            v["context"] = scope.context.clone().into();
            v["namespace"] = scope.namespace.clone().into();
            drop(scopes);
            if let Some(refused) = self.refused_value(scope) {
                return refused.to_string();
            }
        }
        v.to_string()
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
            .collect()
    }

    /// A JSON array with the snapshot of every scope task this server runs, sorted by scope.
    pub fn status_all_json(&self) -> String {
        let scopes = self.scopes.read().unwrap_or_else(|p| p.into_inner());
        let mut keys: Vec<&Scope> = scopes.keys().collect();
        keys.sort_by(|a, b| scopes[*a].scope.cmp(&scopes[*b].scope));
        serde_json::Value::Array(
            keys.into_iter()
                .map(|s| self.status_value(&scopes, s))
                .collect(),
        )
        .to_string()
    }

    /// The status of the task of `key`: its scope (the first that named the key), and the key
    /// itself as `election_scope`.
    fn status_value(&self, scopes: &HashMap<Scope, ScopeHandle>, key: &Scope) -> serde_json::Value {
        let scope = scopes.get(key).map_or(key, |h| &h.scope);
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
        v["election_scope"] = key.to_string().into();
        v["backend"] = self.backend.name().into();
        v["server_id"] = self.identity.current().into();
        v["server_id_confirmed"] = self.identity.is_settled().into();
        v["log_records_dropped"] = crate::logging::dropped().into();
        v
    }
}
