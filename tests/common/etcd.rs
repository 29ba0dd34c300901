//! A real, throwaway etcd server for integration tests.
//!
//! [`EtcdServer::start`] runs Debian's `etcd` (3.4) as a single-member cluster on free loopback
//! client and peer ports, with its data directory in a temporary directory and its log limited
//! to errors. The process is killed when the value is dropped. [`EtcdServer::start_tls`] serves
//! clients over TLS with client-certificate authentication; the CA, server and client
//! certificates are generated with rcgen for `127.0.0.1` and `localhost`.
//!
//! Short leases: etcd raises every lease TTL to at least 1.5 election timeouts (rounded up to
//! whole seconds), and on becoming leader it extends every lease by one election timeout. The
//! harness uses `--heartbeat-interval 50 --election-timeout 500`, so leases of 1 s and up are
//! honoured as asked, and a restarted member elects itself within about half a second.
//!
//! [`EtcdServer`] is the etcd side of the election suite (`common::election`): candidates are the
//! keys of an election, sessions the leases.
//!
//! Environment overrides: `PODSWEEP_ETCD` replaces the etcd binary (default `etcd`);
//! `PODSWEEP_ETCD_LOG=1` keeps etcd's log in `<temp dir>/etcd.log`.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use etcd_client::{Certificate, Client, ConnectOptions, GetOptions, Identity, TlsOptions};
use podsweep::config::{EtcdSettings, EtcdTls};
use podsweep::election::etcd::EtcdBackend;
use podsweep::election::Backend;
use podsweep::scope::Scope;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tempfile::TempDir;

use super::election::{Candidate, ElectionServer, NAMESPACE};

/// How long `start` and `restart` wait for the server to serve requests.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
const MEMBER: &str = "podsweep-test";

/// PEM files written for a TLS server.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The CA that signed the server and client certificates.
    pub ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// A CA that signed nothing the server shows: trusting only it must fail the handshake.
    pub other_ca: PathBuf,
}

/// A single-member etcd cluster process.
pub struct EtcdServer {
    client_port: u16,
    peer_port: u16,
    dir: TempDir,
    tls: Option<TlsFiles>,
    child: Option<Child>,
}

impl EtcdServer {
    /// Starts a plain-text server and waits until it serves requests.
    ///
    /// # Panics
    /// If etcd is missing or does not come up in time.
    pub fn start() -> EtcdServer {
        Self::start_with(false)
    }

    /// Starts a server that requires TLS and a client certificate signed by its CA.
    pub fn start_tls() -> EtcdServer {
        Self::start_with(true)
    }

