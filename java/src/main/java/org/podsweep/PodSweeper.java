package org.podsweep;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.locks.ReentrantReadWriteLock;

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
  private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
  private final String serverId;
  // Guarded by lock: read under the read lock, cleared under the write lock.
  private long handle;

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
   * @throws IllegalArgumentException if an argument is null or a configuration value is invalid
   * @throws PodsweepException if the loaded native library comes from another build (version or
   *     git commit) than this jar; see {@link BuildInfo}
   * @throws UnsatisfiedLinkError if the native library cannot be loaded; the message lists every
   *     attempt (see {@link NativeLoader})
   */
  public static PodSweeper create(Map<String, String> kyuubiConf, String serverId) {
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
    long h = NativeBridge.create(keys, values, serverId);
    if (h == 0) {
      throw new PodsweepException("native create returned no handle");
    }
    return new PodSweeper(h, serverId);
  }

  /**
   * Records what an informer saw. Non-blocking and O(1).
   *
   * @param context the scope's kube context, or {@code null} (Kyuubi's {@code None})
   * @param namespace the scope's namespace, or {@code null} (Kyuubi's {@code None})
   * @param event the informer callback
   * @param uniqueTag the pod's {@code kyuubi-unique-tag} label value
   * @param podName the pod's name
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
    if (event == null) {
      throw new IllegalArgumentException("event must not be null");
    }
    ReentrantReadWriteLock.ReadLock r = lock.readLock();
    r.lock();
    try {
      NativeBridge.observe(
          open(),
          context,
          namespace,
          event.code(),
          uniqueTag,
          podName,
          podUid,
          appState,
          hasAppSelector,
          terminatedAtMillis,
          deletionTimestampSet);
    } finally {
      r.unlock();
    }
  }

  /** Whether this server currently leads cleanup for the scope. */
  public boolean isLeader(String context, String namespace) {
    ReentrantReadWriteLock.ReadLock r = lock.readLock();
    r.lock();
    try {
      return NativeBridge.isLeader(open(), context, namespace);
    } finally {
      r.unlock();
    }
  }

  /**
   * A JSON snapshot of the scope: leadership, counts of tracked / scheduled / due / in-flight pods,
   * DELETEs sent and their outcomes. {@link ScopeStatus#parse} reads it.
   */
  public String scopeStatus(String context, String namespace) {
    ReentrantReadWriteLock.ReadLock r = lock.readLock();
    r.lock();
    try {
      return NativeBridge.scopeStatus(open(), context, namespace);
    } finally {
      r.unlock();
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
    ReentrantReadWriteLock.ReadLock r = lock.readLock();
    r.lock();
    try {
      return NativeBridge.statusAll(open());
    } finally {
      r.unlock();
    }
  }

  /** The server id given to {@link #create}. */
  public String serverId() {
    return serverId;
  }

  /** Whether {@link #close} has been called. */
  public boolean isClosed() {
    ReentrantReadWriteLock.ReadLock r = lock.readLock();
    r.lock();
    try {
      return handle == 0;
    } finally {
      r.unlock();
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
    ReentrantReadWriteLock.WriteLock w = lock.writeLock();
    w.lock();
    try {
      h = handle;
      if (h == 0) {
        return;
      }
      // Cleared first: even if the native close fails, the handle is never used again.
      handle = 0;
    } finally {
      w.unlock();
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
