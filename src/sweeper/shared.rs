//! What a scope's task shares with the scope's other servers through the HA backend's store
//! ([`crate::election::store`]): Kyuubi's requests to delete a pod at once (shelf `requests`)
//! and, in a dry run, the pods a leader already reported (shelf `reported`).
//!
//! # Guarantees
//! * A pod Kyuubi asks any server to delete at once ([`crate::engine::Engine::due_now`]) is
//!   posted as a request under the scope's election key by every server that takes it (one record
//!   however many post it), and kept in that server's own records too. The leader watches the
//!   shelf for its whole term: a request for a pod it tracks makes that pod due at once; one for
//!   a pod it has never seen (owner-scoped informers; a follower that re-listed it) is first read
//!   from the API server, and deleted only if it still has the requested UID, Kyuubi's driver
//!   labels and the requested `kyuubi-unique-tag`, and is not being deleted already. A request is
//!   removed once its pod is gone (a settled DELETE, a DELETE event, a read that finds the pod
//!   gone or replaced), by the leader and by the servers that posted it.
//! * A post that fails (the backend unreachable) is retried with backoff while the pod's record
//!   lives: a request is never dropped.
//! * In a dry run, a leader reads the `reported` shelf when its term starts and sends nothing
//!   before it has; a pod on it is settled without a second "Would delete", and every pod it
//!   reports is added. A leader of a run that is not dry removes what a dry run left.
//!
//! # Caveats
//! * A request posted after the pod went (a follower slower than the leader's DELETE) costs one
//!   read by the next leader, which then removes it.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::json;
use tokio::task::JoinSet;
use tokio::time::{sleep, Instant};
use tracing::{debug, info, warn};

use super::{Sweeper, Uid};
use crate::backoff::Backoff;
use crate::deleter::PodFacts;
use crate::election::store::{Changed, Entry, Shelf};
use crate::model::{AppState, EventKind, Observation};

/// How long a dry run's note that a pod was reported is kept at most.
const REPORTED_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// A request to delete a pod at once, as it is kept in the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Request {
    pub(super) uid: String,
    pub(super) pod: String,
    pub(super) tag: String,
    pub(super) why: String,
}

impl Request {
    fn encode(&self) -> Vec<u8> {
        json!({
            "uid": self.uid, "pod": self.pod, "tag": self.tag, "why": self.why,
            "at_ms": crate::metrics::epoch_ms(),
        })
        .to_string()
        .into_bytes()
    }

    fn decode(entry: &Entry) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_slice(&entry.value).ok()?;
        let field = |k: &str| v[k].as_str().map(str::to_owned);
        let req = Request {
            uid: field("uid")?,
            pod: field("pod")?,
            tag: field("tag")?,
            why: field("why").unwrap_or_default(),
        };
        (req.uid == entry.name && crate::names::check_pod_name(&req.pod).is_ok()).then_some(req)
    }
}

/// What a store task of the scope ended with.
pub(super) enum Done {
    Posted(Uid, Result<bool, String>),
    /// A record written or removed (a failure is logged at DEBUG: a removal that failed is read
    /// again by the next term, a note that failed costs one report more after a failover).
    Wrote(Shelf, String, Result<(), String>),
    /// The leader's reading of the requests, and the watch of what comes next.
    Listed(u64, Result<(Vec<Entry>, Changed), String>),
    /// The requests changed since the last reading (or its watch broke): read again.
    Changed(u64),
    /// A requested pod this task had never seen, as the API server has it.
    Inspected(u64, Request, Result<Option<PodFacts>, String>),
    /// Dry run: the pods reported before this term.
    Reported(u64, Result<Vec<Entry>, String>),
    /// A failed post or reading is tried again.
    RetryPost(Uid),
    RetryList(u64),
}

/// The scope task's side of the store.
pub(super) struct Shared {
    pub(super) tasks: JoinSet<Done>,
    /// This leadership term; 0 while not leading. Results of another term are ignored.
    term: u64,
    terms: u64,
    /// Requests this task posted (or is posting), by UID.
    posted: HashMap<Uid, Request>,
    post_backoff: HashMap<Uid, Backoff>,
    /// While leading: the UIDs of requests read from the store (removed once their pod goes).
    requested: HashSet<Uid>,
    /// While leading in a dry run: the UIDs reported before or in this term; `None` until read.
    reported: Option<HashSet<Uid>>,
    list_backoff: Backoff,
    /// The task waiting for the requests to change, ended with the term.
    watching: Option<tokio::task::AbortHandle>,
}

