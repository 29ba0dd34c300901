package org.podsweep.realapi

import java.io.{BufferedReader, FileInputStream, InputStreamReader}
import java.net.URL
import java.nio.charset.StandardCharsets
import java.nio.file.Files
import java.security.KeyStore
import java.security.cert.CertificateFactory
import java.time.Instant
import java.time.temporal.ChronoUnit
import java.util.concurrent.{ConcurrentLinkedQueue, Executors, TimeUnit}
import javax.net.ssl.{HttpsURLConnection, SSLContext, TrustManagerFactory}

import scala.collection.JavaConverters._
import scala.util.Try

import io.fabric8.kubernetes.api.model.{Pod, PodBuilder}
import io.fabric8.kubernetes.client.KubernetesClient
import io.fabric8.kubernetes.client.informers.ResourceEventHandler
import org.podsweep.testkit.{KyuubiPods, LogicalServer, RealKube}
import org.scalatest.concurrent.Eventually._
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * Where a real kube-apiserver (v1.34.4, [[RealKube]], a control plane of this suite's own)
 * differs from the fakes podsweep was tested against until now, in ways that matter to podsweep:
 * the fabric8 CRUD mock ([[org.podsweep.testkit.MockKube]]) and our pods API server
 * ([[org.podsweep.testkit.PodsApi]]). One test per difference; each asserts what the real server
 * does. (The fakes' side is from their code and their own suites, not re-run here.)
 *
 *  1. Status on create: a pod created with a status (phase Succeeded) is stored `Pending`; only
 *     the `pods/status` subresource sets it, as a kubelet does, and its times in whole seconds (a
 *     `finishedAt` loses its milliseconds). The mock and PodsApi keep the status a client sends
 *     with the pod, as sent.
 *  1. Graceful deletion: a DELETE of a `Running` pod bound to a node answers 200 with the pod,
 *     which stays, Terminating (`deletionTimestamp` = now + 30 s, `deletionGracePeriodSeconds`
 *     30); informers see an update, no delete, and without a kubelet it never goes. The mock
 *     removes the pod at once; PodsApi removes it after `kubeletConfirmMs` (2 s) by itself.
 *  1. A repeated DELETE of a Terminating pod answers 200 and changes nothing (same
 *     resourceVersion, same `deletionTimestamp`). The mock, having removed the pod, answers 404.
 *  1. A UID precondition that fails: 409 `Conflict`, message "the UID in the precondition (old)
 *     does not match the UID in record (new). The object might have been deleted and then
 *     recreated", `details.kind` `Pod`. PodsApi writes the older wording ("Precondition failed:
 *     UID in precondition: ..., UID in object meta: ...") and `details.kind` `pods`.
 *  1. API Priority and Fairness: a rejected request is answered 429 with a `Retry-After` in whole
 *     seconds and a plain-text body ("Too many requests, please try again later."), not a
 *     `Status`; the audit log records it. The fakes' injected 429s carry a JSON `Status` and the
 *     `Retry-After` the test chose.
 *  1. Under sustained rejection APF's `Retry-After` grows (we saw 1, 2, 4, 8 s for bursts every
 *     half second): it is computed from the priority level's recent rejections. The fakes answer
 *     the constant the test chose.
 *  1. Watch bookmarks: sent only when asked (`allowWatchBookmarks`), and sparsely: on a quiet
 *     watch the first comes about 2 s before its `timeoutSeconds` ends (or after a minute), not
 *     after each quiet second as PodsApi sends them.
 *  1. Dry runs: a DELETE whose DeleteOptions body says `dryRun: [All]` (as kube-rs, so podsweep's
 *     `dryRun` mode, sends it) answers 200 with what it would have done (a graceful pod shows a
 *     `deletionTimestamp`) and nothing changes. A `?dryRun=All` in the query string is ignored
 *     when the request has a body: the pod is deleted for real. PodsApi ignores `dryRun` and
 *     deletes.
 *  1. Finalizers of a Terminating pod bound to a node: removing them does not remove the pod; its
 *     kubelet still has to (a DELETE with grace 0). An unscheduled pod goes as soon as its last
 *     finalizer is removed. PodsApi removes either at once.
 */
class RealVsFakesSuite extends AnyFunSuite with BeforeAndAfterAll {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(60, Seconds), Span(100, Millis))

  // A control plane of its own: no kubelet stand-in ([[RealKube.startNodeSim]]) may finish the
  // graceful deletions this suite watches, whatever other suites of the JVM started.
  private var kubeOpt: Option[RealKube] = None
  private def kube: RealKube = synchronized {
    kubeOpt.getOrElse {
      val k = new RealKube(Files.createTempDirectory("podsweep-kube-rvf-"))
      kubeOpt = Some(k)
      k
    }
  }
  override protected def afterAll(): Unit = try kubeOpt.foreach(_.close()) finally super.afterAll()
  private lazy val admin: KubernetesClient = kube.admin
  import RealApi._

  private def needKube(): Unit = RealKube.missing.foreach(w => cancel(w))

  private def ns(n: String): String = { kube.ensureNamespace(n); n }

  private def async[T](pool: java.util.concurrent.ExecutorService)(f: => T): java.util.concurrent.Future[T] =
    pool.submit(new java.util.concurrent.Callable[T] { override def call(): T = f })

  /**
   * `n` requests at once; the answers that arrived. The test's okhttp client (HTTP/2) now and then
   * reports a 429 the server sent before reading the request body as a stream reset (NO_ERROR):
   * such requests are left out (the server's own record of them is the audit log).
   */
  private def burst(pool: java.util.concurrent.ExecutorService, n: Int)(f: Int => Answer): Seq[Answer] =
    (0 until n).map(i => async(pool)(f(i))).flatMap(x => Try(x.get(60, TimeUnit.SECONDS)).toOption)

  /** The pod of an answer body. */
  private def podOf(a: Answer): Pod = io.fabric8.kubernetes.client.utils.Serialization.unmarshal(a.body, classOf[Pod])

  test("1. a pod created with a status is stored Pending; only pods/status sets the phase, in whole seconds") {
    needKube()
    val n = ns("rvf-status")
    val finished = Instant.now().truncatedTo(ChronoUnit.SECONDS).plusMillis(807)
    val asked = KyuubiPods.terminated(KyuubiPods.driver("created-succeeded"), succeeded = true, finished)
    val created = admin.pods().inNamespace(n).resource(asked).create()
    assert(created.getStatus.getPhase == "Pending" && created.getStatus.getContainerStatuses.isEmpty, created.getStatus)
    assert(get(admin, n, "created-succeeded").exists(_.getStatus.getPhase == "Pending"))
    val written = admin.pods().inNamespace(n).resource(new PodBuilder(created).withStatus(asked.getStatus).build()).updateStatus()
    assert(written.getStatus.getPhase == "Succeeded")
    // Times are kept in whole seconds: the driver's finishedAt loses its milliseconds.
    assert(KyuubiPods.terminatedAtMillis(written) == KyuubiPods.terminatedAtMillis(asked) / 1000 * 1000)
  }

  test("2. a DELETE of a Running pod bound to a node: 200, Terminating for its grace period, an update and no delete event") {
    needKube()
    val n = ns("rvf-graceful")
    val events = new ConcurrentLinkedQueue[String]()
    val informer = admin.pods().inNamespace(n).inform(new ResourceEventHandler[Pod] {
      override def onAdd(p: Pod): Unit = events.add(s"ADD ${p.getMetadata.getName}")
      override def onUpdate(o: Pod, p: Pod): Unit =
        events.add(s"UPDATE ${p.getMetadata.getName} deleting=${p.getMetadata.getDeletionTimestamp != null}")
      override def onDelete(p: Pod, unknown: Boolean): Unit = events.add(s"DELETE ${p.getMetadata.getName}")
    }, 0L)
    try {
      val p = kube.createPod(admin, n, KyuubiPods.driver("running-on-node", nodeName = Some("node-1")))
      assert(p.getStatus.getPhase == "Running")
      val before = Instant.now().truncatedTo(ChronoUnit.SECONDS)
      val a = deletePod(kube, admin, n, "running-on-node", Some(p.getMetadata.getUid))
      assert(a.code == 200, a)
      val answered = podOf(a)
      assert(answered.getKind == "Pod" && answered.getMetadata.getDeletionGracePeriodSeconds == 30L, a.body.take(300))
      val ts = Instant.parse(answered.getMetadata.getDeletionTimestamp)
      assert(!ts.isBefore(before.plusSeconds(30)) && !ts.isAfter(Instant.now().plusSeconds(31)), ts)
      eventually(assert(events.asScala.toSeq.contains("UPDATE running-on-node deleting=true"), events))
      // A pod created after the DELETE's answer is a barrier: the watch sends the namespace's
      // events in resourceVersion order, so once the informer has the barrier it has every event
      // the server wrote for the Terminating pod before it (a delete there would be among them).
      kube.createPod(admin, n, KyuubiPods.driver("barrier", phase = "Pending"))
      eventually(assert(events.asScala.toSeq.contains("ADD barrier"), events))
      assert(get(admin, n, "running-on-node").exists(_.getMetadata.getDeletionTimestamp != null))
      assert(!events.asScala.exists(_.startsWith("DELETE")), events)
      // The kubelet's part: grace 0 with the UID.
      val (code, _) = kube.deletePod(admin, n, "running-on-node", Some(p.getMetadata.getUid), Some(0L))
      assert(code == 200)
      eventually(assert(events.asScala.toSeq.contains("DELETE running-on-node")))
      // A Running pod that is not bound to a node goes at once.
      val loose = kube.createPod(admin, n, KyuubiPods.driver("running-unscheduled"))
      assert(loose.getStatus.getPhase == "Running")
      assert(deletePod(kube, admin, n, "running-unscheduled", Some(loose.getMetadata.getUid)).code == 200)
      assert(get(admin, n, "running-unscheduled").isEmpty)
    } finally informer.stop()
  }

  test("3. a repeated DELETE of a Terminating pod answers 200 and changes nothing") {
    needKube()
    val n = ns("rvf-repeat")
    val p = kube.createPod(admin, n, KyuubiPods.driver("terminating", nodeName = Some("node-1")))
    val uid = p.getMetadata.getUid
    val first = deletePod(kube, admin, n, "terminating", Some(uid))
    assert(first.code == 200)
    val stored = get(admin, n, "terminating").get
    Thread.sleep(1100) // a later second: a new deletionTimestamp would differ
    val again = deletePod(kube, admin, n, "terminating", Some(uid))
    assert(again.code == 200, again)
    val after = get(admin, n, "terminating").get
    assert(after.getMetadata.getResourceVersion == stored.getMetadata.getResourceVersion)
    assert(after.getMetadata.getDeletionTimestamp == stored.getMetadata.getDeletionTimestamp)
    assert(podOf(again).getMetadata.getResourceVersion == stored.getMetadata.getResourceVersion)
    kube.deletePod(admin, n, "terminating", Some(uid), Some(0L))
  }

  test("4. a UID precondition that fails: 409 Conflict naming both UIDs; the pod stays") {
    needKube()
    val n = ns("rvf-conflict")
    val p = kube.createPod(admin, n, KyuubiPods.driver("recreated"))
    val uid = p.getMetadata.getUid
    val stale = "00000000-0000-0000-0000-000000000000"
    val a = deletePod(kube, admin, n, "recreated", Some(stale))
    assert(a.code == 409, a)
    val s = a.bodyJson
    assert(s.path("kind").asText() == "Status" && s.path("reason").asText() == "Conflict", a.body)
    assert(s.path("message").asText() == s"""Operation cannot be fulfilled on Pod "recreated": the UID in the precondition ($stale) """ +
      s"does not match the UID in record ($uid). The object might have been deleted and then recreated", a.body)
    assert(s.path("details").path("kind").asText() == "Pod" && s.path("details").path("name").asText() == "recreated", a.body)
    assert(get(admin, n, "recreated").exists(_.getMetadata.getUid == uid))
    assert(deletePod(kube, admin, n, "recreated", Some(uid)).code == 200)
  }

  test("5. APF: a rejected DELETE is 429 with a Retry-After in whole seconds and a plain-text body; the audit log records it") {
    needKube()
    val n = ns("rvf-apf")
    val sa = "rvf-apf-probe"
    val client = kube.client(sa)
    val throttle = new Throttle(kube, "podsweep-realapi-rvf", Seq(RealKube.ServersNamespace -> sa))
    val pool = Executors.newFixedThreadPool(20)
    try {
      eventually(assert(throttle.active(client, n)))
      val answers = burst(pool, 20)(i => deletePod(kube, client, n, s"absent-$i", None))
      val rejected = answers.filter(_.code == 429)
      info(s"20 concurrent DELETEs: ${answers.groupBy(_.code).map { case (c, v) => s"$c x ${v.size}" }.mkString(", ")}" +
        s" (${20 - answers.size} lost by the test's HTTP/2 client)")
      assert(rejected.nonEmpty && answers.forall(a => a.code == 429 || a.code == 404), answers.map(_.code))
      info(s"Retry-After of the 429s: ${rejected.flatMap(_.header("Retry-After")).groupBy(identity).mapValues(_.size)}")
      rejected.foreach { a =>
        assert(a.header("Retry-After").exists(v => v.forall(Character.isDigit) && v.toInt >= 1), a.headers)
        assert(a.header("Content-Type").exists(_.startsWith("text/plain")), a.headers)
        assert(a.body.trim == "Too many requests, please try again later.", a.body)
        assert(a.header("X-Kubernetes-PF-FlowSchema-UID").contains(throttle.uid))
      }
      val user = saUser(RealKube.ServersNamespace, sa)
      eventually(assert(audited(kube).count(e => e.user == user && e.namespace == n && e.code == 429) >= rejected.size))
    } finally {
      throttle.close()
      pool.shutdownNow()
      client.close()
    }
  }

  test("6. APF: under sustained rejection the Retry-After grows (1, 2, 4 s ...), not a constant") {
    needKube()
    val n = ns("rvf-apf-sustained")
    val sa = "rvf-apf-sustained"
    val client = kube.client(sa)
    val throttle = new Throttle(kube, "podsweep-realapi-rvf-sustained", Seq(RealKube.ServersNamespace -> sa))
    val pool = Executors.newFixedThreadPool(12)
    try {
      eventually(assert(throttle.active(client, n)))
      // A burst of 12 concurrent DELETEs every half second for 8 s, whatever the server says.
      val rounds = (0 until 16).map { r =>
        val answers = burst(pool, 12)(i => deletePod(kube, client, n, s"absent-$r-$i", None))
        Thread.sleep(500)
        answers.filter(_.code == 429).flatMap(_.header("Retry-After")).map(_.toInt)
      }
      info(s"Retry-After per round: ${rounds.map(_.distinct.mkString("/")).mkString(" ")}")
      val all = rounds.flatten
      assert(all.nonEmpty && all.forall(_ >= 1))
      assert(all.max > all.head, s"Retry-After stayed at ${all.distinct}")
    } finally {
      throttle.close()
      pool.shutdownNow()
      client.close()
    }
  }

  /** A TLS context trusting only the control plane's CA. */
  private lazy val tls: SSLContext = {
    val cert = CertificateFactory.getInstance("X.509").generateCertificate(new FileInputStream(kube.caFile))
    val ks = KeyStore.getInstance(KeyStore.getDefaultType)
    ks.load(null, null)
    ks.setCertificateEntry("ca", cert)
    val tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm)
    tmf.init(ks)
    val ctx = SSLContext.getInstance("TLS")
    ctx.init(null, tmf.getTrustManagers, null)
    ctx
  }

  /** The lines of a watch stream, each with the milliseconds since the request, until it ends. */
  private def watchLines(path: String, token: String): Seq[(Long, String)] = {
    val c = new URL(kube.url + path).openConnection().asInstanceOf[HttpsURLConnection]
    c.setSSLSocketFactory(tls.getSocketFactory)
    c.setRequestProperty("Authorization", s"Bearer $token")
    c.setReadTimeout(60000)
    val start = System.currentTimeMillis()
    val in = new BufferedReader(new InputStreamReader(c.getInputStream, StandardCharsets.UTF_8))
    try Iterator.continually(in.readLine()).takeWhile(_ != null).map(l => (System.currentTimeMillis() - start) -> l).toVector
    finally in.close()
  }

  test("7. watch bookmarks: only when asked, and the first on a quiet watch ~2 s before its timeout, not after each quiet second") {
    needKube()
    val quiet = ns("rvf-bookmarks")
    val busy = ns("rvf-bookmarks-churn")
    val (token, _) = kube.serviceAccountToken("rvf-watcher")
    val rv = admin.pods().inNamespace(quiet).list().getMetadata.getResourceVersion
    val pool = Executors.newFixedThreadPool(2)
    try {
      val withBookmarks = async(pool)(
        watchLines(s"/api/v1/namespaces/$quiet/pods?watch=true&allowWatchBookmarks=true&timeoutSeconds=12&resourceVersion=$rv", token))
      val without = async(pool)(
        watchLines(s"/api/v1/namespaces/$quiet/pods?watch=true&timeoutSeconds=12&resourceVersion=$rv", token))
      // Pods written elsewhere move the resource version on (a bookmark carries a newer one).
      (0 until 10).foreach { i =>
        kube.createPod(admin, busy, KyuubiPods.driver(s"churn-$i", phase = "Pending"))
        admin.pods().inNamespace(busy).withName(s"churn-$i").withGracePeriod(0).delete()
        Thread.sleep(1000)
      }
      val a = withBookmarks.get(60, TimeUnit.SECONDS)
      val b = without.get(60, TimeUnit.SECONDS)
      val marks = a.filter(_._2.contains("\"type\":\"BOOKMARK\""))
      info(s"bookmarks at ${marks.map(_._1).mkString(", ")} ms of a 12-s watch; ${a.size - marks.size} other lines")
      assert(marks.nonEmpty, a)
      assert(a.size == marks.size, s"events on a quiet namespace: $a")
      assert(marks.head._1 > 5000, s"first bookmark after ${marks.head._1} ms")
      assert(b.isEmpty, s"a watch that did not ask got: $b")
    } finally pool.shutdownNow()
  }

  test("8. dryRun: in the DeleteOptions body nothing changes; in the query string beside a body it is ignored; podsweep's dryRun deletes nothing") {
    needKube()
    val n = ns("rvf-dryrun")
    // In the body (as kube-rs sends it): 200 with what would happen, nothing changes.
    val graceful = kube.createPod(admin, n, KyuubiPods.driver("dry-graceful", nodeName = Some("node-1")))
    val a = deletePod(kube, admin, n, "dry-graceful", Some(graceful.getMetadata.getUid), dryRun = true)
    assert(a.code == 200 && podOf(a).getMetadata.getDeletionTimestamp != null, a.body.take(300))
    val stored = get(admin, n, "dry-graceful").get
    assert(stored.getMetadata.getDeletionTimestamp == null &&
      stored.getMetadata.getResourceVersion == graceful.getMetadata.getResourceVersion)
    // `?dryRun=All` with a DeleteOptions body: the body's options win, the pod is deleted for real.
    val done = terminate(admin, n, kube.createPod(admin, n, KyuubiPods.driver("dry-query")), succeeded = true, Instant.now())
    val q = deletePod(kube, admin, n, "dry-query", Some(done.getMetadata.getUid), query = "?dryRun=All")
    assert(q.code == 200, q)
    assert(get(admin, n, "dry-query").isEmpty, "a query-string dryRun beside a body was honoured")
    // podsweep with dryRun=true (local mode): "Would delete", every pod kept.
    val server = new LogicalServer("rvf-dry-run", kube, kube.clientConf("rvf-dry-run") ++ Map(
      P + "kind" -> "ALL",
      P + "dryRun" -> "true",
      "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "1000"))
    try {
      server.watch(n)
      val at = Instant.now().truncatedTo(ChronoUnit.SECONDS)
      val names = (0 until 3).map(i => s"dry-$i")
      names.foreach(name => terminate(admin, n, kube.createPod(admin, n, KyuubiPods.driver(name)), succeeded = true, at))
      val user = saUser(RealKube.ServersNamespace, "rvf-dry-run")
      def sent = audited(kube).filter(e => e.user == user && e.namespace == n && e.verb == "delete")
      eventually(assert(sent.size == names.size))
      // podsweep has settled every pod (each DELETE answered, nothing tracked, in flight or
      // queued): it sends nothing more until a pod changes, and a dry run changes none. The audit
      // log is written before each answer (blocking mode).
      eventually {
        val st = server.status(n)
        assert(st.deletesSent == names.size && st.tracked == 0 && st.inflight == 0 && st.number("queued") == 0, st)
      }
      assert(sent.size == names.size && sent.forall(_.code == 200), sent)
      assert(names.forall(name => get(admin, n, name).exists(_.getMetadata.getDeletionTimestamp == null)),
        "podsweep's dry run deleted a pod")
      assert(outcomes(server.status(n))("accepted") == names.size)
    } finally server.close()
  }

  test("9. removing the finalizer of a Terminating pod bound to a node leaves it to the kubelet; an unscheduled one goes at once") {
    needKube()
    val n = ns("rvf-finalizer")
    val hold = Seq("podsweep.test/hold")
    val bound = kube.createPod(admin, n, KyuubiPods.driver("held-bound", nodeName = Some("node-1"), finalizers = hold))
    val loose = kube.createPod(admin, n, KyuubiPods.driver("held-unscheduled", finalizers = hold))
    Seq(bound, loose).foreach(p => assert(deletePod(kube, admin, n, p.getMetadata.getName, Some(p.getMetadata.getUid)).code == 200))
    val looseNow = get(admin, n, "held-unscheduled").get
    assert(looseNow.getMetadata.getDeletionGracePeriodSeconds == 0L, looseNow.getMetadata)
    Seq("held-bound", "held-unscheduled").foreach(dropFinalizers(admin, n, _))
    // The server decides within the update that removes the last finalizer: a pod whose grace
    // period is 0 goes then (the unscheduled one), any other waits for its kubelet (no
    // controller-manager runs here, so nothing else would delete it later).
    assert(get(admin, n, "held-unscheduled").isEmpty, "an unscheduled pod stayed after its last finalizer went")
    val boundNow = get(admin, n, "held-bound").getOrElse(fail("a node-bound pod went without its kubelet"))
    assert(boundNow.getMetadata.getDeletionTimestamp != null && boundNow.getMetadata.getFinalizers.isEmpty)
    assert(kube.deletePod(admin, n, "held-bound", Some(bound.getMetadata.getUid), Some(0L))._1 == 200)
    eventually(assert(get(admin, n, "held-bound").isEmpty))
  }
}
