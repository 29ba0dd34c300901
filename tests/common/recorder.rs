//! A [`PodDeleter`] that records each DELETE instead of sending it, and answers "accepted".

#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use podsweep::deleter::{Outcome, OutcomeClass, PodDeleter};
use podsweep::sweeper::DeleterSource;

#[derive(Default)]
pub struct Recorder {
    /// UIDs in the order their DELETE was sent.
    pub uids: Mutex<Vec<String>>,
    /// Also print `DELETE <uid>` on stdout (for child processes).
    pub echo: bool,
    /// Events recorded: (pod, reason).
    pub events: Mutex<Vec<(String, String)>>,
}

impl Recorder {
    pub fn echoing() -> Self {
        Recorder {
            echo: true,
            ..Default::default()
        }
    }

    pub fn count(&self) -> usize {
        self.uids.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

impl PodDeleter for Recorder {
    fn record(&self, note: podsweep::deleter::EventNote) -> BoxFuture<'static, Result<(), String>> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((note.pod, note.reason.to_owned()));
        Box::pin(async { Ok(()) })
    }

    fn delete(&self, _name: &str, uid: &str, _dry_run: bool) -> BoxFuture<'static, Outcome> {
        self.uids
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(uid.to_owned());
        if self.echo {
            println!("DELETE {uid}");
            let _ = std::io::stdout().flush();
        }
        Box::pin(async {
            Outcome {
                class: OutcomeClass::Accepted,
                code: Some(200),
                reason: String::new(),
                message: String::new(),
                retry_after: None,
                flow: None,
            }
        })
    }
}

/// A deleter source that hands every scope the same recorder.
pub fn source(recorder: Arc<Recorder>) -> DeleterSource {
    Arc::new(move |_| {
        let d: Arc<dyn PodDeleter> = recorder.clone();
        Box::pin(async move { Ok(d) })
    })
}
