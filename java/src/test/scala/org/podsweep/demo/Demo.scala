package org.podsweep.demo

import java.io.{File, PrintWriter}
import java.nio.charset.StandardCharsets
import java.time.Instant
import java.time.temporal.ChronoUnit

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.KubernetesClient
import org.apache.curator.test.TestingServer
import org.podsweep.testkit.{DeleteFaults, EtcdBackend, EtcdServer, HaBackend, KyuubiPods, LogCapture, LogicalServer, MockKube, Recorded, ZooKeeperBackend}

/**
 * Today's Kyuubi cleanup vs podsweep, on embedded infrastructure: a Curator TestingServer as
 * ZooKeeper (or the system's etcd, `--backend etcd`) and a fabric8 mock (CRUD) as the API server.
 * With `--faults` the mock answers podsweep's DELETEs with 403 (every one for the first 10 s),
 * then a share of 429 (`Retry-After: 1`), 503 and dropped connections. M scopes are M namespaces; P terminated
 * Spark driver pods are spread over them, plus decoys that must never be deleted.
 *
 * Usage: Demo [--servers N] [--scopes M] [--pods P] [--retain-ms R] [--backend zookeeper|etcd] [--faults]
 *   [--report FILE]
 * The report (a table, then one JSON line) goes to stdout and, with --report, to FILE.
 */
object Demo {
  final case class Args(
      servers: Int = 3,
      scopes: Int = 2,
      pods: Int = 300,
      retainMs: Long = 2000,
      backend: String = "zookeeper",
      faults: Boolean = false,
      report: Option[File] = None,
      log: String = "target/demo-output.log")

  final case class PodRef(namespace: String, name: String)

  final case class Workload(drivers: Seq[PodRef], decoys: Seq[PodRef], deadlines: Map[PodRef, Long])

  final case class PhaseResult(
      label: String,
      deletes: Seq[Recorded],
      byServer: Map[String, Int],
      leaked: Int,
      wrongful: Int,
      decoysMissing: Int,
      loudLines: Int,
      seconds: Double,
      leaders: Map[String, String] = Map.empty,
      outcomes: Map[String, Long] = Map.empty,
      injected: Map[String, Int] = Map.empty) {
    def requests: Int = deletes.size
    /** DELETEs that reached the CRUD store (not answered by an injected fault). */
    def stored: Seq[Recorded] = deletes.filter(_.injected.isEmpty)
    /** Pods that reached the store more than once. */
    def duplicates: Int = stored.groupBy(_.pod).count(_._2.size > 1)
    def code(c: Int): Int = deletes.count(_.status == c)
    def otherCodes: Int = deletes.count(d => d.status != 200 && d.status != 404)
  }

  private val DeadlineMs = 90000L

  /** Runs `f` over `items` on a few threads (the mock API server answers one request slowly). */
  private def parallel[A, B](items: Seq[A], threads: Int = 6)(f: A => B): Seq[B] = {
    val pool = java.util.concurrent.Executors.newFixedThreadPool(threads)
    try {
      val futures = items.map(i => pool.submit(new java.util.concurrent.Callable[B] { override def call(): B = f(i) }))
      futures.map(_.get())
    } finally pool.shutdownNow()
  }

  def main(argv: Array[String]): Unit = {
    val args = parse(argv.toList, Args())
    // Logs (embedded servers, podsweep's native records) go to a file; the report is what matters.
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn")
    System.setProperty("org.slf4j.simpleLogger.log.org.podsweep", "info")
    System.setProperty("org.slf4j.simpleLogger.showDateTime", "true")
    System.setProperty("org.slf4j.simpleLogger.logFile", args.log)
    val code = try { run(args); 0 } catch {
      case t: Throwable =>
        System.err.println(s"demo failed: $t")
        t.printStackTrace()
        1
    }
    System.exit(code)
  }

