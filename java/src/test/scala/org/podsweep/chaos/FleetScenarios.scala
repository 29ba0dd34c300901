package org.podsweep.chaos

import java.nio.file.{Files, Path}

import scala.collection.mutable

import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.chaos.Chaos.Outcome
import org.podsweep.demo.Phases
import org.podsweep.demo.Phases.{PhaseResult, PodRef, Spec}
import org.podsweep.realapi.RealApi
import org.podsweep.testkit.{ApiFault, HaBackend, KyuubiHome, KyuubiServer, PodsApi, PodsApiServer, RealKube, TestApi}
import org.scalatest.{Args, Reporter}
import org.scalatest.events.{Event, TestFailed, TestSucceeded}

/**
 * Chaos scenarios of whole fleets: Kyuubi 1.12.0's own class in one JVM per server (patched,
 * and stock where the scenario says so), real ZooKeeper / etcd, and as the API server [[PodsApi]]
 * (faults injected at will) or a real kube-apiserver ([[RealKube]]: the faults a real control
 * plane can be driven into), as each scenario says.
 */
object FleetScenarios {
  private lazy val logDir: Path = {
    val d = java.nio.file.Paths.get("target", "kyuubi-logs", "chaos").toAbsolutePath
    Files.createDirectories(d)
    d
  }

  private def progress(s: String): Unit = Chaos.progress(s)

  /** Both HA backends in a full run; ZooKeeper alone in the smoke pass (the full run covers etcd). */
  private def backends(smoke: Boolean): Seq[String] = if (smoke) Seq("zookeeper") else HaBackend.Names

  private def need(kind: KyuubiHome.Kind): Unit =
    KyuubiHome.missing(kind).foreach(w => throw new IllegalStateException(s"${kind.label} cannot run here: $w"))

  /** The common fields of a phase: pods, requests, duplicates, leaked, wrongful. */
  private def outcome(backend: String, r: PhaseResult, withinBound: Boolean, fields: Seq[(String, Any)],
      broken: Seq[String] = Nil, crashes: Int = 0): Outcome =
    Outcome(backend, r.pods, r.requests, r.duplicates, withinBound, r.leaked, r.wrongful + r.decoysMissing, crashes,
      Seq("kind" -> r.kind, "per_pod" -> r.perPod, "answered_404" -> r.code(404), "warn_error_lines" -> r.loudLines) ++ fields,
      broken)

  // -----------------------------------------------------------------------------------------------
  // mixed_fleet

