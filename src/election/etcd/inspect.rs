//! The etcd side of [`crate::election::inspect`]: one connection of its own (with the servers'
//! TLS settings), a range read of `/<ns>-podsweep/elections/` and of the leaders' records, and
//! the removal of the prefix `/<ns>-podsweep/`.

use std::collections::BTreeMap;

use etcd_client::{Client, ConnectOptions, DeleteOptions, GetOptions};

use super::{bounded, leaders_root, tls_options, CONNECT_TIMEOUT};
use crate::config::EtcdSettings;
use crate::election::layout::{podsweep_root, Candidate, Election, InspectError, Layout, Removed};
use crate::scope::Scope;

async fn connect(s: &EtcdSettings) -> Result<Client, InspectError> {
    let endpoints = s.endpoints.join(",");
    let fail = |e: String| InspectError(format!("cannot reach etcd at {endpoints}: {e}"));
    let mut options = ConnectOptions::new().with_connect_timeout(CONNECT_TIMEOUT);
    if let Some(tls) = &s.tls {
        options = options.with_tls(tls_options(tls).map_err(fail)?);
    }
    let mut client = bounded(Client::connect(&s.endpoints, Some(options)))
        .await
        .map_err(fail)?;
    // The client connects lazily: a status call proves the endpoint answers.
    bounded(client.status()).await.map_err(fail)?;
    Ok(client)
}

/// Every key under `prefix` (which ends with `/`): (key, value, create revision).
async fn range(
    client: &mut Client,
    prefix: &str,
) -> Result<Vec<(String, String, i64)>, InspectError> {
    let got = bounded(client.get(prefix, Some(GetOptions::new().with_prefix())))
        .await
        .map_err(|e| InspectError(format!("etcd: cannot read {prefix}: {e}")))?;
    Ok(got
        .kvs()
        .iter()
        .map(|kv| {
            (
                String::from_utf8_lossy(kv.key()).into_owned(),
                String::from_utf8_lossy(kv.value()).into_owned(),
                kv.create_revision(),
            )
        })
        .collect())
}

pub(crate) async fn read(s: &EtcdSettings) -> Result<Layout, InspectError> {
    let mut client = connect(s).await?;
    let root = s.root();
    // <root>/<encoded scope>/<lease id in hex> -> (create revision, server id)
    let mut by_scope: BTreeMap<String, Vec<(i64, Candidate)>> = BTreeMap::new();
    for (key, value, rev) in range(&mut client, &format!("{root}/")).await? {
        let rest = &key[root.len() + 1..];
        let Some((segment, lease)) = rest.split_once('/') else {
            continue;
        };
        by_scope.entry(segment.to_owned()).or_default().push((
            rev,
            Candidate {
                server: value,
                node: lease.to_owned(),
                joined_ms: None,
            },
        ));
    }
    let records = leaders_root(s);
    let mut since: BTreeMap<String, (String, i64)> = BTreeMap::new();
    for (key, value, _) in range(&mut client, &format!("{records}/")).await? {
        let segment = key[records.len() + 1..].to_owned();
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&value) else {
            continue;
        };
        if let (Some(k), Some(ms)) = (v["key"].as_str(), v["since_ms"].as_i64()) {
            since.insert(segment, (k.to_owned(), ms));
        }
    }
    let elections = by_scope
        .into_iter()
        .map(|(segment, mut candidates)| {
            candidates.sort_by_key(|(rev, _)| *rev);
            let path = format!("{root}/{segment}");
            let leader_key = candidates
                .first()
                .map(|(_, c)| format!("{path}/{}", c.node));
            // The record counts only while it names the election's leader key.
            let leader_since_ms = since
                .get(&segment)
                .filter(|(k, _)| Some(k) == leader_key.as_ref())
                .map(|(_, ms)| *ms);
            Election {
                scope: Scope::decode(&segment),
                path,
                candidates: candidates.into_iter().map(|(_, c)| c).collect(),
                leader_since_ms,
            }
        })
        .collect();
    Ok(Layout {
        backend: "etcd",
        addresses: s.endpoints.join(","),
        root: podsweep_root(&s.namespace),
        elections,
        servers: Vec::new(),
    })
}

/// `_force`: one prefix delete removes whatever is there, campaigning servers' keys included.
pub(crate) async fn remove(s: &EtcdSettings, _force: bool) -> Result<Removed, InspectError> {
    let mut client = connect(s).await?;
    let prefix = format!("{}/", podsweep_root(&s.namespace));
    let deleted = bounded(client.delete(prefix.as_str(), Some(DeleteOptions::new().with_prefix())))
        .await
        .map_err(|e| InspectError(format!("etcd: cannot delete the prefix {prefix}: {e}")))?
        .deleted();
    Ok(Removed {
        deleted: deleted.max(0) as u64,
    })
}
