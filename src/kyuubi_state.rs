//! Kyuubi 1.12.0's view of a driver pod, in Rust: the `ApplicationState` its
//! `KubernetesApplicationOperation` computes, and the termination time podsweep reads, for the
//! pods podsweep watches itself (self-watch mode).
//!
//! The same rules as the Java adapter `org.podsweep.fabric8.KyuubiPodObserver` (`applicationState`,
//! `terminatedAtMillis`); both are tested against one table of pods, `tests/data/kyuubi-pods.json`,
//! which the JVM suite also checks against Kyuubi's own class.
//!
//! # Guarantees
//! * Never panics, whatever the pod holds; a missing part (metadata, labels, status, containers)
//!   counts as absent, and a pod without a name or a UID gives no observation.
//! * Phases are matched with their exact case (`succeeded` is not `Succeeded`), as in Kyuubi; the
//!   state container's name is matched ignoring case, as in Kyuubi.
//! * `lastState` is never read: it belongs to an earlier run of a restarted container.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{ContainerState, ContainerStatus, Pod, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::model::{
    AppState, EventKind, Observation, PodAnnotations, KEEP_ANNOTATION, RETAIN_ANNOTATION,
};

/// Label every Kyuubi engine pod carries (the watch's label selector).
pub const UNIQUE_TAG_LABEL: &str = "kyuubi-unique-tag";
/// Label Spark puts on its pods; with the tag it marks a Kyuubi Spark driver pod.
pub const APP_SELECTOR_LABEL: &str = "spark-app-selector";
/// Kyuubi's default of `kyuubi.kubernetes.application.state.container`.
pub const DEFAULT_STATE_CONTAINER: &str = "spark-kubernetes-driver";

/// Kyuubi's `kyuubi.kubernetes.application.state.source`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateSource {
    Pod,
    Container,
}

/// Where Kyuubi reads an application's state from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateConfig {
    pub source: StateSource,
    /// `kyuubi.kubernetes.application.state.container`, compared ignoring case.
    pub container: String,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            source: StateSource::Pod,
            container: DEFAULT_STATE_CONTAINER.to_owned(),
        }
    }
}

/// What one watch event of `pod` tells the engine; `None` without a name or a UID.
pub fn observation(pod: &Pod, cfg: &StateConfig, kind: EventKind) -> Option<Observation> {
    observation_of(&pod.metadata, pod.status.as_ref(), cfg, kind)
}

/// [`observation`] of a pod given by its metadata and status (the watch's
/// [`crate::watch::WatchedPod`] keeps no more).
pub fn observation_of(
    meta: &ObjectMeta,
    status: Option<&PodStatus>,
    cfg: &StateConfig,
    kind: EventKind,
) -> Option<Observation> {
    let labels = meta.labels.as_ref();
    let state = state_of(status, cfg, kind == EventKind::Delete);
    // Read only where they can matter: an event that can lead to a DELETE.
    let annotations = if state.is_terminated() {
        meta.annotations.as_ref().and_then(|a| {
            PodAnnotations::of(
                a.get(RETAIN_ANNOTATION).map(String::as_str),
                a.get(KEEP_ANNOTATION).map(String::as_str),
            )
        })
    } else {
        None
    };
    Some(Observation {
        kind,
        tag: labels
            .and_then(|l| l.get(UNIQUE_TAG_LABEL))
            .cloned()
            .unwrap_or_default(),
        pod_name: meta.name.clone().filter(|n| !n.is_empty())?,
        pod_uid: meta.uid.clone().filter(|u| !u.is_empty())?,
        state,
        has_app_selector: labels.is_some_and(|l| l.contains_key(APP_SELECTOR_LABEL)),
        terminated_at: terminated_at_of(status, cfg),
        deletion_requested: meta.deletion_timestamp.is_some(),
        annotations,
    })
}

/// Kyuubi 1.12.0's `ApplicationState` of a pod. With source `CONTAINER` and a container named
/// like the state container: a terminal container state wins, else a terminal pod phase, else the
/// container's state; otherwise the pod phase. For a DELETE event (`deleted`) a state that is not
/// terminal becomes FAILED (a deleted pod's last snapshot may still say Pending).
pub fn application_state(pod: &Pod, cfg: &StateConfig, deleted: bool) -> AppState {
    state_of(pod.status.as_ref(), cfg, deleted)
}

fn state_of(status: Option<&PodStatus>, cfg: &StateConfig, deleted: bool) -> AppState {
    let pod_state = phase_state(status.and_then(|s| s.phase.as_deref()));
    let container_state = match cfg.source {
        StateSource::Pod => None,
        StateSource::Container => status
            .and_then(|s| state_container(s.container_statuses.as_deref(), &cfg.container))
            .map(|c| container_state(c.state.as_ref())),
    };
    let state = match container_state {
        Some(c) if c.is_terminated() => c,
        _ if pod_state.is_terminated() => pod_state,
        Some(c) => c,
        None => pod_state,
    };
    if deleted && !state.is_terminated() {
        AppState::Failed
    } else {
        state
    }
}

