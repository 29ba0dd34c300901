package org.podsweep.fabric8

import java.util.UUID

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.informers.SharedIndexInformer
import org.podsweep.{PodSweeper, ScopeStatus}
import org.podsweep.testkit.{KyuubiPods, RealKube}
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * Kyuubi's delete-at-once (`deletePod`) through [[DeleteNow.handOff]], on the real kube-apiserver
 * with a real fabric8 informer: every pod Kyuubi would delete at that call is deleted once by
 * podsweep (audit log) or left to Kyuubi's own DELETE ([[DeleteNow.Outcome.DECLINED]]), never
 * neither. The scope's cleanup kind is Kyuubi's default, NONE, so only the handoff can delete.
 */
class DeleteNowSuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(60, Seconds), Span(100, Millis))

  private lazy val kube: RealKube = RealKube.sharedInstance
  private lazy val admin = kube.admin

  private def withFixture(ns: String)(body: (PodSweeper, KyuubiPodObserver, SharedIndexInformer[Pod]) => Unit): Unit = {
    RealKube.missing.foreach(why => fail(s"cannot run: $why"))
    val conf = kube.clientConf(ns) ++ Map(
      "kyuubi.kubernetes.namespace" -> ns,
      "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind" -> "NONE")
    val sweeper = PodSweeper.create(conf.asJava, s"$ns:10009")
    val informer = admin.pods().inNamespace(ns).withLabel(KyuubiPodObserver.UNIQUE_TAG_LABEL).inform()
    try {
      eventually(assert(informer.hasSynced))
      body(sweeper, KyuubiPodObserver.fromKyuubiConf(sweeper, conf.asJava), informer)
    } finally {
      informer.close()
      sweeper.close()
    }
  }

  private def cached(informer: SharedIndexInformer[Pod], ns: String, names: String*): Unit =
    eventually(names.foreach(n => assert(informer.getIndexer.getByKey(s"$ns/$n") != null, s"$n not cached")))

  private def deletesOf(ns: String, name: String) = kube.podDeletes(ns).filter(_.pod.exists(_._2 == name))

  test("by name: the pod goes to podsweep's leader, deleted once with its UID") {
    val ns = "delete-now-name"
    withFixture(ns) { (sweeper, observer, informer) =>
      val pod = kube.createPod(admin, ns, KyuubiPods.driver("by-name"))
      cached(informer, ns, "by-name")
      val h = DeleteNow.handOff(observer, informer, null, ns, ns, "by-name", KyuubiPods.tag(pod), "test")
      assert(h.outcome == DeleteNow.Outcome.TAKEN && h.pods.asScala == Seq("by-name"), h)
      eventually(assert(kube.pod(admin, ns, "by-name").isEmpty))
      eventually(assert(ScopeStatus.parse(sweeper.scopeStatus(null, ns)).outcome("accepted") == 1))
      assert(deletesOf(ns, "by-name").map(d => (d.status, d.bearer)) == Seq((200, Some(ns))))
    }
  }

  test("by tag (no pod name): every pod carrying it goes to podsweep, each deleted once") {
    val ns = "delete-now-tag"
    withFixture(ns) { (sweeper, observer, informer) =>
      val tag = UUID.randomUUID().toString
      val names = Seq("tagged-a", "tagged-b")
      names.foreach(n => kube.createPod(admin, ns, KyuubiPods.driver(n, tag = tag)))
      kube.createPod(admin, ns, KyuubiPods.driver("other-tag"))
      cached(informer, ns, names :+ "other-tag": _*)
      val h = DeleteNow.handOff(observer, informer, null, ns, ns, null, tag, "test")
      assert(h.outcome == DeleteNow.Outcome.TAKEN && h.pods.asScala.sorted == names, h)
      eventually(names.foreach(n => assert(kube.pod(admin, ns, n).isEmpty, n)))
      eventually(assert(ScopeStatus.parse(sweeper.scopeStatus(null, ns)).outcome("accepted") == 2))
      names.foreach(n => assert(deletesOf(ns, n).map(_.status) == Seq(200), n))
      assert(kube.pod(admin, ns, "other-tag").isDefined && deletesOf(ns, "other-tag").isEmpty)
      // The index, added once, follows the informer: once it saw the pods go, none is left.
      assert(informer.getIndexer.getIndexers.containsKey(DeleteNow.TAG_INDEX))
      eventually(assert(DeleteNow.handOff(observer, informer, null, ns, ns, null, tag, "test").outcome ==
        DeleteNow.Outcome.GONE))
    }
  }

  test("a pod without spark-app-selector, among others with its tag: podsweep takes none, Kyuubi deletes them") {
    val ns = "delete-now-declined"
    withFixture(ns) { (sweeper, observer, informer) =>
      val tag = UUID.randomUUID().toString
      kube.createPod(admin, ns, KyuubiPods.driver("with-selector", tag = tag))
      kube.createPod(admin, ns, KyuubiPods.driver("no-selector", tag = tag, appSelector = false))
      cached(informer, ns, "with-selector", "no-selector")
      val h = DeleteNow.handOff(observer, informer, null, ns, ns, null, tag, "test")
      assert(h.outcome == DeleteNow.Outcome.DECLINED && !h.handled, h)
      assert(h.reason.contains("no-selector"), h)
      // By name too: the one without the label is left to Kyuubi.
      val one = DeleteNow.handOff(observer, informer, null, ns, ns, "no-selector", tag, "test")
      assert(one.outcome == DeleteNow.Outcome.DECLINED, one)
      // podsweep took nothing: its scope tracks nothing and sent nothing.
      val st = ScopeStatus.parse(sweeper.scopeStatus(null, ns))
      assert(st.tracked <= 0 && st.deletesSent <= 0, st) // -1: not even a task was started
      assert(kube.podDeletes(ns).isEmpty, kube.podDeletes(ns))
    }
  }

  test("a pod the synced cache does not hold is gone; an informer not synced yet leaves the pod to Kyuubi") {
    val ns = "delete-now-gone"
    withFixture(ns) { (_, observer, informer) =>
      val gone = DeleteNow.handOff(observer, informer, null, ns, ns, "never-created", "some-tag", "test")
      assert(gone.outcome == DeleteNow.Outcome.GONE && gone.handled, gone)
      val none = DeleteNow.handOff(observer, null, null, ns, ns, "never-created", "some-tag", "test")
      assert(none.outcome == DeleteNow.Outcome.DECLINED, none)
      val fresh = admin.pods().inNamespace(ns).withLabel(KyuubiPodObserver.UNIQUE_TAG_LABEL).runnableInformer(0L)
      val unsynced = DeleteNow.handOff(observer, fresh, null, ns, ns, "never-created", "some-tag", "test")
      assert(unsynced.outcome == DeleteNow.Outcome.DECLINED && unsynced.reason.contains("not synced"), unsynced)
    }
  }
}
