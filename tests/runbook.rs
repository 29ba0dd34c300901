//! The operator's runbook (`docs/operations.md`) has an entry for every WARN and ERROR line
//! podsweep can print: the Rust crate's `warn!` / `error!` calls, and the WARN / ERROR calls of the
//! Java API, the drop-in and the Kyuubi patch. A message is matched by its fixed text: each
//! `{...}` placeholder (Rust) or `{}` / concatenated value (Java) becomes `…`, and the entry's
//! heading quotes it in backticks. A call whose message is all placeholders (`"{reason}"`) carries
//! a `// runbook: <heading>` comment on one of the three lines above it, naming its entry.
//! Every reason a scope's status can give for `healthy: false` has an entry too.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;

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

/// A string literal token's value (escapes and line continuations undone), if it is one.
fn lit_str(t: &TokenTree) -> Option<(String, usize)> {
    let TokenTree::Literal(l) = t else {
        return None;
    };
    let lit = syn::parse_str::<syn::LitStr>(&l.to_string()).ok()?;
    Some((lit.value(), l.span().start().line))
}

/// The first top-level string literal of a macro's arguments (fields such as `scope = %x` or
/// `target: "podsweep"` are skipped: a literal right after `:` or `=` is a field's value).
fn first_top_level_literal(args: &TokenStream) -> Option<String> {
    let mut prev: Option<TokenTree> = None;
    for t in args.clone() {
        let after_field =
            matches!(&prev, Some(TokenTree::Punct(p)) if p.as_char() == ':' || p.as_char() == '=');
        if !after_field {
            if let Some((v, _)) = lit_str(&t) {
                return Some(v);
            }
        }
        prev = Some(t);
    }
    None
}

/// The first string literal anywhere in `args` (inside `&format!(...)` too).
fn any_literal(args: &TokenStream) -> Option<String> {
    for t in args.clone() {
        if let Some((v, _)) = lit_str(&t) {
            return Some(v);
        }
        if let TokenTree::Group(g) = &t {
            if let Some(v) = any_literal(&g.stream()) {
                return Some(v);
            }
        }
    }
    None
}

/// Whether an item is compiled for tests only (`#[cfg(test)]`, `#[test]`, `#[tokio::test]`).
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        let path = a.path();
        path.is_ident("test")
            || path.segments.last().is_some_and(|s| s.ident == "test")
            || (path.is_ident("cfg") && a.meta.to_token_stream().to_string().contains("test"))
    })
}

/// The items of a parsed file that an operator's build compiles, as token streams: modules and
/// functions marked for tests are left out, wherever they are in the file.
fn shipped_items(file: &syn::File) -> Vec<TokenStream> {
    fn walk(items: &[syn::Item], out: &mut Vec<TokenStream>) {
        for item in items {
            match item {
                syn::Item::Mod(m) if test_only(&m.attrs) => {}
                syn::Item::Mod(m) => {
                    if let Some((_, inner)) = &m.content {
                        walk(inner, out);
                    }
                }
                syn::Item::Fn(f) if test_only(&f.attrs) => {}
                syn::Item::Impl(i) if test_only(&i.attrs) => {}
                other => out.push(other.to_token_stream()),
            }
        }
    }
    let mut out = Vec::new();
    walk(&file.items, &mut out);
    out
}

/// A call found in the tokens: its line, and its arguments.
struct Call {
    line: usize,
    args: TokenStream,
    /// For `.method(...)`: the `let <name> = format!("...")` literals seen before it in the item.
    lets: HashMap<String, String>,
}