  /**
   * Two patched servers and one stock Kyuubi 1.12.0 server (its own cleanup on, kind ALL) on one
   * namespace, as in a rolling upgrade: the stock server deletes every pod after its retain period
   * and deletes again when its cache is re-armed; podsweep's leader deletes once per pod unless the
   * stock server got there first (its DELETE event cancels, or the answer is 404 "already absent").
   * Safety: 0 wrongful, 0 leaked, no podsweep pod deleted twice by podsweep, and no WARN/ERROR line
   * from the patched servers about the stock server's DELETEs.
   */
  def mixedFleet(smoke: Boolean): Seq[Outcome] = {
    need(KyuubiHome.Patched)
    need(KyuubiHome.Stock)
    backends(smoke).flatMap { backend =>
      val ha = HaBackend.start(backend)
      val kube = TestApi.start("pods-api")
      val admin = kube.client("chaos-admin")
      val ns = s"mixed-$backend"
      val s = Spec(servers = 3, scopes = 1, pods = if (smoke) 30 else 300, retainMs = 2000, namespacePrefix = "",
        progress = m => progress(s"mixed_fleet $backend: $m"))
      val haConf = ha.kyuubiConf + ("kyuubi.ha.namespace" -> s"chaos-mixed-$backend")
      val dir = logDir.resolve(s"mixed-$backend-${System.currentTimeMillis()}")
      val servers = mutable.ArrayBuffer.empty[KyuubiServer]
      try {
        servers += new KyuubiServer("podsweep-1", KyuubiHome.Patched, KyuubiServer.conf("podsweep-1", kube, Seq(ns), s.retainMs) ++ haConf, dir)
        servers += new KyuubiServer("podsweep-2", KyuubiHome.Patched, KyuubiServer.conf("podsweep-2", kube, Seq(ns), s.retainMs) ++ haConf, dir)
        servers += new KyuubiServer("stock-1", KyuubiHome.Stock, KyuubiServer.conf("stock-1", kube, Seq(ns), s.retainMs), dir)
        val (drivers, decoys) = Phases.createPods(kube, admin, Seq(ns), s)
        val startedAt = System.currentTimeMillis()
        val w = Phases.terminate(admin, drivers, decoys, s.retainMs)
        Phases.settle(kube, Seq(ns), quietMs = s.quietKyuubi)(!w.drivers.exists(Phases.present(admin, Seq(ns))))
        val podsweepServers = servers.filter(_.kind == KyuubiHome.Patched)
        val r = Phases.judge("mixed fleet", "kyuubi-1.12.0+podsweep x2, kyuubi-1.12.0 x1", s, kube, admin, Seq(ns), w,
          Phases.loudLines(podsweepServers), startedAt)
        val byPodsweep = r.deletes.filter(d => d.bearer.exists(_.startsWith("podsweep-")))
        val podsweepTwice = byPodsweep.groupBy(_.pod).count(_._2.size > 1)
        val outcomes = podsweepServers.flatMap(_.status(ns).fields().get("outcomes") match {
          case m: java.util.Map[_, _] => scala.collection.JavaConverters.mapAsScalaMap(m).toSeq.map { case (k, v) => k.toString -> v.toString.toLong }
          case _ => Nil
        }).groupBy(_._1).map { case (k, v) => k -> v.map(_._2).sum }
        val crashes = servers.count(!_.alive)
        Seq(outcome(backend, r, withinBound = podsweepTwice == 0, crashes = crashes, fields = Seq(
          "api" -> kube.name,
          "stock_delete_requests" -> r.deletes.count(_.bearer.contains("stock-1")),
          "podsweep_delete_requests" -> byPodsweep.size,
          "podsweep_pods_deleted_twice" -> podsweepTwice,
          "podsweep_outcomes" -> outcomes,
          "stock_failed_to_delete_lines" -> servers.filter(_.kind == KyuubiHome.Stock).map(_.logLines("Failed to delete pod").size).sum),
          broken = if (r.loudLines > 0) Seq(s"${r.loudLines} WARN/ERROR lines in the podsweep servers' logs") else Nil))
      } finally {
        servers.foreach(x => scala.util.Try(x.close()))
        admin.close()
        kube.close()
        ha.close()
      }
    }
  }


  // -----------------------------------------------------------------------------------------------
  // graceful

  /**
   * Deletion rules for pods that still run (here because a sidecar runs while Kyuubi's `CONTAINER`
   * state source calls the driver terminated): a real kube-apiserver (the pod goes Terminating on
   * DELETE, a repeated DELETE answers 200, and it goes once the kubelet, here [[org.podsweep.testkit.NodeSim]]
   * 2 s later, confirms), [[PodsApi]] (the same rules, ours) and the fabric8 CRUD mock (every pod
   * goes at once): the seed scenarios (a)-(d) on the two fakes, then the demo's podsweep side
   * (patched Kyuubi) and the stock baseline on each server, with sidecar drivers.
   * Safety for podsweep: one DELETE per pod whatever the server does with it (the MODIFIED event
   * carrying `deletionTimestamp` cancels the schedule for good), 0 leaked, 0 wrongful.
   */
  def graceful(smoke: Boolean): Seq[Outcome] = {
    // The smoke pass runs the fleets on the real API server only; the seed scenarios run in
    // scripts/test anyway (CoordinationZooKeeperSuite, CoordinationOnPodsApiSuite).
    val apis = if (smoke) Seq("kube-apiserver") else TestApi.Names
    val seeds = (if (smoke) Nil else Seq("mock", "pods-api")).map { api =>
      val suite: org.scalatest.Suite =
        if (api == "mock") new org.podsweep.CoordinationZooKeeperSuite else new org.podsweep.CoordinationOnPodsApiSuite
      val (passed, failed) = runSuite(suite)
      Outcome("zookeeper", 0, 0, 0, duplicatesWithinBound = true, 0, 0, 0,
        Seq("api" -> api, "system" -> "seed scenarios (a)-(d), logical servers", "seeds_passed" -> passed, "seeds_failed" -> failed.size,
          "seeds_failures" -> failed),
        broken = failed.map(f => s"seed scenario failed: $f"))
    }
    val fleets = apis.flatMap { api =>
      val ha = HaBackend.start("zookeeper")
      val kube: TestApi = api match {
        case "mock" => TestApi.start("mock")
        case "pods-api" => new PodsApiServer(new PodsApi(kubeletConfirmMs = 2000))
        case _ =>
          val k = new RealKube(Files.createTempDirectory("podsweep-kube-graceful-"))
          k.startNodeSim(stopDelayMs = 2000)
          k
      }
      val admin = kube.client("chaos-admin")
      try {
        val s = Spec(servers = 3, scopes = 1, pods = if (smoke) 30 else 200, retainMs = 2000, sidecar = true,
          namespacePrefix = s"graceful-$api-", logDir = logDir, progress = m => progress(s"graceful $api: $m"))
        val p = Phases.podsweep(s, kube, admin, ha)
        val b = Phases.baseline(s, kube, admin)
        val one = p.stored.groupBy(_.pod).forall(_._2.size == 1)
        Seq(
          outcome("zookeeper", p, withinBound = one, Seq("api" -> kube.name, "system" -> "podsweep", "sidecar_drivers" -> true,
            "terminating_answers_200" -> p.code(200))),
          outcome("none", b, withinBound = true, Seq("api" -> kube.name, "system" -> "stock", "sidecar_drivers" -> true,
            "failed_to_delete_lines" -> b.failedToDelete)))
      } finally {
        admin.close()
        kube.close()
        ha.close()
      }
    }
    seeds ++ fleets
  }

