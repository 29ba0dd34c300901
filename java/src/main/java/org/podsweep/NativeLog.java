package org.podsweep;

import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.logging.Level;

/**
 * Receives the native library's log records and forwards them to SLF4J.
 *
 * <p>A record from the Rust module {@code podsweep::deleter} goes to the logger
 * {@code org.podsweep.native.deleter}; a record from another crate, e.g. {@code kube_client::client},
 * goes to {@code org.podsweep.native.kube_client.client}. If SLF4J is not on the class path the
 * records go to {@code java.util.logging} under the same names.
 *
 * <p>Levels: 1 = ERROR, 2 = WARN, 3 = INFO, 4 = DEBUG, 5 = TRACE (values outside that range are
 * clamped). Listeners registered with {@link #addListener} see every record, whatever the logger's
 * level. Nothing here ever throws back into native code.
 */
public final class NativeLog {
  public static final int ERROR = 1;
  public static final int WARN = 2;
  public static final int INFO = 3;
  public static final int DEBUG = 4;
  public static final int TRACE = 5;

  /** Root of the logger names used for native records. */
  public static final String LOGGER_PREFIX = "org.podsweep.native";

  /** Observes native log records (tests, operators' audit hooks). */
  public interface Listener {
    /** Called on the native logging thread; keep it short. Exceptions are ignored. */
    void onLog(int level, String target, String message);
  }

  private static final CopyOnWriteArrayList<Listener> LISTENERS = new CopyOnWriteArrayList<>();
  private static final ConcurrentMap<String, Sink> SINKS = new ConcurrentHashMap<>();
  private static final boolean SLF4J = slf4jPresent();

  private NativeLog() {}

  public static void addListener(Listener listener) {
    if (listener == null) {
      throw new IllegalArgumentException("listener must not be null");
    }
    LISTENERS.addIfAbsent(listener);
  }

  public static void removeListener(Listener listener) {
    LISTENERS.remove(listener);
  }

  /** Called by the native library, possibly on a thread it attached itself. Never throws. */
  static void log(int level, String target, String message) {
    try {
      int lvl = Math.max(ERROR, Math.min(TRACE, level));
      String text = message == null ? "" : message;
      for (Listener listener : LISTENERS) {
        try {
          listener.onLog(lvl, target, text);
        } catch (Throwable ignored) {
          // A listener must not break logging or native code.
        }
      }
      sink(loggerName(target)).log(lvl, text);
    } catch (Throwable ignored) {
      // Never propagate into native code (not even an Error from a broken logging backend).
    }
  }

  /** A record of the Java side (e.g. the build check at load) to the logger {@code name}. */
  static void logJava(int level, String name, String message) {
    try {
      sink(name).log(Math.max(ERROR, Math.min(TRACE, level)), message == null ? "" : message);
    } catch (Throwable ignored) {
      // Logging must never break loading.
    }
  }

  /**
   * Called by the native library (on its log thread, at start and every few seconds): the most
   * verbose level the logger of {@code target} has enabled, 0 when it is off. The native side
   * drops records above it before formatting them, so a level that is off costs no JNI call.
   */
  static int levelOf(String target) {
    try {
      return sink(loggerName(target)).enabledLevel();
    } catch (Throwable t) {
      return INFO;
    }
  }

  private static Sink sink(String name) {
    Sink sink = SINKS.get(name);
    if (sink == null) {
      sink = SLF4J ? new Slf4jSink(name) : new JulSink(name);
      Sink previous = SINKS.putIfAbsent(name, sink);
      if (previous != null) {
        sink = previous;
      }
    }
    return sink;
  }

  /**
   * The logger name for a Rust target: the crate name {@code podsweep} is dropped, {@code ::}
   * becomes {@code .}, and the result is appended to {@value #LOGGER_PREFIX}.
   */
  static String loggerName(String target) {
    if (target == null) {
      return LOGGER_PREFIX;
    }
    String t = target.trim();
    if (t.equals("podsweep")) {
      return LOGGER_PREFIX;
    }
    if (t.startsWith("podsweep::")) {
      t = t.substring("podsweep::".length());
    }
    StringBuilder name = new StringBuilder(LOGGER_PREFIX);
    for (String part : t.split("::")) {
      String p = part.trim();
      if (!p.isEmpty()) {
        name.append('.').append(p.replace('.', '_'));
      }
    }
    return name.toString();
  }

  private static boolean slf4jPresent() {
    try {
      Class.forName("org.slf4j.LoggerFactory", false, NativeLog.class.getClassLoader());
      return true;
    } catch (Throwable t) {
      return false;
    }
  }

  private interface Sink {
    void log(int level, String message);

    /** The most verbose enabled level, 0 when off. */
    int enabledLevel();
  }

  /** Loaded only when SLF4J is present, so its absence never breaks class loading. */
  private static final class Slf4jSink implements Sink {
    private final org.slf4j.Logger logger;

    Slf4jSink(String name) {
      logger = org.slf4j.LoggerFactory.getLogger(name);
    }

    @Override
    public int enabledLevel() {
      if (logger.isTraceEnabled()) {
        return TRACE;
      }
      if (logger.isDebugEnabled()) {
        return DEBUG;
      }
      if (logger.isInfoEnabled()) {
        return INFO;
      }
      if (logger.isWarnEnabled()) {
        return WARN;
      }
      return logger.isErrorEnabled() ? ERROR : 0;
    }

    @Override
    public void log(int level, String message) {
      switch (level) {
        case ERROR:
          logger.error(message);
          break;
        case WARN:
          logger.warn(message);
          break;
        case INFO:
          logger.info(message);
          break;
        case DEBUG:
          logger.debug(message);
          break;
        default:
          logger.trace(message);
          break;
      }
    }
  }

  private static final class JulSink implements Sink {
    private final java.util.logging.Logger logger;

    JulSink(String name) {
      logger = java.util.logging.Logger.getLogger(name);
    }

    @Override
    public int enabledLevel() {
      if (logger.isLoggable(Level.FINEST)) {
        return TRACE;
      }
      if (logger.isLoggable(Level.FINE)) {
        return DEBUG;
      }
      if (logger.isLoggable(Level.INFO)) {
        return INFO;
      }
      if (logger.isLoggable(Level.WARNING)) {
        return WARN;
      }
      return logger.isLoggable(Level.SEVERE) ? ERROR : 0;
    }

    @Override
    public void log(int level, String message) {
      Level jul;
      switch (level) {
        case ERROR:
          jul = Level.SEVERE;
          break;
        case WARN:
          jul = Level.WARNING;
          break;
        case INFO:
          jul = Level.INFO;
          break;
        case DEBUG:
          jul = Level.FINE;
          break;
        default:
          jul = Level.FINEST;
          break;
      }
      logger.log(jul, message);
    }
  }
}
