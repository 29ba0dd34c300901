//! What podsweep keeps in the HA backend, read and removed from outside the servers: the elections
//! of every scope (`podsweep status`) and, once no server runs any more, all of it
//! (`podsweep uninstall`).
//!
//! Nothing here takes part in an election: it reads (or deletes) the nodes and keys the
//! [`zookeeper`](super::zookeeper) and [`etcd`](super::etcd) backends write, laid out as
//! `docs/kyuubi-integration.md` §8 says:
//!
//! * ZooKeeper: `/<ns>-podsweep/latches/<encoded scope>/_c_<uuid>-latch-<seq>`, data = the server
//!   id; the lowest sequence leads; the leader sets its node's data again (the same id) when it
//!   wins, so the node's modification time says since when it leads.
//! * etcd: `/<ns>-podsweep/elections/<encoded scope>/<lease id>`, value = the server id; the
//!   oldest key (lowest create revision) leads; the leader writes
//!   `/<ns>-podsweep/leaders/<encoded scope>` (on its lease) with its id, its key and since when.
//!
//! # Guarantees
//! * A reading contacts only the HA backend (never Kyuubi, never the Kubernetes API) and
//!   changes nothing.
//! * [`remove`] deletes only what lies under `/<ns>-podsweep/` (the prefix with its slash: a
//!   namespace whose name merely starts the same is left alone).
//!
//! # Caveats
//! * A reading is a snapshot taken node by node: an election that changes meanwhile may show a
//!   candidate that just left. Read again to confirm.
//! * "Since" is the backend server's clock (ZooKeeper's modification time) or the leading
//!   server's clock (etcd). A leader elected by a podsweep older than this reading shows no
//!   "since" on etcd, and on ZooKeeper the time it joined the election.

use serde_json::{json, Value};

use crate::config::HaSettings;
use crate::scope::Scope;

use super::{etcd, zookeeper};

/// One candidate of one scope's election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The server id it campaigns with (the Kyuubi server's `host:port`, or the daemon's).
    pub server: String,
    /// Its latch node (ZooKeeper) or key (etcd).
    pub node: String,
    /// When it joined the election (ZooKeeper: the node's creation time, epoch ms); etcd keeps
    /// no time.
    pub joined_ms: Option<i64>,
}

/// One scope's election.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Election {
    /// The scope the election's name decodes to; `None` for a name podsweep did not write.
    pub scope: Option<Scope>,
    /// The election's directory (ZooKeeper) or key prefix (etcd).
    pub path: String,
    /// In order: the first one leads.
    pub candidates: Vec<Candidate>,
    /// Since when the leader leads (epoch ms), when the backend says it.
    pub leader_since_ms: Option<i64>,
}

impl Election {
    pub fn leader(&self) -> Option<&Candidate> {
        self.candidates.first()
    }

    /// The election layout its name belongs to ([`crate::identity`]): 2 for a cluster's key
    /// (`cluster:<digest>`), 1 for podsweep 0.1's URL key (and any other name).
    pub fn layout(&self) -> u32 {
        let cluster = self
            .scope
            .as_ref()
            .and_then(|s| s.context.as_deref())
            .is_some_and(|c| c.starts_with(crate::identity::CLUSTER_PREFIX));
        if cluster {
            2
        } else {
            1
        }
    }

    /// The scope as operators read it: `context:namespace`, as podsweep's logs print it.
    pub fn scope_name(&self) -> String {
        match &self.scope {
            Some(s) => s.to_string(),
            None => format!("? ({})", self.path),
        }
    }

    pub fn json(&self) -> Value {
        json!({
            "scope": self.scope_name(),
            "context": self.scope.as_ref().and_then(|s| s.context.clone()),
            "namespace": self.scope.as_ref().and_then(|s| s.namespace.clone()),
            "election": self.path,
            "layout": self.layout(),
            "leader": self.leader().map(|c| c.server.clone()),
            "leader_since_ms": self.leader_since_ms,
            "leader_since": self.leader_since_ms.map(rfc3339),
            "participants": self.candidates.iter().map(|c| json!({
                "server": c.server,
                "node": c.node,
                "joined_ms": c.joined_ms,
                "joined": c.joined_ms.map(rfc3339),
            })).collect::<Vec<_>>(),
        })
    }
}

