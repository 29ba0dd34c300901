//! `org.podsweep.NativeBridge` natives. Each has the same shape: decode, call, resolve.

use std::collections::HashMap;
use std::time::Duration;

use jni::objects::{JClass, JObjectArray, JString};
use jni::sys::{jboolean, jint, jlong, jstring, JNI_FALSE, JNI_TRUE};
use jni::JNIEnv;

use super::{engine, run, Failure};
use crate::clock::from_epoch_millis;
use crate::config::Settings;
use crate::election::{Identity, Leadership};
use crate::engine::{runtime, Engine};
use crate::ident::uuid_bytes;
use crate::model::{AppState, EventKind, Observation, PodAnnotations};
use crate::scope::Scope;
use crate::seen::Head;

/// How long `close` waits for leadership to be released.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// A `String` argument of a native method (or an element of a `String[]` one), `None` for null.
///
/// `get_string` would first check that the object is a `java.lang.String` (`FindClass`,
/// `GetObjectClass` and `IsAssignableFrom` for every string: observe() reads six); here the JVM
/// has already checked it.
fn opt_string(env: &mut JNIEnv<'_>, s: &JString<'_>) -> Result<Option<String>, Failure> {
    if s.is_null() {
        return Ok(None);
    }
    // SAFETY: every JString this module reads is a parameter the Java side declares as `String`
    // (NativeBridge's native methods) or an element of a `String[]` parameter, so the JVM's type
    // checks (at the call and at every array store) guarantee a java.lang.String instance.
    let js = unsafe { env.get_string_unchecked(s)? };
    Ok(Some(js.into()))
}

/// [`opt_string`] without the JVM's buffer: the string is copied into a stack buffer with
/// `GetStringUTFRegion` (no allocation on the JVM's side) and taken as it is when it is ASCII,
/// which every Kubernetes name, UID and Kyuubi tag is; anything else takes [`opt_string`]'s path.
fn fast_string(env: &mut JNIEnv<'_>, s: &JString<'_>) -> Result<Option<String>, Failure> {
    const MAX: usize = 128;
    if s.is_null() {
        return Ok(None);
    }
    let raw = env.get_raw();
    // SAFETY: `raw` is the JNIEnv of this native call (valid for its whole length, on this
    // thread); `s` is a live, non-null local reference to a java.lang.String (the JVM checked the
    // parameter's declared type). GetStringLength needs nothing more.
    let len = unsafe {
        match (**raw).GetStringLength {
            Some(f) => f(raw, s.as_raw()),
            None => return opt_string(env, s),
        }
    };
    let Ok(n) = usize::try_from(len) else {
        return opt_string(env, s);
    };
    if n > MAX {
        return opt_string(env, s);
    }
    // Room for the worst case (three bytes per UTF-16 unit) and the NUL HotSpot appends.
    let mut buf = [0u8; 3 * MAX + 1];
    // SAFETY: as above; the region [0, len) lies within the string (len is its length), and
    // `buf` holds the most modified UTF-8 bytes `len` units can take plus a terminating NUL.
    unsafe {
        match (**raw).GetStringUTFRegion {
            Some(f) => f(raw, s.as_raw(), 0, len, buf.as_mut_ptr().cast()),
            None => return opt_string(env, s),
        }
    }
    // No exception to check: the region is the whole string, the one error the call has.
    // A unit takes one byte (and that byte is ASCII) exactly when it is in 1..=0x7F: if the first
    // `n` bytes are all ASCII, they are the whole string.
    let head = &buf[..n];
    if head.iter().all(|b| (1..0x80).contains(b)) {
        // ASCII is UTF-8.
        return Ok(Some(String::from_utf8_lossy(head).into_owned()));
    }
    opt_string(env, s)
}

fn req_string(env: &mut JNIEnv<'_>, s: &JString<'_>, name: &str) -> Result<String, Failure> {
    opt_string(env, s)?.ok_or_else(|| Failure::IllegalArgument(format!("{name} must not be null")))
}

fn string_array(
    env: &mut JNIEnv<'_>,
    arr: &JObjectArray<'_>,
    name: &str,
) -> Result<Vec<String>, Failure> {
    if arr.is_null() {
        return Err(Failure::IllegalArgument(format!("{name} must not be null")));
    }
    let len = env.get_array_length(arr)?;
    let mut out = Vec::with_capacity(len as usize);
    for i in 0..len {
        let el = JString::from(env.get_object_array_element(arr, i)?);
        out.push(req_string(env, &el, &format!("{name}[{i}]"))?);
        env.delete_local_ref(el)?;
    }
    Ok(out)
}

