//! Child processes of a test or bench: the one place that starts them, reads their stdout,
//! signals them and cleans them up.
//!
//! * [`ChildProcess::test`] runs one `#[ignore]`d test of the current test binary in a new process
//!   (the child-process candidates of `tests/zk_election.rs`, `tests/etcd_election.rs`,
//!   `tests/zk_cleanup.rs`); the ignored test body reads its parameters from the environment and
//!   calls [`exit_with_parent`].
//! * [`ChildProcess::exe`] runs the current executable again (a `harness = false` bench such as
//!   the chaos fleet in `tests/common/fleet.rs`).
//!
//! Every stdout line is kept ([`ChildProcess::lines`]); stderr is shown prefixed with `[child]`
//! or dropped. The process is killed (SIGKILL) and reaped on drop.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What happens to a child's stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stderr {
    /// Each line is printed on the parent's stderr with a `[child]` prefix.
    Prefixed,
    /// Shared with the parent as is.
    Inherit,
    Null,
}

pub struct ChildProcess {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl ChildProcess {
    /// Runs the ignored test `name` of this test binary, alone, with `env` added.
    pub fn test(name: &str, env: &[(&str, String)], stderr: Stderr) -> ChildProcess {
        let mut cmd = Command::new(std::env::current_exe().expect("test binary path"));
        cmd.args([
            name,
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ]);
        Self::start(cmd, env, stderr)
    }

    /// Runs this executable again with `args` and `env` added.
    pub fn exe(args: &[String], env: &[(&str, String)], stderr: Stderr) -> ChildProcess {
        let mut cmd = Command::new(std::env::current_exe().expect("own path"));
        cmd.args(args);
        Self::start(cmd, env, stderr)
    }

    fn start(mut cmd: Command, env: &[(&str, String)], stderr: Stderr) -> ChildProcess {
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(match stderr {
                Stderr::Prefixed => Stdio::piped(),
                Stderr::Inherit => Stdio::inherit(),
                Stderr::Null => Stdio::null(),
            })
            .spawn()
            .expect("child process starts");
        let lines = Arc::new(Mutex::new(Vec::new()));
        if let Some(out) = child.stdout.take() {
            let sink = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
                }
            });
        }
        if let Some(err) = child.stderr.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines().map_while(Result::ok) {
                    eprintln!("[child] {line}");
                }
            });
        }
        ChildProcess { child, lines }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every stdout line so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether a stdout line starts with `prefix`.
    pub fn saw(&self, prefix: &str) -> bool {
        self.lines
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|l| l.starts_with(prefix))
    }

    /// The child's stdin (closing it ends a child that called [`exit_with_parent`]).
    pub fn stdin(&mut self) -> Option<&mut ChildStdin> {
        self.child.stdin.as_mut()
    }

    /// Sends `SIG<name>` (`STOP`, `CONT`, `KILL`, ...); panics when `kill` fails.
    pub fn signal(&self, name: &str) {
        assert!(
            signal(self.pid(), name),
            "kill -{name} {} failed",
            self.pid()
        );
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// The exit status, if the process has ended.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends `SIG<name>` to process `pid`; whether `kill` succeeded.
pub fn signal(pid: u32, name: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// In a child: exits when the parent goes away (its end of our stdin closes).
pub fn exit_with_parent() {
    std::thread::spawn(|| {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        std::process::exit(0);
    });
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot find a free port: {e}"))
}

/// Polls `cond` every 20 ms (blocking) until it holds; returns the time waited, or `None` after
/// `within`.
pub fn poll_until(within: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = Instant::now();
    loop {
        if cond() {
            return Some(t0.elapsed());
        }
        if t0.elapsed() > within {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
