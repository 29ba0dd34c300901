//! `scripts/chaos sigkill | expiry | quorum | partition | kerberos`: the Rust half of the fault
//! matrix. Each scenario runs server processes (tests/common/fleet.rs) against real ZooKeeper /
//! etcd processes and our own pods API server, injects its faults, and prints one JSON line
//! `{"chaos": "<name>", "backend": ..., "pods": ..., "delete_requests": ..., "duplicates": ...,
//! "duplicates_within_bound": ..., "leaked": ..., "wrongful": ..., "crashes": ..., <its own
//! figures>, "safe": ..., "broken": [...], "seconds": ..., "smoke": ...}`. The process exits 1 when
//! a safety figure is broken; figures such as failover times are reported, never judged.
//!
//! Arguments: `[--smoke] [NAME ...]` (no name: every scenario).

#[path = "../tests/common/mod.rs"]
#[allow(dead_code)]
mod common;

#[cfg(feature = "kerberos")]
#[path = "chaos/kerberos.rs"]
mod kerberos;

use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::etcd::{EtcdCluster, EtcdServer};
use common::fleet::{min_median_max, Churn, Figures, Fleet};
use common::proxy::Proxy;
use common::zk::{ZkEnsemble, ZkServer};
use podsweep::config::{keys, ETCD_CLIENT_CLASS};
use serde_json::{json, Value};

const NAMES: [&str; 5] = ["sigkill", "expiry", "quorum", "partition", "kerberos"];
/// ZooKeeper session timeout and etcd lease TTL of the fleets.
const TIMEOUT: Duration = Duration::from_secs(2);
/// Time for a request written just before a lease deadline to reach the API, and for clocks.
const SLACK: Duration = Duration::from_millis(300);
const CHURN: Duration = Duration::from_millis(50);
const BACKENDS: [&str; 2] = ["zookeeper", "etcd"];

fn main() {
    common::fleet::child_main();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let named: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    for n in &named {
        if !NAMES.contains(n) {
            eprintln!("chaos: unknown scenario {n} (known: {})", NAMES.join(", "));
            std::process::exit(2);
        }
    }
    let wants = |n: &str| named.is_empty() || named.contains(&n);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut unsafe_lines = 0;
    let mut emit = |name: &str, backend: &str, t0: Instant, fields: Value, broken: Vec<String>| {
        let safe = broken.is_empty();
        if !safe {
            unsafe_lines += 1;
            eprintln!("[chaos] {name} ({backend}): a safety figure is broken: {broken:?}");
        }
        let mut out = format!(
            "{{\"chaos\":{},\"backend\":{}",
            Value::from(name),
            Value::from(backend)
        );
        // The common figures first, in the order; then the scenario's own.
        const COMMON: [&str; 7] = [
            "pods",
            "delete_requests",
            "duplicates",
            "duplicates_within_bound",
            "leaked",
            "wrongful",
            "crashes",
        ];
        if let Value::Object(map) = fields {
            for k in COMMON {
                out.push_str(&format!(
                    ",{}:{}",
                    Value::from(k),
                    map.get(k).unwrap_or(&Value::Null)
                ));
            }
            for (k, v) in map.iter().filter(|(k, _)| !COMMON.contains(&k.as_str())) {
                out.push_str(&format!(",{}:{}", Value::from(k.as_str()), v));
            }
        }
        out.push_str(&format!(
            ",\"safe\":{safe},\"broken\":{},\"seconds\":{:.1},\"smoke\":{smoke}}}",
            json!(broken),
            t0.elapsed().as_secs_f64()
        ));
        println!("{out}");
    };
    for name in NAMES.iter().filter(|n| wants(n)) {
        match *name {
            "sigkill" | "expiry" | "partition" => {
                for backend in BACKENDS {
                    let t0 = Instant::now();
                    let (fields, broken) = match *name {
                        "sigkill" => sigkill(&rt, backend, smoke),
                        "expiry" => expiry(&rt, backend, smoke),
                        _ => partition(&rt, backend, smoke),
                    };
                    emit(name, backend, t0, fields, broken);
                }
            }
            "quorum" => {
                for backend in BACKENDS {
                    let t0 = Instant::now();
                    let (fields, broken) = quorum(&rt, backend, smoke);
                    emit(name, backend, t0, fields, broken);
                }
            }
            "kerberos" => {
                let t0 = Instant::now();
                let (fields, broken) = kerberos_scenario(&rt, smoke);
                emit(name, "zookeeper", t0, fields, broken);
            }
            _ => {}
        }
    }
    std::process::exit(if unsafe_lines == 0 { 0 } else { 1 });
}