  /** Runs a ScalaTest suite; (passed, names of failed tests). */
  private def runSuite(suite: org.scalatest.Suite): (Int, Seq[String]) = {
    val passed = new java.util.concurrent.atomic.AtomicInteger()
    val failed = new java.util.concurrent.ConcurrentLinkedQueue[String]()
    val reporter = new Reporter {
      override def apply(e: Event): Unit = e match {
        case _: TestSucceeded => passed.incrementAndGet()
        case f: TestFailed => failed.add(s"${f.testName}: ${f.message}")
        case _ =>
      }
    }
    suite.run(None, Args(reporter))
    (passed.get, scala.collection.JavaConverters.collectionAsScalaIterable(failed).toVector)
  }

  // -----------------------------------------------------------------------------------------------
  // api_storm

  /**
   * Three patched Kyuubi servers (ZooKeeper, then etcd) while the API server answers every pod
   * DELETE, window after window, with: 429 `Retry-After: 2`, 503, 500, 403 (then fixed), 401 (then
   * fixed), a reset connection, and slow answers (in the full run past podsweep's 30 s read
   * timeout), and drops every open watch between windows. Then it recovers. Safety: 0 leaked after
   * recovery, 0 wrongful, a pod deleted twice only after a request of it timed out (one per pod in
   * flight), and the logs summarise per scope: at most one WARN/ERROR line per failure class per
   * server per summary interval (`failures.summaryInterval`, here PT5S).
   */
  def apiStorm(smoke: Boolean): Seq[Outcome] = apiStormFake(smoke) ++ apiStormReal(smoke)

