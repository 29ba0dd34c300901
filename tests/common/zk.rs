//! A real, throwaway ZooKeeper server for integration tests.
//!
//! [`ZkServer::start`] runs Debian's ZooKeeper (`/usr/share/java/zookeeper.jar`, whose manifest
//! brings its own dependencies) as a standalone server on a free loopback port, with a data
//! directory in a temporary directory, a small tick time (so short session timeouts are
//! allowed), no admin server and no logging. The process is killed when the value is dropped.
//!
//! [`ZkEnsemble::start`] runs three such servers as one quorum on loopback (client, quorum and
//! election ports, a `myid` per data directory), so single servers can be killed and started
//! again while the others go on. Every server answers all four-letter words.
//!
//! [`ZkServer`] is the ZooKeeper side of the election suite (`common::election`): candidates are
//! the latch nodes, sessions those the server lists in `cons`.
//!
//! Environment overrides: `PODSWEEP_ZK_CLASSPATH` replaces the class path, `JAVA` the java
//! binary. `PODSWEEP_ZK_LOG=1` keeps ZooKeeper's console log in `<data dir>/zk.log` (one per
//! ensemble member).
#![allow(dead_code)]

use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use podsweep::config::ZkSettings;
use podsweep::election::zookeeper::ZooKeeperBackend;
use podsweep::election::Backend;
use podsweep::scope::Scope;
use tempfile::TempDir;
use zookeeper_client::{Client, Error as ZkError};

use super::election::{Candidate, ElectionServer, NAMESPACE};

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
    /// More `zoo.cfg` lines (e.g. SASL settings).
    pub extra_config: String,
    /// More JVM arguments (`-D...`), e.g. a JAAS file and a krb5.conf.
    pub jvm_args: Vec<String>,
}

impl Default for ZkOptions {
    fn default() -> Self {
        let tick = Duration::from_millis(200);
        ZkOptions {
            tick,
            min_session: tick * 2,
            max_session: tick * 20,
            extra_config: String::new(),
            jvm_args: Vec::new(),
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
             4lw.commands.whitelist=*\npreAllocSize=1024\nsnapCount=100000\n\
             autopurge.purgeInterval=0\n{}",
            o.tick.as_millis(),
            o.min_session.as_millis(),
            o.max_session.as_millis(),
            data.display(),
            self.port,
            o.extra_config,
        );
        let path = self.config_path();
        fs::write(&path, cfg).unwrap_or_else(|e| panic!("cannot write {path:?}: {e}"));
    }

    fn launch(&mut self) {
        let child = spawn_java(
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            &self.config_path(),
            self.dir.path(),
            &self.options.jvm_args,
        );
        self.child = Some(child);
        self.wait_serving();
    }

    /// Polls with the `srvr` four-letter word until the server reports its mode.
    fn wait_serving(&mut self) {
        if let Err(e) = wait_serving(self.port, &mut self.child, self.dir.path()) {
            self.stop();
            panic!("{e}");
        }
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Sends a four-letter word (`srvr`, `cons`, `stat`, ...) and returns the reply, if the server
/// answered.
pub fn four_letter(port: u16, word: &str) -> Option<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    stream.write_all(word.as_bytes()).ok()?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply).ok()?;
    Some(reply)
}

/// `leader`, `follower` or `standalone` once the server serves requests.
pub fn mode(port: u16) -> Option<String> {
    let reply = four_letter(port, "srvr")?;
    reply
        .lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_owned())
}

/// Whether the `cons` reply of the server on `port` lists session `session`.
pub fn serves_session(port: u16, session: i64) -> bool {
    let wanted = format!("sid=0x{:x}", session as u64);
    four_letter(port, "cons").is_some_and(|reply| {
        reply
            .split([',', '(', ')', '\n'])
            .any(|field| field.trim() == wanted)
    })
}

