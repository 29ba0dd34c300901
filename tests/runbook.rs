//! The operator's runbook (`docs/operations.md`) has an entry for every WARN and ERROR line
//! podsweep can print: the Rust crate's `warn!` / `error!` calls, and the WARN / ERROR calls of the
//! Java API, the drop-in and the Kyuubi patch. A message is matched by its fixed text: each
//! `{...}` placeholder (Rust) or `{}` / concatenated value (Java) becomes `…`, and the entry's
//! heading quotes it in backticks. A call whose message is all placeholders (`"{reason}"`) carries
//! a `// runbook: <heading>` comment on one of the three lines above it, naming its entry.
//! Every reason a scope's status can give for `healthy: false` has an entry too.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            files(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

/// The text of `s` from `open` (just after a `(`) to its matching `)`, strings and chars skipped.
fn call_args(s: &str, open: usize) -> &str {
    let b = s.as_bytes();
    let (mut depth, mut i, mut in_str) = (1usize, open, false);
    while i < b.len() {
        let c = b[i];
        if in_str {
            if c == b'\\' {
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
        } else if c == b'"' {
            in_str = true;
        } else if c == b'(' || c == b'[' || c == b'{' {
            depth += 1;
        } else if c == b')' || c == b']' || c == b'}' {
            depth -= 1;
            if depth == 0 {
                return &s[open..i];
            }
        }
        i += 1;
    }
    &s[open..]
}

/// The first top-level argument of a `tracing` macro call that is a string literal (fields such
/// as `scope = %x` or `target: "podsweep"` are skipped), with Rust's line continuations undone.
fn format_string(args: &str) -> Option<String> {
    let b = args.as_bytes();
    let (mut depth, mut i, mut start) = (0usize, 0usize, 0usize);
    let mut parts = Vec::new();
    let mut in_str = false;
    while i < b.len() {
        let c = b[i];
        if in_str {
            if c == b'\\' {
                i += 1;
            } else if c == b'"' {
                in_str = false;
            }
        } else if c == b'"' {
            in_str = true;
        } else if c == b'(' || c == b'[' || c == b'{' {
            depth += 1;
        } else if c == b')' || c == b']' || c == b'}' {
            depth = depth.saturating_sub(1);
        } else if c == b',' && depth == 0 {
            parts.push(&args[start..i]);
            start = i + 1;
        }
        i += 1;
    }
    parts.push(&args[start..]);
    for p in parts {
        let p = p.trim();
        if p.starts_with('"') && p.ends_with('"') && p.len() >= 2 {
            let lit = &p[1..p.len() - 1];
            // A `\` at a line's end continues the literal without the newline and the indent.
            let mut text = String::new();
            let mut rest = lit;
            while let Some(k) = rest.find("\\\n") {
                text.push_str(&rest[..k]);
                rest = rest[k + 2..].trim_start();
            }
            text.push_str(rest);
            return Some(text.replace("\\\"", "\""));
        }
    }
    None
}

/// `{...}` and `{}` placeholders become `…`; runs of white space one space.
fn normalize(msg: &str) -> String {
    let mut out = String::new();
    let mut chars = msg.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '{' {
            if chars.peek() == Some(&'{') {
                chars.next();
                out.push('{');
                continue;
            }
            for d in chars.by_ref() {
                if d == '}' {
                    break;
                }
            }
            out.push('…');
        } else if c == '}' && chars.peek() == Some(&'}') {
            chars.next();
            out.push('}');
        } else {
            out.push(c);
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Whether a message says something without its values (at least two words of fixed text).
fn self_describing(norm: &str) -> bool {
    norm.split(|c: char| !c.is_alphabetic())
        .filter(|w| w.len() > 1)
        .count()
        >= 2
}

/// The headings of the runbook's entries (`### ` lines), normalized, and their backticked texts.
fn runbook() -> (String, Vec<String>) {
    let text = fs::read_to_string(root().join("docs/operations.md"))
        .expect("docs/operations.md (the operator's runbook) exists");
    let headings = text
        .lines()
        .filter(|l| l.starts_with("### "))
        .map(|l| normalize(l.trim_start_matches('#').trim()))
        .collect();
    (text, headings)
}

fn tag_above(lines: &[&str], at: usize) -> Option<String> {
    lines[at.saturating_sub(3)..at].iter().rev().find_map(|l| {
        l.trim()
            .strip_prefix("// runbook:")
            .map(|t| t.trim().to_string())
    })
}

/// One WARN/ERROR call site: where, and the fixed text (or runbook tag) it is found by.
struct Site {
    at: String,
    key: String,
    tagged: bool,
}

/// The calls `marker` (e.g. `warn!(`) of the crate's own code (unit tests at a file's end are
/// not what an operator sees): a `// runbook:` tag above a call names its entry, else `key_of`
/// gives the text it is found by from the file's code, the call's offset and its arguments.
fn rust_calls(marker: &str, key_of: impl Fn(&str, usize, &str) -> String) -> Vec<Site> {
    let mut paths = Vec::new();
    files(&root().join("src"), "rs", &mut paths);
    let mut sites = Vec::new();
    for p in paths {
        let src = fs::read_to_string(&p).unwrap_or_default();
        let body = match src.find("#[cfg(test)]") {
            Some(k) => &src[..k],
            None => &src[..],
        };
        let lines: Vec<&str> = body.lines().collect();
        let mut from = 0;
        while let Some(k) = body[from..].find(marker) {
            let at = from + k;
            from = at + marker.len();
            let prev = body[..at].chars().last().unwrap_or(' ');
            if marker.starts_with(|c: char| c.is_alphabetic())
                && (prev.is_alphanumeric() || prev == '_')
            {
                continue;
            }
            let line = body[..at].matches('\n').count();
            let rel = p.strip_prefix(root()).unwrap_or(&p).display().to_string();
            let at_line = format!("{rel}:{}", line + 1);
            let site = match tag_above(&lines, line) {
                Some(tag) => Site {
                    at: at_line,
                    key: normalize(&tag),
                    tagged: true,
                },
                None => {
                    let key = key_of(body, at, call_args(body, at + marker.len()));
                    Site {
                        at: at_line,
                        key,
                        tagged: false,
                    }
                }
            };
            sites.push(site);
        }
    }
    sites
}

fn rust_sites() -> Vec<Site> {
    let message = |_: &str, _: usize, args: &str| {
        format_string(args)
            .map(|m| normalize(&m))
            .unwrap_or_default()
    };
    let mut sites = rust_calls("warn!(", message);
    sites.extend(rust_calls("error!(", message));
    sites
}

/// Java and Scala WARN/ERROR calls with a literal message: the first literal of the call, its values
/// (`{}`, `$x`, `${x}`) as `…`, a trailing value dropped.
fn jvm_sites() -> Vec<Site> {
    let mut paths = Vec::new();
    files(&root().join("java/src/main/java"), "java", &mut paths);
    files(
        &root().join("java/kyuubi/dropin/src/main"),
        "scala",
        &mut paths,
    );
    paths.push(root().join("java/kyuubi/kyuubi-1.12.0-podsweep.diff"));
    let mut sites = Vec::new();
    for p in paths {
        let src = fs::read_to_string(&p).unwrap_or_default();
        let is_diff = p.extension().is_some_and(|e| e == "diff");
        let lines: Vec<&str> = src.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            // Only the diff's own lines are ours.
            if is_diff && !l.starts_with('+') {
                continue;
            }
            let t = l.trim_start_matches('+').trim();
            // Java logs through an SLF4J logger (`LOG.warn(`); Scala through Kyuubi's `Logging`
            // trait (`warn(`), so a bare `error(` in Java is some other method.
            let is_java = p.extension().is_some_and(|e| e == "java");
            let markers: &[&str] = if is_java {
                &[".warn(", ".error("]
            } else {
                &[
                    "warn(",
                    "error(",
                    ".warn(",
                    ".error(",
                    "warning(",
                    "warnLimited(",
                ]
            };
            let Some(k) = markers
                .iter()
                .filter_map(|m| t.find(m).map(|k| k + m.len()))
                .min()
            else {
                continue;
            };
            let before = &t[..k];
            // A message passed in (`warn(message + ...)`) is its caller's, which is a site itself.
            let arg = t[k..].trim_start();
            if arg.starts_with(|c: char| c.is_alphabetic() || c == '_') && !arg.starts_with("s\"") {
                continue;
            }
            if before.contains("isWarnEnabled")
                || before.starts_with("//")
                || before.starts_with('*')
            {
                continue;
            }
            // The message: the first literal of the call, maybe on the next line.
            let rest = format!(
                "{} {}",
                &t[k..],
                lines
                    .get(i + 1)
                    .map(|x| x.trim_start_matches('+').trim())
                    .unwrap_or("")
            );
            let Some(q) = rest.find('"') else { continue };
            let Some(e) = rest[q + 1..].find('"') else {
                continue;
            };
            // A Scala interpolation (`$e`, `${x.y}`) is a value, as `{}` is.
            let lit = interpolations_as_placeholders(&rest[q + 1..q + 1 + e]);
            let lit = lit.as_str();
            let fixed = normalize(lit).trim_end_matches(['…', ' ']).to_string();
            let rel = p.strip_prefix(root()).unwrap_or(&p).display().to_string();
            let where_ = format!("{rel}:{}", i + 1);
            match tag_above(&lines, i) {
                Some(tag) => sites.push(Site {
                    at: where_,
                    key: normalize(&tag),
                    tagged: true,
                }),
                None if fixed.is_empty() => sites.push(Site {
                    at: where_,
                    key: String::new(),
                    tagged: false,
                }),
                None => sites.push(Site {
                    at: where_,
                    key: fixed,
                    tagged: false,
                }),
            }
        }
    }
    sites
}

/// `s"... $x ... ${y.z}"` → `s"... {} ... {}"`.
fn interpolations_as_placeholders(lit: &str) -> String {
    let mut out = String::new();
    let mut chars = lit.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        match chars.peek() {
            Some('{') => {
                for d in chars.by_ref() {
                    if d == '}' {
                        break;
                    }
                }
                out.push_str("{}");
            }
            Some(d) if d.is_alphabetic() || *d == '_' => {
                while chars
                    .peek()
                    .is_some_and(|d| d.is_alphanumeric() || *d == '_')
                {
                    chars.next();
                }
                out.push_str("{}");
            }
            _ => out.push(c),
        }
    }
    out
}

/// The first string literal in `args`, wherever it is (inside `&format!(...)` too), with Rust's
/// line continuations undone.
fn first_literal(args: &str) -> Option<String> {
    let q = args.find('"')?;
    let b = args.as_bytes();
    let mut i = q + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return format_string(&args[q..=i]),
            _ => i += 1,
        }
    }
    None
}