  private def apiStormFake(smoke: Boolean): Seq[Outcome] = {
    need(KyuubiHome.Patched)
    val windowMs = if (smoke) 3000L else 10000L
    val slowMs = if (smoke) 2000L else 35000L
    val storms: Seq[(String, Option[ApiFault])] = Seq(
      "throttled" -> Some(ApiFault.throttled(2)),
      "unavailable" -> Some(ApiFault.Unavailable),
      "internal_error" -> Some(ApiFault.InternalError),
      "forbidden" -> Some(ApiFault.Forbidden),
      "unauthorized" -> Some(ApiFault.Unauthorized),
      "reset" -> Some(ApiFault.Reset),
      "slow" -> Some(ApiFault.Slow(slowMs)))
    backends(smoke).flatMap { backend =>
      val ha = HaBackend.start(backend)
      val api = new PodsApi()
      val kube = new PodsApiServer(api)
      val admin = kube.client("chaos-admin")
      val ns = s"storm-$backend"
      val P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
      val summaryS = 5
      val conf = ha.kyuubiConf ++ Map(
        "kyuubi.ha.namespace" -> s"chaos-storm-$backend",
        P + "failures.summaryInterval" -> s"PT${summaryS}S",
        P + "forbidden.retryInterval" -> "PT2S",
        P + "retry.maxWait" -> "PT2S",
        // The storm must not look like a leader that cannot delete: no step-down during it.
        P + "ha.stepDownAfter" -> "PT10M")
      val spec = Spec(servers = 3, scopes = 1, pods = if (smoke) 40 else 200, retainMs = 1000, namespacePrefix = "",
        progress = m => progress(s"api_storm $backend: $m"))
      val dir = logDir.resolve(s"storm-$backend-${System.currentTimeMillis()}")
      val fleet = (1 to 3).map(i => s"server-$i").map(n =>
        new KyuubiServer(n, KyuubiHome.Patched, KyuubiServer.conf(n, kube, Seq(ns), spec.retainMs) ++ conf, dir))
      try {
        val (drivers, decoys) = Phases.createPods(kube, admin, Seq(ns), spec)
        val current = new java.util.concurrent.atomic.AtomicReference[Option[ApiFault]](None)
        api.onRequest = r => if (r.method == "DELETE" && r.pod.isDefined) current.get else None
        val stormStart = System.currentTimeMillis()
        current.set(storms.head._2)
        val startedAt = System.currentTimeMillis()
        val w = Phases.terminate(admin, drivers, decoys, spec.retainMs)
        val injected = mutable.LinkedHashMap.empty[String, Int]
        storms.foreach { case (name, fault) =>
          current.set(fault)
          val before = api.podDeletes(ns).size
          Thread.sleep(windowMs)
          injected(name) = api.podDeletes(ns).size - before
          api.dropWatches()
        }
        current.set(None)
        val stormMs = System.currentTimeMillis() - stormStart
        progress(s"api_storm $backend: storm over after ${stormMs / 1000} s; recovering")
        Phases.settle(kube, Seq(ns), quietMs = 3000)(!w.drivers.exists(Phases.present(admin, Seq(ns))))
        val r = Phases.judge("api storm", Phases.PatchedKind, spec, kube, admin, Seq(ns), w, Phases.loudLines(fleet), startedAt)
        // A pod whose DELETE reached the store twice is within the bound when one of its requests
        // was answered slowly: the client gave up waiting and the request was still served.
        val twice = r.stored.groupBy(_.pod).filter(_._2.size > 1).keys.flatten
        val slowPods = api.podDeletes(ns).filter(_.fault.exists(_.isInstanceOf[ApiFault.Slow])).flatMap(_.pod).toSet
        val within = twice.forall(p => slowPods.contains(p._2))
        val crashes = fleet.count(!_.alive)
        val classes = 6 // throttled, server_error, forbidden, other (401), transport, plus one spare for a late summary
        val bound = fleet.size * classes * (stormMs / 1000 / summaryS + 2).toInt
        Seq(outcome(backend, r, within, crashes = crashes, fields = Seq(
          "api" -> kube.name,
          "storm_ms" -> stormMs,
          "window_ms" -> windowMs,
          "slow_answer_ms" -> slowMs,
          "requests_per_window" -> injected,
          "watches_dropped" -> storms.size,
          "loud_lines_bound" -> bound),
          broken = if (r.loudLines > bound) Seq(s"${r.loudLines} WARN/ERROR lines, more than the per-scope summary bound $bound") else Nil))
      } finally {
        fleet.foreach(x => scala.util.Try(x.close()))
        admin.close()
        kube.close()
        ha.close()
      }
    }
  }

