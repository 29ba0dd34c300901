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

use crate::config::HaSettings;

pub use super::layout::{
    presence_scope, rfc3339, Candidate, Election, InspectError, Layout, Removed,
};
use super::{etcd, zookeeper};

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
    layout.split_servers();
    layout
        .elections
        .sort_by_key(|e| (e.scope_name(), e.path.clone()));
    Ok(layout)
}

/// Deletes everything podsweep keeps under `/<kyuubi.ha.namespace>-podsweep/` in the HA backend
/// of `ha`. Callers check first that no server campaigns ([`read`]): a running server would
/// lose its seat and campaign again. With `force` (servers may run) a ZooKeeper directory that
/// gets a new node while it is removed is walked again, a bounded number of times.
///
/// # Errors
/// As [`read`], or a node or key that cannot be deleted (its path is named).
pub async fn remove(ha: &HaSettings, force: bool) -> Result<Removed, InspectError> {
    match ha {
        HaSettings::Local => Err(no_backend()),
        HaSettings::ZooKeeper(zk) => zookeeper::inspect::remove(zk, force).await,
        HaSettings::Etcd(e) => etcd::inspect::remove(e, force).await,
    }
}

fn no_backend() -> InspectError {
    InspectError(format!(
        "{} is not set: no HA backend, so every server cleans on its own and nothing is elected",
        crate::config::keys::HA_ADDRESSES
    ))
}
