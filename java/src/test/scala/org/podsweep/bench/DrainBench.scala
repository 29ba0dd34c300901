package org.podsweep.bench

import java.nio.file.Paths
import java.time.Instant
import java.time.temporal.ChronoUnit

import scala.collection.immutable.ListMap
import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.Pod
import org.apache.curator.test.TestingServer
import org.podsweep.demo.Phases
import org.podsweep.testkit.{FleetServer, KyuubiHome, KyuubiPods, KyuubiServer, PodsweepDaemon, Recorded, TestApi, ZooKeeperBackend}

/**
 * `drain`: a backlog of overdue terminated driver pods (their containers finished an hour ago, far
 * past the retain period) is already there when cleanup takes over, as after an outage of the
 * cleanup or the first roll-out of a fleet. One run drains the same backlog with each contender,
 * each on a fresh API server (one for all in the smoke pass), and draws the API server's own
 * frontier of drain rate against what the drain costs a neighbour (issue 35):
 *  1. a RAW client at each of [[Size.rawLevels]] (1, 2, 3, 4, 6, 8, 16, 32) DELETEs in flight: it lists
 *     the pods and deletes them all, under a ServiceAccount of its own, nothing else. Its points
 *     draw the curve the others are held against (`of_raw`, and the summary line);
 *  2. podsweep at its DEFAULT pace (adaptive: the in-flight limit follows the API server's
 *     answers, `maxInFlight` at most), twice. Judged: a patched Kyuubi 1.12.0 server starts on an
 *     empty namespace and leads it (ZooKeeper); then the backlog is created, every pod finished
 *     at its start and due [[Size.warmRetainMs]] later, all at once, so what is measured is
 *     podsweep's pace from a server that is up, not the server's start. Beside it, `-cold`: the
 *     server starts on the backlog, its informer lists the pods, it leads and deletes what is
 *     overdue, while its JVM is still starting. Each measured until every pod is gone, the server
 *     then closed; the server's own CPU is read too. `PODSWEEP_BENCH_DRAIN_VARIANTS` adds
 *     podsweep runs (started before their backlog) with other keys (`label:key=value,key=value;label2:...`, keys under
 *     `kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.` unless they start with `kyuubi.`;
 *     e.g. `ceiling-100:rateLimit.qps=100`), each judged against the curve too;
 *  3. stock Kyuubi 1.12.0: one server starts over the same backlog. It marks every terminated pod
 *     it lists at start (`cleanTerminatedAppPodsOnKubernetesClientInitialize`), each entry expires a
 *     retain period after that, and the cache's removal listener deletes them, one synchronous DELETE
 *     after the other (in the check thread's `cleanUp()`, and in cache writes on the informer thread);
 *     each DELETE event arms the entry again, so a retain period later it sends a second DELETE that
 *     answers 404. Measured until every pod is gone and no DELETE came for retain + check interval
 *     + [[Size.quietExtraMs]]. Kyuubi's retain period (5 min) and check interval (1 min) are shortened to
 *     [[Size.retainMs]] and 1 s (the same retain for podsweep), which moves when stock Kyuubi
 *     starts, not how fast it deletes or how often.
 *
 * Throughout each run a reader under another ServiceAccount GETs one pod every 20 ms
 * ([[DrainReader]]): its p99 over the drain (first to last pod deleted), against its p99 over
 * [[Size.idleMs]] before the run started, is what the drain costs other clients. The CPU of
 * kube-apiserver and etcd, each read by its own PID ([[ControlPlaneCpu]]), is given per cleaned
 * pod over the contender's whole run (raw: list and DELETEs; Kyuubi: server start to close, or for
 * a warm start from a second before the pods were due), net of their use while only the reader ran.
 *
 * The API server is a real kube-apiserver (scripts/kube); every figure about DELETEs comes from
 * its audit log: `requestReceivedTimestamp` and the answer code of each DELETE sent with the
 * contender's own ServiceAccount. Rates are over the DELETEs that deleted a pod (answered 200):
 * `deletes_per_s` from the first to the last of them, `steady_deletes_per_s` over the middle 80 %
 * of them (the burst at the start and the tail left out), `peak_deletes_in_1s` the most that
 * arrived within one second. Errors are the audit log's other answer codes (404, 409, 429, 5xx)
 * and the servers' own counts (`client_deletes`, podsweep's outcome classes, read just before the
 * server is closed). `PODSWEEP_BENCH_API=pods-api` runs it on the bench's own API server instead
 * ([[BenchApi]]). One JSON line per contender, then the summary line (`"system": "frontier"`,
 * [[DrainFrontier.summary]]): podsweep's default against the curve, pass or fail.
 */
