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
