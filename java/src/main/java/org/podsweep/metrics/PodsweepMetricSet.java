package org.podsweep.metrics;

import com.codahale.metrics.Gauge;
import com.codahale.metrics.Metric;
import com.codahale.metrics.MetricRegistry;
import com.codahale.metrics.MetricSet;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import org.podsweep.PodSweeper;
import org.podsweep.ScopeStatus;

/**
 * Dropwizard gauges for a {@link PodSweeper}, named the way Kyuubi names its metrics (prefix
 * {@code kyuubi.}, dot-separated lower-case segments, underscores inside a segment).
 *
 * <h2>Names</h2>
 *
 * Per scope, under {@code kyuubi.kubernetes.cleanup.<context>.<namespace>.}:
 *
 * <ul>
 *   <li>{@code leader} (1 while this server leads the scope, else 0), {@code leadership_transitions},
 *       {@code healthy} (1 or 0), {@code leaderless_ms};
 *   <li>{@code tracked}, {@code scheduled}, {@code due}, {@code inflight}, {@code retries},
 *       {@code cancelled}, {@code oldest_overdue_ms}, {@code restarts} (of the scope's tasks after a
 *       failure);
 *   <li>retention: {@code capped} (pods deleted before their retain period because the scope was
 *       over its cap), {@code kept} (pods kept by {@code podsweep.org/keep} now), {@code
 *       annotations_malformed} (pods whose annotations could not be read);
 *   <li>the election: {@code election.layout} (2 while the scope is elected under the cluster's
 *       key, 1 under its API server URL; null until the key is read) and {@code election.legacy}
 *       (1 while podsweep 0.1's URL-keyed election is won first, {@code ha.legacyElection});
 *   <li>Kubernetes Events ({@code events.enabled}): {@code events.sent}, {@code events.failed} (the
 *       API server refused them), {@code events.dropped} (left out by {@code events.qps});
 *   <li>{@code deletes.sent} and one {@code deletes.<outcome>} per outcome class: {@code accepted},
 *       {@code already_absent}, {@code replaced}, {@code forbidden}, {@code throttled},
 *       {@code server_error}, {@code transport}, {@code other};
 *   <li>{@code lag.count}, {@code lag.p50_seconds}, {@code lag.p99_seconds} (upper bounds of the
 *       histogram bucket holding the quantile, {@code NaN} before the first DELETE),
 *       {@code lag.max_seconds};
 *   <li>the scope's pauses: {@code paused} (1 while anything holds the scope back, else 0),
 *       {@code pause_ms} (how long the most severe open pause has lasted, 0 when none), {@code
 *       paused_until_ms} (when it ends, epoch milliseconds; 0 when open-ended or none), and one
 *       {@code pause.<reason>_ms} per cause ({@link #PAUSES}: how long the open pause of that cause
 *       has lasted, 0 when none).
 * </ul>
 *
 * plus the server-wide {@code kyuubi.kubernetes.cleanup.log_records_dropped}.
 *
 * <h2>Scope segments</h2>
 *
 * A scope {@code (context, namespace)} becomes the two segments {@code <context>.<namespace>}: each
 * part is lower-cased, every character other than {@code a-z}, {@code 0-9} and {@code _} becomes
 * {@code _}, and an absent (null or empty) part becomes {@code default}. So {@code (null, "spark")}
 * is {@code default.spark} and {@code ("kind-dev", "spark-jobs")} is {@code kind_dev.spark_jobs}.
 * Names are sticky for the life of this object: if a later scope maps to a segment pair already
 * taken by another scope, its namespace segment gets the suffix {@code _<8 hex digits>} (a hash of
 * the raw context and namespace), so two scopes never share a gauge.
 *
 * <h2>Registration and caching</h2>
 *
 * Scopes appear at run time (the first informer event of a new {@code KubernetesInfo}), so besides
 * {@link #getMetrics()} (the scopes known now, for {@link MetricRegistry#registerAll}) this class
 * offers {@link #register(MetricRegistry)}, which adds the gauges of scopes not registered yet and
 * can be called again at any time; Kyuubi can call it periodically (e.g. from its metrics or
 * cleanup-check scheduler). All gauges read one cached {@link PodSweeper#statusAll} snapshot, taken
 * at most once per cache period (1 s by default), so a scrape of N gauges costs one JNI call. A
 * gauge whose scope is absent from the snapshot, or whose sweeper is closed, reads {@code null}
 * (reporters skip it). Gauges never throw.
 */
