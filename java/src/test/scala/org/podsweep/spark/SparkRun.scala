package org.podsweep.spark

import java.net.ServerSocket
import java.nio.file.{Files, Path}

import scala.collection.JavaConverters._
import scala.collection.mutable

import io.fabric8.kubernetes.api.model.{HasMetadata, Pod}
import io.fabric8.kubernetes.api.model.rbac.{PolicyRuleBuilder, RoleBindingBuilder, RoleBuilder}
import io.fabric8.kubernetes.client.{KubernetesClient, KubernetesClientException}
import org.podsweep.testkit.{HaBackend, KyuubiBatch, KyuubiHome, KyuubiRest, KyuubiServer, RealKube, SparkExecutors, SparkHome}

/**
 * Spark batches submitted through Kyuubi's REST API on a fleet of real Kyuubi servers (whole
 * servers: REST frontend, a shared metadata store, HA on the given ZooKeeper or etcd), on a full
 * control plane (`scripts/kube up --cluster`: scheduler, KWOK nodes, garbage collector, PodGC).
 *
 * Each batch is `POST /api/v1/batches` (type SPARK, SparkPi, cluster mode against the API server);
 * Kyuubi runs spark-submit (scripts/spark's SPARK_HOME), Spark creates the driver pod, its
 * ConfigMap and its Service; the scheduler binds the driver to a KWOK node, KWOK runs it and ends
 * it (annotation `podsweep.test/succeed-after`). Once a driver runs, its executors are made as
 * Spark's allocator makes them ([[SparkExecutors]]). Some batches are canceled through
 * `DELETE /api/v1/batches/<id>` while their driver runs. Then the cleanup is measured from the audit
 * log (DELETEs per driver pod, by whom) and the API (what the garbage collector left).
 *
 * # Guarantees
 * Every figure is read, not assumed: DELETEs from the API server's audit log, leftovers from the
 * API; the run waits for each event (a driver running, gone, its dependents gone, the servers idle)
 * up to a deadline, never for a fixed time.
 *
 * # Caveats
 * Nothing runs in the pods (no container runtime): KWOK writes their statuses; the executors are
 * not made by a running driver but for it.
 */
object SparkRun {
  final case class Spec(
      kind: KyuubiHome.Kind,
      namespace: String,
      logDir: Path,
      servers: Int = 3,
      batches: Int = 4,
      canceled: Int = 2,
      executors: Int = 2,
      succeedAfter: String = "6s",
      retainMs: Long = 2000,
      deadlineMs: Long = 300000,
      progress: String => Unit = _ => ())

  /** One batch as the run saw it; times in epoch milliseconds. */
  final case class BatchRun(
      id: String,
      server: String,
      cancel: Boolean,
      submittedAt: Long,
      var pod: Option[String] = None,
      var uid: Option[String] = None,
      var appId: Option[String] = None,
      var runningAt: Option[Long] = None,
      var executors: Int = 0,
      var configMaps: Int = 0,
      var services: Int = 0,
      var canceledAt: Option[Long] = None,
      var succeededAt: Option[Long] = None,
      var goneAt: Option[Long] = None,
      var dependentsGoneAt: Option[Long] = None,
      var state: Option[KyuubiBatch] = None) {
    def done: Boolean = state.exists(_.terminal) && (dependentsGoneAt.isDefined || uid.isEmpty)
    /** Kyuubi ended the batch before Spark made a driver pod (spark-submit failed). */
    def submitFailed: Boolean = uid.isEmpty && state.exists(_.terminal)
  }

  /** A pod DELETE of the run, from the audit log: which pod, who, answer, when. */
  final case class Delete(pod: String, user: String, code: Int, atMillis: Long)

