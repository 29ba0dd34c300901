package org.podsweep.demo

import java.time.Instant
import java.time.temporal.ChronoUnit

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.testkit.{DeleteFaults, FleetServer, HaBackend, KyuubiHome, KyuubiPods, KyuubiServer, LogCapture, LogicalServer, PodsweepDaemon, Recorded, TestApi}

/**
 * The workload, the two phases and the judge shared by the demo, the `deletes_per_pod` bench and
 * the Kyuubi fleet suite: phase 1 runs today's Kyuubi cleanup on N servers, phase 2 runs N podsweep
 * servers with one leader per scope. Each phase uses its own namespaces (`<prefix>baseline-<i>`,
 * `<prefix>podsweep-<i>`), so one API server ([[TestApi]]: the fabric8 mock or [[org.podsweep.testkit.PodsApi]]) and one HA
 * service can serve many phases.
 *
 * Which servers run: with Kyuubi 1.12.0 built (scripts/kyuubi), phase 1 is N stock
 * `KubernetesApplicationOperation`s and phase 2 N patched ones, each in its own JVM
 * ([[KyuubiServer]]); otherwise phase 1 is [[BaselineKyuubiServer]] (a model of that class) and
 * phase 2 N in-process [[LogicalServer]]s. [[PhaseResult.kind]] says which.
 */
object Phases {
  /** Phase 1's kind with the real class. */
  val StockKind: String = KyuubiHome.Stock.label
  /** Phase 2's kind with the real class and our patch. */
  val PatchedKind: String = KyuubiHome.Patched.label
  /** Phase 1's kind without Kyuubi: the model. */
  val ModelKind = "model"
  /** Phase 2's kind without Kyuubi: podsweep's Java API fed by fabric8 informers in this JVM. */
  val LogicalKind = "logical-servers"
  /** Phase 2 as stock Kyuubi 1.12.0 with podsweep's drop-in provider (self-watch mode). */
  val DropinKind: String = KyuubiHome.Dropin.label
  /** Phase 2 as the standalone daemon (self-watch mode), next to servers that do not clean. */
  val StandaloneKind = "standalone"
  /** The User-Agent prefix of podsweep's own requests to the Kubernetes API. */
  val PodsweepAgent = "podsweep/"

  /** How podsweep reaches Kyuubi in phase 2: `patch`, `drop-in` or `standalone`. */
  val Modes: Seq[String] = Seq("patch", "drop-in", "standalone")

  /** The kind phase 1 runs as, and why not the real class when it cannot. */
  def baselineKind(s: Spec): (String, Option[String]) =
    if (!s.realKyuubi) (ModelKind, Some("asked for the model"))
    else KyuubiHome.stockMissing.map(w => (ModelKind, Some(w))).getOrElse((StockKind, None))

  /** The kind phase 2 runs as, and why not the real class when it cannot. */
  def podsweepKind(s: Spec): (String, Option[String]) = s.mode match {
    case "drop-in" =>
      KyuubiHome.dropinMissing.foreach(w => throw new IllegalStateException(s"the drop-in cannot run: $w"))
      (DropinKind, None)
    case "standalone" =>
      PodsweepDaemon.missing.foreach(w => throw new IllegalStateException(s"the daemon cannot run: $w"))
      (StandaloneKind, None)
    case _ =>
      if (!s.realKyuubi) (LogicalKind, Some("asked for logical servers"))
      else KyuubiHome.patchedMissing.map(w => (LogicalKind, Some(w))).getOrElse((PatchedKind, None))
  }

