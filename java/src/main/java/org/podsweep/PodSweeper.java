package org.podsweep;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.StampedLock;

/**
 * One Kyuubi server's handle on the podsweep engine.
 *
 * <p>Every Kyuubi server feeds its Pod informer events to {@link #observe}; for each scope (Kyuubi's
 * {@code KubernetesInfo(context, namespace)}) one server, elected through Kyuubi's HA backend (or
 * every server alone when no HA backend is configured), deletes terminated Spark driver pods once
 * their retain period has passed, with a UID precondition.
 *
 * <h2>Guarantees</h2>
 *
 * <ul>
 *   <li>{@link #observe} never blocks on the network; it is safe to call from informer threads.
 *   <li>{@link #close} deletes nothing and releases leadership; it is idempotent, and it waits for
 *       running calls to return before freeing native memory, so a call can never use a freed
 *       handle. After close every other method throws {@link IllegalStateException}; no call ever
 *       waits for the native close itself.
 * </ul>
 *
 * <h2>Errors</h2>
 *
 * {@link IllegalArgumentException} for a bad argument (the message names it) or a bad
 * configuration value (the message names the Kyuubi key); {@link IllegalStateException} after
 * close; {@link PodsweepException} for any other native failure.
 */
public final class PodSweeper implements AutoCloseable {
  // A read lock of one CAS each way, no thread-local hold counts: the calls never re-enter it.
  private final StampedLock lock = new StampedLock();
  /** The id given to create, or the one confirmed since. */
  private volatile String serverId;
  // Guarded by lock: read under the read lock, cleared under the write lock.
  private long handle;
  /** The native id of each (context, namespace) seen; ids live as long as the handle. */
  private final ConcurrentHashMap<ScopeKey, Long> scopeIds = new ConcurrentHashMap<>();
  /** The scope of the last call: informers pass the same scope again and again. */
  private volatile ScopeKey lastScope;
  /** The JMX MBean and the status log lines of this handle ({@link PodSweeperStatus}). */
  private volatile PodSweeperStatus status;

  private PodSweeper(long handle, String serverId) {
    this.handle = handle;
    this.serverId = serverId;
  }

  /**
   * Starts podsweep for one Kyuubi server.
   *
   * @param kyuubiConf the server's Kyuubi configuration (all keys; podsweep reads the
   *     {@code kyuubi.kubernetes.*} and {@code kyuubi.ha.*} ones with Kyuubi's defaults)
   * @param serverId this server's identity in elections, e.g. its {@code host:port}
   * @throws IllegalArgumentException if an argument is null or a configuration value is invalid,
   *     or if self-watch mode ({@code ...cleanupTerminatedDriverPod.watch.enabled=true}) has no HA
   *     backend the servers share and {@code ...cleanupTerminatedDriverPod.ha.singleServer} is not
   *     true (the message names that key)
   * @throws PodsweepException if the loaded native library comes from another build (version or
   *     git commit) than this jar; see {@link BuildInfo}
   * @throws UnsatisfiedLinkError if the native library cannot be loaded; the message lists every
   *     attempt (see {@link NativeLoader})
   */
  public static PodSweeper create(Map<String, String> kyuubiConf, String serverId) {
    return create(kyuubiConf, serverId, true);
  }

  /**
   * Starts podsweep for a server that learns its identity later: a Kyuubi server that binds its
   * port 0 knows the port only once its frontend is bound, after its application operations
   * started. Pods are tracked at once, but no scope campaigns (so nothing is deleted) until
   * {@link #confirmServerId} is called, or two minutes have passed (then, with one WARN, under
   * the provisional id).
   *
   * @param provisionalServerId the id until confirmed, e.g. {@code host:0}
   * @see #create(Map, String)
   */
  public static PodSweeper createAwaitingServerId(
      Map<String, String> kyuubiConf, String provisionalServerId) {
    return create(kyuubiConf, provisionalServerId, false);
  }

  private static PodSweeper create(Map<String, String> kyuubiConf, String serverId, boolean idFinal) {
    if (kyuubiConf == null) {
      throw new IllegalArgumentException("kyuubiConf must not be null");
    }
    if (serverId == null) {
      throw new IllegalArgumentException("serverId must not be null");
    }
    List<Map.Entry<String, String>> entries = new ArrayList<>(kyuubiConf.entrySet());
    String[] keys = new String[entries.size()];
    String[] values = new String[entries.size()];
    for (int i = 0; i < entries.size(); i++) {
      Map.Entry<String, String> e = entries.get(i);
      if (e.getKey() == null) {
        throw new IllegalArgumentException("kyuubiConf must not contain a null key");
      }
      if (e.getValue() == null) {
        throw new IllegalArgumentException("kyuubiConf: the value of " + e.getKey() + " is null");
      }
      keys[i] = e.getKey();
      values[i] = e.getValue();
    }
    NativeLoader.load();
    long h = NativeBridge.create(keys, values, serverId, idFinal);
    if (h == 0) {
      throw new PodsweepException("native create returned no handle");
    }
    PodSweeper sweeper = new PodSweeper(h, serverId);
    sweeper.status = PodSweeperStatus.start(sweeper, kyuubiConf);
    return sweeper;
  }

