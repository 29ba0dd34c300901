//! A server whose identity is confirmed after podsweep started (a Kyuubi server that binds port
//! 0 learns its port then): campaigns wait for it, then run under the confirmed id; without a
//! confirmation they go on under the provisional one after `IDENTITY_WAIT`.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use podsweep::election::{Backend, ElectionHandle, Identity, LeaderSignal, IDENTITY_WAIT};
use podsweep::metrics::ScopeMetrics;
use podsweep::pause::PauseKind;
use podsweep::scope::Scope;
use tokio_util::sync::CancellationToken;

/// Records the identity of every campaign.
#[derive(Default)]
struct Recording {
    identities: Arc<Mutex<Vec<String>>>,
}

impl Backend for Recording {
    fn name(&self) -> &'static str {
        "recording"
    }

    fn campaign(
        &self,
        _scope: Scope,
        identity: String,
        _signal: LeaderSignal,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        self.identities.lock().unwrap().push(identity);
        Box::pin(async move { cancel.cancelled().await })
    }
}

async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn campaigns_wait_for_the_confirmed_identity() {
    let rec = Recording::default();
    let seen = rec.identities.clone();
    let backend: Arc<dyn Backend> = Arc::new(rec);
    let identity = Identity::pending("kyuubi-0:0");
    let metrics = Arc::new(ScopeMetrics::default());
    let election = ElectionHandle::supervised_as(
        &backend,
        Scope::new(None, Some("spark")),
        podsweep::identity::fixed_keys(Scope::new(None, Some("spark"))),
        identity.clone(),
        metrics.clone(),
        Duration::from_secs(120),
    );
    settle().await;
    tokio::time::advance(Duration::from_secs(30)).await;
    settle().await;
    assert!(
        seen.lock().unwrap().is_empty(),
        "campaigned before the identity was confirmed"
    );
    assert!(election
        .status()
        .reason
        .contains("waiting for this server's identity"));
    // The wait is a pause with its cause and its end (the provisional id campaigns then).
    let pause = metrics
        .pauses
        .get(PauseKind::ServerIdPending)
        .expect("a server_id_pending pause while the identity is not confirmed");
    assert_eq!(pause.left, Some(Duration::from_secs(90)), "{pause:?}");
    identity.confirm("kyuubi-0:41234");
    settle().await;
    assert_eq!(*seen.lock().unwrap(), ["kyuubi-0:41234"]);
    assert!(!metrics.pauses.is_open(PauseKind::ServerIdPending));
    election.close().await;
}

#[tokio::test(start_paused = true)]
async fn without_a_confirmation_the_provisional_identity_campaigns_after_the_wait() {
    let rec = Recording::default();
    let seen = rec.identities.clone();
    let backend: Arc<dyn Backend> = Arc::new(rec);
    let election = ElectionHandle::supervised_as(
        &backend,
        Scope::new(None, Some("spark")),
        podsweep::identity::fixed_keys(Scope::new(None, Some("spark"))),
        Identity::pending("kyuubi-0:0"),
        Arc::new(ScopeMetrics::default()),
        Duration::from_secs(120),
    );
    settle().await;
    tokio::time::advance(IDENTITY_WAIT - Duration::from_secs(1)).await;
    settle().await;
    assert!(seen.lock().unwrap().is_empty());
    tokio::time::advance(Duration::from_secs(2)).await;
    settle().await;
    assert_eq!(*seen.lock().unwrap(), ["kyuubi-0:0"]);
    election.close().await;
}

#[tokio::test]
async fn a_fixed_identity_campaigns_at_once() {
    let rec = Recording::default();
    let seen = rec.identities.clone();
    let backend: Arc<dyn Backend> = Arc::new(rec);
    let election = ElectionHandle::supervised_as(
        &backend,
        Scope::new(None, Some("spark")),
        podsweep::identity::fixed_keys(Scope::new(None, Some("spark"))),
        Identity::fixed("kyuubi-0:10009"),
        Arc::new(ScopeMetrics::default()),
        Duration::from_secs(120),
    );
    for _ in 0..100 {
        if !seen.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(*seen.lock().unwrap(), ["kyuubi-0:10009"]);
    election.close().await;
}