  /**
   * What a phase runs.
   *
   * @param failover     podsweep phase only: pods terminate in two waves; while the first is being
   *                     cleaned, the leader of the first scope is closed (graceful `close()`), and the
   *                     second wave is terminated once its successor leads
   * @param sweeperConf  extra keys for every podsweep server (e.g. rate limits)
   * @param quietMs      once every driver pod is gone (and, for the baseline, every cache is empty),
   *                     how long no DELETE may arrive before the phase ends; by default the retain
   *                     period + 2 s (+ 1 s, the check interval, for real Kyuubi)
   * @param realKyuubi   run Kyuubi's own classes when they are built (see [[Phases]])
   * @param sidecar      drivers are scheduled (`spec.nodeName`) and have a sidecar; a termination ends
   *                     the driver container only (phase stays Running) and every server reads the state
   *                     from the driver container (`kyuubi.kubernetes.application.state.source=CONTAINER`),
   *                     so a real API server deletes them gracefully (Terminating, then gone)
   * @param logDir       where the Kyuubi servers' logs go
   * @param podPrefix    prefixes every pod name (several workloads in one namespace)
   * @param mode         phase 2's podsweep: `patch` (patched Kyuubi, fed by Kyuubi's informers),
   *                     `drop-in` (stock Kyuubi with the drop-in, cleaner off: kind NONE) or
   *                     `standalone` (the daemon); the last two watch pods themselves, which needs
   *                     an API server that serves HTTP watches ([[org.podsweep.testkit.PodsApi]])
   */
  final case class Spec(
      servers: Int,
      scopes: Int,
      pods: Int,
      retainMs: Long,
      faults: Boolean = false,
      failover: Boolean = false,
      namespacePrefix: String = "",
      sweeperConf: Map[String, String] = Map.empty,
      quietMs: Option[Long] = None,
      realKyuubi: Boolean = true,
      sidecar: Boolean = false,
      podPrefix: String = "",
      mode: String = "patch",
      logDir: java.nio.file.Path = java.nio.file.Paths.get("target", "kyuubi-logs"),
      progress: String => Unit = _ => ()) {
    def quiet: Long = quietMs.getOrElse(retainMs + 2000)
    def quietKyuubi: Long = quietMs.getOrElse(retainMs + 3000)
    def namespaces(phase: String): Seq[String] = (0 until scopes).map(i => s"$namespacePrefix$phase-$i")
    def decoys: Int = 4 * scopes
    /** The state source every server of the run uses. */
    def stateConf: Map[String, String] =
      if (sidecar) Map("kyuubi.kubernetes.application.state.source" -> "CONTAINER") else Map.empty
  }

  final case class PodRef(namespace: String, name: String)

  final case class Workload(drivers: Seq[PodRef], decoys: Seq[PodRef], deadlines: Map[PodRef, Long]) {
    def ++(o: Workload): Workload = Workload(drivers ++ o.drivers, decoys ++ o.decoys, deadlines ++ o.deadlines)
  }

  /** A moment of the podsweep phase worth marking on the timeline. */
  final case class Mark(atMillis: Long, label: String)

  /**
   * The planned failover: `stopped` led `scope` and was closed between `stopAtMillis` and
   * `closedAtMillis`; `successors` holds, for every scope `stopped` led, who led it next, from
   * when (first poll that saw it) and when that server's first DELETE in the scope reached the mock.
   */
  final case class Failover(
      scope: String,
      stopped: String,
      how: String,
      stopAtMillis: Long,
      closedAtMillis: Long,
      successors: Seq[Successor]) {
    def main: Option[Successor] = successors.find(_.scope == scope)
  }

  final case class Successor(scope: String, server: Option[String], leadingAtMillis: Option[Long], firstDeleteAtMillis: Option[Long])

  final case class PhaseResult(
      label: String,
      kind: String,
      pods: Int,
      deletes: Seq[Recorded],
      byServer: Map[String, Int],
      leaked: Int,
      wrongful: Int,
      decoysMissing: Int,
      loudLines: Int,
      seconds: Double,
      leaders: Map[String, String] = Map.empty,
      outcomes: Map[String, Long] = Map.empty,
      injected: Map[String, Int] = Map.empty,
      scopes: Seq[String] = Nil,
      servers: Seq[String] = Nil,
      startMillis: Long = 0L,
      endMillis: Long = 0L,
      samples: Seq[LeaderSample] = Nil,
      failedToDelete: Int = 0,
      /** Pod watches podsweep itself opened (its User-Agent), summed over servers. */
      podWatches: Int = 0,
      marks: Seq[Mark] = Nil,
      failover: Option[Failover] = None,
      /**
       * The DELETEs the servers themselves say they sent (stock Kyuubi: its "Operation of delete pod"
       * and "Failed to delete pod" lines; podsweep: its outcome counters), to set beside the API
       * server's own count ([[requests]]); None when the servers cannot say.
       */
      clientDeletes: Option[Long] = None) {
    def requests: Int = deletes.size
    def perPod: Double = requests.toDouble / pods
    /** DELETEs that reached the CRUD store (not answered by an injected fault). */
    def stored: Seq[Recorded] = deletes.filter(_.injected.isEmpty)
    /** Pods that reached the store more than once. */
    def duplicates: Int = stored.groupBy(_.pod).count(_._2.size > 1)
    def code(c: Int): Int = deletes.count(_.status == c)
    def otherCodes: Int = deletes.count(d => d.status != 200 && d.status != 404)
  }

  private val DeadlineMs = 90000L

  val OutcomeClasses: Seq[String] =
    Seq("accepted", "throttled", "server_error", "transport", "forbidden", "already_absent", "replaced", "other")

