//! Field selectors of the pods API server (`common::pods_api`): terms `status.phase=VALUE` and
//! `status.phase!=VALUE`, comma-separated (all must hold), as a real API server reads them on
//! pods; any other field is refused, as a real one refuses a field it does not index.

#![allow(dead_code)]

use serde_json::Value;

/// Whether `pod` matches `fields`; `Err` names a term the server does not serve.
pub fn matches(fields: &str, pod: &Value) -> Result<bool, String> {
    let mut all = true;
    for term in fields.split(',').filter(|t| !t.is_empty()) {
        let (key, want, equal) = match term.split_once("!=") {
            Some((k, v)) => (k, v, false),
            None => match term.split_once('=') {
                Some((k, v)) => (k.trim_end_matches('='), v, true),
                None => return Err(format!("bad field selector term {term:?}")),
            },
        };
        let got = match key {
            "status.phase" => pod["status"]["phase"].as_str().unwrap_or(""),
            "metadata.name" => pod["metadata"]["name"].as_str().unwrap_or(""),
            _ => return Err(format!("field label not supported: {key}")),
        };
        all &= (got == want) == equal;
    }
    Ok(all)
}