#[cfg(feature = "kerberos")]
fn kerberos_scenario(rt: &tokio::runtime::Runtime, smoke: bool) -> (Value, Vec<String>) {
    kerberos::run(rt, smoke)
}

#[cfg(not(feature = "kerberos"))]
fn kerberos_scenario(_rt: &tokio::runtime::Runtime, _smoke: bool) -> (Value, Vec<String>) {
    (
        json!({"pods": 0, "delete_requests": 0, "duplicates": 0, "duplicates_within_bound": true,
               "leaked": 0, "wrongful": 0, "crashes": 0}),
        vec!["this chaos binary was built without the `kerberos` feature (scripts/chaos builds it with it)".into()],
    )
}

pub fn progress(msg: &str) {
    eprintln!("[chaos] {msg}");
}

/// A backend process (or several) kept alive for a scenario, and the HA keys to reach it.
enum Ha {
    Zk(ZkServer),
    Etcd(EtcdServer),
}

impl Ha {
    fn start(backend: &str) -> Ha {
        match backend {
            "zookeeper" => Ha::Zk(ZkServer::start()),
            _ => Ha::Etcd(EtcdServer::start()),
        }
    }

    /// `host:port` a TCP proxy forwards to.
    fn hostport(&self) -> String {
        match self {
            Ha::Zk(z) => z.addr(),
            Ha::Etcd(e) => e.endpoint().trim_start_matches("http://").to_owned(),
        }
    }

    fn conf(&self) -> Vec<(String, String)> {
        let addresses = match self {
            Ha::Zk(z) => z.addr(),
            Ha::Etcd(e) => e.endpoint(),
        };
        ha_conf(self.name(), addresses)
    }

    fn name(&self) -> &'static str {
        match self {
            Ha::Zk(_) => "zookeeper",
            Ha::Etcd(_) => "etcd",
        }
    }
}

/// Kyuubi's HA keys for `backend` at `addresses`, with [`TIMEOUT`].
fn ha_conf(backend: &str, addresses: String) -> Vec<(String, String)> {
    let mut conf = vec![(keys::HA_ADDRESSES.to_owned(), addresses)];
    if backend == "zookeeper" {
        conf.push((
            keys::ZK_SESSION_TIMEOUT.into(),
            TIMEOUT.as_millis().to_string(),
        ));
        conf.push((keys::ZK_CONNECTION_TIMEOUT.into(), "1000".into()));
    } else {
        conf.push((keys::HA_CLIENT_CLASS.into(), ETCD_CLIENT_CLASS.into()));
        conf.push((
            keys::ETCD_ELECTION_LEASE.into(),
            format!("PT{}S", TIMEOUT.as_secs()),
        ));
    }
    conf
}

fn timeouts(backend: &str) -> Value {
    if backend == "zookeeper" {
        json!({"session_timeout_ms": TIMEOUT.as_millis() as u64, "server_tick_ms": 200})
    } else {
        json!({"lease_timeout_ms": TIMEOUT.as_millis() as u64})
    }
}

