//! Secrets of the configuration never reach a log line or an exception message.
//!
//! Kyuubi decides what is secret with `kyuubi.server.redaction.regex`: a key or a value the
//! pattern matches has its value replaced by `*********(redacted)`. Kyuubi 1.12.0 has no default
//! for the key (nothing is redacted unless it is set); podsweep always applies the pattern Kyuubi
//! 1.13 made the default, `(?i)secret|password|token|access[.]key`, and the configured one on top
//! of it, so a configured pattern can only widen what is hidden.
//!
//! Two layers:
//! * structured: a [`super::ConfigError`] about a secret key or value carries the replacement text
//!   instead of the value ([`Redactor::shown`]);
//! * free text: every secret value of every configuration podsweep was handed is remembered
//!   ([`remember`]) and replaced wherever it appears in a log record or in an exception message
//!   ([`scrub`]), as is the password of a URL (`scheme://user:password@host`). This covers values
//!   that reach a message through a library's own error text.
//!
//! A configured pattern that does not compile as a regular expression here (Rust's syntax is
//! close to Java's, but has no look-around or back-references) makes every value secret, with a
//! WARN naming the key (never the pattern's matches).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::RwLock;

use once_cell::sync::Lazy;
use regex::Regex;

use super::keys;

/// Kyuubi's replacement text (`REDACTION_REPLACEMENT_TEXT`).
pub const REPLACEMENT: &str = "*********(redacted)";

/// The pattern Kyuubi 1.13 uses when `kyuubi.server.redaction.regex` is unset; podsweep always
/// applies it.
pub const DEFAULT_PATTERN: &str = "(?i)secret|password|token|access[.]key";

static DEFAULT: Lazy<Regex> = Lazy::new(|| Regex::new(DEFAULT_PATTERN).expect("a valid pattern"));

/// Keys whose values are credentials though no pattern names them: ZooKeeper's digest
/// (`user:password`), whose password part alone is hidden too.
pub const CREDENTIAL_KEYS: [&str; 2] = [
    "kyuubi.ha.zookeeper.auth.digest",
    "kyuubi.ha.zookeeper.engine.auth.digest",
];

/// Which configuration values are secret.
#[derive(Clone, Debug, Default)]
pub struct Redactor {
    configured: Option<Regex>,
    /// The configured pattern did not compile: every value is secret.
    everything: bool,
}

impl Redactor {
    /// The redactor of a configuration: the default pattern, plus `kyuubi.server.redaction.regex`
    /// when it is set.
    pub fn from_conf(raw: &HashMap<String, String>) -> Self {
        match raw
            .get(keys::REDACTION_REGEX)
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
        {
            None => Redactor::default(),
            Some(p) => match Regex::new(p) {
                Ok(r) => Redactor {
                    configured: Some(r),
                    everything: false,
                },
                Err(_) => {
                    tracing::warn!(
                        "{} is not a regular expression podsweep can use (no look-around or \
                         back-references here): podsweep hides every configuration value in \
                         its logs",
                        keys::REDACTION_REGEX
                    );
                    Redactor {
                        configured: None,
                        everything: true,
                    }
                }
            },
        }
    }

    fn matches(&self, s: &str) -> bool {
        DEFAULT.is_match(s) || self.configured.as_ref().is_some_and(|r| r.is_match(s))
    }

    /// Kyuubi's rule: the value of `key` is secret when the pattern matches the key or the value.
    pub fn is_secret(&self, key: &str, value: &str) -> bool {
        self.everything
            || CREDENTIAL_KEYS.contains(&key)
            || self.matches(key)
            || self.matches(value)
    }

    /// The value as it may be shown: the replacement text when it is secret, else the value with
    /// any URL password masked.
    pub fn shown<'a>(&self, key: &str, value: &'a str) -> Cow<'a, str> {
        if self.is_secret(key, value) {
            Cow::Borrowed(REPLACEMENT)
        } else {
            mask_url_passwords(value)
        }
    }

    /// The secret values of a configuration (see [`remember`]).
    pub fn secrets(&self, raw: &HashMap<String, String>) -> Vec<String> {
        let mut out: Vec<String> = raw
            .iter()
            .filter(|(k, v)| self.is_secret(k, v))
            .map(|(_, v)| v.trim().to_owned())
            .filter(|v| worth_hiding(v))
            .collect();
        // A digest's password may be shown without its user.
        for key in CREDENTIAL_KEYS {
            if let Some((_, password)) = raw.get(key).and_then(|v| v.trim().split_once(':')) {
                if worth_hiding(password) {
                    out.push(password.to_owned());
                }
            }
        }
        out
    }
}

/// Values too short or too common to search for in free text: replacing every `true` of a log
/// line would garble it without hiding anything.
fn worth_hiding(v: &str) -> bool {
    v.chars().count() >= 3 && !v.eq_ignore_ascii_case("true") && !v.eq_ignore_ascii_case("false")
}

/// Every secret value podsweep was handed in this process, longest first (so a secret that
/// contains another is replaced whole).
static SECRETS: Lazy<RwLock<Vec<String>>> = Lazy::new(RwLock::default);

