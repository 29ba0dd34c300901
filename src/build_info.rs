//! What this library was built from: the crate version and the git commit (stamped by
//! `build.rs`). The JVM side reads [`LINE`] through `NativeBridge.buildInfo()` and refuses a
//! library whose version or commit differs from the jar's own.

/// The crate version (`Cargo.toml`), the single source of truth for every artifact's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The git commit the library was built from, or `unknown`.
pub const COMMIT: &str = env!("PODSWEEP_GIT_COMMIT");

/// `podsweep-build-info version=<VERSION> commit=<COMMIT>`: what `buildInfo()` returns, and the
/// line `strings libpodsweep.so` finds, so a release check can read it without loading the
/// library (e.g. the aarch64 one on an x86_64 machine).
pub const LINE: &str = concat!(
    "podsweep-build-info version=",
    env!("CARGO_PKG_VERSION"),
    " commit=",
    env!("PODSWEEP_GIT_COMMIT")
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_carries_version_and_commit() {
        assert_eq!(
            LINE,
            format!("podsweep-build-info version={VERSION} commit={COMMIT}")
        );
        assert!(!COMMIT.is_empty() && !COMMIT.contains(' '));
    }
}