  /**
   * Records what an informer saw. Non-blocking and O(1).
   *
   * <p>The hot path of an informer thread: the scope is resolved to a native id once (then found
   * again without crossing into native code), the state crosses as a number, and the pod name
   * only for an event that can lead to a DELETE or ends one (a terminal state, a DELETE event, a
   * deletion timestamp), where it is checked to be a Kubernetes pod name; a running pod's name
   * only has to be non-empty.
   *
   * @param context the scope's kube context, or {@code null} (Kyuubi's {@code None})
   * @param namespace the scope's namespace, or {@code null} (Kyuubi's {@code None})
   * @param event the informer callback
   * @param uniqueTag the pod's {@code kyuubi-unique-tag} label value
   * @param podName the pod's name (not null; read, and checked to be a DNS-1123 subdomain, only
   *     when the event can lead to a DELETE or ends one)
   * @param podUid the pod's {@code metadata.uid}
   * @param appState Kyuubi's {@code ApplicationState} name for the pod (PENDING, RUNNING, FINISHED,
   *     KILLED, FAILED, ZOMBIE, NOT_FOUND, UNKNOWN)
   * @param hasAppSelector whether the pod carries the {@code spark-app-selector} label
   * @param terminatedAtMillis when the pod terminated (epoch milliseconds), or {@code <= 0} if unknown
   * @param deletionTimestampSet whether {@code metadata.deletionTimestamp} is set
   */
  public void observe(
      String context,
      String namespace,
      PodEvent event,
      String uniqueTag,
      String podName,
      String podUid,
      String appState,
      boolean hasAppSelector,
      long terminatedAtMillis,
      boolean deletionTimestampSet) {
    observe(context, namespace, event, uniqueTag, podName, podUid, appState, hasAppSelector,
        terminatedAtMillis, deletionTimestampSet, null, null);
  }

  /**
   * {@link #observe(String, String, PodEvent, String, String, String, String, boolean, long,
   * boolean)} with podsweep's annotations of the pod: {@code podsweep.org/retain-period} and
   * {@code podsweep.org/keep} (null when absent). They are passed on only for a terminal state
   * (where they can lead to a DELETE), and matter only with {@code annotations.enabled}.
   */
  public void observe(
      String context,
      String namespace,
      PodEvent event,
      String uniqueTag,
      String podName,
      String podUid,
      String appState,
      boolean hasAppSelector,
      long terminatedAtMillis,
      boolean deletionTimestampSet,
      String retainAnnotation,
      String keepAnnotation) {
    if (event == null) {
      throw new IllegalArgumentException("event must not be null");
    }
    int state = stateCode(appState);
    if (podUid == null) {
      throw new IllegalArgumentException("podUid must not be null");
    }
    // Only an event that can lead to a DELETE or ends a record needs the pod name on the native
    // side (where it is checked to be a Kubernetes name): a terminal state, a DELETE event, a
    // deletion timestamp. A running pod's is never read, so it is not converted.
    boolean full = event == PodEvent.DELETE || deletionTimestampSet || terminal(state);
    if (podName == null || (full && podName.isEmpty())) {
      throw new IllegalArgumentException("podName must not be " + (podName == null ? "null" : "empty"));
    }
    // A Kubernetes UID crosses as its 128 bits: the native side answers most events (a pod still
    // running, still failed) from them alone, without reading a string. The tag is passed as it
    // is (the native side reads it only for an event it hands on, and takes an empty one as none).
    byte[] uid = canonicalUuid(podUid);
    boolean annotated = terminal(state) && (retainAnnotation != null || keepAnnotation != null);
    long stamp = lock.readLock();
    try {
      long h = open();
      NativeBridge.observeIn(
          h,
          scopeId(h, context, namespace),
          event.code(),
          state,
          uniqueTag,
          full ? podName : null,
          podUid,
          uid != null,
          uid != null ? uuidHigh(uid) : 0L,
          uid != null ? uuidLow(uid) : 0L,
          hasAppSelector,
          terminatedAtMillis,
          deletionTimestampSet,
          annotated ? Objects.hash(retainAnnotation, keepAnnotation) : 0,
          annotated ? retainAnnotation : null,
          annotated ? keepAnnotation : null);
    } finally {
      lock.unlockRead(stamp);
    }
  }

