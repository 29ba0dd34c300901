//! Lease timing and the keep-alive exchange of the etcd backend.
//!
//! A keep-alive is one request on the lease's keep-alive stream and its reply; the stream is
//! opened on first use and dropped after any failure, so the next keep-alive opens a new one.
//! The caller keeps one in flight at a time, so each reply belongs to the request it awaits.
//! Until a keep-alive is due, the idle stream is watched: if it ends or fails (the connection
//! broke), the failure is reported at once instead of at the next keep-alive.

use std::time::Duration;

use etcd_client::{Error as EtcdError, LeaseClient, LeaseKeepAliveStream, LeaseKeeper};
use tokio::time::{sleep_until, timeout, Instant};

use super::describe;

/// How one lease TTL is split into a keep-alive period and a safety margin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseTiming {
    pub ttl: Duration,
    /// Stop acting this long before the earliest moment the server may expire the lease.
    pub margin: Duration,
    /// Time between two keep-alive requests.
    pub period: Duration,
}

impl LeaseTiming {
    /// `margin = max(TTL/3, 1 s)` but at most TTL/2; `period = min(TTL/3, window/2)`.
    pub fn new(ttl: Duration) -> Self {
        let ttl = ttl.max(Duration::from_secs(1));
        let margin = (ttl / 3).max(Duration::from_secs(1)).min(ttl / 2);
        let period = (ttl / 3).min((ttl - margin) / 2);
        LeaseTiming {
            ttl,
            margin,
            period,
        }
    }

    /// How long a confirmed keep-alive allows acting, counted from when it was sent.
    pub fn window(&self) -> Duration {
        self.ttl - self.margin
    }
}

/// A keep-alive stream: the request side and the reply side (boxed: it is large and moves
/// through every keep-alive).
pub(super) type KeepAlive = Box<(LeaseKeeper, LeaseKeepAliveStream)>;

/// What the server said to one keep-alive request.
pub(super) enum Reply {
    /// The lease lives on.
    Alive,
    /// TTL 0: the lease expired or was revoked.
    Gone,
    Failed(String),
}

/// At `due`, sends one keep-alive for `lease` (opening a stream if there is none) and waits at
/// most `limit` for the reply; returns when it was sent, the reply, and the stream to reuse.
/// A stream that breaks while waiting for `due` is reported as failed right away.
pub(super) async fn send_beat(
    mut leases: LeaseClient,
    lease: i64,
    mut stream: Option<KeepAlive>,
    due: Instant,
    limit: Duration,
) -> (Instant, Reply, Option<KeepAlive>) {
    if let Some((_, replies)) = stream.as_deref_mut() {
        let broke = tokio::select! {
            _ = sleep_until(due) => None,
            m = replies.message() => Some(match m {
                Ok(Some(_)) => "unexpected keep-alive reply".to_owned(),
                Ok(None) => "keep-alive stream closed".to_owned(),
                Err(e) => describe(&e),
            }),
        };
        if let Some(e) = broke {
            return (Instant::now(), Reply::Failed(e), None);
        }
    } else {
        sleep_until(due).await;
    }
    let sent = Instant::now();
    let exchange = async move {
        let Some(mut pair) = stream else {
            // Opening sends the first request and checks its reply's TTL itself.
            return match leases.keep_alive(lease).await {
                Ok(pair) => (Reply::Alive, Some(Box::new(pair))),
                Err(EtcdError::LeaseKeepAliveError(m)) if m.contains("not found") => {
                    (Reply::Gone, None)
                }
                Err(e) => (Reply::Failed(describe(&e)), None),
            };
        };
        let (keeper, replies) = &mut *pair;
        if let Err(e) = keeper.keep_alive().await {
            return (Reply::Failed(describe(&e)), None);
        }
        match replies.message().await {
            Ok(Some(r)) if r.ttl() > 0 => (Reply::Alive, Some(pair)),
            Ok(Some(_)) => (Reply::Gone, None),
            Ok(None) => (Reply::Failed("keep-alive stream closed".into()), None),
            Err(e) => (Reply::Failed(describe(&e)), None),
        }
    };
    let (reply, stream) = timeout(limit, exchange).await.unwrap_or_else(|_| {
        let late = format!("no keep-alive reply within {limit:?}");
        (Reply::Failed(late), None)
    });
    (sent, reply, stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }

    #[test]
    fn lease_timing_keeps_a_positive_window_and_margin() {
        // ttl, margin, period, window (ms)
        let table = [
            (1_000, 500, 250, 500),
            (2_000, 1_000, 500, 1_000),
            (3_000, 1_000, 1_000, 2_000),
            (10_000, 3_333, 3_333, 6_667),
        ];
        for (ttl, margin, period, window) in table {
            let t = LeaseTiming::new(ms(ttl));
            let got = [t.margin, t.period, t.window()].map(|d| d.as_millis() as i64);
            let want = [margin, period, window].map(|v| v as i64);
            assert!(
                got.iter().zip(want).all(|(g, w)| (g - w).abs() <= 1),
                "{ttl}: {t:?}"
            );
            assert!(t.period * 2 <= t.window() && t.margin > Duration::ZERO);
        }
        // Sub-second TTLs are lifted to etcd's 1 s granularity.
        assert_eq!(LeaseTiming::new(ms(10)), LeaseTiming::new(ms(1_000)));
    }
}