impl Default for Shared {
    fn default() -> Self {
        Shared {
            tasks: JoinSet::new(),
            term: 0,
            terms: 0,
            posted: HashMap::new(),
            post_backoff: HashMap::new(),
            requested: HashSet::new(),
            reported: None,
            list_backoff: Backoff::new(Duration::from_millis(500), Duration::from_secs(30)),
            watching: None,
        }
    }
}

/// What a dry-run leader knows of a due pod.
pub(super) enum DryRun {
    /// Not read yet: send nothing.
    Unknown,
    /// Reported before: settle it without a second report.
    Reported,
    New,
}

impl Sweeper {
    fn store_key(
        &self,
    ) -> Option<(
        std::sync::Arc<dyn crate::election::store::ScopeStore>,
        crate::scope::Scope,
    )> {
        Some((self.election.store()?, self.election.keys()?.key))
    }

    /// Kyuubi asked for `obs`'s pod to be deleted at once and this task took it: the scope's
    /// leader is told through the store, whoever it is.
    pub(super) fn post_request(&mut self, obs: &Observation, why: &str) {
        let uid = Uid::new(&obs.pod_uid);
        let req = Request {
            uid: obs.pod_uid.clone(),
            pod: obs.pod_name.clone(),
            tag: obs.tag.clone(),
            why: why.to_owned(),
        };
        self.shared.posted.insert(uid.clone(), req);
        self.send_post(uid);
    }

    fn send_post(&mut self, uid: Uid) {
        let Some(req) = self.shared.posted.get(&uid) else {
            return;
        };
        let Some((store, key)) = self.store_key() else {
            // The keys are not read yet (or the local backend, where nothing is shared): the
            // leader is this server or nobody; try again shortly.
            if self.election.store().is_some() {
                self.retry_post(uid);
            } else {
                self.shared.posted.remove(&uid);
            }
            return;
        };
        let value = req.encode();
        let name = req.uid.clone();
        self.shared.tasks.spawn(async move {
            let r = store.create(&key, Shelf::Requests, &name, value).await;
            Done::Posted(uid, r)
        });
    }

    fn retry_post(&mut self, uid: Uid) {
        let delay = self
            .shared
            .post_backoff
            .entry(uid.clone())
            .or_insert_with(|| Backoff::new(Duration::from_millis(500), Duration::from_secs(60)))
            .next_delay();
        self.shared.tasks.spawn(async move {
            sleep(delay).await;
            Done::RetryPost(uid)
        });
    }

    /// A leadership term starts: read the requests (and, in a dry run, what was reported).
    pub(super) fn shared_begin_term(&mut self) {
        self.shared.terms += 1;
        self.shared.term = self.shared.terms;
        self.shared.requested.clear();
        self.shared.reported = None;
        self.list_requests();
        let Some((store, key)) = self.store_key() else {
            self.shared.reported = Some(HashSet::new());
            return;
        };
        let term = self.shared.term;
        self.shared
            .tasks
            .spawn(async move { Done::Reported(term, store.list(&key, Shelf::Reported).await) });
    }

    /// The term ended: nothing read for it counts any more.
    pub(super) fn shared_end_term(&mut self) {
        if let Some(w) = self.shared.watching.take() {
            w.abort();
        }
        self.shared.term = 0;
        self.shared.requested.clear();
        self.shared.reported = None;
    }

    fn list_requests(&mut self) {
        let term = self.shared.term;
        if term == 0 {
            return;
        }
        let Some((store, key)) = self.store_key() else {
            return;
        };
        self.shared
            .tasks
            .spawn(async move { Done::Listed(term, store.watch(&key, Shelf::Requests).await) });
    }

    fn remove_entry(&mut self, shelf: Shelf, name: String) {
        let Some((store, key)) = self.store_key() else {
            return;
        };
        self.shared.tasks.spawn(async move {
            let r = store.remove(&key, shelf, &name).await;
            Done::Wrote(shelf, name, r)
        });
    }

    /// The pod of `uid` is gone (a settled DELETE, a DELETE event): its request goes.
    pub(super) fn shared_gone(&mut self, uid: &Uid) {
        let posted = self.shared.posted.remove(uid).is_some();
        self.shared.post_backoff.remove(uid);
        if self.shared.requested.remove(uid) || posted {
            self.remove_entry(Shelf::Requests, uid.to_string());
        }
        if let Some(reported) = self.shared.reported.as_mut() {
            if reported.remove(uid) {
                self.remove_entry(Shelf::Reported, uid.to_string());
            }
        }
    }