object DrainBench {
  /** Sizes of one bench pass. */
  final case class Size(
      pods: Int,
      retainMs: Long,
      checkIntervalMs: Long,
      drainTimeoutMs: Long,
      createThreads: Int,
      /** Stock Kyuubi's run ends when no DELETE came for retain + check interval + this. */
      quietExtraMs: Long,
      /** After the last pod went, how long the run waits for any DELETE that follows (none expected). */
      settleMs: Long,
      /** The reader's idle span before each run. */
      idleMs: Long,
      /** DELETEs in flight of the raw client's runs: the curve's points. */
      rawLevels: Seq[Int],
      /**
       * The retain period of podsweep's runs that start before their backlog ([[Warm]]): long
       * enough for the whole backlog to be created and observed before the first pod is due.
       */
      warmRetainMs: Long)

  /**
   * 3,000 pods: with a fresh API server, the backlog, the reader's idle span and the server's start
   * for each of the 12 contenders the whole run takes about 15 minutes on 2 cores, and even the
   * fastest drain lasts several seconds (a few hundred of the reader's GETs, so its p99 is not one
   * GET). The raw levels 3 and 6 measure the curve where podsweep's default lands (5 to 6 in
   * flight on 2 cores), instead of interpolating across a doubling.
   */
  val Full = Size(
    pods = sys.env.get("PODSWEEP_BENCH_DRAIN_PODS").flatMap(s => scala.util.Try(s.trim.toInt).toOption).filter(_ > 0).getOrElse(3000),
    retainMs = 10000, checkIntervalMs = 1000, drainTimeoutMs = 15 * 60 * 1000L, createThreads = 8,
    quietExtraMs = 3000, settleMs = 2000, idleMs = DrainReader.IdleMs, rawLevels = Seq(1, 2, 3, 4, 6, 8, 16, 32),
    warmRetainMs = 75000)
  val Smoke = Size(pods = 100, retainMs = 2000, checkIntervalMs = 1000, drainTimeoutMs = 60000, createThreads = 8,
    quietExtraMs = 1000, settleMs = 500, idleMs = 2000, rawLevels = Seq(1, 32), warmRetainMs = 20000)

  /** When the pods' driver containers finished: long before the run (all overdue). */
  val FinishedAgoS = 3600L

  private val RawClient = "drain-raw"
  /** The judged contender: podsweep's default pace in the daemon. */
  val DefaultLabel = "podsweep-daemon"
  val PatchedLabel = "podsweep-patched"
  val ColdLabel = "podsweep-patched-cold"

  /** How a podsweep contender runs. */
  sealed abstract class How(val warm: Boolean, val what: String)
  /** The daemon (self-watch), started before its backlog. */
  case object DaemonWarm extends How(true, "the podsweep daemon (self-watch)")
  /** A patched Kyuubi 1.12.0 server (Kyuubi's informer feeds podsweep), started before its backlog. */
  case object PatchedWarm extends How(true, "a patched Kyuubi server")
  /** A patched Kyuubi 1.12.0 server started on its backlog. */
  case object PatchedCold extends How(false, "a patched Kyuubi server")
  val VariantsEnv = "PODSWEEP_BENCH_DRAIN_VARIANTS"

  private val P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
  /** Kyuubi's default `kyuubi.ha.zookeeper.session.timeout`. */
  private val SessionTimeoutMs = 60000
  private val Server = "server-1"

  /** `label:key=value,key=value;...` of [[VariantsEnv]]: podsweep runs with other keys. */
  def variants(spec: String): Seq[(String, Map[String, String])] =
    spec.split(";").map(_.trim).filter(_.nonEmpty).toSeq.map { v =>
      val (label, kvs) = v.split(":", 2) match {
        case Array(l, k) => (l.trim, k)
        case _ => throw new IllegalArgumentException(s"$VariantsEnv: '$v' is not label:key=value,...")
      }
      require(label.matches("[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?") && !Seq(DefaultLabel, PatchedLabel, ColdLabel).contains(label),
        s"$VariantsEnv: label '$label' must be a DNS label of at most 32 characters, not $DefaultLabel, $PatchedLabel or $ColdLabel")
      label -> kvs.split(",").map(_.trim).filter(_.nonEmpty).map { kv =>
        kv.split("=", 2) match {
          case Array(k, x) if k.trim.nonEmpty => (if (k.trim.startsWith("kyuubi.")) k.trim else P + k.trim) -> x.trim
          case _ => throw new IllegalArgumentException(s"$VariantsEnv: '$kv' in '$label' is not key=value")
        }
      }.toMap
    }