  /**
   * Confirms this server's identity (see {@link #createAwaitingServerId}): scopes waiting for it
   * campaign under {@code serverId}. Confirming the id it already has changes nothing.
   *
   * @throws IllegalArgumentException if {@code serverId} is null or empty
   * @throws IllegalStateException after {@link #close}
   */
  public void confirmServerId(String serverId) {
    if (serverId == null || serverId.trim().isEmpty()) {
      throw new IllegalArgumentException("serverId must not be null or empty");
    }
    long stamp = lock.readLock();
    try {
      NativeBridge.confirmServerId(open(), serverId);
      String before = this.serverId;
      this.serverId = serverId;
      PodSweeperStatus s = status;
      if (s != null && !serverId.equals(before)) {
        s.renamed();
      }
    } finally {
      lock.unlockRead(stamp);
    }
  }

  /**
   * Kyuubi asks for a driver pod to be deleted at once: the pod of a batch whose state is
   * CANCELED, an orphan pod. Instead of every server deleting it, the elected leader of the scope
   * sends one DELETE with the pod's UID as precondition, as soon as it may, whatever the pod's
   * state (it may still run) and the cleanup kind (a scope of kind NONE campaigns for it); a
   * later running state does not disarm it, a DELETE event or deletion timestamp ends it.
   * Non-blocking. Refused in self-watch mode ({@link IllegalStateException}).
   *
   * <p>Whichever server is asked, the leader hears of it: the request is handed to it through
   * the HA backend ({@code /<kyuubi.ha.namespace>-podsweep/requests/}), so a follower whose
   * Kyuubi alone asks (it re-listed the pod after a restart; owner-scoped informers) gets the pod
   * deleted within seconds, once.
   *
   * <p>Under cleanup kind {@code NONE} podsweep tracks only the pods handed to this call; every
   * server that was handed one forgets it when its informer reports the pod's DELETE (or
   * deletion timestamp) through {@link #observe}, so a later leader never deletes it again.
   *
   * @param appState Kyuubi's {@code ApplicationState} name for the pod now
   * @param why why Kyuubi wants it gone, for the log (e.g. {@code "its batch is CANCELED"})
   * @return true when podsweep took the pod (its leader deletes it; the caller sends nothing);
   *     false when podsweep leaves it to the caller, who deletes it as it would without podsweep:
   *     a pod without Kyuubi's driver labels ({@code kyuubi-unique-tag} and {@code
   *     spark-app-selector}), a scope the allow lists refused, every pod in a dry run ({@code
   *     dryRun=true} changes nothing of what Kyuubi does), and every pod while this server is out
   *     of contact with its HA backend (no leader would hear of it)
   * @throws IllegalArgumentException for a bad argument (the message names it)
   */
  public boolean dueNow(
      String context,
      String namespace,
      String uniqueTag,
      String podName,
      String podUid,
      String appState,
      boolean hasAppSelector,
      long terminatedAtMillis,
      boolean deletionTimestampSet,
      String why) {
    return dueNow(context, namespace, uniqueTag, podName, podUid, appState, hasAppSelector,
        terminatedAtMillis, deletionTimestampSet, why, null, null);
  }

  /** {@link #dueNow} with podsweep's annotations of the pod (null when absent). */
  public boolean dueNow(
      String context,
      String namespace,
      String uniqueTag,
      String podName,
      String podUid,
      String appState,
      boolean hasAppSelector,
      long terminatedAtMillis,
      boolean deletionTimestampSet,
      String why,
      String retainAnnotation,
      String keepAnnotation) {
    int state = stateCode(appState);
    if (podName == null || podName.isEmpty()) {
      throw new IllegalArgumentException("podName must not be " + (podName == null ? "null" : "empty"));
    }
    if (podUid == null) {
      throw new IllegalArgumentException("podUid must not be null");
    }
    long stamp = lock.readLock();
    try {
      return NativeBridge.dueNow(open(), context, namespace, uniqueTag, podName, podUid, state,
          hasAppSelector, terminatedAtMillis, deletionTimestampSet, why == null ? "" : why,
          retainAnnotation, keepAnnotation);
    } finally {
      lock.unlockRead(stamp);
    }
  }