/// Remembers the secret values of a configuration, for [`scrub`].
pub fn remember(raw: &HashMap<String, String>, redactor: &Redactor) {
    let found = redactor.secrets(raw);
    if found.is_empty() {
        return;
    }
    let mut all = SECRETS.write().unwrap_or_else(|p| p.into_inner());
    for s in found {
        if !all.contains(&s) {
            all.push(s);
        }
    }
    all.sort_by_key(|s| std::cmp::Reverse(s.len()));
}

/// Free text with every remembered secret value and every URL password replaced.
pub fn scrub(text: &str) -> Cow<'_, str> {
    let secrets = SECRETS.read().unwrap_or_else(|p| p.into_inner());
    replace_secrets(text, &secrets)
}

/// Free text with the secret values of one configuration and every URL password replaced
/// (what [`scrub`] does after that configuration was [`remember`]ed; `org.podsweep.Redaction`
/// does the same on the JVM, `tests/data/redaction.json` holds the cases both pass).
pub fn scrub_with(raw: &HashMap<String, String>, text: &str) -> String {
    let mut secrets = Redactor::from_conf(raw).secrets(raw);
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    replace_secrets(text, &secrets).into_owned()
}

fn replace_secrets<'a>(text: &'a str, secrets: &[String]) -> Cow<'a, str> {
    let masked = mask_url_passwords(text);
    if secrets.is_empty() || !secrets.iter().any(|s| masked.contains(s.as_str())) {
        return masked;
    }
    let mut out = masked.into_owned();
    for s in secrets {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), REPLACEMENT);
        }
    }
    Cow::Owned(out)
}

static URL_PASSWORD: Lazy<Regex> = Lazy::new(|| {
    // scheme://user:password@ : the password part, up to the '@' of the authority.
    Regex::new(r"([A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*):([^/\s@]*)@").expect("a valid pattern")
});

/// `scheme://user:password@host` with the password replaced.
pub fn mask_url_passwords(text: &str) -> Cow<'_, str> {
    URL_PASSWORD.replace_all(text, format!("$1:{REPLACEMENT}@").as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::config::conf_of as conf;

    #[test]
    fn kyuubis_rule_on_keys_and_values() {
        let r = Redactor::default();
        assert!(r.is_secret("kyuubi.kubernetes.authenticate.oauthToken", "abc"));
        assert!(r.is_secret("spark.ssl.keyPassword", "abc"));
        assert!(r.is_secret("fs.s3a.access.key", "AKIA"));
        assert!(r.is_secret("kyuubi.some.key", "my-secret-value"));
        assert!(!r.is_secret("kyuubi.kubernetes.namespace", "spark"));
        assert_eq!(r.shown("x.password", "hunter22"), REPLACEMENT);
        assert_eq!(r.shown("x.namespace", "spark"), "spark");
    }

    #[test]
    fn a_configured_pattern_widens_and_a_broken_one_hides_everything() {
        let r = Redactor::from_conf(&conf(&[(keys::REDACTION_REGEX, "ha\\.addresses")]));
        assert!(r.is_secret("kyuubi.ha.addresses", "zk:2181"));
        assert!(r.is_secret("a.token", "x"), "the default still applies");
        let r = Redactor::from_conf(&conf(&[(keys::REDACTION_REGEX, "(?<=x)y")]));
        assert!(r.is_secret("kyuubi.kubernetes.namespace", "spark"));
    }

    #[test]
    fn url_passwords_are_masked() {
        assert_eq!(
            mask_url_passwords("cannot connect to http://root:pa55@etcd-0:2379, x"),
            format!("cannot connect to http://root:{REPLACEMENT}@etcd-0:2379, x")
        );
        assert_eq!(
            mask_url_passwords("https://host:6443/api"),
            "https://host:6443/api"
        );
    }

    #[test]
    fn the_shared_cases_of_tests_data_redaction_json() {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/redaction.json");
        let cases: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("the table")).unwrap();
        for case in cases.as_array().unwrap() {
            let raw: HashMap<String, String> = case["conf"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_owned()))
                .collect();
            let text = case["text"].as_str().unwrap();
            assert_eq!(
                scrub_with(&raw, text),
                case["want"].as_str().unwrap(),
                "{}",
                case["name"]
            );
        }
    }

    #[test]
    fn remembered_secrets_are_scrubbed_from_free_text() {
        let raw = conf(&[
            ("kyuubi.kubernetes.authenticate.oauthToken", "tok-3a9f1e2d"),
            (keys::REDACTION_REGEX, "custom\\.key"),
            ("custom.key", "value-7c1b"),
            ("other.password", "true"),
        ]);
        let r = Redactor::from_conf(&raw);
        remember(&raw, &r);
        let s = scrub("header tok-3a9f1e2d and value-7c1b, flag true");
        assert!(
            !s.contains("tok-3a9f1e2d") && !s.contains("value-7c1b"),
            "{s}"
        );
        assert!(s.contains("flag true"), "{s}");
    }
}