  def run(smoke: Boolean): Unit = {
    val size = if (smoke) Smoke else Full
    val extra = variants(sys.env.getOrElse(VariantsEnv, ""))
    KyuubiHome.patchedMissing.foreach(w => throw new IllegalStateException(s"drain needs patched Kyuubi 1.12.0: $w"))
    PodsweepDaemon.missing.foreach(w => throw new IllegalStateException(s"drain needs the podsweep daemon: $w"))
    val apis = new BenchApi.Pool(BenchApi.choose("drain", fallback = "pods-api"), shared = smoke)
    val zk = new ZooKeeperBackend(new TestingServer(true), sessionTimeoutMs = SessionTimeoutMs)
    try {
      val raw = size.rawLevels.map(n => rawClient(apis, size, n))
      val best = raw.map(_.rate).filterNot(_.isNaN).reduceOption(_ max _)
      // The default judged (the daemon), the same in a patched Kyuubi server started before and on
      // its backlog, then the variants (daemons).
      val ours = Seq((DefaultLabel, Map.empty[String, String], DaemonWarm), (PatchedLabel, Map.empty[String, String], PatchedWarm),
        (ColdLabel, Map.empty[String, String], PatchedCold)) ++ extra.map { case (l, k) => (l, k, DaemonWarm) }
      val others = ours.map { case (label, keys, how) => podsweep(apis, zk, size, label, keys, best, how) } :+
        stock(apis, size, best)
      val points = raw ++ others
      BenchOut.line("drain", (Seq("pods" -> size.pods) ++ apis.choice.fallback.map("api_server_fallback" -> _) ++
        Seq("api_server" -> points.headOption.map(_ => apis.lastName).orNull) ++
        DrainFrontier.summary(points, DefaultLabel) ++ Seq("smoke" -> smoke)): _*)
    } finally {
      zk.close()
      apis.close()
    }
  }

  /**
   * The backlog: `pods` driver pods whose containers finished at `finished` (every third Failed),
   * [[FinishedAgoS]] ago unless given.
   */
  private def backlog(api: TestApi, ns: String, size: Size,
      finished: Instant = Instant.now().minusSeconds(FinishedAgoS).truncatedTo(ChronoUnit.SECONDS)): (Double, Int) = {
    val admin = api.client("drain-admin")
    try {
      val t0 = System.nanoTime()
      LagWorkload.parallel(0 until size.pods, size.createThreads) { i =>
        // Created Pending (a real API server keeps no other status on create), then the status a
        // kubelet wrote when the driver ended.
        val created: Pod = api.createPod(admin, ns, KyuubiPods.driver(f"spark-driver-$i%05d", phase = "Pending"))
        admin.pods().inNamespace(ns).resource(KyuubiPods.terminated(created, i % 3 != 2, finished)).updateStatus()
      }
      ((System.nanoTime() - t0) / 1e9, 2)
    } finally admin.close()
  }

  /** The DELETEs of `who` (the server by default) in `ns` (audit log of a real API server), by arrival. */
  private def deletes(api: TestApi, ns: String, who: String = Server): Seq[Recorded] =
    api.podDeletes(ns).filter(_.bearer.exists(_.contains(who))).sortBy(_.atMillis)

  /**
   * How often a drain is looked at (the audit log read and parsed): the same for every contender,
   * the raw client's included ([[polling]]), since the bench's JVM shares the cores it measures.
   */
  private val PollMs = 1000L

  /** Waits until `done` or `untilMillis`, looking every `pollMs`, progress every 10 s. */
  private def await(label: String, untilMillis: Long, pollMs: Long = 250)(done: => Boolean)(note: => String): Boolean = {
    var nextNote = System.currentTimeMillis() + 10000
    var ok = done
    while (!ok && System.currentTimeMillis() < untilMillis) {
      Thread.sleep(pollMs)
      ok = done
      if (System.currentTimeMillis() >= nextNote) {
        BenchOut.progress(s"drain $label: $note")
        nextNote += 10000
      }
    }
    ok
  }

