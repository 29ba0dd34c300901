//! The API Priority and Fairness families of `/metrics`: which priority level and flow schema
//! answered each scope's DELETEs (issue 35 §2), from the status' `apf` part.

use std::fmt;

use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;

use super::{labels, with, Scopes};

impl Scopes {
    /// `podsweep_apf_delete_answers_total` and `podsweep_apf_delete_throttled_total`: DELETE
    /// answers (and 429s among them) by the API Priority and Fairness level and flow schema that
    /// classified them, as the answers' `X-Kubernetes-PF-*` headers name them (UIDs).
    pub(super) fn apf(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        for (name, help, field) in [
            (
                "podsweep_apf_delete_answers",
                "DELETE answers by the API Priority and Fairness priority level and flow schema (UIDs) that classified them.",
                "answers",
            ),
            (
                "podsweep_apf_delete_throttled",
                "DELETEs answered 429 by API Priority and Fairness, by priority level and flow schema (UIDs).",
                "throttled",
            ),
        ] {
            let mut m = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for s in &self.0 {
                for a in s["apf"]["answers"].as_array().into_iter().flatten() {
                    let l = with(
                        labels(s),
                        "priority_level_uid",
                        a["priority_level_uid"].as_str().unwrap_or(""),
                    );
                    let l = with(
                        l,
                        "flow_schema_uid",
                        a["flow_schema_uid"].as_str().unwrap_or(""),
                    );
                    m.encode_family(&l)?.encode_counter::<NoLabelSet, _, u64>(
                        &a[field].as_u64().unwrap_or(0),
                        None,
                    )?;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::prometheus;

    #[test]
    fn answers_and_429s_by_priority_level() {
        let s = json!({
            "scope": "prod:spark", "context": "prod", "namespace": "spark", "healthy": true,
            "apf": {"priority_level_uid": "pl-1", "flow_schema_uid": "fs-1", "answers": [
                {"priority_level_uid": "pl-1", "flow_schema_uid": "fs-1", "answers": 40, "throttled": 3},
                {"priority_level_uid": "pl-0", "flow_schema_uid": "fs-0", "answers": 2, "throttled": 0},
            ]},
        });
        let text = prometheus(&[s]);
        let l =
            r#"context="prod",namespace="spark",priority_level_uid="pl-1",flow_schema_uid="fs-1""#;
        assert!(
            text.contains(&format!("podsweep_apf_delete_answers_total{{{l}}} 40")),
            "{text}"
        );
        assert!(
            text.contains(&format!("podsweep_apf_delete_throttled_total{{{l}}} 3")),
            "{text}"
        );
        assert!(
            text.contains(r#"priority_level_uid="pl-0",flow_schema_uid="fs-0"} 2"#),
            "{text}"
        );
        // A scope no answer of which named a level: no series.
        let none = prometheus(&[json!({"scope": "s", "namespace": "n", "apf": null})]);
        assert!(
            !none.contains("podsweep_apf_delete_answers_total{"),
            "{none}"
        );
    }
}
