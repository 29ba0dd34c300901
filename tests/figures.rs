//! Every figure that README.md and docs/**/*.md quote next to a link to a JSON lines file
//! (`*.jsonl`, the raw lines `scripts/bench`, `scripts/chaos` and `scripts/demo` print) is held by
//! that file, as the runbook test (`tests/runbook.rs`) holds the runbook to the log lines.
//!
//! The convention, which a page follows to have its figures checked:
//! * A figure is checked against the lines linked **in its own unit**: a paragraph, a list item
//!   (its own text; a nested item is a unit of its own), or a table row. A table row also takes the
//!   links of its table's header row, so a table whose every row comes from one file can say so
//!   once, in the header. A figure in a unit without such a link is not checked.
//! * A figure is a number in the text: `1,484`, `5.96`, `0.7`, each end of `126–238`. Not a figure:
//!   a number inside `code` or a link's target, a date (`2026-12-04`), a version (`1.34.4`), a
//!   number glued to a letter or an underscore (`p99`, `x20`, `36f8cc5`, `N1`), an adjective
//!   (`4-byte`), one after `#`, the number of an issue or a commit (`issue 12`), and an HTTP status
//!   other than 200 (`404`, `429`: labels of answers).
//! * The file holds a figure when one of its lines has a number **value** (a field's number, in
//!   arrays and nested objects too; the label of a table of counts, `{"200": 5000}`; a
//!   `name=number` written in a string, `wall_s=297`; of the `stamp`, only the load averages and
//!   cores), or the count of its lines is one, that rounds to the figure at the figure's precision, in the figure's unit or a
//!   thousand, a million or a hundred times away from it (`1.81 s` is held by `1810` ms, `1.54 µs`
//!   by `1540.6` ns, `76 %` by `0.76`). When the unit names, in `code`, the `bench` or `chaos` of
//!   some of the linked lines, only those lines are read.
//!
//!   Not a number value: the digits of a string (a setting `PT10S`, a kind `32 concurrent
//!   DELETEs`), of a key's name (`not_found_404`), of a date or a commit (issue 32: a figure
//!   "54/min" was held by the `:54` of a stamp's time, not by the line it came from).
//!
//! So a measured figure goes next to the link of the lines it comes from, and what no line holds
//! (a setting, an estimate, a figure from a run whose lines were not kept) goes in a unit without a
//! link, where it reads as prose, not as a measurement.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use pulldown_cmark::{Event, Options, Parser, Tag, TagEnd};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn markdown_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut out);
    out.sort();
    out
}

/// A figure as written: its value, its decimals, and where it stands.
#[derive(Debug, Clone)]
struct Figure {
    text: String,
    value: f64,
    decimals: i32,
}

/// An HTTP status an answer is classed by (`0 answered 404`, `403 × 100`): a label, not a figure.
/// 200 is left out: it is more often a count (`200 pods`).
fn is_http_status(digits: &str) -> bool {
    matches!(
        digits,
        "401" | "403" | "404" | "409" | "410" | "429" | "500" | "502" | "503" | "504"
    )
}