/// Every reason a scope's status can give for `healthy: false`: the `set_unhealthy` calls of the
/// crate (their literal reason, the `let reason = format!(...)` just above them, or a
/// `// runbook:` tag when the reason is built elsewhere).
fn health_sites() -> Vec<Site> {
    rust_calls(".set_unhealthy(", |body, at, args| {
        // A reason built just above (`let reason = format!("...")`) is found there.
        let lit = first_literal(args).or_else(|| {
            let mut from_byte = at.saturating_sub(1200);
            while !body.is_char_boundary(from_byte) {
                from_byte += 1;
            }
            let above = &body[from_byte..at];
            let b = above.rfind("let reason = format!(")?;
            first_literal(&above[b..])
        });
        lit.map(|m| normalize(&m)).unwrap_or_default()
    })
}

/// The pause causes of `src/pause.rs` (`PauseKind::X => "name"`).
fn pause_reasons() -> Vec<String> {
    let src = fs::read_to_string(root().join("src/pause.rs")).expect("src/pause.rs");
    src.lines()
        .filter_map(|l| {
            let t = l.trim();
            let rest = t.strip_prefix("PauseKind::")?;
            let (_, lit) = rest.split_once("=> \"")?;
            Some(lit.split('"').next()?.to_string())
        })
        .collect()
}

