package org.podsweep

import java.time.Instant
import java.util.concurrent.ConcurrentLinkedQueue

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.{DeleteOptionsBuilder, Pod, PodBuilder}
import io.fabric8.kubernetes.client.informers.ResourceEventHandler
import org.podsweep.testkit.{ApiFault, KyuubiPods, PodsApi}
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/** `testkit.PodsApi` behaves as the harness (and a real API server) has it. */
class PodsApiSuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(20, Seconds), Span(50, Millis))

  private def withApi[T](f: PodsApi => T): T = {
    val api = new PodsApi(kubeletConfirmMs = 500)
    try f(api) finally api.close()
  }

  /** DELETE through plain HTTP, so the exact answer (code, body) is seen. */
  private def delete(api: PodsApi, ns: String, name: String, uid: Option[String] = None): (Int, String) = {
    val c = new java.net.URL(s"${api.url}/api/v1/namespaces/$ns/pods/$name").openConnection().asInstanceOf[java.net.HttpURLConnection]
    c.setRequestMethod("DELETE")
    c.setRequestProperty("Authorization", "Bearer probe")
    uid.foreach { u =>
      c.setDoOutput(true)
      c.setRequestProperty("Content-Type", "application/json")
      c.getOutputStream.write(s"""{"kind":"DeleteOptions","apiVersion":"v1","preconditions":{"uid":"$u"}}""".getBytes("UTF-8"))
    }
    val code = c.getResponseCode
    val in = if (code >= 400) c.getErrorStream else c.getInputStream
    (code, scala.io.Source.fromInputStream(in, "UTF-8").mkString)
  }

  private def scheduled(pod: Pod): Pod = new PodBuilder(pod).editSpec().withNodeName("node-1").endSpec().build()

  test("a terminated or unscheduled pod goes at once; a running scheduled pod goes Terminating until the kubelet confirms") {
    withApi { api =>
      val admin = api.client("admin")
      try {
        val events = new ConcurrentLinkedQueue[String]()
        admin.pods().inNamespace("ns").inform(new ResourceEventHandler[Pod] {
          override def onAdd(p: Pod): Unit = events.add(s"ADD ${p.getMetadata.getName}")
          override def onUpdate(o: Pod, p: Pod): Unit =
            events.add(s"UPDATE ${p.getMetadata.getName} deleting=${p.getMetadata.getDeletionTimestamp != null}")
          override def onDelete(p: Pod, unknown: Boolean): Unit = events.add(s"DELETE ${p.getMetadata.getName}")
        }, 0L)
        val done = admin.pods().inNamespace("ns").resource(scheduled(KyuubiPods.driver("done"))).create()
        admin.pods().inNamespace("ns").resource(KyuubiPods.terminated(done, succeeded = true, Instant.now())).updateStatus()
        admin.pods().inNamespace("ns").resource(KyuubiPods.driver("unscheduled")).create()
        admin.pods().inNamespace("ns").resource(scheduled(KyuubiPods.driver("running"))).create()
        eventually(assert(events.asScala.count(_.startsWith("ADD")) == 3))
        assert(delete(api, "ns", "done")._1 == 200 && delete(api, "ns", "unscheduled")._1 == 200)
        assert(api.podNames("ns") == Set("running"))
        val (code, body) = delete(api, "ns", "running")
        assert(code == 200 && body.contains("\"deletionTimestamp\""), body)
        assert(api.pod("ns", "running").exists(_.getMetadata.getDeletionTimestamp != null))
        eventually(assert(events.asScala.exists(_ == "UPDATE running deleting=true")))
        // A repeated DELETE while Terminating is answered 200 again, not 404.
        assert(delete(api, "ns", "running")._1 == 200)
        eventually(assert(api.podNames("ns").isEmpty && events.asScala.exists(_ == "DELETE running")))
        assert(delete(api, "ns", "running")._1 == 404)
      } finally admin.close()
    }
  }

  test("a node that is gone never confirms; a finalizer holds a terminated pod until removed") {
    withApi { api =>
      val admin = api.client("admin")
      try {
        admin.pods().inNamespace("ns").resource(scheduled(KyuubiPods.driver("stuck"))).create()
        api.nodeGone = true
        assert(delete(api, "ns", "stuck")._1 == 200)
        // The kubelet's confirmation came (kubeletConfirmMs after the DELETE) and was put off.
        eventually(assert(api.kubeletConfirmsPutOff >= 1))
        assert(api.podNames("ns") == Set("stuck"))
        api.nodeGone = false
        eventually(assert(api.podNames("ns").isEmpty))
        val held = admin.pods().inNamespace("ns").resource(KyuubiPods.driver("held", finalizers = Seq("example.com/keep"))).create()
        admin.pods().inNamespace("ns").resource(KyuubiPods.terminated(held, succeeded = true, Instant.now())).updateStatus()
        // Only a kubelet confirmation could end a Terminating pod: the DELETE of a pod a finalizer
        // holds schedules none (decided as it is answered), so the pod stays until released.
        val confirms = api.kubeletConfirmsScheduled
        assert(delete(api, "ns", "held")._1 == 200)
        assert(api.kubeletConfirmsScheduled == confirms, "a kubelet confirmation was scheduled for a held pod")
        assert(api.pod("ns", "held").exists(_.getMetadata.getDeletionTimestamp != null))
        api.removeFinalizers("ns", "held")
        assert(api.podNames("ns").isEmpty)
      } finally admin.close()
    }
  }

  test("Status bodies: 409 Conflict for a failed UID precondition, 404 NotFound, as a real server writes them") {
    withApi { api =>
      val admin = api.client("admin")
      try {
        val p = admin.pods().inNamespace("ns").resource(KyuubiPods.driver("p")).create()
        val (code, body) = delete(api, "ns", "p", uid = Some("other-uid"))
        assert(code == 409, body)
        assert(body.contains("\"reason\":\"Conflict\"") && body.contains("\"kind\":\"Status\"") &&
          body.contains(s"Precondition failed: UID in precondition: other-uid, UID in object meta: ${p.getMetadata.getUid}") &&
          body.contains("\"details\":{\"name\":\"p\",\"kind\":\"pods\"}"), body)
        assert(delete(api, "ns", "p", uid = Some(p.getMetadata.getUid))._1 == 200)
        val (c404, b404) = delete(api, "ns", "p")
        assert(c404 == 404 && b404.contains("\"reason\":\"NotFound\"") && b404.contains("pods \\\"p\\\" not found"), b404)
        // fabric8's delete with a grace period goes through the same path.
        admin.pods().inNamespace("ns").resource(KyuubiPods.driver("q")).create()
        admin.pods().inNamespace("ns").withName("q").withGracePeriod(0).delete()
        assert(api.podNames("ns").isEmpty)
      } finally admin.close()
    }
  }

  test("faults: an answer with Retry-After, a reset connection; watches: dropped, and 410 Gone after a compaction") {
    withApi { api =>
      val admin = api.client("admin")
      try {
        admin.pods().inNamespace("ns").resource(KyuubiPods.driver("p")).create()
        api.onRequest = r => if (r.method == "DELETE") Some(ApiFault.throttled(2)) else None
        val c = new java.net.URL(s"${api.url}/api/v1/namespaces/ns/pods/p").openConnection().asInstanceOf[java.net.HttpURLConnection]
        c.setRequestMethod("DELETE")
        assert(c.getResponseCode == 429 && c.getHeaderField("Retry-After") == "2")
        api.onRequest = r => if (r.method == "DELETE") Some(ApiFault.Reset) else None
        intercept[java.io.IOException](delete(api, "ns", "p"))
        api.onRequest = _ => None
        assert(api.podNames("ns") == Set("p"))
        // (HttpURLConnection tries a reset request once more on its own.)
        val answered = api.podDeletes("ns").map(_.status)
        assert(answered.head == 429 && answered.tail.nonEmpty && answered.tail.forall(_ == 0), answered)

        // A watch from an old resourceVersion after a compaction: one ERROR event with 410.
        val rv = admin.pods().inNamespace("ns").list().getMetadata.getResourceVersion
        admin.pods().inNamespace("ns").resource(KyuubiPods.driver("q")).create()
        api.compact()
        val w = new java.net.URL(s"${api.url}/api/v1/namespaces/ns/pods?watch=true&resourceVersion=$rv").openStream()
        val line = new java.io.BufferedReader(new java.io.InputStreamReader(w, "UTF-8")).readLine()
        w.close()
        assert(line.contains("\"type\":\"ERROR\"") && line.contains("\"code\":410") && line.contains("\"reason\":\"Expired\""), line)

        // An informer survives dropped watches and sees later events.
        val seen = new ConcurrentLinkedQueue[String]()
        admin.pods().inNamespace("ns").inform(new ResourceEventHandler[Pod] {
          override def onAdd(p: Pod): Unit = seen.add(p.getMetadata.getName)
          override def onUpdate(o: Pod, p: Pod): Unit = ()
          override def onDelete(p: Pod, unknown: Boolean): Unit = ()
        }, 0L)
        eventually(assert(seen.asScala.toSet == Set("p", "q") && api.openWatches("fabric8") == 1))
        api.dropWatches()
        admin.pods().inNamespace("ns").resource(KyuubiPods.driver("r")).create()
        eventually(assert(seen.asScala.toSet.contains("r")))
        eventually(assert(api.watches("fabric8").size >= 2 && api.openWatches("fabric8") == 1))
      } finally admin.close()
    }
  }
}