/// The distinct sessions the server on `port` has connections for, from `cons`.
pub fn sessions_served(port: u16) -> Option<Vec<String>> {
    let reply = four_letter(port, "cons")?;
    let mut sids: Vec<String> = reply
        .split([',', '(', ')', '\n'])
        .filter_map(|field| field.trim().strip_prefix("sid=").map(str::to_owned))
        .collect();
    sids.sort();
    sids.dedup();
    Some(sids)
}

/// Starts a ZooKeeper main class with `config`; console output goes to `<log_dir>/zk.log` when
/// `PODSWEEP_ZK_LOG=1`, else nowhere.
fn spawn_java(main_class: &str, config: &Path, log_dir: &Path, extra: &[String]) -> Child {
    let java = std::env::var("JAVA").unwrap_or_else(|_| "java".into());
    let log = std::env::var("PODSWEEP_ZK_LOG").is_ok_and(|v| v == "1");
    let output = || -> Stdio {
        if !log {
            return Stdio::null();
        }
        let path = log_dir.join("zk.log");
        match fs::OpenOptions::new().create(true).append(true).open(&path) {
            Ok(f) => Stdio::from(f),
            Err(_) => Stdio::null(),
        }
    };
    Command::new(&java)
        .args([
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:-UsePerfData",
            "-Xms32m",
            "-Xmx128m",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-Djava.net.preferIPv4Stack=true",
            // Quick quorum elections: notifications are re-sent every 0.2 s to 1 s.
            "-Dzookeeper.fastleader.minNotificationInterval=200",
            "-Dzookeeper.fastleader.maxNotificationInterval=1000",
            "-Dzookeeper.cnxTimeout=1000",
        ])
        .args(extra)
        .args(["-cp", &classpath(), main_class])
        .arg(config)
        .stdin(Stdio::null())
        .stdout(output())
        .stderr(output())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {java}: {e}"))
}

/// Polls with `srvr`, which answers "not currently serving" until the server has loaded its
/// database (and, in a quorum, joined a leader), then reports its mode.
fn wait_serving(port: u16, child: &mut Option<Child>, dir: &Path) -> Result<(), String> {
    let deadline = Instant::now() + STARTUP_TIMEOUT;
    loop {
        if let Some(c) = child.as_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                *child = None;
                return Err(format!(
                    "ZooKeeper on port {port} exited with {status} during startup (set PODSWEEP_ZK_LOG=1 and see {:?})",
                    dir.join("zk.log")
                ));
            }
        }
        if mode(port).is_some() {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "ZooKeeper did not serve on port {port} within {STARTUP_TIMEOUT:?}"
            ));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------------
// Ensemble
// ---------------------------------------------------------------------------------------------

/// One member of a [`ZkEnsemble`].
struct Member {
    client_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// A quorum of three (or more) ZooKeeper servers on loopback; every process is killed on drop.
///
/// Members are numbered from 0; member `i` has `myid` `i + 1`.
pub struct ZkEnsemble {
    dir: TempDir,
    members: Vec<Member>,
}

impl ZkEnsemble {
    /// Three servers with [`ZkOptions::default`], started together; returns when all serve.
    ///
    /// # Panics
    /// If java or the ZooKeeper jars are missing, or the quorum does not form in time.
    pub fn start() -> ZkEnsemble {
        Self::start_with(3, ZkOptions::default())
    }

