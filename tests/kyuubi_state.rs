//! Kyuubi 1.12.0's state mapping in Rust against the shared table `tests/data/kyuubi-pods.json`
//! (the JVM suite `KyuubiStateMappingSuite` checks the same table against Kyuubi's own class).

use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::Pod;
use podsweep::kyuubi_state::{self, StateConfig, StateSource};
use podsweep::model::EventKind;

fn table() -> Vec<serde_json::Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/kyuubi-pods.json");
    let text = std::fs::read_to_string(path).expect("the shared table");
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    v["cases"].as_array().expect("cases").clone()
}

fn configs() -> [(&'static str, StateConfig); 3] {
    [
        ("POD", StateConfig::default()),
        (
            "CONTAINER",
            StateConfig {
                source: StateSource::Container,
                ..Default::default()
            },
        ),
        (
            "CONTAINER_UPPER",
            StateConfig {
                source: StateSource::Container,
                container: "SPARK-KUBERNETES-DRIVER".into(),
            },
        ),
    ]
}

fn rfc3339(t: SystemTime) -> String {
    let ms = t.duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
    jiff::Timestamp::from_millisecond(ms).unwrap().to_string()
}

#[test]
fn every_case_of_the_shared_table_matches() {
    let cases = table();
    assert!(cases.len() >= 19, "{} cases", cases.len());
    let mut checked = 0;
    for case in &cases {
        let name = case["name"].as_str().unwrap();
        let pod: Pod = serde_json::from_value(case["pod"].clone())
            .unwrap_or_else(|e| panic!("{name}: not a Pod: {e}"));
        for (key, cfg) in configs() {
            for (suffix, kind) in [("", EventKind::Update), ("/DELETE", EventKind::Delete)] {
                let want = case["states"][format!("{key}{suffix}")]
                    .as_str()
                    .unwrap_or_else(|| panic!("{name}: no state {key}{suffix}"));
                let got = kyuubi_state::application_state(&pod, &cfg, kind == EventKind::Delete);
                assert_eq!(got.as_str(), want, "{name}: state {key}{suffix}");
                let obs = kyuubi_state::observation(&pod, &cfg, kind).expect("name and uid");
                assert_eq!(
                    obs.state.as_str(),
                    want,
                    "{name}: observed state {key}{suffix}"
                );
                checked += 1;
            }
            let want = case["terminatedAt"][key].as_str();
            let got = kyuubi_state::terminated_at(&pod, &cfg).map(rfc3339);
            assert_eq!(got.as_deref(), want, "{name}: terminatedAt {key}");
            checked += 1;
        }
        let obs = kyuubi_state::observation(&pod, &StateConfig::default(), EventKind::Add)
            .expect("name and uid");
        let meta = &pod.metadata;
        assert_eq!(Some(obs.pod_name.as_str()), meta.name.as_deref(), "{name}");
        assert_eq!(Some(obs.pod_uid.as_str()), meta.uid.as_deref(), "{name}");
        let labels = meta.labels.clone().unwrap_or_default();
        assert_eq!(
            Some(obs.tag.as_str()),
            labels.get("kyuubi-unique-tag").map(String::as_str),
            "{name}"
        );
        assert_eq!(
            obs.has_app_selector,
            labels.contains_key("spark-app-selector"),
            "{name}"
        );
        assert_eq!(
            obs.deletion_requested,
            meta.deletion_timestamp.is_some(),
            "{name}"
        );
    }
    println!(
        "{} cases, {checked} states and termination times match",
        cases.len()
    );
}

#[test]
fn a_deletion_timestamp_and_missing_labels_are_read() {
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "driver", "uid": "u1",
            "deletionTimestamp": "2026-03-04T05:06:07Z",
            "labels": {"kyuubi-unique-tag": "t"}
        },
        "status": {"phase": "Succeeded"}
    }))
    .unwrap();
    let obs = kyuubi_state::observation(&pod, &StateConfig::default(), EventKind::Update).unwrap();
    assert!(obs.deletion_requested);
    assert!(!obs.has_app_selector);
    assert!(!obs.is_kyuubi_driver());
    assert!(obs.is_cleaned());
    let nameless: Pod =
        serde_json::from_value(serde_json::json!({"metadata": {"uid": "u"}})).unwrap();
    assert!(
        kyuubi_state::observation(&nameless, &StateConfig::default(), EventKind::Add).is_none()
    );
}

/// The watch decodes pods into [`podsweep::watch::WatchedPod`], which keeps only what podsweep
/// reads: every case of the shared table, with podsweep's annotations added, gives the same
/// observation either way, under every state source and event kind.
#[test]
fn the_watchs_slim_pods_give_the_same_observations() {
    let mut checked = 0;
    for case in &table() {
        let name = case["name"].as_str().unwrap();
        let mut json = case["pod"].clone();
        json["metadata"]["annotations"] = serde_json::json!({
            "podsweep.org/retain-period": "PT1H", "podsweep.org/keep": "false", "other": "x"
        });
        let full: Pod = serde_json::from_value(json.clone()).unwrap();
        let slim: podsweep::watch::WatchedPod = serde_json::from_value(json)
            .unwrap_or_else(|e| panic!("{name}: not a WatchedPod: {e}"));
        for (key, cfg) in configs() {
            for kind in [EventKind::Add, EventKind::Update, EventKind::Delete] {
                assert_eq!(
                    slim.observation(&cfg, kind),
                    kyuubi_state::observation(&full, &cfg, kind),
                    "{name}: {key} {kind:?}"
                );
                checked += 1;
            }
        }
    }
    println!("{checked} observations match");
}