  /** Runs `f` while a thread looks at the drain as [[await]] does for the servers, every [[PollMs]]. */
  private def polling[A](look: => Any)(f: => A): A = {
    @volatile var on = true
    val t = new Thread(() => while (on) { Thread.sleep(PollMs); if (on) look }, "drain-poll")
    t.setDaemon(true)
    t.start()
    try f finally { on = false; t.join(PollMs * 2) }
  }

  /** Rates over the DELETEs that deleted a pod (200), in arrival order. */
  private def rates(deleted: Seq[Recorded]): Seq[(String, Any)] = {
    val ts = deleted.map(_.atMillis).sorted.toVector
    def rate(from: Int, to: Int): Double =
      if (to <= from || ts(to) == ts(from)) Double.NaN else (to - from) * 1000.0 / (ts(to) - ts(from))
    val n = ts.size
    val peak = if (ts.isEmpty) 0 else {
      var best = 0
      var j = 0
      for (i <- ts.indices) {
        while (ts(i) - ts(j) >= 1000) j += 1
        best = best.max(i - j + 1)
      }
      best
    }
    Seq(
      "deletes_per_s" -> (if (n < 2) Double.NaN else rate(0, n - 1)),
      "steady_deletes_per_s" -> (if (n < 10) Double.NaN else rate(n / 10, n - 1 - n / 10)),
      "peak_deletes_in_1s" -> peak,
      "first_to_last_delete_s" -> (if (n < 2) Double.NaN else (ts.last - ts.head) / 1000.0))
  }

  /** Answer codes of `ds` as the line reports them. */
  private def errors(ds: Seq[Recorded]): Seq[(String, Any)] = Seq(
    "delete_codes" -> BenchApi.codes(ds),
    "not_found_404" -> ds.count(_.status == 404),
    "conflict_409" -> ds.count(_.status == 409),
    "throttled_429" -> ds.count(_.status == 429),
    "server_errors_5xx" -> ds.count(_.status >= 500),
    "other_errors" -> ds.count(d => d.status != 200 && d.status != 404 && d.status != 409 && d.status != 429 && d.status < 500))

