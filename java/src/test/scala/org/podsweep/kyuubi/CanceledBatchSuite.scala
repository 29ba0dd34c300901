package org.podsweep.kyuubi

import java.nio.file.{Files, Path}
import java.util.UUID

import io.fabric8.kubernetes.api.model.PodBuilder
import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.testkit.{HaBackend, KyuubiHome, KyuubiPods, KyuubiServer, RealKube}
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * Kyuubi's other delete path: a driver pod whose batch the metadata store says is CANCELED (e.g.
 * canceled before its pod showed up) is deleted at once by `checkPodAppCanceled`, independent of
 * the cleanup kind and of the pod's state. Stock Kyuubi 1.12.0 does it on every server that sees
 * the pod; with the patch it goes to podsweep and only the scope's leader deletes it, once, with
 * the pod's UID as precondition.
 *
 * Three servers, each Kyuubi's `KubernetesApplicationOperation` in its own JVM with a
 * `MetadataManager` on one shared SQLite metadata store (so all three read the batch's state) and
 * the REST frontend protocol configured (Kyuubi checks for canceled batches only then), on the
 * test JVM's real kube-apiserver ([[RealKube]]: DELETEs counted from its audit log); podsweep's
 * servers elect through a real ZooKeeper. The pod is still running, and the retain period is
 * long: only the canceled-batch path can delete it here.
 */
class CanceledBatchSuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(60, Seconds), Span(100, Millis))

  private lazy val kube: RealKube = RealKube.sharedInstance
  private lazy val admin: KubernetesClient = kube.admin
  private lazy val logDir: Path = Files.createTempDirectory("podsweep-kyuubi-canceled-")

  private def servers(kind: KyuubiHome.Kind, ns: String, extra: Map[String, String]): Seq[KyuubiServer] =
    // One after the other: each initializes the shared SQLite store's schema.
    (1 to 3).map(i => server(kind, ns, s"$ns-$i", extra))

  /** One server of the fleet of `ns` (its shared metadata store, the REST frontend). */
  private def server(kind: KyuubiHome.Kind, ns: String, name: String, extra: Map[String, String]): KyuubiServer = {
    val db = logDir.resolve(s"$ns-metadata.db")
    new KyuubiServer(name, kind,
      KyuubiServer.conf(name, kube, Seq(ns), retainMs = 600000L) ++ extra ++ Map(
        "kyuubi.frontend.protocols" -> "THRIFT_BINARY,REST",
        "kyuubi.metadata.store.jdbc.url" -> s"jdbc:sqlite:$db",
        "podsweep.driver.metadataStore" -> "true"),
      logDir)
  }

  /**
   * Cancels a batch, then creates its driver pod (pending: Kyuubi deletes it at once, so a
   * kubelet's status write could find it gone); returns the pod's name.
   */
  private def canceledBatchPod(fleet: Seq[KyuubiServer], ns: String, i: Int = 0): String = {
    val tag = UUID.randomUUID().toString
    fleet.head.cancelBatch(tag)
    val pending = new PodBuilder(KyuubiPods.driver(f"canceled-$ns-$i%02d", tag = tag))
      .editOrNewStatus().withPhase("Pending").endStatus().build()
    kube.createPod(admin, ns, pending).getMetadata.getName
  }

  /**
   * Three patched servers on kind `kind`: `n` running pods of CANCELED batches get one DELETE
   * each, from the scope's leader; the followers then track none of them; after the leader is
   * killed, the new leader sends no DELETE of its own (audit log).
   */
  private def canceledFleet(kind: String, n: Int): Unit = {
    KyuubiHome.patchedMissing.orElse(RealKube.missing).foreach(why => fail(s"cannot run: $why"))
    val ns = s"canceled-${kind.toLowerCase}"
    val ha = HaBackend.start("zookeeper")
    val fleet = servers(KyuubiHome.Patched, ns, ha.kyuubiConf ++ Map(
      "kyuubi.ha.namespace" -> s"kyuubi-canceled-${kind.toLowerCase}",
      "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind" -> kind))
    try {
      // A running driver pod nobody canceled: left alone under every kind.
      kube.createPod(admin, ns, KyuubiPods.driver("warm-up"))
      val names = (0 until n).map(i => canceledBatchPod(fleet, ns, i))
      val leader = eventually(fleet.filter(_.isLeader(ns)) match {
        case Seq(one) => one
        case other => fail(s"leaders: $other")
      })
      eventually(names.foreach(name => assert(kube.pod(admin, ns, name).isEmpty, s"$name still there")))
      // Every server handed the pods to podsweep (or found them gone): none sent a DELETE itself,
      // and each forgets them once its informer sees them go (before the fix, under NONE, the
      // followers kept all of them, due, for the next leader to DELETE again).
      val followers = fleet.filterNot(_ eq leader)
      // A server whose informer saw none of the pods before they went never opened the scope: it
      // holds no record either.
      eventually(fleet.foreach { s =>
        s.statusOf(ns).foreach { st =>
          assert(st.tracked() == 0 && st.due() == 0, s"${s.name} (${if (s eq leader) "leader" else "follower"}): $st")
        }
      })
      val before = kube.podDeletes(ns).filter(d => names.contains(d.pod.map(_._2).orNull))
      assert(before.size == n && before.forall(d => d.status == 200 && d.bearer.contains(leader.name)),
        s"leader ${leader.name}: $before")
      fleet.foreach(s => assert(s.logLines("Failed to delete pod").isEmpty, s.name))
      assert(kube.pod(admin, ns, "warm-up").isDefined)
      // The leader dies: a follower that opened the scope leads, with nothing to delete. (A
      // follower whose informer cache had lost the pods by the time Kyuubi asked for their delete
      // never opened it: it has no election to win and nothing to delete.)
      val holders = followers.filter(_.statusOf(ns).isDefined)
      leader.kill()
      val next = if (holders.isEmpty) None else Some(eventually(holders.filter(_.isLeader(ns)) match {
        case Seq(one) => one
        case other => fail(s"leaders after the kill: $other")
      }))
      next.foreach { l =>
        val st = l.status(ns)
        assert(st.tracked() == 0 && st.due() == 0 && st.inflight() == 0 && st.deletesSent() == 0, st)
      }
      val after = kube.podDeletes(ns).filter(d => names.contains(d.pod.map(_._2).orNull))
      assert(after.size == n, s"DELETEs after the failover: ${after.drop(n)}")
      info(s"kind $kind: $n canceled batches' pods, ${before.size} DELETEs by ${leader.name}; followers tracked " +
        followers.map(f => s"${f.name}=${f.statusOf(ns).fold("0 (no scope)")(_.tracked().toString)}").mkString(", ") +
        s"; ${leader.name} killed, ${next.fold("no follower held the scope")(_.name + " leads")}, extra DELETEs " +
        s"after the failover: ${after.size - n}")
    } finally {
      fleet.foreach(s => scala.util.Try(s.close()))
      ha.close()
    }
  }

  test("kind NONE (Kyuubi's default), three patched servers: 20 CANCELED batches' pods get one DELETE each, the followers forget them, none after a failover") {
    canceledFleet("NONE", 20)
  }

  test("kind ALL, three patched servers: 20 CANCELED batches' pods get one DELETE each, the followers forget them, none after a failover") {
    canceledFleet("ALL", 20)
  }

  test("kind NONE: a batch canceled after every server saw its pod, asked for by one restarted follower alone: the leader deletes it within seconds, once") {
    // Issue 32, item 1. Before: the follower took the pod (dueNow answered TAKEN, so Kyuubi sent
    // nothing), kept it, and the leader never heard of it: the canceled job kept running.
    KyuubiHome.patchedMissing.orElse(RealKube.missing).foreach(why => fail(s"cannot run: $why"))
    val ns = "canceled-follower"
    val ha = HaBackend.start("zookeeper")
    val extra = ha.kyuubiConf ++ Map("kyuubi.ha.namespace" -> "kyuubi-canceled-follower")
    var fleet = servers(KyuubiHome.Patched, ns, extra)
    try {
      // A batch canceled before its pod showed up: every server asks, a leader deletes it.
      val first = canceledBatchPod(fleet, ns)
      eventually(assert(kube.pod(admin, ns, first).isEmpty, s"$first still there"))
      val leader = eventually(fleet.filter(_.isLeader(ns)) match {
        case Seq(one) => one
        case other => fail(s"leaders: $other")
      })
      // A batch's pod every server sees while the batch runs: nobody asks.
      val tag = UUID.randomUUID().toString
      val late = "late-cancel"
      kube.createPod(admin, ns, new PodBuilder(KyuubiPods.driver(late, tag = tag))
        .editOrNewStatus().withPhase("Pending").endStatus().build())
      eventually(fleet.foreach(s => assert(s.appInfo(None, Some(ns), tag).state != "NOT_FOUND", s.name)))
      // The batch is canceled; then a follower restarts: its informer lists the pod again and
      // its Kyuubi alone asks for the delete.
      fleet.head.cancelBatch(tag)
      val follower = fleet.filterNot(_ eq leader).last
      follower.close()
      val restarted = server(KyuubiHome.Patched, ns, follower.name, extra)
      fleet = fleet.map(s => if (s eq follower) restarted else s)
      val asked = System.currentTimeMillis()
      eventually(assert(kube.pod(admin, ns, late).isEmpty, s"$late still there"))
      val took = System.currentTimeMillis() - asked
      val deletes = kube.podDeletes(ns).filter(_.pod.exists(_._2 == late))
      info(s"kind NONE: $late asked for by ${follower.name} alone after its restart; ${deletes.size} DELETE(s) " +
        s"(${deletes.map(d => s"${d.status} by ${d.bearer.getOrElse("?")}").mkString(", ")}), gone ${took} ms after the restart")
      assert(deletes.size == 1 && deletes.head.status == 200 && deletes.head.bearer.contains(leader.name), deletes)
      fleet.foreach(s => assert(s.logLines("Failed to delete pod").isEmpty, s.name))
    } finally {
      fleet.foreach(s => scala.util.Try(s.close()))
      ha.close()
    }
  }

  test("the same with stock Kyuubi 1.12.0: every server that sees the pod deletes it") {
    KyuubiHome.stockMissing.orElse(RealKube.missing).foreach(why => fail(s"cannot run: $why"))
    val ns = "canceled-stock"
    val fleet = servers(KyuubiHome.Stock, ns, Map.empty)
    try {
      val name = canceledBatchPod(fleet, ns)
      eventually(assert(kube.pod(admin, ns, name).isEmpty, s"$name still there"))
      // Each server logs the outcome of its own DELETE: all three are counted then.
      eventually(fleet.foreach(s => assert(s.logLines(s"delete pod $name").nonEmpty, s.name)))
      val deletes = kube.podDeletes(ns).filter(_.pod.exists(_._2 == name))
      info(s"stock Kyuubi, 3 servers: ${deletes.size} DELETEs of the canceled batch's pod (${deletes.map(_.status).mkString(", ")})")
      assert(deletes.map(_.bearer).distinct.size >= 2, deletes)
    } finally fleet.foreach(s => scala.util.Try(s.close()))
  }
}