    fn start_with(tls: bool) -> EtcdServer {
        let dir = tempfile::Builder::new()
            .prefix("podsweep-etcd-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let tls = tls.then(|| write_certificates(&dir.path().join("tls")));
        let mut server = EtcdServer {
            client_port: free_port(),
            peer_port: free_port(),
            dir,
            tls,
            child: None,
        };
        server.launch();
        server
    }

    /// `http(s)://127.0.0.1:<client port>`.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
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

    /// Kills the server (SIGKILL) and waits for it; keys and leases stay in the data directory.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again (stopping it first if it runs) on the same ports with the same
    /// data directory, and waits until it serves requests.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }

    /// Connection options a test client needs for this server (TLS identity included).
    pub fn client_options(&self) -> ConnectOptions {
        let options = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
        match &self.tls {
            None => options,
            Some(files) => options.with_tls(client_tls(files, &files.ca)),
        }
    }

    /// A client for inspecting the server from a test.
    pub async fn client(&self) -> Client {
        Client::connect([self.endpoint()], Some(self.client_options()))
            .await
            .unwrap_or_else(|e| panic!("inspection client for {}: {e}", self.endpoint()))
    }

    /// The keys under `prefix` with their values and leases, in create-revision order (in an
    /// election, the first one leads).
    pub async fn keys_under(&self, prefix: &str) -> Vec<Candidate> {
        keys_under(&mut self.client().await, prefix).await
    }

    /// Every lease the server holds (`LeaseLeases`), sorted.
    pub async fn leases(&self) -> Vec<i64> {
        let mut client = self.client().await;
        let got = client.leases().await.expect("lease list");
        let mut ids: Vec<i64> = got.leases().iter().map(|l| l.id()).collect();
        ids.sort_unstable();
        ids
    }

    fn launch(&mut self) {
        let etcd = std::env::var("PODSWEEP_ETCD").unwrap_or_else(|_| "etcd".into());
        let log = std::env::var("PODSWEEP_ETCD_LOG").is_ok_and(|v| v == "1");
        let output = || -> Stdio {
            if !log {
                return Stdio::null();
            }
            let path = self.dir.path().join("etcd.log");
            match fs::OpenOptions::new().create(true).append(true).open(&path) {
                Ok(f) => Stdio::from(f),
                Err(_) => Stdio::null(),
            }
        };
        let client_url = self.endpoint();
        let peer_url = format!("http://127.0.0.1:{}", self.peer_port);
        let mut cmd = Command::new(&etcd);
        cmd.arg("--name")
            .arg(MEMBER)
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("{MEMBER}={peer_url}")])
            .args(["--initial-cluster-state", "new"])
            .args([
                "--initial-cluster-token",
                &format!("podsweep-{}", self.client_port),
            ])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args([
                "--logger",
                "zap",
                "--log-outputs",
                "stderr",
                "--log-level",
                "error",
            ]);
        if let Some(files) = &self.tls {
            cmd.arg("--cert-file")
                .arg(&files.server_cert)
                .arg("--key-file")
                .arg(&files.server_key)
                .arg("--trusted-ca-file")
                .arg(&files.ca)
                .arg("--client-cert-auth");
        }
        let child = cmd
            .stdin(Stdio::null())
            .stdout(output())
            .stderr(output())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run {etcd}: {e} (install Debian's etcd-server or set PODSWEEP_ETCD)")
            });
        self.child = Some(child);
        self.wait_serving();
    }

    /// Polls with a linearizable `get` (it needs an elected leader) until one succeeds.
    fn wait_serving(&mut self) {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    panic!(
                        "etcd exited with {status} at startup (PODSWEEP_ETCD_LOG=1 keeps {:?})",
                        self.dir.path().join("etcd.log")
                    );
                }
            }
            if probe(self.endpoint(), self.client_options()) {
                return;
            }
            if Instant::now() > deadline {
                self.stop();
                panic!(
                    "etcd did not serve at {} within {STARTUP_TIMEOUT:?}",
                    self.endpoint()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The keys under `prefix` with their values and leases, read with `client`, in create-revision
/// order (in an election, the first one leads).
pub async fn keys_under(client: &mut Client, prefix: &str) -> Vec<Candidate> {
    let got = client
        .get(prefix, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap_or_else(|e| panic!("get {prefix}: {e}"));
    let mut kvs: Vec<_> = got.kvs().to_vec();
    kvs.sort_by_key(|kv| kv.create_revision());
    kvs.iter()
        .map(|kv| Candidate {
            key: String::from_utf8_lossy(kv.key()).into_owned(),
            identity: String::from_utf8_lossy(kv.value()).into_owned(),
            owner: kv.lease(),
        })
        .collect()
}

/// One `get` from a helper thread with its own runtime (callers may be inside a runtime).
fn probe(endpoint: String, options: ConnectOptions) -> bool {
    let attempt = thread::spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return false;
        };
        rt.block_on(async move {
            let request = async {
                let mut client = Client::connect([endpoint], Some(options)).await.ok()?;
                client.get("podsweep-probe", None).await.ok()
            };
            matches!(
                tokio::time::timeout(Duration::from_secs(2), request).await,
                Ok(Some(_))
            )
        })
    });
    attempt.join().unwrap_or(false)
}

/// TLS options that present the generated client identity and trust `ca`.
pub fn client_tls(files: &TlsFiles, ca: &Path) -> TlsOptions {
    let read = |p: &Path| fs::read(p).unwrap_or_else(|e| panic!("cannot read {p:?}: {e}"));
    TlsOptions::new()
        .ca_certificate(Certificate::from_pem(read(ca)))
        .identity(Identity::from_pem(
            read(&files.client_cert),
            read(&files.client_key),
        ))
}

/// Generates a CA, a server and a client certificate (and an unrelated CA) into `dir`.
fn write_certificates(dir: &Path) -> TlsFiles {
    fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {dir:?}: {e}"));
    let write = |name: &str, pem: String| -> PathBuf {
        let path = dir.join(name);
        fs::write(&path, pem).unwrap_or_else(|e| panic!("cannot write {path:?}: {e}"));
        path
    };
    let fail = |e: rcgen::Error| -> ! { panic!("certificate generation failed: {e}") };
    let ca = |cn: &str| {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| fail(e));
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let key = KeyPair::generate().unwrap_or_else(|e| fail(e));
        let cert = params.self_signed(&key).unwrap_or_else(|e| fail(e));
        (cert.pem(), Issuer::new(params, key))
    };
    let (ca_pem, issuer) = ca("podsweep test CA");
    let (other_pem, _) = ca("podsweep unrelated CA");
    let leaf = |cn: &str, usage: ExtendedKeyUsagePurpose| {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
                .unwrap_or_else(|e| fail(e));
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap_or_else(|e| fail(e));
        let cert = params.signed_by(&key, &issuer).unwrap_or_else(|e| fail(e));
        (cert.pem(), key.serialize_pem())
    };
    let (server_pem, server_key) = leaf("podsweep etcd", ExtendedKeyUsagePurpose::ServerAuth);
    let (client_pem, client_key) = leaf("podsweep client", ExtendedKeyUsagePurpose::ClientAuth);
    TlsFiles {
        ca: write("ca.pem", ca_pem),
        other_ca: write("other-ca.pem", other_pem),
        server_cert: write("server.pem", server_pem),
        server_key: write("server-key.pem", server_key),
        client_cert: write("client.pem", client_pem),
        client_key: write("client-key.pem", client_key),
    }
}

