//! Native log records -> `org.podsweep.NativeLog.log(int, String, String)` on a dedicated thread.
//!
//! The class and method are looked up once in `JNI_OnLoad`, on the Java thread that loads the
//! library (whose class loader can see `org.podsweep`); the log thread uses the cached global
//! reference, never `FindClass`.

use std::ffi::c_void;
use std::sync::Arc;

use jni::objects::{GlobalRef, JClass, JStaticMethodID, JValue};
use jni::signature::{Primitive, ReturnType};
use jni::sys::{jint, JNI_VERSION_1_8};
use jni::JavaVM;
use once_cell::sync::OnceCell;

use crate::logging::{self, LogSink};

struct Bridge {
    vm: JavaVM,
    class: GlobalRef,
    method: JStaticMethodID,
    /// `NativeLog.levelOf(String)`, if the class has it.
    level_of: Option<JStaticMethodID>,
}

static BRIDGE: OnceCell<Bridge> = OnceCell::new();

#[no_mangle]
pub extern "system" fn JNI_OnLoad(vm: *mut jni::sys::JavaVM, _reserved: *mut c_void) -> jint {
    // SAFETY: the JVM passes a valid, process-lifetime JavaVM pointer to JNI_OnLoad.
    let Ok(vm) = (unsafe { JavaVM::from_raw(vm) }) else {
        return JNI_VERSION_1_8;
    };
    type Found = (GlobalRef, JStaticMethodID, Option<JStaticMethodID>);
    let found = (|| -> jni::errors::Result<Found> {
        let mut env = vm.get_env()?;
        let class = env.find_class("org/podsweep/NativeLog")?;
        let method =
            env.get_static_method_id(&class, "log", "(ILjava/lang/String;Ljava/lang/String;)V")?;
        let level_of = match env.get_static_method_id(&class, "levelOf", "(Ljava/lang/String;)I") {
            Ok(m) => Some(m),
            Err(_) => {
                env.exception_clear()?;
                None
            }
        };
        Ok((env.new_global_ref(class)?, method, level_of))
    })();
    match found {
        Ok((class, method, level_of)) => {
            let _ = BRIDGE.set(Bridge {
                vm,
                class,
                method,
                level_of,
            });
        }
        Err(_) => {
            // No NativeLog class: run without forwarding logs; clear the pending exception.
            if let Ok(env) = vm.get_env() {
                let _ = env.exception_clear();
            }
        }
    }
    JNI_VERSION_1_8
}

struct JvmSink;

impl LogSink for JvmSink {
    fn level_of(&self, target: &str) -> Option<i32> {
        let b = BRIDGE.get()?;
        let method = b.level_of?;
        let mut env = b.vm.attach_current_thread_as_daemon().ok()?;
        env.with_local_frame(2, |env| -> jni::errors::Result<Option<i32>> {
            let t = env.new_string(target)?;
            let class: &JClass = b.class.as_obj().into();
            // SAFETY: `method` was resolved on this class with signature (Ljava/lang/String;)I and
            // the one argument below is a String.
            let r = unsafe {
                env.call_static_method_unchecked(
                    class,
                    method,
                    ReturnType::Primitive(Primitive::Int),
                    &[JValue::Object(&t).as_jni()],
                )
            };
            if env.exception_check()? {
                env.exception_clear()?;
                return Ok(None);
            }
            Ok(r.ok().and_then(|v| v.i().ok()))
        })
        .ok()
        .flatten()
    }

    fn emit(&self, level: i32, target: &str, message: &str) {
        let Some(b) = BRIDGE.get() else {
            return;
        };
        let Ok(mut env) = b.vm.attach_current_thread_as_daemon() else {
            return;
        };
        let _ = env.with_local_frame(4, |env| -> jni::errors::Result<()> {
            let t = env.new_string(target)?;
            let m = env.new_string(message)?;
            let class: &JClass = b.class.as_obj().into();
            // SAFETY: `method` was resolved on this class with signature (ILString;LString;)V and
            // the arguments below match it exactly.
            let r = unsafe {
                env.call_static_method_unchecked(
                    class,
                    b.method,
                    ReturnType::Primitive(Primitive::Void),
                    &[
                        JValue::Int(level).as_jni(),
                        JValue::Object(&t).as_jni(),
                        JValue::Object(&m).as_jni(),
                    ],
                )
            };
            if r.is_err() || env.exception_check()? {
                env.exception_clear()?;
            }
            Ok(())
        });
    }
}

/// Routes podsweep's logs to the JVM (once per process).
pub fn install() {
    if BRIDGE.get().is_some() {
        logging::install(Arc::new(JvmSink), tracing::Level::INFO);
    }
}
