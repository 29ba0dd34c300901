//! The operator's verbs of the `podsweep` binary, beside the daemon itself:
//!
//! * `podsweep status --config kyuubi-defaults.conf [--json]`: who leads each scope, since when,
//!   and every participant, read from the HA backend alone (never Kyuubi, never the Kubernetes
//!   API), whatever runs podsweep: the patched Kyuubi, the drop-in or the daemon.
//! * `podsweep uninstall --config kyuubi-defaults.conf [--force] [--wait SECONDS]`: removes
//!   podsweep's nodes (or keys) from the HA backend once no server campaigns any more; waits up to
//!   a session timeout (or lease TTL) for the participants of servers that stopped without
//!   closing their sessions to expire.
//! * `podsweep check --config kyuubi-defaults.conf`: the daemon's own checks of a configuration,
//!   offline (nothing is contacted): exit 0 with a summary of what the daemon would do, or 2 with
//!   the refusal, naming the key.
//! * `podsweep copy-jars DIR`: copies the jars the container image carries into `DIR` (an init
//!   container filling a volume on Kyuubi's class path; the image has no shell to `cp` with).
//!
//! Exit status: 0 done, 1 the backend cannot be read or changed (or a server still campaigns,
//! for `uninstall` without `--force`), 2 a bad command line or configuration.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Subcommand;

use super::{conf, EXIT_CONFIG, EXIT_START};
use crate::config::Settings;
use crate::election::inspect::{self, rfc3339, Layout};

/// Where the container image keeps the jars of the patch-free Kyuubi route.
pub const IMAGE_JARS: &str = "/opt/podsweep/jars";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Prints, per scope, the leader (its server id, since when) and every participant, read
    /// from the HA backend of the configuration (ZooKeeper or etcd); never contacts Kyuubi.
    Status {
        /// Kyuubi's configuration file (kyuubi-defaults.conf).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Sets one key over the file's value; may be repeated.
        #[arg(long = "conf", value_name = "KEY=VALUE")]
        conf: Vec<String>,
        /// One JSON object instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Removes podsweep's ZooKeeper nodes or etcd keys (everything under
    /// /<kyuubi.ha.namespace>-podsweep/); refuses while a server still campaigns.
    Uninstall {
        /// Kyuubi's configuration file (kyuubi-defaults.conf).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Sets one key over the file's value; may be repeated.
        #[arg(long = "conf", value_name = "KEY=VALUE")]
        conf: Vec<String>,
        /// Removes them even while servers campaign (they lose their seats and campaign again).
        #[arg(long)]
        force: bool,
        /// How long to wait for participants to leave before refusing, in seconds. A server
        /// that stopped without closing its session (killed at the end of its grace period)
        /// stays a participant until the session or lease expires; by default uninstall waits
        /// that long (`kyuubi.ha.zookeeper.session.timeout`, or `ha.etcd.leaseTimeout`) plus 2 s.
        #[arg(long, value_name = "SECONDS")]
        wait: Option<u64>,
    },
    /// Checks a configuration as the daemon would at start, offline (no HA backend, no API
    /// server): prints what the daemon would do, or the refusal naming its key (exit 2).
    Check {
        /// Kyuubi's configuration file (kyuubi-defaults.conf).
        #[arg(long, value_name = "FILE")]
        config: PathBuf,
        /// Sets one key over the file's value; may be repeated.
        #[arg(long = "conf", value_name = "KEY=VALUE")]
        conf: Vec<String>,
        /// As the daemon's --single-server (ha.singleServer=true).
        #[arg(long)]
        single_server: bool,
    },
    /// Copies the jars the image carries (the podsweep jar for Linux and the Kyuubi drop-in) into
    /// DIR, for an init container that fills a volume on Kyuubi's class path.
    CopyJars {
        /// The directory to copy them into (it must exist).
        dir: PathBuf,
        /// Where the jars are.
        #[arg(long, value_name = "DIR", default_value = IMAGE_JARS)]
        from: PathBuf,
    },
}

