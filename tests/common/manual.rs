//! An election backend driven by hand: every campaign hands its [`LeaderSignal`] to the test,
//! which then decides when that candidate leads, follows or loses its lease.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use podsweep::election::{Backend, LeaderSignal};
use podsweep::scope::Scope;
use tokio_util::sync::CancellationToken;

#[derive(Default)]
pub struct ManualBackend {
    /// The signal of each campaign, in the order the campaigns started.
    pub signals: Arc<Mutex<Vec<LeaderSignal>>>,
    /// How many campaigns have ended (were cancelled).
    pub ended: Arc<AtomicUsize>,
}

impl Backend for ManualBackend {
    fn name(&self) -> &'static str {
        "manual"
    }

    fn campaign(
        &self,
        _scope: Scope,
        _identity: String,
        signal: LeaderSignal,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        self.signals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(signal);
        let ended = self.ended.clone();
        Box::pin(async move {
            cancel.cancelled().await;
            ended.fetch_add(1, Ordering::SeqCst);
        })
    }
}