    pub fn start_with(size: usize, options: ZkOptions) -> ZkEnsemble {
        let dir = tempfile::Builder::new()
            .prefix("podsweep-zk-ensemble-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < size * 3 {
            let p = free_port();
            if !ports.contains(&p) {
                ports.push(p);
            }
        }
        let servers: String = (0..size)
            .map(|i| {
                format!(
                    "server.{}=127.0.0.1:{}:{}\n",
                    i + 1,
                    ports[size + 2 * i],
                    ports[size + 2 * i + 1]
                )
            })
            .collect();
        let mut members = Vec::new();
        for (i, &client_port) in ports.iter().enumerate().take(size) {
            let member_dir = dir.path().join(format!("zk{}", i + 1));
            let data = member_dir.join("data");
            fs::create_dir_all(&data).unwrap_or_else(|e| panic!("cannot create {data:?}: {e}"));
            fs::write(data.join("myid"), format!("{}\n", i + 1))
                .unwrap_or_else(|e| panic!("cannot write myid: {e}"));
            let o = &options;
            let cfg = format!(
                "tickTime={}\ninitLimit=50\nsyncLimit=5\nminSessionTimeout={}\n\
                 maxSessionTimeout={}\ndataDir={}\nclientPort={client_port}\n\
                 clientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
                 4lw.commands.whitelist=*\npreAllocSize=1024\nsnapCount=100000\n\
                 autopurge.purgeInterval=0\nreconfigEnabled=false\n{servers}",
                o.tick.as_millis(),
                o.min_session.as_millis(),
                o.max_session.as_millis(),
                data.display(),
            );
            let path = member_dir.join("zoo.cfg");
            fs::write(&path, cfg).unwrap_or_else(|e| panic!("cannot write {path:?}: {e}"));
            members.push(Member {
                client_port,
                dir: member_dir,
                child: None,
            });
        }
        let mut ensemble = ZkEnsemble { dir, members };
        for i in 0..size {
            ensemble.launch_node(i);
        }
        for i in 0..size {
            ensemble.wait_node(i);
        }
        ensemble
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// `127.0.0.1:<p1>,127.0.0.1:<p2>,...`: every member.
    pub fn connect_string(&self) -> String {
        (0..self.len())
            .map(|i| self.addr(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The client address of member `i` alone.
    pub fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.members[i].client_port)
    }

    pub fn client_port(&self, i: usize) -> u16 {
        self.members[i].client_port
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// `leader` or `follower` while member `i` serves; `None` while it is down or looking.
    pub fn mode(&self, i: usize) -> Option<String> {
        mode(self.members[i].client_port)
    }

    /// The member whose connections include `session`, asked with `cons`.
    pub fn member_serving(&self, session: i64) -> Option<usize> {
        (0..self.len())
            .find(|&i| self.is_running(i) && serves_session(self.client_port(i), session))
    }

    /// Kills member `i` (SIGKILL) and waits for the process; its data directory stays.
    pub fn stop(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again (it must be stopped) and waits until it serves, which needs a
    /// quorum of running members.
    pub fn start_node(&mut self, i: usize) {
        self.launch_node(i);
        self.wait_node(i);
    }

    /// Starts member `i` without waiting; see [`ZkEnsemble::wait_node`].
    pub fn launch_node(&mut self, i: usize) {
        assert!(!self.is_running(i), "member {i} is running");
        let m = &mut self.members[i];
        m.child = Some(spawn_java(
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            &m.dir.join("zoo.cfg"),
            &m.dir,
            &[],
        ));
    }

    /// Waits until member `i` serves requests.
    pub fn wait_node(&mut self, i: usize) {
        let m = &mut self.members[i];
        if let Err(e) = wait_serving(m.client_port, &mut m.child, &m.dir) {
            for j in 0..self.members.len() {
                self.stop(j);
            }
            panic!("{e}");
        }
    }
}

impl Drop for ZkEnsemble {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.stop(i);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Inspection
// ---------------------------------------------------------------------------------------------

/// One latch node: name, data (the candidate's identity), owning session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatchNode {
    pub name: String,
    pub identity: String,
    pub owner: i64,
}

/// A plain client for inspection, without auth.
pub async fn inspector(addr: &str) -> Client {
    Client::connector()
        .with_session_timeout(Duration::from_secs(4))
        .connect(addr)
        .await
        .expect("inspection client connects")
}

/// The latch nodes of `dir`, in sequence order, read with a separate client.
pub async fn latch_nodes(addr: &str, dir: &str) -> Vec<LatchNode> {
    latch_nodes_with(&inspector(addr).await, dir).await
}

/// The latch nodes of `dir`, in sequence order, read with `client`.
pub async fn latch_nodes_with(client: &Client, dir: &str) -> Vec<LatchNode> {
    let names = match client.list_children(dir).await {
        Ok(names) => names,
        Err(ZkError::NoNode) => Vec::new(),
        Err(e) => panic!("list {dir}: {e}"),
    };
    let mut nodes = Vec::new();
    for name in names {
        match client.get_data(&format!("{dir}/{name}")).await {
            Ok((data, stat)) => nodes.push(LatchNode {
                identity: String::from_utf8_lossy(&data).into_owned(),
                owner: stat.ephemeral_owner,
                name,
            }),
            Err(ZkError::NoNode) => {}
            Err(e) => panic!("get {dir}/{name}: {e}"),
        }
    }
    nodes.sort_by_key(|n| n.name.rsplit('-').next().unwrap_or("").to_owned());
    nodes
}

/// Waits until `dir` holds exactly `n` latch nodes.
pub async fn wait_contenders(addr: &str, dir: &str, n: usize) -> Vec<LatchNode> {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let nodes = latch_nodes(addr, dir).await;
        if nodes.len() == n {
            return nodes;
        }
        assert!(
            Instant::now() < deadline,
            "expected {n} latch nodes in {dir}, got {nodes:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The election suite's server
// ---------------------------------------------------------------------------------------------

/// The settings of the election suite's backends: [`NAMESPACE`], session timeout `session`.
pub fn election_settings(addr: &str, session: Duration) -> ZkSettings {
    ZkSettings {
        addresses: addr.to_owned(),
        namespace: NAMESPACE.to_owned(),
        session_timeout: session,
        connection_timeout: Duration::from_millis(15_000),
        ..ZkSettings::default()
    }
}

/// The latch directory of `scope` in [`NAMESPACE`].
pub fn latch_dir(scope: &Scope) -> String {
    ZooKeeperBackend::new(election_settings("unused:1", Duration::from_secs(1))).latch_dir(scope)
}

impl ElectionServer for ZkServer {
    const SESSION: &'static str = "session";
    const UNREACHABLE: &'static str = "cannot connect";
    const HANDOFF: Duration = Duration::from_secs(5);
    const FAILOVER_SLACK: Duration = Duration::from_secs(5);

    fn start() -> Self {
        ZkServer::start_with(ZkOptions::default())
    }

    fn address(&self) -> String {
        self.addr()
    }

    fn address_on(port: u16) -> String {
        format!("127.0.0.1:{port}")
    }

    fn backend(address: &str, timeout: Duration) -> Arc<dyn Backend> {
        Arc::new(ZooKeeperBackend::new(election_settings(address, timeout)))
    }

    async fn candidates(&self, scope: &Scope) -> Vec<Candidate> {
        latch_nodes(&self.addr(), &latch_dir(scope))
            .await
            .into_iter()
            .map(|n| Candidate {
                key: n.name,
                identity: n.identity,
                owner: n.owner,
            })
            .collect()
    }

    /// The children of the latch root.
    async fn scope_names(&self) -> Vec<String> {
        let root = format!("/{NAMESPACE}-podsweep/latches");
        let inspect = inspector(&self.addr()).await;
        let mut scopes = inspect.list_children(&root).await.expect("root exists");
        scopes.sort();
        scopes
    }

    /// The sessions of the server's connections (`cons`).
    async fn sessions(&self) -> Vec<i64> {
        let sids = sessions_served(self.port).unwrap_or_default();
        let mut ids: Vec<i64> = sids
            .iter()
            .map(|sid| {
                u64::from_str_radix(sid.trim_start_matches("0x"), 16)
                    .unwrap_or_else(|e| panic!("session id {sid}: {e}")) as i64
            })
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Curator's LeaderLatch layout: `_c_<uuid>-latch-<seq>`, data = participant id.
    fn check_keys(found: &[Candidate]) {
        assert!(
            found
                .iter()
                .all(|n| n.key.starts_with("_c_") && n.key.contains("-latch-")),
            "{found:?}"
        );
    }
}

pub use super::process::free_port;

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