  /** Runs `f` over `items` on a few threads (the mock API server answers one request slowly). */
  private[podsweep] def parallel[A, B](items: Seq[A], threads: Int = 6)(f: A => B): Seq[B] = {
    val pool = java.util.concurrent.Executors.newFixedThreadPool(threads)
    try {
      val futures = items.map(i => pool.submit(new java.util.concurrent.Callable[B] { override def call(): B = f(i) }))
      futures.map(_.get())
    } finally pool.shutdownNow()
  }

  // ---------------------------------------------------------------------------------------------
  // Workload

  /** Creates P running driver pods and the decoys (running drivers; a pod without spark-app-selector). */
  private[podsweep] def createPods(kube: TestApi, admin: KubernetesClient, nss: Seq[String], s: Spec): (Seq[(PodRef, Pod)], Seq[(PodRef, Pod)]) = {
    def create(ns: String, pod: Pod): (PodRef, Pod) = PodRef(ns, pod.getMetadata.getName) -> kube.createPod(admin, ns, pod)
    val node = if (s.sidecar) Some("node-1") else None
    def driver(name: String, appSelector: Boolean = true, phase: String = "Running") =
      KyuubiPods.driver(name, appSelector = appSelector, phase = phase, nodeName = node, sidecar = s.sidecar)
    val pre = s.podPrefix
    val drivers = parallel(0 until s.pods)(i => create(nss(i % nss.size), driver(f"${pre}spark-driver-$i%04d")))
    val decoys = parallel(nss.flatMap(ns => Seq(
      ns -> driver(s"${pre}decoy-running-a"),
      ns -> driver(s"${pre}decoy-running-b"),
      ns -> driver(s"${pre}decoy-pending", phase = "Pending"),
      ns -> driver(s"${pre}decoy-no-selector", appSelector = false))))(p => create(p._1, p._2))
    (drivers, decoys)
  }

  private[podsweep] def end(admin: KubernetesClient, ref: PodRef, pod: Pod, succeeded: Boolean): Long = {
    // Kubernetes reports whole seconds.
    val at = Instant.now().truncatedTo(ChronoUnit.SECONDS)
    val sidecar = Option(pod.getSpec).exists(_.getContainers.asScala.exists(_.getName == KyuubiPods.SidecarContainer))
    def ended(p: Pod): Pod = if (sidecar) KyuubiPods.driverEnded(p, succeeded, at) else KyuubiPods.terminated(p, succeeded, at)
    // On the full control plane the scheduler and kwok write the pod too: a stale copy is refused
    // (409), so the status is written again onto the newest one.
    var attempt = 0
    var done = false
    var current = pod
    while (!done) {
      try { admin.pods().inNamespace(ref.namespace).resource(ended(current)).updateStatus(); done = true }
      catch {
        case e: io.fabric8.kubernetes.client.KubernetesClientException if e.getCode == 409 && attempt < 20 =>
          attempt += 1
          current = admin.pods().inNamespace(ref.namespace).withName(ref.name).get()
      }
    }
    at.toEpochMilli
  }

  /** Terminates the drivers (Succeeded, every third Failed) and the decoys' no-selector pod, now. */
  private[podsweep] def terminate(
      admin: KubernetesClient,
      drivers: Seq[(PodRef, Pod)],
      decoys: Seq[(PodRef, Pod)],
      retainMs: Long): Workload = {
    val deadlines = parallel(drivers.zipWithIndex) { case ((ref, pod), i) =>
      ref -> (end(admin, ref, pod, i % 3 != 2) + retainMs)
    }
    decoys.filter(_._1.name.endsWith("decoy-no-selector")).foreach { case (ref, pod) => end(admin, ref, pod, succeeded = true) }
    Workload(drivers.map(_._1), decoys.map(_._1), deadlines.toMap)
  }

  private[podsweep] def present(admin: KubernetesClient, nss: Seq[String]): Set[PodRef] =
    nss.flatMap(ns => admin.pods().inNamespace(ns).list().getItems.asScala.map(p => PodRef(ns, p.getMetadata.getName))).toSet

  private[podsweep] def deletesIn(kube: TestApi, nss: Seq[String]): Seq[Recorded] =
    kube.podDeletes().filter(_.pod.exists(p => nss.contains(p._1)))

