//! What the JVM tells podsweep about a pod, in Kyuubi's terms, and which of them Kyuubi's cleanup
//! strategy deletes.

use std::time::SystemTime;

/// Kyuubi's `KubernetesCleanupDriverPodStrategy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CleanupKind {
    /// Delete nothing (Kyuubi's default).
    None,
    /// Delete every terminated driver pod.
    All,
    /// Delete only driver pods whose application FINISHED.
    Completed,
}

impl CleanupKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CleanupKind::None => "NONE",
            CleanupKind::All => "ALL",
            CleanupKind::Completed => "COMPLETED",
        }
    }
}

/// Kyuubi's `ApplicationState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppState {
    Pending,
    Running,
    Finished,
    Killed,
    Failed,
    Zombie,
    NotFound,
    Unknown,
}

impl AppState {
    /// Parses Kyuubi's enum name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "PENDING" => AppState::Pending,
            "RUNNING" => AppState::Running,
            "FINISHED" => AppState::Finished,
            "KILLED" => AppState::Killed,
            "FAILED" => AppState::Failed,
            "ZOMBIE" => AppState::Zombie,
            "NOT_FOUND" => AppState::NotFound,
            "UNKNOWN" => AppState::Unknown,
            _ => return None,
        })
    }

    /// The state's code at the JNI boundary: its position in Kyuubi's declaration order
    /// (`PodSweeper` maps the names to the same codes); `None` for anything else.
    pub fn from_code(code: i32) -> Option<Self> {
        Some(match code {
            0 => AppState::Pending,
            1 => AppState::Running,
            2 => AppState::Finished,
            3 => AppState::Killed,
            4 => AppState::Failed,
            5 => AppState::Zombie,
            6 => AppState::NotFound,
            7 => AppState::Unknown,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            AppState::Pending => "PENDING",
            AppState::Running => "RUNNING",
            AppState::Finished => "FINISHED",
            AppState::Killed => "KILLED",
            AppState::Failed => "FAILED",
            AppState::Zombie => "ZOMBIE",
            AppState::NotFound => "NOT_FOUND",
            AppState::Unknown => "UNKNOWN",
        }
    }

    /// Kyuubi's `isTerminated`: FAILED, KILLED, FINISHED, NOT_FOUND.
    pub fn is_terminated(self) -> bool {
        matches!(
            self,
            AppState::Failed | AppState::Killed | AppState::Finished | AppState::NotFound
        )
    }

    /// Whether the cleanup kind deletes a pod that terminated in this state
    /// (COMPLETED: only FINISHED, since Kyuubi counts FAILED, KILLED and NOT_FOUND as failed).
    pub fn cleaned_by(self, kind: CleanupKind) -> bool {
        match kind {
            CleanupKind::None => false,
            CleanupKind::All => self.is_terminated(),
            CleanupKind::Completed => self == AppState::Finished,
        }
    }
}

/// The informer event that produced an observation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Add,
    Update,
    Delete,
}

impl EventKind {
    pub fn from_ordinal(v: i32) -> Option<Self> {
        match v {
            0 => Some(EventKind::Add),
            1 => Some(EventKind::Update),
            2 => Some(EventKind::Delete),
            _ => None,
        }
    }
}

/// One pod event, as the JVM saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    pub kind: EventKind,
    /// Label `kyuubi-unique-tag`.
    pub tag: String,
    pub pod_name: String,
    pub pod_uid: String,
    pub state: AppState,
    /// Label `spark-app-selector` is present.
    pub has_app_selector: bool,
    /// When the pod terminated, from the pod itself (container `finishedAt`, conditions).
    pub terminated_at: Option<SystemTime>,
    /// `metadata.deletionTimestamp` is set.
    pub deletion_requested: bool,
    /// podsweep's annotations on the pod, as it carries them (read only for events that can
    /// lead to a DELETE: a terminal state).
    pub annotations: Option<Box<PodAnnotations>>,
}

/// The annotation with a pod's own retain period (a Kyuubi time value: milliseconds or ISO-8601).
pub const RETAIN_ANNOTATION: &str = "podsweep.org/retain-period";
/// The annotation that keeps a pod from deletion by retain period (`true`); the cap still applies.
pub const KEEP_ANNOTATION: &str = "podsweep.org/keep";

/// podsweep's annotations of a pod, unchecked (the scope task checks them against its settings).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodAnnotations {
    pub retain_period: Option<Box<str>>,
    pub keep: Option<Box<str>>,
}

impl PodAnnotations {
    /// `None` when the pod carries neither annotation.
    pub fn of(retain_period: Option<&str>, keep: Option<&str>) -> Option<Box<Self>> {
        if retain_period.is_none() && keep.is_none() {
            return None;
        }
        Some(Box::new(PodAnnotations {
            retain_period: retain_period.map(Box::from),
            keep: keep.map(Box::from),
        }))
    }

    /// The fingerprint the JVM computes from the two values on its hot path, so that a changed
    /// annotation of a terminated pod reaches its scope's task: Java's
    /// `java.util.Objects.hash(retainPeriod, keep)`, 0 when both are absent.
    pub fn fingerprint(this: Option<&Self>) -> u32 {
        let Some(a) = this else {
            return 0;
        };
        let h = |s: &Option<Box<str>>| s.as_deref().map_or(0, java_string_hash);
        31u32
            .wrapping_mul(31u32.wrapping_add(h(&a.retain_period)))
            .wrapping_add(h(&a.keep))
    }
}

/// Java's `String.hashCode` (over UTF-16 units), as an unsigned word.
pub fn java_string_hash(s: &str) -> u32 {
    s.encode_utf16()
        .fold(0u32, |h, u| h.wrapping_mul(31).wrapping_add(u32::from(u)))
}

impl Observation {
    /// A Kyuubi Spark driver pod carries both `kyuubi-unique-tag` and `spark-app-selector`.
    pub fn is_kyuubi_driver(&self) -> bool {
        !self.tag.is_empty() && self.has_app_selector
    }

    /// The pod is gone or going: a DELETE event, or a deletionTimestamp.
    pub fn is_cleaned(&self) -> bool {
        self.kind == EventKind::Delete || self.deletion_requested
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_is_javas_objects_hash() {
        // Objects.hash("PT1H", "true") and Objects.hash(null, "true") in Java.
        assert_eq!(java_string_hash("PT1H"), 2_465_595);
        assert_eq!(java_string_hash("true"), 3_569_038);
        let both = PodAnnotations::of(Some("PT1H"), Some("true"));
        assert_eq!(
            PodAnnotations::fingerprint(both.as_deref()),
            (31 * (31 + 2_465_595) + 3_569_038) as u32
        );
        assert_eq!(PodAnnotations::fingerprint(None), 0);
        assert!(PodAnnotations::of(None, None).is_none());
    }

    #[test]
    fn state_codes_follow_kyuubis_declaration_order() {
        let names = [
            "PENDING",
            "RUNNING",
            "FINISHED",
            "KILLED",
            "FAILED",
            "ZOMBIE",
            "NOT_FOUND",
            "UNKNOWN",
        ];
        for (code, name) in names.iter().enumerate() {
            let s = AppState::from_code(code as i32).expect("a code of every state");
            assert_eq!(s.as_str(), *name);
            assert_eq!(AppState::parse(name), Some(s));
        }
        assert_eq!(AppState::from_code(-1), None);
        assert_eq!(AppState::from_code(8), None);
    }
}