  /**
   * podsweep's own configuration keys (its key table, the one source of the documentation and of
   * the patch's {@code KyuubiConf} entries) as a JSON array: per key {@code key}, {@code const},
   * {@code type} (Kyuubi's type name), {@code default} (null: none), {@code doc}, {@code since},
   * {@code routes}, {@code internal}, {@code check}, and sample {@code valid} / {@code invalid}
   * values. Loads the native library.
   */
  public static String configKeys() {
    NativeLoader.load();
    return NativeBridge.configKeys();
  }

  /** The native code of an {@code ApplicationState} name (its declaration index). */
  private static int stateCode(String appState) {
    if (appState == null) {
      throw new IllegalArgumentException("appState must not be null");
    }
    // A switch on the name: its hash (cached in the string) and one comparison.
    switch (appState) {
      case "PENDING":
        return 0;
      case "RUNNING":
        return 1;
      case "FINISHED":
        return 2;
      case "KILLED":
        return 3;
      case "FAILED":
        return 4;
      case "ZOMBIE":
        return 5;
      case "NOT_FOUND":
        return 6;
      case "UNKNOWN":
        return 7;
      default:
        break;
    }
    throw new IllegalArgumentException(
        "appState must be a Kyuubi ApplicationState name (PENDING, RUNNING, FINISHED, KILLED,"
            + " FAILED, ZOMBIE, NOT_FOUND, UNKNOWN), got \"" + appState + "\"");
  }

  /**
   * Whether {@code s} is a UUID in canonical form ({@code 8-4-4-4-12} lower-case hex digits, as
   * Kubernetes writes UIDs), the one form {@link UUID#fromString} gives back exactly through
   * {@link UUID#toString}: the native side may then rebuild the string from the bits.
   */
  static boolean isCanonicalUuid(String s) {
    return canonicalUuid(s) != null;
  }

  /**
   * The characters of {@code s} as bytes if it is a canonical UUID ({@link #isCanonicalUuid}),
   * else {@code null}. One bulk copy, then plain array reads: a Latin-1 string's bytes are its
   * characters, and any other character becomes {@code '?'}, which is not a hex digit.
   */
  static byte[] canonicalUuid(String s) {
    if (s == null || s.length() != 36) {
      return null;
    }
    byte[] b = s.getBytes(StandardCharsets.ISO_8859_1);
    if (b.length != 36) {
      return null;
    }
    int bad = (b[8] ^ '-') | (b[13] ^ '-') | (b[18] ^ '-') | (b[23] ^ '-');
    bad |= hexFlags(b, 0, 8) | hexFlags(b, 9, 13) | hexFlags(b, 14, 18) | hexFlags(b, 19, 23)
        | hexFlags(b, 24, 36);
    return bad == 0 ? b : null;
  }

  /** {@link #NOT_HEX} if a byte in {@code [from, to)} is not a lower-case hex digit, else 0. */
  private static int hexFlags(byte[] b, int from, int to) {
    int flags = 0;
    for (int i = from; i < to; i++) {
      flags |= HEX[b[i] & 0xff];
    }
    return flags & NOT_HEX;
  }

  private static final int NOT_HEX = 0x10;

  /**
   * Hex digit values by byte: 0 to 15 for {@code 0-9a-f}, {@link #NOT_HEX} for every other byte
   * (upper case included: only the canonical form is taken).
   */
  private static final byte[] HEX = new byte[256];

  static {
    java.util.Arrays.fill(HEX, (byte) NOT_HEX);
    for (int d = 0; d < 10; d++) {
      HEX['0' + d] = (byte) d;
    }
    for (int d = 0; d < 6; d++) {
      HEX['a' + d] = (byte) (10 + d);
    }
  }

  /** {@code v} followed by the hex digits of {@code b} in {@code [from, to)}. */
  private static long hexDigits(byte[] b, int from, int to, long v) {
    for (int i = from; i < to; i++) {
      v = (v << 4) | HEX[b[i] & 0xff];
    }
    return v;
  }

  /**
   * The most significant 64 bits of a canonical UUID's bytes ({@link #canonicalUuid}), as {@link
   * UUID#getMostSignificantBits} gives them.
   */
  static long uuidHigh(byte[] canonical) {
    return hexDigits(canonical, 14, 18, hexDigits(canonical, 9, 13, hexDigits(canonical, 0, 8, 0L)));
  }

  /** The least significant 64 bits, as {@link UUID#getLeastSignificantBits} gives them. */
  static long uuidLow(byte[] canonical) {
    return hexDigits(canonical, 24, 36, hexDigits(canonical, 19, 23, 0L));
  }

  /** Kyuubi's {@code isTerminated}: FINISHED, KILLED, FAILED, NOT_FOUND. */
  private static boolean terminal(int state) {
    return state == 2 || state == 3 || state == 4 || state == 6;
  }