  private def parse(rest: List[String], a: Args): Args = rest match {
    case Nil => a
    case "--servers" :: v :: t => parse(t, a.copy(servers = v.toInt))
    case "--scopes" :: v :: t => parse(t, a.copy(scopes = v.toInt))
    case "--pods" :: v :: t => parse(t, a.copy(pods = v.toInt))
    case "--retain-ms" :: v :: t => parse(t, a.copy(retainMs = v.toLong))
    case "--backend" :: v :: t if HaBackend.Names.contains(v) => parse(t, a.copy(backend = v))
    case "--faults" :: t => parse(t, a.copy(faults = true))
    case "--report" :: v :: t => parse(t, a.copy(report = Some(new File(v))))
    case "--log" :: v :: t => parse(t, a.copy(log = v))
    case other => throw new IllegalArgumentException(s"unknown arguments: ${other.mkString(" ")}")
  }

  private def progress(msg: String): Unit = System.err.println(s"[demo] $msg")

  def run(a: Args): Unit = {
    require(a.servers >= 1 && a.scopes >= 1 && a.pods >= 1, "servers, scopes and pods must be positive")
    val ha: HaBackend = a.backend match {
      case "etcd" => new EtcdBackend(new EtcdServer(), leaseTimeout = "PT2S")
      case _ => new ZooKeeperBackend(new TestingServer(true), sessionTimeoutMs = 6000)
    }
    try {
      val kube = new MockKube
      val admin = kube.client("demo-admin")
      try {
        progress(s"HA backend $ha, mock API server at ${kube.url}; logs in ${a.log}")
        val baseline = baselinePhase(a, kube, admin)
        val podsweep = podsweepPhase(a, kube, admin, ha)
        report(a, baseline, podsweep)
      } finally {
        admin.close()
        kube.close()
      }
    } finally ha.close()
  }

  // ---------------------------------------------------------------------------------------------
  // Workload

  private def namespaces(prefix: String, a: Args): Seq[String] = (0 until a.scopes).map(i => s"$prefix-$i")

  /** Creates P running driver pods and the decoys (running drivers; a pod without spark-app-selector). */
  private def createPods(admin: KubernetesClient, nss: Seq[String], a: Args): (Seq[(PodRef, Pod)], Seq[(PodRef, Pod)]) = {
    def create(ns: String, pod: Pod): (PodRef, Pod) =
      PodRef(ns, pod.getMetadata.getName) -> admin.pods().inNamespace(ns).resource(pod).create()
    val drivers = parallel(0 until a.pods)(i => create(nss(i % nss.size), KyuubiPods.driver(f"spark-driver-$i%04d")))
    val decoys = parallel(nss.flatMap(ns => Seq(
      ns -> KyuubiPods.driver("decoy-running-a"),
      ns -> KyuubiPods.driver("decoy-running-b"),
      ns -> KyuubiPods.driver("decoy-pending", phase = "Pending"),
      ns -> KyuubiPods.driver("decoy-no-selector", appSelector = false))))(p => create(p._1, p._2))
    (drivers, decoys)
  }

  /** Terminates every driver (Succeeded, every third Failed) and the no-selector decoy, now. */
  private def terminate(
      admin: KubernetesClient,
      drivers: Seq[(PodRef, Pod)],
      decoys: Seq[(PodRef, Pod)],
      retainMs: Long): Workload = {
    def end(ref: PodRef, pod: Pod, succeeded: Boolean): Long = {
      // Kubernetes reports whole seconds.
      val at = Instant.now().truncatedTo(ChronoUnit.SECONDS)
      admin.pods().inNamespace(ref.namespace).resource(KyuubiPods.terminated(pod, succeeded, at)).updateStatus()
      at.toEpochMilli
    }
    val deadlines = parallel(drivers.zipWithIndex) { case ((ref, pod), i) => ref -> (end(ref, pod, i % 3 != 2) + retainMs) }
    decoys.filter(_._1.name == "decoy-no-selector").foreach { case (ref, pod) => end(ref, pod, succeeded = true) }
    Workload(drivers.map(_._1), decoys.map(_._1), deadlines.toMap)
  }

  private def present(admin: KubernetesClient, nss: Seq[String]): Set[PodRef] =
    nss.flatMap(ns => admin.pods().inNamespace(ns).list().getItems.asScala.map(p => PodRef(ns, p.getMetadata.getName))).toSet

