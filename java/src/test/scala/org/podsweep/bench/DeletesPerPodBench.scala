package org.podsweep.bench

import java.util.concurrent.{Callable, Executors}

import scala.collection.immutable.ListMap

import org.apache.curator.test.TestingServer
import org.podsweep.demo.Phases
import org.podsweep.testkit.ZooKeeperBackend

/**
 * `deletes_per_pod`: DELETE requests per terminated driver pod that reach the API server, for N
 * servers on one scope, podsweep vs the baseline, kind ALL. The API server is a real kube-apiserver
 * (scripts/kube) and the DELETEs are counted from its audit log, each attributed to the sender's
 * own ServiceAccount; `PODSWEEP_BENCH_API=mock` runs on the fabric8 mock instead (its request log),
 * as does a machine without kube-apiserver built ([[BenchApi]]). Each half of the line also gives
 * the servers' own count (`client_deletes`: stock Kyuubi's "Operation of delete pod" and "Failed to
 * delete pod" lines, podsweep's outcome counters). With Kyuubi 1.12.0 built (scripts/kyuubi) both
 * sides are Kyuubi's own KubernetesApplicationOperation, one JVM per server: N patched (leader
 * elected through ZooKeeper on a Curator TestingServer) and N stock; otherwise N LogicalServers vs
 * N BaselineKyuubiServers (a model). Same workload and judge as the demo ([[Phases]]); one
 * ZooKeeper and one API server for the whole bench, fresh namespaces per N and phase. One line per
 * N; `kind` in each half says what ran, `api_server` where.
 *
 * podsweep's DELETE rate limit is raised to 100/s (it changes when DELETEs go, not how many). The
 * phases of one N run one after the other with real Kyuubi, whose count depends on timing (how
 * DELETE events and the check threads interleave); the model's phases run side by side.
 */
object DeletesPerPodBench {
  def baselineNote(kind: String): String =
    if (kind == Phases.StockKind)
      "baseline is Kyuubi 1.12.0's own KubernetesApplicationOperation (stock, built from the source release), " +
        "one JVM per server, check interval 1 s"
    else
      "baseline is BaselineKyuubiServer, a model of Kyuubi's per-server cleanup (Guava cache, check thread, " +
        "delete by name), because Kyuubi 1.12.0 is not built here (scripts/kyuubi)"

  def run(smoke: Boolean): Unit = {
    // The smoke pass: N = 2 only (a leader and a follower; stock Kyuubi's duplicates), to keep CI short.
    val sizes = if (smoke) Seq(2) else Seq(1, 2, 3, 5, 8)
    val pods = if (smoke) 20 else 200
    val retainMs = 2000L
    val P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
    // A higher DELETE rate than the default 10/s keeps a 200-pod run short; it does not change
    // who sends the DELETEs or how many.
    val qps = 100
    val choice = BenchApi.choose("deletes_per_pod", fallback = "mock")
    val apis = new BenchApi.Pool(choice, shared = true)
    val ha = new ZooKeeperBackend(new TestingServer(true), sessionTimeoutMs = 6000)
    try apis.use { kube =>
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
          quietMs = if (Phases.baselineKind(Phases.Spec(1, 1, 1, retainMs))._1 == Phases.StockKind) None else Some(1500L),
          logDir = java.nio.file.Paths.get("target", "kyuubi-logs", "deletes_per_pod"),
          progress = m => BenchOut.progress(s"deletes_per_pod N=$n: $m"))
        val (p, b) = if (Phases.baselineKind(spec)._1 == Phases.StockKind) {
          val b = Phases.baseline(spec, kube, admin)
          (Phases.podsweep(spec, kube, admin, ha), b)
        } else {
          val pool = Executors.newFixedThreadPool(2)
          try {
            val baseline = pool.submit(new Callable[Phases.PhaseResult] {
              override def call(): Phases.PhaseResult = Phases.baseline(spec, kube, admin)
            })
            (Phases.podsweep(spec, kube, admin, ha), baseline.get())
          } finally pool.shutdownNow()
        }
        val seconds = (System.nanoTime() - t0) / 1e9
        BenchOut.line("deletes_per_pod", (Seq(
          "servers" -> n,
          "scopes" -> 1,
          "pods" -> pods,
          "retain_ms" -> retainMs) ++
          apis.fields(kube) ++ Seq(
          "podsweep" -> ListMap(
            "kind" -> p.kind,
            "backend" -> ha.name,
            "rate_limit_qps" -> qps,
            "delete_requests" -> p.requests,
            "client_deletes" -> p.clientDeletes,
            "deletes_per_pod" -> p.perPod,
            "pods_deleted_twice" -> p.duplicates,
            "leaked" -> p.leaked,
            "wrongful" -> p.wrongful,
            "not_found_404" -> p.code(404),
            "other_codes" -> p.otherCodes,
            "warn_error_lines" -> p.loudLines,
            "seconds" -> p.seconds),
          "baseline" -> ListMap(
            "kind" -> b.kind,
            "delete_requests" -> b.requests,
            "client_deletes" -> b.clientDeletes,
            "deletes_per_pod" -> b.perPod,
            "not_found_404" -> b.code(404),
            "other_codes" -> b.otherCodes,
            "warn_lines" -> b.loudLines,
            "failed_to_delete_lines" -> b.failedToDelete,
            "leaked" -> b.leaked,
            "wrongful" -> b.wrongful,
            "seconds" -> b.seconds),
          "seconds" -> seconds,
          "baseline_note" -> baselineNote(b.kind))): _*)
      } finally admin.close()
    } finally {
      ha.close()
      apis.close()
    }
  }
}