  /** Waits until `done` holds and then until no DELETE arrived for `quietMs`. */
  private[podsweep] def settle(kube: TestApi, nss: Seq[String], quietMs: Long)(done: => Boolean): Unit = {
    val deadline = System.currentTimeMillis() + DeadlineMs
    while (!done && System.currentTimeMillis() < deadline) Thread.sleep(100)
    var last = deletesIn(kube, nss).size
    var quietSince = System.currentTimeMillis()
    while (System.currentTimeMillis() - quietSince < quietMs && System.currentTimeMillis() < deadline) {
      Thread.sleep(100)
      val now = deletesIn(kube, nss).size
      if (now != last) { last = now; quietSince = System.currentTimeMillis() }
    }
  }

  /** The barrier pod [[settleFleet]] creates in each namespace (its DELETE is not a driver's). */
  private[podsweep] def barrierName(prefix: String): String = s"${prefix}barrier"

  /**
   * [[settle]] for a fleet of podsweep servers, with no quiet period: waits until `done` holds
   * (the drivers are gone), then in each namespace of `nss` for a barrier, a terminated,
   * unscheduled driver pod created now ([[barrierName]]). A leader DELETEs it only once it has
   * taken its events, and so every event the API server wrote in that namespace before them (a
   * server takes a namespace's events in resourceVersion order); then every server of `fleet`
   * holds nothing there (nothing tracked, in flight or queued; a follower has taken the barrier's
   * DELETE event too). No server sends a DELETE before a new event, so what is counted after is
   * final. The barrier's one DELETE is among the recorded ones; [[judge]] counts it neither
   * wrongful nor leaked. Fails when the barrier is not deleted, or a server not idle, in time.
   */
  private[podsweep] def settleFleet(kube: TestApi, admin: KubernetesClient, fleet: Seq[FleetServer], nss: Seq[String],
      prefix: String)(done: => Boolean): Unit = {
    val deadline = System.currentTimeMillis() + DeadlineMs
    def await(what: => String)(cond: => Boolean): Unit =
      while (!cond) {
        if (System.currentTimeMillis() > deadline) throw new AssertionError(s"not within ${DeadlineMs / 1000} s: $what")
        Thread.sleep(100)
      }
    while (!done && System.currentTimeMillis() < deadline) Thread.sleep(100)
    val name = barrierName(prefix)
    nss.foreach { ns =>
      val pod = kube.createPod(admin, ns, KyuubiPods.driver(name))
      admin.pods().inNamespace(ns).resource(KyuubiPods.terminated(pod, succeeded = true, Instant.now())).updateStatus()
    }
    def barrierDeletes(ns: String) = deletesIn(kube, Seq(ns)).filter(_.pod.contains((ns, name)))
    nss.foreach(ns => await(s"a DELETE of the barrier $ns/$name")(barrierDeletes(ns).exists(_.status == 200)))
    // A server that does not know the scope reads -1 for each figure: it holds nothing either.
    def idle(f: FleetServer, ns: String): Boolean = {
      val st = f.status(ns)
      st.tracked <= 0 && st.inflight <= 0 && st.number("queued") <= 0
    }
    nss.foreach(ns => await(s"every server idle in $ns: ${fleet.map(f => f.name -> f.status(ns))}")(fleet.forall(idle(_, ns))))
    nss.foreach(ns => assert(barrierDeletes(ns).size == 1, s"the barrier $ns/$name: ${barrierDeletes(ns)}"))
  }

  private[podsweep] def judge(
      label: String,
      kind: String,
      s: Spec,
      kube: TestApi,
      admin: KubernetesClient,
      nss: Seq[String],
      w: Workload,
      loudLines: Int,
      startedAt: Long): PhaseResult = {
    val deletes = deletesIn(kube, nss)
    val decoySet = w.decoys.toSet
    val wrongful = deletes.count { d =>
      val ref = d.pod.map { case (ns, n) => PodRef(ns, n) }.get
      decoySet(ref) || w.deadlines.get(ref).exists(d.atMillis < _)
    }
    val left = present(admin, nss)
    PhaseResult(
      label = label,
      kind = kind,
      pods = s.pods,
      deletes = deletes,
      byServer = deletes.groupBy(_.bearer.getOrElse("?")).map { case (k, v) => k -> v.size },
      leaked = w.drivers.count(left),
      wrongful = wrongful,
      decoysMissing = w.decoys.count(d => !left(d)),
      loudLines = loudLines,
      seconds = (System.currentTimeMillis() - startedAt) / 1000.0,
      scopes = nss,
      servers = (1 to s.servers).map(i => s"server-$i"))
  }

  // ---------------------------------------------------------------------------------------------
  // Phase 1: today's Kyuubi on N servers