  final case class Result(spec: Spec, apiServer: String, batches: Seq[BatchRun], deletes: Seq[Delete], servers: Seq[String],
      ownedDeletes: Seq[(String, Delete)] = Nil) {
    /** ConfigMaps and Services of the namespace the garbage collector deleted (audit log): resource -> count. */
    def gcDeletedOwned: Map[String, Int] = ownedDeletes.filter(d => isGc(d._2.user)).groupBy(_._1).map { case (r, ds) => r -> ds.size }
    private def byServer(d: Delete): Boolean = servers.exists(s => RealKube.identityOf(d.user) == RealKube.saName(s))
    def drivers: Seq[BatchRun] = batches.filter(_.pod.isDefined)
    def driverNames: Set[String] = drivers.flatMap(_.pod).toSet
    /** DELETEs of driver pods sent by the Kyuubi servers (podsweep's or Kyuubi's own), per pod. */
    def serverDeletes(pod: String): Seq[Delete] = deletes.filter(d => d.pod == pod && byServer(d))
    def perDriver(of: Seq[BatchRun]): Seq[Int] = of.flatMap(_.pod).map(p => serverDeletes(p).size)
    def completed: Seq[BatchRun] = batches.filterNot(_.cancel)
    def canceled: Seq[BatchRun] = batches.filter(_.cancel)
    /** Who else deleted pods of the run: user -> count (the garbage collector, PodGC, KWOK). */
    def othersByUser: Map[String, Int] = deletes.filterNot(byServer).groupBy(_.user).map { case (u, ds) => u -> ds.size }
    def isPodGc(user: String): Boolean = user.contains("pod-garbage-collector")
    def isGc(user: String): Boolean = user.contains("generic-garbage-collector")
    /** PodGC's DELETEs of driver pods podsweep also deleted (a double delete), none expected. */
    def podGcDoubles: Int = drivers.count(b => b.pod.exists(p => serverDeletes(p).nonEmpty &&
      deletes.exists(d => d.pod == p && isPodGc(d.user))))
    def executorsMade: Int = batches.map(_.executors).sum
    def configMapsMade: Int = batches.map(_.configMaps).sum
    def servicesMade: Int = batches.map(_.services).sum
    /** Milliseconds from a driver's gone to its last dependent gone (the garbage collector's time). */
    def gcMillis: Seq[Long] = drivers.flatMap(b => for (g <- b.goneAt; d <- b.dependentsGoneAt) yield d - g)
    /** Milliseconds from `DELETE /api/v1/batches/<id>` to the driver pod gone. */
    def cancelMillis: Seq[Long] = canceled.flatMap(b => for (c <- b.canceledAt; g <- b.goneAt) yield g - c)
    /** Milliseconds from a completed driver's Succeeded to its pod gone (retain period included). */
    def cleanupMillis: Seq[Long] = completed.flatMap(b => for (s <- b.succeededAt; g <- b.goneAt) yield g - s)
    def submitFailures: Int = batches.count(_.submitFailed)
    def states: Map[String, Int] = batches.groupBy(_.state.map(_.state).getOrElse("?")).map { case (s, bs) => s -> bs.size }
  }

  /** Leftovers of the run's applications now: (executors, ConfigMaps, Services). */
  final case class Leftovers(executors: Int, configMaps: Int, services: Int)

  private def freePort(): Int = { val s = new ServerSocket(0); try s.getLocalPort finally s.close() }

  private def ignoreConflict[A](f: => A): Unit =
    try f catch { case e: KubernetesClientException if e.getCode == 409 => () }

  /**
   * The ServiceAccount `spark` of `ns`: spark-submit's identity and the driver's (which makes the
   * executors), with a Role of what Spark's documentation asks for the driver's account: pods,
   * ConfigMaps, Services and PersistentVolumeClaims in the namespace. (Not the `edit` ClusterRole:
   * it is aggregated by a controller this control plane does not run.)
   */
  def sparkIdentity(kube: RealKube, ns: String): Path = {
    kube.ensureNamespace(ns)
    val (_, tokenFile) = kube.serviceAccountToken("spark", ns)
    ignoreConflict(kube.admin.rbac().roles().inNamespace(ns).resource(new RoleBuilder()
      .withNewMetadata().withName("spark").endMetadata()
      .withRules(new PolicyRuleBuilder().withApiGroups("")
        .withResources("pods", "configmaps", "services", "persistentvolumeclaims")
        .withVerbs("create", "get", "list", "watch", "update", "patch", "delete", "deletecollection").build())
      .build()).create())
    ignoreConflict(kube.admin.rbac().roleBindings().inNamespace(ns).resource(new RoleBindingBuilder()
      .withNewMetadata().withName("spark").endMetadata()
      .withNewRoleRef("rbac.authorization.k8s.io", "Role", "spark")
      .addNewSubject().withKind("ServiceAccount").withName("spark").withNamespace(ns).endSubject()
      .build()).create())
    tokenFile
  }

