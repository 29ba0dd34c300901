package org.podsweep;

import java.lang.management.ManagementFactory;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.management.Attribute;
import javax.management.AttributeList;
import javax.management.AttributeNotFoundException;
import javax.management.DynamicMBean;
import javax.management.InstanceAlreadyExistsException;
import javax.management.MBeanAttributeInfo;
import javax.management.MBeanInfo;
import javax.management.MBeanOperationInfo;
import javax.management.MBeanServer;
import javax.management.ObjectName;
import javax.management.ReflectionException;

/**
 * A server's scope status, readable without code: a JMX MBean and a log line per scope on an
 * interval. {@link PodSweeper} starts one for every handle and stops it at {@link
 * PodSweeper#close}, so the patched Kyuubi and the drop-in need nothing of their own.
 *
 * <h2>The MBean</h2>
 *
 * {@code org.podsweep:type=PodSweeper,server=<server id, quoted>} (plus {@code ,instance=N} when
 * another handle of the same id is registered already) in the platform MBean server, which
 * Kyuubi's JMX reporter and {@code -Dcom.sun.management.jmxremote} expose. Attributes, all read
 * only: {@code ServerId}; {@code Scopes} (the scopes this server serves); {@code StatusJson} (the
 * {@link PodSweeper#statusAll} array); and one attribute per scope, named as the scope ({@code
 * context:namespace}, as podsweep's logs write it), whose value is that scope's status JSON
 * (leadership, health, pauses with cause and end, due pods, retries, the last failure). The
 * operation {@code logStatus} writes the status lines at once.
 *
 * <h2>The log lines</h2>
 *
 * Every {@code kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.status.logInterval} (default 10
 * minutes) one INFO line per scope under the logger {@code org.podsweep.status}: {@code Status of
 * scope S on SERVER: LEADING for 42s, healthy, not paused, tracked 3, due 0, in flight 0, retries
 * 0, no failure; status {...}}.
 *
 * <p>Nothing here throws into Kyuubi: an MBean server that refuses the registration costs the MBean
 * (one WARN), a failed status read costs one line.
 */
final class PodSweeperStatus implements DynamicMBean {
  static final String LOGGER = "org.podsweep.status";
  static final String INTERVAL_KEY =
      "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.status.logInterval";
  static final long DEFAULT_INTERVAL_MS = 600_000L;

  private static final AtomicInteger THREADS = new AtomicInteger();

  private final PodSweeper sweeper;
  private final ScheduledExecutorService timer;
  /** The MBean's name, or null when it could not be registered. */
  private volatile ObjectName name;

  private PodSweeperStatus(PodSweeper sweeper, ScheduledExecutorService timer) {
    this.sweeper = sweeper;
    this.timer = timer;
  }

  /** Registers the MBean and starts the log lines; never throws. */
  static PodSweeperStatus start(PodSweeper sweeper, Map<String, String> conf) {
    long every = intervalMs(conf.get(INTERVAL_KEY));
    ScheduledExecutorService timer =
        Executors.newSingleThreadScheduledExecutor(
            r -> {
              Thread t = new Thread(r, "podsweep-status-" + THREADS.incrementAndGet());
              t.setDaemon(true);
              return t;
            });
    PodSweeperStatus status = new PodSweeperStatus(sweeper, timer);
    status.name = register(status, sweeper.serverId());
    timer.scheduleWithFixedDelay(status::logStatus, every, every, TimeUnit.MILLISECONDS);
    return status;
  }

  /**
   * Registers {@code mbean} under the server's name, or the first {@code ,instance=N} free (two
   * handles of one server id in one JVM); null when the MBean server refuses (one WARN).
   */
  private static ObjectName register(PodSweeperStatus mbean, String serverId) {
    try {
      MBeanServer server = ManagementFactory.getPlatformMBeanServer();
      String base = "org.podsweep:type=PodSweeper,server=" + ObjectName.quote(serverId);
      for (int i = 1; ; i++) {
        ObjectName candidate = new ObjectName(i == 1 ? base : base + ",instance=" + i);
        try {
          server.registerMBean(mbean, candidate);
          return candidate;
        } catch (InstanceAlreadyExistsException taken) {
          // Another handle of this server id: the next instance number.
        }
      }
    } catch (Throwable t) {
      NativeLog.logJava(
          NativeLog.WARN, LOGGER, "Cannot register the podsweep status MBean for " + serverId + ": " + t);
      return null;
    }
  }

  /**
   * The interval in milliseconds: Kyuubi's time format (milliseconds or an ISO-8601 duration),
   * already checked by the native side when the handle was created.
   */
  static long intervalMs(String value) {
    if (value == null || value.trim().isEmpty()) {
      return DEFAULT_INTERVAL_MS;
    }
    String v = value.trim();
    try {
      long ms = v.chars().allMatch(Character::isDigit) ? Long.parseLong(v) : Duration.parse(v).toMillis();
      return ms > 0 ? ms : DEFAULT_INTERVAL_MS;
    } catch (RuntimeException e) {
      return DEFAULT_INTERVAL_MS;
    }
  }

  /** The server confirmed another id: the MBean moves to a name with it. */
  void renamed() {
    unregister();
    if (!timer.isShutdown()) {
      name = register(this, sweeper.serverId());
    }
  }

  /** Stops the log lines and unregisters the MBean; idempotent. */
  void stop() {
    timer.shutdownNow();
    unregister();
  }

