package org.podsweep.realapi

import java.nio.file.{Files, Path}

import scala.collection.JavaConverters._

import org.podsweep.spark.{ClusterKube, SparkRun}
import org.podsweep.testkit.{HaBackend, KyuubiHome, RealKube, SparkHome}
import org.scalatest.funsuite.AnyFunSuite

/**
 * Spark's own spark-submit, run by real Kyuubi servers for batches submitted through Kyuubi's
 * REST API (`POST /api/v1/batches`), on a full control plane with KWOK nodes ([[ClusterKube]]); see
 * [[SparkRun]] for what a run does and measures. Three whole Kyuubi servers, HA on a real ZooKeeper.
 *
 *  - patched and drop-in: one DELETE per driver pod from the Kyuubi servers (podsweep's leader for
 *    completed batches, the canceling server's own kill for canceled ones); the garbage collector
 *    leaves no executor, ConfigMap or Service; PodGC never deletes a pod podsweep deleted;
 *  - stock Kyuubi 1.12.0, the figure before: every server deletes every completed driver pod.
 */
class SparkBatchSuite extends AnyFunSuite {
  private lazy val logDir: Path = Files.createTempDirectory("podsweep-spark-batches-")

  private def need(kind: KyuubiHome.Kind): RealKube = {
    Seq(KyuubiHome.missing(kind), SparkHome.missing, ClusterKube.missing).flatten.headOption.foreach(w => fail(s"cannot run: $w"))
    ClusterKube.instance
  }

  private def run(kind: KyuubiHome.Kind, ns: String, batches: Int, canceled: Int): SparkRun.Result = {
    val kube = need(kind)
    val ha = HaBackend.start("zookeeper")
    try SparkRun.run(SparkRun.Spec(kind, ns, logDir, batches = batches, canceled = canceled, progress = m => info(m)), kube, ha)
    finally ha.close()
  }

  private def describe(r: SparkRun.Result): String = {
    def ms(xs: Seq[Long]) = if (xs.isEmpty) "-" else s"max ${xs.max} ms (${xs.sorted.mkString(", ")})"
    s"${r.spec.kind.label} on ${r.apiServer}: ${r.completed.size} completed + ${r.canceled.size} canceled batches " +
      s"(states ${r.states}); server DELETEs per completed driver ${r.perDriver(r.completed)}, per canceled driver " +
      s"${r.perDriver(r.canceled)}; made ${r.executorsMade} executors, ${r.configMapsMade} ConfigMaps, ${r.servicesMade} Services, " +
      s"deleted by the GC ${r.gcDeletedOwned}, left after the GC ${SparkRun.leftovers(ClusterKube.instance.admin, r.spec.namespace, r.drivers)}; GC took ${ms(r.gcMillis)}; " +
      s"canceled pods gone ${ms(r.cancelMillis)} after the REST DELETE; completed pods gone ${ms(r.cleanupMillis)} after Succeeded; " +
      s"other deleters ${r.othersByUser}"
  }

  private def fleetCleansOnce(kind: KyuubiHome.Kind, ns: String): Unit = {
    val r = run(kind, ns, batches = 4, canceled = 2)
    info(describe(r))
    assert(r.drivers.size == 6, r.batches)
    // Spark made each driver's ConfigMap and Service, owned by the driver pod; the garbage
    // collector deleted them (audit log).
    assert(r.gcDeletedOwned.getOrElse("configmaps", 0) >= 6 && r.gcDeletedOwned.getOrElse("services", 0) >= 6, r.gcDeletedOwned)
    assert(r.perDriver(r.completed).forall(_ == 1), s"server DELETEs per completed driver: ${r.perDriver(r.completed)}")
    assert(r.perDriver(r.canceled).forall(_ == 1), s"server DELETEs per canceled driver: ${r.perDriver(r.canceled)}")
    assert(r.completed.forall(_.state.exists(_.state == "FINISHED")), r.completed.map(_.state))
    assert(r.canceled.forall(_.state.exists(_.state == "CANCELED")), r.canceled.map(_.state))
    assert(SparkRun.leftovers(ClusterKube.instance.admin, ns, r.drivers) == SparkRun.Leftovers(0, 0, 0))
    // The executors went by the garbage collector's DELETEs, none by a Kyuubi server's.
    assert(r.deletes.count(d => r.isGc(d.user)) >= r.executorsMade, r.othersByUser)
    assert(r.podGcDoubles == 0, r.deletes.filter(d => r.isPodGc(d.user)))
    // A canceled batch's pod goes at once (Kyuubi's kill), not after a retain period.
    assert(r.cancelMillis.size == 2 && r.cancelMillis.forall(_ < 15000), r.cancelMillis)
  }

