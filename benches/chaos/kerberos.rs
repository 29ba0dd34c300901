//! `scripts/chaos kerberos`: ZooKeeper SASL/GSSAPI against a real MIT KDC on loopback.
//!
//! A realm `PODSWEEP.TEST` is created in a temporary directory (`kdb5_util create`), with a
//! service principal `zookeeper/localhost` and a client principal `kyuubi/localhost`, each with
//! a keytab (`kadmin.local ktadd`); `krb5kdc` serves it on a free loopback port. Debian's
//! ZooKeeper runs with a JAAS `Server` section (its keytab), the SASL authentication provider and
//! `sessionRequireClientSASLAuth`, so a session that did not authenticate is closed. The client's
//! ticket cache is kept as Kyuubi keeps it: `kinit -kt <keytab> <principal>` into the file named
//! by `KRB5CCNAME`, and the server processes are given `KRB5CCNAME` and Kyuubi's keys
//! (`kyuubi.ha.zookeeper.auth.type=KERBEROS`, `...auth.principal`, `...auth.keytab`,
//! `...auth.serverPrincipal`).
//!
//! Checked: two servers with the ticket elect one leader through their Kerberized sessions and
//! the leader's DELETEs reach the API (pods are cleaned); a third server whose `KRB5CCNAME` names
//! an empty cache never leads, and its status names the cause.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use podsweep::config::keys;
use serde_json::{json, Value};

use super::common::etcd::free_port;
use super::common::fleet::Fleet;
use super::common::zk::{ZkOptions, ZkServer};
use super::{finish, progress};

const REALM: &str = "PODSWEEP.TEST";
const SERVICE: &str = "zookeeper/localhost";
const CLIENT: &str = "kyuubi/localhost";