  /**
   * The storm a real kube-apiserver can be driven into, on three patched Kyuubi servers (ZooKeeper),
   * window after window while terminated pods fall due: `throttled` (API Priority and Fairness: a
   * priority level that admits one request at a time and rejects the rest with 429 `Retry-After:
   * 1`, for the servers' pod DELETEs), `forbidden` (the servers' role loses `delete pods`, then gets
   * it back), `frozen` (kube-apiserver stopped with SIGSTOP: requests hang, then it resumes),
   * `restart` (kube-apiserver restarted: every connection and watch drops; for a moment after, its
   * authorizer and watch cache are not ready). Then it recovers. Counted from its audit log.
   * The control plane has no controller manager: a stand-in does the pod garbage collector's part
   * (a full-size run at 50f2c7b left one pod Terminating for good: its DELETE, held through the
   * freeze, stored the `deletionTimestamp` and then failed with 504 before removing the pod; on a
   * real cluster the collector removes such a pod). What it removed is reported
   * (`removed_by_pod_gc`).
   * Safety: 0 leaked after recovery, 0 wrongful, a pod deleted twice (two 200s: a real server
   * answers 200 to each of two DELETEs in flight together) only when one of its DELETEs was sent
   * during the freeze or the restart, when a client gives up on a request the server still serves.
   */
  private def apiStormReal(smoke: Boolean): Seq[Outcome] = {
    need(KyuubiHome.Patched)
    RealKube.missing.foreach(w => throw new IllegalStateException(s"no real API server: $w"))
    val windowMs = if (smoke) 3000L else 10000L
    val backend = "zookeeper"
    val ha = HaBackend.start(backend)
    val kube = new RealKube(Files.createTempDirectory("podsweep-kube-storm-"))
    val admin = kube.admin
    val ns = "storm-real"
    val P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
    val summaryS = 5
    val conf = ha.kyuubiConf ++ Map(
      "kyuubi.ha.namespace" -> "chaos-storm-real",
      P + "failures.summaryInterval" -> s"PT${summaryS}S",
      P + "forbidden.retryInterval" -> "PT2S",
      P + "retry.maxWait" -> "PT2S",
      P + "ha.stepDownAfter" -> "PT10M")
    val spec = Spec(servers = 3, scopes = 1, pods = if (smoke) 40 else 200, retainMs = 1000, namespacePrefix = "",
      progress = m => progress(s"api_storm real: $m"))
    val dir = logDir.resolve(s"storm-real-${System.currentTimeMillis()}")
    val names = (1 to 3).map(i => s"server-$i")
    val fleet = names.map(n => new KyuubiServer(n, KyuubiHome.Patched, KyuubiServer.conf(n, kube, Seq(ns), spec.retainMs) ++ conf, dir))
    val windows = mutable.LinkedHashMap.empty[String, (Long, Long)]
    def window(name: String)(start: => Unit)(end: => Unit): Unit = {
      val from = System.currentTimeMillis()
      start
      Thread.sleep(windowMs)
      end
      windows(name) = (from, System.currentTimeMillis())
    }
    val podGc = kube.startNodeSim(stopDelayMs = 2000, podGc = true)
    try {
      val (drivers, decoys) = Phases.createPods(kube, admin, Seq(ns), spec)
      val startedAt = System.currentTimeMillis()
      val w = Phases.terminate(admin, drivers, decoys, spec.retainMs)
      val stormStart = System.currentTimeMillis()
      var throttle: Option[RealApi.Throttle] = None
      window("throttled") {
        throttle = Some(new RealApi.Throttle(kube, "podsweep-chaos-storm", names.map(RealKube.ServersNamespace -> _)))
      } { throttle.foreach(_.close()) }
      window("forbidden") {
        kube.setServersCanDelete(false)
      } { kube.setServersCanDelete(true) }
      window("frozen") {
        new ProcessBuilder("kill", "-STOP", kube.apiserverPid.toString).start().waitFor()
      } { new ProcessBuilder("kill", "-CONT", kube.apiserverPid.toString).start().waitFor() }
      window("restart")(kube.restart())(())
      val stormMs = System.currentTimeMillis() - stormStart
      progress(s"api_storm real: storm over after ${stormMs / 1000} s; recovering")
      Phases.settle(kube, Seq(ns), quietMs = 3000)(!w.drivers.exists(Phases.present(admin, Seq(ns))))
      val r = Phases.judge("api storm (real)", Phases.PatchedKind, spec, kube, admin, Seq(ns), w, Phases.loudLines(fleet), startedAt)
      val codes = r.deletes.groupBy(_.status).map { case (c, v) => c.toString -> v.size }
      // Two 200s for one pod: within the bound when one of its DELETEs reached the server while it
      // was frozen or restarting (a client that gave up on a request the server still served).
      val (frozenFrom, _) = windows("frozen")
      val (_, restartTo) = windows("restart")
      val twice = r.deletes.filter(_.status == 200).groupBy(_.pod).filter(_._2.size > 1)
      val within = twice.values.forall(_.exists(d => d.atMillis >= frozenFrom && d.atMillis <= restartTo + 30000))
      val crashes = fleet.count(!_.alive)
      val bound = fleet.size * 6 * (stormMs / 1000 / summaryS + 2).toInt
      Seq(outcome(backend, r, within, crashes = crashes, fields = Seq(
        "api" -> kube.name,
        "storm_ms" -> stormMs,
        "window_ms" -> windowMs,
        "windows" -> windows.keys.toSeq,
        "answers" -> codes,
        "removed_by_pod_gc" -> podGc.collected.get,
        "loud_lines_bound" -> bound),
        broken = if (r.loudLines > bound) Seq(s"${r.loudLines} WARN/ERROR lines, more than the per-scope summary bound $bound") else Nil))
    } finally {
      fleet.foreach(x => scala.util.Try(x.close()))
      kube.close()
      ha.close()
    }
  }
}