/// Merges the common figures into `own`; returns the line's fields and what is broken.
fn finish(figures: &Figures, own: Value, mut broken: Vec<String>) -> (Value, Vec<String>) {
    let mut fields = figures.json();
    if let (Value::Object(f), Value::Object(o)) = (&mut fields, own) {
        f.extend(o);
    }
    broken.extend(figures.broken());
    (fields, broken)
}

/// Three servers, one running pod (the scope's election starts with it), a leader.
fn fleet_of_three(
    rt: &tokio::runtime::Runtime,
    ns: &str,
    conf: Vec<(String, String)>,
) -> Arc<Fleet> {
    let fleet = Arc::new(Fleet::new(rt, ns, conf));
    fleet.add_running();
    for _ in 0..3 {
        fleet.spawn();
    }
    fleet
}

fn no_leader(what: &str) -> Vec<String> {
    vec![format!("no leader was elected {what}")]
}

/// How every churn scenario starts: a leader within 30 s (else that is broken), then a pod
/// terminating every [`CHURN`], running for 1.5 s before the first fault.
fn start_churn(fleet: &Arc<Fleet>) -> (Churn, Vec<String>) {
    let mut broken = Vec::new();
    if fleet.wait_leader(&[], Duration::from_secs(30)).is_none() {
        broken.extend(no_leader("at the start"));
    }
    let churn = fleet.churn(CHURN);
    sleep(Duration::from_millis(1500));
    (churn, broken)
}

/// How every churn scenario ends: the churn stopped, the backlog drained (for at most `limit`),
/// the servers shut down; how long the drain took, and the safety figures.
fn end_churn(fleet: &Fleet, churn: Churn, limit: Duration) -> (Duration, Figures) {
    churn.stop();
    let drained = fleet.drain(limit);
    sleep(Duration::from_millis(500));
    fleet.shutdown();
    (drained, fleet.figures())
}

// ------------------------------------------------------------------------------------------------
// sigkill

fn sigkill(rt: &tokio::runtime::Runtime, backend: &str, smoke: bool) -> (Value, Vec<String>) {
    let kills = if smoke { 3 } else { 20 };
    progress(&format!(
        "sigkill ({backend}): 3 server processes, a pod terminates every {} ms, the leader is SIGKILLed {kills} times",
        CHURN.as_millis()
    ));
    let ha = Ha::start(backend);
    let fleet = fleet_of_three(rt, &format!("sigkill-{backend}"), ha.conf());
    let mut failovers = Vec::new();
    let mut no_successor = 0;
    let (churn, mut broken) = start_churn(&fleet);
    for k in 0..kills {
        let Some((leader, _)) = fleet.wait_leader(&[], Duration::from_secs(20)) else {
            no_successor += 1;
            continue;
        };
        fleet.kill(leader);
        let killed_at = Instant::now();
        fleet.spawn();
        match fleet.wait_leader(&[leader], Duration::from_secs(20)) {
            Some((_, waited)) => failovers.push(waited),
            None => no_successor += 1,
        }
        progress(&format!(
            "sigkill ({backend}): kill {}/{kills}: failover {:?}",
            k + 1,
            killed_at.elapsed()
        ));
        // Let the new leader work through the backlog before the next kill.
        sleep(Duration::from_millis(800));
    }
    let (drained, figures) = end_churn(&fleet, churn, Duration::from_secs(30));
    if no_successor > 0 {
        broken.push(format!("{no_successor} kills had no successor within 20 s"));
    }
    let own = json!({
        "servers": 3,
        "timeouts": timeouts(backend),
        "churn_every_ms": CHURN.as_millis() as u64,
        "kills": kills,
        "failover_ms": min_median_max(&failovers),
        "kills_without_successor": no_successor,
        "drain_after_churn_ms": drained.as_millis() as u64,
    });
    finish(&figures, own, broken)
}

// ------------------------------------------------------------------------------------------------
// expiry