  /** The batch's Spark conf: SparkPi's cluster-mode submission to this API server. */
  def batchConf(kube: RealKube, ns: String, tokenFile: Path, succeedAfter: Option[String], executors: Int): Map[String, String] = Map(
    "spark.master" -> s"k8s://${kube.url}",
    "spark.submit.deployMode" -> "cluster",
    "spark.kubernetes.namespace" -> ns,
    "spark.kubernetes.container.image" -> s"apache/spark:${SparkHome.Version}",
    "spark.kubernetes.authenticate.driver.serviceAccountName" -> "spark",
    "spark.kubernetes.authenticate.submission.caCertFile" -> kube.caFile,
    "spark.kubernetes.authenticate.submission.oauthTokenFile" -> tokenFile.toString,
    "spark.executor.instances" -> executors.toString,
    // Spark's client waits 10 s for a connection and an answer by default: too short on a loaded
    // 2-core machine running the whole control plane and three Kyuubi servers.
    "spark.kubernetes.submission.connectionTimeout" -> "60000",
    "spark.kubernetes.submission.requestTimeout" -> "60000") ++
    succeedAfter.map(d => "spark.kubernetes.driver.annotation.podsweep.test/succeed-after" -> d)

  /** The fleet's KyuubiConf: whole servers, REST on, one metadata store, Spark found at [[SparkHome]]. */
  def serverConf(spec: Spec, kube: RealKube, ha: HaBackend, name: String, dir: Path): Map[String, String] = {
    val P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
    val selfWatch = if (spec.kind == KyuubiHome.Dropin) Map(P + "kind" -> "NONE", P + "watch.kind" -> "ALL") else Map.empty
    KyuubiServer.conf(name, kube, Seq(spec.namespace), spec.retainMs) ++ ha.kyuubiConf ++ Map(
      "kyuubi.ha.namespace" -> s"kyuubi-${spec.namespace}",
      "kyuubi.frontend.protocols" -> "THRIFT_BINARY,REST",
      "kyuubi.frontend.bind.host" -> "127.0.0.1",
      "kyuubi.frontend.thrift.binary.bind.port" -> "0",
      "kyuubi.frontend.rest.bind.port" -> freePort().toString,
      "kyuubi.metadata.store.jdbc.url" -> s"jdbc:sqlite:${dir.resolve("metadata.db")}",
      "kyuubi.metrics.enabled" -> "false",
      "kyuubi.engineEnv.SPARK_HOME" -> SparkHome.dir.getAbsolutePath,
      "kyuubi.engineEnv.KYUUBI_WORK_DIR_ROOT" -> dir.resolve(s"work-$name").toString,
      // spark-submit returns once the driver's objects exist; Kyuubi then follows the pod.
      "kyuubi.session.engine.startup.waitCompletion" -> "false",
      "kyuubi.batch.application.check.interval" -> "1000") ++ selfWatch
  }

  def restUrl(conf: Map[String, String]): String = s"http://127.0.0.1:${conf("kyuubi.frontend.rest.bind.port")}"

  private def owned(o: HasMetadata, uid: String): Boolean =
    Option(o.getMetadata.getOwnerReferences).exists(_.asScala.exists(_.getUid == uid))

  def leftovers(admin: KubernetesClient, ns: String, drivers: Seq[BatchRun]): Leftovers = {
    val uids = drivers.flatMap(_.uid).toSet
    val apps = drivers.flatMap(_.appId).toSet
    val pods = admin.pods().inNamespace(ns).list().getItems.asScala
    Leftovers(
      pods.count(p => Option(p.getMetadata.getLabels).exists(l => l.get("spark-role") == "executor" && apps.contains(l.get("spark-app-selector")))),
      admin.configMaps().inNamespace(ns).list().getItems.asScala.count(c => uids.exists(owned(c, _))),
      admin.services().inNamespace(ns).list().getItems.asScala.count(s => uids.exists(owned(s, _))))
  }

