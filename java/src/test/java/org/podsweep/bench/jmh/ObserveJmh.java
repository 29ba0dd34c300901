package org.podsweep.bench.jmh;

import com.google.common.cache.Cache;
import com.google.common.cache.CacheBuilder;
import com.google.common.cache.RemovalListener;
import com.google.common.cache.RemovalNotification;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;
import org.openjdk.jmh.annotations.Threads;
import org.podsweep.PodEvent;
import org.podsweep.PodSweeper;
import org.podsweep.ScopeStatus;

/**
 * What an informer thread pays per pod event: {@code PodSweeper.observe} through JNI, next to the
 * Guava {@code Cache.put} Kyuubi does today for the same fact (expire-after-write = retain period,
 * a removal listener). Both cycle over the same {@link #FACTS} distinct terminated driver pods, one
 * thread. Run by {@code org.podsweep.bench.ObserveBench}. {@link #podsweepObserveRunning} is the
 * same call for running pods, which the engine does not pass on to a scope task: what JNI and the
 * argument conversion cost alone.
 *
 * <p>The sweeper runs in local mode (no HA keys) with a one-day retain period on pods that
 * terminated a minute ago, so nothing falls due; its API server address is a loopback socket that
 * counts connections. At the end of the trial a line {@code connections=<n> deletes_sent=<n>
 * tracked=<n> observed=<n>} is appended to the file named by the system property {@link
 * #REPORT_PROPERTY}, if set, so the caller can check that no HTTP happened.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
@Threads(1)
public class ObserveJmh {
  /** Distinct pod facts the benchmarks cycle over (a power of two). */
  public static final int FACTS = 65536;

  /** System property: file the sweeper trial appends its no-HTTP check line to. */
  public static final String REPORT_PROPERTY = "podsweep.bench.observe.report";

  public static final String NAMESPACE = "bench-observe";

  /** The retain period of both sides. */
  public static final long RETAIN_MS = TimeUnit.DAYS.toMillis(1);

  private static final String[] STATES = {"FINISHED", "FAILED", "KILLED"};

  /** The facts an informer would pass for {@link #FACTS} terminated Spark driver pods. */
  @State(Scope.Benchmark)
  public static class Facts {
    final String[] tags = new String[FACTS];
    final String[] names = new String[FACTS];
    final String[] uids = new String[FACTS];
    final String[] states = new String[FACTS];
    final long[] terminatedAt = new long[FACTS];

    @Setup(Level.Trial)
    public void build() {
      long base = System.currentTimeMillis() - 60_000L;
      for (int i = 0; i < FACTS; i++) {
        String tag = UUID.randomUUID().toString();
        tags[i] = tag;
        names[i] = "kyuubi-" + tag.substring(0, 8) + "-" + i + "-driver";
        uids[i] = UUID.randomUUID().toString();
        states[i] = STATES[i % STATES.length];
        terminatedAt[i] = base + i % 1000;
      }
    }
  }

  /** A local-mode sweeper whose API server is a connection-counting loopback socket. */
  @State(Scope.Thread)
  public static class Sweeper {
    PodSweeper sweeper;
    int next;
    private ServerSocket socket;
    private final AtomicInteger connections = new AtomicInteger();
    private long calls;
    /** Laps over the facts so far ({@link #podsweepObserveHandedOn} alternates per lap). */
    int laps;

    @Setup(Level.Trial)
    public void open() throws IOException {
      socket = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
      Thread acceptor = new Thread(this::accept, "observe-bench-api-server");
      acceptor.setDaemon(true);
      acceptor.start();
      Map<String, String> conf = new HashMap<>();
      conf.put("kyuubi.kubernetes.master.address", "http://127.0.0.1:" + socket.getLocalPort());
      conf.put("kyuubi.kubernetes.namespace", NAMESPACE);
      conf.put("kyuubi.kubernetes.authenticate.oauthToken", "observe-bench");
      conf.put("kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind", "ALL");
      conf.put("kyuubi.kubernetes.terminatedApplicationRetainPeriod", Long.toString(RETAIN_MS));
      sweeper = PodSweeper.create(conf, "observe-bench:10009");
    }

    private void accept() {
      while (!socket.isClosed()) {
        try {
          Socket s = socket.accept();
          connections.incrementAndGet();
          s.close();
        } catch (IOException e) {
          // closed at tear-down
        }
      }
    }

    @TearDown(Level.Trial)
    public void close() throws IOException {
      ScopeStatus status = ScopeStatus.parse(sweeper.scopeStatus(null, NAMESPACE));
      sweeper.close();
      socket.close();
      String path = System.getProperty(REPORT_PROPERTY);
      if (path != null && !path.isEmpty()) {
        try (Writer w = new OutputStreamWriter(new FileOutputStream(path, true), StandardCharsets.UTF_8)) {
          w.write("connections=" + connections.get() + " deletes_sent=" + status.deletesSent()
              + " tracked=" + status.tracked() + " due=" + status.due() + " observed=" + calls
              + " answered=" + status.number("observed_known") + "\n");
        }
      }
    }
  }

  /** Kyuubi's cleanup trigger: expire-after-write = retain period, with a removal listener. */
  @State(Scope.Thread)
  public static class GuavaCache {
    Cache<String, String> cache;
    int next;
    long removals;

    @Setup(Level.Trial)
    public void open() {
      RemovalListener<String, String> listener = (RemovalNotification<String, String> n) -> removals++;
      cache = CacheBuilder.newBuilder()
          .expireAfterWrite(RETAIN_MS, TimeUnit.MILLISECONDS)
          .removalListener(listener)
          .build();
    }
  }

  @Benchmark
  public void podsweepObserve(Facts f, Sweeper s) {
    int i = s.next;
    s.next = (i + 1) & (FACTS - 1);
    s.calls++;
    s.sweeper.observe(null, NAMESPACE, PodEvent.UPDATE, f.tags[i], f.names[i], f.uids[i], f.states[i],
        true, f.terminatedAt[i], false);
  }

  /**
   * The same call for a pod that is still running: JNI and argument conversion only, since the
   * engine hands only terminated or deleted pods on to the scope's task.
   */
  @Benchmark
  public void podsweepObserveRunning(Facts f, Sweeper s) {
    int i = s.next;
    s.next = (i + 1) & (FACTS - 1);
    s.calls++;
    s.sweeper.observe(null, NAMESPACE, PodEvent.UPDATE, f.tags[i], f.names[i], f.uids[i], "RUNNING",
        true, 0L, false);
  }

  /**
   * Every event is one the native side cannot answer on the caller's thread, so each is read in
   * full and handed on to the scope's task: the pods alternate lap by lap between FAILED and a
   * DELETE event (a DELETE is always handed on and makes the pod's next event new again). After
   * the first lap the task ignores them (the pods are tombstoned), so it logs nothing and keeps
   * up; what is measured is the informer thread's cost of an event handed on, as a pod's first
   * events are.
   */
  @Benchmark
  public void podsweepObserveHandedOn(Facts f, Sweeper s) {
    int i = s.next;
    s.next = (i + 1) & (FACTS - 1);
    if (s.next == 0) {
      s.laps++;
    }
    s.calls++;
    boolean deleted = (s.laps & 1) == 1;
    s.sweeper.observe(null, NAMESPACE, deleted ? PodEvent.DELETE : PodEvent.UPDATE, f.tags[i], f.names[i],
        f.uids[i], f.states[i], true, f.terminatedAt[i], false);
  }

  @Benchmark
  public void guavaCachePut(Facts f, GuavaCache c) {
    int i = c.next;
    c.next = (i + 1) & (FACTS - 1);
    c.cache.put(f.tags[i], f.states[i]);
  }
}