  /**
   * podsweep draining the backlog, in the daemon or in a patched Kyuubi server (`how`). Warm: the
   * server starts first, with one driver pod that never ends in the namespace, and leads it
   * before the backlog is created; the pods finished at the backlog's start and
   * [[Size.warmRetainMs]] later they are all due at once, so the drain is podsweep's pace from a
   * server that is already up (as after a failover, or a retain period that ends for many pods at
   * once), not the server's own start (a JVM's class loading and compilation, the informer's first
   * list) competing with it for the cores. Cold: the backlog is there when the server starts, as
   * at a fleet's first roll-out.
   */
  private def podsweep(apis: BenchApi.Pool, zk: ZooKeeperBackend, size: Size, label: String,
      keys: Map[String, String], raw: Option[Double], how: How): FrontierPoint = apis.use { api =>
    val warm = how.warm
    val ns = s"drain-$label"
    val retainMs = if (warm) size.warmRetainMs else size.retainMs
    val reader = new DrainReader(api, label)
    val cpu = new ControlPlaneCpu(api)
    var backlogMade: Option[(Double, Int)] = None
    if (!warm) {
      BenchOut.progress(s"drain $label: creating ${size.pods} overdue terminated driver pods on ${api.name}")
      backlogMade = Some(backlog(api, ns, size))
    }
    val idleSpan = reader.idle(size.idleMs)
    BenchOut.progress(s"drain $label: starting ${how.what} (${if (warm) "before its backlog" else "on its backlog"})")
    val conf = KyuubiServer.conf(Server, api, Seq(ns), retainMs, checkIntervalMs = size.checkIntervalMs) ++
      Map("kyuubi.ha.namespace" -> s"kyuubi-drain-$label") ++ zk.kyuubiConf ++ keys
    val logDir = Paths.get("target", "kyuubi-logs", "drain").toAbsolutePath.resolve(s"$label-${System.currentTimeMillis()}")
    if (warm) {
      // The scope comes to be when the server's informer sees a driver pod of the namespace: one
      // that never ends (Pending, no kubelet here), so the server leads before the backlog.
      val admin = api.client("drain-admin")
      try api.createPod(admin, ns, KyuubiPods.driver("spark-driver-seed", phase = "Pending")) finally admin.close()
    }
    val start = System.currentTimeMillis()
    val (server, serverLog, logFile): (FleetServer, () => Seq[String], java.nio.file.Path) = how match {
      case DaemonWarm =>
        val d = new PodsweepDaemon(Server, conf, logDir, onStart = cpu.follow)
        (d, () => d.log, d.logFile)
      case _ =>
        val k = new KyuubiServer(Server, KyuubiHome.Patched, conf, logDir, heapMb = 1024, onStart = cpu.follow)
        (k, () => k.log, k.logFile)
    }
    try {
      val ready = System.currentTimeMillis()
      var leaderAt: Option[Long] = None
      await(label, start + 120000) {
        if (leaderAt.isEmpty && server.isLeader(ns)) leaderAt = Some(System.currentTimeMillis())
        leaderAt.isDefined
      }(s"no leader yet")
      require(leaderAt.isDefined, s"drain $label: $Server not leading $ns after 120 s (log: $logFile)")
      // Warm: the backlog now, all of it due together once the retain period has passed.
      var dueAt: Option[Long] = None
      var trackedAtDue: Option[Long] = None
      var createdBeforeDueS: Option[Double] = None
      if (warm) {
        val finished = Instant.ofEpochMilli(System.currentTimeMillis()).truncatedTo(ChronoUnit.SECONDS)
        val due = finished.toEpochMilli + retainMs
        BenchOut.progress(s"drain $label: creating ${size.pods} terminated driver pods, due ${retainMs / 1000} s after they finished")
        backlogMade = Some(backlog(api, ns, size, finished))
        val made = System.currentTimeMillis()
        createdBeforeDueS = Some((due - made) / 1000.0)
        require(made < due, s"drain $label: creating the backlog took past its due time (${(made - due) / 1000.0} s late): " +
          s"raise Size.warmRetainMs (${size.warmRetainMs} ms)")
        // Every pod observed (tracked) before any is due, so the drain starts with all of them.
        await(label, due)(server.status(ns).number("tracked") >= size.pods)(s"${server.status(ns).number("tracked")} pods tracked")
        trackedAtDue = Some(server.status(ns).number("tracked"))
        dueAt = Some(due)
      }
      val deadline = System.currentTimeMillis() + size.drainTimeoutMs
      val firstBy = dueAt.getOrElse(start) + 120000
      await(label, firstBy)(deletes(api, ns).nonEmpty)("no DELETE yet")
      val firstAt = deletes(api, ns).headOption.map(_.atMillis)
        .getOrElse(throw new IllegalStateException(s"drain $label: no DELETE within 120 s (log: $logFile)"))
      def deletedPods: Int = LagWorkload.deletedPods(deletes(api, ns)).size
      // The adaptive limit and the DELETEs in flight, as the scope reports them, while it drains.
      val limits = Vector.newBuilder[(Long, Long)]
      val drained = await(label, deadline, PollMs) {
        val st = server.status(ns)
        limits += ((st.number("inflight_limit"), st.inflight()))
        deletedPods >= size.pods
      }(s"$deletedPods/${size.pods} pods deleted")
      Thread.sleep(size.settleMs) // any DELETE that follows the last pod's (none expected)
      val status = server.status(ns)
      val outcomes = Phases.OutcomeClasses.map(c => c -> status.outcome(c)).toMap
      val loud = serverLog().count(l => l.matches("^\\S+\\s+(WARN|ERROR) .*"))
      server.close()
      val end = System.currentTimeMillis()
      val all = deletes(api, ns)
      val ok = all.filter(_.status == 200)
      val lastPodAt = if (drained) Some(ok.map(_.atMillis).max) else None
      val span = lastPodAt.map(l => (firstAt, l))
      // Warm: the cost from a second before the pods were due (the server's start and the backlog's
      // creation left out); cold: from the server's start, its informer's list included.
      val runFrom = dueAt.map(_ - 1000).getOrElse(start)
      val (cpuFields, apiMs, etcdMs) = cpu.fields(idleSpan, (runFrom, end), LagWorkload.deletedPods(all).size, span)
      val (idleP99, p99) = reader.p99s(idleSpan, span)
      val seen = limits.result()
      def stat(xs: Seq[Long]): ListMap[String, Any] =
        ListMap("p50" -> BenchOut.percentile(xs.map(_.toDouble), 50), "max" -> (if (xs.isEmpty) None else Some(xs.max)))
      val (createS, writesPerPod) = backlogMade.getOrElse((Double.NaN, 0))
      BenchOut.line("drain", (Seq(
        "system" -> "podsweep",
        "label" -> label,
        "kind" -> (if (how == DaemonWarm) s"podsweep daemon (${PodsweepDaemon.binary.map(_.getPath).getOrElse("?")})" else KyuubiHome.Patched.label),
        "start" -> (if (warm) "warm: the server led the namespace before its backlog was created; all pods due at once"
          else "cold: the backlog was there when the server started"),
        "pods" -> size.pods,
        "finished_ago_s" -> (if (warm) None else Some(FinishedAgoS)),
        "retain_ms" -> retainMs,
        "backend" -> zk.name,
        "rate_limit" -> (if (keys.isEmpty) "default (adaptive)" else keys.map { case (k, v) => s"${k.stripPrefix(P)}=$v" }.mkString(", ")),
        "inflight_limit_seen" -> stat(seen.map(_._1)),
        "inflight_seen" -> stat(seen.map(_._2)),
        "status_samples" -> seen.size) ++
        apis.fields(api) ++
        Seq(
          "measured_over" -> "whole drain (first DELETE to last pod deleted)",
          "deletes_in_span" -> all.size,
          "pods_deleted_in_span" -> LagWorkload.deletedPods(all).size) ++
        rates(ok) ++
        Seq(
          "drained" -> drained,
          "drain_s_from_first_delete" -> lastPodAt.map(l => (l - firstAt) / 1000.0),
          "drain_s_from_server_start" -> lastPodAt.map(l => (l - start) / 1000.0),
          "drain_s_from_due" -> (for (d <- dueAt; l <- lastPodAt) yield (l - d) / 1000.0),
          "first_delete_s_after_due" -> dueAt.map(d => (firstAt - d) / 1000.0),
          "backlog_created_s_before_due" -> createdBeforeDueS,
          "tracked_at_due" -> trackedAtDue,
          "pods_left" -> (size.pods - LagWorkload.deletedPods(all).size),
          "server_start_to_ready_s" -> (ready - start) / 1000.0,
          "server_start_to_leader_s" -> leaderAt.map(l => (l - start) / 1000.0),
          "server_start_to_first_delete_s" -> (firstAt - start) / 1000.0,
          "delete_requests" -> all.size,
          "pods_deleted_twice" -> ok.groupBy(LagWorkload.podOf).count(_._2.size > 1)) ++
        ofRaw(ok, raw) ++
        reader.fields(idleSpan, span) ++
        errors(all) ++
        Seq(
          "client_deletes" -> outcomes.values.sum,
          "podsweep_outcomes" -> ListMap(outcomes.toSeq.sortBy(_._1): _*),
          "warn_error_lines" -> loud,
          "create_s" -> createS,
          "create_writes_per_s" -> size.pods * writesPerPod / createS,
          "cpu_measured_from" -> (if (warm) "a second before the pods were due, to the server's close"
            else "the server's start, to its close")) ++
        cpuFields ++
        Seq("smoke" -> (size == Smoke))): _*)
      FrontierPoint(label, None, deletesPerS(ok).getOrElse(Double.NaN), p99, idleP99, apiMs, etcdMs)
    } finally {
      scala.util.Try(server.close())
      reader.close()
      cpu.close()
    }
  }