  /** Runs the batches on a fleet started here, stops it, returns what was measured. */
  def run(spec: Spec, kube: RealKube, ha: HaBackend): Result = {
    Seq(KyuubiHome.missing(spec.kind), SparkHome.missing).flatten.headOption
      .foreach(w => throw new IllegalStateException(s"cannot run Spark batches: $w"))
    val ns = spec.namespace
    val admin = kube.admin
    val dir = spec.logDir.toAbsolutePath.resolve(s"${ns}-${System.currentTimeMillis()}")
    Files.createDirectories(dir)
    val tokenFile = sparkIdentity(kube, ns)
    val driverClient = kube.serviceAccountClient("spark", ns)
    val started = mutable.ArrayBuffer.empty[(KyuubiServer, KyuubiRest)]
    try {
      // One after the other: each initializes the shared metadata store's schema.
      (1 to spec.servers).foreach { i =>
        val name = s"$ns-$i"
        val conf = serverConf(spec, kube, ha, name, dir)
        started += new KyuubiServer(name, spec.kind, conf, dir, heapMb = 512, mode = KyuubiHome.WholeServer) -> new KyuubiRest(restUrl(conf))
      }
      val fleet = started.toVector
      spec.progress(s"${fleet.size} whole ${spec.kind.label} servers with the REST frontend on (logs in $dir)")
      val total = spec.batches + spec.canceled
      // One spark-submit at a time, submitted by the follow loop (the next batch once the previous
      // one's driver pod exists, or Kyuubi ended it): each is a JVM of its own, and a 2-core machine
      // runs the control plane too; the loop sees every driver from its start.
      def submit(i: Int): BatchRun = {
        val (server, rest) = fleet(i % fleet.size)
        val cancel = i >= spec.batches
        val conf = batchConf(kube, ns, tokenFile, if (cancel) None else Some(spec.succeedAfter), spec.executors)
        val b = rest.submit(f"sparkpi-$i%02d", "org.apache.spark.examples.SparkPi",
          SparkHome.examplesResource, conf, Seq("10"))
        BatchRun(b.id, server.name, cancel, System.currentTimeMillis())
      }
      val restOf = fleet.map { case (s, r) => s.name -> r }.toMap
      val batches = follow(spec, admin, driverClient, total, submit, restOf)
      spec.progress(s"$total batches submitted through POST /api/v1/batches (${spec.canceled} canceled) and followed to their end")
      // The servers hold nothing more to delete: no DELETE can follow.
      val deadline = System.currentTimeMillis() + 60000
      def idle = fleet.forall { case (s, _) => s.statusOf(ns).forall(st => st.tracked() == 0 && st.inflight() == 0 && st.number("queued") == 0) }
      while (!idle && System.currentTimeMillis() < deadline) Thread.sleep(200)
      val deletes = kube.audit.filter(e => e.verb == "delete" && e.resource == "pods" && e.subresource.isEmpty &&
          e.namespace == ns && e.stage == "ResponseComplete")
        .map(e => Delete(e.name, e.user, e.code, e.atMillis))
      val ownedDeletes = kube.audit.filter(e => e.verb == "delete" && (e.resource == "configmaps" || e.resource == "services") &&
          e.namespace == ns && e.stage == "ResponseComplete")
        .map(e => e.resource -> Delete(e.name, e.user, e.code, e.atMillis))
      Result(spec, kube.name, batches, deletes, fleet.map(_._1.name), ownedDeletes)
    } finally {
      started.foreach { case (s, _) => scala.util.Try(s.close()) }
      driverClient.close()
    }
  }