fn scope_of(
    env: &mut JNIEnv<'_>,
    context: &JString<'_>,
    namespace: &JString<'_>,
) -> Result<Scope, Failure> {
    let c = opt_string(env, context)?;
    let n = opt_string(env, namespace)?;
    Ok(Scope::new(c.as_deref(), n.as_deref()))
}

/// Panics are caught at the JNI boundary and thrown as `PodsweepException`; the hook only makes
/// sure the message goes to the JVM's log instead of the process's stderr.
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| {
            let at = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            tracing::error!(target: "podsweep", "native panic at {at}: {info}");
        }));
    });
}

#[no_mangle]
pub extern "system" fn Java_org_podsweep_NativeBridge_create<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    keys: JObjectArray<'l>,
    values: JObjectArray<'l>,
    server_id: JString<'l>,
    server_id_final: jboolean,
) -> jlong {
    run(&mut env, 0, |env| {
        let k = string_array(env, &keys, "keys")?;
        let v = string_array(env, &values, "values")?;
        if k.len() != v.len() {
            return Err(Failure::IllegalArgument(format!(
                "keys and values differ in length ({} vs {})",
                k.len(),
                v.len()
            )));
        }
        let server_id = req_string(env, &server_id, "serverId")?;
        super::log_bridge::install();
        install_panic_hook();
        let settings = Settings::from_map(k.into_iter().zip(v).collect::<HashMap<_, _>>())
            .map_err(|e| Failure::IllegalArgument(e.to_string()))?;
        let rt = runtime()?;
        let identity = if server_id_final != JNI_FALSE {
            Identity::fixed(&server_id)
        } else {
            Identity::pending(&server_id)
        };
        let engine = Engine::with_identity(settings, identity, rt.handle().clone())?;
        Ok(Box::into_raw(Box::new(engine)) as jlong)
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_org_podsweep_NativeBridge_observe<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    context: JString<'l>,
    namespace: JString<'l>,
    event_kind: jint,
    unique_tag: JString<'l>,
    pod_name: JString<'l>,
    pod_uid: JString<'l>,
    app_state: JString<'l>,
    has_app_selector: jboolean,
    terminated_at_millis: jlong,
    deletion_timestamp_set: jboolean,
    retain_annotation: JString<'l>,
    keep_annotation: JString<'l>,
) {
    run(&mut env, (), |env| {
        let engine = engine(handle)?;
        let kind = event_kind_of(event_kind)?;
        let state_name = req_string(env, &app_state, "appState")?;
        let state = AppState::parse(&state_name).ok_or_else(|| {
            Failure::IllegalArgument(format!(
                "appState must be a Kyuubi ApplicationState name (PENDING, RUNNING, FINISHED, KILLED, FAILED, ZOMBIE, NOT_FOUND, UNKNOWN), got {state_name:?}"
            ))
        })?;
        let obs = Observation {
            kind,
            tag: opt_string(env, &unique_tag)?.unwrap_or_default(),
            pod_name: req_string(env, &pod_name, "podName")?,
            pod_uid: req_string(env, &pod_uid, "podUid")?,
            state,
            has_app_selector: has_app_selector != JNI_FALSE,
            terminated_at: from_epoch_millis(terminated_at_millis),
            deletion_requested: deletion_timestamp_set != JNI_FALSE,
            annotations: annotations(env, state, &retain_annotation, &keep_annotation)?,
        };
        let scope = scope_of(env, &context, &namespace)?;
        engine.observe(scope, obs)?;
        Ok(())
    })
}

/// Kyuubi asks for a driver pod to be deleted at once (the pod of a CANCELED batch, an orphan
/// pod): the scope's leader deletes it with the UID precondition as soon as it may. True when
/// podsweep took it; false when it leaves the pod to the caller's own DELETE.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_org_podsweep_NativeBridge_dueNow<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    context: JString<'l>,
    namespace: JString<'l>,
    unique_tag: JString<'l>,
    pod_name: JString<'l>,
    pod_uid: JString<'l>,
    app_state: jint,
    has_app_selector: jboolean,
    terminated_at_millis: jlong,
    deletion_timestamp_set: jboolean,
    why: JString<'l>,
    retain_annotation: JString<'l>,
    keep_annotation: JString<'l>,
) -> jboolean {
    run(&mut env, JNI_FALSE, |env| {
        let engine = engine(handle)?;
        let state = AppState::from_code(app_state).ok_or_else(|| {
            Failure::IllegalArgument(format!(
                "appState must be the code of a Kyuubi ApplicationState (0 to 7), got {app_state}"
            ))
        })?;
        let obs = Observation {
            kind: EventKind::Update,
            tag: opt_string(env, &unique_tag)?.unwrap_or_default(),
            pod_name: req_string(env, &pod_name, "podName")?,
            pod_uid: req_string(env, &pod_uid, "podUid")?,
            state,
            has_app_selector: has_app_selector != JNI_FALSE,
            terminated_at: from_epoch_millis(terminated_at_millis),
            deletion_requested: deletion_timestamp_set != JNI_FALSE,
            annotations: annotations(env, state, &retain_annotation, &keep_annotation)?,
        };
        let scope = scope_of(env, &context, &namespace)?;
        let why = opt_string(env, &why)?.unwrap_or_default();
        let taken = engine.due_now(scope, obs, &why)?;
        Ok(if taken { JNI_TRUE } else { JNI_FALSE })
    })
}

/// Confirms the handle's server id (its provisional one, when `create` was told it is not final).
#[no_mangle]
pub extern "system" fn Java_org_podsweep_NativeBridge_confirmServerId<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    server_id: JString<'l>,
) {
    run(&mut env, (), |env| {
        let engine = engine(handle)?;
        let id = req_string(env, &server_id, "serverId")?;
        engine.confirm_server_id(&id)?;
        Ok(())
    })
}

