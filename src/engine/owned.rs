//! Kyuubi's owner-scoped informers (each server's informer sees only the pods it submitted) with
//! the leaders' scope-wide watch (`scopeWatch`): which scopes campaign, and for how long.
//!
//! # Guarantees
//! * With the scope watch on and a cleanup kind other than NONE, every scope the configuration
//!   names (Kyuubi's `kyuubi.kubernetes.client.initialize.list`, else `kyuubi.kubernetes.context`
//!   / `kyuubi.kubernetes.namespace`) and the allow lists accept campaigns from the engine's
//!   start, whether or not this server's informer has seen a pod of it: a server whose informer
//!   sees none of the pods left (it restarted, or never ran a job there) still stands in when the
//!   leader goes, and its scope watch lists them.
//! * No scope task is released when idle (`scope.releaseAfterIdle` does not apply): a released
//!   scope comes back only on its informer's next event, which another server's pods never give.
//!   So a scope that has once campaigned on a server campaigns there for the engine's life, and a
//!   scope with terminated pods has a leader, watching, within the failover time while any of
//!   those servers runs.
//!
//! # Caveats
//! * A scope that no configuration names campaigns only on the servers whose informers have seen
//!   one of its pods. If all of them go, its pods wait for the next job on another server: name
//!   every namespace jobs run in in `kyuubi.kubernetes.client.initialize.list` (Kyuubi advises it
//!   for several servers anyway).
//! * Each scope costs every server one election (a latch node or election key on the server's
//!   one session) and a task for good; the leader's scope watch holds one watch request per
//!   scope, renewed every 290 s ([`crate::watch`]). Measured on the real API server (2026-12-06,
//!   `docs/performance.md`): per idle scope added, 0.21 pod requests a minute, no ZooKeeper
//!   packet, at most 86 KiB per scope task.

use std::sync::PoisonError;

use tracing::debug;

use super::Engine;
use crate::model::CleanupKind;

impl Engine {
    /// Starts the task (and campaign) of every configured scope, with the scope watch on in
    /// informer mode.
    pub(super) fn start_configured_scopes(&self) {
        if self.scope_watches.is_none()
            || self.watches.is_some()
            || self.settings.kind == CleanupKind::None
        {
            return;
        }
        let mut scopes = self.scopes.write().unwrap_or_else(PoisonError::into_inner);
        for scope in self.settings.configured_scopes() {
            // Refused or unusable names are refused on their informer's first event, as ever.
            if let Some(ns) = &scope.namespace {
                if let Err(e) = crate::names::check_namespace(ns) {
                    debug!("Configured scope {scope} does not campaign: {e}");
                    continue;
                }
            }
            if let Err(e) = self.check_allowed(&scope) {
                debug!("Configured scope {scope} does not campaign: {e}");
                continue;
            }
            let key = self.key_of(&scope);
            if scopes.contains_key(&key) {
                continue;
            }
            let h = self.start_scope(scope, key.clone(), None);
            scopes.insert(key, h);
        }
    }
}