    /// In a dry run, whether the leader may report a due pod.
    pub(super) fn dry_run_seen(&self, uid: &Uid) -> DryRun {
        match &self.shared.reported {
            None => DryRun::Unknown,
            Some(r) if r.contains(uid) => DryRun::Reported,
            Some(_) => DryRun::New,
        }
    }

    /// A dry run reported this pod: its successors will not again.
    pub(super) fn note_reported(&mut self, uid: &Uid) {
        let Some(reported) = self.shared.reported.as_mut() else {
            return;
        };
        if !reported.insert(uid.clone()) {
            return;
        }
        if let Some((store, key)) = self.store_key() {
            let name = uid.to_string();
            let value = json!({"at_ms": crate::metrics::epoch_ms()})
                .to_string()
                .into_bytes();
            self.shared.tasks.spawn(async move {
                let r = store
                    .create(&key, Shelf::Reported, &name, value)
                    .await
                    .map(drop);
                Done::Wrote(Shelf::Reported, name, r)
            });
        }
    }

    pub(super) fn on_shared(&mut self, done: Result<Done, tokio::task::JoinError>) {
        let Ok(done) = done else {
            return;
        };
        match done {
            Done::Posted(uid, Ok(created)) => {
                self.shared.post_backoff.remove(&uid);
                debug!(scope = %self.scope, uid = %uid, created, "request handed to the scope's leader");
            }
            Done::Posted(uid, Err(e)) => {
                if self.tracker.get(&uid).is_some() && self.shared.posted.contains_key(&uid) {
                    // runbook: A request to delete a pod at once cannot be handed over yet
                    warn!(
                        scope = %self.scope, uid = %uid,
                        "Cannot hand the request to delete pod {uid} at once to the scope's \
                         leader yet ({e}); trying again"
                    );
                    self.retry_post(uid);
                } else {
                    self.shared.posted.remove(&uid);
                }
            }
            Done::RetryPost(uid) => {
                if self.tracker.get(&uid).is_some() {
                    self.send_post(uid);
                } else {
                    self.shared.posted.remove(&uid);
                    self.shared.post_backoff.remove(&uid);
                }
            }
            Done::Wrote(shelf, name, Err(e)) => debug!(
                scope = %self.scope, "Cannot write or remove {name} on the {} shelf: {e}", shelf.dir()
            ),
            Done::Wrote(..) => {}
            Done::Listed(term, _) | Done::Changed(term) | Done::RetryList(term)
                if term != self.shared.term => {}
            Done::Listed(term, Ok((entries, changed))) => {
                self.shared.list_backoff.reset();
                let watching = self.shared.tasks.spawn(async move {
                    changed.await;
                    Done::Changed(term)
                });
                if let Some(old) = self.shared.watching.replace(watching) {
                    old.abort();
                }
                for entry in entries {
                    self.on_request(term, &entry);
                }
            }
            Done::Listed(term, Err(e)) => {
                debug!(scope = %self.scope, "Cannot read the requests to delete pods at once: {e}");
                let delay = self.shared.list_backoff.next_delay();
                self.shared.tasks.spawn(async move {
                    sleep(delay).await;
                    Done::RetryList(term)
                });
            }
            Done::Changed(_) | Done::RetryList(_) => self.list_requests(),
            Done::Inspected(term, req, result) => self.on_inspected(term, req, result),
            Done::Reported(term, _) if term != self.shared.term => {}
            Done::Reported(_, result) => self.on_reported(result),
        }
    }

