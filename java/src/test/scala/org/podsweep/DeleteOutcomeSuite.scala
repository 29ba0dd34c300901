package org.podsweep

import java.net.ServerSocket
import java.util.UUID

import org.podsweep.testkit.{DeleteFaults, KubeAndZk, LogCapture, LogRecord}
import org.scalatest.concurrent.Eventually
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.SpanSugar._

/**
 * How DELETE outcomes are reported: an already-absent pod is a quiet success; 403, 429, 5xx and
 * transport failures leave one WARN/ERROR summary per class per interval, quoting the first pod and
 * the cause.
 *
 * The pods here are fed to `observe` directly (as an informer would after missing the DELETE
 * event), already terminated an hour ago, so they are due at once.
 */
class DeleteOutcomeSuite extends AnyFunSuite with KubeAndZk with Eventually {
  implicit override val patienceConfig: PatienceConfig = PatienceConfig(60.seconds, 100.millis)

  private def observeTerminated(s: PodSweeper, context: String, ns: String, pod: String): String = {
    val uid = UUID.randomUUID().toString
    s.observe(context, ns, PodEvent.UPDATE, UUID.randomUUID().toString, pod, uid, "FAILED", true,
      System.currentTimeMillis() - 3600 * 1000L, false)
    uid
  }

  private def status(s: PodSweeper, context: String, ns: String): ScopeStatus =
    ScopeStatus.parse(s.scopeStatus(context, ns))

  private def show(records: Seq[LogRecord]): String = records.mkString("\n  ", "\n  ", "")

  test("(e) an already-absent pod produces no WARN/ERROR and no line containing \"fail\"") {
    val ns = unique("e-absent")
    val logs = new LogCapture
    val sweeper = PodSweeper.create(kyuubiConfJava("server-e", unique("ha-e")), "server-e:10009")
    try {
      val uid = observeTerminated(sweeper, null, ns, "ghost")
      eventually(assert(kube.deletesOf(ns, "ghost") == Map(Some("server-e") -> 1)))
      eventually(assert(status(sweeper, null, ns).outcome("already_absent") == 1, status(sweeper, null, ns)))
      val st = status(sweeper, null, ns)
      assert(st.deletesSent == 1 && st.inflight == 0, st)
      assert(st.outcome("accepted") == 0, st)
      val loud = logs.records.filter(_.warnOrError)
      assert(loud.isEmpty, s"WARN/ERROR records:${show(loud)}")
      val failing = logs.records.filter(_.message.toLowerCase.contains("fail"))
      assert(failing.isEmpty, s"records containing 'fail':${show(failing)}")
      val aboutIt = logs.records.filter(r => r.message.contains("ghost") || r.message.contains(uid))
      assert(aboutIt.forall(_.level >= NativeLog.INFO), show(aboutIt))
    } finally {
      sweeper.close()
      logs.close()
    }
  }