public final class PodsweepMetricSet implements MetricSet {
  /** Prefix of every name. */
  public static final String PREFIX = "kyuubi.kubernetes.cleanup";

  /** The DELETE outcome classes, one {@code deletes.<class>} gauge each. */
  public static final List<String> OUTCOMES =
      Collections.unmodifiableList(
          java.util.Arrays.asList(
              "accepted",
              "already_absent",
              "replaced",
              "forbidden",
              "throttled",
              "server_error",
              "transport",
              "other"));

  /** The causes of a pause, one {@code pause.<reason>_ms} gauge each. */
  public static final List<String> PAUSES =
      Collections.unmodifiableList(
          java.util.Arrays.asList(
              "refused",
              "ha_session_lost",
              "step_down_hold",
              "restarting",
              "watch_failing",
              "retry_after",
              "backoff",
              "server_id_pending",
              "cluster_identity",
              "client_unavailable",
              "list_pacing"));

  /** Per-scope gauge suffix -> snapshot field (top-level integral fields). */
  private static final Map<String, String> COUNTS;

  static {
    Map<String, String> m = new LinkedHashMap<>();
    m.put("leader", "leader");
    m.put("leadership_transitions", "leadership_transitions");
    m.put("leaderless_ms", "leaderless_ms");
    m.put("tracked", "tracked");
    m.put("scheduled", "scheduled");
    m.put("due", "due");
    m.put("inflight", "inflight");
    m.put("retries", "retries");
    m.put("cancelled", "cancelled");
    m.put("oldest_overdue_ms", "oldest_overdue_ms");
    m.put("deletes.sent", "deletes_sent");
    m.put("pause_ms", "pause_ms");
    m.put("restarts", "restarts");
    m.put("queued", "queued");
    m.put("queued_max", "queued_max");
    m.put("capped", "capped");
    m.put("kept", "kept");
    m.put("annotations_malformed", "annotations_malformed");
    m.put("events.sent", "events_sent");
    m.put("events.failed", "events_failed");
    m.put("events.dropped", "events_dropped");
    m.put("election.layout", "election_key_layout");
    m.put("election.legacy", "election_legacy_first");
    COUNTS = Collections.unmodifiableMap(m);
  }

  private final PodSweeper sweeper;
  private final long cacheNanos;

  private final Object snapshotLock = new Object();
  // Guarded by snapshotLock.
  private Snapshot snapshot;

  /** Scope key -> its name prefix (sticky). */
  private final Map<String, String> scopeNames = new HashMap<>();
  /** Name prefixes already given to a scope. */
  private final Map<String, String> takenNames = new HashMap<>();
  /** Every gauge handed out, by full name (stable instances). */
  private final ConcurrentHashMap<String, Gauge<Number>> gauges = new ConcurrentHashMap<>();

  /** Gauges over {@code sweeper}, reading at most one snapshot per second. */
  public PodsweepMetricSet(PodSweeper sweeper) {
    this(sweeper, 1000, TimeUnit.MILLISECONDS);
  }

  /**
   * Gauges over {@code sweeper}, reading at most one snapshot per {@code cachePeriod} (0: every
   * read asks the native side).
   */
  public PodsweepMetricSet(PodSweeper sweeper, long cachePeriod, TimeUnit unit) {
    if (sweeper == null) {
      throw new IllegalArgumentException("sweeper must not be null");
    }
    if (cachePeriod < 0 || unit == null) {
      throw new IllegalArgumentException("cachePeriod must be >= 0 with a unit");
    }
    this.sweeper = sweeper;
    this.cacheNanos = unit.toNanos(cachePeriod);
  }

