package org.podsweep.kyuubi

import java.nio.file.{Files, Path}
import java.util.UUID

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

  private def servers(kind: KyuubiHome.Kind, ns: String, extra: Map[String, String]): Seq[KyuubiServer] = {
    val db = logDir.resolve(s"$ns-metadata.db")
    // One after the other: each initializes the shared SQLite store's schema.
    (1 to 3).map { i =>
      val name = s"$ns-$i"
      new KyuubiServer(name, kind,
        KyuubiServer.conf(name, kube, Seq(ns), retainMs = 600000L) ++ extra ++ Map(
          "kyuubi.frontend.protocols" -> "THRIFT_BINARY,REST",
          "kyuubi.metadata.store.jdbc.url" -> s"jdbc:sqlite:$db",
          "podsweep.driver.metadataStore" -> "true"),
        logDir)
    }
  }

  /** Cancels a batch, then creates its (running) driver pod; returns the pod's name. */
  private def canceledBatchPod(fleet: Seq[KyuubiServer], ns: String): String = {
    val tag = UUID.randomUUID().toString
    fleet.head.cancelBatch(tag)
    val pod = kube.createPod(admin, ns, KyuubiPods.driver(s"canceled-$ns", tag = tag))
    pod.getMetadata.getName
  }

  test("three patched servers: a CANCELED batch's running pod gets one DELETE, from the scope's leader") {
    KyuubiHome.patchedMissing.orElse(RealKube.missing).foreach(why => cancel(why))
    val ns = "canceled-patched"
    val ha = HaBackend.start("zookeeper")
    val fleet = servers(KyuubiHome.Patched, ns, ha.kyuubiConf + ("kyuubi.ha.namespace" -> "kyuubi-canceled"))
    try {
      // A running driver pod first, so the scope has a leader before the canceled batch's pod.
      kube.createPod(admin, ns, KyuubiPods.driver("warm-up"))
      val leader = eventually(fleet.filter(_.isLeader(ns)) match {
        case Seq(one) => one
        case other => fail(s"leaders: $other")
      })
      val name = canceledBatchPod(fleet, ns)
      eventually(assert(kube.pod(admin, ns, name).isEmpty, s"$name still there"))
      Thread.sleep(3000)
      val deletes = kube.podDeletes(ns).filter(_.pod.exists(_._2 == name))
      assert(deletes.size == 1, deletes)
      assert(deletes.head.status == 200 && deletes.head.bearer.contains(leader.name), s"leader ${leader.name}: $deletes")
      // Every server saw the canceled batch and sent no DELETE of its own: it handed the pod to
      // podsweep, or (its informer's cache updated before its handler ran) found it gone already.
      fleet.foreach { s =>
        val handed = s.logLines("goes to podsweep, whose elected leader deletes it now")
        val gone = s.logLines(s"Pod $name").filter(_.contains("is not in this server's informer cache"))
        assert(handed.size + gone.size >= 1, s"${s.name}: ${s.log.mkString("\n")}")
      }
      assert(leader.logLines(s"Pod $name").exists(_.contains("is to be deleted now")), leader.log.mkString("\n"))
      assert(leader.logLines(s"Deleted driver pod $name").nonEmpty, "the leader did not log its DELETE")
      fleet.foreach(s => assert(s.logLines("Failed to delete pod").isEmpty, s.name))
      // The running pod nobody canceled is left alone.
      assert(kube.pod(admin, ns, "warm-up").isDefined)
      info(s"one DELETE of $name, by ${leader.name} (HTTP ${deletes.head.status})")
    } finally {
      fleet.foreach(s => scala.util.Try(s.close()))
      ha.close()
    }
  }

  test("the same with stock Kyuubi 1.12.0: every server that sees the pod deletes it") {
    KyuubiHome.stockMissing.orElse(RealKube.missing).foreach(why => cancel(why))
    val ns = "canceled-stock"
    val fleet = servers(KyuubiHome.Stock, ns, Map.empty)
    try {
      val name = canceledBatchPod(fleet, ns)
      eventually(assert(kube.pod(admin, ns, name).isEmpty, s"$name still there"))
      Thread.sleep(3000)
      val deletes = kube.podDeletes(ns).filter(_.pod.exists(_._2 == name))
      info(s"stock Kyuubi, 3 servers: ${deletes.size} DELETEs of the canceled batch's pod (${deletes.map(_.status).mkString(", ")})")
      assert(deletes.map(_.bearer).distinct.size >= 2, deletes)
    } finally fleet.foreach(s => scala.util.Try(s.close()))
  }
}
