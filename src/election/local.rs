//! The `local` backend: always leader.
//!
//! Kyuubi's behaviour when no HA backend is configured: every server cleans up on its own.

use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Backend, LeaderSignal};
use crate::scope::Scope;

/// Always-leader backend for a single server.
#[derive(Debug, Default)]
pub struct LocalBackend;

/// Far enough ahead to never expire in a process's life, small enough to never overflow.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl Backend for LocalBackend {
    fn name(&self) -> &'static str {
        "local"
    }

    fn can_step_down(&self) -> bool {
        false
    }

    fn campaign(
        &self,
        _scope: Scope,
        _identity: String,
        signal: LeaderSignal,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            signal.lead_until(Instant::now() + FOREVER, "local mode: no HA backend");
            cancel.cancelled().await;
            signal.follow("closed");
        })
    }
}
