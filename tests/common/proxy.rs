//! A TCP proxy on loopback that can be black-holed: a network partition between one client and
//! one server, for the fault matrix.
//!
//! While black-holed, nothing is forwarded in either direction and new connections are accepted
//! but not connected upstream: the client sees a peer that has gone silent, as across a real
//! partition (no reset, no FIN). When the partition heals, connections that were open during it
//! are closed (their queued bytes are dropped, as TCP gives up on them), and new connections are
//! forwarded again.
//!
//! It counts the bytes it forwards each way ([`Proxy::bytes_down`], [`Proxy::bytes_up`]): what a
//! client received and sent on the wire (TLS records included), for the benches.

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// (black-holed, partitions so far)
type State = (bool, u64);

pub struct Proxy {
    /// `127.0.0.1:<port>`: what the client connects to.
    pub addr: String,
    state: watch::Sender<State>,
    connections: Arc<AtomicU64>,
    bytes: Arc<Bytes>,
    task: tokio::task::JoinHandle<()>,
}

/// Bytes forwarded so far: server to client (`down`), client to server (`up`).
#[derive(Default)]
struct Bytes {
    down: AtomicU64,
    up: AtomicU64,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        // Open connections end when they see the sender gone.
    }
}

impl Proxy {
    /// A proxy to `upstream` (`host:port`) on a free loopback port, on the current runtime.
    pub async fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy addr").to_string();
        let (state, rx) = watch::channel((false, 0));
        let connections = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(Bytes::default());
        let (count, upstream, counted) = (connections.clone(), upstream.to_owned(), bytes.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::Relaxed);
                let _ = client.set_nodelay(true);
                tokio::spawn(forward(
                    client,
                    upstream.clone(),
                    rx.clone(),
                    counted.clone(),
                ));
            }
        });
        Proxy {
            addr,
            state,
            connections,
            bytes,
            task,
        }
    }

    /// Starts or ends the partition.
    pub fn blackhole(&self, on: bool) {
        self.state.send_modify(|(holed, partitions)| {
            if on && !*holed {
                *partitions += 1;
            }
            *holed = on;
        });
    }

    pub fn is_blackholed(&self) -> bool {
        self.state.borrow().0
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Bytes forwarded from the server to the client so far.
    pub fn bytes_down(&self) -> u64 {
        self.bytes.down.load(Ordering::Relaxed)
    }

    /// Bytes forwarded from the client to the server so far.
    pub fn bytes_up(&self) -> u64 {
        self.bytes.up.load(Ordering::Relaxed)
    }
}

async fn forward(
    mut client: TcpStream,
    upstream: String,
    mut state: watch::Receiver<State>,
    bytes: Arc<Bytes>,
) {
    // A connection made during a partition waits for it to heal, then is forwarded.
    let epoch = loop {
        let (holed, epoch) = *state.borrow_and_update();
        if !holed {
            break epoch;
        }
        if state.changed().await.is_err() {
            return;
        }
    };
    let Ok(mut server) = TcpStream::connect(&upstream).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (mut cr, mut cw) = client.split();
    let (mut sr, mut sw) = server.split();
    let mut up = vec![0u8; 16 * 1024];
    let mut down = vec![0u8; 16 * 1024];
    loop {
        let (holed, now) = *state.borrow_and_update();
        if holed || now != epoch {
            // Silent until the partition heals, then closed.
            while state.borrow().0 {
                if state.changed().await.is_err() {
                    return;
                }
            }
            return;
        }
        tokio::select! {
            n = cr.read(&mut up) => match n {
                Ok(n) if n > 0 => {
                    if state.borrow().0 || sw.write_all(&up[..n]).await.is_err() {
                        continue;
                    }
                    bytes.up.fetch_add(n as u64, Ordering::Relaxed);
                }
                _ => return,
            },
            n = sr.read(&mut down) => match n {
                Ok(n) if n > 0 => {
                    if state.borrow().0 || cw.write_all(&down[..n]).await.is_err() {
                        continue;
                    }
                    bytes.down.fetch_add(n as u64, Ordering::Relaxed);
                }
                _ => return,
            },
            changed = state.changed() => if changed.is_err() { return },
        }
    }
}
