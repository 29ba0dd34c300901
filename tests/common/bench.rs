//! Output of the benches: one JSON object per line, `{"bench": "<name>", ...}`.

#![allow(dead_code)]

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
