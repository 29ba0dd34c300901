//! Small persistent records that the servers of one scope share through the HA backend, beside
//! its election: a scope's [`ScopeStore`].
//!
//! Each record lives on a *shelf* of one election key: ZooKeeper node
//! `/<ns>-podsweep/<shelf>/<encoded key>/<name>`, etcd key of the same path. Records are
//! persistent (on no session and no lease), so a request or a note outlives the server that wrote
//! it; whoever settles what a record stands for removes it, and `podsweep uninstall` removes
//! every shelf with the rest of `/<ns>-podsweep/`.
//!
//! The shelves ([`Shelf`]):
//! * `requests`: a pod Kyuubi asked a follower to delete at once (a CANCELED batch's pod), for
//!   the scope's leader, who watches the shelf ([`crate::sweeper`]'s requests).
//! * `reported`: in a dry run, the pods a leader already reported as "Would delete", so that a
//!   successor does not report them again.
//! * `refused`: the servers whose DELETEs the API server refused in the current refusal episode.
//!
//! # Guarantees
//! * A store never opens a coordination session of its own: it uses the server's session while
//!   one lives (the scope's campaign keeps it open) and answers an error otherwise.
//! * Every call is bounded ([`STORE_TIMEOUT`]); an error is a string naming the path.
//! * [`ScopeStore::watch`] lists the shelf and hands back a future that resolves on the first
//!   change after that list (or when the watch breaks): a caller that lists again then misses
//!   nothing.
//!
//! # Caveats
//! * Names are percent-encoded into one path segment ([`crate::names::path_segment`]); a value is
//!   a few hundred bytes of JSON at most.

use std::time::Duration;

use futures::future::BoxFuture;

use crate::scope::Scope;

/// Upper bound on each store call.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(10);

/// Which kind of record (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Shelf {
    Requests,
    Reported,
    Refused,
}

impl Shelf {
    /// The shelf's directory under `/<ns>-podsweep/`.
    pub fn dir(self) -> &'static str {
        match self {
            Shelf::Requests => "requests",
            Shelf::Reported => "reported",
            Shelf::Refused => "refused",
        }
    }
}

/// One record: its (decoded) name and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub value: Vec<u8>,
}

/// Resolves when a watched shelf changed after its listing (or the watch broke).
pub type Changed = BoxFuture<'static, ()>;

/// The records the servers of a scope share through the HA backend.
pub trait ScopeStore: Send + Sync {
    /// Creates record `name` with `value` unless it exists; true when this call created it.
    fn create(
        &self,
        key: &Scope,
        shelf: Shelf,
        name: &str,
        value: Vec<u8>,
    ) -> BoxFuture<'static, Result<bool, String>>;

    /// Every record of the shelf (none when the shelf does not exist yet).
    fn list(&self, key: &Scope, shelf: Shelf) -> BoxFuture<'static, Result<Vec<Entry>, String>>;

    /// [`ScopeStore::list`], and a future that resolves on the next change of the shelf.
    fn watch(
        &self,
        key: &Scope,
        shelf: Shelf,
    ) -> BoxFuture<'static, Result<(Vec<Entry>, Changed), String>>;

    /// Removes record `name`; one that is already gone is not an error.
    fn remove(
        &self,
        key: &Scope,
        shelf: Shelf,
        name: &str,
    ) -> BoxFuture<'static, Result<(), String>>;

    /// The server ids campaigning in the election of `key` now (its latch nodes or election
    /// keys, in no particular order): whom a step-down could hand the scope to.
    fn participants(&self, key: &Scope) -> BoxFuture<'static, Result<Vec<String>, String>>;
}

/// The path of a shelf of `key` under `root` (`/<ns>-podsweep`).
pub(crate) fn shelf_path(root: &str, key: &Scope, shelf: Shelf) -> String {
    format!("{root}/{}/{}", shelf.dir(), key.encoded())
}

/// A record name as one path segment.
pub(crate) fn encode_name(name: &str) -> String {
    crate::names::path_segment(name)
}

/// The record name a path segment stands for.
pub(crate) fn decode_name(segment: &str) -> String {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8_lossy()
        .into_owned()
}

/// Bounds a store call.
pub(crate) async fn bounded<T>(
    what: String,
    call: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    match tokio::time::timeout(STORE_TIMEOUT, call).await {
        Ok(r) => r,
        Err(_) => Err(format!("{what}: no answer within {STORE_TIMEOUT:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_one_segment() {
        for name in ["4b1c-uid", "a/b", "..", "p%q", "ü"] {
            let seg = encode_name(name);
            assert!(!seg.contains('/'), "{seg}");
            assert_ne!(seg, "..");
            assert_eq!(decode_name(&seg), name);
        }
        let key = Scope::new(Some("cluster:ab"), Some("spark"));
        assert_eq!(
            shelf_path("/kyuubi-podsweep", &key, Shelf::Requests),
            "/kyuubi-podsweep/requests/c=cluster%3Aab.n=spark"
        );
    }
}