  def baseline(s: Spec, kube: TestApi, admin: KubernetesClient): PhaseResult = {
    val (kind, why) = baselineKind(s)
    if (s.realKyuubi) why.foreach(w => s.progress(s"phase 1 runs the model of Kyuubi's cleanup: $w"))
    if (kind == StockKind) baselineKyuubi(s, kube, admin) else baselineModel(s, kube, admin)
  }

  /** A WARN or ERROR record in the daemon's log (tracing's format: `<time>  WARN <target>: ...`). */
  private val DaemonLoud = "^\\S+\\s+(WARN|ERROR)\\s".r

  /** A WARN or ERROR line of a Kyuubi server's log (pattern `%d %p %c{1}: %m`). */
  private val Loud = "^\\S+ (WARN|ERROR) .*".r

  /**
   * Hadoop's start-up notice that it found no native library, printed once by each JVM that runs
   * Kyuubi's application manager (the drop-in's mode): not about cleanup, so not counted.
   */
  private val HadoopNative = "WARN NativeCodeLoader: Unable to load native-hadoop library"

  private[podsweep] def loudLines(servers: Seq[KyuubiServer]): Int =
    servers.map(_.log.count(l => Loud.pattern.matcher(l).matches() && !l.contains(HadoopNative))).sum

  /** N Kyuubi servers of `kind` on the namespaces, started one after the other, as a fleet is. */
  private[podsweep] def startKyuubi(
      s: Spec,
      kind: KyuubiHome.Kind,
      kube: TestApi,
      phase: String,
      nss: Seq[String],
      extra: Map[String, String],
      mode: KyuubiHome.Mode = KyuubiHome.OperationOnly): Seq[KyuubiServer] = {
    val dir = s.logDir.toAbsolutePath.resolve(s"$phase-${System.currentTimeMillis()}")
    val started = scala.collection.mutable.ArrayBuffer.empty[KyuubiServer]
    try {
      (1 to s.servers).foreach { i =>
        val name = s"server-$i"
        started += new KyuubiServer(name, kind, KyuubiServer.conf(name, kube, nss, s.retainMs) ++ s.stateConf ++ extra, dir,
          mode = mode)
      }
      s.progress(s"${s.servers} ${kind.label} servers started (logs in $dir)")
      started.toVector
    } catch {
      case t: Throwable =>
        started.foreach(x => scala.util.Try(x.close()))
        throw t
    }
  }

  /** Phase 1 with the real class: N stock KubernetesApplicationOperations, each in its own JVM. */
  private def baselineKyuubi(s: Spec, kube: TestApi, admin: KubernetesClient): PhaseResult = {
    val nss = s.namespaces("baseline")
    s.progress(s"phase 1 (baseline): ${s.servers} stock Kyuubi ${KyuubiHome.Version} servers, each deleting on its own")
    val servers = startKyuubi(s, KyuubiHome.Stock, kube, "baseline", nss, Map.empty)
    try {
      val (drivers, decoys) = createPods(kube, admin, nss, s)
      val startedAt = System.currentTimeMillis()
      val w = terminate(admin, drivers, decoys, s.retainMs)
      s.progress(s"phase 1: ${drivers.size} driver pods terminated; waiting for the retain period and cleanup")
      // Once every driver is gone, a DELETE event has armed each server's cache again; the quiet
      // period (retain + check interval + 2 s) lets those entries expire and send their 404s.
      settle(kube, nss, quietMs = s.quietKyuubi)(!w.drivers.exists(present(admin, nss)))
      // Judged before stop(): stock stop() deletes whatever its cache still holds (KYUUBI #6320).
      val failed = servers.map(_.logLines("Failed to delete pod").size).sum
      val completed = servers.map(_.logLines("Operation of delete pod").size).sum
      judge(s"baseline (Kyuubi ${KyuubiHome.Version})", StockKind, s, kube, admin, nss, w, loudLines(servers), startedAt)
        .copy(failedToDelete = failed, servers = servers.map(_.name), clientDeletes = Some((failed + completed).toLong))
    } finally servers.foreach(x => scala.util.Try(x.close()))
  }