  private def stock(apis: BenchApi.Pool, size: Size, raw: Option[Double]): FrontierPoint = apis.use { api =>
    val label = "stock"
    val ns = s"drain-$label"
    BenchOut.progress(s"drain $label: creating ${size.pods} overdue terminated driver pods on ${api.name}")
    val (createS, writesPerPod) = backlog(api, ns, size)
    val reader = new DrainReader(api, label)
    val cpu = new ControlPlaneCpu(api)
    val idleSpan = reader.idle(size.idleMs)
    BenchOut.progress(f"drain $label: created in $createS%.1f s; starting a stock Kyuubi 1.12.0 server")
    val conf = KyuubiServer.conf(Server, api, Seq(ns), size.retainMs, checkIntervalMs = size.checkIntervalMs)
    val logDir = Paths.get("target", "kyuubi-logs", "drain").toAbsolutePath.resolve(s"$label-${System.currentTimeMillis()}")
    val start = System.currentTimeMillis()
    val server = new KyuubiServer(Server, KyuubiHome.Stock, conf, logDir, heapMb = 1024, onStart = cpu.follow)
    try {
      val ready = System.currentTimeMillis()
      val deadline = start + size.drainTimeoutMs
      def deletedPods: Int = LagWorkload.deletedPods(deletes(api, ns)).size
      val drained = await(label, deadline, PollMs)(deletedPods >= size.pods)(s"$deletedPods/${size.pods} pods deleted")
      // The second round: each DELETE event armed the pod's entry again; a retain period (and the
      // next check) later the server deletes it again and gets 404. Quiet = no DELETE for
      // retain + check interval + a few seconds.
      val quietMs = size.retainMs + size.checkIntervalMs + size.quietExtraMs
      await(label, deadline, PollMs) {
        val last = deletes(api, ns).lastOption.map(_.atMillis).getOrElse(0L)
        System.currentTimeMillis() - last >= quietMs
      }(s"${deletes(api, ns).size} DELETEs so far")
      val failed = server.logLines("Failed to delete pod").size
      val completed = server.logLines("Operation of delete pod").size
      val loud = server.log.count(l => l.matches("^\\S+ (WARN|ERROR) .*"))
      // Not stop(): stock stop() deletes every pod its cache still holds (not measured here).
      server.kill()
      val end = System.currentTimeMillis()
      val all = deletes(api, ns)
      val ok = all.filter(_.status == 200)
      val firstAt = all.headOption.map(_.atMillis)
      val lastPodAt = if (ok.isEmpty) None else Some(ok.map(_.atMillis).max)
      val span = for (f <- firstAt; l <- lastPodAt) yield (f, l)
      val second = all.filter(_.status == 404)
      // Both rounds are its cost: CPU over the whole run, per pod cleaned.
      val (cpuFields, apiMs, etcdMs) = cpu.fields(idleSpan, (start, end), LagWorkload.deletedPods(all).size, span)
      val (idleP99, p99) = reader.p99s(idleSpan, span)
      BenchOut.line("drain", (Seq(
        "system" -> "baseline",
        "label" -> label,
        "kind" -> KyuubiHome.Stock.label,
        "pods" -> size.pods,
        "finished_ago_s" -> FinishedAgoS,
        "retain_ms" -> size.retainMs,
        "check_interval_ms" -> size.checkIntervalMs,
        "rate_limit" -> "none (Kyuubi 1.12.0 has no DELETE rate limit)") ++
        apis.fields(api) ++
        Seq(
          "measured_over" -> s"whole run (until no DELETE for retain + check interval + ${size.quietExtraMs / 1000.0} s)",
          "deletes_in_span" -> all.size,
          "pods_deleted_in_span" -> LagWorkload.deletedPods(all).size) ++
        rates(ok) ++
        Seq(
          "drained" -> drained,
          "drain_s_from_first_delete" -> span.map(s => (s._2 - s._1) / 1000.0),
          "drain_s_from_server_start" -> lastPodAt.map(l => (l - start) / 1000.0),
          "pods_left" -> (size.pods - LagWorkload.deletedPods(all).size),
          "server_start_to_ready_s" -> (ready - start) / 1000.0,
          "server_start_to_first_delete_s" -> firstAt.map(f => (f - start) / 1000.0),
          "delete_requests" -> all.size,
          "deletes_per_pod" -> all.size.toDouble / size.pods,
          "pods_deleted_twice" -> ok.groupBy(LagWorkload.podOf).count(_._2.size > 1),
          "second_round_deletes" -> second.size,
          "first_round_of_raw" -> ofRaw(ok, raw).headOption.map(_._2).orNull,
          "second_round_deletes_per_s" -> (if (second.size < 2) Double.NaN
            else (second.size - 1) * 1000.0 / (second.map(_.atMillis).max - second.map(_.atMillis).min).max(1))) ++
        reader.fields(idleSpan, span) ++
        errors(all) ++
        Seq(
          "client_deletes" -> (failed + completed),
          "failed_to_delete_lines" -> failed,
          "warn_error_lines" -> loud,
          "create_s" -> createS,
          "create_writes_per_s" -> size.pods * writesPerPod / createS) ++
        cpuFields ++
        Seq("smoke" -> (size == Smoke))): _*)
      FrontierPoint(label, None, deletesPerS(ok).getOrElse(Double.NaN), p99, idleP99, apiMs, etcdMs)
    } finally {
      scala.util.Try(server.kill())
      reader.close()
      cpu.close()
    }
  }