struct Kdc {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Drop for Kdc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Kdc {
    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "KRB5_CONFIG".into(),
                self.path("krb5.conf").display().to_string(),
            ),
            (
                "KRB5_KDC_PROFILE".into(),
                self.path("kdc.conf").display().to_string(),
            ),
        ]
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<String, String> {
        let out = Command::new(program)
            .args(args)
            .envs(self.env())
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                format!("cannot run {program}: {e} (scripts/setup kerberos installs it)")
            })?;
        if !out.status.success() {
            return Err(format!(
                "{program} {args:?} failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A realm with the two principals and their keytabs, served on a free port.
    fn start() -> Result<Kdc, String> {
        let dir = tempfile::Builder::new()
            .prefix("podsweep-kdc-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let port = free_port();
        let d = dir.path().display().to_string();
        let write = |name: &str, text: String| fs::write(dir.path().join(name), text);
        write(
            "krb5.conf",
            format!(
                "[libdefaults]\n default_realm = {REALM}\n dns_lookup_kdc = false\n \
                 dns_lookup_realm = false\n dns_canonicalize_hostname = false\n rdns = false\n \
                 udp_preference_limit = 1\n ticket_lifetime = 1h\n\
                 [realms]\n {REALM} = {{\n  kdc = 127.0.0.1:{port}\n }}\n\
                 [domain_realm]\n localhost = {REALM}\n .localhost = {REALM}\n"
            ),
        )
        .map_err(|e| e.to_string())?;
        write(
            "kdc.conf",
            format!(
                "[kdcdefaults]\n kdc_ports = {port}\n kdc_tcp_ports = {port}\n\
                 [realms]\n {REALM} = {{\n  database_name = {d}/principal\n  \
                 key_stash_file = {d}/stash\n  acl_file = {d}/kadm5.acl\n  \
                 supported_enctypes = aes256-cts-hmac-sha1-96:normal aes128-cts-hmac-sha1-96:normal\n  \
                 max_life = 1h\n }}\n[logging]\n kdc = FILE:{d}/kdc.log\n"
            ),
        )
        .map_err(|e| e.to_string())?;
        write("kadm5.acl", String::new()).map_err(|e| e.to_string())?;
        let mut kdc = Kdc { dir, child: None };
        kdc.run(
            "kdb5_util",
            &["create", "-s", "-r", REALM, "-P", "podsweep-master"],
        )?;
        for (principal, keytab) in [(SERVICE, "zookeeper.keytab"), (CLIENT, "kyuubi.keytab")] {
            let kt = kdc.path(keytab).display().to_string();
            kdc.run(
                "kadmin.local",
                &[
                    "-r",
                    REALM,
                    "-q",
                    &format!("addprinc -randkey {principal}@{REALM}"),
                ],
            )?;
            kdc.run(
                "kadmin.local",
                &[
                    "-r",
                    REALM,
                    "-q",
                    &format!("ktadd -k {kt} {principal}@{REALM}"),
                ],
            )?;
        }
        let child = Command::new("krb5kdc")
            .args(["-n", "-r", REALM])
            .envs(kdc.env())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot run krb5kdc: {e} (scripts/setup kerberos installs it)"))?;
        kdc.child = Some(child);
        // Serving once a TCP connection is accepted.
        let t0 = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if t0.elapsed() > Duration::from_secs(20) {
                return Err("krb5kdc did not listen within 20 s".into());
            }
            sleep(Duration::from_millis(50));
        }
        Ok(kdc)
    }

    /// `kinit -kt`: a ticket for `CLIENT` into the file cache `cache`, as Kyuubi's kinit service
    /// keeps it.
    fn kinit(&self, cache: &Path) -> Result<(), String> {
        let kt = self.path("kyuubi.keytab").display().to_string();
        let cc = format!("FILE:{}", cache.display());
        self.run(
            "kinit",
            &["-kt", &kt, "-c", &cc, &format!("{CLIENT}@{REALM}")],
        )?;
        self.run("klist", &["-c", &cc]).map(|_| ())
    }
}

/// A ZooKeeper server that requires SASL (Kerberos) from every client.
fn kerberized_zookeeper(kdc: &Kdc) -> Result<ZkServer, String> {
    let jaas = kdc.path("zookeeper-jaas.conf");
    fs::write(
        &jaas,
        format!(
            "Server {{\n  com.sun.security.auth.module.Krb5LoginModule required\n  \
             useKeyTab=true\n  keyTab=\"{}\"\n  storeKey=true\n  useTicketCache=false\n  \
             principal=\"{SERVICE}@{REALM}\";\n}};\n",
            kdc.path("zookeeper.keytab").display()
        ),
    )
    .map_err(|e| e.to_string())?;
    let options = ZkOptions {
        extra_config: "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n\
                       sessionRequireClientSASLAuth=true\nrequireClientAuthScheme=sasl\n\
                       enforce.auth.enabled=true\nenforce.auth.schemes=sasl\n"
            .into(),
        jvm_args: vec![
            format!("-Djava.security.auth.login.config={}", jaas.display()),
            format!("-Djava.security.krb5.conf={}", kdc.path("krb5.conf").display()),
            "-Dzookeeper.authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider".into(),
            "-Dzookeeper.sessionRequireClientSASLAuth=true".into(),
        ],
        ..ZkOptions::default()
    };
    Ok(ZkServer::start_with(options))
}

pub fn run(rt: &tokio::runtime::Runtime, smoke: bool) -> (Value, Vec<String>) {
    let pods_to_clean = if smoke { 20 } else { 200 };
    progress("kerberos: an MIT KDC on loopback, a ZooKeeper that requires SASL/GSSAPI, 2 servers with a ticket cache from kinit -kt, 1 with an empty cache, 1 without SASL");
    let empty = || {
        (
            json!({"pods": 0, "delete_requests": 0, "duplicates": 0, "duplicates_within_bound": true,
                   "leaked": 0, "wrongful": 0, "crashes": 0}),
            Vec::new(),
        )
    };
    let kdc = match Kdc::start() {
        Ok(k) => k,
        Err(e) => {
            let (f, mut b) = empty();
            b.push(format!("the KDC did not start: {e}"));
            return (f, b);
        }
    };
    let cache = kdc.path("krb5cc_kyuubi");
    if let Err(e) = kdc.kinit(&cache) {
        let (f, mut b) = empty();
        b.push(format!("kinit failed: {e}"));
        return (f, b);
    }
    let zk = match kerberized_zookeeper(&kdc) {
        Ok(z) => z,
        Err(e) => {
            let (f, mut b) = empty();
            b.push(format!("ZooKeeper did not start: {e}"));
            return (f, b);
        }
    };
    let conf = vec![
        (keys::HA_ADDRESSES.to_owned(), zk.addr()),
        (keys::ZK_SESSION_TIMEOUT.into(), "4000".into()),
        (keys::ZK_AUTH_TYPE.into(), "KERBEROS".into()),
        (keys::ZK_AUTH_PRINCIPAL.into(), format!("{CLIENT}@{REALM}")),
        (
            keys::ZK_AUTH_KEYTAB.into(),
            kdc.path("kyuubi.keytab").display().to_string(),
        ),
        (
            keys::ZK_AUTH_SERVER_PRINCIPAL.into(),
            format!("{SERVICE}@{REALM}"),
        ),
    ];
    let mut env = kdc.env();
    env.push(("KRB5CCNAME".into(), format!("FILE:{}", cache.display())));
    let mut no_ticket_env = kdc.env();
    no_ticket_env.push((
        "KRB5CCNAME".into(),
        format!("FILE:{}", kdc.path("krb5cc_empty").display()),
    ));
    let fleet = Arc::new(Fleet::new(rt, "kerberos", conf.clone()));
    fleet.add_running();
    let with_ticket = [
        fleet.spawn_full(conf.clone(), &env),
        fleet.spawn_full(conf.clone(), &env),
    ];
    let without = fleet.spawn_full(conf, &no_ticket_env);
    // And one without SASL at all: the server must refuse its session.
    let plain_conf = vec![
        (keys::HA_ADDRESSES.to_owned(), zk.addr()),
        (keys::ZK_SESSION_TIMEOUT.into(), "4000".into()),
    ];
    let plain = fleet.spawn_full(plain_conf, &[]);
    let mut broken = Vec::new();
    let elected = fleet.wait_leader(&[], Duration::from_secs(40));
    match elected {
        Some((l, _)) if with_ticket.contains(&l) => {}
        Some((l, _)) => broken.push(format!("server-{l}, without a ticket, leads")),
        None => broken.push(format!(
            "no leader through Kerberized sessions within 40 s (reasons: {:?})",
            with_ticket
                .iter()
                .map(|&i| fleet.reason(i))
                .collect::<Vec<_>>()
        )),
    }
    for _ in 0..pods_to_clean {
        fleet.add_terminated();
        sleep(Duration::from_millis(10));
    }
    let drained = fleet.drain(Duration::from_secs(30));
    // The failover through a Kerberized session: the leader is killed, the other one takes over.
    let mut failover_ms = None;
    if let Some((l, _)) = elected {
        fleet.kill(l);
        let other = with_ticket.iter().copied().find(|&s| s != l);
        if let Some((next, waited)) = fleet.wait_leader(&[l], Duration::from_secs(30)) {
            failover_ms = Some(waited.as_millis() as u64);
            if Some(next) != other {
                broken.push(format!("after the kill, server-{next} leads"));
            }
        } else {
            broken.push("no failover through the Kerberized session".into());
        }
        for _ in 0..pods_to_clean / 4 {
            fleet.add_terminated();
        }
        fleet.drain(Duration::from_secs(30));
    }
    sleep(Duration::from_millis(300));
    let no_ticket_state = fleet.state(without);
    let no_ticket_reason = fleet.reason(without);
    let led_without_ticket = fleet
        .transitions()
        .iter()
        .any(|t| t.server == without && t.state == "LEADING");
    if led_without_ticket {
        broken.push("the server without a ticket led".into());
    }
    let plain_led = fleet
        .transitions()
        .iter()
        .any(|t| t.server == plain && t.state == "LEADING");
    let plain_reason = fleet.reason(plain);
    if plain_led {
        broken.push("a server without SASL led: ZooKeeper did not require authentication".into());
    }
    let lower = no_ticket_reason.to_ascii_lowercase();
    let clear = ["kerberos", "gssapi", "sasl", "credential", "ticket", "krb5"]
        .iter()
        .any(|w| lower.contains(w));
    fleet.shutdown();
    let figures = fleet.figures();
    let deletes_by_leaders: usize = with_ticket
        .iter()
        .map(|&s| {
            fleet
                .api
                .arrivals()
                .iter()
                .filter(|d| d.via == Fleet::tag(s))
                .count()
        })
        .sum();
    if deletes_by_leaders == 0 {
        broken.push("no DELETE was sent by a Kerberized leader".into());
    }
    let own = json!({
        "servers": 4,
        "realm": REALM,
        "server_principal": format!("{SERVICE}@{REALM}"),
        "client_principal": format!("{CLIENT}@{REALM}"),
        "ticket_cache": "FILE cache from kinit -kt, named by KRB5CCNAME",
        "zookeeper_requires_sasl": true,
        "elected_in_ms": elected.map(|(_, w)| w.as_millis() as u64),
        "deletes_by_kerberized_leaders": deletes_by_leaders,
        "drain_ms": drained.as_millis() as u64,
        "failover_ms": failover_ms,
        "no_ticket_server_led": led_without_ticket,
        "no_ticket_server_state": no_ticket_state,
        "no_ticket_server_reason": no_ticket_reason,
        "no_ticket_reason_names_the_cause": clear,
        "no_sasl_server_led": plain_led,
        "no_sasl_server_reason": plain_reason,
    });
    if !clear {
        broken.push("the server without a ticket does not say why it cannot join".into());
    }
    finish(&figures, own, broken)
}
