//! A cleanup scope: Kyuubi's `KubernetesInfo(context, namespace)`.
//!
//! Each scope has its own election, tracker, deadline queue and sweeper, so two scopes may be led
//! by two different servers. Both parts are optional, exactly as in Kyuubi: `(None, None)` and
//! `(None, Some("default"))` are different scopes even if they reach the same namespace.

use std::fmt;

/// Kyuubi's `KubernetesInfo(context, namespace)`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope {
    pub context: Option<String>,
    pub namespace: Option<String>,
}

impl Scope {
    /// Builds a scope; empty strings count as absent, as in Kyuubi's init-list parsing.
    pub fn new(context: Option<&str>, namespace: Option<&str>) -> Self {
        let norm = |s: Option<&str>| s.filter(|v| !v.is_empty()).map(str::to_owned);
        Scope {
            context: norm(context),
            namespace: norm(namespace),
        }
    }

    /// One path segment that is safe as a ZooKeeper node name or an etcd key part, for any
    /// context or namespace string (e.g. `arn:aws:eks:us-east-1:123:cluster/prod`).
    ///
    /// The encoding is injective: `c` + part + `.n` + part, where an absent part is `_` and a
    /// present one is `=` followed by its bytes with everything outside `[A-Za-z0-9-]`
    /// percent-encoded (so `/`, `.`, `%` and `_` never appear raw).
    pub fn encoded(&self) -> String {
        let mut out = String::with_capacity(8 + self.len_hint());
        out.push('c');
        encode_part(&mut out, self.context.as_deref());
        out.push_str(".n");
        encode_part(&mut out, self.namespace.as_deref());
        out
    }

    /// The scope an [`Scope::encoded`] segment names, or `None` when `segment` is not one
    /// (e.g. a node an operator created by hand).
    pub fn decode(segment: &str) -> Option<Scope> {
        let rest = segment.strip_prefix('c')?;
        // `.` never appears raw inside a part, so the first `.n` ends the context.
        let (context, namespace) = rest.split_once(".n")?;
        Some(Scope {
            context: decode_part(context)?,
            namespace: decode_part(namespace)?,
        })
    }

    fn len_hint(&self) -> usize {
        self.context.as_ref().map_or(0, String::len)
            + self.namespace.as_ref().map_or(0, String::len)
    }
}

fn encode_part(out: &mut String, part: Option<&str>) {
    match part {
        None => out.push('_'),
        Some(s) => {
            out.push('=');
            for b in s.bytes() {
                if b.is_ascii_alphanumeric() || b == b'-' {
                    out.push(b as char);
                } else {
                    out.push_str(&format!("%{b:02X}"));
                }
            }
        }
    }
}

/// One part of [`Scope::encoded`]: `_` (absent) or `=` and the percent-encoded bytes.
fn decode_part(part: &str) -> Option<Option<String>> {
    if part == "_" {
        return Some(None);
    }
    let body = part.strip_prefix('=')?.as_bytes();
    let mut out = Vec::with_capacity(body.len());
    let mut i = 0;
    while i < body.len() {
        match body[i] {
            b'%' => {
                let hex = std::str::from_utf8(body.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b if b.is_ascii_alphanumeric() || b == b'-' => {
                out.push(b);
                i += 1;
            }
            _ => return None,
        }
    }
    String::from_utf8(out).ok().map(Some)
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}",
            self.context.as_deref().unwrap_or("<default context>"),
            self.namespace.as_deref().unwrap_or("<default namespace>")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_parts_are_absent() {
        assert_eq!(Scope::new(Some(""), Some("")), Scope::new(None, None));
    }

    #[test]
    fn encoding_is_path_safe_and_injective() {
        let cases = [
            Scope::new(None, None),
            Scope::new(Some("_"), None),
            Scope::new(None, Some("default")),
            Scope::new(
                Some("arn:aws:eks:us-east-1:123:cluster/prod"),
                Some("spark"),
            ),
            Scope::new(Some("a.n=b"), None),
            Scope::new(Some("a"), Some("n=b")),
            Scope::new(Some(".."), Some(".")),
            Scope::new(Some("ünï"), Some("x y")),
        ];
        let mut seen = std::collections::HashSet::new();
        for s in &cases {
            let e = s.encoded();
            assert!(!e.contains('/'), "{e}");
            assert!(e != "." && e != "..");
            assert!(e.is_ascii());
            assert!(seen.insert(e.clone()), "collision on {e}");
            assert_eq!(Scope::decode(&e).as_ref(), Some(s), "{e} decodes back");
        }
        for not_a_scope in [
            "", "latch-", "c", "c=a", "c=a.x_", "c=a b.n_", "c%zz.n_", "c=%4.n_",
        ] {
            assert_eq!(Scope::decode(not_a_scope), None, "{not_a_scope}");
        }
        assert_eq!(Scope::new(None, None).encoded(), "c_.n_");
        assert_eq!(
            Scope::new(
                Some("arn:aws:eks:us-east-1:123:cluster/prod"),
                Some("spark")
            )
            .encoded(),
            "c=arn%3Aaws%3Aeks%3Aus-east-1%3A123%3Acluster%2Fprod.n=spark"
        );
    }
}
