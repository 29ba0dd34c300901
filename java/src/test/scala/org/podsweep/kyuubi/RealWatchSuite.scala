package org.podsweep.kyuubi

import java.nio.file.{Files, Path}

import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.demo.Phases
import org.podsweep.demo.Phases.Spec
import org.podsweep.testkit.{FleetServer, HaBackend, KyuubiHome, KyuubiPods, KyuubiServer, PodsweepDaemon, RealKube}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * Real watches against a real kube-apiserver, and an etcd compaction in the middle of a run: the
 * drop-in and the daemon (podsweep's own kube-rs watch, on the leader only) and the patched
 * Kyuubi (Kyuubi's fabric8 informer feeding podsweep) each clean a first wave of pods; then etcd
 * is compacted and restarted, and every watch is refused (`410 Gone`, or `429` while the API
 * server's watch cache lists again) and lists again; a second wave
 * is then cleaned. Judged by the API server's audit log: each watcher's list after the compaction,
 * one DELETE per driver pod (no pod deleted twice, none leaked), no decoy touched.
 *
 * How the 410 comes about, as in a real control plane: objects are written after the API server's
 * watch cache last saw a pod, etcd is compacted at its current revision, and etcd restarts; the
 * watch cache resumes its etcd watch from a compacted revision, is refused, lists afresh and ends
 * every client watch; each client resumes from the version it last saw, which the new cache no
 * longer holds: `410 Gone` ("too old resource version"), or, while the cache is still listing,
 * `429` ("storage is (re)initializing"); either way the client lists again. The control
 * plane is a private one (its etcd restarts), with kube-apiserver's defaults.
 */
class RealWatchSuite extends AnyFunSuite with BeforeAndAfterAll {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(90, Seconds), Span(200, Millis))

  private var kubeOpt: Option[RealKube] = None
  private def kube: RealKube = kubeOpt.getOrElse {
    val k = new RealKube(Files.createTempDirectory("podsweep-kube-watch-"))
    kubeOpt = Some(k)
    k
  }
  private lazy val admin: KubernetesClient = kube.admin
  private lazy val logDir: Path = Files.createTempDirectory("podsweep-real-watch-")
  private val P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
  private val waves = new java.util.concurrent.atomic.AtomicInteger()

  override protected def afterAll(): Unit = try kubeOpt.foreach(_.close()) finally super.afterAll()

  private def needKube(): Unit = RealKube.missing.foreach(w => cancel(w))

  /**
   * Terminates `pods` driver pods (and decoys) in `ns` and checks, once `fleet` has settled (a
   * barrier pod, [[Phases.settleFleet]]): each deleted once, with 200.
   */
  private def wave(fleet: Seq[FleetServer], ns: String, pods: Int): Unit = {
    val s = Spec(servers = 2, scopes = 1, pods = pods, retainMs = 2000, podPrefix = s"w${waves.incrementAndGet()}-")
    val (drivers, decoys) = Phases.createPods(kube, admin, Seq(ns), s)
    val startedAt = System.currentTimeMillis()
    val w = Phases.terminate(admin, drivers, decoys, s.retainMs)
    Phases.settleFleet(kube, admin, fleet, Seq(ns), s.podPrefix)(!w.drivers.exists(Phases.present(admin, Seq(ns))))
    val r = Phases.judge("real-watch", "real-watch", s, kube, admin, Seq(ns), w, 0, startedAt)
    assert(r.leaked == 0 && r.wrongful == 0 && r.decoysMissing == 0, r)
    val ours = r.deletes.filter(d => w.drivers.exists(ref => d.pod.contains((ref.namespace, ref.name))))
    assert(ours.size == pods && ours.forall(_.status == 200), s"${ours.size} DELETEs for $pods pods: ${ours.map(_.status)}")
  }

  /**
   * Whether a log shows the watch refused after the compaction: `410 Gone` when it resumed from a
   * version the new watch cache does not hold, or `429` ("storage is (re)initializing") when it
   * resumed while the cache was still listing (kube-apiserver 1.34 answers so rather than wait).
   */
  private def refused(log: Seq[String]): Boolean =
    log.exists(l => l.contains("expired (410 Gone)") || (l.contains("Pod watch of scope") && l.contains("429")))

  /** Lists of pods in `ns` by `identity` (user agent prefix `agent`) after `sinceMillis`. */
  private def lists(ns: String, identity: String, agent: String, sinceMillis: Long): Int =
    kube.audit.count(e => e.stage == "ResponseComplete" && e.verb == "list" && e.resource == "pods" &&
      e.namespace == ns && e.identity == identity && e.userAgent.startsWith(agent) && e.atMillis >= sinceMillis)

  /**
   * Writes objects that are no pods (etcd's revision moves past the last pod event the watch cache
   * saw), compacts etcd at its current revision and restarts etcd. Returns the time of the compaction.
   */
  private def compact(): Long = {
    val churn = s"churn-${waves.incrementAndGet()}"
    kube.ensureNamespace(churn)
    (0 until 5).foreach { i =>
      admin.configMaps().inNamespace(churn).resource(new io.fabric8.kubernetes.api.model.ConfigMapBuilder()
        .withNewMetadata().withName(s"churn-$i").endMetadata().addToData("i", i.toString).build()).create()
    }
    val at = System.currentTimeMillis()
    val rev = kube.compactEtcd()
    kube.restart("etcd")
    info(s"etcd compacted at revision $rev and restarted")
    at
  }

  /**
   * The scenario for one fleet watching `ns`: a wave, the compaction, the leader's (and, with
   * `informers`, every Kyuubi informer's) list after it, a second wave.
   */
  private def survivesCompaction(fleet: Seq[FleetServer], ns: String, podsweepAgent: Boolean, informers: Boolean): Unit = {
    val leader = eventually(fleet.filter(_.isLeader(ns)) match {
      case Seq(one) => one
      case other => fail(s"leaders: ${other.map(_.name)}")
    })
    wave(fleet, ns, pods = 12)
    val compactedAt = compact()
    // Each watch is ended by the API server, resumes, is refused (410 or 429) and lists again.
    if (podsweepAgent) eventually(timeout(Span(60, Seconds))) {
      assert(lists(ns, leader.name, "podsweep/", compactedAt) >= 1, s"${leader.name}'s podsweep watch did not list again")
    }
    if (informers) eventually(timeout(Span(60, Seconds))) {
      fleet.foreach(s => assert(lists(ns, s.name, "fabric8", compactedAt) >= 1, s"${s.name}'s informer did not list again"))
    }
    fleet.foreach(s => assert(s.problems.isEmpty, s"${s.name}: ${s.problems.take(3)}"))
    wave(fleet, ns, pods = 12)
    // Every DELETE of the run came from the one leader (no second leader, no stale watcher).
    assert(kube.podDeletes(ns).forall(_.bearer.contains(leader.name)), kube.podDeletes(ns).map(_.bearer).distinct)
  }

  test("the drop-in in stock Kyuubi: an etcd compaction ends its pod watch (410, or 429 while the cache relists); it lists again and loses nothing") {
    needKube()
    KyuubiHome.dropinMissing.foreach(w => cancel(w))
    val ha = HaBackend.start("zookeeper")
    val ns = "watch-dropin"
    // The namespace exists before its servers start, as in a cluster (its kube-root-ca.crt names
    // the cluster the election is keyed by; a server that cannot read it holds the scope).
    kube.ensureNamespace(ns)
    val conf = (name: String) => KyuubiServer.conf(name, kube, Seq(ns), 2000) ++ ha.kyuubiConf ++
      Map("kyuubi.ha.namespace" -> "kyuubi-real-watch-dropin", P + "kind" -> "NONE", P + "watch.kind" -> "ALL")
    val fleet = (1 to 2).map(i => new KyuubiServer(s"dropin-$i", KyuubiHome.Dropin, conf(s"dropin-$i"), logDir,
      mode = KyuubiHome.Manager))
    try {
      survivesCompaction(fleet, ns, podsweepAgent = true, informers = true)
      assert(fleet.exists(s => refused(s.log)), "no server logged its watch's 410 or 429")
    } finally {
      fleet.foreach(s => scala.util.Try(s.close()))
      ha.close()
    }
  }

  test("the daemon: an etcd compaction ends its pod watch (410, or 429 while the cache relists); it lists again and loses nothing") {
    needKube()
    PodsweepDaemon.missing.foreach(w => cancel(w))
    val ha = HaBackend.start("etcd")
    val ns = "watch-daemon"
    kube.ensureNamespace(ns)
    val fleet = (1 to 2).map { i =>
      val name = s"daemon-$i"
      new PodsweepDaemon(name, kube.clientConf(name) ++ Map(
        "kyuubi.kubernetes.namespace" -> ns,
        P + "kind" -> "ALL",
        "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "PT2S",
        "kyuubi.ha.namespace" -> "kyuubi-real-watch-daemon") ++ ha.kyuubiConf, logDir)
    }
    try {
      survivesCompaction(fleet, ns, podsweepAgent = true, informers = false)
      assert(fleet.exists(s => refused(s.log)), "no daemon logged its watch's 410 or 429")
    } finally {
      fleet.foreach(s => scala.util.Try(s.close()))
      ha.close()
    }
  }

  test("patched Kyuubi: after an etcd compaction Kyuubi's fabric8 informers list again; podsweep loses nothing") {
    needKube()
    KyuubiHome.patchedMissing.foreach(w => cancel(w))
    val ha = HaBackend.start("zookeeper")
    val ns = "watch-patched"
    val fleet = (1 to 2).map { i =>
      val name = s"patched-$i"
      new KyuubiServer(name, KyuubiHome.Patched,
        KyuubiServer.conf(name, kube, Seq(ns), 2000) ++ ha.kyuubiConf + ("kyuubi.ha.namespace" -> "kyuubi-real-watch-patched"),
        logDir)
    }
    try {
      // The patched servers join the election with the scope's first driver pod.
      kube.createPod(admin, ns, KyuubiPods.driver("warm-up"))
      survivesCompaction(fleet, ns, podsweepAgent = false, informers = true)
    } finally {
      fleet.foreach(s => scala.util.Try(s.close()))
      ha.close()
    }
  }
}