/// Runs one verb; returns the exit status.
pub fn run(command: Command) -> u8 {
    match command {
        Command::Status { config, conf, json } => {
            let Some(settings) = settings(&config, &conf) else {
                return EXIT_CONFIG;
            };
            let layout = match block_on(inspect::read(&settings.ha)) {
                Ok(Ok(l)) => l,
                Ok(Err(e)) | Err(e) => return fail(&e.to_string()),
            };
            let text = if json {
                layout.json().to_string() + "\n"
            } else {
                table(&layout, crate::metrics::epoch_ms() as i64)
            };
            print(&text)
        }
        Command::Uninstall {
            config,
            conf,
            force,
            wait,
        } => {
            let Some(settings) = settings(&config, &conf) else {
                return EXIT_CONFIG;
            };
            let wait = wait.map_or_else(|| outlives_its_server(&settings.ha), Duration::from_secs);
            let t0 = Instant::now();
            let mut said = false;
            let layout = loop {
                let layout = match block_on(inspect::read(&settings.ha)) {
                    Ok(Ok(l)) => l,
                    Ok(Err(e)) | Err(e) => return fail(&e.to_string()),
                };
                let live = layout.candidates();
                if live == 0 || force || t0.elapsed() >= wait {
                    break layout;
                }
                if !said {
                    eprintln!(
                        "podsweep: {live} participant(s) in {}: waiting up to {} s for them to \
                         leave (a server stopped without closing its session stays one until \
                         it expires)",
                        layout.root,
                        wait.as_secs()
                    );
                    said = true;
                }
                std::thread::sleep(Duration::from_millis(500));
            };
            let live = layout.candidates();
            if live > 0 && !force {
                eprint!("{}", table(&layout, crate::metrics::epoch_ms() as i64));
                return fail(&format!(
                    "{live} participant(s) still campaign in {} ({} server(s) running, idle ones \
                     included): stop every server (Kyuubi with the patch or the drop-in, and the \
                     daemons) first, or pass --force",
                    layout.root,
                    layout.servers.len()
                ));
            }
            match block_on(inspect::remove(&settings.ha, force)) {
                Ok(Ok(r)) => print(&format!(
                    "removed {} from {} at {}: {} node(s)/key(s) deleted\n",
                    layout.root, layout.backend, layout.addresses, r.deleted
                )),
                Ok(Err(e)) | Err(e) => fail(&e.to_string()),
            }
        }
        Command::Check {
            config,
            mut conf,
            single_server,
        } => {
            if single_server {
                conf.push(format!("{}=true", crate::config::keys::HA_SINGLE_SERVER));
            }
            match super::check::daemon_settings(&config, &conf) {
                Ok(settings) => print(&super::check::summary(&config, &settings)),
                Err(e) => {
                    eprintln!(
                        "podsweep: bad configuration: {}",
                        crate::config::redact::scrub(&e)
                    );
                    EXIT_CONFIG
                }
            }
        }
        Command::CopyJars { dir, from } => match copy_jars(&from, &dir) {
            Ok(copied) => print(
                &copied
                    .iter()
                    .map(|p| format!("copied {}\n", p.display()))
                    .collect::<String>(),
            ),
            Err(e) => fail(&e),
        },
    }
}

/// The configuration as the servers read it (the daemon's `--config` and `--conf`).
fn settings(config: &Path, overrides: &[String]) -> Option<Settings> {
    let raw = match conf::read_file(config, overrides) {
        Ok(raw) => raw,
        Err(e) => {
            eprintln!("podsweep: bad configuration: {e}");
            return None;
        }
    };
    match Settings::from_map(raw) {
        Ok(s) => Some(s),
        Err(e) => {
            eprintln!(
                "podsweep: bad configuration: {}",
                crate::config::redact::scrub(&e.to_string())
            );
            None
        }
    }
}

/// How long a server's participation may outlive the server when it stopped without closing its
/// session (ZooKeeper) or revoking its lease (etcd), plus 2 s: uninstall's default wait.
fn outlives_its_server(ha: &crate::config::HaSettings) -> Duration {
    let expiry = match ha {
        crate::config::HaSettings::ZooKeeper(zk) => zk.session_timeout,
        crate::config::HaSettings::Etcd(etcd) => etcd.lease_ttl,
        crate::config::HaSettings::Local => Duration::ZERO,
    };
    expiry + Duration::from_secs(2)
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> Result<T, inspect::InspectError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map(|rt| rt.block_on(f))
        .map_err(|e| inspect::InspectError(format!("cannot start a runtime: {e}")))
}

fn fail(message: &str) -> u8 {
    eprintln!("podsweep: {}", crate::config::redact::scrub(message));
    EXIT_START
}

fn print(text: &str) -> u8 {
    let mut out = std::io::stdout();
    if out
        .write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        return EXIT_START;
    }
    0
}

