//! What podsweep keeps in the HA backend, as its readers see it: the elections of every scope,
//! their candidates and leaders ([`Layout`]), and where it all lives (`/<ns>-podsweep`). The
//! types of [`super::inspect`], kept apart from it so that the backends, which write what it
//! reads, and the reading itself depend on this module alone.

use serde_json::{json, Value};

use crate::scope::Scope;

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
    /// The servers running now, idle or not: the candidates of the servers' own election
    /// ([`presence_scope`]), in which every server with an HA backend campaigns for its whole
    /// life.
    pub servers: Vec<Candidate>,
}

impl Layout {
    /// Every candidate of every election (a running server campaigns in each of its scopes),
    /// and every running server (one whose scopes are all idle too).
    pub fn candidates(&self) -> usize {
        self.elections
            .iter()
            .map(|e| e.candidates.len())
            .sum::<usize>()
            + self.servers.len()
    }

    /// Takes the servers' own election ([`presence_scope`]) out of [`Layout::elections`] into
    /// [`Layout::servers`].
    pub(crate) fn split_servers(&mut self) {
        let presence = Some(presence_scope());
        let (servers, scopes): (Vec<Election>, Vec<Election>) = std::mem::take(&mut self.elections)
            .into_iter()
            .partition(|e| e.scope == presence);
        self.elections = scopes;
        self.servers = servers.into_iter().flat_map(|e| e.candidates).collect();
    }

    pub fn json(&self) -> Value {
        json!({
            "backend": self.backend,
            "addresses": self.addresses,
            "root": self.root,
            "read_at_ms": crate::metrics::epoch_ms(),
            "scopes": self.elections.iter().map(Election::json).collect::<Vec<_>>(),
            "servers": self.servers.iter().map(|c| json!({
                "server": c.server,
                "node": c.node,
                "joined_ms": c.joined_ms,
                "joined": c.joined_ms.map(rfc3339),
            })).collect::<Vec<_>>(),
        })
    }
}

/// The election every server with an HA backend campaigns in from its start to its end, whatever
/// its scopes do (an idle scope releases its own election): it tells `podsweep uninstall` and
/// `podsweep status` which servers run. Its leader does nothing. Its name (`c=podsweep%3Aservers.n`)
/// decodes to no Kubernetes context podsweep would elect under: a context named `podsweep:servers`
/// with no namespace.
pub fn presence_scope() -> Scope {
    Scope::new(Some("podsweep:servers"), None)
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

/// `/<namespace>-podsweep`, the root of everything podsweep writes.
pub(crate) fn podsweep_root(namespace: &str) -> String {
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
