//! A server of a fleet whose informers see only their own pods (Kyuubi's owner-scoped watch,
//! apache/kyuubi#7756: `kyuubi.apache.org/watch-scope in (<server id>,global)`), on the real
//! kube-apiserver: a podsweep engine built as a Kyuubi server builds it (`Engine::new` from
//! Kyuubi's keys, with `ownerScopedWatch.enabled=true`), fed by a kube-rs watch with that
//! narrowed selector, as the patched server's informer feeds it.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::watcher;
use podsweep::config::{keys, Settings};
use podsweep::election::Leadership;
use podsweep::engine::Engine;
use podsweep::kyuubi_state::{self, StateConfig};
use podsweep::model::EventKind;
use podsweep::scope::Scope;

use super::real_kube::RealKube;

/// The label of Kyuubi's owner-scoped informers.
pub const WATCH_SCOPE: &str = "kyuubi.apache.org/watch-scope";

pub struct Member {
    pub id: String,
    pub engine: Arc<Engine>,
    informer: tokio::task::JoinHandle<()>,
    ns: String,
}

impl Member {
    /// Starts a server `id` cleaning `ns` (its configured namespace, `kyuubi.kubernetes.namespace`)
    /// with Kyuubi's keys `extra`, under a ServiceAccount of its own.
    pub async fn start(k: &'static RealKube, ns: &str, id: &str, extra: &[(&str, &str)]) -> Member {
        let token = k.server_token(id).await;
        let mut conf: HashMap<String, String> = [
            (keys::CLEANUP_KIND, "ALL"),
            (keys::KUBE_NAMESPACE, ns),
            (keys::OWNER_SCOPED_WATCH, "true"),
        ]
        .iter()
        .chain(extra)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        conf.extend(k.client_conf(&token));
        let settings = Settings::from_map(conf).expect("settings");
        let engine =
            Arc::new(Engine::new(settings, id, tokio::runtime::Handle::current()).expect("engine"));
        let api: Api<Pod> = Api::namespaced(k.client(&token).await, ns);
        let selector = format!("kyuubi-unique-tag,{WATCH_SCOPE} in ({id},global)");
        let scope = Scope::new(None, Some(ns));
        let feed = engine.clone();
        let informer = tokio::spawn(async move {
            let cfg = watcher::Config::default().labels(&selector);
            let mut s = std::pin::pin!(watcher::watcher(api, cfg));
            let state = StateConfig::default();
            while let Some(ev) = s.next().await {
                let (pod, kind) = match ev {
                    Ok(watcher::Event::InitApply(p)) => (p, EventKind::Add),
                    Ok(watcher::Event::Apply(p)) => (p, EventKind::Update),
                    Ok(watcher::Event::Delete(p)) => (p, EventKind::Delete),
                    _ => continue,
                };
                if let Some(obs) = kyuubi_state::observation(&pod, &state, kind) {
                    let _ = feed.observe(scope.clone(), obs);
                }
            }
        });
        Member {
            id: id.to_owned(),
            engine,
            informer,
            ns: ns.to_owned(),
        }
    }

    pub fn scope(&self) -> Scope {
        Scope::new(None, Some(&self.ns))
    }

    pub fn leads(&self) -> bool {
        self.engine.leadership(&self.scope()) == Some(Leadership::Leading)
    }

    /// The scope's status on this server (`"known": false` when it has no task for it).
    pub fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.engine.status_json(&self.scope())).expect("status JSON")
    }

    /// Its informer stops (the engine stays, e.g. cut off from its HA backend).
    pub fn stop_informer(&self) {
        self.informer.abort();
    }

    /// The server stops: its informer first, then its engine (which deletes nothing and hands
    /// its leadership over).
    pub async fn stop(self) {
        self.informer.abort();
        self.engine.close_async(Duration::from_secs(5)).await;
    }
}

/// The member that leads, waiting up to `within` for exactly one; `None` if none did.
pub async fn leader(members: &[Member], within: Duration) -> Option<usize> {
    let until = std::time::Instant::now() + within;
    loop {
        let leading: Vec<usize> = (0..members.len()).filter(|&i| members[i].leads()).collect();
        if leading.len() == 1 {
            return Some(leading[0]);
        }
        if std::time::Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
