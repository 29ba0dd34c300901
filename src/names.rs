//! Kubernetes object names, as the API server validates them, and their encoding in URL paths.
//!
//! A namespace is a DNS-1123 label (at most 63 characters of `a-z`, `0-9` and `-`, starting and
//! ending with a letter or digit); a pod name is a DNS-1123 subdomain (at most 253 characters,
//! such labels joined by dots). Anything else cannot name an existing pod, so `observe` refuses
//! it. Names still go into request paths percent-encoded, so no input can change the path.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// Everything but unreserved characters (RFC 3986) is encoded in a path segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Why a string is not a valid Kubernetes name, or `None` if it is one.
fn dns1123_label_problem(s: &str) -> Option<&'static str> {
    if s.is_empty() {
        return Some("must not be empty");
    }
    if s.len() > 63 {
        return Some("must be at most 63 characters");
    }
    let b = s.as_bytes();
    if !b
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    {
        return Some("may only contain lower-case letters, digits and '-'");
    }
    if b[0] == b'-' || b[b.len() - 1] == b'-' {
        return Some("must start and end with a letter or digit");
    }
    None
}

/// Checks a namespace (a DNS-1123 label); the error says what is wrong.
pub fn check_namespace(s: &str) -> Result<(), String> {
    match dns1123_label_problem(s) {
        None => Ok(()),
        Some(p) => Err(format!(
            "{p}: {s:?} is not a Kubernetes namespace (a DNS-1123 label)"
        )),
    }
}

/// Checks a pod name (a DNS-1123 subdomain); the error says what is wrong.
pub fn check_pod_name(s: &str) -> Result<(), String> {
    let problem = if s.len() > 253 {
        Some("must be at most 253 characters")
    } else {
        s.split('.').find_map(dns1123_label_problem)
    };
    match problem {
        None => Ok(()),
        Some(p) => Err(format!(
            "{p}: {s:?} is not a Kubernetes pod name (a DNS-1123 subdomain)"
        )),
    }
}

/// A string as one URL path segment: `/`, `.`-only segments' slashes, `%`, `?`, `#` and every
/// non-ASCII byte are percent-encoded.
pub fn path_segment(s: &str) -> String {
    let encoded = utf8_percent_encode(s, SEGMENT).to_string();
    // "." and ".." are unreserved but mean something in a path: encode them too.
    match encoded.as_str() {
        "." => "%2E".to_owned(),
        ".." => "%2E%2E".to_owned(),
        _ => encoded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_are_dns1123_labels() {
        for ok in ["default", "spark-1", "a", &"x".repeat(63)] {
            assert!(check_namespace(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "x/../kube-system",
            "Spark",
            "-a",
            "a-",
            "a.b",
            "ünï",
            "a b",
            &"x".repeat(64),
        ] {
            assert!(check_namespace(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pod_names_are_dns1123_subdomains() {
        for ok in ["driver-1", "spark.pi-driver", "a", "a.b.c"] {
            assert!(check_pod_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a/b", "..", "a..b", ".a", "A", "p?x=1", "p#f", "p%2F"] {
            assert!(check_pod_name(bad).is_err(), "{bad}");
        }
        assert!(check_pod_name(&"a".repeat(254)).is_err());
    }

    #[test]
    fn path_segments_cannot_escape() {
        assert_eq!(path_segment("default"), "default");
        assert_eq!(path_segment("x/../kube-system"), "x%2F..%2Fkube-system");
        assert_eq!(path_segment(".."), "%2E%2E");
        assert_eq!(path_segment("ü"), "%C3%BC");
        assert_eq!(path_segment("a?b#c%"), "a%3Fb%23c%25");
    }
}