/// podsweep's own configuration keys as JSON ([`crate::config::table::json`]); needs no handle.
#[no_mangle]
pub extern "system" fn Java_org_podsweep_NativeBridge_configKeys<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
) -> jstring {
    run(&mut env, std::ptr::null_mut(), |env| {
        Ok(env.new_string(crate::config::table::json())?.into_raw())
    })
}

/// The id of a scope for `observeIn`, the same for the handle's whole life.
#[no_mangle]
pub extern "system" fn Java_org_podsweep_NativeBridge_scopeId<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    context: JString<'l>,
    namespace: JString<'l>,
) -> jlong {
    run(&mut env, 0, |env| {
        let engine = engine(handle)?;
        let scope = scope_of(env, &context, &namespace)?;
        Ok(jlong::from(engine.scope_id(scope)?))
    })
}

/// `observe` for a scope resolved by `scopeId`, with the state as its code (`AppState::from_code`)
/// and the pod name only for events that can lead to a DELETE or end a record (null otherwise).
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "system" fn Java_org_podsweep_NativeBridge_observeIn<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    scope_id: jlong,
    event_kind: jint,
    app_state: jint,
    unique_tag: JString<'l>,
    pod_name: JString<'l>,
    pod_uid: JString<'l>,
    uid_is_uuid: jboolean,
    uid_high: jlong,
    uid_low: jlong,
    has_app_selector: jboolean,
    terminated_at_millis: jlong,
    deletion_timestamp_set: jboolean,
    annotation_hash: jint,
    retain_annotation: JString<'l>,
    keep_annotation: JString<'l>,
) {
    run(&mut env, (), |env| {
        let engine = engine(handle)?;
        let kind = event_kind_of(event_kind)?;
        let state = AppState::from_code(app_state).ok_or_else(|| {
            Failure::IllegalArgument(format!(
                "appState must be the code of a Kyuubi ApplicationState (0 to 7), got {app_state}"
            ))
        })?;
        let scope = u32::try_from(scope_id)
            .map_err(|_| Failure::IllegalArgument(format!("scope id {scope_id} is not valid")))?;
        let deletion_requested = deletion_timestamp_set != JNI_FALSE;
        let cleaned = kind == EventKind::Delete || deletion_requested;
        let full = state.is_terminated() || cleaned;
        if pod_uid.is_null() {
            return Err(Failure::IllegalArgument(
                "podUid must not be null".to_owned(),
            ));
        }
        // Most events say again what the scope's task knows (a pod still running, still failed):
        // they are answered from the UID's bits alone, before any string is read.
        let uid = (uid_is_uuid != JNI_FALSE).then(|| {
            let mut b = [0u8; 16];
            b[..8].copy_from_slice(&uid_high.to_be_bytes());
            b[8..].copy_from_slice(&uid_low.to_be_bytes());
            b
        });
        let head = Head {
            uid,
            terminal: state.is_terminated(),
            cleaned,
            timed: terminated_at_millis > 0,
            // Read by the JVM for terminal events only.
            annotations: if state.is_terminated() {
                annotation_hash as u32
            } else {
                0
            },
        };
        let driver = !unique_tag.is_null() && has_app_selector != JNI_FALSE;
        if driver && engine.known(scope, &head)? {
            return Ok(());
        }
        let pod_name = match fast_string(env, &pod_name)? {
            Some(n) => n,
            None if full => {
                return Err(Failure::IllegalArgument(
                    "podName must not be null".to_owned(),
                ))
            }
            None => String::new(),
        };
        let pod_uid = fast_string(env, &pod_uid)?.unwrap_or_default();
        // The UID's one parse on this path: it checks the bits and is the head handed down.
        let parsed = uuid_bytes(pod_uid.as_bytes());
        if uid.is_some() && uid != parsed {
            return Err(Failure::IllegalArgument(format!(
                "podUid {pod_uid:?} is not the UUID whose bits were passed with it"
            )));
        }
        let obs = Observation {
            kind,
            tag: fast_string(env, &unique_tag)?.unwrap_or_default(),
            pod_name,
            pod_uid,
            state,
            has_app_selector: has_app_selector != JNI_FALSE,
            terminated_at: from_epoch_millis(terminated_at_millis),
            deletion_requested,
            annotations: annotations(env, state, &retain_annotation, &keep_annotation)?,
        };
        engine.observe_in(
            scope,
            obs,
            Head {
                uid: parsed,
                ..head
            },
        )?;
        Ok(())
    })
}

