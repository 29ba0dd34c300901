package org.podsweep.kyuubi

import java.nio.file.{Files, Path}

import scala.collection.mutable

import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.demo.Phases
import org.podsweep.demo.Phases.Spec
import org.podsweep.testkit.{FleetServer, HaBackend, KyuubiHome, KyuubiServer, PodsApi, PodsApiServer, PodsweepDaemon}
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * Zero-patch adoption: podsweep watching pods itself, (1) as the drop-in provider inside stock
 * Kyuubi 1.12.0, loaded by Kyuubi's own `KyuubiApplicationManager`, and (2) as the standalone
 * daemon. The API server is [[PodsApi]] (kube-rs watches over HTTP, which the fabric8 mock does
 * not serve); ZooKeeper and etcd are real. Pod watches are told apart by user agent: podsweep's
 * kube-rs client (`podsweep/<version>`) from Kyuubi's fabric8 informers (`fabric8`...).
 */
class ZeroPatchSuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(60, Seconds), Span(100, Millis))

  private lazy val logDir: Path = Files.createTempDirectory("podsweep-zero-patch-")
  private val P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
  /** podsweep's own watches (User-Agent podsweep/...), as opposed to Kyuubi's fabric8 informers. */
  private val PodsweepAgent = "podsweep/"

  private def needDropin(): Unit = KyuubiHome.dropinMissing.foreach(w => cancel(w))
  private def needDaemon(): Unit = PodsweepDaemon.missing.foreach(w => cancel(w))

  /** Stock Kyuubi's own cleaner off (kind NONE); podsweep's self-watch kind ALL. */
  private def stockOff(ha: HaBackend, haNamespace: String): Map[String, String] =
    ha.kyuubiConf ++ Map("kyuubi.ha.namespace" -> haNamespace, P + "kind" -> "NONE", P + "watch.kind" -> "ALL")

  private def withFleet[T](backend: String)(f: (HaBackend, PodsApi, KubernetesClient) => T): T = {
    val ha = HaBackend.start(backend)
    val api = new PodsApi()
    val admin = api.client("suite-admin")
    try f(ha, api, admin) finally {
      admin.close()
      api.close()
      ha.close()
    }
  }

  /**
   * Terminates `pods` driver pods (plus decoys) in `ns`, waits until they are gone and `fleet` has
   * settled (a barrier pod, [[Phases.settleFleet]]: its one DELETE is not counted here), and
   * checks: one DELETE per pod, every one answered 200, no decoy touched, none early.
   */
  private val workloads = new java.util.concurrent.atomic.AtomicInteger()

  private def cleanOnce(api: PodsApi, admin: KubernetesClient, fleet: Seq[FleetServer], ns: String, pods: Int): Unit = {
    val kube = new PodsApiServer(api)
    val s = Spec(servers = 3, scopes = 1, pods = pods, retainMs = 2000, podPrefix = s"w${workloads.incrementAndGet()}-")
    val (drivers, decoys) = Phases.createPods(kube, admin, Seq(ns), s)
    val startedAt = System.currentTimeMillis()
    val w = Phases.terminate(admin, drivers, decoys, s.retainMs)
    Phases.settleFleet(kube, admin, fleet, Seq(ns), s.podPrefix)(!w.drivers.exists(Phases.present(admin, Seq(ns))))
    val r = Phases.judge("zero-patch", "self-watch", s, kube, admin, Seq(ns), w, 0, startedAt)
    assert(r.leaked == 0 && r.wrongful == 0 && r.decoysMissing == 0, r)
    val ours = r.deletes.filter(d => w.drivers.exists(ref => d.pod.contains((ref.namespace, ref.name))))
    assert(ours.size == pods && ours.forall(_.status == 200), s"${ours.size} DELETEs for $pods pods: ${ours.map(_.status)}")
  }

  /** The one server watching `ns` (eventually), checked across the fleet and at the API server. */
  private def oneWatcher(api: PodsApi, fleet: Seq[FleetServer], ns: String): FleetServer = eventually {
    val leaders = fleet.filter(_.isLeader(ns))
    assert(leaders.size == 1, s"leaders: $leaders")
    assert(fleet.count(s => s.status(ns).fields().get("watching") == true) == 1, fleet.map(_.status(ns)))
    assert(api.openWatches(PodsweepAgent) == 1, s"open podsweep watches: ${api.openWatches(PodsweepAgent)}")
    leaders.head
  }

  // ---------------------------------------------------------------------------------------------
  // The drop-in jar in stock Kyuubi 1.12.0

  test("Kyuubi's own KyuubiApplicationManager finds the drop-in on its class path and initializes it") {
    needDropin()
    withFleet("zookeeper") { (ha, api, _) =>
      val ns = "dropin-loading"
      val s = new KyuubiServer("loader", KyuubiHome.Dropin,
        KyuubiServer.conf("loader", new PodsApiServer(api), Seq(ns), 2000) ++ stockOff(ha, "kyuubi-dropin-loading"), logDir,
        mode = KyuubiHome.Manager)
      try {
        assert(s.operations.contains("org.podsweep.kyuubi.PodsweepCleanupOperation"), s.operations)
        assert(s.operations.contains("org.apache.kyuubi.engine.KubernetesApplicationOperation"), s.operations)
        assert(s.serverId.contains("loader:10009"))
        eventually(assert(s.isLeader(ns) && s.status(ns).fields().get("watching") == true, s.status(ns)))
        assert(s.logLines("podsweep drop-in started as loader:10009").nonEmpty)
      } finally s.close()
    }
  }

  for (backend <- HaBackend.Names) {
    test(s"three stock Kyuubi servers with the drop-in ($backend): one DELETE per pod with Kyuubi's cleaner at NONE, one podsweep watch") {
      needDropin()
      withFleet(backend) { (ha, api, admin) =>
        val ns = s"dropin-$backend"
        val fleet = (1 to 3).map { i =>
          new KyuubiServer(s"server-$i", KyuubiHome.Dropin,
            KyuubiServer.conf(s"server-$i", new PodsApiServer(api), Seq(ns), 2000) ++ stockOff(ha, s"kyuubi-dropin-$backend"),
            logDir, mode = KyuubiHome.Manager)
        }
        try {
          val leader = oneWatcher(api, fleet, ns)
          cleanOnce(api, admin, fleet, ns, pods = 30)
          assert(api.podDeletes(ns).forall(_.bearer.contains(leader.name)), "DELETEs by a server that does not lead")
          assert(api.podDeletes(ns).forall(_.userAgent.startsWith(PodsweepAgent)), "a DELETE by Kyuubi's own cleaner")
          // Kyuubi's informers still watch on every server (its app info and audit log need them).
          assert(api.openWatches("fabric8") == 3)
          // stop(): the leader hands over; the successor's own list and watch take the scope.
          leader.stop()
          val rest = fleet.filterNot(_ eq leader)
          val next = oneWatcher(api, rest, ns)
          assert(api.requests.exists(r => r.bearer.contains(next.name) && r.userAgent.startsWith(PodsweepAgent) && !r.watch &&
            r.method == "GET" && r.pod.isEmpty), "the successor listed the pods itself")
          cleanOnce(api, admin, rest, ns, pods = 10)
        } finally fleet.foreach(x => scala.util.Try(x.close()))
      }
    }
  }

  test("no HA backend and not said to run alone: the drop-in refuses, naming ha.singleServer, and Kyuubi cleans as without it") {
    needDropin()
    withFleet("zookeeper") { (_, api, admin) =>
      val ns = "dropin-no-ha"
      val conf = KyuubiServer.conf("no-ha", new PodsApiServer(api), Seq(ns), 2000) ++
        Map(P + "kind" -> "NONE", P + "watch.kind" -> "ALL")
      assert(!conf.keys.exists(_.startsWith("kyuubi.ha.")), conf)
      val s = new KyuubiServer("no-ha", KyuubiHome.Dropin, conf, logDir, mode = KyuubiHome.Manager)
      try {
        assert(s.serverId.isEmpty, "podsweep runs without an HA backend")
        assert(s.log.exists(l => l.contains(" ERROR ") && l.contains("podsweep drop-in did not start") &&
          l.contains(P + "ha.singleServer") && l.contains("kyuubi.ha.addresses") &&
          l.contains("cleans terminated driver pods locally")), s.log.mkString("\n"))
        // Kyuubi's own cleaner is NONE: the terminated pods go only because the drop-in fell back.
        val spec = Spec(servers = 1, scopes = 1, pods = 2, retainMs = 2000, podPrefix = "no-ha-")
        val (drivers, decoys) = Phases.createPods(new PodsApiServer(api), admin, Seq(ns), spec)
        val w = Phases.terminate(admin, drivers, decoys, spec.retainMs)
        eventually(assert(!w.drivers.exists(Phases.present(admin, Seq(ns)))))
        val ours = api.podDeletes(ns).filter(d => w.drivers.exists(ref => d.pod.contains(ref.name)))
        assert(ours.forall(d => !d.userAgent.startsWith(PodsweepAgent)), ours)
      } finally s.close()
    }
  }

  test("a native library that does not load: Kyuubi starts, the drop-in logs an ERROR and cleans locally") {
    needDropin()
    withFleet("zookeeper") { (ha, api, admin) =>
      val ns = "dropin-broken-native"
      val broken = logDir.resolve("broken-libpodsweep.so")
      Files.write(broken, "not a shared library".getBytes("UTF-8"))
      val s = new KyuubiServer("broken", KyuubiHome.Dropin,
        KyuubiServer.conf("broken", new PodsApiServer(api), Seq(ns), 2000) ++ stockOff(ha, "kyuubi-dropin-broken"), logDir,
        mode = KyuubiHome.Manager, nativePath = Some(broken.toAbsolutePath.toString))
      try {
        assert(s.operations.contains("org.podsweep.kyuubi.PodsweepCleanupOperation"), s.operations)
        assert(s.serverId.isEmpty, "podsweep runs although its library did not load")
        assert(s.log.exists(l => l.contains(" ERROR ") && l.contains("podsweep drop-in did not start") &&
          l.contains("UnsatisfiedLinkError") && l.contains("cleans terminated driver pods locally")), s.log.mkString("\n"))
        // Kyuubi's own cleaner is NONE: the terminated pods go only because the drop-in fell back.
        val spec = Spec(servers = 1, scopes = 1, pods = 4, retainMs = 2000, podPrefix = "broken-")
        val (drivers, decoys) = Phases.createPods(new PodsApiServer(api), admin, Seq(ns), spec)
        val w = Phases.terminate(admin, drivers, decoys, spec.retainMs)
        eventually(assert(!w.drivers.exists(Phases.present(admin, Seq(ns)))))
        val ours = api.podDeletes(ns).filter(d => w.drivers.exists(ref => d.pod.contains(ref.name)))
        assert(w.drivers.forall(ref => ours.exists(_.pod.contains(ref.name))), ours)
        assert(ours.forall(d => d.bearer.contains("broken") && !d.userAgent.startsWith(PodsweepAgent)), ours)
      } finally s.close()
    }
  }

  test("a whole stock Kyuubi server with its embedded ZooKeeper, said to run alone: the drop-in cleans locally") {
    needDropin()
    withFleet("zookeeper") { (_, api, admin) =>
      val ns = "dropin-embedded"
      val dir = logDir.resolve("dropin-embedded")
      Files.createDirectories(dir)
      val conf = KyuubiServer.conf("embedded", new PodsApiServer(api), Seq(ns), 2000) ++ Map(
        P + "kind" -> "NONE", P + "watch.kind" -> "ALL",
        // Its ZooKeeper is its own: self-watch mode runs without a shared HA backend only alone.
        P + "ha.singleServer" -> "true",
        "kyuubi.frontend.bind.host" -> "127.0.0.1",
        "kyuubi.frontend.thrift.binary.bind.port" -> "0",
        "kyuubi.metadata.store.jdbc.url" -> s"jdbc:sqlite:$dir/metadata.db",
        "kyuubi.zookeeper.embedded.client.port" -> "0",
        "kyuubi.zookeeper.embedded.data.dir" -> s"$dir/zookeeper",
        "kyuubi.metrics.enabled" -> "false")
      val s = new KyuubiServer("embedded", KyuubiHome.Dropin, conf, dir, heapMb = 512, mode = KyuubiHome.WholeServer)
      try {
        eventually(assert(s.status(ns).backend == "local", s.status(ns)))
        assert(s.log.exists(l => l.contains(" WARN ") && l.contains("embedded ZooKeeper")), "no WARN about the embedded ZooKeeper")
        cleanOnce(api, admin, Seq(s), ns, pods = 5)
      } finally s.close()
    }
  }

  test("a whole stock Kyuubi server with the drop-in on port 0: podsweep's identity is the port it bound; its gauges are in Kyuubi's Prometheus endpoint") {
    needDropin()
    withFleet("zookeeper") { (ha, api, admin) =>
      val ns = "dropin-metrics"
      val dir = logDir.resolve("dropin-metrics")
      Files.createDirectories(dir)
      val prometheus = KyuubiFleetSuite.freePort()
      val conf = KyuubiServer.conf("dropin-metrics", new PodsApiServer(api), Seq(ns), 2000) ++
        stockOff(ha, "kyuubi-dropin-metrics") ++ Map(
          "kyuubi.frontend.bind.host" -> "127.0.0.1",
          "kyuubi.frontend.thrift.binary.bind.port" -> "0",
          "kyuubi.metadata.store.jdbc.url" -> s"jdbc:sqlite:$dir/metadata.db",
          "kyuubi.metrics.enabled" -> "true",
          "kyuubi.metrics.reporters" -> "PROMETHEUS",
          "kyuubi.metrics.prometheus.port" -> prometheus.toString)
      val s = new KyuubiServer("dropin-metrics", KyuubiHome.Dropin, conf, dir, heapMb = 512, mode = KyuubiHome.WholeServer)
      try {
        val Exposed = """.*exposing JDBC connection at: jdbc:hive2://dropin-metrics:(\d+)/.*""".r
        val bound = eventually(s.log.collectFirst { case Exposed(p) => p.toInt }.getOrElse(fail("no JDBC line yet")))
        eventually {
          val st = s.status(ns)
          assert(st.string("server_id") == s"dropin-metrics:$bound", st)
          assert(st.fields().get("server_id_confirmed") == java.lang.Boolean.TRUE, st)
          assert(st.number("leader") == 1, st)
        }
        cleanOnce(api, admin, Seq(s), ns, pods = 3)
        val base = "kyuubi_kubernetes_cleanup_default_dropin_metrics"
        val scrape = eventually {
          val text = scala.io.Source.fromURL(s"http://127.0.0.1:$prometheus/metrics", "UTF-8").mkString
          // 3 driver pods and cleanOnce's barrier pod.
          assert(text.contains(base + "_leader 1.0") && text.contains(base + "_deletes_accepted 4.0"),
            text.linesIterator.filter(_.contains("cleanup")).mkString("\n"))
          text
        }
        info(scrape.linesIterator.filter(l => l.startsWith(base + "_leader") || l.startsWith(base + "_deletes_accepted") ||
          l.startsWith(base + "_watch")).mkString("\n"))
      } finally s.close()
    }
  }

  // ---------------------------------------------------------------------------------------------
  // The standalone daemon

  for (backend <- HaBackend.Names) {
    test(s"three daemons ($backend): one DELETE per pod, one pod watch per scope; SIGKILL of the leader, the successor lists afresh") {
      needDaemon()
      withFleet(backend) { (ha, api, admin) =>
        val nss = Seq(s"daemon-$backend-a", s"daemon-$backend-b")
        val conf = Map(
          "kyuubi.kubernetes.master.address" -> api.url,
          "kyuubi.kubernetes.client.initialize.list" -> nss.map(ns => s":$ns").mkString(","),
          P + "kind" -> "ALL",
          "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "PT2S",
          "kyuubi.ha.namespace" -> s"kyuubi-daemon-$backend") ++ ha.kyuubiConf
        val fleet = mutable.ArrayBuffer((1 to 3).map(i =>
          new PodsweepDaemon(s"daemon-$i", conf + ("kyuubi.kubernetes.authenticate.oauthToken" -> s"daemon-$i"), logDir)): _*)
        try {
          eventually {
            nss.foreach(ns => assert(fleet.count(_.isLeader(ns)) == 1))
            assert(api.openWatches(PodsweepAgent) == nss.size, s"open watches ${api.openWatches(PodsweepAgent)}")
          }
          nss.foreach(ns => cleanOnce(api, admin, fleet.toSeq, ns, pods = 15))
          assert(fleet.forall(_.get("/healthz")._1 == 200))
          val (mc, metrics) = fleet.head.get("/metrics")
          assert(mc == 200 && metrics.contains("podsweep_"), metrics.take(500))
          // SIGKILL the leader of the first scope while pods wait; the successor lists for itself.
          val victim = fleet.find(_.isLeader(nss.head)).get
          val s = Spec(servers = 3, scopes = 1, pods = 10, retainMs = 2000, podPrefix = "after-kill-")
          val (drivers, decoys) = Phases.createPods(new PodsApiServer(api), admin, Seq(nss.head), s)
          val w = Phases.terminate(admin, drivers, decoys, s.retainMs)
          val killedAt = System.currentTimeMillis()
          victim.kill()
          fleet -= victim
          val successor = eventually(timeout(Span(120, Seconds)))(fleet.find(_.isLeader(nss.head)).getOrElse(fail("no successor")))
          eventually(timeout(Span(120, Seconds)))(assert(!w.drivers.exists(Phases.present(admin, Seq(nss.head)))))
          assert(api.requests.exists(r => r.bearer.contains(successor.name) && r.method == "GET" && !r.watch &&
            r.pod.isEmpty && r.namespace == nss.head && r.atMillis > killedAt), "the successor did not list the scope's pods")
          val byPod = api.podDeletes(nss.head).filter(_.atMillis > killedAt).groupBy(_.pod)
          assert(byPod.size == 10 && byPod.values.forall(_.count(_.status == 200) == 1), byPod.mapValues(_.map(_.status)))
          eventually(assert(api.openWatches(PodsweepAgent) == nss.size))
        } finally fleet.foreach(x => scala.util.Try(x.close()))
      }
    }
  }

  test("the daemon: SIGTERM closes and exits 0 (the other daemon takes over), a bad key exits 2 naming it") {
    needDaemon()
    withFleet("zookeeper") { (ha, api, admin) =>
      val ns = "daemon-sigterm"
      val conf = Map(
        "kyuubi.kubernetes.master.address" -> api.url,
        "kyuubi.kubernetes.namespace" -> ns,
        P + "kind" -> "ALL",
        "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "PT2S",
        "kyuubi.ha.namespace" -> "kyuubi-daemon-sigterm") ++ ha.kyuubiConf
      val a = new PodsweepDaemon("daemon-a", conf, logDir)
      val b = new PodsweepDaemon("daemon-b", conf, logDir)
      try {
        val leader = eventually(Seq(a, b).find(_.isLeader(ns)).getOrElse(fail("no leader")))
        val other = if (leader eq a) b else a
        assert(leader.terminate() == 0)
        eventually(assert(other.isLeader(ns)))
        cleanOnce(api, admin, Seq(other), ns, pods = 5)
      } finally Seq(a, b).foreach(x => scala.util.Try(x.close()))
      val bad = PodsweepDaemon.binary.get
      val confFile = logDir.resolve("bad.conf")
      Files.write(confFile, "kyuubi.kubernetes.terminatedApplicationRetainPeriod -5\n".getBytes("UTF-8"))
      val p = new ProcessBuilder(bad.getAbsolutePath, "--config", confFile.toString, "--listen", "127.0.0.1:0")
        .redirectErrorStream(true).start()
      val out = scala.io.Source.fromInputStream(p.getInputStream, "UTF-8").mkString
      assert(p.waitFor() == 2, out)
      assert(out.contains("kyuubi.kubernetes.terminatedApplicationRetainPeriod"), out)
    }
  }

  // ---------------------------------------------------------------------------------------------
  // A migration: JNI and self-watch servers in one fleet

  test("a migrating fleet: a patched Kyuubi (JNI), a stock Kyuubi with the drop-in and a daemon share one election") {
    needDropin()
    needDaemon()
    KyuubiHome.patchedMissing.foreach(w => cancel(w))
    withFleet("zookeeper") { (ha, api, admin) =>
      val ns = "migration"
      val haNs = "kyuubi-migration"
      val patched = new KyuubiServer("patched", KyuubiHome.Patched,
        KyuubiServer.conf("patched", new PodsApiServer(api), Seq(ns), 2000) ++ ha.kyuubiConf + ("kyuubi.ha.namespace" -> haNs), logDir)
      val dropin = new KyuubiServer("dropin", KyuubiHome.Dropin,
        KyuubiServer.conf("dropin", new PodsApiServer(api), Seq(ns), 2000) ++ stockOff(ha, haNs), logDir, mode = KyuubiHome.Manager)
      val daemon = new PodsweepDaemon("daemon", Map(
        "kyuubi.kubernetes.master.address" -> api.url,
        "kyuubi.kubernetes.authenticate.oauthToken" -> "daemon",
        "kyuubi.kubernetes.namespace" -> ns,
        P + "kind" -> "ALL",
        "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "2000",
        "kyuubi.ha.namespace" -> haNs) ++ ha.kyuubiConf, logDir)
      val fleet = Seq[FleetServer](patched, dropin, daemon)
      try {
        // The patched server joins the election with the scope's first driver pod.
        admin.pods().inNamespace(ns).resource(org.podsweep.testkit.KyuubiPods.driver("warm-up")).create()
        eventually(assert(fleet.count(_.isLeader(ns)) == 1, fleet.map(f => f.name -> f.status(ns).leadership)))
        cleanOnce(api, admin, fleet, ns, pods = 20)
        // Hand the scope from one kind to the next: each leader stops in turn.
        val first = fleet.find(_.isLeader(ns)).get
        first.stop()
        val rest = fleet.filterNot(_ eq first)
        eventually(assert(rest.count(_.isLeader(ns)) == 1))
        cleanOnce(api, admin, rest, ns, pods = 10)
      } finally fleet.foreach(x => scala.util.Try(x.close()))
    }
  }
}
