//! The `podsweep` daemon as a child process, as an operator runs it alone (`--single-server`),
//! for the benches: its configuration file, its listening line, its `/status`, its stop.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

pub struct Daemon {
    child: tokio::process::Child,
    url: String,
    stderr: PathBuf,
}

impl Daemon {
    /// Writes `conf` as `dir/kyuubi-defaults.conf` and starts `bin` on it on a free loopback
    /// port, with server id `id`; returns once it has printed its listening line.
    pub async fn start(bin: &str, dir: &Path, conf: &str, id: &str) -> Result<Daemon, String> {
        let path = dir.join("kyuubi-defaults.conf");
        std::fs::write(&path, conf).map_err(|e| e.to_string())?;
        let stderr = dir.join("stderr.log");
        let mut child = tokio::process::Command::new(bin)
            .arg("--config")
            .arg(&path)
            .args([
                "--listen",
                "127.0.0.1:0",
                "--server-id",
                id,
                "--single-server",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr).map_err(|e| e.to_string())?)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{bin}: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .map_err(|_| "no listening line within 30 s".to_owned())?
            .map_err(|e| e.to_string())?
            .ok_or_else(|| {
                format!(
                    "the daemon ended: {}",
                    std::fs::read_to_string(&stderr).unwrap_or_default()
                )
            })?;
        let url = line
            .strip_prefix("podsweep listening on ")
            .ok_or_else(|| format!("unexpected first line {line:?}"))?
            .to_owned();
        Ok(Daemon { child, url, stderr })
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    /// Its exit status, once it has ended.
    pub fn exited(&mut self) -> Option<String> {
        self.child.try_wait().ok().flatten().map(|s| s.to_string())
    }

    /// The last 20 lines of its log.
    pub fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// The status of the scope of namespace `ns` (`null` while the daemon does not answer).
    pub async fn status(&self, ns: &str) -> Value {
        scope_status(&self.url, ns).await
    }

    /// SIGTERM, then the exit (closing the engine deletes nothing).
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            super::process::signal(pid, "TERM");
        }
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
    }
}

/// The status of the scope of namespace `ns` from the daemon serving `url` (`http://host:port`):
/// `null` while it does not answer.
pub async fn scope_status(url: &str, ns: &str) -> Value {
    let Some(host) = url.strip_prefix("http://") else {
        return Value::Null;
    };
    let Ok(mut s) = tokio::net::TcpStream::connect(host).await else {
        return Value::Null;
    };
    let req = format!("GET /status HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).await.is_err() {
        return Value::Null;
    }
    let mut reply = String::new();
    if s.read_to_string(&mut reply).await.is_err() {
        return Value::Null;
    }
    let body = reply.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.as_array()?.iter().find(|s| s["namespace"] == ns).cloned())
        .unwrap_or(Value::Null)
}