// ---------------------------------------------------------------------------------------------
// The election suite's server
// ---------------------------------------------------------------------------------------------

/// The settings of the election suite's backends: [`NAMESPACE`], lease TTL `ttl`.
pub fn election_settings(endpoint: &str, ttl: Duration, tls: Option<EtcdTls>) -> EtcdSettings {
    EtcdSettings {
        endpoints: vec![endpoint.to_owned()],
        namespace: NAMESPACE.to_owned(),
        lease_ttl: ttl,
        tls,
    }
}

/// The election name (key prefix) of `scope` in [`NAMESPACE`].
pub fn election_name(scope: &Scope) -> String {
    EtcdBackend::new(election_settings(
        "http://unused:1",
        Duration::from_secs(1),
        None,
    ))
    .election_name(scope)
}

impl ElectionServer for EtcdServer {
    const SESSION: &'static str = "lease";
    const UNREACHABLE: &'static str = "cannot";
    const HANDOFF: Duration = Duration::from_secs(3);
    const FAILOVER_SLACK: Duration = Duration::from_secs(1);

    fn start() -> Self {
        EtcdServer::start_with(false)
    }

    fn address(&self) -> String {
        self.endpoint()
    }

    fn address_on(port: u16) -> String {
        format!("http://127.0.0.1:{port}")
    }

    fn backend(address: &str, timeout: Duration) -> Arc<dyn Backend> {
        Arc::new(EtcdBackend::new(election_settings(address, timeout, None)))
    }

    async fn candidates(&self, scope: &Scope) -> Vec<Candidate> {
        self.keys_under(&format!("{}/", election_name(scope))).await
    }

    /// The elections under the root: `<root>/<scope>/<lease>`.
    async fn scope_names(&self) -> Vec<String> {
        let root = format!("/{NAMESPACE}-podsweep/elections/");
        let mut names: Vec<String> = self
            .keys_under(&root)
            .await
            .into_iter()
            .filter_map(|k| {
                let rest = k.key.strip_prefix(&root)?;
                let (name, lease) = rest.split_once('/')?;
                (!lease.contains('/')).then(|| name.to_owned())
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }

    async fn sessions(&self) -> Vec<i64> {
        self.leases().await
    }

    /// Keys carry leases; a key ends with its lease in hex.
    fn check_keys(found: &[Candidate]) {
        assert!(
            found.iter().all(|k| k.owner != 0),
            "keys carry leases: {found:?}"
        );
        let lease_hex = format!("{:x}", found[0].owner);
        assert!(found[0].key.ends_with(&lease_hex), "{found:?}");
    }
}

pub use super::process::free_port;

// ---------------------------------------------------------------------------------------------
// Cluster
// ---------------------------------------------------------------------------------------------

struct ClusterMember {
    name: String,
    client_port: u16,
    peer_port: u16,
    child: Option<Child>,
    frozen: bool,
}

/// A plain-text etcd cluster of three (or more) members on loopback; every process is killed on
/// drop. Members are numbered from 0. Members can be killed and started again (same data
/// directory), or frozen with SIGSTOP and thawed with SIGCONT.
pub struct EtcdCluster {
    dir: TempDir,
    members: Vec<ClusterMember>,
}

impl EtcdCluster {
    /// Starts `size` members together and returns once every member serves linearizable reads.
    ///
    /// # Panics
    /// If etcd is missing or the cluster does not form in time.
    pub fn start(size: usize) -> EtcdCluster {
        let dir = tempfile::Builder::new()
            .prefix("podsweep-etcd-cluster-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a temporary directory: {e}"));
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < size * 2 {
            let p = free_port();
            if !ports.contains(&p) {
                ports.push(p);
            }
        }
        let members: Vec<ClusterMember> = (0..size)
            .map(|i| ClusterMember {
                name: format!("m{i}"),
                client_port: ports[2 * i],
                peer_port: ports[2 * i + 1],
                child: None,
                frozen: false,
            })
            .collect();
        let mut cluster = EtcdCluster { dir, members };
        for i in 0..size {
            cluster.launch(i);
        }
        for i in 0..size {
            cluster.wait_serving(i);
        }
        cluster
    }

    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// `http://127.0.0.1:<client port>` of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.members[i].client_port)
    }