  /** Follows every batch to its end: driver running, executors made, canceled or succeeded, gone, dependents gone. */
  private def follow(spec: Spec, admin: KubernetesClient, driverClient: KubernetesClient, total: Int,
      submit: Int => BatchRun, rest: Map[String, KyuubiRest]): Seq[BatchRun] = {
    val ns = spec.namespace
    val batches = mutable.ArrayBuffer.empty[BatchRun]
    val deadline = System.currentTimeMillis() + spec.deadlineMs
    while (batches.size < total || !batches.forall(_.done)) {
      val last = batches.lastOption
      if (batches.size < total && last.forall(l => l.uid.isDefined || l.submitFailed || System.currentTimeMillis() - l.submittedAt > 180000))
        batches += submit(batches.size)
      if (System.currentTimeMillis() > deadline) {
        val stuck = batches.filterNot(_.done).map(b => s"${b.id} on ${b.server}: $b; log: " +
          scala.util.Try(rest(b.server).localLog(b.id, 30).mkString(" | ")).getOrElse("?"))
        throw new IllegalStateException(s"batches not done within ${spec.deadlineMs} ms:\n${stuck.mkString("\n")}")
      }
      val now = System.currentTimeMillis()
      val pods = admin.pods().inNamespace(ns).list().getItems.asScala.toVector
      // Spark makes the ConfigMap and Service first and adds the driver as their owner once the pod exists.
      val configMaps = admin.configMaps().inNamespace(ns).list().getItems.asScala.toVector
      val services = admin.services().inNamespace(ns).list().getItems.asScala.toVector
      def driverOf(b: BatchRun): Option[Pod] = pods.find(p => Option(p.getMetadata.getLabels)
        .exists(l => l.get("kyuubi-unique-tag") == b.id && l.get("spark-role") == "driver"))
      batches.foreach { b =>
        val d = driverOf(b)
        if (b.uid.isEmpty) d.foreach { p =>
          b.pod = Some(p.getMetadata.getName)
          b.uid = Some(p.getMetadata.getUid)
          b.appId = Option(p.getMetadata.getLabels.get("spark-app-selector"))
        }
        d.filter(_.getMetadata.getUid == b.uid.orNull).foreach { p =>
          b.configMaps = math.max(b.configMaps, configMaps.count(owned(_, p.getMetadata.getUid)))
          b.services = math.max(b.services, services.count(owned(_, p.getMetadata.getUid)))
          val phase = Option(p.getStatus).map(_.getPhase).getOrElse("")
          if (b.runningAt.isEmpty && phase == "Running" && p.getMetadata.getDeletionTimestamp == null) {
            b.runningAt = Some(now)
            b.executors = SparkExecutors.create(driverClient, ns, p, spec.executors).size
          }
          // A running batch is canceled once spark-submit has made the driver the owner of its
          // ConfigMap and Service (or 30 s after it runs): a kill of spark-submit before that
          // leaves them unmade, and the garbage collector's cascade untested.
          val submitted = b.configMaps > 0 && b.services > 0
          if (b.cancel && b.canceledAt.isEmpty && b.runningAt.exists(r => submitted || now - r > 30000) &&
              p.getMetadata.getDeletionTimestamp == null) {
            {
              b.canceledAt = Some(System.currentTimeMillis())
              val (ok, msg) = rest(b.server).cancel(b.id)
              spec.progress(s"batch ${b.id} canceled through DELETE /api/v1/batches ($ok: $msg)")
            }
          }
          if (b.succeededAt.isEmpty && phase == "Succeeded") b.succeededAt = Some(now)
        }
        if (b.uid.isDefined && b.goneAt.isEmpty && !d.exists(_.getMetadata.getUid == b.uid.get)) b.goneAt = Some(now)
        if (b.goneAt.isDefined && b.dependentsGoneAt.isEmpty) {
          val left = leftovers(admin, ns, Seq(b))
          if (left == Leftovers(0, 0, 0)) b.dependentsGoneAt = Some(System.currentTimeMillis())
        }
        if ((b.goneAt.isDefined || (b.uid.isEmpty && now - b.submittedAt > 5000)) && !b.state.exists(_.terminal))
          b.state = scala.util.Try(rest(b.server).get(b.id)).toOption
      }
      Thread.sleep(150)
    }
    batches.toVector
  }
}