fn expiry(rt: &tokio::runtime::Runtime, backend: &str, smoke: bool) -> (Value, Vec<String>) {
    let rounds = if smoke { 2 } else { 20 };
    progress(&format!(
        "expiry ({backend}): the leader is frozen (SIGSTOP) past its {} timeout and thawed, {rounds} times; every other round it is frozen with a DELETE held by the API",
        if backend == "zookeeper" { "session" } else { "lease" }
    ));
    let ha = Ha::start(backend);
    let fleet = fleet_of_three(rt, &format!("expiry-{backend}"), ha.conf());
    let mut failovers = Vec::new();
    let mut after_lapse = 0;
    let mut mid_delete = 0;
    let mut relead_at_thaw = 0;
    let mut written_before_freeze = 0;
    let mut late_ms = 0;
    let (churn, mut broken) = start_churn(&fleet);
    for r in 0..rounds {
        let Some((leader, _)) = fleet.wait_leader(&[], Duration::from_secs(20)) else {
            broken.push(format!("round {r}: no leader"));
            continue;
        };
        let tag = Fleet::tag(leader);
        let held_round = r % 2 == 0;
        if held_round {
            // The leader's next DELETE reaches the API, which does not answer it yet.
            fleet.api.hold_deletes(&tag, true);
            let t = Instant::now();
            while fleet.api.held(&tag) == 0 && t.elapsed() < Duration::from_secs(5) {
                sleep(Duration::from_millis(5));
            }
            if fleet.api.held(&tag) > 0 {
                mid_delete += 1;
            }
        }
        let stop_sent_at = Instant::now();
        fleet.freeze(leader);
        let frozen_at = Instant::now();
        let successor = fleet.wait_leader(&[leader], Duration::from_secs(20));
        match successor {
            Some((_, waited)) => failovers.push(waited),
            None => broken.push(format!(
                "round {r}: no successor while the leader was frozen"
            )),
        }
        // Frozen past the timeout in any case.
        let until = frozen_at + TIMEOUT + SLACK;
        if let Some(d) = until.checked_duration_since(Instant::now()) {
            sleep(d);
        }
        // The held DELETE is answered now, to a process that cannot read it yet.
        fleet.api.hold_deletes(&tag, false);
        sleep(Duration::from_millis(200));
        // Counted from just before the SIGCONT: anything later was written after the thaw.
        let thawed_at = Instant::now();
        fleet.thaw(leader);
        sleep(Duration::from_millis(1500));
        // Its lease lapsed while it was frozen: nothing from it until it leads again.
        let relead = fleet
            .transitions()
            .iter()
            .find(|t| t.server == leader && t.state == "LEADING" && t.at >= thawed_at)
            .map(|t| t.at);
        if relead.is_some() {
            relead_at_thaw += 1;
        }
        let end = relead.unwrap_or_else(Instant::now);
        // A stopped process writes nothing: what arrives while it is frozen was written before
        // the SIGSTOP (with a valid lease) and read by the API a moment later.
        let late: Vec<u64> = fleet
            .api
            .arrivals()
            .iter()
            .filter(|d| d.via == tag && d.arrived >= stop_sent_at && d.arrived < thawed_at)
            .map(|d| (d.arrived - stop_sent_at).as_millis() as u64)
            .collect();
        written_before_freeze += late.len();
        late_ms = late_ms.max(late.iter().copied().max().unwrap_or(0));
        let sent = fleet.deletes_from(leader, thawed_at, end);
        after_lapse += sent;
        progress(&format!(
            "expiry ({backend}): round {}/{rounds}{}: failover {:?}, DELETEs from the thawed server before it led again: {sent}; read by the API after the SIGSTOP was sent: {} (ms after it: {late:?})",
            r + 1,
            if held_round { " (mid-DELETE)" } else { "" },
            successor.map(|s| s.1),
            late.len()
        ));
    }
    let (drained, figures) = end_churn(&fleet, churn, Duration::from_secs(30));
    if after_lapse > 0 {
        broken.push(format!(
            "{after_lapse} DELETEs written by a server after its lease lapsed"
        ));
    }
    let own = json!({
        "servers": 3,
        "timeouts": timeouts(backend),
        "churn_every_ms": CHURN.as_millis() as u64,
        "freezes": rounds,
        "frozen_mid_delete": mid_delete,
        "frozen_for_ms_at_least": (TIMEOUT + SLACK).as_millis() as u64,
        "failover_ms": min_median_max(&failovers),
        "deletes_after_lease_lapsed": after_lapse,
        "deletes_written_before_freeze_read_after": written_before_freeze,
        "deletes_written_before_freeze_read_after_max_ms": late_ms,
        "thawed_server_led_again_within_1_5_s": relead_at_thaw,
        "drain_after_churn_ms": drained.as_millis() as u64,
    });
    finish(&figures, own, broken)
}