/// The figures of a unit's text (see the module's convention).
fn figures(text: &str) -> Vec<Figure> {
    let c: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        if !c[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let start = i;
        let mut digits = String::new();
        let mut decimals = -1i32; // -1: no decimal point seen
        let mut dots = 0;
        while i < c.len() {
            let ch = c[i];
            let next_digit = i + 1 < c.len() && c[i + 1].is_ascii_digit();
            if ch.is_ascii_digit() {
                digits.push(ch);
                if decimals >= 0 {
                    decimals += 1;
                }
                i += 1;
            } else if ch == '.' && next_digit {
                dots += 1;
                if decimals < 0 {
                    digits.push('.');
                    decimals = 0;
                }
                i += 1;
            } else if ch == ','
                && decimals < 0
                && i + 3 < c.len() + 1
                && (1..=3).all(|k| c.get(i + k).is_some_and(|d| d.is_ascii_digit()))
                && !c.get(i + 4).is_some_and(|d| d.is_ascii_digit())
            {
                // A thousands separator: `1,484`, not `1, 2` or `1,2`.
                i += 1;
            } else {
                break;
            }
        }
        let end = i;
        let before = start.checked_sub(1).map(|k| c[k]);
        let after = c.get(end).copied();
        let glued = |ch: Option<char>| ch.is_some_and(|ch| ch.is_alphanumeric() || ch == '_');
        let hyphenated = |ch: Option<char>, beyond: Option<char>| {
            matches!(ch, Some('-' | ':' | '/')) && beyond.is_some_and(|d| d.is_ascii_digit())
        };
        // `4-byte`, `2-core`: a description, not a measurement.
        let adjective = after == Some('-') && c.get(end + 1).is_some_and(|ch| ch.is_alphabetic());
        let word_before: String = {
            let head: String = c[..start].iter().collect();
            head.split_whitespace()
                .last()
                .unwrap_or("")
                .trim_matches(|ch: char| !ch.is_alphanumeric())
                .to_ascii_lowercase()
        };
        let skip = glued(before)
            || glued(after)
            || matches!(before, Some('#' | '@' | '\\' | '.'))
            || hyphenated(after, c.get(end + 1).copied())
            || adjective
            || hyphenated(before, start.checked_sub(2).map(|k| c[k]))
            || dots > 1
            || is_http_status(&digits)
            || matches!(
                word_before.as_str(),
                "issue" | "issues" | "commit" | "commits" | "pr"
            );
        if !skip {
            if let Ok(value) = digits.parse::<f64>() {
                out.push(Figure {
                    text: c[start..end].iter().collect(),
                    value,
                    decimals: decimals.max(0),
                });
            }
        }
    }
    out
}

/// Every number value a JSON line holds where a figure can be quoted from: its fields' numbers
/// (in arrays and nested objects too), and the keys of a table of counts (`"delete_codes":
/// {"200": 5000}`: the key is the value's label). Digits inside strings (a setting `PT10S`, a
/// kind `32 concurrent DELETEs`, a date, a commit) and in a key's name (`not_found_404`) are not
/// figures, and the `stamp` (where the line came from) holds only its load averages and cores.
fn numbers(v: &Value, out: &mut Vec<f64>) {
    match v {
        Value::Number(n) => out.extend(n.as_f64().map(f64::abs)),
        Value::String(s) => out.extend(assigned_numbers(s)),
        Value::Array(a) => a.iter().for_each(|x| numbers(x, out)),
        Value::Object(o) => {
            for (k, x) in o {
                if k == "stamp" {
                    for kept in ["load", "loadavg_1m", "cores"] {
                        numbers(&x[kept], out);
                    }
                    continue;
                }
                // A table of counts by label: `{"200": 5000}`.
                if let Ok(label) = k.parse::<f64>() {
                    out.push(label);
                }
                numbers(x, out);
            }
        }
        _ => {}
    }
}

/// The values a string records as `name=number` (`rc=0 wall_s=297`): a line's note of a
/// measurement, unlike the other digits of a string.
fn assigned_numbers(s: &str) -> Vec<f64> {
    s.split(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | '(' | ')'))
        .filter_map(|w| w.split_once('='))
        .filter(|(name, _)| {
            !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_')
        })
        .filter_map(|(_, v)| v.trim_end_matches('.').parse::<f64>().ok())
        .collect()
}

/// The figure's unit, or one a thousand, a million or a hundred times away.
const SCALES: [f64; 7] = [1.0, 1e3, 1e-3, 1e6, 1e-6, 100.0, 1e-2];

fn holds(found: &[f64], f: &Figure) -> bool {
    let half = 0.5 * 10f64.powi(-f.decimals);
    let tolerance = half + 1e-9 * f.value.abs().max(1.0);
    found
        .iter()
        .any(|x| SCALES.iter().any(|s| (x * s - f.value).abs() <= tolerance))
}

/// A paragraph, list item or table row: its text (code spans left out), its `code` spans, the
/// JSON lines files it links, and its first line.
#[derive(Default, Debug)]
struct Unit {
    text: String,
    code: BTreeSet<String>,
    links: Vec<String>,
    line: usize,
    row: bool,
}

