package org.podsweep.consumer;

import java.util.HashMap;
import java.util.Map;
import org.podsweep.BuildInfo;
import org.podsweep.NativeLoader;
import org.podsweep.PodEvent;
import org.podsweep.PodSweeper;

/** Starts podsweep in local mode (cleanup kind NONE: no election, no DELETE) and observes one pod. */
public final class ObserveOnce {
  private ObserveOnce() {}

  public static void main(String[] args) {
    Map<String, String> conf = new HashMap<>();
    conf.put("kyuubi.kubernetes.master.address", "http://127.0.0.1:9");
    conf.put("kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind", "NONE");
    try (PodSweeper sweeper = PodSweeper.create(conf, "maven-consumer:1")) {
      sweeper.observe(null, "ns", PodEvent.ADD, "tag", "pod-1", "uid-1", "RUNNING", true, 0L, false);
      System.out.println("status=" + sweeper.scopeStatus(null, "ns"));
    }
    System.out.println("jar=" + BuildInfo.jar());
    System.out.println("loaded-from=" + NativeLoader.loadedFrom());
    System.out.println("os.arch=" + System.getProperty("os.arch"));
    System.out.println("observe-ok");
  }
}