  test("a batch through POST /api/v1/batches: Kyuubi runs spark-submit, Spark creates the driver pod with Kyuubi's tag, its ConfigMap and Service owned by the pod") {
    val kube = need(KyuubiHome.Patched)
    val ns = "spark-submit"
    val ha = HaBackend.start("zookeeper")
    val spec = SparkRun.Spec(KyuubiHome.Patched, ns, logDir, servers = 1)
    val dir = logDir.resolve("submit")
    Files.createDirectories(dir)
    val conf = SparkRun.serverConf(spec, kube, ha, "submit-1", dir)
    val server = new org.podsweep.testkit.KyuubiServer("submit-1", KyuubiHome.Patched, conf, dir, heapMb = 512,
      mode = KyuubiHome.WholeServer)
    try {
      val rest = new org.podsweep.testkit.KyuubiRest(SparkRun.restUrl(conf))
      val token = SparkRun.sparkIdentity(kube, ns)
      val b = rest.submit("sparkpi", "org.apache.spark.examples.SparkPi",
        SparkHome.examplesResource,
        SparkRun.batchConf(kube, ns, token, None, 2), Seq("10"))
      val admin = kube.admin
      val driver = org.scalatest.concurrent.Eventually.eventually(
        org.scalatest.concurrent.Eventually.timeout(org.scalatest.time.Span(120, org.scalatest.time.Seconds)),
        org.scalatest.concurrent.Eventually.interval(org.scalatest.time.Span(500, org.scalatest.time.Millis))) {
        val d = admin.pods().inNamespace(ns).withLabel("kyuubi-unique-tag", b.id).list().getItems.asScala
        assert(d.size == 1, rest.localLog(b.id, 40).mkString("\n"))
        val p = d.head
        val uid = p.getMetadata.getUid
        def owned(o: io.fabric8.kubernetes.api.model.HasMetadata) =
          Option(o.getMetadata.getOwnerReferences).exists(_.asScala.exists(r => r.getUid == uid && r.getKind == "Pod"))
        assert(admin.configMaps().inNamespace(ns).list().getItems.asScala.exists(owned), "no ConfigMap owned by the driver")
        assert(admin.services().inNamespace(ns).list().getItems.asScala.exists(owned), "no Service owned by the driver")
        p
      }
      val labels = driver.getMetadata.getLabels.asScala
      info(s"driver ${driver.getMetadata.getName}: labels ${labels.toSeq.sorted.mkString(", ")}; node ${driver.getSpec.getNodeName}; " +
        s"service account ${driver.getSpec.getServiceAccountName}")
      assert(labels.get("spark-role").contains("driver") && labels.contains("spark-app-selector"))
      assert(rest.get(b.id).id == b.id)
      assert(rest.cancel(b.id)._1)
    } finally {
      server.close()
      ha.close()
    }
  }

  test("three patched Kyuubi servers, SparkPi batches through POST /api/v1/batches on a full control plane: one DELETE per driver pod, no executor, ConfigMap or Service left after the GC, canceled batches' pods at once") {
    fleetCleansOnce(KyuubiHome.Patched, "spark-patched")
  }

  test("the same with stock Kyuubi 1.12.0 and podsweep's drop-in") {
    fleetCleansOnce(KyuubiHome.Dropin, "spark-dropin")
  }

  test("stock Kyuubi 1.12.0 (kind ALL), the figure before: more than one DELETE per completed driver pod") {
    val r = run(KyuubiHome.Stock, "spark-stock", batches = 4, canceled = 0)
    info(describe(r))
    assert(r.drivers.size == 4)
    assert(r.perDriver(r.completed).sum > r.completed.size, r.perDriver(r.completed))
    assert(SparkRun.leftovers(ClusterKube.instance.admin, "spark-stock", r.drivers) == SparkRun.Leftovers(0, 0, 0))
  }
}