  /** `deletes_per_s` of these DELETEs (answered 200), as [[rates]] computes it. */
  private def deletesPerS(ok: Seq[Recorded]): Option[Double] =
    rates(ok).collectFirst { case ("deletes_per_s", r: Double) if !r.isNaN => r }

  /** `deletes_per_s` of these DELETEs (answered 200) over the raw client's best. */
  private def ofRaw(ok: Seq[Recorded], raw: Option[Double]): Seq[(String, Any)] = {
    val rate = deletesPerS(ok).getOrElse(Double.NaN)
    Seq("of_raw" -> raw.filter(_ > 0).map(r => rate / r).getOrElse(Double.NaN))
  }

  /**
   * One point of the API server's curve: `inFlight` DELETEs in flight at once, of every listed pod,
   * by a plain client under a ServiceAccount of its own (API Priority and Fairness treats it as it
   * treats a Kyuubi server's).
   */
  private def rawClient(apis: BenchApi.Pool, size: Size, inFlight: Int): FrontierPoint = apis.use { api =>
    val label = s"raw-$inFlight"
    val ns = s"drain-$label"
    BenchOut.progress(s"drain $label: creating ${size.pods} overdue terminated driver pods on ${api.name}")
    val (createS, writesPerPod) = backlog(api, ns, size)
    val reader = new DrainReader(api, label)
    val cpu = new ControlPlaneCpu(api)
    val client = api.client(RawClient, inFlight)
    try {
      val idleSpan = reader.idle(size.idleMs)
      val start = System.currentTimeMillis()
      val names = client.pods().inNamespace(ns).list().getItems.asScala.map(_.getMetadata.getName).toVector
      BenchOut.progress(s"drain $label: deleting ${names.size} pods, $inFlight at a time")
      val failed = polling(LagWorkload.deletedPods(deletes(api, ns, RawClient)).size) {
        LagWorkload.parallel(names, inFlight) { n =>
          scala.util.Try(client.pods().inNamespace(ns).withName(n).delete()).isFailure
        }.count(identity)
      }
      val end = System.currentTimeMillis()
      // Every DELETE answered before `parallel` returned, so the audit log has them all.
      val all = deletes(api, ns, RawClient)
      val ok = all.filter(_.status == 200)
      val span = if (ok.isEmpty) None else Some((ok.map(_.atMillis).min, ok.map(_.atMillis).max))
      val (cpuFields, apiMs, etcdMs) = cpu.fields(idleSpan, (start, end), LagWorkload.deletedPods(all).size)
      val (idleP99, p99) = reader.p99s(idleSpan, span)
      BenchOut.line("drain", (Seq(
        "system" -> "raw client",
        "label" -> label,
        "kind" -> s"$inFlight concurrent DELETEs (fabric8, ServiceAccount $RawClient)",
        "in_flight" -> inFlight,
        "pods" -> size.pods,
        "finished_ago_s" -> FinishedAgoS) ++
        apis.fields(api) ++
        Seq(
          "measured_over" -> "first to last DELETE",
          "deletes_in_span" -> all.size,
          "pods_deleted_in_span" -> LagWorkload.deletedPods(all).size) ++
        rates(ok) ++
        Seq(
          "drained" -> (LagWorkload.deletedPods(all).size >= size.pods),
          "pods_left" -> (size.pods - LagWorkload.deletedPods(all).size),
          "client_wall_s" -> (end - start) / 1000.0,
          "client_failures" -> failed,
          "delete_requests" -> all.size) ++
        reader.fields(idleSpan, span) ++
        errors(all) ++
        Seq(
          "create_s" -> createS,
          "create_writes_per_s" -> size.pods * writesPerPod / createS) ++
        cpuFields ++
        Seq("smoke" -> (size == Smoke))): _*)
      FrontierPoint(label, Some(inFlight), deletesPerS(ok).getOrElse(Double.NaN), p99, idleP99, apiMs, etcdMs)
    } finally {
      client.close()
      reader.close()
      cpu.close()
    }
  }
}