/// Every `name!(...)` macro call (`bang`) or `.name(...)` method call in `tokens`, inside other
/// macros' tokens too (`tokio::select! { ... => warn!(...) }`).
fn find_calls(
    tokens: &TokenStream,
    name: &str,
    bang: bool,
    lets: &mut HashMap<String, String>,
    out: &mut Vec<Call>,
) {
    let v: Vec<TokenTree> = tokens.clone().into_iter().collect();
    for (i, t) in v.iter().enumerate() {
        // `let x = format!("...")`: remembered for a reason passed by name.
        if let TokenTree::Ident(id) = t {
            if id == "let" {
                if let (
                    Some(TokenTree::Ident(var)),
                    Some(TokenTree::Punct(eq)),
                    Some(TokenTree::Ident(f)),
                    Some(TokenTree::Punct(b)),
                    Some(TokenTree::Group(g)),
                ) = (
                    v.get(i + 1),
                    v.get(i + 2),
                    v.get(i + 3),
                    v.get(i + 4),
                    v.get(i + 5),
                ) {
                    if eq.as_char() == '=' && f == "format" && b.as_char() == '!' {
                        if let Some(lit) = any_literal(&g.stream()) {
                            lets.insert(var.to_string(), lit);
                        }
                    }
                }
            }
            if id == name {
                let prev_dot =
                    i > 0 && matches!(&v[i - 1], TokenTree::Punct(p) if p.as_char() == '.');
                let call = if bang {
                    match (v.get(i + 1), v.get(i + 2)) {
                        (Some(TokenTree::Punct(p)), Some(TokenTree::Group(g)))
                            if p.as_char() == '!'
                                && i.checked_sub(1).is_none_or(
                                    |k| !matches!(&v[k], TokenTree::Punct(p) if p.as_char() == '.'),
                                ) =>
                        {
                            Some(g.stream())
                        }
                        _ => None,
                    }
                } else if prev_dot {
                    match v.get(i + 1) {
                        Some(TokenTree::Group(g))
                            if g.delimiter() == proc_macro2::Delimiter::Parenthesis =>
                        {
                            Some(g.stream())
                        }
                        _ => None,
                    }
                } else {
                    None
                };
                if let Some(args) = call {
                    out.push(Call {
                        line: id.span().start().line,
                        args,
                        lets: lets.clone(),
                    });
                }
            }
        }
        if let TokenTree::Group(g) = t {
            find_calls(&g.stream(), name, bang, lets, out);
        }
    }
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

/// The runbook's entries: each `### ` heading with its lead, the text between the heading and
/// its first bullet (`- `), where the entry quotes the lines it is about; both normalized. A
/// mention anywhere else (a table, a bullet, another section) is no entry.
fn runbook() -> (String, Vec<String>) {
    let text = fs::read_to_string(root().join("docs/operations.md"))
        .expect("docs/operations.md (the operator's runbook) exists");
    let mut entries: Vec<String> = Vec::new();
    let mut lead: Option<String> = None;
    for l in text.lines() {
        if let Some(h) = l.strip_prefix("### ") {
            if let Some(e) = lead.take() {
                entries.push(normalize(&e));
            }
            lead = Some(format!("{h}\n"));
        } else if l.starts_with("## ") || l.trim_start().starts_with("- ") {
            if let Some(e) = lead.take() {
                entries.push(normalize(&e));
            }
        } else if let Some(e) = lead.as_mut() {
            e.push_str(l);
            e.push('\n');
        }
    }
    if let Some(e) = lead.take() {
        entries.push(normalize(&e));
    }
    (text, entries)
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

/// The calls `name` (a macro `name!(...)` when `bang`, else a method `.name(...)`) of the
/// crate's own code, read with `syn`: items compiled for tests only are left out wherever they
/// are. A `// runbook:` tag on one of the three lines above a call names its entry, else `key_of`
/// gives the text it is found by from the call.
fn rust_calls(name: &str, bang: bool, key_of: impl Fn(&Call) -> String) -> Vec<Site> {
    let mut paths = Vec::new();
    files(&root().join("src"), "rs", &mut paths);
    let mut sites = Vec::new();
    for p in paths {
        let src = fs::read_to_string(&p).unwrap_or_default();
        let rel = p.strip_prefix(root()).unwrap_or(&p).display().to_string();
        let file = syn::parse_file(&src).unwrap_or_else(|e| panic!("{rel} does not parse: {e}"));
        let lines: Vec<&str> = src.lines().collect();
        for item in shipped_items(&file) {
            let mut calls = Vec::new();
            find_calls(&item, name, bang, &mut HashMap::new(), &mut calls);
            for c in calls {
                let at = format!("{rel}:{}", c.line);
                sites.push(match tag_above(&lines, c.line.saturating_sub(1)) {
                    Some(tag) => Site {
                        at,
                        key: normalize(&tag),
                        tagged: true,
                    },
                    None => Site {
                        at,
                        key: key_of(&c),
                        tagged: false,
                    },
                });
            }
        }
    }
    sites
}

fn rust_sites() -> Vec<Site> {
    let message = |c: &Call| {
        first_top_level_literal(&c.args)
            .map(|m| normalize(&m))
            .unwrap_or_default()
    };
    let mut sites = rust_calls("warn", true, message);
    sites.extend(rust_calls("error", true, message));
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

/// Every reason a scope's status can give for `healthy: false`: the `set_unhealthy` calls of the
/// crate (their literal reason, a `let <name> = format!(...)` of the reason they pass by name, or
/// a `// runbook:` tag when the reason is built elsewhere).
fn health_sites() -> Vec<Site> {
    rust_calls("set_unhealthy", false, |c| {
        let args: Vec<TokenTree> = c.args.clone().into_iter().collect();
        // The reason is the second argument: after the first top-level comma.
        let comma = args
            .iter()
            .position(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ','));
        let reason: TokenStream = comma.map_or_else(TokenStream::new, |k| {
            args[k + 1..].iter().cloned().collect()
        });
        let by_name = reason.clone().into_iter().find_map(|t| match t {
            TokenTree::Ident(id) => c.lets.get(&id.to_string()).cloned(),
            _ => None,
        });
        any_literal(&reason)
            .or(by_name)
            .map(|m| normalize(&m))
            .unwrap_or_default()
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

fn check(sites: Vec<Site>, _text: &str, headings: &[String]) -> Vec<String> {
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
        } else if !headings.iter().any(|h| h.contains(&s.key)) {
            missing.push(format!(
                "{}: no runbook entry (a heading and its lead) quotes '{}'",
                s.at, s.key
            ));
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
    // The scanner itself: a message with placeholders, behind a field; a call inside another
    // macro's tokens; a test-only module left out wherever it is in the file.
    let args: TokenStream =
        r#"scope = %s, "Pod watch of scope {} failed: {e}; its pods are listed again", t.scope"#
            .parse()
            .unwrap();
    let m = first_top_level_literal(&args).map(|m| normalize(&m));
    assert_eq!(
        m.as_deref(),
        Some("Pod watch of scope … failed: …; its pods are listed again")
    );
    let file = syn::parse_file(
        r#"
        #[cfg(test)]
        mod tests { fn f() { warn!("in a test module"); } }
        fn g() { tokio::select! { _ = x => warn!("inside select"), } }
        #[test]
        fn t() { error!("in a test"); }
        fn h() { let reason = format!("built above: {x}"); m.set_unhealthy(1, &reason); }
        "#,
    )
    .unwrap();
    let mut warns = Vec::new();
    let mut health = Vec::new();
    for item in shipped_items(&file) {
        find_calls(&item, "warn", true, &mut HashMap::new(), &mut warns);
        find_calls(&item, "error", true, &mut HashMap::new(), &mut warns);
        find_calls(
            &item,
            "set_unhealthy",
            false,
            &mut HashMap::new(),
            &mut health,
        );
    }
    let found: Vec<String> = warns
        .iter()
        .filter_map(|c| first_top_level_literal(&c.args))
        .collect();
    assert_eq!(found, ["inside select"]);
    assert_eq!(health.len(), 1);
    assert_eq!(
        health[0].lets.get("reason").map(String::as_str),
        Some("built above: {x}")
    );
    assert!(!self_describing("…"));
    assert!(self_describing("cannot resign: …"));
    // A mention outside a heading is no entry.
    let missing = check(
        vec![Site {
            at: "x.rs:1".into(),
            key: "no such message here".into(),
            tagged: false,
        }],
        "`no such message here` is mentioned in a paragraph",
        &[],
    );
    assert_eq!(missing.len(), 1);
}
