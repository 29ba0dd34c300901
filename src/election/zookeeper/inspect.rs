//! The ZooKeeper side of [`crate::election::inspect`]: one short session of its own (with the
//! servers' digest or Kerberos credentials), a walk of `/<ns>-podsweep/latches`, and the removal
//! of `/<ns>-podsweep`.

use std::time::Duration;

use tokio::time::timeout;
use zookeeper_client::{Client, Error as ZkError};

use super::connect::connector;
use super::LATCH_NAME;
use crate::config::ZkSettings;
use crate::election::layout::{podsweep_root, Candidate, Election, InspectError, Layout, Removed};
use crate::scope::Scope;

/// Upper bound on each request of a reading.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The digits Curator (and ZooKeeper) append to a sequential node.
const SEQUENCE_DIGITS: usize = 10;

async fn session(s: &ZkSettings) -> Result<Client, InspectError> {
    let limit = s.connection_timeout.max(Duration::from_secs(1));
    match timeout(limit, connector(s).connect(&s.addresses)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(InspectError(format!(
            "cannot connect to ZooKeeper at {}: {e}",
            s.addresses
        ))),
        Err(_) => Err(InspectError(format!(
            "cannot connect to ZooKeeper at {}: no session within {limit:?}",
            s.addresses
        ))),
    }
}

async fn bounded<T>(
    what: &str,
    path: &str,
    request: impl std::future::Future<Output = Result<T, ZkError>>,
) -> Result<Result<T, ZkError>, InspectError> {
    timeout(REQUEST_TIMEOUT, request).await.map_err(|_| {
        InspectError(format!(
            "ZooKeeper: {what} {path}: no reply within {REQUEST_TIMEOUT:?}"
        ))
    })
}

fn failed(what: &str, path: &str, e: ZkError) -> InspectError {
    InspectError(format!("ZooKeeper: cannot {what} {path}: {e}"))
}

/// Children of `path`, none when it does not exist.
async fn children(client: &Client, path: &str) -> Result<Vec<String>, InspectError> {
    match bounded("list", path, client.list_children(path)).await? {
        Ok(c) => Ok(c),
        Err(ZkError::NoNode) => Ok(Vec::new()),
        Err(e) => Err(failed("list", path, e)),
    }
}

/// The sequence of a latch node name (`_c_<uuid>-latch-0000000007`), if it is one.
fn sequence(name: &str) -> Option<&str> {
    let at = name.rfind(LATCH_NAME)?;
    let seq = &name[at + LATCH_NAME.len()..];
    (seq.len() == SEQUENCE_DIGITS && seq.bytes().all(|b| b.is_ascii_digit())).then_some(seq)
}

pub(crate) async fn read(s: &ZkSettings) -> Result<Layout, InspectError> {
    let client = session(s).await?;
    let latches = s.root();
    let mut elections = Vec::new();
    for dir in children(&client, &latches).await? {
        let path = format!("{latches}/{dir}");
        let mut nodes: Vec<String> = children(&client, &path)
            .await?
            .into_iter()
            .filter(|n| sequence(n).is_some())
            .collect();
        nodes.sort_by(|a, b| sequence(a).cmp(&sequence(b)));
        let mut candidates = Vec::new();
        let mut leader_since_ms = None;
        for node in nodes {
            let full = format!("{path}/{node}");
            let (data, stat) = match bounded("read", &full, client.get_data(&full)).await? {
                Ok(got) => got,
                // It left between the listing and the read.
                Err(ZkError::NoNode) => continue,
                Err(e) => return Err(failed("read", &full, e)),
            };
            if candidates.is_empty() {
                leader_since_ms = Some(stat.mtime);
            }
            candidates.push(Candidate {
                server: String::from_utf8_lossy(&data).into_owned(),
                node,
                joined_ms: Some(stat.ctime),
            });
        }
        elections.push(Election {
            scope: Scope::decode(&dir),
            path,
            candidates,
            leader_since_ms,
        });
    }
    Ok(Layout {
        backend: "zookeeper",
        addresses: s.addresses.clone(),
        root: podsweep_root(&s.namespace),
        elections,
        servers: Vec::new(),
    })
}

/// How many times `--force` walks a directory again that got a new child (a live server
/// campaigning again) while it was being removed.
const FORCE_REWALKS: u32 = 20;

pub(crate) async fn remove(s: &ZkSettings, force: bool) -> Result<Removed, InspectError> {
    let client = session(s).await?;
    let root = podsweep_root(&s.namespace);
    let mut removed = Removed::default();
    let mut rewalks = 0;
    // Depth first, iteratively: every node's children before the node.
    let mut stack = vec![(root, false)];
    while let Some((path, expanded)) = stack.pop() {
        if !expanded {
            stack.push((path.clone(), true));
            for child in children(&client, &path).await? {
                stack.push((format!("{path}/{child}"), false));
            }
            continue;
        }
        match bounded("delete", &path, client.delete(&path, None)).await? {
            Ok(()) => removed.deleted += 1,
            Err(ZkError::NoNode) => {}
            // Forced under live servers: one campaigned again meanwhile; its node goes too.
            Err(ZkError::NotEmpty) if force && rewalks < FORCE_REWALKS => {
                rewalks += 1;
                stack.push((path, false));
            }
            Err(ZkError::NotEmpty) => {
                return Err(InspectError(format!(
                    "ZooKeeper: {path} got a new child while it was being removed: a server still \
                     campaigns; stop every server and run it again"
                )))
            }
            Err(e) => return Err(failed("delete", &path, e)),
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latch_sequences_are_curators() {
        assert_eq!(
            sequence("_c_8b1e0a4e-5d7c-4a2f-9d6e-0c9f3b1a2e4d-latch-0000000012"),
            Some("0000000012")
        );
        for not_latch in ["latch-12", "_c_x-latch-00000000a1", "lock-0000000001", "x"] {
            assert_eq!(sequence(not_latch), None, "{not_latch}");
        }
    }
}