/// "3m 12s" style age.
fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// The human-readable status: a header, then per scope its leader, since when, and every
/// participant in the election's order.
pub fn table(layout: &Layout, now_ms: i64) -> String {
    let mut out = format!(
        "{} at {}: {} scope(s) under {}\n",
        layout.backend,
        layout.addresses,
        layout.elections.len(),
        layout.root
    );
    let servers: Vec<&str> = layout.servers.iter().map(|c| c.server.as_str()).collect();
    out.push_str(&format!(
        "servers running: {}{}\n",
        servers.len(),
        if servers.is_empty() {
            String::new()
        } else {
            format!(" ({})", servers.join(", "))
        }
    ));
    for e in &layout.elections {
        out.push_str(&format!("\nscope {}\n", e.scope_name()));
        out.push_str(match e.layout() {
            2 => "  layout        2 (the cluster's key)\n",
            _ => "  layout        1 (podsweep 0.1's URL key; 0.2 servers win it first)\n",
        });
        match (e.leader(), e.leader_since_ms) {
            (None, _) => out.push_str("  leader        none (no participant)\n"),
            (Some(l), Some(since)) => out.push_str(&format!(
                "  leader        {}  since {} ({} ago)\n",
                l.server,
                rfc3339(since),
                age(now_ms - since)
            )),
            (Some(l), None) => {
                out.push_str(&format!("  leader        {}  since unknown\n", l.server))
            }
        }
        out.push_str(&format!("  participants  {}\n", e.candidates.len()));
        for (i, c) in e.candidates.iter().enumerate() {
            let role = if i == 0 { "leads" } else { "waits" };
            let joined = c
                .joined_ms
                .map(|j| format!("  joined {}", rfc3339(j)))
                .unwrap_or_default();
            out.push_str(&format!("    {role}  {}  ({}){joined}\n", c.server, c.node));
        }
        out.push_str(&format!("  election      {}\n", e.path));
    }
    out
}

/// Copies every `*.jar` of `from` into `to`; returns the files written.
fn copy_jars(from: &Path, to: &Path) -> Result<Vec<PathBuf>, String> {
    let entries =
        std::fs::read_dir(from).map_err(|e| format!("cannot list {}: {e}", from.display()))?;
    let mut jars: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jar"))
        .collect();
    jars.sort();
    if jars.is_empty() {
        return Err(format!("no jar in {}", from.display()));
    }
    let mut written = Vec::new();
    for jar in jars {
        let Some(name) = jar.file_name() else {
            continue;
        };
        let target = to.join(name);
        std::fs::copy(&jar, &target)
            .map_err(|e| format!("cannot copy {} to {}: {e}", jar.display(), target.display()))?;
        written.push(target);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::election::inspect::{Candidate, Election};
    use crate::scope::Scope;

    #[test]
    fn the_table_says_who_leads_since_when_and_who_waits() {
        let layout = Layout {
            backend: "zookeeper",
            addresses: "zk:2181".into(),
            root: "/kyuubi-podsweep".into(),
            elections: vec![Election {
                scope: Some(Scope::new(None, Some("spark"))),
                path: "/kyuubi-podsweep/latches/c_.n=spark".into(),
                candidates: vec![
                    Candidate {
                        server: "kyuubi-0:10009".into(),
                        node: "_c_a-latch-0000000003".into(),
                        joined_ms: Some(1_000),
                    },
                    Candidate {
                        server: "kyuubi-1:10009".into(),
                        node: "_c_b-latch-0000000004".into(),
                        joined_ms: Some(2_000),
                    },
                ],
                leader_since_ms: Some(1_500),
            }],
            servers: vec![Candidate {
                server: "kyuubi-2:10009".into(),
                node: "_c_c-latch-0000000001".into(),
                joined_ms: Some(500),
            }],
        };
        let t = table(&layout, 1_500 + 192_000);
        assert!(t.contains("servers running: 1 (kyuubi-2:10009)"), "{t}");
        assert_eq!(layout.candidates(), 3, "idle servers count for uninstall");
        assert!(t.contains("scope <default context>:spark"), "{t}");
        assert!(
            t.contains("leader        kyuubi-0:10009  since 1970-01-01T00:00:01.500Z (3m 12s ago)"),
            "{t}"
        );
        assert!(t.contains("participants  2"), "{t}");
        assert!(
            t.contains("waits  kyuubi-1:10009  (_c_b-latch-0000000004)"),
            "{t}"
        );
    }

    #[test]
    fn copy_jars_copies_jars_only_and_names_an_empty_source() {
        let dir = std::env::temp_dir().join(format!("podsweep-copy-jars-{}", std::process::id()));
        let (from, to) = (dir.join("from"), dir.join("to"));
        std::fs::create_dir_all(&from).unwrap();
        std::fs::create_dir_all(&to).unwrap();
        std::fs::write(from.join("a.jar"), b"a").unwrap();
        std::fs::write(from.join("notes.txt"), b"n").unwrap();
        let written = copy_jars(&from, &to).unwrap();
        assert_eq!(written, vec![to.join("a.jar")]);
        assert_eq!(std::fs::read(to.join("a.jar")).unwrap(), b"a");
        let e = copy_jars(&to.join("absent"), &to).unwrap_err();
        assert!(e.contains("absent"), "{e}");
        std::fs::remove_file(from.join("a.jar")).unwrap();
        assert!(copy_jars(&from, &to).unwrap_err().contains("no jar"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
