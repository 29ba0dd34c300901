//! A real, throwaway ZooKeeper server for integration tests.
//!
//! [`ZkServer::start`] runs Debian's ZooKeeper (`/usr/share/java/zookeeper.jar`, whose manifest
//! brings its own dependencies) as a standalone server on a free loopback port, with a data
//! directory in a temporary directory, a small tick time (so short session timeouts are
//! allowed), no admin server and no logging. The process is killed when the value is dropped.
//!
//! Environment overrides: `PODSWEEP_ZK_CLASSPATH` replaces the class path, `JAVA` the java
//! binary. `PODSWEEP_ZK_LOG=1` keeps ZooKeeper's console log in `<data dir>/zk.log`.
#![allow(dead_code)]

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long `start` and `restart` wait for the server to serve requests.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// Server settings; [`ZkOptions::default`] gives tick 200 ms, sessions 400 ms – 4 s.
#[derive(Clone, Debug)]
pub struct ZkOptions {
    pub tick: Duration,
    /// `minSessionTimeout`; ZooKeeper's default is 2 ticks.
    pub min_session: Duration,
    /// `maxSessionTimeout`; ZooKeeper's default is 20 ticks.
    pub max_session: Duration,
}

impl Default for ZkOptions {
    fn default() -> Self {
        let tick = Duration::from_millis(200);
        ZkOptions {
            tick,
            min_session: tick * 2,
            max_session: tick * 20,
        }
    }
}

/// A standalone ZooKeeper server process.
pub struct ZkServer {
    port: u16,
    dir: TempDir,
    options: ZkOptions,
    child: Option<Child>,
}

impl ZkServer {
    /// Starts a server with [`ZkOptions::default`] and waits until it serves requests.
    ///
    /// # Panics
    /// If java or the ZooKeeper jars are missing, or the server does not come up in time.
    pub fn start() -> ZkServer {
        Self::start_with(ZkOptions::default())
    }

    pub fn start_with(options: ZkOptions) -> ZkServer {
        let dir = tempfile::Builder::new()
            .prefix("podsweep-zk-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let port = free_port();
        let mut server = ZkServer {
            port,
            dir,
            options,
            child: None,
        };
        server.write_config();
        server.launch();
        server
    }

    /// `127.0.0.1:<port>`, usable as a connect string.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The OS process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the server (SIGKILL) and waits for it; sessions survive in the data directory.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port with the same data directory, and waits until
    /// it serves requests. Sessions that were alive get a fresh timeout from the server.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("zoo.cfg")
    }

    fn write_config(&self) {
        let data = self.data_dir();
        fs::create_dir_all(&data).unwrap_or_else(|e| panic!("cannot create {data:?}: {e}"));
        let o = &self.options;
        let cfg = format!(
            "tickTime={}\nminSessionTimeout={}\nmaxSessionTimeout={}\ndataDir={}\n\
             clientPort={}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
             4lw.commands.whitelist=srvr\npreAllocSize=1024\nsnapCount=100000\n\
             autopurge.purgeInterval=0\n",
            o.tick.as_millis(),
            o.min_session.as_millis(),
            o.max_session.as_millis(),
            data.display(),
            self.port,
        );
        let path = self.config_path();
        fs::write(&path, cfg).unwrap_or_else(|e| panic!("cannot write {path:?}: {e}"));
    }

    fn launch(&mut self) {
        let java = std::env::var("JAVA").unwrap_or_else(|_| "java".into());
        let log = std::env::var("PODSWEEP_ZK_LOG").is_ok_and(|v| v == "1");
        let output = |name: &str| -> Stdio {
            if !log {
                return Stdio::null();
            }
            let path = self.dir.path().join(name);
            match fs::OpenOptions::new().create(true).append(true).open(&path) {
                Ok(f) => Stdio::from(f),
                Err(_) => Stdio::null(),
            }
        };
        let child = Command::new(&java)
            .args([
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",
                "-XX:-UsePerfData",
                "-Xms32m",
                "-Xmx128m",
                "-Dzookeeper.admin.enableServer=false",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-Djava.net.preferIPv4Stack=true",
                "-cp",
                &classpath(),
                "org.apache.zookeeper.server.ZooKeeperServerMain",
            ])
            .arg(self.config_path())
            .stdin(Stdio::null())
            .stdout(output("zk.log"))
            .stderr(output("zk.log"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {java}: {e}"));
        self.child = Some(child);
        self.wait_serving();
    }

    /// Polls with the `srvr` four-letter word, which answers "not currently serving" until the
    /// database is loaded, then reports `Mode: standalone`.
    fn wait_serving(&mut self) {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    panic!(
                        "ZooKeeper exited with {status} during startup (set PODSWEEP_ZK_LOG=1 and see {:?})",
                        self.dir.path().join("zk.log")
                    );
                }
            }
            if srvr(self.port).is_some_and(|reply| reply.contains("Mode:")) {
                return;
            }
            if Instant::now() > deadline {
                self.stop();
                panic!(
                    "ZooKeeper did not serve on port {} within {STARTUP_TIMEOUT:?}",
                    self.port
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends `srvr` and returns the reply, if the server answered.
fn srvr(port: u16) -> Option<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream.write_all(b"srvr").ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("cannot find a free port: {e}"))
}

/// The server jar (its manifest `Class-Path` lists its dependencies) plus a silent SLF4J
/// binding; more jars are added only when the manifest is not there to help.
fn classpath() -> String {
    if let Ok(cp) = std::env::var("PODSWEEP_ZK_CLASSPATH") {
        return cp;
    }
    let java = Path::new("/usr/share/java");
    let wanted = [
        "zookeeper.jar",
        "zookeeper-jute.jar",
        "slf4j-api.jar",
        "slf4j-nop.jar",
        "netty-handler.jar",
        "netty-transport.jar",
        "netty-transport-native-epoll.jar",
        "netty-transport-native-unix-common.jar",
        "netty-buffer.jar",
        "netty-codec.jar",
        "netty-resolver.jar",
        "netty-common.jar",
        "metrics-core.jar",
        "snappy-java.jar",
        "commons-cli.jar",
        "commons-io.jar",
    ];
    let jars: Vec<String> = wanted
        .iter()
        .map(|name| java.join(name))
        .filter(|p| p.exists())
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        jars.iter().any(|j| j.ends_with("/zookeeper.jar")),
        "no /usr/share/java/zookeeper.jar: install Debian's zookeeper package or set PODSWEEP_ZK_CLASSPATH"
    );
    jars.join(":")
}
