package org.podsweep

import java.time.Instant
import java.util.concurrent.ConcurrentLinkedQueue

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.informers.ResourceEventHandler
import org.podsweep.testkit.{KyuubiPods, MockKube}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.concurrent.Eventually
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.SpanSugar._

/** Checks that the mock API server behaves the way the harness relies on. */
class MockKubeSuite extends AnyFunSuite with BeforeAndAfterAll with Eventually {
  implicit override val patienceConfig: PatienceConfig = PatienceConfig(20.seconds, 50.millis)
  private var kube: MockKube = _

  override def beforeAll(): Unit = kube = new MockKube
  override def afterAll(): Unit = kube.close()

  test("a DELETE of a pod without finalizers: the events an informer sees") {
    // The baseline model's DELETE counts depend on this: every event after a server's own DELETE
    // re-arms its cache entry.
    val admin = kube.client("test-admin")
    val ns = "mock-delete-events"
    val events = new ConcurrentLinkedQueue[String]()
    val informer = kube.client("informer").pods().inNamespace(ns).withLabel(KyuubiPods.TagLabel)
      .inform(new ResourceEventHandler[Pod] {
        override def onAdd(p: Pod): Unit = events.add(s"ADD ${p.getMetadata.getName}")
        override def onUpdate(o: Pod, p: Pod): Unit =
          events.add(s"UPDATE deleting=${KyuubiPods.deletionTimestampSet(p)}")
        override def onDelete(p: Pod, unknown: Boolean): Unit = events.add("DELETE")
      }, 0L)
    try {
      val at = Instant.parse("2024-05-01T10:00:00Z")
      admin.pods().inNamespace(ns).resource(KyuubiPods.terminated(KyuubiPods.driver("gone"), true, at)).create()
      eventually(assert(events.asScala.toSeq.contains("ADD gone")))
      events.clear()
      admin.pods().inNamespace(ns).withName("gone").delete()
      eventually(assert(events.asScala.toSeq.contains("DELETE")))
      // A pod created after the DELETE is a barrier: the informer's events come in order from one
      // watch, so once it has seen the barrier it has seen every event of `gone`.
      admin.pods().inNamespace(ns).resource(KyuubiPods.driver("barrier")).create()
      eventually(assert(events.asScala.toSeq.contains("ADD barrier")))
      info(s"events after DELETE: ${events.asScala.mkString(", ")}")
      assert(events.asScala.toSeq == Seq("DELETE", "ADD barrier"))
    } finally informer.stop()
  }

  test("informer events, status on create and update, finalizers, bearer attribution") {
    val admin = kube.client("test-admin")
    val ns = "mock-check"
    val events = new ConcurrentLinkedQueue[(String, Pod)]()
    val informer = kube.client("informer").pods().inNamespace(ns).withLabel(KyuubiPods.TagLabel)
      .inform(new ResourceEventHandler[Pod] {
        override def onAdd(p: Pod): Unit = events.add("ADD" -> p)
        override def onUpdate(o: Pod, p: Pod): Unit = events.add("UPDATE" -> p)
        override def onDelete(p: Pod, unknown: Boolean): Unit = events.add("DELETE" -> p)
      }, 0L)
    try {
      val at = Instant.parse("2024-05-01T10:00:00Z")
      // Created terminated: the status survives creation.
      val done = admin.pods().inNamespace(ns).resource(KyuubiPods.terminated(KyuubiPods.driver("done"), true, at)).create()
      assert(done.getMetadata.getUid != null)
      assert(done.getStatus.getPhase == "Succeeded")
      eventually(assert(events.asScala.exists { case (k, p) => k == "ADD" && p.getMetadata.getName == "done" }))
      assert(KyuubiPods.terminatedAtMillis(done) == at.toEpochMilli)

      // A label-less pod is not seen by the informer.
      admin.pods().inNamespace(ns).resource(new io.fabric8.kubernetes.api.model.PodBuilder()
        .withNewMetadata().withName("other").endMetadata().build()).create()

      // Running -> Succeeded through the status subresource is an UPDATE.
      val run = admin.pods().inNamespace(ns).resource(KyuubiPods.driver("run")).create()
      admin.pods().inNamespace(ns).resource(KyuubiPods.terminated(run, false, at)).updateStatus()
      eventually(assert(events.asScala.exists { case (k, p) =>
        k == "UPDATE" && p.getMetadata.getName == "run" && KyuubiPods.appState(p, PodEvent.UPDATE) == "FAILED"
      }))

      // A pod with a finalizer keeps existing with a deletionTimestamp after DELETE.
      admin.pods().inNamespace(ns).resource(KyuubiPods.driver("held", finalizers = Seq("podsweep.test/hold"))).create()
      admin.pods().inNamespace(ns).withName("held").delete()
      eventually(assert(events.asScala.exists { case (k, p) =>
        k == "UPDATE" && p.getMetadata.getName == "held" && KyuubiPods.deletionTimestampSet(p)
      }))
      assert(kube.pod(admin, ns, "held").exists(KyuubiPods.deletionTimestampSet))

      admin.pods().inNamespace(ns).withName("done").delete()
      eventually(assert(events.asScala.exists { case (k, p) => k == "DELETE" && p.getMetadata.getName == "done" }))
      assert(kube.deletesOf(ns, "done") == Map(Some("test-admin") -> 1))
      assert(!events.asScala.exists(_._2.getMetadata.getName == "other"))
    } finally informer.stop()
  }

  test("expectations win over CRUD for DELETE") {
    val admin = kube.client("test-admin")
    kube.failDeletes("mock-fail", "p", 403, "Forbidden", "pods \"p\" is forbidden")
    val e = intercept[io.fabric8.kubernetes.client.KubernetesClientException] {
      admin.pods().inNamespace("mock-fail").withName("p").delete()
    }
    assert(e.getCode == 403)
  }
}