    /// Every member's endpoint, comma-separated (Kyuubi's `kyuubi.ha.addresses`).
    pub fn endpoints(&self) -> String {
        (0..self.len())
            .map(|i| self.endpoint(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn is_running(&self, i: usize) -> bool {
        self.members[i].child.is_some()
    }

    /// Whether member `i` answers a linearizable read now (it is up and sees a quorum).
    pub fn serves(&self, i: usize) -> bool {
        self.is_running(i)
            && !self.members[i].frozen
            && probe(
                self.endpoint(i),
                ConnectOptions::new().with_connect_timeout(Duration::from_millis(500)),
            )
    }

    /// Kills member `i` (SIGKILL); its data directory stays.
    pub fn stop(&mut self, i: usize) {
        self.thaw(i);
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again from its data directory, without waiting (it serves only once a
    /// quorum of members runs).
    pub fn restart(&mut self, i: usize) {
        assert!(!self.is_running(i), "member {i} is running");
        self.launch(i);
    }

    /// Waits until member `i` serves linearizable reads.
    pub fn wait_serving(&mut self, i: usize) {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(child) = self.members[i].child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.members[i].child = None;
                    panic!(
                        "etcd member {i} exited with {status} (PODSWEEP_ETCD_LOG=1 keeps its log)"
                    );
                }
            }
            if self.serves(i) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "etcd member {i} did not serve within {STARTUP_TIMEOUT:?}"
            );
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGSTOP: the member keeps its sockets open but answers nothing.
    pub fn freeze(&mut self, i: usize) {
        if let Some(child) = &self.members[i].child {
            super::process::signal(child.id(), "STOP");
            self.members[i].frozen = true;
        }
    }

    /// SIGCONT after [`EtcdCluster::freeze`].
    pub fn thaw(&mut self, i: usize) {
        if self.members[i].frozen {
            if let Some(child) = &self.members[i].child {
                super::process::signal(child.id(), "CONT");
            }
            self.members[i].frozen = false;
        }
    }

    /// The member that is the raft leader now, asked through every running member's status.
    pub fn leader(&self) -> Option<usize> {
        let endpoints: Vec<String> = (0..self.len())
            .filter(|&i| self.is_running(i) && !self.members[i].frozen)
            .map(|i| self.endpoint(i))
            .collect();
        let ids: Vec<(usize, String)> = (0..self.len()).map(|i| (i, self.endpoint(i))).collect();
        let attempt = thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async move {
                for ep in endpoints {
                    let status = async {
                        let mut c = Client::connect(
                            [ep.clone()],
                            Some(
                                ConnectOptions::new()
                                    .with_connect_timeout(Duration::from_millis(500)),
                            ),
                        )
                        .await
                        .ok()?;
                        let s = c.status().await.ok()?;
                        Some((s.header()?.member_id(), s.leader()))
                    };
                    let Ok(Some((me, leader))) =
                        tokio::time::timeout(Duration::from_secs(1), status).await
                    else {
                        continue;
                    };
                    if me == leader {
                        return ids.iter().find(|(_, e)| *e == ep).map(|(i, _)| *i);
                    }
                }
                None
            })
        });
        attempt.join().ok().flatten()
    }

    fn launch(&mut self, i: usize) {
        let etcd = std::env::var("PODSWEEP_ETCD").unwrap_or_else(|_| "etcd".into());
        let log = std::env::var("PODSWEEP_ETCD_LOG").is_ok_and(|v| v == "1");
        let member_dir = self.dir.path().join(&self.members[i].name);
        let output = || -> Stdio {
            if !log {
                return Stdio::null();
            }
            let _ = fs::create_dir_all(&member_dir);
            match fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(member_dir.join("etcd.log"))
            {
                Ok(f) => Stdio::from(f),
                Err(_) => Stdio::null(),
            }
        };
        let initial: String = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let m = &self.members[i];
        let client_url = format!("http://127.0.0.1:{}", m.client_port);
        let peer_url = format!("http://127.0.0.1:{}", m.peer_port);
        let child = Command::new(&etcd)
            .arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(member_dir.join("data"))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", "podsweep-cluster"])
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args([
                "--logger",
                "zap",
                "--log-outputs",
                "stderr",
                "--log-level",
                "error",
            ])
            .stdin(Stdio::null())
            .stdout(output())
            .stderr(output())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run {etcd}: {e} (install Debian's etcd-server or set PODSWEEP_ETCD)")
            });
        self.members[i].child = Some(child);
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.stop(i);
        }
    }
}
