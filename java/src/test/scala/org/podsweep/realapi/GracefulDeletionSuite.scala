package org.podsweep.realapi

import java.nio.file.{Files, Path}
import java.time.Instant
import java.time.temporal.ChronoUnit

import scala.util.Try

import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.testkit.{FleetServer, HaBackend, KyuubiHome, KyuubiPods, KyuubiServer, LogicalServer, NodeSim, PodsweepDaemon, RealKube}
import org.scalatest.concurrent.Eventually._
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * A real kube-apiserver's deletion rules (a control plane of this suite's own), against podsweep's
 * "one DELETE per pod":
 *
 *  - a Spark driver pod whose driver container ended while its sidecar runs (phase Running, so it
 *    is Kyuubi's FINISHED / FAILED only with `kyuubi.kubernetes.application.state.source=CONTAINER`),
 *    bound to a node and held by a finalizer (`podsweep.test/hold`), is DELETEd once by the leader,
 *    goes Terminating (a `deletionTimestamp`), and is not DELETEd again however long it stays so;
 *    once the finalizer is removed the kubelet stand-in ([[org.podsweep.testkit.NodeSim]])
 *    finishes it. Run with two patched Kyuubi servers (podsweep fed by Kyuubi's informers) and with
 *    two daemons (podsweep's own watch).
 *  - a pod re-created under the same name: the leader's DELETE carries the old pod's UID, the API
 *    server answers 409 and the new pod stays. With a live informer the old pod's DELETE event
 *    cancels the schedule first (no DELETE at all), so the 409 path needs a leader whose view is
 *    behind the API server (a lagging or broken watch): here an in-process podsweep whose
 *    informer stops passing events on ([[LogicalServer.mute]]) just before the swap.
 */
class GracefulDeletionSuite extends AnyFunSuite with BeforeAndAfterAll {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(120, Seconds), Span(200, Millis))

  // A control plane of its own: no kubelet stand-in of other suites ([[RealKube.startNodeSim]])
  // may finish the Terminating pods before this suite says so.
  private var kubeOpt: Option[RealKube] = None
  private def kube: RealKube = synchronized {
    kubeOpt.getOrElse {
      val k = new RealKube(Files.createTempDirectory("podsweep-kube-graceful-"))
      kubeOpt = Some(k)
      k
    }
  }
  override protected def afterAll(): Unit = try kubeOpt.foreach(_.close()) finally super.afterAll()
  private lazy val admin: KubernetesClient = kube.admin
  private lazy val logDir: Path = Files.createTempDirectory("podsweep-realapi-graceful-")
  import RealApi._

  private val Hold = "podsweep.test/hold"

  private def needKube(): Unit = RealKube.missing.foreach(w => cancel(w))

  /** DELETEs of one pod by anyone but the harness (its admin, the kubelet stand-in). */
  private def deletesOf(ns: String, pod: String) = kube.podDeletes(ns).filter(_.pod.contains((ns, pod)))

  /**
   * Two held pods (driver ended, sidecar running, bound to a node, finalizer) and a running decoy
   * in `ns`, cleaned by `fleet` (which reads states from the driver container).
   */
  private def heldPods(fleet: Seq[FleetServer], ns: String, retainMs: Long): Unit = {
    val held = Seq("held-finished", "held-failed")
    val pods = held.map(n => kube.createPod(admin, ns,
      KyuubiPods.driver(n, nodeName = Some("node-1"), sidecar = true, finalizers = Seq(Hold))))
    val decoy = kube.createPod(admin, ns, KyuubiPods.driver("decoy-running", nodeName = Some("node-1"), sidecar = true))
    val leader = eventually(fleet.filter(_.isLeader(ns)) match {
      case Seq(one) => one
      case other => fail(s"leaders: ${other.map(_.name)}")
    })
    val at = Instant.now().truncatedTo(ChronoUnit.SECONDS)
    pods.zip(Seq(true, false)).foreach { case (p, ok) => endDriver(admin, ns, p, ok, at) }
    val deadline = at.toEpochMilli + retainMs
    // One DELETE each, 200, by the leader; the pod stays, Terminating.
    eventually(held.foreach(n => assert(deletesOf(ns, n).nonEmpty, s"no DELETE of $n yet")))
    held.foreach { n =>
      val p = get(admin, ns, n).getOrElse(fail(s"$n is gone although a finalizer holds it"))
      assert(p.getMetadata.getDeletionTimestamp != null, s"$n is not Terminating")
      assert(p.getStatus.getPhase == "Running")
    }
    // Every server has taken the Terminating pods' updates and holds nothing; on a Kyuubi server
    // the retain-period entries of the held pods have expired after their last event (the
    // removal listener, Kyuubi's own delete path, has run). Nothing can send another DELETE
    // while the pods stay as they are.
    barrier(fleet, ns, "barrier-terminating")
    fleet.foreach {
      case k: KyuubiServer => pods.foreach { p =>
        eventually(assert(k.appInfo(None, Some(ns), KyuubiPods.tag(p)).state == "NOT_FOUND",
          s"${k.name}: ${p.getMetadata.getName}"))
      }
      case _ =>
    }
    val until = System.currentTimeMillis()
    held.foreach { n =>
      val d = deletesOf(ns, n)
      assert(d.size == 1 && d.head.status == 200 && d.head.bearer.contains(leader.name), s"$n: $d")
      assert(d.head.atMillis >= deadline - 1000, s"$n deleted at ${d.head.atMillis}, deadline $deadline")
      assert(get(admin, ns, n).exists(_.getMetadata.getDeletionTimestamp != null), s"$n")
    }
    // The finalizer goes; the pod is still bound to a node, so the kubelet finishes it.
    held.foreach(n => dropFinalizers(admin, ns, n))
    // The API server decides within the update that removes the last finalizer (a pod bound to
    // a node waits for its kubelet; no controller-manager runs here to delete it later).
    held.foreach(n => assert(get(admin, ns, n).exists(_.getMetadata.getFinalizers.isEmpty), s"$n went without its kubelet"))
    // A kubelet stand-in of this test's own, started only now.
    val kubelet = new NodeSim(kube)
    try eventually(held.foreach(n => assert(get(admin, ns, n).isEmpty, s"$n still there")))
    finally kubelet.close()
    // Every server has taken the held pods' DELETE events and holds nothing.
    barrier(fleet, ns, "barrier-gone")
    held.foreach(n => assert(deletesOf(ns, n).size == 1, s"$n: ${deletesOf(ns, n)}"))
    assert(deletesOf(ns, decoy.getMetadata.getName).isEmpty && get(admin, ns, decoy.getMetadata.getName).isDefined)
    val accepted = fleet.map(f => outcomes(f.status(ns))("accepted")).sum
    assert(accepted == held.size + 2, fleet.map(_.status(ns))) // and the two barriers
    fleet.foreach(f => assert(f.problems.isEmpty, s"${f.name}: ${f.problems.take(3)}"))
    info(s"${held.size} held pods: one DELETE each by ${leader.name}, none while Terminating " +
      s"(${(until - deadline) / 1000} s past the deadline, every server settled), gone after the finalizer and the kubelet")
  }

  /**
   * A barrier for the servers of `fleet` in `ns`: a terminated, unscheduled driver pod created
   * now. The leader DELETEs it only once it has taken the pod's events, and so every event the
   * API server wrote before them (a server takes a namespace's events in resourceVersion order);
   * then every server holds nothing (nothing tracked, in flight or queued; a follower has taken
   * the barrier's DELETE event too). No server sends a DELETE before a new event.
   */
  private def barrier(fleet: Seq[FleetServer], ns: String, name: String): Unit = {
    terminate(admin, ns, kube.createPod(admin, ns, KyuubiPods.driver(name)), succeeded = true, Instant.now())
    eventually(assert(deletesOf(ns, name).exists(_.status == 200), s"no DELETE of $name yet"))
    eventually(fleet.foreach { f =>
      val st = f.status(ns)
      assert(st.tracked == 0 && st.inflight == 0 && st.number("queued") == 0, s"${f.name}: $st")
    })
    assert(deletesOf(ns, name).size == 1, deletesOf(ns, name))
  }

  private val container = Map("kyuubi.kubernetes.application.state.source" -> "CONTAINER")

  test("patched Kyuubi (CONTAINER state source): a held Terminating pod is DELETEd once, never again, and goes when released") {
    needKube()
    KyuubiHome.patchedMissing.foreach(w => cancel(w))
    val ns = "graceful-kyuubi"
    val retainMs = 3000L
    val ha = HaBackend.start("zookeeper")
    val servers = scala.collection.mutable.ArrayBuffer.empty[KyuubiServer]
    try {
      (1 to 2).foreach { i =>
        val name = s"graceful-kyuubi-$i"
        servers += new KyuubiServer(name, KyuubiHome.Patched, KyuubiServer.conf(name, kube, Seq(ns), retainMs) ++
          ha.kyuubiConf ++ container + ("kyuubi.ha.namespace" -> "kyuubi-realapi-graceful"), logDir)
      }
      heldPods(servers.toVector, ns, retainMs)
      servers.foreach(s => assert(s.logLines("Failed to delete pod").isEmpty))
    } finally {
      servers.foreach(s => Try(s.close()))
      ha.close()
    }
  }

  test("daemons (self-watch, CONTAINER state source): a held Terminating pod is DELETEd once, never again, and goes when released") {
    needKube()
    PodsweepDaemon.missing.foreach(w => cancel(w))
    val ns = "graceful-daemon"
    val retainMs = 3000L
    kube.ensureNamespace(ns)
    val ha = HaBackend.start("zookeeper")
    val daemons = scala.collection.mutable.ArrayBuffer.empty[PodsweepDaemon]
    try {
      (1 to 2).foreach { i =>
        val name = s"graceful-daemon-$i"
        daemons += new PodsweepDaemon(name, kube.clientConf(name) ++ ha.kyuubiConf ++ container ++ Map(
          "kyuubi.kubernetes.client.initialize.list" -> s":$ns",
          P + "kind" -> "ALL",
          "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> retainMs.toString,
          "kyuubi.ha.namespace" -> "kyuubi-realapi-graceful-daemon"), logDir)
      }
      heldPods(daemons.toVector, ns, retainMs)
    } finally {
      daemons.foreach(d => Try(d.close()))
      ha.close()
    }
  }

  test("a pod re-created under the same name: the leader's DELETE carries the old UID, the real API server answers 409 (replaced), the new pod stays") {
    needKube()
    val ns = "graceful-replaced"
    val name = "reused-name"
    val retainMs = 10000L
    kube.ensureNamespace(ns)
    // No HA address: this one server leads every scope (local mode).
    val server = new LogicalServer("replacer", kube, kube.clientConf("replacer") ++ Map(
      P + "kind" -> "ALL",
      "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> retainMs.toString))
    try {
      server.watch(ns)
      val old = kube.createPod(admin, ns, KyuubiPods.driver(name))
      val at = Instant.now().truncatedTo(ChronoUnit.SECONDS)
      terminate(admin, ns, old, succeeded = true, at)
      val deadline = at.toEpochMilli + retainMs
      eventually(assert(server.sawTerminated(ns, name) && server.status(ns).tracked == 1, server.status(ns)))
      // From here on the server's view lags: it misses the deletion and the re-creation.
      server.mute()
      val oldUid = old.getMetadata.getUid
      val gone = deletePod(kube, admin, ns, name, Some(oldUid))
      assert(gone.code == 200, gone)
      eventually(assert(get(admin, ns, name).isEmpty))
      val fresh = kube.createPod(admin, ns, KyuubiPods.driver(name))
      val newUid = fresh.getMetadata.getUid
      assert(newUid != oldUid)
      assert(System.currentTimeMillis() < deadline - 1000, "the swap took longer than the retain period: the machine is too slow for this test")
      eventually(assert(deletesOf(ns, name).nonEmpty, "no DELETE by the leader"))
      // The 409 settled the record: nothing tracked, in flight or queued (the muted informer
      // passes no event that could arm it again), so no DELETE can follow.
      eventually {
        val st = server.status(ns)
        assert(st.tracked == 0 && st.inflight == 0 && st.number("queued") == 0, st)
      }
      val d = deletesOf(ns, name)
      assert(d.size == 1 && d.head.status == 409 && d.head.bearer.contains("replacer"), d)
      assert(d.head.atMillis >= deadline - 1000, s"DELETE at ${d.head.atMillis}, deadline $deadline")
      // The API server's own words: the precondition named the old UID, the record holds the new one.
      val answer = audited(kube).filter(a => a.verb == "delete" && a.namespace == ns && a.name == name &&
        a.user == saUser(RealKube.ServersNamespace, "replacer"))
      assert(answer.size == 1 && answer.head.message.contains(s"($oldUid)") && answer.head.message.contains(s"($newUid)"),
        answer)
      val st = server.status(ns)
      assert(outcomes(st)("replaced") == 1 && outcomes(st)("accepted") == 0, st)
      val now = get(admin, ns, name).getOrElse(fail("the re-created pod was deleted"))
      assert(now.getMetadata.getUid == newUid && now.getMetadata.getDeletionTimestamp == null)
      info(s"409: ${answer.head.message}")
    } finally server.close()
  }
}
