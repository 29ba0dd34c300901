//! Stamps the build's provenance into the library: `PODSWEEP_GIT_COMMIT`, the git commit the
//! sources were built from (`git rev-parse HEAD`), read by `src/build_info.rs`. The JVM side
//! compares it, with the crate version, against what the jar was built from.
//!
//! The environment variable `PODSWEEP_GIT_COMMIT`, when set and not empty, wins (a build from a
//! source archive without `.git`); without either the commit is `unknown`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!s.is_empty()).then_some(s)
}

/// Rebuild when HEAD moves: HEAD itself, the branch it names, and packed-refs.
fn watch_head(root: &Path) {
    let mut watched: Vec<PathBuf> = vec![];
    for name in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--git-path", name]) {
            watched.push(root.join(p));
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        if let Some(p) = git(&["rev-parse", "--git-path", &branch]) {
            watched.push(root.join(p));
        }
    }
    for p in watched.into_iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=PODSWEEP_GIT_COMMIT");
    println!("cargo:rerun-if-changed=build.rs");
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let commit = match std::env::var("PODSWEEP_GIT_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_owned(),
        _ => {
            watch_head(&root);
            git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".to_owned())
        }
    };
    assert!(
        commit
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)),
        "PODSWEEP_GIT_COMMIT must be a commit id ([0-9A-Za-z._-]), got {commit:?}"
    );
    println!("cargo:rustc-env=PODSWEEP_GIT_COMMIT={commit}");
}
