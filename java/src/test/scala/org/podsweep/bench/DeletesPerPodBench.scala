package org.podsweep.bench

import java.util.concurrent.{Callable, Executors}

import scala.collection.immutable.ListMap

import org.apache.curator.test.TestingServer
import org.podsweep.demo.Phases
import org.podsweep.testkit.{MockKube, ZooKeeperBackend}

/**
 * `deletes_per_pod`: DELETE requests per terminated driver pod that reach the mock API server, for
 * N servers on one scope, podsweep (N LogicalServers, leader elected through ZooKeeper on a
 * Curator TestingServer) vs the baseline (N BaselineKyuubiServer, kind ALL, a model of today's
 * Kyuubi). Same workload and judge as the demo ([[Phases]]); one ZooKeeper and one mock API
 * server for the whole bench, fresh namespaces per N and phase. One line per N.
 *
 * To keep the bench near two minutes, the two phases of one N run side by side (their own
 * namespaces and servers; what is counted does not depend on timing), podsweep's DELETE rate
 * limit is raised to 100/s and a phase ends 1.5 s after the last DELETE once its pods are gone
 * (the baseline also waits for every server's cache to be empty, so its 404 round is counted).
 */
object DeletesPerPodBench {
  val BaselineNote: String =
    "baseline is BaselineKyuubiServer, a model of Kyuubi's per-server cleanup (Guava cache, check thread, " +
      "delete by name): org.apache.kyuubi:kyuubi-server_2.12 is not served by the Maven registry reachable " +
      "here (404 for 1.10.0-1.11.0)"

  def run(smoke: Boolean): Unit = {
    val sizes = if (smoke) Seq(1, 2) else Seq(1, 2, 3, 5, 8)
    val pods = if (smoke) 20 else 200
    val retainMs = 2000L
    val P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
    // A higher DELETE rate than the default 10/s keeps a 200-pod run short; it does not change
    // who sends the DELETEs or how many.
    val qps = 100
    val ha = new ZooKeeperBackend(new TestingServer(true), sessionTimeoutMs = 6000)
    try {
      val kube = new MockKube
      val admin = kube.client("bench-admin")
      try sizes.foreach { n =>
        val t0 = System.nanoTime()
        val spec = Phases.Spec(
          servers = n,
          scopes = 1,
          pods = pods,
          retainMs = retainMs,
          namespacePrefix = s"dpp-n$n-",
          sweeperConf = Map(P + "rateLimit.qps" -> qps.toString, P + "rateLimit.burst" -> qps.toString),
          quietMs = Some(1500L),
          progress = m => BenchOut.progress(s"deletes_per_pod N=$n: $m"))
        val pool = Executors.newFixedThreadPool(2)
        val (p, b) = try {
          val baseline = pool.submit(new Callable[Phases.PhaseResult] {
            override def call(): Phases.PhaseResult = Phases.baseline(spec, kube, admin)
          })
          (Phases.podsweep(spec, kube, admin, ha), baseline.get())
        } finally pool.shutdownNow()
        val seconds = (System.nanoTime() - t0) / 1e9
        BenchOut.line("deletes_per_pod",
          "servers" -> n,
          "scopes" -> 1,
          "pods" -> pods,
          "retain_ms" -> retainMs,
          "podsweep" -> ListMap(
            "backend" -> ha.name,
            "rate_limit_qps" -> qps,
            "delete_requests" -> p.requests,
            "deletes_per_pod" -> p.perPod,
            "pods_deleted_twice" -> p.duplicates,
            "leaked" -> p.leaked,
            "wrongful" -> p.wrongful,
            "not_found_404" -> p.code(404),
            "warn_error_lines" -> p.loudLines,
            "seconds" -> p.seconds),
          "baseline" -> ListMap(
            "kind" -> "model",
            "delete_requests" -> b.requests,
            "deletes_per_pod" -> b.perPod,
            "not_found_404" -> b.code(404),
            "warn_lines" -> b.loudLines,
            "leaked" -> b.leaked,
            "wrongful" -> b.wrongful,
            "seconds" -> b.seconds),
          "seconds" -> seconds,
          "baseline_note" -> BaselineNote)
      } finally {
        admin.close()
        kube.close()
      }
    } finally ha.close()
  }
}
