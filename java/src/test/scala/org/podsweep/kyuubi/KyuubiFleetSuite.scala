package org.podsweep.kyuubi

import java.nio.file.{Files, Path}
import java.time.Instant
import java.time.temporal.ChronoUnit

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.demo.Phases
import org.podsweep.testkit.{HaBackend, KyuubiAppInfo, KyuubiHome, KyuubiPods, KyuubiServer, RealKube}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * Kyuubi 1.12.0's own `KubernetesApplicationOperation` on a real kube-apiserver ([[RealKube]], the
 * test JVM's shared one: each server with its own ServiceAccount token, DELETEs counted from the
 * API server's audit log), each server in its own JVM: the patched class (podsweep) against real
 * ZooKeeper and etcd, and the stock class as the baseline. Cancelled when Kyuubi is not built
 * (scripts/kyuubi patched) or kube-apiserver is not (scripts/kube build).
 */
class KyuubiFleetSuite extends AnyFunSuite with BeforeAndAfterAll {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(60, Seconds), Span(100, Millis))

  private lazy val kube: RealKube = RealKube.sharedInstance
  private lazy val admin: KubernetesClient = kube.admin
  private lazy val logDir: Path = Files.createTempDirectory("podsweep-kyuubi-fleet-")

  private def needKube(): Unit = RealKube.missing.foreach(why => cancel(why))
  private def needPatched(): Unit = { KyuubiHome.patchedMissing.foreach(why => cancel(why)); needKube() }
  private def needStock(): Unit = { KyuubiHome.stockMissing.foreach(why => cancel(why)); needKube() }

  private def create(ns: String, pod: Pod): Pod = kube.createPod(admin, ns, pod)

  private def spec(prefix: String): Phases.Spec =
    Phases.Spec(servers = 3, scopes = 1, pods = 30, retainMs = 2000, namespacePrefix = prefix,
      logDir = logDir, progress = m => info(m))

  for (backend <- HaBackend.Names) {
    test(s"three patched Kyuubi servers on one namespace ($backend): one DELETE per pod, no 404, no 'Failed to delete pod'") {
      needPatched()
      val ha = HaBackend.start(backend)
      // Terminated Kyuubi driver pods in a namespace no server watches: never anyone's to delete.
      val outside = s"fleet-$backend-outside"
      val strays = (0 until 3).map { i =>
        val p = create(outside, KyuubiPods.driver(s"stray-$i"))
        kube.admin.pods().inNamespace(outside)
          .resource(KyuubiPods.terminated(p, succeeded = true, Instant.now().minusSeconds(3600))).updateStatus()
      }
      // A terminated pod that is no Kyuubi driver (no labels) in a namespace the servers watch.
      val watched = spec(s"fleet-$backend-").namespaces("podsweep").head
      val plain = {
        val p = create(watched, new io.fabric8.kubernetes.api.model.PodBuilder(KyuubiPods.driver("plain-batch-job"))
          .editMetadata().withLabels(java.util.Collections.singletonMap("app", "batch")).endMetadata().build())
        kube.admin.pods().inNamespace(watched)
          .resource(KyuubiPods.terminated(p, succeeded = true, Instant.now().minusSeconds(3600))).updateStatus()
      }
      try {
        val r = Phases.podsweep(spec(s"fleet-$backend-"), kube, admin, ha)
        assert(r.kind == Phases.PatchedKind)
        assert(r.requests == r.pods, s"DELETE requests ${r.requests} for ${r.pods} pods")
        assert(r.code(200) == r.pods && r.code(404) == 0 && r.otherCodes == 0, r.deletes.map(_.status).groupBy(identity).mapValues(_.size))
        assert(r.duplicates == 0 && r.leaked == 0 && r.wrongful == 0 && r.decoysMissing == 0)
        assert(r.failedToDelete == 0, "'Failed to delete pod' lines in the patched servers' logs")
        assert(r.loudLines == 0, "WARN/ERROR lines in the patched servers' logs")
        assert(r.leaders.values.forall(l => l.nonEmpty && !l.contains(",")), r.leaders)
        // The API server's own count: exactly one DELETE per driver pod, each by the scope's leader.
        val audited = kube.allPodDeletes.filter(e => r.scopes.contains(e.namespace))
        assert(audited.size == r.pods && audited.groupBy(_.name).values.forall(_.size == 1), audited)
        assert(audited.forall(e => e.code == 200 && r.leaders.get(e.namespace).contains(e.identity)), audited)
        assert(r.clientDeletes.contains(r.pods.toLong), s"the servers counted ${r.clientDeletes} DELETEs")
        assert(kube.allPodDeletes.count(_.namespace == outside) == 0)
        assert(strays.forall(p => kube.pod(admin, outside, p.getMetadata.getName).isDefined))
        assert(kube.pod(admin, watched, plain.getMetadata.getName).isDefined, "a pod that is no Kyuubi driver was deleted")
      } finally ha.close()
    }
  }

  test("three stock Kyuubi servers on one namespace: the baseline (several DELETEs per pod, each extra one a 404 'Failed to delete pod')") {
    needStock()
    val r = Phases.baseline(spec("fleet-stock-"), kube, admin)
    assert(r.kind == Phases.StockKind)
    info(f"stock Kyuubi 1.12.0, 3 servers: ${r.perPod}%.2f DELETE requests per pod (${r.requests} for ${r.pods} pods, " +
      s"${r.code(404)} answered 404, ${r.failedToDelete} 'Failed to delete pod' lines)")
    assert(r.leaked == 0 && r.wrongful == 0 && r.decoysMissing == 0)
    // Every pod was deleted; a real API server answers 200 to each of two DELETEs of one pod that
    // overlap in flight, so a pod may have more than one 200 (the mocks answer the later one 404).
    val byPod = r.deletes.groupBy(_.pod)
    assert(byPod.size == r.pods && byPod.values.forall(_.exists(_.status == 200)))
    // Every server deletes every pod once, and the DELETE events arm the caches again: at least N+1.
    assert(r.perPod >= 4.0, f"${r.perPod}%.2f DELETEs per pod")
    assert(r.code(404) + r.code(200) == r.requests && r.failedToDelete == r.code(404))
    // Kyuubi's own log accounts for each request: "Operation of delete pod" for 200, "Failed" for 404.
    assert(r.clientDeletes.contains(r.requests.toLong), s"audit log ${r.requests}, Kyuubi's logs ${r.clientDeletes}")
  }

  test("a patched leader's stop() sends no DELETE; another server takes over on the old clock") {
    needPatched()
    val ha = HaBackend.start("zookeeper")
    val ns = "fleet-takeover"
    val retainMs = 10000L
    val servers = (1 to 3).map { i =>
      val name = s"server-$i"
      new KyuubiServer(name, KyuubiHome.Patched,
        KyuubiServer.conf(name, kube, Seq(ns), retainMs) ++ ha.kyuubiConf + ("kyuubi.ha.namespace" -> "kyuubi-takeover"),
        logDir)
    }
    try {
      val pods = (0 until 12).map(i => create(ns, KyuubiPods.driver(f"driver-$i%02d")))
      val leader = eventually(servers.filter(_.isLeader(ns)) match {
        case Seq(one) => one
        case other => fail(s"leaders: $other")
      })
      val at = Instant.now().truncatedTo(ChronoUnit.SECONDS)
      pods.foreach(p => admin.pods().inNamespace(ns).resource(KyuubiPods.terminated(p, succeeded = true, at)).updateStatus())
      val deadline = at.toEpochMilli + retainMs
      // Every server has seen the terminations before the leader stops.
      eventually(servers.foreach(s => assert(s.status(ns).tracked == pods.size, s.status(ns))))
      // The leader stops 6 s before the deadline (pacing: the successor must keep the old clock).
      Thread.sleep(math.max(0L, deadline - 6000L - System.currentTimeMillis()))
      val stopAt = System.currentTimeMillis()
      leader.stop()
      val successor = eventually(servers.filterNot(_ eq leader).filter(_.isLeader(ns)) match {
        case Seq(one) => one
        case other => fail(s"leaders after stop: $other")
      })
      eventually(timeout(Span(retainMs + 20000, Millis)))(assert(admin.pods().inNamespace(ns).list().getItems.isEmpty))
      // Every server still running has taken each pod's end (its DELETE event cancels a
      // follower's record) and holds nothing: no DELETE can follow.
      val running = servers.filterNot(_ eq leader)
      eventually(running.foreach { s =>
        val st = s.status(ns)
        assert(st.tracked == 0 && st.inflight == 0 && st.number("queued") == 0, s"${s.name}: $st")
      })
      val deletes = kube.podDeletes(ns)
      assert(!deletes.exists(_.bearer.contains(leader.name)), "the stopped leader sent DELETEs")
      assert(deletes.size == pods.size && deletes.forall(_.status == 200), deletes)
      assert(deletes.forall(_.bearer.contains(successor.name)))
      // The old clock: nothing before the deadline, and not one retain period after the takeover.
      assert(deletes.forall(d => d.atMillis >= deadline && d.atMillis < stopAt + retainMs - 2000),
        s"deadline $deadline, stop at $stopAt, DELETEs at ${deletes.map(_.atMillis).sorted}")
    } finally {
      servers.foreach(s => scala.util.Try(s.close()))
      ha.close()
    }
  }

  /** Creates `n` driver pods in `ns`, terminates them (Succeeded) and returns their names. */
  private def terminatedDrivers(ns: String, n: Int): Seq[String] = {
    val pods = (0 until n).map(i => create(ns, KyuubiPods.driver(f"driver-$i%02d")))
    val at = Instant.now().truncatedTo(ChronoUnit.SECONDS)
    pods.foreach(p => admin.pods().inNamespace(ns).resource(KyuubiPods.terminated(p, succeeded = true, at)).updateStatus())
    pods.map(_.getMetadata.getName)
  }

  test("a whole patched Kyuubi server with its private embedded ZooKeeper: podsweep cleans locally, with a WARN") {
    needPatched()
    val ns = "fleet-embedded"
    val dir = logDir.resolve("embedded")
    Files.createDirectories(dir)
    // No kyuubi.ha.addresses: KyuubiServer.startServer starts its embedded ZooKeeper.
    val conf = KyuubiServer.conf("embedded", kube, Seq(ns), 2000) ++ Map(
      "kyuubi.frontend.bind.host" -> "127.0.0.1",
      "kyuubi.frontend.thrift.binary.bind.port" -> "0",
      "kyuubi.metadata.store.jdbc.url" -> s"jdbc:sqlite:$dir/metadata.db",
      "kyuubi.zookeeper.embedded.client.port" -> "0",
      "kyuubi.zookeeper.embedded.data.dir" -> s"$dir/zookeeper",
      "kyuubi.metrics.enabled" -> "false")
    val server = new KyuubiServer("embedded", KyuubiHome.Patched, conf, dir, heapMb = 512, mode = KyuubiHome.WholeServer)
    try {
      assert(server.serverId.isDefined, "podsweep did not start in the whole server")
      val names = terminatedDrivers(ns, 5)
      eventually(assert(server.status(ns).backend == "local", server.status(ns)))
      eventually(assert(admin.pods().inNamespace(ns).list().getItems.isEmpty))
      // The server holds nothing (every DELETE answered, nothing tracked or queued): no DELETE
      // can follow.
      eventually {
        val st = server.status(ns)
        assert(st.tracked == 0 && st.inflight == 0 && st.number("queued") == 0, st)
      }
      assert(kube.podDeletes(ns).map(_.pod.get._2).sorted == names.sorted, kube.podDeletes(ns))
      assert(server.log.exists(l => l.contains(" WARN ") && l.contains("embedded ZooKeeper")), "no WARN about the embedded ZooKeeper")
    } finally server.close()
  }

  test("a whole patched Kyuubi server on port 0: podsweep's identity is the port it bound; its gauges are in Kyuubi's Prometheus endpoint and JMX") {
    needPatched()
    val ns = "fleet-metrics"
    val dir = logDir.resolve("metrics")
    Files.createDirectories(dir)
    val ha = HaBackend.start("zookeeper")
    val prometheus = KyuubiFleetSuite.freePort()
    val conf = KyuubiServer.conf("metrics", kube, Seq(ns), 2000) ++ ha.kyuubiConf ++ Map(
      "kyuubi.ha.namespace" -> "kyuubi-metrics",
      "kyuubi.frontend.bind.host" -> "127.0.0.1",
      "kyuubi.frontend.thrift.binary.bind.port" -> "0",
      "kyuubi.metadata.store.jdbc.url" -> s"jdbc:sqlite:$dir/metadata.db",
      "kyuubi.metrics.enabled" -> "true",
      "kyuubi.metrics.reporters" -> "PROMETHEUS,JMX",
      "kyuubi.metrics.prometheus.port" -> prometheus.toString)
    val server = new KyuubiServer("metrics", KyuubiHome.Patched, conf, dir, heapMb = 512, mode = KyuubiHome.WholeServer)
    try {
      // The port Kyuubi bound, from its own log line.
      val Exposed = """.*exposing JDBC connection at: jdbc:hive2://metrics:(\d+)/.*""".r
      val bound = eventually(server.log.collectFirst { case Exposed(p) => p.toInt }.getOrElse(fail("no JDBC line yet")))
      assert(bound > 0)
      assert(server.logLines("podsweep started as metrics:0").nonEmpty, "podsweep did not start with a provisional id")
      val names = terminatedDrivers(ns, 3)
      eventually {
        val st = server.status(ns)
        assert(st.string("server_id") == s"metrics:$bound", st)
        assert(st.fields().get("server_id_confirmed") == java.lang.Boolean.TRUE, st)
      }
      eventually(assert(admin.pods().inNamespace(ns).list().getItems.isEmpty))
      // The leader in ZooKeeper is this server under its bound port.
      assert(server.logLines(s"podsweep's server id is metrics:$bound").nonEmpty)
      info(s"Kyuubi bound port $bound; podsweep started as metrics:0 and campaigned as metrics:$bound")
      val base = "kyuubi_kubernetes_cleanup_default_fleet_metrics"
      val scrape = eventually {
        val text = scala.io.Source.fromURL(s"http://127.0.0.1:$prometheus/metrics", "UTF-8").mkString
        assert(text.contains(s"$base" + "_leader 1.0"), text.linesIterator.filter(_.contains("cleanup")).mkString("\n"))
        assert(text.contains(s"$base" + "_deletes_accepted " + names.size + ".0"), text.linesIterator.filter(_.contains("deletes")).mkString("\n"))
        text
      }
      val ours = scrape.linesIterator.filter(_.contains("kyuubi_kubernetes_cleanup")).toVector
      info(s"Kyuubi's Prometheus endpoint, podsweep's lines (${ours.size}):\n" +
        ours.filter(l => l.startsWith(base + "_leader") || l.startsWith(base + "_deletes_") || l.startsWith(base + "_healthy") ||
          l.startsWith(base + "_tracked") || l.startsWith(base + "_lag_count")).mkString("\n"))
      // Kyuubi's own gauges come through the same endpoint.
      assert(scrape.contains("kyuubi_jvm") || scrape.contains("kyuubi_memory_usage"), "not Kyuubi's registry")
      // JMX reporter: Dropwizard's JmxReporter puts every gauge in domain "metrics".
      val beans = server.mbeans("metrics")
      assert(beans.exists(_.contains("name=kyuubi.kubernetes.cleanup.default.fleet_metrics.leader")), beans.filter(_.contains("cleanup")))
    } finally {
      server.close()
      ha.close()
    }
  }

  test("podsweep switched off (podsweep.enabled=false): the patched class cleans as stock Kyuubi does") {
    needPatched()
    val ns = "fleet-switched-off"
    val conf = KyuubiServer.conf("switched-off", kube, Seq(ns), 2000) +
      ("kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.podsweep.enabled" -> "false")
    val server = new KyuubiServer("switched-off", KyuubiHome.Patched, conf, logDir)
    try {
      assert(server.serverId.isEmpty && server.status().isEmpty, "podsweep runs although switched off")
      val names = terminatedDrivers(ns, 5)
      eventually(assert(admin.pods().inNamespace(ns).list().getItems.isEmpty))
      // Stock behaviour: the DELETE event arms the cache again, and one retain period later the
      // pod is deleted a second time (404, "Failed to delete pod").
      eventually(assert(kube.podDeletes(ns).count(_.status == 404) == names.size))
      assert(kube.podDeletes(ns).count(_.status == 200) == names.size)
      assert(server.logLines("Failed to delete pod").size == names.size)
      assert(server.logLines("podsweep is off").nonEmpty)
    } finally server.close()
  }

  /** A file that is not a shared library: loading it fails with an UnsatisfiedLinkError. */
  private def brokenLibrary(): String = {
    val f = logDir.resolve("broken-libpodsweep.so")
    Files.write(f, "not a shared library".getBytes("UTF-8"))
    f.toAbsolutePath.toString
  }

  test("a native library that does not load: the patched server starts, logs one WARN and cleans as stock Kyuubi does") {
    needPatched()
    val ns = "fleet-broken-native"
    val server = new KyuubiServer("broken-native", KyuubiHome.Patched,
      KyuubiServer.conf("broken-native", kube, Seq(ns), 2000), logDir, nativePath = Some(brokenLibrary()))
    try {
      assert(server.serverId.isEmpty && server.status().isEmpty, "podsweep runs although its library did not load")
      assert(server.log.count(l => l.contains(" WARN ") && l.contains("podsweep's native library did not load") &&
        l.contains("UnsatisfiedLinkError")) == 1, "no one WARN naming the failed load")
      val names = terminatedDrivers(ns, 3)
      eventually(assert(admin.pods().inNamespace(ns).list().getItems.isEmpty))
      assert(kube.podDeletes(ns).filter(_.status == 200).map(_.pod.get._2).sorted == names.sorted, kube.podDeletes(ns))
    } finally server.close()
  }

  test("a bad state source: podsweep refuses it before it makes a sweeper and names the key") {
    needPatched()
    val conf = KyuubiServer.conf("late-failure", kube, Seq("fleet-late-failure"), 2000) +
      ("kyuubi.kubernetes.application.state.source" -> "SIDECAR")
    val server = new KyuubiServer("late-failure", KyuubiHome.Patched, conf, logDir)
    try {
      assert(server.serverId.isEmpty, "podsweep runs although it failed to start")
      val refused = server.logLines("podsweep did not start")
      assert(refused.exists(_.contains("kyuubi.kubernetes.application.state.source")), server.log.mkString("\n"))
      // The engine checks the key before it makes anything: no sweeper was started (none to close).
      assert(server.logLines("started for server late-failure").isEmpty, server.log.mkString("\n"))
    } finally server.close()
  }

  test("getApplicationInfoByTag answers the same with and without the patch (running, finished, failed, deleted pods)") {
    needPatched()
    val retainMs = 3000L
    val roles = Seq("running", "finished", "failed", "deleted")
    // The same workload in two namespaces: one watched by a stock server, one by a patched one.
    def setup(kind: KyuubiHome.Kind, ns: String): (KyuubiServer, Map[String, Pod]) = {
      val name = if (kind == KyuubiHome.Stock) "answers-stock" else "answers-patched"
      val server = new KyuubiServer(name, kind, KyuubiServer.conf(name, kube, Seq(ns), retainMs), logDir)
      val pods = roles.map(r => r -> create(ns, KyuubiPods.driver(s"driver-$r", tag = s"$ns-$r"))).toMap
      (server, pods)
    }
    val (stock, stockPods) = setup(KyuubiHome.Stock, "answers-stock")
    val (patched, patchedPods) = setup(KyuubiHome.Patched, "answers-patched")
    def answers(s: KyuubiServer, ns: String): Map[String, KyuubiAppInfo] =
      roles.map(r => r -> s.appInfo(None, Some(ns), s"$ns-$r")).toMap
    // Compared field by field; the app id and name differ only by the tag each namespace's pods carry.
    def same(step: String, expected: Map[String, String]): Unit = eventually {
      val a = answers(stock, "answers-stock")
      val b = answers(patched, "answers-patched")
      roles.foreach { r =>
        assert(a(r).state == expected(r) && b(r).state == expected(r), s"$step/$r: stock ${a(r)}, patched ${b(r)}")
        assert(a(r).podName == b(r).podName, s"$step/$r: stock ${a(r)}, patched ${b(r)}")
        assert(a(r).id.map(_.take(6)) == b(r).id.map(_.take(6)) && a(r).name == b(r).name, s"$step/$r: stock ${a(r)}, patched ${b(r)}")
      }
    }
    try {
      same("created", roles.map(_ -> "RUNNING").toMap)
      val at = Instant.now().truncatedTo(ChronoUnit.SECONDS)
      Seq(("answers-stock", stockPods), ("answers-patched", patchedPods)).foreach { case (ns, pods) =>
        admin.pods().inNamespace(ns).resource(KyuubiPods.terminated(pods("finished"), succeeded = true, at)).updateStatus()
        admin.pods().inNamespace(ns).resource(KyuubiPods.terminated(pods("failed"), succeeded = false, at)).updateStatus()
        admin.pods().inNamespace(ns).withName("driver-deleted").delete()
      }
      same("terminated", Map("running" -> "RUNNING", "finished" -> "FINISHED", "failed" -> "FAILED", "deleted" -> "FAILED"))
      // Each cleaner deletes the finished and failed pods after the retain period.
      Seq("answers-stock", "answers-patched").foreach { ns =>
        eventually(assert(admin.pods().inNamespace(ns).list().getItems.asScala.map(_.getMetadata.getName) == Seq("driver-running")))
      }
      // The app info of a terminated pod lives until its retain-period entry expires; a DELETE event
      // that finds no entry arms another one. Between the DELETE and that expiry the two servers may
      // differ (podsweep deletes at finishedAt + retain, the stock cache one check interval after
      // its own entry expired); two retain periods later both have evicted everything. (A settling
      // time for a state that can hold for a moment and change again, not a wait for nothing to
      // happen: no event of Kyuubi's tells that its last entry expired.)
      Thread.sleep(2 * retainMs + 2000)
      same("evicted", Map("running" -> "RUNNING", "finished" -> "NOT_FOUND", "failed" -> "NOT_FOUND", "deleted" -> "NOT_FOUND"))
      assert(kube.podDeletes("answers-patched").forall(_.status == 200))
    } finally {
      stock.close()
      patched.close()
    }
  }
}

object KyuubiFleetSuite {
  /** A free TCP port on the loopback interface. */
  def freePort(): Int = {
    val socket = new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress)
    try socket.getLocalPort finally socket.close()
  }
}