  /** Phase 1 without Kyuubi: the model of its cleanup. */
  private def baselineModel(s: Spec, kube: TestApi, admin: KubernetesClient): PhaseResult = {
    val nss = s.namespaces("baseline")
    s.progress(s"phase 1 (baseline): ${s.servers} Kyuubi servers (model), each deleting on its own")
    // Check threads out of step, spread evenly over one interval, as servers started at different moments.
    val checkMs = 1000L
    val servers = (1 to s.servers).map(i =>
      new BaselineKyuubiServer(s"server-$i", kube, s.retainMs, checkIntervalMillis = checkMs,
        startOffsetMillis = (i - 1) * checkMs / s.servers))
    try {
      servers.foreach(b => nss.foreach(b.watch))
      val (drivers, decoys) = createPods(kube, admin, nss, s)
      val startedAt = System.currentTimeMillis()
      val w = terminate(admin, drivers, decoys, s.retainMs)
      s.progress(s"phase 1: ${drivers.size} driver pods terminated; waiting for the retain period and cleanup")
      settle(kube, nss, quietMs = s.quiet) {
        val left = present(admin, nss)
        !w.drivers.exists(left) && servers.forall(_.pending == 0)
      }
      servers.foreach(_.close())
      judge("baseline (model)", ModelKind, s, kube, admin, nss, w, servers.map(_.failedLines.get).sum, startedAt)
        .copy(failedToDelete = servers.map(_.failedLines.get).sum)
    } finally servers.foreach(b => scala.util.Try(b.close()))
  }

  // ---------------------------------------------------------------------------------------------
  // Phase 2: podsweep on N servers, one leader per scope through ZooKeeper or etcd

