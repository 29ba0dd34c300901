//! The pods the watch decodes: only what podsweep reads of a pod is kept, the rest is skipped
//! while the JSON is read, never built.
//!
//! kube-rs decodes each list page and each watch event into the watch's resource type; with the
//! full `Pod` every field of every pod (its spec, its managed fields, every label, annotation,
//! condition and container status) was built and dropped a moment later. [`WatchedPod`] holds
//! only: the name, namespace, UID, resourceVersion (kube-rs resumes from it) and
//! deletionTimestamp; the labels `kyuubi-unique-tag` and `spark-app-selector`; podsweep's
//! two annotations; the phase; each container status's name and state (waiting's reason,
//! whether running, terminated's exit code and `finishedAt`); and the `Ready` condition's
//! `lastTransitionTime`. That is everything [`crate::kyuubi_state`] reads.
//!
//! # Guarantees
//! * [`WatchedPod::observation`] is [`crate::kyuubi_state`]'s observation of the full pod
//!   (`tests/kyuubi_state.rs` checks every pod of the shared table both ways).
//! * Its metadata is an `ObjectMeta` (kube-rs reads the resourceVersion there) with the kept
//!   fields alone; its status, when the pod has one, is boxed (a list page holds its pods
//!   side by side).
//! * A missing or `null` part counts as absent, as in the full decoding; a kept field of the
//!   wrong type, or a terminated state without its exit code, is an error, as it was (kube-rs
//!   reports the event as undecodable and the watch lists again). A field that is skipped is
//!   not checked.
//!
//! # Caveats
//! * A field podsweep starts to read must be added here too, or it reads as absent (the table
//!   test above fails first).

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodCondition, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;

use crate::kyuubi_state::{StateConfig, APP_SELECTOR_LABEL, UNIQUE_TAG_LABEL};
use crate::model::{EventKind, Observation, KEEP_ANNOTATION, RETAIN_ANNOTATION};

/// A pod as the watch decodes it: only the fields podsweep reads (module docs).
#[derive(Clone, Debug, Default)]
pub struct WatchedPod {
    pub metadata: ObjectMeta,
    pub status: Option<Box<PodStatus>>,
}

impl WatchedPod {
    /// What one event of this pod tells the engine ([`crate::kyuubi_state::observation`]).
    pub fn observation(&self, cfg: &StateConfig, kind: EventKind) -> Option<Observation> {
        crate::kyuubi_state::observation_of(&self.metadata, self.status.as_deref(), cfg, kind)
    }
}

impl k8s_openapi::Resource for WatchedPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for WatchedPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl<'de> Deserialize<'de> for WatchedPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(WirePod::deserialize(d)?.into_pod())
    }
}

const LABELS: &[&str] = &[UNIQUE_TAG_LABEL, APP_SELECTOR_LABEL];
const ANNOTATIONS: &[&str] = &[RETAIN_ANNOTATION, KEEP_ANNOTATION];

#[derive(Deserialize)]
struct WirePod {
    #[serde(default)]
    metadata: Option<WireMeta>,
    #[serde(default)]
    status: Option<WireStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    deletion_timestamp: Option<Time>,
    #[serde(default, deserialize_with = "kept_labels")]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "kept_annotations")]
    annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus {
    phase: Option<String>,
    container_statuses: Option<Vec<WireContainer>>,
    conditions: Option<Vec<WireCondition>>,
}

#[derive(Deserialize)]
struct WireContainer {
    #[serde(default)]
    name: String,
    state: Option<WireState>,
}

#[derive(Deserialize)]
struct WireState {
    waiting: Option<WireWaiting>,
    running: Option<IgnoredAny>,
    terminated: Option<WireTerminated>,
}

#[derive(Deserialize)]
struct WireWaiting {
    reason: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireTerminated {
    /// Required, as in the full decoding: a terminated state without it is no verdict.
    exit_code: i32,
    finished_at: Option<Time>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCondition {
    #[serde(rename = "type", default)]
    type_: String,
    last_transition_time: Option<Time>,
}

impl WirePod {
    fn into_pod(self) -> WatchedPod {
        let metadata = self
            .metadata
            .map_or_else(ObjectMeta::default, |m| ObjectMeta {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                resource_version: m.resource_version,
                deletion_timestamp: m.deletion_timestamp,
                labels: m.labels,
                annotations: m.annotations,
                ..ObjectMeta::default()
            });
        let status = self.status.map(|s| {
            Box::new(PodStatus {
                phase: s.phase,
                container_statuses: s.container_statuses.map(|cs| {
                    cs.into_iter()
                        .map(|c| ContainerStatus {
                            name: c.name,
                            state: c.state.map(|st| ContainerState {
                                waiting: st.waiting.map(|w| ContainerStateWaiting {
                                    reason: w.reason,
                                    ..Default::default()
                                }),
                                running: st.running.map(|_| ContainerStateRunning::default()),
                                terminated: st.terminated.map(|t| ContainerStateTerminated {
                                    exit_code: t.exit_code,
                                    finished_at: t.finished_at,
                                    ..Default::default()
                                }),
                            }),
                            ..Default::default()
                        })
                        .collect()
                }),
                // Only `Ready` is read (its lastTransitionTime, for a pod without container times).
                conditions: s.conditions.map(|cs| {
                    cs.into_iter()
                        .filter(|c| c.type_ == "Ready")
                        .map(|c| PodCondition {
                            type_: c.type_,
                            last_transition_time: c.last_transition_time,
                            ..Default::default()
                        })
                        .collect()
                }),
                ..PodStatus::default()
            })
        });
        WatchedPod { metadata, status }
    }
}

fn kept_labels<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    d.deserialize_option(Kept(LABELS))
}

fn kept_annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    d.deserialize_option(Kept(ANNOTATIONS))
}

/// A string map of which only the entries under these keys are kept; the other values are
/// skipped unread.
struct Kept(&'static [&'static str]);

