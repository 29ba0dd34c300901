//! Output of the benches: one JSON object per line, `{"bench": "<name>", ...}`.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Prints `fields` (a JSON object) on one line of stdout with `"bench": name` as its first key.
pub fn line(name: &str, fields: serde_json::Value) {
    let mut out = format!("{{\"bench\":{}", serde_json::Value::from(name));
    if let serde_json::Value::Object(map) = fields {
        for (k, v) in map.iter().filter(|(k, _)| k.as_str() != "bench") {
            out.push(',');
            out.push_str(&serde_json::Value::from(k.as_str()).to_string());
            out.push(':');
            out.push_str(&v.to_string());
        }
    }
    out.push('}');
    println!("{out}");
}

/// Sum of `grpc_server_msg_received_total` from etcd's `/metrics`: every unary request and every
/// stream message (keep-alives included) the server received.
pub fn etcd_grpc_messages(endpoint: &str) -> Option<u64> {
    let hostport = endpoint.strip_prefix("http://")?;
    let mut s = TcpStream::connect(hostport).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET /metrics HTTP/1.0\r\nHost: {hostport}\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    let total: f64 = body
        .lines()
        .filter(|l| l.starts_with("grpc_server_msg_received_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    Some(total as u64)
}

/// `Received:` from the `srvr` four-letter command: packets the ZooKeeper server has received.
pub fn zk_packets_received(port: u16) -> Option<u64> {
    super::zk::four_letter(port, "srvr")?
        .lines()
        .find_map(|l| l.strip_prefix("Received:"))
        .and_then(|v| v.trim().parse().ok())
}

/// Packets ZooKeeper received from each session so far: `recved` of each connection in `cons`,
/// by session id (`0x...`).
pub fn zk_received_by_session(port: u16) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    for line in super::zk::four_letter(port, "cons")
        .unwrap_or_default()
        .lines()
    {
        let fields: Vec<&str> = line.split([',', '(', ')']).map(str::trim).collect();
        let sid = fields.iter().find_map(|f| f.strip_prefix("sid="));
        let recved = fields
            .iter()
            .find_map(|f| f.strip_prefix("recved="))
            .and_then(|v| v.parse::<u64>().ok());
        if let (Some(sid), Some(n)) = (sid, recved) {
            out.insert(sid.to_owned(), n);
        }
    }
    out
}