/// Every unit of a page that links a JSON lines file.
fn units(page: &str) -> Vec<Unit> {
    let mut opts = Options::empty();
    opts.insert(Options::ENABLE_TABLES);
    let line_of = |offset: usize| page[..offset].matches('\n').count() + 1;
    let mut stack: Vec<Unit> = Vec::new();
    let mut header_links: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (event, range) in Parser::new_ext(page, opts).into_offset_iter() {
        match event {
            Event::Start(
                tag @ (Tag::Paragraph
                | Tag::Item
                | Tag::TableRow
                | Tag::TableHead
                | Tag::Heading { .. }),
            ) => {
                if matches!(tag, Tag::TableHead) {
                    header_links.clear();
                }
                stack.push(Unit {
                    line: line_of(range.start),
                    row: matches!(tag, Tag::TableRow),
                    ..Unit::default()
                });
            }
            Event::End(
                end @ (TagEnd::Paragraph
                | TagEnd::Item
                | TagEnd::TableRow
                | TagEnd::TableHead
                | TagEnd::Heading(_)),
            ) => {
                let Some(mut unit) = stack.pop() else {
                    continue;
                };
                if matches!(end, TagEnd::TableHead) {
                    header_links = unit.links.clone();
                }
                if unit.row {
                    unit.links.extend(header_links.iter().cloned());
                }
                if !unit.links.is_empty() {
                    out.push(unit);
                }
            }
            Event::Start(Tag::Link { dest_url, .. }) => {
                let dest = dest_url.split('#').next().unwrap_or("").to_owned();
                if dest.ends_with(".jsonl") {
                    if let Some(u) = stack.last_mut() {
                        u.links.push(dest);
                    }
                }
            }
            Event::Text(t) => {
                if let Some(u) = stack.last_mut() {
                    u.text.push_str(&t);
                }
            }
            Event::Code(t) => {
                if let Some(u) = stack.last_mut() {
                    u.code.insert(t.to_string());
                    u.text.push_str(" ` ");
                }
            }
            Event::SoftBreak | Event::HardBreak => {
                if let Some(u) = stack.last_mut() {
                    u.text.push(' ');
                }
            }
            Event::End(TagEnd::TableCell) => {
                if let Some(u) = stack.last_mut() {
                    u.text.push_str(" | ");
                }
            }
            _ => {}
        }
    }
    out
}

/// The lines of a linked file, each parsed.
fn lines_of(page: &Path, link: &str) -> Result<Vec<Value>, String> {
    let path = page.parent().unwrap_or(Path::new(".")).join(link);
    let text = fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(n, l)| {
            serde_json::from_str(l)
                .map_err(|e| format!("{} line {}: not JSON: {e}", path.display(), n + 1))
        })
        .collect()
}

fn name_of(line: &Value) -> Option<&str> {
    line["bench"].as_str().or_else(|| line["chaos"].as_str())
}

struct Outcome {
    checked: usize,
    units: usize,
    problems: Vec<String>,
}

fn check_page(page: &Path) -> Outcome {
    let text = fs::read_to_string(page).unwrap_or_default();
    let shown = page
        .strip_prefix(root())
        .unwrap_or(page)
        .display()
        .to_string();
    let mut o = Outcome {
        checked: 0,
        units: 0,
        problems: Vec::new(),
    };
    for unit in units(&text) {
        o.units += 1;
        let mut lines = Vec::new();
        for link in &unit.links {
            match lines_of(page, link) {
                Ok(l) => lines.extend(l),
                Err(e) => o.problems.push(format!("{shown}:{}: {e}", unit.line)),
            }
        }
        // Only the lines of the benches or scenarios the unit names, when it names some.
        let named: Vec<&Value> = lines
            .iter()
            .filter(|l| name_of(l).is_some_and(|n| unit.code.contains(n)))
            .collect();
        let read: Vec<&Value> = if named.is_empty() {
            lines.iter().collect()
        } else {
            named
        };
        // The figures of its lines, and how many lines it has ("all 8 lines safe").
        let mut found = vec![lines.len() as f64, read.len() as f64];
        read.iter().for_each(|l| numbers(l, &mut found));
        for f in figures(&unit.text) {
            o.checked += 1;
            if !holds(&found, &f) {
                let excerpt: String = unit.text.chars().take(160).collect();
                o.problems.push(format!(
                    "{shown}:{}: {} is in none of {:?}{} ({excerpt}…)",
                    unit.line,
                    f.text,
                    unit.links,
                    if read.len() < lines.len() {
                        format!(" (lines of {:?})", unit.code)
                    } else {
                        String::new()
                    }
                ));
            }
        }
    }
    o
}

