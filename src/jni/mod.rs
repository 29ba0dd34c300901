//! The JNI boundary: every export decodes its arguments, calls the engine, and resolves through
//! one error policy ([`run`]).
//!
//! # Guarantees
//! * No panic crosses into the JVM: each export runs under `catch_unwind`; a panic becomes
//!   `org.podsweep.PodsweepException`.
//! * Error mapping: bad configuration or arguments -> `IllegalArgumentException` (the message
//!   names the key or argument); a closed handle -> `IllegalStateException`; anything else ->
//!   `PodsweepException`.
//! * All `unsafe` of the crate lives in this module, each with a `SAFETY:` note.

mod exports;
mod log_bridge;

use std::panic::{catch_unwind, AssertUnwindSafe};

use jni::JNIEnv;

use crate::engine::{Engine, EngineError};

pub const ILLEGAL_ARGUMENT: &str = "java/lang/IllegalArgumentException";
pub const ILLEGAL_STATE: &str = "java/lang/IllegalStateException";
pub const PODSWEEP_EXCEPTION: &str = "org/podsweep/PodsweepException";

/// Why an export failed, and so which Java exception it throws.
#[derive(Debug)]
pub enum Failure {
    IllegalArgument(String),
    IllegalState(String),
    Podsweep(String),
    /// A JNI call left a Java exception pending; it propagates as it is.
    JavaPending,
}

impl From<jni::errors::Error> for Failure {
    fn from(e: jni::errors::Error) -> Self {
        match e {
            jni::errors::Error::JavaException => Failure::JavaPending,
            other => Failure::Podsweep(format!("JNI: {other}")),
        }
    }
}

impl From<EngineError> for Failure {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Config(_)
            | EngineError::Argument { .. }
            | EngineError::Disallowed { .. } => Failure::IllegalArgument(e.to_string()),
            EngineError::Closed => Failure::IllegalState("PodSweeper is closed".into()),
            EngineError::WatchMode => Failure::IllegalState(e.to_string()),
            EngineError::Runtime(_) => Failure::Podsweep(e.to_string()),
        }
    }
}

/// Runs an export body under the error policy; returns `default` after throwing.
fn run<'local, T>(
    env: &mut JNIEnv<'local>,
    default: T,
    body: impl FnOnce(&mut JNIEnv<'local>) -> Result<T, Failure>,
) -> T {
    let result = catch_unwind(AssertUnwindSafe(|| body(env)));
    let failure = match result {
        Ok(Ok(v)) => return v,
        Ok(Err(f)) => f,
        Err(panic) => {
            let what = crate::logging::panic_message(panic.as_ref());
            Failure::Podsweep(format!("podsweep native panic: {what}"))
        }
    };
    throw(env, failure);
    default
}

fn throw(env: &mut JNIEnv<'_>, failure: Failure) {
    if env.exception_check().unwrap_or(true) {
        return;
    }
    let (class, msg) = match failure {
        Failure::IllegalArgument(m) => (ILLEGAL_ARGUMENT, m),
        Failure::IllegalState(m) => (ILLEGAL_STATE, m),
        Failure::Podsweep(m) => (PODSWEEP_EXCEPTION, m),
        Failure::JavaPending => return,
    };
    // The JVM logs exception messages: no secret of the configuration goes into one.
    let msg = crate::config::redact::scrub(&msg).into_owned();
    if env.throw_new(class, &msg).is_err() && !env.exception_check().unwrap_or(true) {
        // The exception class could not be found: fall back to a JDK class.
        let _ = env.throw_new("java/lang/RuntimeException", msg);
    }
}

/// The engine behind a handle from `create`.
fn engine<'a>(handle: i64) -> Result<&'a Engine, Failure> {
    if handle == 0 {
        return Err(Failure::IllegalState("PodSweeper is closed".into()));
    }
    // SAFETY: a non-zero handle is the `Box<Engine>` pointer `create` returned. The Java side holds
    // a read lock around every call and clears its handle to 0 under the write lock (so after every
    // running call returned) before it passes the old value to `close`, which frees it; a call
    // that reads the handle afterwards passes 0. So the engine outlives this borrow.
    Ok(unsafe { &*(handle as *const Engine) })
}