  private def deletesIn(kube: MockKube, nss: Seq[String]): Seq[Recorded] =
    kube.podDeletes().filter(_.pod.exists(p => nss.contains(p._1)))

  /** Waits until `done` holds and then until no DELETE arrived for `quietMs`. */
  private def settle(kube: MockKube, nss: Seq[String], quietMs: Long)(done: => Boolean): Unit = {
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

  private def judge(
      label: String,
      kube: MockKube,
      admin: KubernetesClient,
      nss: Seq[String],
      w: Workload,
      loudLines: Int,
      startedAt: Long,
      leaders: Map[String, String] = Map.empty): PhaseResult = {
    val deletes = deletesIn(kube, nss)
    val decoySet = w.decoys.toSet
    val wrongful = deletes.count { d =>
      val ref = d.pod.map { case (ns, n) => PodRef(ns, n) }.get
      decoySet(ref) || w.deadlines.get(ref).exists(d.atMillis < _)
    }
    val left = present(admin, nss)
    PhaseResult(
      label = label,
      deletes = deletes,
      byServer = deletes.groupBy(_.bearer.getOrElse("?")).map { case (k, v) => k -> v.size },
      leaked = w.drivers.count(left),
      wrongful = wrongful,
      decoysMissing = w.decoys.count(d => !left(d)),
      loudLines = loudLines,
      seconds = (System.currentTimeMillis() - startedAt) / 1000.0,
      leaders = leaders)
  }

  // ---------------------------------------------------------------------------------------------
  // Phase 1: today's Kyuubi on N servers

  private def baselinePhase(a: Args, kube: MockKube, admin: KubernetesClient): PhaseResult = {
    val nss = namespaces("baseline", a)
    progress(s"phase 1 (baseline): ${a.servers} Kyuubi servers, each deleting on its own")
    val servers = (1 to a.servers).map(i =>
      new BaselineKyuubiServer(s"server-$i", kube, a.retainMs, checkIntervalMillis = 1000L))
    try {
      servers.foreach(s => nss.foreach(s.watch))
      val (drivers, decoys) = createPods(admin, nss, a)
      val startedAt = System.currentTimeMillis()
      val w = terminate(admin, drivers, decoys, a.retainMs)
      progress(s"phase 1: ${drivers.size} driver pods terminated; waiting for the retain period and cleanup")
      settle(kube, nss, quietMs = a.retainMs + 2000) {
        val left = present(admin, nss)
        !w.drivers.exists(left) && servers.forall(_.pending == 0)
      }
      servers.foreach(_.close())
      judge("baseline (Kyuubi today)", kube, admin, nss, w, servers.map(_.failedLines.get).sum, startedAt)
    } finally servers.foreach(s => scala.util.Try(s.close()))
  }

  // ---------------------------------------------------------------------------------------------
  // Phase 2: podsweep on N servers, one leader per scope through ZooKeeper or etcd

  private val OutcomeClasses =
    Seq("accepted", "throttled", "server_error", "transport", "forbidden", "already_absent", "replaced", "other")

  private def podsweepPhase(a: Args, kube: MockKube, admin: KubernetesClient, ha: HaBackend): PhaseResult = {
    val nss = namespaces("podsweep", a)
    progress(s"phase 2 (podsweep): ${a.servers} servers, leader per scope elected through ${ha.name}" +
      (if (a.faults) ", DELETE faults injected" else ""))
    val P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
    // Faults: 403s are retried every 2 s (not 1 min) and backoffs capped at 2 s, so the run ends soon.
    val faultConf = if (!a.faults) Map.empty[String, String] else Map(
      P + "forbidden.retryInterval" -> "PT2S",
      P + "retry.maxWait" -> "PT2S",
      P + "rateLimit.qps" -> "50",
      P + "rateLimit.burst" -> "50")
    val logs = new LogCapture
    val servers = (1 to a.servers).map { i =>
      val conf = Map(
        "kyuubi.kubernetes.master.address" -> kube.url,
        "kyuubi.kubernetes.authenticate.oauthToken" -> s"server-$i",
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind" -> "ALL",
        "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> a.retainMs.toString,
        "kyuubi.ha.namespace" -> "kyuubi-demo") ++ ha.kyuubiConf ++ faultConf
      new LogicalServer(s"server-$i", kube, conf)
    }
    try {
      servers.foreach(s => nss.foreach(s.watch))
      val (drivers, decoys) = createPods(admin, nss, a)
      // Elections start with a scope's first driver pod.
      val electBy = System.currentTimeMillis() + 30000
      def leaders: Map[String, Seq[String]] = nss.map(ns => ns -> servers.filter(_.isLeader(ns)).map(_.name)).toMap
      while (!leaders.values.forall(_.size == 1) && System.currentTimeMillis() < electBy) Thread.sleep(50)
      val elected = leaders.map { case (ns, l) => ns -> l.mkString(",") }
      progress(s"phase 2: leaders ${elected.toSeq.sorted.map { case (ns, s) => s"$ns -> $s" }.mkString(", ")}")
      val faults = if (a.faults) Some(new DeleteFaults(namespaces = nss.contains)) else None
      faults.foreach(kube.injectDeleteFaults)
      val startedAt = System.currentTimeMillis()
      val w = try {
        val w = terminate(admin, drivers, decoys, a.retainMs)
        progress(s"phase 2: ${drivers.size} driver pods terminated; waiting for the retain period and cleanup")
        settle(kube, nss, quietMs = a.retainMs + 2000) {
          val left = present(admin, nss)
          !w.drivers.exists(left)
        }
        w
      } finally kube.clearDeleteFaults()
      val outcomes = OutcomeClasses.map(c => c -> servers.flatMap(s => nss.map(ns => s.status(ns).outcome(c))).sum).toMap
      val loud = logs.records.count(_.warnOrError)
      explainLeaks(admin, nss, w, servers)
      val errors = servers.flatMap(_.errors.asScala)
      if (errors.nonEmpty) progress(s"observe threw: ${errors.take(3).mkString("; ")}")
      servers.foreach(_.close())
      judge(s"podsweep (${ha.name} leader)", kube, admin, nss, w, loud, startedAt, elected)
        .copy(outcomes = outcomes, injected = faults.map(_.injected).getOrElse(Map.empty))
    } finally {
      servers.foreach(s => scala.util.Try(s.close()))
      logs.close()
    }
  }

  /** For pods that should be gone but are not: what the API server has and what each server saw. */
  private def explainLeaks(admin: KubernetesClient, nss: Seq[String], w: Workload, servers: Seq[LogicalServer]): Unit = {
    val left = present(admin, nss)
    val leaked = w.drivers.filter(left)
    if (leaked.nonEmpty) {
      progress(s"${leaked.size} terminated driver pods were not deleted:")
      leaked.take(10).foreach { ref =>
        val pod = admin.pods().inNamespace(ref.namespace).withName(ref.name).get()
        progress(s"  ${ref.namespace}/${ref.name} uid=${pod.getMetadata.getUid} phase=${pod.getStatus.getPhase} " +
          s"terminatedAt=${KyuubiPods.terminatedAtMillis(pod)} rv=${pod.getMetadata.getResourceVersion}")
        servers.foreach { s =>
          val seen = s.observed.asScala.filter(o => o.namespace == ref.namespace && o.pod == ref.name)
            .map(o => s"${o.event}/${o.state}/${o.terminatedAt}").mkString(" ")
          progress(s"    ${s.name} observed: $seen")
        }
      }
      nss.foreach(ns => servers.foreach(s => progress(s"  ${s.name} $ns: ${s.status(ns).json}")))
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Report

  private def report(a: Args, b: PhaseResult, p: PhaseResult): Unit = {
    val out = new StringBuilder
    def line(s: String = ""): Unit = out.append(s).append('\n')
    def perPod(r: PhaseResult): Double = r.requests.toDouble / a.pods
    line(s"podsweep demo: ${a.servers} servers, ${a.scopes} scopes (namespaces), ${a.pods} terminated Spark driver pods " +
      s"+ ${4 * a.scopes} decoys, retain period ${a.retainMs} ms, HA backend ${a.backend}" +
      (if (a.faults) ", DELETE faults injected" else ""))
    line()
    line(f"${"phase"}%-28s ${"DELETEs"}%8s ${"per pod"}%8s ${"200"}%6s ${"404"}%6s ${"other"}%6s ${"wrongful"}%9s ${"leaked"}%7s ${"decoys lost"}%12s ${"WARN/ERROR"}%11s ${"seconds"}%8s")
    Seq(b, p).foreach { r =>
      line(f"${r.label}%-28s ${r.requests}%8d ${perPod(r)}%8.2f ${r.code(200)}%6d ${r.code(404)}%6d ${r.otherCodes}%6d ${r.wrongful}%9d ${r.leaked}%7d ${r.decoysMissing}%12d ${r.loudLines}%11d ${r.seconds}%8.1f")
    }
    line()
    line("DELETE requests per server:")
    line(f"  ${"server"}%-10s ${"baseline"}%9s ${"podsweep"}%9s")
    (1 to a.servers).map(i => s"server-$i").foreach { s =>
      line(f"  $s%-10s ${b.byServer.getOrElse(s, 0)}%9d ${p.byServer.getOrElse(s, 0)}%9d")
    }
    line(s"podsweep leaders: ${p.leaders.toSeq.sorted.map { case (ns, s) => s"$ns -> $s" }.mkString(", ")}")
    line(s"podsweep DELETE outcomes (sum over servers): ${OutcomeClasses.map(c => s"$c=${p.outcomes.getOrElse(c, 0L)}").mkString(" ")}")
    if (a.faults)
      line(s"faults injected by the mock: ${p.injected.toSeq.sorted.map { case (k, v) => s"$k=$v" }.mkString(" ")}")
    def obj(m: Seq[(String, String)]): String = m.map { case (k, v) => "\"" + k + "\":" + v }.mkString("{", ",", "}")
    val json = Seq(
      "servers" -> a.servers.toString,
      "scopes" -> a.scopes.toString,
      "pods" -> a.pods.toString,
      "decoys" -> (4 * a.scopes).toString,
      "retain_ms" -> a.retainMs.toString,
      "backend" -> ("\"" + a.backend + "\""),
      "faults" -> a.faults.toString,
      "delete_requests" -> p.requests.toString,
      "deletes_per_pod" -> f"${p.stored.size.toDouble / a.pods}%.2f",
      "pods_deleted_twice" -> p.duplicates.toString,
      "outcomes" -> obj(OutcomeClasses.map(c => c -> p.outcomes.getOrElse(c, 0L).toString)),
      "injected_faults" -> obj(Seq("forbidden", "throttled", "server_error", "transport").map(c => c -> p.injected.getOrElse(c, 0).toString)),
      "leaked" -> p.leaked.toString,
      "wrongful_deletes" -> p.wrongful.toString,
      "decoys_deleted" -> p.decoysMissing.toString,
      "warn_error_lines" -> p.loudLines.toString,
      "seconds" -> f"${p.seconds}%.1f",
      "baseline_delete_requests" -> b.requests.toString,
      "baseline_deletes_per_pod" -> f"${perPod(b)}%.2f",
      "baseline_404" -> b.code(404).toString,
      "baseline_leaked" -> b.leaked.toString,
      "baseline_wrongful_deletes" -> b.wrongful.toString,
      "baseline_warn_error_lines" -> b.loudLines.toString,
      "baseline_seconds" -> f"${b.seconds}%.1f"
    ).map { case (k, v) => "\"" + k + "\":" + v }.mkString("{", ",", "}")
    line(json)
    val text = out.toString
    print(text)
    System.out.flush()
    a.report.foreach { f =>
      val w = new PrintWriter(f, StandardCharsets.UTF_8.name())
      try w.print(text) finally w.close()
    }
  }
}