  /** The scope's native id (resolved once per scope); called under the read lock. */
  private long scopeId(long h, String context, String namespace) {
    ScopeKey last = lastScope;
    if (last != null && last.is(context, namespace)) {
      return last.id;
    }
    ScopeKey key = new ScopeKey(context, namespace, 0L);
    Long id = scopeIds.get(key);
    if (id == null) {
      // Throws IllegalArgumentException naming the namespace if it is not a Kubernetes name.
      id = NativeBridge.scopeId(h, context, namespace);
      scopeIds.putIfAbsent(key, id);
    }
    lastScope = new ScopeKey(context, namespace, id);
    return id;
  }

  /** A scope (context, namespace), either part null, with its native id (not part of equality). */
  private static final class ScopeKey {
    final String context;
    final String namespace;
    final long id;

    ScopeKey(String context, String namespace, long id) {
      this.context = context;
      this.namespace = namespace;
      this.id = id;
    }

    boolean is(String c, String n) {
      return same(context, c) && same(namespace, n);
    }

    private static boolean same(String a, String b) {
      return a == b || (a != null && a.equals(b));
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof ScopeKey && is(((ScopeKey) o).context, ((ScopeKey) o).namespace);
    }

    @Override
    public int hashCode() {
      return 31 * (context == null ? 0 : context.hashCode())
          + (namespace == null ? 0 : namespace.hashCode());
    }
  }

  /** Whether this server currently leads cleanup for the scope. */
  public boolean isLeader(String context, String namespace) {
    long stamp = lock.readLock();
    try {
      return NativeBridge.isLeader(open(), context, namespace);
    } finally {
      lock.unlockRead(stamp);
    }
  }

  /**
   * A JSON snapshot of the scope: leadership, counts of tracked / scheduled / due / in-flight pods,
   * DELETEs sent and their outcomes. {@link ScopeStatus#parse} reads it.
   */
  public String scopeStatus(String context, String namespace) {
    long stamp = lock.readLock();
    try {
      return NativeBridge.scopeStatus(open(), context, namespace);
    } finally {
      lock.unlockRead(stamp);
    }
  }

  /**
   * A JSON array with one snapshot per scope this server has seen (each with the fields of
   * {@link #scopeStatus}, plus {@code scope}, {@code context} and {@code namespace}), sorted by
   * scope. {@link ScopeStatus#parseAll} reads it. Metric adapters call it instead of one
   * {@link #scopeStatus} per scope.
   *
   * @throws IllegalStateException after {@link #close}
   */
  public String statusAll() {
    long stamp = lock.readLock();
    try {
      return NativeBridge.statusAll(open());
    } finally {
      lock.unlockRead(stamp);
    }
  }

  /**
   * The name of this handle's JMX MBean ({@code org.podsweep:type=PodSweeper,server=...}): an
   * attribute per scope with its status JSON, {@code StatusJson} with all of them, and the
   * operation {@code logStatus}; {@code null} when the platform MBean server refused it.
   */
  public javax.management.ObjectName statusMBean() {
    PodSweeperStatus s = status;
    return s == null ? null : s.objectName();
  }

  /** The server id given to {@link #create}, or the one confirmed since. */
  public String serverId() {
    return serverId;
  }

  /** Whether {@link #close} has been called. */
  public boolean isClosed() {
    long stamp = lock.readLock();
    try {
      return handle == 0;
    } finally {
      lock.unlockRead(stamp);
    }
  }

  /**
   * Stops podsweep for this server: releases leadership of every scope so another server takes
   * over, and deletes nothing. Calling it again does nothing (a second call returns at once, even
   * while the first is still releasing leadership).
   *
   * <p>The handle is cleared under the write lock, which waits only for calls already running (none
   * of them blocks); the native close, which may wait up to 5 s for leadership to be released,
   * runs after the lock is released, so {@link #observe} and the other calls never wait for it: they
   * throw {@link IllegalStateException} at once.
   */
  @Override
  public void close() {
    long h;
    long stamp = lock.writeLock();
    try {
      h = handle;
      if (h == 0) {
        return;
      }
      // Cleared first: even if the native close fails, the handle is never used again.
      handle = 0;
    } finally {
      lock.unlockWrite(stamp);
    }
    PodSweeperStatus s = status;
    if (s != null) {
      s.stop();
    }
    NativeBridge.close(h);
  }

  @Override
  public String toString() {
    return "PodSweeper[" + serverId + (isClosed() ? ", closed]" : "]");
  }

  private long open() {
    long h = handle;
    if (h == 0) {
      throw new IllegalStateException("PodSweeper is closed");
    }
    return h;
  }
}
