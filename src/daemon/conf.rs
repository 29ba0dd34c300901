//! Kyuubi's configuration file, read as Kyuubi reads it, plus `--conf key=value` overrides.
//!
//! Kyuubi loads `kyuubi-defaults.conf` with `java.util.Properties.load` over a UTF-8 reader and
//! trims every value: `key value`, `key=value` and `key:value` lines, `#` and `!` comments,
//! backslash continuations and escapes. The `java-properties` crate implements that format.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use thiserror::Error;

use crate::config::keys;

#[derive(Debug, Error)]
pub enum ConfError {
    #[error("cannot read the configuration file {path}: {message}")]
    File { path: String, message: String },
    #[error("--conf {arg:?}: expected KEY=VALUE")]
    Override { arg: String },
}

/// The file's keys and values (values trimmed, as Kyuubi does).
pub fn read_properties(
    input: impl Read,
    origin: &str,
) -> Result<HashMap<String, String>, ConfError> {
    let mut out = HashMap::new();
    java_properties::PropertiesIter::new_with_encoding(input, encoding_rs::UTF_8)
        .read_into(|k, v| {
            out.insert(k, v.trim().to_owned());
        })
        .map_err(|e| ConfError::File {
            path: origin.to_owned(),
            message: e.to_string(),
        })?;
    Ok(out)
}

/// Applies `KEY=VALUE` overrides in order (the last one of a key wins); the key is trimmed, the
/// value trimmed as in the file.
pub fn apply_overrides(
    conf: &mut HashMap<String, String>,
    overrides: &[String],
) -> Result<(), ConfError> {
    for arg in overrides {
        let Some((k, v)) = arg.split_once('=') else {
            return Err(ConfError::Override { arg: arg.clone() });
        };
        let k = k.trim();
        if k.is_empty() {
            return Err(ConfError::Override { arg: arg.clone() });
        }
        conf.insert(k.to_owned(), v.trim().to_owned());
    }
    Ok(())
}

/// The daemon's configuration: the file, the overrides, and self-watch mode forced on.
pub fn load(path: &Path, overrides: &[String]) -> Result<HashMap<String, String>, ConfError> {
    let mut conf = read_file(path, overrides)?;
    conf.insert(keys::WATCH_ENABLED.to_owned(), "true".to_owned());
    Ok(conf)
}

/// The file and the overrides, as they are (the operator's verbs read the HA keys of any
/// server's file: a patched Kyuubi's, a drop-in's or a daemon's).
pub fn read_file(path: &Path, overrides: &[String]) -> Result<HashMap<String, String>, ConfError> {
    let shown = path.display().to_string();
    let file = std::fs::File::open(path).map_err(|e| ConfError::File {
        path: shown.clone(),
        message: e.to_string(),
    })?;
    let mut conf = read_properties(std::io::BufReader::new(file), &shown)?;
    apply_overrides(&mut conf, overrides)?;
    Ok(conf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_kyuubis_file_syntax() {
        let text = "# a comment\n\
                    ! another\n\
                    kyuubi.ha.addresses zk-1:2181,zk-2:2181\n\
                    kyuubi.kubernetes.namespace=spark   \n\
                    kyuubi.kubernetes.context:prod\n\
                    \t  kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.kind = COMPLETED\n\
                    kyuubi.kubernetes.client.initialize.list = prod:a,\\\n    prod:b\n\
                    kyuubi.kubernetes.authenticate.oauthTokenFile /var/run/tok\\u00e9n\n\
                    spark.master k8s://https://api:6443\n\
                    kyuubi.ha.namespace=ünï\n\
                    empty.value=\n";
        let c = read_properties(text.as_bytes(), "test").unwrap();
        assert_eq!(c["kyuubi.ha.addresses"], "zk-1:2181,zk-2:2181");
        assert_eq!(c["kyuubi.kubernetes.namespace"], "spark");
        assert_eq!(c["kyuubi.kubernetes.context"], "prod");
        assert_eq!(c[keys::WATCH_KIND], "COMPLETED");
        assert_eq!(c[keys::INIT_LIST], "prod:a,prod:b");
        assert_eq!(
            c["kyuubi.kubernetes.authenticate.oauthTokenFile"],
            "/var/run/tokén"
        );
        assert_eq!(c["spark.master"], "k8s://https://api:6443");
        assert_eq!(c["kyuubi.ha.namespace"], "ünï", "UTF-8, as Kyuubi reads it");
        assert_eq!(c["empty.value"], "");
        assert_eq!(c.len(), 9);
    }

    #[test]
    fn overrides_win_and_must_be_key_value() {
        let mut c = read_properties("a=1\nb=2\n".as_bytes(), "t").unwrap();
        apply_overrides(&mut c, &["a=10".into(), " c = x=y ".into(), "a=11".into()]).unwrap();
        assert_eq!(c["a"], "11");
        assert_eq!(c["b"], "2");
        assert_eq!(c["c"], "x=y");
        for bad in ["novalue", "=v", " =v"] {
            let e = apply_overrides(&mut c, &[bad.to_owned()]).unwrap_err();
            assert!(e.to_string().contains("KEY=VALUE"), "{e}");
        }
    }

    #[test]
    fn load_forces_watch_mode_and_names_a_missing_file() {
        let dir = std::env::temp_dir().join(format!("podsweep-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kyuubi-defaults.conf");
        std::fs::write(&path, format!("{} false\n", keys::WATCH_ENABLED)).unwrap();
        let c = load(&path, &[]).unwrap();
        assert_eq!(c[keys::WATCH_ENABLED], "true");
        let e = load(&dir.join("absent.conf"), &[]).unwrap_err();
        assert!(e.to_string().contains("absent.conf"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
