//! The scope store ([`crate::election::store`]) on etcd: one key per record,
//! `/<ns>-podsweep/<shelf>/<encoded key>/<encoded name>`, on no lease, through the server's one
//! connection.

use std::sync::Arc;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use futures::future::BoxFuture;

use super::{describe, EtcdConnect, EtcdSession};
use crate::config::EtcdSettings;
use crate::election::driver::Pool;
use crate::election::layout::podsweep_root;
use crate::election::store::{
    bounded, decode_name, encode_name, shelf_path, Changed, Entry, ScopeStore, Shelf,
};
use crate::election::Identity;
use crate::scope::Scope;

/// The store of one server (its identity's connection).
pub(super) struct EtcdStore {
    pub(super) settings: EtcdSettings,
    pub(super) pool: Arc<Pool<EtcdConnect>>,
    pub(super) identity: Identity,
}

impl EtcdStore {
    fn client(&self) -> Result<Client, String> {
        self.pool
            .peek(&self.identity.current())
            .map(|s: Arc<EtcdSession>| s.client.clone())
            .ok_or_else(|| "no etcd connection is open on this server".to_owned())
    }

    /// The shelf's prefix, with its trailing slash.
    fn prefix(&self, key: &Scope, shelf: Shelf) -> String {
        format!(
            "{}/",
            shelf_path(&podsweep_root(&self.settings.namespace), key, shelf)
        )
    }
}

impl ScopeStore for EtcdStore {
    fn create(
        &self,
        key: &Scope,
        shelf: Shelf,
        name: &str,
        value: Vec<u8>,
    ) -> BoxFuture<'static, Result<bool, String>> {
        let client = self.client();
        let path = format!("{}{}", self.prefix(key, shelf), encode_name(name));
        Box::pin(bounded(path.clone(), async move {
            let mut kv = client?.kv_client();
            let txn = Txn::new()
                .when([Compare::create_revision(path.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(path.as_str(), value, None::<PutOptions>)]);
            kv.txn(txn)
                .await
                .map(|r| r.succeeded())
                .map_err(|e| format!("create {path}: {}", describe(&e)))
        }))
    }

    fn list(&self, key: &Scope, shelf: Shelf) -> BoxFuture<'static, Result<Vec<Entry>, String>> {
        let (client, prefix) = (self.client(), self.prefix(key, shelf));
        Box::pin(bounded(prefix.clone(), async move {
            let mut kv = client?.kv_client();
            range(&mut kv, &prefix).await.map(|(entries, _)| entries)
        }))
    }

    fn watch(
        &self,
        key: &Scope,
        shelf: Shelf,
    ) -> BoxFuture<'static, Result<(Vec<Entry>, Changed), String>> {
        let (client, prefix) = (self.client(), self.prefix(key, shelf));
        Box::pin(bounded(prefix.clone(), async move {
            let client = client?;
            let mut kv = client.kv_client();
            let (entries, revision) = range(&mut kv, &prefix).await?;
            let mut watcher = client.watch_client();
            let options = WatchOptions::new()
                .with_prefix()
                .with_start_revision(revision + 1);
            let mut stream = watcher
                .watch(prefix.as_str(), Some(options))
                .await
                .map_err(|e| format!("watch {prefix}: {}", describe(&e)))?;
            let changed: Changed = Box::pin(async move {
                // The first reply confirms the watch; an event (or the stream's end) is a change.
                while let Ok(Some(reply)) = stream.message().await {
                    if reply.canceled()
                        || reply
                            .events()
                            .iter()
                            .any(|e| matches!(e.event_type(), EventType::Put | EventType::Delete))
                    {
                        return;
                    }
                }
            });
            Ok((entries, changed))
        }))
    }

    fn remove(
        &self,
        key: &Scope,
        shelf: Shelf,
        name: &str,
    ) -> BoxFuture<'static, Result<(), String>> {
        let client = self.client();
        let path = format!("{}{}", self.prefix(key, shelf), encode_name(name));
        Box::pin(bounded(path.clone(), async move {
            client?
                .kv_client()
                .delete(path.as_str(), None)
                .await
                .map(drop)
                .map_err(|e| format!("delete {path}: {}", describe(&e)))
        }))
    }

    fn participants(&self, key: &Scope) -> BoxFuture<'static, Result<Vec<String>, String>> {
        let client = self.client();
        let prefix = format!("{}/{}/", self.settings.root(), key.encoded());
        Box::pin(bounded(prefix.clone(), async move {
            let mut kv = client?.kv_client();
            // An election key's value is its server's id.
            let (keys, _) = range(&mut kv, &prefix).await?;
            Ok(keys
                .into_iter()
                .map(|k| String::from_utf8_lossy(&k.value).into_owned())
                .collect())
        }))
    }
}

/// The records under `prefix` and the revision they were read at.
async fn range(kv: &mut etcd_client::KvClient, prefix: &str) -> Result<(Vec<Entry>, i64), String> {
    let reply = kv
        .get(prefix, Some(GetOptions::new().with_prefix()))
        .await
        .map_err(|e| format!("list {prefix}: {}", describe(&e)))?;
    let revision = reply.header().map_or(0, |h| h.revision());
    let entries = reply
        .kvs()
        .iter()
        .filter_map(|kv| {
            let key = kv.key_str().ok()?;
            let name = key.strip_prefix(prefix)?;
            Some(Entry {
                name: decode_name(name),
                value: kv.value().to_vec(),
            })
        })
        .collect();
    Ok((entries, revision))
}
