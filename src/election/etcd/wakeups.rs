//! A second path by which a waiting candidate learns that its turn may have come.
//!
//! etcd's `Campaign` call returns once every key created before the candidate's is gone; the
//! server learns that through a watch of its own. On etcd 3.4.23, 200 scopes whose leader was
//! SIGKILLed: when its lease expired, 4 and then 5 of the waiting campaigns never returned,
//! although the candidate's key was then the first (`benches/fleet_scale.rs`; etcd's metrics showed
//! those `Campaign` calls still open). Those scopes would have had no leader until a restart.
//!
//! So each session keeps one watch of its own on the whole election root, DELETE events only
//! (no PUTs are sent at all; nothing flows while no candidate leaves): when a key of an election
//! this session is campaigning in goes, its waiting candidate is woken. If its `Campaign` call
//! has not returned [`WAKE_GRACE`] later, one read tells whether its key is now the first; if it
//! is, the call is dropped and the campaign made again, which finds the key first and returns at
//! once. The cost is nothing in steady state, one watch per session, and one read per waiting
//! candidate of an election whose key went.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{
    Client, GetOptions, KvClient, SortOrder, SortTarget, WatchFilterType, WatchOptions,
};
use tokio::sync::Notify;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::{bounded, REQUEST_TIMEOUT};
use crate::backoff::Backoff;

/// How long a candidate woken by a deletion leaves its `Campaign` call to return by itself.
pub(super) const WAKE_GRACE: Duration = Duration::from_secs(2);

/// The candidates of one session that wait in an election, by election name.
#[derive(Default)]
pub(super) struct Wakeups {
    waiting: Mutex<HashMap<String, Arc<Notify>>>,
}

impl Wakeups {
    /// Marks the election `name` as waited for until the returned guard is dropped.
    pub(super) fn register(self: &Arc<Self>, name: &str) -> Waiting {
        let notify = Arc::new(Notify::new());
        self.lock().insert(name.to_owned(), notify.clone());
        Waiting {
            wakeups: self.clone(),
            name: name.to_owned(),
            notify,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Notify>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the candidate waiting in the election of the deleted `key` (`<name>/<lease>`).
    fn deleted(&self, key: &[u8]) {
        let key = String::from_utf8_lossy(key);
        if let Some((name, _lease)) = key.rsplit_once('/') {
            if let Some(n) = self.lock().get(name) {
                n.notify_one();
            }
        }
    }

    /// Wakes every waiting candidate: deletions may have gone unseen while no watch ran.
    fn all(&self) {
        for n in self.lock().values() {
            n.notify_one();
        }
    }
}

/// A candidate's registration; dropping it ends the wait.
pub(super) struct Waiting {
    wakeups: Arc<Wakeups>,
    name: String,
    notify: Arc<Notify>,
}

impl Waiting {
    /// Resolves when a key of this election was deleted since the last call (or the watch was
    /// opened again).
    pub(super) async fn woken(&self) {
        self.notify.notified().await
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut w = self.wakeups.lock();
        if w.get(&self.name)
            .is_some_and(|n| Arc::ptr_eq(n, &self.notify))
        {
            w.remove(&self.name);
        }
    }
}

/// Watches the DELETEs under `root` (the session's election root) until `stop`, waking
/// `wakeups`' candidates; a broken watch is opened again after a backoff.
pub(super) async fn watch_deletes(
    client: Client,
    root: String,
    wakeups: Arc<Wakeups>,
    stop: CancellationToken,
) {
    let mut watcher = client.watch_client();
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    let prefix = format!("{root}/");
    loop {
        let options = WatchOptions::new()
            .with_prefix()
            .with_filters([WatchFilterType::NoPut]);
        let opened = tokio::select! {
            _ = stop.cancelled() => return,
            o = timeout(REQUEST_TIMEOUT, watcher.watch(prefix.clone(), Some(options))) => o,
        };
        if let Ok(Ok(mut stream)) = opened {
            wakeups.all();
            loop {
                let reply = tokio::select! {
                    _ = stop.cancelled() => return,
                    r = stream.message() => r,
                };
                match reply {
                    Ok(Some(reply)) => {
                        for kv in reply.events().iter().filter_map(|e| e.kv()) {
                            wakeups.deleted(kv.key());
                        }
                        if reply.canceled() {
                            break;
                        }
                        backoff.reset();
                    }
                    Ok(None) | Err(_) => break,
                }
            }
        }
        debug!(%root, "the watch of leaving candidates ended; opening it again");
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(backoff.next_delay()) => {}
        }
    }
}

/// Whether `key` is the first (lowest create revision) of election `name`; `None` when etcd
/// could not say.
pub(super) async fn is_first(mut kv: KvClient, name: &str, key: &[u8]) -> Option<bool> {
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
        .with_keys_only();
    let got = bounded(kv.get(format!("{name}/"), Some(options)))
        .await
        .ok()?;
    Some(got.kvs().first().is_some_and(|k| k.key() == key))
}