#[no_mangle]
pub extern "system" fn Java_org_podsweep_NativeBridge_isLeader<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    context: JString<'l>,
    namespace: JString<'l>,
) -> jboolean {
    run(&mut env, JNI_FALSE, |env| {
        let engine = engine(handle)?;
        let scope = scope_of(env, &context, &namespace)?;
        Ok(if engine.leadership(&scope) == Some(Leadership::Leading) {
            JNI_TRUE
        } else {
            JNI_FALSE
        })
    })
}

#[no_mangle]
pub extern "system" fn Java_org_podsweep_NativeBridge_scopeStatus<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
    context: JString<'l>,
    namespace: JString<'l>,
) -> jstring {
    run(&mut env, std::ptr::null_mut(), |env| {
        let engine = engine(handle)?;
        let scope = scope_of(env, &context, &namespace)?;
        let json = engine.status_json(&scope);
        Ok(env.new_string(json)?.into_raw())
    })
}

#[no_mangle]
pub extern "system" fn Java_org_podsweep_NativeBridge_statusAll<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
) -> jstring {
    run(&mut env, std::ptr::null_mut(), |env| {
        let engine = engine(handle)?;
        Ok(env.new_string(engine.status_all_json())?.into_raw())
    })
}

#[no_mangle]
pub extern "system" fn Java_org_podsweep_NativeBridge_close<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
    handle: jlong,
) {
    run(&mut env, (), |_env| {
        if handle == 0 {
            return Ok(());
        }
        // SAFETY: `handle` is the pointer `create` leaked with Box::into_raw; the Java side zeroes
        // its handle under its write lock (after every running call returned) and then calls
        // close once with the old value, so no other call can use it any more.
        let engine = unsafe { Box::from_raw(handle as *mut Engine) };
        engine.close(CLOSE_TIMEOUT);
        drop(engine);
        Ok(())
    })
}

/// `podsweep-build-info version=<v> commit=<c>` ([`crate::build_info::LINE`]); the JVM side checks
/// it against the jar before any other call.
#[no_mangle]
pub extern "system" fn Java_org_podsweep_NativeBridge_buildInfo<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
) -> jstring {
    run(&mut env, std::ptr::null_mut(), |env| {
        Ok(env.new_string(crate::build_info::LINE)?.into_raw())
    })
}

/// Panics on purpose, so the JVM suites can check the panic policy. Only in builds with the
/// `jni-test-hooks` feature: the shipped library does not export it.
#[cfg(feature = "jni-test-hooks")]
#[no_mangle]
pub extern "system" fn Java_org_podsweep_NativeBridge_panicForTest<'l>(
    mut env: JNIEnv<'l>,
    _class: JClass<'l>,
) {
    run(&mut env, (), |_env| -> Result<(), Failure> {
        panic!("deliberate panic for testing the JNI error policy")
    })
}

/// podsweep's annotations of a pod in a terminal state (null strings: absent); none otherwise
/// (only an event that can lead to a DELETE reads them).
fn annotations(
    env: &mut JNIEnv<'_>,
    state: AppState,
    retain: &JString<'_>,
    keep: &JString<'_>,
) -> Result<Option<Box<PodAnnotations>>, Failure> {
    if !state.is_terminated() {
        return Ok(None);
    }
    let retain = opt_string(env, retain)?;
    let keep = opt_string(env, keep)?;
    Ok(PodAnnotations::of(retain.as_deref(), keep.as_deref()))
}

/// The event kind from its Java ordinal, shared by both observe entry points.
fn event_kind_of(ordinal: jint) -> Result<EventKind, Failure> {
    EventKind::from_ordinal(ordinal).ok_or_else(|| {
        Failure::IllegalArgument(format!(
            "event must be ADD, UPDATE or DELETE (got ordinal {ordinal})"
        ))
    })
}