    /// One request read from the store while leading.
    fn on_request(&mut self, term: u64, entry: &Entry) {
        let Some(req) = Request::decode(entry) else {
            warn!(
                scope = %self.scope,
                "Request {} to delete a pod at once is not podsweep's; it is removed", entry.name
            );
            self.remove_entry(Shelf::Requests, entry.name.clone());
            return;
        };
        let uid = Uid::new(&req.uid);
        if !self.shared.requested.insert(uid.clone()) {
            return;
        }
        match self.tracker.get(&uid).map(|r| r.stage()) {
            Some(_) => {
                let now_wall = self.clock.now();
                if self.tracker.mark_immediate(&uid) {
                    info!(
                        scope = %self.scope, pod = %req.pod, uid = %uid, tag = %req.tag,
                        "Pod {} (kyuubi-unique-tag={}) is to be deleted now, as another server's \
                         Kyuubi asked: {}",
                        req.pod, req.tag, req.why
                    );
                }
                self.make_due_now(uid, now_wall);
            }
            None if self.tracker.is_tombstoned(&uid) => self.shared_gone(&uid),
            None => {
                // A pod this server never saw: read it before anything is sent (once the client is
                // built; the requests are read again meanwhile).
                let Some(deleter) = self.deleter.clone() else {
                    self.shared.requested.remove(&uid);
                    let delay = self.shared.list_backoff.next_delay();
                    self.shared.tasks.spawn(async move {
                        sleep(delay).await;
                        Done::RetryList(term)
                    });
                    return;
                };
                self.shared.tasks.spawn(async move {
                    let r = deleter.inspect(&req.pod).await;
                    Done::Inspected(term, req, r)
                });
            }
        }
    }

    fn on_inspected(&mut self, term: u64, req: Request, result: Result<Option<PodFacts>, String>) {
        let uid = Uid::new(&req.uid);
        if term != self.shared.term {
            return;
        }
        let facts = match result {
            Ok(Some(f)) => f,
            Ok(None) => return self.shared_gone(&uid),
            Err(e) => {
                debug!(scope = %self.scope, pod = %req.pod, "Cannot read requested pod {}: {e}", req.pod);
                // Read again with the next reading of the requests.
                self.shared.requested.remove(&uid);
                let delay = self.shared.list_backoff.next_delay();
                self.shared.tasks.spawn(async move {
                    sleep(delay).await;
                    Done::RetryList(term)
                });
                return;
            }
        };
        if facts.uid != req.uid || facts.deleting {
            // Replaced by a newer pod of that name, or already being deleted.
            return self.shared_gone(&uid);
        }
        if facts.tag.as_deref() != Some(req.tag.as_str()) || !facts.has_app_selector {
            // runbook: A request names a pod that is not the Kyuubi driver pod it claims
            warn!(
                scope = %self.scope, pod = %req.pod, uid = %uid,
                "A request to delete pod {} at once is refused: the pod does not carry Kyuubi's \
                 driver labels with kyuubi-unique-tag={}; it is left alone and the request removed",
                req.pod, req.tag
            );
            return self.shared_gone(&uid);
        }
        let obs = Observation {
            kind: EventKind::Update,
            tag: req.tag.clone(),
            pod_name: req.pod.clone(),
            pod_uid: req.uid.clone(),
            state: AppState::Unknown,
            has_app_selector: true,
            terminated_at: None,
            deletion_requested: false,
            annotations: None,
        };
        self.on_due_now(&obs, &format!("another server's Kyuubi asked: {}", req.why));
        self.shared.requested.insert(uid);
    }

    fn on_reported(&mut self, result: Result<Vec<Entry>, String>) {
        let entries = match result {
            Ok(e) => e,
            Err(e) => {
                warn!(
                    scope = %self.scope,
                    "Cannot read which pods a dry run already reported ({e}); reporting as if none"
                );
                Vec::new()
            }
        };
        if !self.cfg.tuning.dry_run {
            // The dry run is over: what it noted goes.
            for e in entries {
                self.remove_entry(Shelf::Reported, e.name);
            }
            self.shared.reported = Some(HashSet::new());
            return;
        }
        let now = crate::metrics::epoch_ms();
        let mut reported = HashSet::with_capacity(entries.len());
        for e in entries {
            let at = serde_json::from_slice::<serde_json::Value>(&e.value)
                .ok()
                .and_then(|v| v["at_ms"].as_u64())
                .unwrap_or(0);
            if now.saturating_sub(at) > REPORTED_TTL.as_millis() as u64 {
                self.remove_entry(Shelf::Reported, e.name);
            } else {
                reported.insert(Uid::new(&e.name));
            }
        }
        self.shared.reported = Some(reported);
        self.dispatch();
    }

    /// Dry run: a due pod already reported is settled without a second report.
    pub(super) fn settle_reported(&mut self, uid: &Uid) {
        if let Some(gone) = self.tracker.settle(uid, Instant::now()) {
            self.unkeep(&gone);
        }
        self.forget(uid);
        debug!(scope = %self.scope, uid = %uid, "Pod {uid} was reported by an earlier leader of this dry run");
    }
}