// ------------------------------------------------------------------------------------------------
// quorum

/// The backend members of a quorum scenario.
enum Members {
    Zk(ZkEnsemble),
    Etcd(EtcdCluster),
}

impl Members {
    fn stop(&mut self, i: usize) {
        match self {
            Members::Zk(z) => z.stop(i),
            Members::Etcd(e) => e.stop(i),
        }
    }

    fn launch(&mut self, i: usize) {
        match self {
            Members::Zk(z) => z.launch_node(i),
            Members::Etcd(e) => e.restart(i),
        }
    }

    fn wait(&mut self, i: usize) {
        match self {
            Members::Zk(z) => z.wait_node(i),
            Members::Etcd(e) => e.wait_serving(i),
        }
    }

    /// The member that leads the backend's own quorum.
    fn leader(&self) -> Option<usize> {
        match self {
            Members::Zk(z) => (0..z.len()).find(|&i| z.mode(i).as_deref() == Some("leader")),
            Members::Etcd(e) => e.leader(),
        }
    }
}

fn quorum(rt: &tokio::runtime::Runtime, backend: &str, smoke: bool) -> (Value, Vec<String>) {
    let hold = Duration::from_secs(if smoke { 4 } else { 10 });
    progress(&format!(
        "quorum ({backend}): 3 backend members; lose one, lose quorum for {} s, restore{}",
        hold.as_secs(),
        if backend == "etcd" {
            ", freeze the raft leader"
        } else {
            ""
        }
    ));
    let (mut members, addresses) = match backend {
        "zookeeper" => {
            let z = ZkEnsemble::start();
            let a = z.connect_string();
            (Members::Zk(z), a)
        }
        _ => {
            let e = EtcdCluster::start(3);
            let a = e.endpoints();
            (Members::Etcd(e), a)
        }
    };
    let fleet = fleet_of_three(
        rt,
        &format!("quorum-{backend}"),
        ha_conf(backend, addresses),
    );
    let (churn, mut broken) = start_churn(&fleet);

    // 1. One member lost (the backend's own leader): a quorum remains; cleanup goes on.
    let first = members.leader().unwrap_or(0);
    members.stop(first);
    let lost_one_at = Instant::now();
    sleep(hold);
    let deletes_one_lost = fleet.deletes_between(lost_one_at, Instant::now());
    let leader_one_lost = fleet.wait_leader(&[], Duration::from_secs(10)).is_some();
    progress(&format!(
        "quorum ({backend}): one member down: {deletes_one_lost} DELETEs in {} s, a leader: {leader_one_lost}",
        hold.as_secs()
    ));

    // 2. A second member lost: no quorum. The leader's lease lapses within the timeout; after
    //    that no DELETE may be sent.
    let second = (0..3).find(|&i| i != first).unwrap_or(1);
    members.stop(second);
    let lost_quorum_at = Instant::now();
    sleep(hold.max(TIMEOUT * 2));
    let restore_at = Instant::now();
    let without_quorum = fleet.deletes_between(lost_quorum_at + TIMEOUT + SLACK, restore_at);
    let within_lease = fleet.deletes_between(lost_quorum_at, lost_quorum_at + TIMEOUT + SLACK);
    let states_no_quorum: Vec<String> = (0..3).map(|i| fleet.state(i)).collect();
    progress(&format!(
        "quorum ({backend}): no quorum: DELETEs after the lease: {without_quorum}, states {states_no_quorum:?}"
    ));

    // 3. Restore both; a leader again; the backlog drains.
    members.launch(first);
    members.launch(second);
    let restart_at = Instant::now();
    let restored = fleet.wait_leader(&[], Duration::from_secs(60));
    let recovered_ms = restored.map(|_| restart_at.elapsed().as_millis() as u64);
    members.wait(first);
    members.wait(second);
    progress(&format!(
        "quorum ({backend}): restored; leader after {recovered_ms:?} ms"
    ));

    // 4. etcd: the raft leader frozen (SIGSTOP) for a while; the cluster elects another member.
    let mut frozen_fields = json!(null);
    if let Members::Etcd(e) = &mut members {
        sleep(Duration::from_millis(1000));
        let target = e.leader().unwrap_or(0);
        e.freeze(target);
        let frozen_at = Instant::now();
        sleep(hold);
        let deletes_frozen = fleet.deletes_between(frozen_at, Instant::now());
        let leader_during = fleet.leaders();
        e.thaw(target);
        frozen_fields = json!({
            "frozen_member_for_s": hold.as_secs(),
            "deletes_while_member_frozen": deletes_frozen,
            "podsweep_leaders_while_member_frozen": leader_during.len(),
        });
        progress(&format!(
            "quorum ({backend}): raft leader frozen {} s: {deletes_frozen} DELETEs meanwhile",
            hold.as_secs()
        ));
    }
    let (drained, figures) = end_churn(&fleet, churn, Duration::from_secs(40));
    if without_quorum > 0 {
        broken.push(format!(
            "{without_quorum} DELETEs while no quorum was reachable (after the lease)"
        ));
    }
    if restored.is_none() {
        broken.push("no leader after the quorum was restored".into());
    }
    let own = json!({
        "servers": 3,
        "members": 3,
        "timeouts": timeouts(backend),
        "churn_every_ms": CHURN.as_millis() as u64,
        "deletes_with_one_member_down": deletes_one_lost,
        "leader_with_one_member_down": leader_one_lost,
        "no_quorum_ms": (restore_at - lost_quorum_at).as_millis() as u64,
        "deletes_within_lease_after_quorum_loss": within_lease,
        "deletes_without_quorum": without_quorum,
        "states_without_quorum": states_no_quorum,
        "leader_after_restore_ms": recovered_ms,
        "frozen_member": frozen_fields,
        "drain_after_churn_ms": drained.as_millis() as u64,
    });
    finish(&figures, own, broken)
}