  test("(e) 403, 429 and 5xx answers each leave a WARN/ERROR summary with the status code and message") {
    val ns = unique("e-http")
    val cases = Seq(
      ("denied", 403, "Forbidden", "pods \"denied\" is forbidden: User \"server-e\" cannot delete resource \"pods\""),
      ("throttled", 429, "TooManyRequests", "too many requests, please slow down"),
      ("broken", 500, "InternalError", "etcdserver: request timed out"),
      ("unavailable", 503, "ServiceUnavailable", "the server is currently unable to handle the request")
    )
    cases.foreach { case (pod, code, reason, message) => kube.failDeletes(ns, pod, code, reason, message) }
    val logs = new LogCapture
    val sweeper = PodSweeper.create(kyuubiConfJava("server-e", unique("ha-e")), "server-e:10009")
    try {
      cases.foreach { case (pod, _, _, _) => observeTerminated(sweeper, null, ns, pod) }
      // Failures are summarised per outcome class (403; 429; 5xx), each summary quoting the first
      // failing pod of its class with the status code and the API's message.
      cases.groupBy(c => if (c._2 >= 500) 500 else c._2).values.foreach { klass =>
        val pods = klass.map(_._1)
        def context = s"pods $pods; status ${status(sweeper, null, ns)}; native records:${show(logs.records)}"
        eventually {
          val lines = logs.records.filter(r => r.warnOrError && pods.exists(p => r.message.contains(s"pod $p:")))
          assert(lines.exists(l => klass.exists { case (p, code, reason, message) =>
            l.message.contains(s"pod $p:") && l.message.contains(code.toString) &&
              (l.message.contains(message) || l.message.contains(reason))
          }), s"no summary with status code and message: $context")
          assert(lines.forall(_.message.contains("pod(s)")), s"a per-pod line: $context")
        }
      }
      val st = status(sweeper, null, ns)
      assert(st.outcome("forbidden") >= 1, st)
      assert(st.outcome("throttled") >= 1, st)
      assert(st.outcome("server_error") >= 2, st)
      cases.foreach { case (pod, _, _, _) => assert(kube.pod(kube.client("test-admin"), ns, pod).isEmpty) }
    } finally {
      sweeper.close()
      logs.close()
    }
  }

  test("(e) a transport failure (the connection closed without an answer) leaves a WARN/ERROR line") {
    val ns = unique("e-transport")
    val logs = new LogCapture
    // Every DELETE of the namespace is read, then its connection closed (the rest of the API works).
    kube.injectDeleteFaults(new DeleteFaults(throttledShare = 0.0, unavailableShare = 0.0,
      disconnectShare = 0.999, forbiddenForMs = 0L, namespaces = _ == ns))
    val sweeper = PodSweeper.create(kyuubiConfJava("server-e", unique("ha-e")), "server-e:10009")
    try {
      observeTerminated(sweeper, null, ns, "unreachable")
      def context = s"status ${status(sweeper, null, ns)}; native records:${show(logs.records)}"
      eventually {
        val lines = logs.records.filter(r => r.warnOrError && r.message.contains("unreachable"))
        assert(lines.nonEmpty, s"no WARN/ERROR line naming the pod: $context")
        val text = lines.map(_.message.toLowerCase).mkString("\n")
        assert(Seq("transport", "connect", "closed", "reset").exists(text.contains), s"no transport error: $context")
      }
      assert(status(sweeper, null, ns).outcome("transport") >= 1)
    } finally {
      kube.clearDeleteFaults()
      sweeper.close()
      logs.close()
    }
  }

  test("(e) a scope whose API server cannot be reached (a closed port) does not campaign: paused, then unhealthy") {
    val port = { val s = new ServerSocket(0); try s.getLocalPort finally s.close() }
    val ctx = "deadctx"
    val ns = unique("e-unreachable")
    val conf = kyuubiConf("server-e", unique("ha-e"), extra = Map(
      s"kyuubi.kubernetes.$ctx.master.address" -> s"http://127.0.0.1:$port",
      "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.health.alertAfter" -> "PT3S"))
    val sweeper = PodSweeper.create(toJava(conf), "server-e:10009")
    try {
      observeTerminated(sweeper, ctx, ns, "unreachable")
      val st = eventually {
        val st = status(sweeper, ctx, ns)
        assert(st.pauseReason == "cluster_identity" && st.fields().get("healthy") == java.lang.Boolean.FALSE, st)
        st
      }
      val text = st.json().toLowerCase
      assert(text.contains("connect"), s"the cause is quoted: $st")
      assert(st.leadership != "LEADING" && st.deletesSent == 0, st)
      assert(kube.podDeletes(ns).isEmpty)
    } finally {
      sweeper.close()
    }
  }

  private def toJava(m: Map[String, String]): java.util.Map[String, String] = {
    import scala.collection.JavaConverters._
    m.asJava
  }

  private def kyuubiConfJava(token: String, ha: String): java.util.Map[String, String] = toJava(kyuubiConf(token, ha))
}