#[test]
fn every_figure_next_to_a_link_to_json_lines_is_in_those_lines() {
    let (mut checked, mut units, mut problems) = (0, 0, Vec::new());
    for page in markdown_files() {
        let o = check_page(&page);
        checked += o.checked;
        units += o.units;
        problems.extend(o.problems);
    }
    println!(
        "checked {checked} figures in {units} paragraphs, list items and table rows that link JSON lines"
    );
    assert!(
        problems.is_empty(),
        "{} of {checked} figures are not in the lines their paragraph or row links:\n{}",
        problems.len(),
        problems.join("\n")
    );
    // The check itself: a page that lost its links would pass by checking nothing.
    assert!(checked >= 200, "only {checked} figures checked");
}

#[test]
fn the_scan_reads_figures_as_documented() {
    let got: Vec<String> = figures(
        "p50 3 ms, p99 1,484 and 5.96 (126–238) on 2026-12-04 with kube-apiserver 1.34.4, x20, \
         36f8cc5, issue 12, #7634, N = 1, 2, 3; 0.7 s; 10,000 pods, a 4-byte slot",
    )
    .into_iter()
    .map(|f| f.text)
    .collect();
    assert_eq!(
        got,
        ["3", "1,484", "5.96", "126", "238", "1", "2", "3", "0.7", "10,000"]
    );
    let f = |t: &str| figures(t).remove(0);
    assert!(holds(&[1812.0], &f("1.81 s")));
    assert!(holds(&[1540.595], &f("1.54 µs")));
    assert!(holds(&[0.763], &f("76 %")));
    assert!(holds(&[5.957], &f("5.96")));
    assert!(holds(&[1.0], &f("1.00")));
    assert!(!holds(&[13.0], &f("8 ms")));
    assert!(!holds(&[147.0], &f("107 ms")));
    assert!(!holds(&[5.95], &f("5.97")));
    // A table row takes its header's links; a nested item is its own unit.
    let page = "| Bench ([lines](a.jsonl)) | x |\n|---|---|\n| `lag` | 39 ms |\n\n\
                - top 1 [l](b.jsonl)\n  - nested 2\n\nprose 3\n";
    let u = units(page);
    assert_eq!(u.len(), 3, "{u:?}");
    assert_eq!(u[1].links, ["a.jsonl"]);
    assert!(u[1].code.contains("lag") && u[1].text.contains("39 ms"));
    assert_eq!(u[2].links, ["b.jsonl"]);
    assert!(!u[2].text.contains("nested"));
}

/// Issue 32: a figure is held by a number value of its lines, not by digits anywhere in them.
/// Each page below quotes a figure that its line holds only inside a string, a key, a date or a
/// commit; the scan must say so for each, and still take the figures the line does hold.
#[test]
fn a_figure_is_held_by_a_value_not_by_digits_anywhere_in_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let line = serde_json::json!({
        "bench": "drain", "kind": "32 concurrent DELETEs", "first_17": 1,
        "deletes_per_s": 395.3, "delete_codes": {"200": 5000}, "note": "rc=0 wall_s=297",
        "stamp": {"commit": "05397d9b50a4", "date": "2026-12-05T02:35:54Z", "load": {"start": [1.36, 1.78, 1.56]}}
    });
    std::fs::write(dir.path().join("l.jsonl"), format!("{line}\n")).unwrap();
    let check = |text: &str| {
        let page = dir.path().join("p.md");
        std::fs::write(&page, format!("{text} ([lines](l.jsonl))\n")).unwrap();
        let o = check_page(&page);
        (o.checked, o.problems)
    };
    // Held: a value, a count's label, a `name=number`, the load.
    for ok in ["395.3/s", "5,000 answered", "in 297 s", "load 1.4"] {
        let (checked, problems) = check(ok);
        assert_eq!((checked, problems.len()), (1, 0), "{ok}: {problems:?}");
    }
    // Not held: a digit in a string, in a key's name, in a date, in a commit.
    for wrong in ["32 in flight", "17 pods", "54/min", "35 s", "5,397 ms"] {
        let (checked, problems) = check(wrong);
        assert_eq!(
            (checked, problems.len()),
            (1, 1),
            "{wrong} passed: {problems:?}"
        );
    }
}