fn check(sites: Vec<Site>, text: &str, headings: &[String]) -> Vec<String> {
    let mut missing = Vec::new();
    for s in sites {
        if s.tagged {
            if !headings.iter().any(|h| h.contains(&s.key)) {
                missing.push(format!(
                    "{}: tag '{}' names no runbook heading",
                    s.at, s.key
                ));
            }
        } else if s.key.is_empty() || !self_describing(&s.key) {
            missing.push(format!(
                "{}: message '{}' says nothing without its values: add `// runbook: <heading>` above it",
                s.at, s.key
            ));
        } else if !headings.iter().any(|h| h.contains(&s.key))
            && !text.contains(&format!("`{}", s.key))
        {
            missing.push(format!("{}: no runbook entry for '{}'", s.at, s.key));
        }
    }
    missing
}

/// Every site has its entry; `at_least` guards against a scan that finds nothing.
fn assert_covered(sites: Vec<Site>, at_least: usize) {
    let (text, headings) = runbook();
    assert!(
        sites.len() >= at_least,
        "found only {} call sites: the scan is broken",
        sites.len()
    );
    let missing = check(sites, &text, &headings);
    assert!(
        missing.is_empty(),
        "docs/operations.md lacks:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_warn_and_error_line_of_the_crate_has_a_runbook_entry() {
    assert_covered(rust_sites(), 20);
}

#[test]
fn every_warn_and_error_line_of_the_jvm_side_has_a_runbook_entry() {
    assert_covered(jvm_sites(), 5);
}

#[test]
fn every_unhealthy_reason_and_pause_cause_has_a_runbook_entry() {
    let (text, headings) = runbook();
    let sites = health_sites();
    assert!(
        sites.len() >= 6,
        "found only {} set_unhealthy calls: the scan is broken",
        sites.len()
    );
    let mut missing = check(sites, &text, &headings);
    let pauses = pause_reasons();
    assert!(
        pauses.len() >= 7,
        "found only {pauses:?}: the scan is broken"
    );
    for p in pauses {
        let quoted = format!("`{p}`");
        if !headings
            .iter()
            .any(|h| h.contains("pause") && h.contains(&quoted))
        {
            missing.push(format!("no runbook heading for the pause cause {quoted}"));
        }
    }
    assert!(
        missing.is_empty(),
        "docs/operations.md lacks:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_scan_finds_a_message_and_its_entry() {
    // The scanner itself: a message with placeholders, and one hidden behind a field.
    let args =
        r#"scope = %s, "Pod watch of scope {} failed: {e}; its pods are listed again", t.scope"#;
    let m = format_string(args).map(|m| normalize(&m));
    assert_eq!(
        m.as_deref(),
        Some("Pod watch of scope … failed: …; its pods are listed again")
    );
    assert!(!self_describing("…"));
    assert!(self_describing("cannot resign: …"));
    let missing = check(
        vec![Site {
            at: "x.rs:1".into(),
            key: "no such message here".into(),
            tagged: false,
        }],
        "",
        &[],
    );
    assert_eq!(missing.len(), 1);
}
