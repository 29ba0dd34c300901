//! The Kyuubi patch's documentation pages (in `java/kyuubi/kyuubi-1.12.0-podsweep.diff`) name
//! what the patch adds: every key the patched server reads, with its deprecated alternatives
//! (`docs/deployment/engine_on_kubernetes.md`), and every gauge of `PodsweepMetricSet`
//! (`docs/monitor/metrics.md`). A key or gauge added without its line there fails here.

use std::path::Path;

use super::table::{alternatives, Route, KEYS};

fn repo(path: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The lines the diff adds to `file`, without their `+`.
fn added_to(file: &str) -> String {
    let diff = repo("java/kyuubi/kyuubi-1.12.0-podsweep.diff");
    let start = format!("diff -ruN a/{file} b/{file}\n");
    let at = diff
        .find(&start)
        .unwrap_or_else(|| panic!("the diff does not change {file}"));
    let body = &diff[at + start.len()..];
    let end = body.find("\ndiff -ruN ").map_or(body.len(), |i| i + 1);
    body[..end]
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .map(|l| &l[1..])
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_deployment_page_lists_every_key_of_the_patch_and_its_deprecated_names() {
    let page = added_to("docs/deployment/engine_on_kubernetes.md");
    let prefix = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.";
    let mut listed = 0;
    for k in KEYS
        .iter()
        .filter(|k| k.read_by(Route::Patch) && !k.internal)
    {
        assert!(
            page.contains(&format!("`{}`", k.key)),
            "docs/deployment/engine_on_kubernetes.md (in the diff) does not list {}",
            k.key
        );
        for old in alternatives(k.key) {
            let short = old.trim_start_matches(prefix);
            assert!(
                page.contains(&format!("Deprecated alternative: `{short}`")),
                "the deployment page does not name {old} as the deprecated alternative of {}",
                k.key
            );
        }
        listed += 1;
    }
    assert!(listed >= 10, "{listed} keys");
}

/// The string literals of the Java source between `from` and the next `;`.
fn literals(java: &str, from: &str) -> Vec<String> {
    let at = java
        .find(from)
        .unwrap_or_else(|| panic!("PodsweepMetricSet.java has no {from}"));
    let block = &java[at..at + java[at..].find(';').unwrap_or(0)];
    block
        .split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_metrics_page_lists_every_gauge() {
    let page = added_to("docs/monitor/metrics.md");
    let java = repo("java/src/main/java/org/podsweep/metrics/PodsweepMetricSet.java");
    let counts: Vec<String> = java
        .lines()
        .filter_map(|l| l.trim().strip_prefix("m.put(\""))
        .filter_map(|l| l.split('"').next())
        .map(str::to_owned)
        .collect();
    assert!(counts.len() >= 10, "{counts:?}");
    let fixed = [
        "healthy",
        "paused",
        "paused_until_ms",
        "lag.count",
        "lag.p50_seconds",
        "lag.p99_seconds",
        "lag.max_seconds",
    ];
    for suffix in counts.iter().map(String::as_str).chain(fixed) {
        assert!(
            page.contains(&format!("`{suffix}`")),
            "docs/monitor/metrics.md (in the diff) does not list the gauge {suffix}"
        );
    }
    for (list, pattern) in [
        ("OUTCOMES =", "deletes.${outcome}"),
        ("PAUSES =", "pause.${reason}_ms"),
    ] {
        let row = page
            .lines()
            .find(|l| l.contains(&format!("`{pattern}`")))
            .unwrap_or_else(|| panic!("no row for {pattern}"));
        for name in literals(&java, list) {
            assert!(
                row.contains(&format!("`{name}`")),
                "the {pattern} row does not name {name}"
            );
        }
    }
    assert!(page.contains("`kyuubi.kubernetes.cleanup.log_records_dropped`"));
}