/// What podsweep keeps in one HA backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `zookeeper` or `etcd`.
    pub backend: &'static str,
    /// The backend's addresses, as configured.
    pub addresses: String,
    /// `/<kyuubi.ha.namespace>-podsweep`: everything podsweep writes is under it.
    pub root: String,
    /// Sorted by scope name.
    pub elections: Vec<Election>,
}

impl Layout {
    /// Every candidate of every election (a running server campaigns in each of its scopes).
    pub fn candidates(&self) -> usize {
        self.elections.iter().map(|e| e.candidates.len()).sum()
    }

    pub fn json(&self) -> Value {
        json!({
            "backend": self.backend,
            "addresses": self.addresses,
            "root": self.root,
            "read_at_ms": crate::metrics::epoch_ms(),
            "scopes": self.elections.iter().map(Election::json).collect::<Vec<_>>(),
        })
    }
}

/// What [`remove`] deleted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Removed {
    /// ZooKeeper nodes or etcd keys deleted.
    pub deleted: u64,
}

/// A reading or removal that could not be done; the message names the backend and what failed.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InspectError(pub String);

/// Reads every scope's election from the HA backend of `ha`.
///
/// # Errors
/// No HA backend configured (`kyuubi.ha.addresses` unset: every server cleans on its own and
/// nothing is elected), or the backend cannot be reached or read.
pub async fn read(ha: &HaSettings) -> Result<Layout, InspectError> {
    let mut layout = match ha {
        HaSettings::Local => return Err(no_backend()),
        HaSettings::ZooKeeper(zk) => zookeeper::inspect::read(zk).await?,
        HaSettings::Etcd(e) => etcd::inspect::read(e).await?,
    };
    layout
        .elections
        .sort_by_key(|e| (e.scope_name(), e.path.clone()));
    Ok(layout)
}

/// Deletes everything podsweep keeps under `/<kyuubi.ha.namespace>-podsweep/` in the HA backend
/// of `ha`. Callers check first that no server campaigns ([`read`]): a running server would
/// lose its seat and campaign again.
///
/// # Errors
/// As [`read`], or a node or key that cannot be deleted (its path is named).
pub async fn remove(ha: &HaSettings) -> Result<Removed, InspectError> {
    match ha {
        HaSettings::Local => Err(no_backend()),
        HaSettings::ZooKeeper(zk) => zookeeper::inspect::remove(zk).await,
        HaSettings::Etcd(e) => etcd::inspect::remove(e).await,
    }
}

fn no_backend() -> InspectError {
    InspectError(format!(
        "{} is not set: no HA backend, so every server cleans on its own and nothing is elected",
        crate::config::keys::HA_ADDRESSES
    ))
}

/// `/<namespace>-podsweep`, the root of everything podsweep writes.
pub(super) fn podsweep_root(namespace: &str) -> String {
    format!("/{}-podsweep", namespace.trim_matches('/'))
}

/// Epoch milliseconds as RFC 3339 (UTC, milliseconds).
pub fn rfc3339(ms: i64) -> String {
    match jiff::Timestamp::from_millisecond(ms) {
        Ok(t) => format!("{t:.3}"),
        Err(_) => ms.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_names_leader_participants_and_since() {
        let e = Election {
            scope: Some(Scope::new(None, Some("spark"))),
            path: "/kyuubi-podsweep/latches/c_.n=spark".into(),
            candidates: vec![
                Candidate {
                    server: "kyuubi-0:10009".into(),
                    node: "_c_x-latch-0000000000".into(),
                    joined_ms: Some(1_700_000_000_000),
                },
                Candidate {
                    server: "kyuubi-1:10009".into(),
                    node: "_c_y-latch-0000000001".into(),
                    joined_ms: None,
                },
            ],
            leader_since_ms: Some(1_700_000_000_123),
        };
        let v = e.json();
        assert_eq!(v["scope"], "<default context>:spark");
        assert_eq!(v["layout"], 1);
        assert_eq!(v["leader"], "kyuubi-0:10009");
        assert_eq!(v["leader_since"], "2023-11-14T22:13:20.123Z");
        assert_eq!(v["participants"].as_array().map(Vec::len), Some(2));
        assert_eq!(v["participants"][1]["joined"], Value::Null);
        let undecodable = Election {
            scope: None,
            path: "/kyuubi-podsweep/latches/by-hand".into(),
            candidates: vec![],
            leader_since_ms: None,
        };
        assert_eq!(
            undecodable.scope_name(),
            "? (/kyuubi-podsweep/latches/by-hand)"
        );
        assert_eq!(undecodable.json()["leader"], Value::Null);
    }
}