impl<'de> Visitor<'de> for Kept {
    type Value = Option<BTreeMap<String, String>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a map of strings, or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
        let mut kept = BTreeMap::new();
        while let Some(key) = map.next_key::<Key<'de>>()? {
            match self.0.iter().find(|k| **k == key.as_str()) {
                Some(k) => {
                    let v: String = map.next_value()?;
                    kept.insert((*k).to_owned(), v);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Some(kept))
    }
}

/// A map key, borrowed from the input when it can be (no allocation for a key that is skipped).
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(v))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v.to_owned()))
            }

            fn visit_string<E: de::Error>(self, v: String) -> Result<Key<'de>, E> {
                Ok(Key::Owned(v))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_podsweep_reads_is_kept() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "kyuubi-batch-1-driver", "namespace": "spark", "uid": "u-1",
                "resourceVersion": "42", "deletionTimestamp": "2026-12-06T10:00:00Z",
                "labels": {"kyuubi-unique-tag": "t", "spark-app-selector": "spark-1",
                           "spark-role": "driver"},
                "annotations": {"podsweep.org/keep": "true", "other": "x"},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
                "ownerReferences": [{"kind": "X", "name": "y", "uid": "z", "apiVersion": "v1"}]
            },
            "spec": {"containers": [{"name": "spark-kubernetes-driver", "image": "spark"}]},
            "status": {
                "phase": "Failed", "podIP": "10.0.0.1",
                "conditions": [
                    {"type": "Ready", "status": "False", "lastTransitionTime": "2026-12-06T09:00:00Z"},
                    {"type": "PodScheduled", "status": "True"}
                ],
                "containerStatuses": [{
                    "name": "spark-kubernetes-driver", "image": "spark", "imageID": "x",
                    "ready": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": 1, "reason": "Error",
                              "finishedAt": "2026-12-06T09:00:00Z", "message": "long text"}},
                    "lastState": {"terminated": {"exitCode": 0}}
                }]
            }
        });
        let pod: WatchedPod = serde_json::from_value(json).expect("decodes");
        let m = &pod.metadata;
        assert_eq!(m.name.as_deref(), Some("kyuubi-batch-1-driver"));
        assert_eq!(m.resource_version.as_deref(), Some("42"));
        assert!(m.deletion_timestamp.is_some());
        assert!(m.managed_fields.is_none() && m.owner_references.is_none());
        let labels = m.labels.as_ref().expect("labels");
        assert_eq!(labels.len(), 2, "{labels:?}");
        let annotations = m.annotations.as_ref().expect("annotations");
        assert_eq!(
            annotations.keys().collect::<Vec<_>>(),
            [&KEEP_ANNOTATION.to_owned()]
        );
        let s = pod.status.as_ref().expect("status");
        assert!(s.pod_ip.is_none());
        assert_eq!(s.conditions.as_ref().map(Vec::len), Some(1));
        let c = &s.container_statuses.as_ref().expect("containers")[0];
        assert!(c.last_state.is_none() && c.image.is_empty());
        let t = c
            .state
            .as_ref()
            .and_then(|s| s.terminated.as_ref())
            .expect("terminated");
        assert_eq!(t.exit_code, 1);
        assert!(t.finished_at.is_some() && t.message.is_none() && t.reason.is_none());
    }

    #[test]
    fn nulls_and_absent_parts_are_absent() {
        let pod: WatchedPod = serde_json::from_str(
            r#"{"metadata": {"name": "p", "labels": null, "annotations": null,
                "deletionTimestamp": null}, "status": null}"#,
        )
        .expect("decodes");
        assert!(pod.metadata.labels.is_none() && pod.status.is_none());
        let empty: WatchedPod = serde_json::from_str("{}").expect("decodes");
        assert!(empty.metadata.name.is_none());
    }
}
