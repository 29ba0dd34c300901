//! The scope store ([`crate::election::store`]) on ZooKeeper: one persistent node per record,
//! `/<ns>-podsweep/<shelf>/<encoded key>/<encoded name>`, with the ACLs of podsweep's other
//! nodes, on the server's one session.

use std::sync::Arc;

use futures::future::BoxFuture;
use zookeeper_client::{Client, CreateMode, Error as ZkError};

use super::connect::node_acls;
use super::{ZkConnect, ZkSession};
use crate::config::ZkSettings;
use crate::election::driver::Pool;
use crate::election::layout::podsweep_root;
use crate::election::store::{
    bounded, decode_name, encode_name, shelf_path, Changed, Entry, ScopeStore, Shelf,
};
use crate::election::Identity;
use crate::scope::Scope;

/// The store of one server (its identity's session).
pub(super) struct ZkStore {
    pub(super) settings: ZkSettings,
    pub(super) pool: Arc<Pool<ZkConnect>>,
    pub(super) identity: Identity,
}

impl ZkStore {
    fn client(&self) -> Result<Client, String> {
        self.pool
            .peek(&self.identity.current())
            .map(|s: Arc<ZkSession>| s.client.clone())
            .ok_or_else(|| "no ZooKeeper session is open on this server".to_owned())
    }

    fn dir(&self, key: &Scope, shelf: Shelf) -> String {
        shelf_path(&podsweep_root(&self.settings.namespace), key, shelf)
    }
}

impl ScopeStore for ZkStore {
    fn create(
        &self,
        key: &Scope,
        shelf: Shelf,
        name: &str,
        value: Vec<u8>,
    ) -> BoxFuture<'static, Result<bool, String>> {
        let (client, dir) = (self.client(), self.dir(key, shelf));
        let path = format!("{dir}/{}", encode_name(name));
        let auth = self.settings.auth.clone();
        Box::pin(bounded(path.clone(), async move {
            let client = client?;
            let acls = node_acls(&auth);
            let options = CreateMode::Persistent.with_acls(acls);
            let made = |e: ZkError| format!("create {path}: {e}");
            match client.create(&path, &value, &options).await {
                Ok(_) => return Ok(true),
                Err(ZkError::NodeExists) => return Ok(false),
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(made(e)),
            }
            client
                .mkdir(&dir, &options)
                .await
                .map_err(|e| format!("create {dir}: {e}"))?;
            match client.create(&path, &value, &options).await {
                Ok(_) => Ok(true),
                Err(ZkError::NodeExists) => Ok(false),
                Err(e) => Err(made(e)),
            }
        }))
    }

    fn list(&self, key: &Scope, shelf: Shelf) -> BoxFuture<'static, Result<Vec<Entry>, String>> {
        let (client, dir) = (self.client(), self.dir(key, shelf));
        Box::pin(bounded(dir.clone(), async move {
            let client = client?;
            match client.list_children(&dir).await {
                Ok(children) => read_all(&client, &dir, children).await,
                Err(ZkError::NoNode) => Ok(Vec::new()),
                Err(e) => Err(format!("list {dir}: {e}")),
            }
        }))
    }

    fn watch(
        &self,
        key: &Scope,
        shelf: Shelf,
    ) -> BoxFuture<'static, Result<(Vec<Entry>, Changed), String>> {
        let (client, dir) = (self.client(), self.dir(key, shelf));
        Box::pin(bounded(dir.clone(), async move {
            let client = client?;
            loop {
                match client.list_and_watch_children(&dir).await {
                    Ok((children, watcher)) => {
                        let entries = read_all(&client, &dir, children).await?;
                        let changed: Changed = Box::pin(async move {
                            watcher.changed().await;
                        });
                        return Ok((entries, changed));
                    }
                    Err(ZkError::NoNode) => {}
                    Err(e) => return Err(format!("watch {dir}: {e}")),
                }
                // No shelf yet: watch for its creation.
                match client.check_and_watch_stat(&dir).await {
                    Ok((None, watcher)) => {
                        let changed: Changed = Box::pin(async move {
                            watcher.changed().await;
                        });
                        return Ok((Vec::new(), changed));
                    }
                    // Created meanwhile: list it.
                    Ok((Some(_), _)) => continue,
                    Err(e) => return Err(format!("watch {dir}: {e}")),
                }
            }
        }))
    }

    fn remove(
        &self,
        key: &Scope,
        shelf: Shelf,
        name: &str,
    ) -> BoxFuture<'static, Result<(), String>> {
        let client = self.client();
        let path = format!("{}/{}", self.dir(key, shelf), encode_name(name));
        Box::pin(bounded(path.clone(), async move {
            match client?.delete(&path, None).await {
                Ok(()) | Err(ZkError::NoNode) => Ok(()),
                Err(e) => Err(format!("delete {path}: {e}")),
            }
        }))
    }

    fn participants(&self, key: &Scope) -> BoxFuture<'static, Result<Vec<String>, String>> {
        let client = self.client();
        let dir = format!("{}/{}", self.settings.root(), key.encoded());
        Box::pin(bounded(dir.clone(), async move {
            let client = client?;
            let children = match client.list_children(&dir).await {
                Ok(c) => c,
                Err(ZkError::NoNode) => Vec::new(),
                Err(e) => return Err(format!("list {dir}: {e}")),
            };
            // A latch node's data is its server's id.
            let nodes = read_all(&client, &dir, children).await?;
            Ok(nodes
                .into_iter()
                .map(|n| String::from_utf8_lossy(&n.value).into_owned())
                .collect())
        }))
    }
}

/// The records named `children` under `dir`; one deleted meanwhile is left out.
async fn read_all(client: &Client, dir: &str, children: Vec<String>) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::with_capacity(children.len());
    for child in children {
        let path = format!("{dir}/{child}");
        match client.get_data(&path).await {
            Ok((value, _)) => entries.push(Entry {
                name: decode_name(&child),
                value,
            }),
            Err(ZkError::NoNode) => {}
            Err(e) => return Err(format!("read {path}: {e}")),
        }
    }
    Ok(entries)
}