  def podsweep(s: Spec, kube: TestApi, admin: KubernetesClient, ha: HaBackend): PhaseResult = {
    val nss = s.namespaces("podsweep")
    val (kind, why) = podsweepKind(s)
    if (s.realKyuubi) why.foreach(w => s.progress(s"phase 2 runs podsweep in logical servers, not in Kyuubi: $w"))
    val what = kind match {
      case PatchedKind => s"patched Kyuubi ${KyuubiHome.Version} servers"
      case DropinKind => s"stock Kyuubi ${KyuubiHome.Version} servers with podsweep's drop-in"
      case StandaloneKind => "podsweep daemons"
      case _ => "servers"
    }
    s.progress(s"phase 2 (podsweep): ${s.servers} $what, " +
      s"leader per scope elected through ${ha.name}" +
      (if (s.faults) ", DELETE faults injected" else "") + (if (s.failover) ", failover of the first scope's leader" else ""))
    val P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
    // Faults: 403s are retried every 2 s (not 1 min) and backoffs capped at 2 s, so the run ends soon.
    val faultConf = if (!s.faults) Map.empty[String, String] else Map(
      P + "forbidden.retryInterval" -> "PT2S",
      P + "retry.maxWait" -> "PT2S",
      P + "rateLimit.qps" -> "50",
      P + "rateLimit.burst" -> "50")
    val logs = new LogCapture
    val phaseStart = System.currentTimeMillis()
    val podsweepConf = Map("kyuubi.ha.namespace" -> "kyuubi-demo") ++ ha.kyuubiConf ++ faultConf ++ s.stateConf ++ s.sweeperConf
    // Self-watch servers: Kyuubi's own cleaner off (drop-in), podsweep's kind in its own key.
    val selfWatch = Map(P + "kind" -> "NONE", P + "watch.kind" -> "ALL")
    val kyuubi: Seq[KyuubiServer] = kind match {
      case PatchedKind => startKyuubi(s, KyuubiHome.Patched, kube, "podsweep", nss, podsweepConf)
      case DropinKind => startKyuubi(s, KyuubiHome.Dropin, kube, "podsweep", nss, podsweepConf ++ selfWatch, KyuubiHome.Manager)
      case _ => Nil
    }
    val daemons: Seq[PodsweepDaemon] = if (kind != StandaloneKind) Nil else {
      val dir = s.logDir.toAbsolutePath.resolve(s"daemons-${System.currentTimeMillis()}")
      (1 to s.servers).map { i =>
        new PodsweepDaemon(s"server-$i", kube.clientConf(s"server-$i") ++ Map(
          "kyuubi.kubernetes.client.initialize.list" -> nss.map(ns => s":$ns").mkString(","),
          P + "kind" -> "ALL",
          "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> s.retainMs.toString) ++ podsweepConf, dir)
      }
    }
    val servers: Seq[FleetServer] = if (kyuubi.nonEmpty) kyuubi else if (daemons.nonEmpty) daemons else (1 to s.servers).map { i =>
      val conf = kube.clientConf(s"server-$i") ++ Map(
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind" -> "ALL",
        "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> s.retainMs.toString) ++ podsweepConf
      new LogicalServer(s"server-$i", kube, conf)
    }
    val sampler = new LeadershipSampler(servers, nss, periodMs = 100)
    try {
      servers.foreach { case l: LogicalServer => nss.foreach(l.watch); case _ => }
      val (drivers, decoys) = createPods(kube, admin, nss, s)
      // Elections start with a scope's first driver pod.
      val electBy = System.currentTimeMillis() + 30000
      def leaders: Map[String, Seq[String]] = nss.map(ns => ns -> servers.filter(_.isLeader(ns)).map(_.name)).toMap
      while (!leaders.values.forall(_.size == 1) && System.currentTimeMillis() < electBy) Thread.sleep(50)
      val elected = leaders.map { case (ns, l) => ns -> l.mkString(",") }
      s.progress(s"phase 2: leaders ${elected.toSeq.sorted.map { case (ns, l) => s"$ns -> $l" }.mkString(", ")}")
      val faults = if (s.faults) Some(new DeleteFaults(namespaces = nss.contains)) else None
      faults.foreach(kube.injectDeleteFaults)
      val startedAt = System.currentTimeMillis()
      var marks = Vector.empty[Mark]
      var failover: Option[Failover] = None
      // Outcome counts of a server closed mid-phase, taken just before its close.
      var closedOutcomes = Map.empty[String, Long]
      val w = try {
        val w = if (!s.failover) {
          val w = terminate(admin, drivers, decoys, s.retainMs)
          marks :+= Mark(startedAt, s"${drivers.size} pods terminated")
          s.progress(s"phase 2: ${drivers.size} driver pods terminated; waiting for the retain period and cleanup")
          w
        } else {
          val (wave1, wave2) = drivers.splitAt(drivers.size / 2)
          val w1 = terminate(admin, wave1, decoys, s.retainMs)
          marks :+= Mark(startedAt, s"wave 1: ${wave1.size} pods terminated")
          s.progress(s"phase 2: wave 1, ${wave1.size} driver pods terminated")
          // Stop the first scope's leader once it has cleaned half of its share of wave 1.
          val scope = nss.head
          val share = w1.drivers.count(_.namespace == scope)
          val waitBy = System.currentTimeMillis() + DeadlineMs
          while (deletesIn(kube, Seq(scope)).size < (share + 1) / 2 && System.currentTimeMillis() < waitBy) Thread.sleep(20)
          // The scope's leader, once one leads it: a leader whose lease confirmation is late pauses
          // for a moment (etcd, a loaded machine), and stopping another server then is no failover.
          val leaderBy = System.currentTimeMillis() + 10000
          while (!servers.exists(_.isLeader(scope)) && System.currentTimeMillis() < leaderBy) Thread.sleep(5)
          val led = servers.filter(l => nss.exists(l.isLeader))
          val victim = servers.find(_.isLeader(scope)).getOrElse(servers.head)
          val itsScopes = nss.filter(victim.isLeader)
          closedOutcomes = OutcomeClasses.map(c => c -> nss.map(ns => victim.status(ns).outcome(c)).sum).toMap
          sampler.markStopped(victim.name)
          val stopAt = System.currentTimeMillis()
          victim.stop()
          val closedAt = System.currentTimeMillis()
          // Who leads each scope the stopped server led, as soon as it does (polled every 2 ms).
          val others = servers.filterNot(_ eq victim)
          val pollBy = System.currentTimeMillis() + 60000
          var taken = Map.empty[String, (String, Long)]
          while (taken.size < itsScopes.size && others.nonEmpty && System.currentTimeMillis() < pollBy) {
            itsScopes.filterNot(taken.contains).foreach { ns =>
              others.find(_.isLeader(ns)).foreach(o => taken += ns -> (o.name -> System.currentTimeMillis()))
            }
            if (taken.size < itsScopes.size) Thread.sleep(2)
          }
          s.progress(s"phase 2: ${victim.name} (leader of ${itsScopes.mkString(", ")}) closed in ${closedAt - stopAt} ms; " +
            taken.toSeq.sorted.map { case (ns, (o, at)) => s"$ns -> ${o} after ${at - stopAt} ms" }.mkString(", ") +
            s" (leaders before: ${led.map(_.name).mkString(", ")})")
          val how = kind match {
            case PatchedKind | DropinKind => "Kyuubi stop()"
            case StandaloneKind => "SIGTERM"
            case _ => "graceful close()"
          }
          failover = Some(Failover(scope, victim.name, how, stopAt, closedAt,
            itsScopes.map(ns => Successor(ns, taken.get(ns).map(_._1), taken.get(ns).map(_._2), None))))
          marks :+= Mark(stopAt, s"${victim.name} closed")
          Thread.sleep(1000)
          val wave2At = System.currentTimeMillis()
          val w2 = terminate(admin, wave2, Nil, s.retainMs)
          marks :+= Mark(wave2At, s"wave 2: ${wave2.size} pods terminated")
          s.progress(s"phase 2: wave 2, ${wave2.size} driver pods terminated; waiting for the retain period and cleanup")
          w1 ++ w2
        }
        settle(kube, nss, quietMs = s.quiet) {
          val left = present(admin, nss)
          !w.drivers.exists(left)
        }
        w
      } finally kube.clearDeleteFaults()
      val live = servers.filterNot(l => failover.exists(_.stopped == l.name))
      val outcomes = OutcomeClasses.map(c =>
        c -> (live.flatMap(l => nss.map(ns => l.status(ns).outcome(c))).sum + closedOutcomes.getOrElse(c, 0L))).toMap
      // With Kyuubi servers podsweep runs in their JVMs, and their logs are what counts; this JVM's
      // native records would only hold leftovers of earlier in-process sweepers.
      val loud =
        if (kyuubi.nonEmpty) loudLines(kyuubi)
        else if (daemons.nonEmpty) daemons.map(_.log.count(l => DaemonLoud.pattern.matcher(l).find())).sum
        else logs.records.count(_.warnOrError)
      explainLeaks(s, admin, nss, w, servers, live)
      val problems = servers.flatMap(_.problems)
      if (problems.nonEmpty) s.progress(s"server problems: ${problems.take(3).mkString("; ")}")
      // Counted before the servers close: each close hands the scope to the next server, whose
      // new watch belongs to the shutdown, not to the cleanup measured here.
      val podWatches = kube.watchRequests(PodsweepAgent, phaseStart, nss)
      sampler.close()
      servers.foreach(l => scala.util.Try(l.close()))
      val endMillis = System.currentTimeMillis()
      val label = kind match {
        case PatchedKind => s"podsweep (Kyuubi, ${ha.name})"
        case DropinKind => s"podsweep (drop-in, ${ha.name})"
        case StandaloneKind => s"podsweep (daemon, ${ha.name})"
        case _ => s"podsweep (${ha.name} leader)"
      }
      val r = judge(label, kind, s, kube, admin, nss, w, loud, startedAt)
        .copy(failedToDelete = kyuubi.map(_.logLines("Failed to delete pod").size).sum)
      // The successors' first DELETEs, now that every request is recorded.
      val fo = failover.map(f => f.copy(successors = f.successors.map { x =>
        val first = r.deletes.filter(d => d.pod.exists(_._1 == x.scope) && d.bearer == x.server && d.atMillis >= f.stopAtMillis)
        x.copy(firstDeleteAtMillis = if (first.isEmpty) None else Some(first.map(_.atMillis).min))
      }))
      r.copy(leaders = elected, outcomes = outcomes, injected = faults.map(_.injected).getOrElse(Map.empty),
        startMillis = phaseStart, endMillis = endMillis, samples = sampler.samples, marks = marks, failover = fo,
        podWatches = podWatches, clientDeletes = Some(outcomes.values.sum))
    } finally {
      sampler.close()
      servers.foreach(l => scala.util.Try(l.close()))
      logs.close()
    }
  }

  /** For pods that should be gone but are not: what the API server has and what each server saw. */
  private def explainLeaks(
      s: Spec,
      admin: KubernetesClient,
      nss: Seq[String],
      w: Workload,
      servers: Seq[FleetServer],
      live: Seq[FleetServer]): Unit = {
    val left = present(admin, nss)
    val leaked = w.drivers.filter(left)
    if (leaked.nonEmpty) {
      s.progress(s"${leaked.size} terminated driver pods were not deleted:")
      leaked.take(10).foreach { ref =>
        val pod = admin.pods().inNamespace(ref.namespace).withName(ref.name).get()
        s.progress(s"  ${ref.namespace}/${ref.name} uid=${pod.getMetadata.getUid} phase=${pod.getStatus.getPhase} " +
          s"terminatedAt=${KyuubiPods.terminatedAtMillis(pod)} rv=${pod.getMetadata.getResourceVersion}")
        servers.foreach {
          case l: LogicalServer =>
            val seen = l.observed.asScala.filter(o => o.namespace == ref.namespace && o.pod == ref.name)
              .map(o => s"${o.event}/${o.state}/${o.terminatedAt}").mkString(" ")
            s.progress(s"    ${l.name} observed: $seen")
          case k: KyuubiServer => s.progress(s"    ${k.name}: see ${k.logFile}")
          case _ =>
        }
      }
      nss.foreach(ns => live.foreach(l => s.progress(s"  ${l.name} $ns: ${l.status(ns).json}")))
    }
  }
}