/// When the pod terminated, the first of: with source `CONTAINER`, the state container's current
/// `terminated.finishedAt`; the latest current `terminated.finishedAt` over all containers; when
/// the phase maps to a terminal state, the `Ready` condition's `lastTransitionTime`. `None` when
/// unknown (podsweep then counts from its first observation).
pub fn terminated_at(pod: &Pod, cfg: &StateConfig) -> Option<SystemTime> {
    terminated_at_of(pod.status.as_ref(), cfg)
}

fn terminated_at_of(status: Option<&PodStatus>, cfg: &StateConfig) -> Option<SystemTime> {
    let status = status?;
    let containers = status.container_statuses.as_deref();
    if cfg.source == StateSource::Container {
        if let Some(t) = state_container(containers, &cfg.container).and_then(finished_at) {
            return Some(t);
        }
    }
    let latest = containers
        .unwrap_or_default()
        .iter()
        .filter_map(finished_at)
        .max();
    if latest.is_some() {
        return latest;
    }
    if !phase_state(status.phase.as_deref()).is_terminated() {
        return None;
    }
    status
        .conditions
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|c| c.type_ == "Ready")
        .find_map(|c| c.last_transition_time.as_ref().and_then(epoch_time))
}

/// Kyuubi's pod phase mapping, case-sensitive.
fn phase_state(phase: Option<&str>) -> AppState {
    match phase {
        Some("Pending") => AppState::Pending,
        Some("Running") => AppState::Running,
        Some("Succeeded") => AppState::Finished,
        Some("Failed") | Some("Error") => AppState::Failed,
        Some("OOMKilled") => AppState::Killed,
        _ => AppState::Unknown,
    }
}

/// Kyuubi's container state mapping.
fn container_state(state: Option<&ContainerState>) -> AppState {
    let Some(s) = state else {
        return AppState::Unknown;
    };
    if let Some(w) = &s.waiting {
        let reason = w.reason.as_deref().unwrap_or("").trim();
        return match reason {
            "" | "ContainerCreating" | "PodInitializing" => AppState::Pending,
            _ => AppState::Failed,
        };
    }
    if s.running.is_some() {
        return AppState::Running;
    }
    match &s.terminated {
        None => AppState::Unknown,
        Some(t) if t.exit_code == 0 => AppState::Finished,
        Some(_) => AppState::Failed,
    }
}

/// The first container status named like `wanted`, ignoring case.
fn state_container<'a>(
    containers: Option<&'a [ContainerStatus]>,
    wanted: &str,
) -> Option<&'a ContainerStatus> {
    let wanted = if wanted.is_empty() {
        DEFAULT_STATE_CONTAINER
    } else {
        wanted
    };
    containers?
        .iter()
        .find(|c| equals_ignore_case(&c.name, wanted))
}

/// Java's `String.equalsIgnoreCase`, per character: equal, or equal upper-cased, or equal
/// lower-cased.
fn equals_ignore_case(a: &str, b: &str) -> bool {
    a.chars().count() == b.chars().count()
        && a.chars().zip(b.chars()).all(|(x, y)| {
            x == y || x.to_uppercase().eq(y.to_uppercase()) || x.to_lowercase().eq(y.to_lowercase())
        })
}

/// The current (never the last) `terminated.finishedAt` of a container.
fn finished_at(c: &ContainerStatus) -> Option<SystemTime> {
    c.state
        .as_ref()?
        .terminated
        .as_ref()?
        .finished_at
        .as_ref()
        .and_then(epoch_time)
}

/// A Kubernetes time as wall-clock time, at millisecond precision as the JVM side reads it;
/// `None` at or before the epoch (the JVM side's "unknown").
fn epoch_time(t: &Time) -> Option<SystemTime> {
    let ms = t.0.as_millisecond();
    u64::try_from(ms)
        .ok()
        .filter(|ms| *ms > 0)
        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignore_case_is_per_character() {
        assert!(equals_ignore_case(
            "SPARK-KUBERNETES-DRIVER",
            "spark-kubernetes-driver"
        ));
        assert!(!equals_ignore_case("spark", "spark-"));
        assert!(equals_ignore_case("Ünï", "üNÏ"));
    }

    #[test]
    fn an_empty_pod_is_unknown_and_gives_no_observation() {
        let pod = Pod::default();
        let cfg = StateConfig {
            source: StateSource::Container,
            ..Default::default()
        };
        assert_eq!(application_state(&pod, &cfg, false), AppState::Unknown);
        assert_eq!(application_state(&pod, &cfg, true), AppState::Failed);
        assert_eq!(terminated_at(&pod, &cfg), None);
        assert!(observation(&pod, &cfg, EventKind::Update).is_none());
    }
}
