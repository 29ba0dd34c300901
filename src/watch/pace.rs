//! When the watch's next list may start: paced across watch errors and leadership terms alike.

use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::pause::{PauseKind, Pauses};

/// First wait before a list that follows a watch that failed or stopped soon after its own list;
/// doubles up to [`RETRY_MAX`], back to the base after a watch that lasted [`RETRY_RESET_AFTER`]
/// past its list. Kept across leadership terms, so a leadership that flaps does not relist at
/// once each time.
const RETRY_BASE: Duration = Duration::from_millis(800);
const RETRY_MAX: Duration = Duration::from_secs(300);
pub(super) const RETRY_RESET_AFTER: Duration = Duration::from_secs(60);

/// When the next list may start: paced across watch errors and leadership terms alike.
pub(super) struct Pace {
    backoff: Backoff,
    /// No list before then.
    pub(super) next_at: Option<Instant>,
    /// When the current stream's list started, while one runs.
    started: Option<Instant>,
    last_expiry: Option<Instant>,
}

impl Pace {
    pub(super) fn new() -> Self {
        Pace {
            backoff: Backoff::new(RETRY_BASE, RETRY_MAX),
            next_at: None,
            started: None,
            last_expiry: None,
        }
    }

    /// Waits until a list may start, and notes that one starts. A wait cut short (the term
    /// ended) leaves the time in place for the next term.
    ///
    /// A wait is the scope's `list_pacing` pause, with its end: this server leads (after terms
    /// that ended soon after their list, a new one may wait minutes) but watches nothing yet.
    pub(super) async fn list(&mut self, pauses: &Pauses) {
        if let Some(at) = self.next_at.filter(|at| *at > Instant::now()) {
            pauses.open(
                PauseKind::ListPacing,
                Some(at),
                "this server leads the scope, but its first list waits: the watches of recent \
                 terms ended soon after their lists, so lists are spaced out (up to 5 minutes)",
            );
            // Closed however the wait ends (a term that ends cuts it short).
            let _open = ClosePause(pauses, PauseKind::ListPacing);
            tokio::time::sleep_until(at).await;
        }
        self.next_at = None;
        self.started = Some(Instant::now());
    }

    /// The stream that started with the last list ended: by an error (`expired` for a 410), or
    /// because the term ended. Sets when the next list may start.
    pub(super) fn ended(&mut self, error: bool, expired: bool) {
        let Some(started) = self.started.take() else {
            return;
        };
        let now = Instant::now();
        if now.duration_since(started) >= RETRY_RESET_AFTER {
            self.backoff.reset();
            if !error {
                // A term that watched long enough: the next one lists at once.
                return;
            }
        }
        // An expiry relists at once, unless the last one was recent (a server that keeps
        // answering 410 must not make a tight loop).
        if expired {
            let recent = self
                .last_expiry
                .is_some_and(|t| now.duration_since(t) < RETRY_RESET_AFTER);
            self.last_expiry = Some(now);
            if !recent {
                return;
            }
        }
        // Jitter (0.5x to 1x) keeps a fleet's scopes from retrying in step.
        self.next_at = Some(now + self.backoff.next_delay());
    }
}

/// Closes a pause when dropped.
struct ClosePause<'a>(&'a Pauses, PauseKind);

impl Drop for ClosePause<'_> {
    fn drop(&mut self) {
        self.0.close(self.1);
    }
}
