//! podsweep: coordinated cleanup of terminated Spark driver pods for Apache Kyuubi.
//!
//! Every Kyuubi server keeps its Pod informer and feeds pod events to podsweep; one cleanup leader
//! per `(context, namespace)`, elected through Kyuubi's HA backend, sends the DELETEs.
//!
//! # Safety model
//! 1. A DELETE is sent only by the current, unpaused leader of the scope whose lease deadline has
//!    not passed, for a pod whose record says: Kyuubi Spark driver pod (labels `kyuubi-unique-tag`
//!    and `spark-app-selector`), terminated, allowed by the cleanup kind, deadline passed, not
//!    already deleting or gone. It carries a UID precondition, so a re-created pod with the same
//!    name is never deleted.
//! 2. Leadership is an efficiency lock, not a correctness lock: two leaders may overlap for a
//!    moment; the cost is a duplicate DELETE that ends in 404 or 409.
//! 3. Deadline = time the pod terminated + retain period; first observation when the pod carries
//!    no time; a time in the future counts as now. A new leader keeps the old clock.
//! 4. A DELETE event or a `deletionTimestamp` means cleaned: the schedule is cancelled and never
//!    armed again for that UID.
//! 5. `close()` deletes nothing; it releases leadership so a successor takes over at once.
//! 6. JNI entry points never block on the network and never let a panic cross the boundary.
//! 7. With HA configured but unreachable, nothing is deleted and nothing is lost: pods wait.

pub mod build_info;
pub mod clock;
pub mod config;
pub mod deleter;
pub mod election;
pub mod engine;
pub mod jni;
pub mod kube_client;
pub mod logging;
pub mod metrics;
pub mod model;
pub mod schedule;
pub mod scope;
pub mod sweeper;
pub mod tracker;
