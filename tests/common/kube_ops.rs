//! A real kube-apiserver of its own (not the process's shared one): started with extra flags,
//! restarted, stopped, its processes' memory and its `/metrics`, for the benches and for the tests
//! that need an API server configured otherwise (e.g. `--feature-gates WatchList=false`).
//!
//! The etcd it runs on is Debian's unless `PODSWEEP_ETCD` names another binary (scripts/kube
//! reads it).

#![allow(dead_code)]

use std::process::Command;

use super::real_kube::RealKube;

impl RealKube {
    /// A control plane of its own (`scripts/kube up DIR --owner-pid <this process> EXTRA...`), in
    /// a directory named `prefix` and this process's id; stop it with [`RealKube::down`].
    pub fn start(prefix: &str, extra: &[&str]) -> RealKube {
        Self::up(prefix, extra)
    }

    /// [`RealKube::start`] on another etcd binary (scripts/kube's `PODSWEEP_ETCD`).
    pub fn start_on_etcd(prefix: &str, extra: &[&str], etcd: &std::path::Path) -> RealKube {
        let etcd = etcd.display().to_string();
        let mut k = Self::up_env(prefix, extra, &[("PODSWEEP_ETCD", &etcd)]);
        k.etcd = Some(etcd);
        k
    }

    /// `scripts/kube restart DIR WHAT` (`kube-apiserver` or `etcd`): stopped by its PID and
    /// started again with the same command line, ready when this returns.
    pub fn restart(&self, what: &str) {
        let out = Command::new(repo().join("scripts/kube"))
            .arg("restart")
            .arg(&self.dir)
            .arg(what)
            .output()
            .expect("run scripts/kube restart");
        assert!(
            out.status.success(),
            "scripts/kube restart {what} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `scripts/kube down DIR`: every process `up` started, each by its own PID.
    pub fn down(&self) {
        let _ = Command::new(repo().join("scripts/kube"))
            .arg("down")
            .arg(&self.dir)
            .output();
    }

    /// The PID of `what` (`kube-apiserver`, `etcd`) as scripts/kube wrote it.
    pub fn pid(&self, what: &str) -> Option<u32> {
        std::fs::read_to_string(self.dir.join(format!("{what}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// The etcd this control plane runs on: its binary's `etcd --version` first line.
    pub fn etcd_version(&self) -> String {
        let bin = self
            .etcd
            .clone()
            .or_else(|| std::env::var("PODSWEEP_ETCD").ok())
            .unwrap_or_else(|| "etcd".to_owned());
        Command::new(&bin)
            .arg("--version")
            .output()
            .ok()
            .and_then(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .map(|l| l.trim_start_matches("etcd Version: ").to_owned())
            })
            .unwrap_or_else(|| format!("unknown ({bin})"))
    }

    /// The API server's `/metrics` (Prometheus text), read with the admin token.
    pub async fn metrics_text(&self) -> String {
        let req = http::Request::get("/metrics")
            .body(Vec::new())
            .expect("request");
        self.admin()
            .await
            .request_text(req)
            .await
            .unwrap_or_default()
    }
}

/// The sum of the samples of metric `name` (exact name, before its labels) whose label set
/// contains every `labels` pair (`key="value"`), in Prometheus text.
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (n, rest) = match series.split_once('{') {
                Some((n, rest)) => (n, rest),
                None => (series, ""),
            };
            (n == name && labels.iter().all(|p| rest.contains(p)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// `VmRSS` and `VmHWM` (peak) of process `pid`, in bytes.
pub fn rss(pid: u32) -> Option<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|k| k * 1024)
    };
    Some((kb("VmRSS:")?, kb("VmHWM:")?))
}

fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}
