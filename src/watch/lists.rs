//! What the leader's watch asks the API server for: which driver pods (a field selector on
//! `status.phase`), and how their first state comes (a streaming list where the API server
//! offers one, else a list), with the fallback from one to the other.
//!
//! # Guarantees
//! * **Only pods past Running**, in self-watch mode with Kyuubi's state source `POD` (its
//!   default) and `watch.phaseSelector` on: the watch asks for
//!   `status.phase!=Pending,status.phase!=Running` besides the label `kyuubi-unique-tag`. Under
//!   the `POD` source only phases past Running map to a terminated state, so every pod podsweep
//!   could delete is in it; running pods cost the leader nothing (no list entry, no event). A pod
//!   that terminates enters the selection: the API server sends it as ADDED. A pod that leaves
//!   it (a phase `Unknown` that runs again) is sent as DELETED with its last state inside and no
//!   deletionTimestamp (a deletion sets one first, in the event before its DELETED one): the
//!   watch observes it as running again, so it is disarmed, never taken for deleted.
//! * With the `CONTAINER` source (a container can end while its pod runs), beside the informers
//!   (`scopeWatch`), or with the key off, the watch carries every driver pod, as before.
//! * **Streaming lists where offered** (`watch.streamingList`, on by default): the first state of
//!   a stream comes as watch events (`sendInitialEvents`, Kubernetes' WatchList) ending in a
//!   bookmark, instead of one list answer that the API server builds and the client buffers
//!   whole. An API server that refuses the request (WatchList off, Kubernetes before 1.27) or
//!   answers it with an error before the initial events end is taken not to offer it: the watch
//!   lists at once instead, without counting an error, and tries streaming again an hour later
//!   ([`STREAMING_RETRY_AFTER`]). A transport error (the connection broke) is an ordinary watch
//!   error; the next list streams again.
//!
//! # Caveats
//! * Both ways read the API server's watch cache (resourceVersion 0, "any"), as the list did.

use std::time::Duration;

use kube::runtime::watcher;
use tokio::time::Instant;

use crate::kyuubi_state::{StateConfig, StateSource, UNIQUE_TAG_LABEL};

/// The field selector of the pods past Running.
pub const PHASE_SELECTOR: &str = "status.phase!=Pending,status.phase!=Running";
/// How long the watch lists instead of streaming once the API server has refused a streaming
/// list.
pub const STREAMING_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// How long one watch request lasts on the server before kube-rs renews it.
pub const WATCH_TIMEOUT_SECS: u32 = 290;

/// The watch's options, from the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WatchOptions {
    /// `watch.phaseSelector`: only pods past Running, where that is safe ([`selector`]).
    pub phase_selector: bool,
    /// `watch.streamingList`: a streaming list first, where the API server offers one.
    pub streaming_list: bool,
}

impl Default for WatchOptions {
    fn default() -> Self {
        WatchOptions {
            phase_selector: true,
            streaming_list: true,
        }
    }
}

/// How a stream's first state comes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListMode {
    /// Watch events from resourceVersion 0 with `sendInitialEvents`, ending in a bookmark.
    Streaming,
    /// A list (in pages), then a watch from its resourceVersion.
    List,
}

impl ListMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ListMode::Streaming => "streaming",
            ListMode::List => "list",
        }
    }
}

/// The field selector of a watch: [`PHASE_SELECTOR`] in self-watch mode (not `additive`, beside
/// the informers) with the `POD` state source and the option on; else none.
pub fn selector(opts: WatchOptions, state: &StateConfig, additive: bool) -> Option<&'static str> {
    (opts.phase_selector && !additive && state.source == StateSource::Pod).then_some(PHASE_SELECTOR)
}

/// The kube-rs watcher's configuration of one stream.
pub fn config(selector: Option<&str>, mode: ListMode) -> watcher::Config {
    let mut cfg = watcher::Config::default()
        .labels(UNIQUE_TAG_LABEL)
        .timeout(WATCH_TIMEOUT_SECS);
    if let Some(s) = selector {
        cfg = cfg.fields(s);
    }
    if mode == ListMode::Streaming {
        cfg = cfg.streaming_lists();
    }
    cfg
}

/// Which list mode the next stream uses; remembers an API server that refused streaming.
#[derive(Debug)]
pub struct Lists {
    streaming: bool,
    refused_until: Option<Instant>,
}

impl Lists {
    pub fn new(streaming: bool) -> Self {
        Lists {
            streaming,
            refused_until: None,
        }
    }

    /// The mode of the next stream.
    pub fn next_mode(&self) -> ListMode {
        let refused = self.refused_until.is_some_and(|t| Instant::now() < t);
        match self.streaming && !refused {
            true => ListMode::Streaming,
            false => ListMode::List,
        }
    }

    /// A streaming list ended in `e` before its initial events ended. True when that is the API
    /// server's answer (a refused request, an error event): it does not offer streaming lists,
    /// and lists are used for [`STREAMING_RETRY_AFTER`]. False for a transport error.
    pub fn refused(&mut self, e: &watcher::Error) -> bool {
        let answer = matches!(
            e,
            watcher::Error::WatchStartFailed(kube::Error::Api(_)) | watcher::Error::WatchError(_)
        );
        if answer {
            self.refused_until = Some(Instant::now() + STREAMING_RETRY_AFTER);
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selector_applies_only_where_it_is_safe() {
        let on = WatchOptions::default();
        let pod = StateConfig::default();
        let container = StateConfig {
            source: StateSource::Container,
            ..Default::default()
        };
        assert_eq!(selector(on, &pod, false), Some(PHASE_SELECTOR));
        assert_eq!(selector(on, &pod, true), None, "beside the informers");
        assert_eq!(
            selector(on, &container, false),
            None,
            "a container ends first"
        );
        let off = WatchOptions {
            phase_selector: false,
            ..on
        };
        assert_eq!(selector(off, &pod, false), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_streaming_list_lists_for_an_hour() {
        let mut lists = Lists::new(true);
        assert_eq!(lists.next_mode(), ListMode::Streaming);
        let transport = watcher::Error::NoResourceVersion;
        assert!(!lists.refused(&transport));
        assert_eq!(lists.next_mode(), ListMode::Streaming);
        let status =
            kube::core::Status::failure("sendInitialEvents is forbidden", "Invalid").with_code(422);
        let refused = watcher::Error::WatchStartFailed(kube::Error::Api(Box::new(status)));
        assert!(lists.refused(&refused));
        assert_eq!(lists.next_mode(), ListMode::List);
        tokio::time::advance(STREAMING_RETRY_AFTER - Duration::from_secs(1)).await;
        assert_eq!(lists.next_mode(), ListMode::List);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(lists.next_mode(), ListMode::Streaming);
        assert_eq!(Lists::new(false).next_mode(), ListMode::List);
    }
}