// ------------------------------------------------------------------------------------------------
// partition

/// One server cut from the HA backend (it still reaches the API), then a leader cut from the API
/// (the backend still reachable).
fn partition(rt: &tokio::runtime::Runtime, backend: &str, smoke: bool) -> (Value, Vec<String>) {
    let hold = Duration::from_secs(if smoke { 4 } else { 10 });
    let rounds = if smoke { 1 } else { 3 };
    progress(&format!(
        "partition ({backend}): the leader is cut from the HA backend for {} s ({rounds}x), then the leader is cut from the API server for {} s ({rounds}x)",
        hold.as_secs(),
        hold.as_secs()
    ));
    let ha = Ha::start(backend);
    // Every server reaches the backend through a proxy of its own; the API server it shares with
    // the others cuts it off by its token (`PodsApi::cut`).
    let ha_proxies: Vec<Proxy> = (0..3)
        .map(|_| rt.block_on(Proxy::start(&ha.hostport())))
        .collect();
    let fleet = Arc::new(Fleet::new(rt, &format!("partition-{backend}"), Vec::new()));
    fleet.add_running();
    for p in &ha_proxies {
        let addr = match backend {
            "zookeeper" => p.addr.clone(),
            _ => format!("http://{}", p.addr),
        };
        fleet.spawn_with(ha_conf(backend, addr));
    }
    let (churn, mut broken) = start_churn(&fleet);

    // Cut from the backend.
    let mut ha_failovers = Vec::new();
    let mut after_lapse = 0;
    for r in 0..rounds {
        let Some((leader, _)) = fleet.wait_leader(&[], Duration::from_secs(20)) else {
            broken.push(format!("backend cut {r}: no leader"));
            continue;
        };
        ha_proxies[leader].blackhole(true);
        let cut_at = Instant::now();
        match fleet.wait_leader(&[leader], Duration::from_secs(20)) {
            Some((_, w)) => ha_failovers.push(w),
            None => broken.push(format!("backend cut {r}: no successor")),
        }
        let until = cut_at + hold;
        if let Some(d) = until.checked_duration_since(Instant::now()) {
            sleep(d);
        }
        let healed_at = Instant::now();
        // The cut server still reaches the API; after its lease lapsed it must not use it.
        let sent = fleet.deletes_from(leader, cut_at + TIMEOUT + SLACK, healed_at);
        after_lapse += sent;
        ha_proxies[leader].blackhole(false);
        progress(&format!(
            "partition ({backend}): backend cut {}/{rounds}: failover {:?}, DELETEs from the cut server after its lease: {sent}",
            r + 1,
            ha_failovers.last()
        ));
        sleep(Duration::from_millis(1500));
    }

    // Cut from the API: the leader keeps its leadership and cannot delete; nothing is lost.
    let mut api_cut_kept = 0;
    let mut api_recovery = Vec::new();
    for r in 0..rounds {
        let Some((leader, _)) = fleet.wait_leader(&[], Duration::from_secs(20)) else {
            broken.push(format!("API cut {r}: no leader"));
            continue;
        };
        // The API cut alone is no reason to hand over (a leader steps down only after
        // `ha.stepDownAfter`, 2 min, without a completed DELETE).
        fleet.api.cut(&Fleet::tag(leader), true);
        sleep(hold);
        fleet.api.cut(&Fleet::tag(leader), false);
        let healed = Instant::now();
        let same_leader = fleet.leaders() == vec![leader];
        if same_leader {
            api_cut_kept += 1;
        }
        // The backlog of the cut: pods due before the heal are all gone.
        let backlog_done = loop {
            if fleet.overdue(Duration::from_millis(500)) == 0
                || healed.elapsed() > Duration::from_secs(30)
            {
                break healed.elapsed();
            }
            sleep(Duration::from_millis(20));
        };
        api_recovery.push(backlog_done);
        progress(&format!(
            "partition ({backend}): API cut {}/{rounds} of the leader: same leader after the heal: {}, backlog cleared {:?} after the heal",
            r + 1,
            same_leader,
            backlog_done
        ));
    }
    let (drained, figures) = end_churn(&fleet, churn, Duration::from_secs(40));
    drop(fleet);
    if after_lapse > 0 {
        broken.push(format!(
            "{after_lapse} DELETEs from a server cut from the backend after its lease lapsed"
        ));
    }
    let own = json!({
        "servers": 3,
        "timeouts": timeouts(backend),
        "churn_every_ms": CHURN.as_millis() as u64,
        "cut_for_ms": hold.as_millis() as u64,
        "backend_cuts": rounds,
        "backend_cut_failover_ms": min_median_max(&ha_failovers),
        "deletes_after_lease_lapsed": after_lapse,
        "api_cuts": rounds,
        "api_cut_same_leader_after": api_cut_kept,
        "api_cut_backlog_cleared_ms": min_median_max(&api_recovery),
        "drain_after_churn_ms": drained.as_millis() as u64,
    });
    finish(&figures, own, broken)
}