  private void unregister() {
    ObjectName name = this.name;
    this.name = null;
    if (name != null) {
      try {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        if (server.isRegistered(name)) {
          server.unregisterMBean(name);
        }
      } catch (Throwable ignored) {
        // Already gone, or the MBean server is shutting down.
      }
    }
  }

  /** The MBean's name, or null when it could not be registered. */
  ObjectName objectName() {
    return name;
  }

  /** Writes one status line per scope under {@value #LOGGER}. */
  void logStatus() {
    try {
      for (ScopeStatus s : ScopeStatus.parseAll(sweeper.statusAll())) {
        NativeLog.logJava(NativeLog.INFO, LOGGER, line(s));
      }
    } catch (IllegalStateException closed) {
      // The handle was closed between two lines.
    } catch (Throwable t) {
      NativeLog.logJava(NativeLog.INFO, LOGGER, "Cannot read the podsweep status: " + t);
    }
  }

  /** A scope's status as one line: the gist, then the whole JSON (as the daemon writes it). */
  static String line(ScopeStatus s) {
    Map<String, Object> f = s.fields();
    String health =
        Boolean.TRUE.equals(f.get("healthy"))
            ? "healthy"
            : "unhealthy (" + s.string("health_reason") + ")";
    String pause = "not paused";
    if (s.paused()) {
      long until = s.pausedUntilMs();
      pause =
          "paused (" + s.pauseReason() + ")"
              + (until > 0 ? " until " + Instant.ofEpochMilli(until) : "");
    }
    String failure = "no failure";
    Object last = f.get("last_failure");
    if (last instanceof Map) {
      Map<?, ?> m = (Map<?, ?>) last;
      Object at = m.get("at_ms");
      failure =
          "last failure " + m.get("outcome") + " at "
              + (at instanceof Number ? Instant.ofEpochMilli(((Number) at).longValue()).toString() : "?");
    }
    long age = s.number("leadership_age_ms");
    return "Status of scope " + s.scope() + " on " + s.string("server_id") + ": "
        + s.leadership() + " for " + Math.max(0, age / 1000) + "s, " + health + ", " + pause
        + ", tracked " + s.tracked() + ", due " + s.due() + ", in flight " + s.inflight()
        + ", retries " + s.number("retries") + ", " + failure + "; status " + s.json();
  }

  private List<ScopeStatus> scopes() {
    return ScopeStatus.parseAll(sweeper.statusAll());
  }

  @Override
  public Object getAttribute(String attribute) throws AttributeNotFoundException {
    switch (attribute) {
      case "ServerId":
        return sweeper.serverId();
      case "StatusJson":
        return sweeper.statusAll();
      case "Scopes":
        List<String> names = new ArrayList<>();
        for (ScopeStatus s : scopes()) {
          names.add(s.scope());
        }
        return names.toArray(new String[0]);
      default:
        for (ScopeStatus s : scopes()) {
          if (attribute.equals(s.scope())) {
            return s.json();
          }
        }
        throw new AttributeNotFoundException("no scope " + attribute + " on " + sweeper.serverId());
    }
  }

  @Override
  public AttributeList getAttributes(String[] attributes) {
    AttributeList out = new AttributeList();
    for (String a : attributes) {
      try {
        out.add(new Attribute(a, getAttribute(a)));
      } catch (Exception ignored) {
        // JMX: attributes that cannot be read are left out.
      }
    }
    return out;
  }

  @Override
  public void setAttribute(Attribute attribute) throws AttributeNotFoundException {
    throw new AttributeNotFoundException(attribute.getName() + " is read only");
  }

  @Override
  public AttributeList setAttributes(AttributeList attributes) {
    return new AttributeList();
  }

  @Override
  public Object invoke(String action, Object[] params, String[] signature)
      throws ReflectionException {
    if ("logStatus".equals(action)) {
      logStatus();
      return null;
    }
    throw new ReflectionException(
        new NoSuchMethodException(action), "no operation " + action + " (logStatus is)");
  }

  @Override
  public MBeanInfo getMBeanInfo() {
    List<MBeanAttributeInfo> attrs = new ArrayList<>();
    attrs.add(new MBeanAttributeInfo("ServerId", "java.lang.String",
        "this server's id in the elections", true, false, false));
    attrs.add(new MBeanAttributeInfo("Scopes", "[Ljava.lang.String;",
        "the scopes this server serves (context:namespace)", true, false, false));
    attrs.add(new MBeanAttributeInfo("StatusJson", "java.lang.String",
        "every scope's status, a JSON array (PodSweeper.statusAll)", true, false, false));
    try {
      for (ScopeStatus s : scopes()) {
        attrs.add(new MBeanAttributeInfo(s.scope(), "java.lang.String",
            "status of scope " + s.scope() + " (JSON): leadership, health, pauses, due, retries,"
                + " last failure", true, false, false));
      }
    } catch (RuntimeException closed) {
      // Closed: the fixed attributes only.
    }
    MBeanOperationInfo log = new MBeanOperationInfo("logStatus",
        "writes one status line per scope to the log (logger " + LOGGER + ") now",
        new javax.management.MBeanParameterInfo[0], "void", MBeanOperationInfo.ACTION);
    return new MBeanInfo(PodSweeperStatus.class.getName(),
        "podsweep's status of every scope of one server",
        attrs.toArray(new MBeanAttributeInfo[0]), null,
        new MBeanOperationInfo[] {log}, null);
  }

}
