//! podsweep: coordinated cleanup of terminated Spark driver pods for Apache Kyuubi.
//!
//! Every Kyuubi server keeps its Pod informer and feeds pod events to podsweep (or, in self-watch
//! mode, the leader of a scope watches its pods itself); one cleanup leader per
//! `(context, namespace)`, elected through Kyuubi's HA backend, sends the DELETEs.
//!
//! # Safety model
//! 1. A DELETE is sent only by the current, unpaused leader of the scope whose lease deadline has
//!    not passed, for a pod whose record says: Kyuubi Spark driver pod (labels `kyuubi-unique-tag`
//!    and `spark-app-selector`), terminated, allowed by the cleanup kind, deadline passed, not
//!    already deleting or gone (or a pod Kyuubi deletes at once, [`engine::Engine::due_now`],
//!    whatever its state and the kind; or, with a cap, one of the oldest pods past it). It carries a UID precondition, so a re-created pod with
//!    the same name is never deleted. Names that are not Kubernetes names are refused; paths are
//!    encoded.
//! 2. Leadership is an efficiency lock, not a correctness lock: two leaders may overlap for a
//!    moment; the cost is a duplicate DELETE that ends in 404 or 409. The lease is checked at send
//!    time: a DELETE still in flight when it lapses is dropped. Scopes naming the same cluster and
//!    namespace share one election ([`kube_client::resolve`]).
//! 3. Deadline = time the pod terminated + retain period (by outcome; never shortened by an
//!    annotation); first observation when the pod carries
//!    no time; a time in the future counts as now; for a pod seen running, never earlier than its
//!    last running sighting nor its first terminated sighting minus 10 s. A new leader keeps the
//!    old clock.
//! 4. A DELETE event or a `deletionTimestamp` means cleaned: the schedule is cancelled and not
//!    armed again for that UID while its tombstone lives. A non-terminal state disarms it (no
//!    tombstone).
//! 5. The first terminal state of a termination decides, as in Kyuubi.
//! 6. `close()` deletes nothing; it releases leadership so a successor takes over at once, waiting
//!    for that at most the time it is given (the JNI close: 5 s).
//! 7. JNI entry points never block on the network and never let a panic cross the boundary.
//! 8. With HA configured but unreachable, nothing is deleted and nothing is lost: pods wait.
//! 9. A leader that completes no DELETE for `ha.stepDownAfter` while DELETEs are due steps down.
//! 10. A failed scope task (cleanup loop, election, pod watch) is restarted and reported
//!     unhealthy ([`restart`]).
//! 11. Self-watch mode ([`watch`]): only a scope's leader watches its pods; a fresh list cancels
//!     tracked pods absent from it, and a scope drops its records when its watch stops.

pub(crate) mod backoff;
pub mod build_info;
pub mod clock;
pub mod config;
pub mod daemon;
pub mod deleter;
pub mod election;
pub mod engine;
pub mod ident;
pub mod identity;
pub mod jni;
pub mod kube_client;
pub mod kyuubi_state;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod names;
pub mod pause;
pub mod restart;
pub mod schedule;
pub mod scope;
pub mod seen;
pub mod sweeper;
pub mod tracker;
pub mod watch;