  /** The gauges of every scope in the current snapshot, plus the server-wide ones. */
  @Override
  public Map<String, Metric> getMetrics() {
    Snapshot snap = snapshot();
    Map<String, Metric> out = new LinkedHashMap<>();
    out.put(
        PREFIX + ".log_records_dropped",
        gauge(PREFIX + ".log_records_dropped", null, "log_records_dropped", Kind.GLOBAL));
    for (String key : snap.byKey.keySet()) {
      ScopeStatus st = snap.byKey.get(key);
      String base = PREFIX + "." + nameOf(key, st.string("context"), st.string("namespace"));
      for (Map.Entry<String, String> e : COUNTS.entrySet()) {
        String name = base + "." + e.getKey();
        out.put(name, gauge(name, key, e.getValue(), Kind.COUNT));
      }
      for (String outcome : OUTCOMES) {
        String name = base + ".deletes." + outcome;
        out.put(name, gauge(name, key, outcome, Kind.OUTCOME));
      }
      out.put(base + ".healthy", gauge(base + ".healthy", key, "healthy", Kind.FLAG));
      out.put(base + ".paused", gauge(base + ".paused", key, "paused", Kind.FLAG));
      out.put(
          base + ".paused_until_ms",
          gauge(base + ".paused_until_ms", key, "paused_until_ms", Kind.UNTIL));
      for (String reason : PAUSES) {
        String name = base + ".pause." + reason + "_ms";
        out.put(name, gauge(name, key, reason, Kind.PAUSE));
      }
      out.put(base + ".lag.count", gauge(base + ".lag.count", key, "count", Kind.LAG_COUNT));
      out.put(base + ".lag.p50_seconds", gauge(base + ".lag.p50_seconds", key, "p50_seconds_le", Kind.LAG));
      out.put(base + ".lag.p99_seconds", gauge(base + ".lag.p99_seconds", key, "p99_seconds_le", Kind.LAG));
      out.put(base + ".lag.max_seconds", gauge(base + ".lag.max_seconds", key, "max_seconds", Kind.LAG));
    }
    return Collections.unmodifiableMap(out);
  }

  /**
   * Registers the gauges of every scope in the current snapshot that {@code registry} does not hold
   * yet; names already present are left alone. Safe to call repeatedly and concurrently.
   *
   * @return how many gauges were added
   */
  public int register(MetricRegistry registry) {
    if (registry == null) {
      throw new IllegalArgumentException("registry must not be null");
    }
    int added = 0;
    java.util.Set<String> existing = registry.getNames();
    for (Map.Entry<String, Metric> e : getMetrics().entrySet()) {
      if (existing.contains(e.getKey())) {
        continue;
      }
      try {
        registry.register(e.getKey(), e.getValue());
        added++;
      } catch (IllegalArgumentException raced) {
        // Registered concurrently under the same name.
      }
    }
    return added;
  }

  /** Removes every gauge this object handed out from {@code registry} (e.g. when Kyuubi stops). */
  public void unregister(MetricRegistry registry) {
    if (registry == null) {
      throw new IllegalArgumentException("registry must not be null");
    }
    for (Map.Entry<String, Gauge<Number>> e : gauges.entrySet()) {
      if (registry.getMetrics().get(e.getKey()) == e.getValue()) {
        registry.remove(e.getKey());
      }
    }
  }

  /**
   * The name segments of a scope before collision handling: {@code <context>.<namespace>}, see the
   * class comment.
   */
  public static String scopeSegments(String context, String namespace) {
    return segment(context) + "." + segment(namespace);
  }

