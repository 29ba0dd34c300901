package org.podsweep;

/**
 * The JNI entry points of libpodsweep.so. Only {@link PodSweeper} (and tests) call these, always
 * after {@link NativeLoader#load()}.
 *
 * <p>Error policy of the native side: a bad configuration value throws
 * {@link IllegalArgumentException} naming the Kyuubi key; a bad argument throws
 * {@link IllegalArgumentException} naming the argument; a handle that is not open throws
 * {@link IllegalStateException}; anything else (including a caught panic) throws
 * {@link PodsweepException}. No entry point blocks on the network.
 */
final class NativeBridge {
  private NativeBridge() {}

  /**
   * Parses the Kyuubi configuration and starts the engine; returns a non-zero handle. When
   * {@code serverIdFinal} is false the id is provisional: the scopes campaign once {@link
   * #confirmServerId} is called (or after two minutes, under the provisional id).
   */
  static native long create(String[] keys, String[] values, String serverId, boolean serverIdFinal);

  /** Confirms the server id of a handle (see {@link #create}). */
  static native void confirmServerId(long handle, String serverId);

  /**
   * Kyuubi asks for a driver pod to be deleted at once (the pod of a CANCELED batch, an orphan
   * pod): the scope's leader deletes it with the UID precondition as soon as it may, whatever its
   * state and the cleanup kind. {@code appState} is a state code as in {@link #observeIn}; {@code
   * why} is logged with it. True when podsweep took the pod, false when it leaves it to the
   * caller's own DELETE.
   */
  static native boolean dueNow(
      long handle,
      String context,
      String namespace,
      String uniqueTag,
      String podName,
      String podUid,
      int appState,
      boolean hasAppSelector,
      long terminatedAtMillis,
      boolean deletionTimestampSet,
      String why,
      String retainAnnotation,
      String keepAnnotation);

  /** podsweep's own configuration keys as a JSON array (see {@link PodSweeper#configKeys()}). */
  static native String configKeys();

  static native void observe(
      long handle,
      String context,
      String namespace,
      int eventKind,
      String uniqueTag,
      String podName,
      String podUid,
      String appState,
      boolean hasAppSelector,
      long terminatedAtMillis,
      boolean deletionTimestampSet,
      String retainAnnotation,
      String keepAnnotation);

  /**
   * The id of a scope for {@link #observeIn}, non-zero and the same for the handle's whole life.
   * Throws {@link IllegalArgumentException} naming {@code namespace} if it is not a Kubernetes
   * namespace name.
   */
  static native long scopeId(long handle, String context, String namespace);

  /**
   * {@link #observe} for a scope from {@link #scopeId}, with {@code appState} as the position of
   * the state in Kyuubi's {@code ApplicationState} declaration (PENDING = 0 ... UNKNOWN = 7), and
   * {@code podName} only needed (non-null) when the event can lead to a DELETE or ends one: a
   * terminal state (FINISHED, KILLED, FAILED, NOT_FOUND), a DELETE event, or a deletion timestamp.
   * When {@code uidIsUuid}, {@code podUid} is a canonical UUID whose bits are {@code uidHigh} and
   * {@code uidLow} ({@link java.util.UUID}'s), and the native side reads the string only if it
   * hands the event on. A null or empty {@code uniqueTag} is no tag (the pod is not a Kyuubi
   * driver pod); the tag too is read only for an event handed on. For a terminal state, {@code
   * annotationHash} is {@code Objects.hash(retainAnnotation, keepAnnotation)} (0 when both are
   * null) and the two values of podsweep's annotations follow (read only if the event is handed
   * on); otherwise 0 and nulls.
   */
  static native void observeIn(
      long handle,
      long scopeId,
      int eventKind,
      int appState,
      String uniqueTag,
      String podName,
      String podUid,
      boolean uidIsUuid,
      long uidHigh,
      long uidLow,
      boolean hasAppSelector,
      long terminatedAtMillis,
      boolean deletionTimestampSet,
      int annotationHash,
      String retainAnnotation,
      String keepAnnotation);

  static native boolean isLeader(long handle, String context, String namespace);

  static native String scopeStatus(long handle, String context, String namespace);

  /**
   * A JSON array with the snapshot of every scope this handle knows (each like
   * {@link #scopeStatus}), sorted by scope.
   */
  static native String statusAll(long handle);

  /** Releases leadership and frees the handle; deletes nothing. Called at most once per handle. */
  static native void close(long handle);

  /**
   * {@code podsweep-build-info version=<version> commit=<commit>}: what the library was built from
   * (see {@link BuildInfo}). Needs no handle.
   */
  static native String buildInfo();

  /**
   * Panics inside native code; the panic must surface as {@link PodsweepException}. Only libraries
   * built with the {@code jni-test-hooks} cargo feature have it (the shipped one does not): elsewhere
   * it throws {@link UnsatisfiedLinkError}.
   */
  static native void panicForTest();
}
