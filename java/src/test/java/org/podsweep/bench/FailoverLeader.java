package org.podsweep.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import org.podsweep.PodEvent;
import org.podsweep.PodSweeper;

/**
 * The leader process of the failover bench (a JVM of its own, started by {@code FailoverBench}).
 *
 * <p>Usage: {@code FailoverLeader <server id> <namespace> <tag> <pod name> <pod uid> key=value...}
 * (the Kyuubi configuration). It creates a {@link PodSweeper}, observes the given running driver
 * pod in scope {@code (default context, namespace)} so the scope's election starts, prints {@code
 * leader} once it leads, and then reads stdin: {@code close} closes the sweeper, prints {@code
 * closed <ms the close took>} and exits 0; end of input exits 3 without closing. The parent may
 * instead kill it. Anything else it prints goes to stderr.
 */
public final class FailoverLeader {
  private FailoverLeader() {}

  public static void main(String[] args) throws Exception {
    PrintStream out = System.out;
    if (args.length < 5) {
      System.err.println("usage: FailoverLeader <server id> <namespace> <tag> <pod name> <pod uid> key=value...");
      System.exit(2);
    }
    String serverId = args[0];
    String namespace = args[1];
    Map<String, String> conf = new LinkedHashMap<>();
    for (int i = 5; i < args.length; i++) {
      int eq = args[i].indexOf('=');
      if (eq <= 0) {
        System.err.println("not key=value: " + args[i]);
        System.exit(2);
      }
      conf.put(args[i].substring(0, eq), args[i].substring(eq + 1));
    }
    PodSweeper sweeper = PodSweeper.create(conf, serverId);
    sweeper.observe(null, namespace, PodEvent.ADD, args[2], args[3], args[4], "RUNNING", true, 0L, false);
    long deadline = System.nanoTime() + 120_000_000_000L;
    while (!sweeper.isLeader(null, namespace)) {
      if (System.nanoTime() > deadline) {
        System.err.println("not leading after 120 s: " + sweeper.scopeStatus(null, namespace));
        System.exit(4);
      }
      Thread.sleep(2);
    }
    out.println("leader");
    out.flush();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    String line;
    while ((line = in.readLine()) != null) {
      if (line.trim().equals("close")) {
        long t0 = System.nanoTime();
        sweeper.close();
        out.println("closed " + (System.nanoTime() - t0) / 1_000_000.0);
        out.flush();
        System.exit(0);
      }
    }
    System.exit(3);
  }
}