  /** One safe lower-case segment: {@code [a-z0-9_]+}, {@code default} when absent. */
  static String segment(String part) {
    if (part == null || part.isEmpty()) {
      return "default";
    }
    String lower = part.toLowerCase(Locale.ROOT);
    StringBuilder b = new StringBuilder(lower.length());
    for (int i = 0; i < lower.length(); i++) {
      char c = lower.charAt(i);
      b.append((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ? c : '_');
    }
    return b.toString();
  }

  private String nameOf(String key, String context, String namespace) {
    synchronized (scopeNames) {
      String name = scopeNames.get(key);
      if (name == null) {
        name = scopeSegments(context, namespace);
        if (takenNames.containsKey(name)) {
          name = name + "_" + String.format("%08x", key.hashCode());
        }
        scopeNames.put(key, name);
        takenNames.put(name, key);
      }
      return name;
    }
  }

  private Gauge<Number> gauge(String name, String scopeKey, String field, Kind kind) {
    Gauge<Number> g = gauges.get(name);
    if (g == null) {
      Gauge<Number> created = () -> read(scopeKey, field, kind);
      g = gauges.putIfAbsent(name, created);
      if (g == null) {
        g = created;
      }
    }
    return g;
  }

  private Number read(String scopeKey, String field, Kind kind) {
    try {
      Snapshot snap = snapshot();
      if (kind == Kind.GLOBAL) {
        return snap.logRecordsDropped;
      }
      ScopeStatus st = snap.byKey.get(scopeKey);
      if (st == null) {
        return null;
      }
      switch (kind) {
        case COUNT:
          return integral(st.fields().get(field));
        case OUTCOME:
          long n = st.outcome(field);
          return n < 0 ? null : Long.valueOf(n);
        case FLAG:
          Object flag = st.fields().get(field);
          if (!(flag instanceof Boolean)) {
            return null;
          }
          return Long.valueOf(((Boolean) flag).booleanValue() ? 1L : 0L);
        case UNTIL:
          if (!st.fields().containsKey("paused")) {
            return null;
          }
          Object until = st.fields().get(field);
          return Long.valueOf(until instanceof Number ? ((Number) until).longValue() : 0L);
        case PAUSE:
          if (!st.fields().containsKey("pauses")) {
            return null;
          }
          for (Map<String, Object> p : st.pauses()) {
            if (field.equals(p.get("reason"))) {
              Long ms = integral(p.get("pause_ms"));
              return ms == null ? Long.valueOf(0L) : ms;
            }
          }
          return Long.valueOf(0L);
        case LAG_COUNT:
          return integral(lag(st).get(field));
        case LAG:
          Object v = lag(st).get(field);
          return Double.valueOf(v instanceof Number ? ((Number) v).doubleValue() : Double.NaN);
        default:
          return null;
      }
    } catch (RuntimeException e) {
      return null;
    }
  }

  private static Long integral(Object v) {
    return v instanceof Number ? Long.valueOf(((Number) v).longValue()) : null;
  }

  private static Map<?, ?> lag(ScopeStatus st) {
    Object lag = st.fields().get("lag");
    return lag instanceof Map ? (Map<?, ?>) lag : Collections.emptyMap();
  }

  /** The cached snapshot, refreshed when older than the cache period; empty once closed. */
  private Snapshot snapshot() {
    synchronized (snapshotLock) {
      long now = System.nanoTime();
      if (snapshot != null && now - snapshot.takenAt < cacheNanos) {
        return snapshot;
      }
      Snapshot fresh;
      try {
        fresh = new Snapshot(now, ScopeStatus.parseAll(sweeper.statusAll()));
      } catch (RuntimeException closedOrBroken) {
        fresh = new Snapshot(now, Collections.<ScopeStatus>emptyList());
      }
      snapshot = fresh;
      return fresh;
    }
  }

  private enum Kind {
    COUNT,
    OUTCOME,
    FLAG,
    UNTIL,
    PAUSE,
    LAG_COUNT,
    LAG,
    GLOBAL
  }

  private static final class Snapshot {
    final long takenAt;
    /** Scope key ({@code context \0 namespace}, null as empty) -> status, sorted as returned. */
    final Map<String, ScopeStatus> byKey = new LinkedHashMap<>();
    final Long logRecordsDropped;

    Snapshot(long takenAt, List<ScopeStatus> all) {
      this.takenAt = takenAt;
      Long dropped = null;
      for (ScopeStatus st : all) {
        byKey.put(key(st.string("context"), st.string("namespace")), st);
        dropped = integral(st.fields().get("log_records_dropped"));
      }
      this.logRecordsDropped = dropped;
    }
  }

  private static String key(String context, String namespace) {
    return (context == null ? "" : context) + '\0' + (namespace == null ? "" : namespace);
  }
}
