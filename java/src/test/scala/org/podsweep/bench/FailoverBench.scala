package org.podsweep.bench

import java.io.{BufferedReader, File, InputStreamReader, OutputStreamWriter, Writer}
import java.nio.charset.StandardCharsets
import java.nio.file.Paths
import java.time.Instant
import java.util.UUID
import java.util.concurrent.{LinkedBlockingQueue, TimeUnit}

import scala.collection.JavaConverters._
import scala.collection.immutable.ListMap
import scala.util.Try

import io.fabric8.kubernetes.api.model.Pod
import org.apache.curator.test.{InstanceSpec, TestingServer}
import org.podsweep.{NativeLoader, PodEvent, PodSweeper, ScopeStatus}
import org.podsweep.testkit.{EtcdServer, KyuubiPods, LogCapture, MockKube}

/**
 * `failover`: the cleanup leader of a scope is a JVM process of its own ([[FailoverLeader]]); this
 * JVM runs its successor, a follower that alone has observed a pod which terminated an hour ago
 * (overdue). The leader is then killed with SIGKILL (`Process.destroyForcibly`, checked by its exit
 * status 137) or asked to `close()`; the figure is the time from that moment to the successor's
 * first DELETE of the overdue pod arriving at the mock API server (its arrival time as the mock
 * recorded it). ZooKeeper (Curator TestingServer with a short tickTime so a 2 s session is allowed)
 * and etcd (the system's etcd, lease 2 s), or Kyuubi's default timeouts (see [[KyuubiDefaults]]);
 * every run on a fresh namespace; one JSON line per backend with median / min / max per mode and
 * the timeouts used.
 */
object FailoverBench {
  /**
   * `PODSWEEP_BENCH_FAILOVER_TIMEOUTS=kyuubi`: Kyuubi's default timeouts instead of 2 s ones: no
   * session, connection or lease key is set (so podsweep reads Kyuubi's defaults: ZooKeeper
   * session 60 s asked, etcd lease 10 s) and ZooKeeper runs with its default tick of 2 s, so it
   * grants at most 40 s.
   */
  private val KyuubiDefaults = sys.env.get("PODSWEEP_BENCH_FAILOVER_TIMEOUTS").map(_.trim).contains("kyuubi")
  private val ZkTickMs = if (KyuubiDefaults) 2000 else 200
  private val ZkSessionMs = if (KyuubiDefaults) 60000 else 2000
  private val ZkConnectionMs = 2000
  private val EtcdLease = if (KyuubiDefaults) "PT10S" else "PT2S"
  /** Given to the bench's servers only when not at Kyuubi's defaults. */
  private def shortTimeouts(keys: (String, String)*): Map[String, String] = if (KyuubiDefaults) Map.empty else keys.toMap
  private val Retain = "PT1S"
  private val OrphanAgeSeconds = 3600L

  private val Modes = Seq("sigkill", "graceful_close")

  /** One measured failover. */
  private final case class Outcome(
      mode: String,
      toFirstDeleteMs: Long,
      toSuccessorLeadingMs: Double,
      firstDeleteStatus: Int,
      leaderDeletes: Int,
      successorOrphanDeletes: Int,
      runningPodDeletes: Int,
      leaderExit: Int,
      leaderCloseMs: Option[Double])

  private final class Backend(
      val name: String,
      val conf: Map[String, String],
      val timeouts: () => Map[String, Any],
      close: () => Unit) extends AutoCloseable {
    override def close(): Unit = close.apply()
  }

  def run(smoke: Boolean): Unit = {
    val runs = if (smoke) 1 else sys.env.get("PODSWEEP_BENCH_RUNS").flatMap(s => Try(s.trim.toInt).toOption).getOrElse(5).max(1)
    NativeLoader.load()
    val kube = new MockKube
    try {
      Seq("zookeeper", "etcd").foreach { name =>
        val capture = new LogCapture
        val backend = try start(name, capture) catch { case t: Throwable => capture.close(); throw t }
        try {
          val outcomes = for {
            i <- 1 to runs
            mode <- Modes
          } yield {
            val o = once(kube, backend, mode, i)
            BenchOut.progress(s"failover $name $mode run $i: first DELETE after ${o.toFirstDeleteMs} ms " +
              f"(successor leading after ${o.toSuccessorLeadingMs}%.1f ms, leader exit ${o.leaderExit})")
            o
          }
          report(backend, runs, outcomes)
        } finally {
          Try(backend.close())
          capture.close()
        }
      }
    } finally kube.close()
  }

  private def start(name: String, capture: LogCapture): Backend = name match {
    case "zookeeper" =>
      // tickTime bounds the sessions the server grants to [2, 20] x tickTime.
      val spec = new InstanceSpec(null, -1, -1, -1, true, -1, ZkTickMs, -1)
      val zk = new TestingServer(spec, true)
      val conf = Map("kyuubi.ha.addresses" -> zk.getConnectString) ++ shortTimeouts(
        "kyuubi.ha.zookeeper.session.timeout" -> ZkSessionMs.toString,
        "kyuubi.ha.zookeeper.connection.timeout" -> ZkConnectionMs.toString)
      def negotiated: Seq[Long] = capture.mentioning("negotiated session timeout").flatMap { r =>
        "negotiated_ms=(\\d+)".r.findFirstMatchIn(r.message).map(_.group(1).toLong)
          .orElse("negotiated session timeout (\\d+(?:\\.\\d+)?)(ms|s)".r.findFirstMatchIn(r.message).map { m =>
            val v = m.group(1).toDouble
            (if (m.group(2) == "s") v * 1000 else v).round
          })
      }.distinct
      new Backend(name, conf, () => ListMap(
        "kind" -> (if (KyuubiDefaults) "Kyuubi's defaults (no timeout key set)" else "short"),
        "session_timeout_ms_requested" -> ZkSessionMs,
        "server_tick_ms" -> ZkTickMs,
        "server_session_timeout_bounds_ms" -> Seq(2 * ZkTickMs, 20 * ZkTickMs),
        "session_timeout_ms_negotiated" -> negotiated,
        "connection_timeout_ms" -> (if (KyuubiDefaults) "Kyuubi's default" else ZkConnectionMs),
        "server" -> s"Curator TestingServer, ZooKeeper ${org.apache.zookeeper.Version.getFullVersion.takeWhile(_ != '-').trim} (in the bench JVM)"
      ), () => zk.close())
    case "etcd" =>
      val etcd = new EtcdServer()
      val version = Try {
        val p = new ProcessBuilder(EtcdServer.defaultBinary, "--version").redirectErrorStream(true).start()
        val v = scala.io.Source.fromInputStream(p.getInputStream, "UTF-8").getLines().toList.headOption.getOrElse("")
        p.waitFor(10, TimeUnit.SECONDS)
        v.trim
      }.getOrElse("unknown")
      val conf = etcd.kyuubiConf(EtcdLease).filter { case (k, _) =>
        !k.endsWith(".lease.timeout") && k != EtcdServer.ElectionLeaseKey
      } ++ shortTimeouts("kyuubi.ha.etcd.lease.timeout" -> EtcdLease, EtcdServer.ElectionLeaseKey -> EtcdLease)
      new Backend(name, conf, () => ListMap(
        "kind" -> (if (KyuubiDefaults) "Kyuubi's defaults (no timeout key set)" else "short"),
        "lease_timeout" -> EtcdLease,
        "lease_ttl_ms" -> java.time.Duration.parse(EtcdLease).toMillis,
        "server" -> s"${EtcdServer.defaultBinary} ($version), heartbeat 50 ms, election timeout 500 ms"
      ), () => etcd.close())
  }

  /** The Kyuubi configuration of one server of the bench (cleanup ALL, short retain, the backend's HA keys). */
  private def conf(kube: MockKube, backend: Backend, token: String): Map[String, String] = Map(
    "kyuubi.kubernetes.master.address" -> kube.url,
    "kyuubi.kubernetes.namespace" -> "default",
    "kyuubi.kubernetes.authenticate.oauthToken" -> token,
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind" -> "ALL",
    "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> Retain,
    "kyuubi.ha.namespace" -> s"podsweep-failover-bench-${backend.name}"
  ) ++ backend.conf

  private def uidOf(pod: Pod): String = Option(pod.getMetadata.getUid).getOrElse(UUID.randomUUID().toString)

  private def once(kube: MockKube, backend: Backend, mode: String, run: Int): Outcome = {
    val suffix = UUID.randomUUID().toString.take(6)
    val ns = s"failover-${if (mode == "sigkill") "kill" else "close"}-$run-$suffix"
    val admin = kube.client("bench-admin")
    val (running, orphan) = try {
      val r = admin.pods().inNamespace(ns).resource(KyuubiPods.driver("running")).create()
      val o = admin.pods().inNamespace(ns)
        .resource(KyuubiPods.terminated(KyuubiPods.driver("orphan"), succeeded = true,
          Instant.now().minusSeconds(OrphanAgeSeconds)))
        .create()
      (r, o)
    } finally admin.close()
    val leaderToken = s"leader-$suffix"
    val successorToken = s"successor-$suffix"

    val leader = new LeaderProcess(conf(kube, backend, leaderToken), s"leader-$run:10009", ns, running)
    var successor: PodSweeper = null
    try {
      leader.awaitLine("leader", 90000)
      successor = PodSweeper.create(conf(kube, backend, successorToken).asJava, s"successor-$run:10009")
      successor.observe(null, ns, PodEvent.ADD, KyuubiPods.tag(running), "running", uidOf(running), "RUNNING",
        true, 0L, false)
      successor.observe(null, ns, PodEvent.ADD, KyuubiPods.tag(orphan), "orphan", uidOf(orphan),
        KyuubiPods.appState(orphan, PodEvent.ADD), true, KyuubiPods.terminatedAtMillis(orphan), false)
      val followDeadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(60)
      def status = ScopeStatus.parse(successor.scopeStatus(null, ns))
      while (!(status.leadership == "FOLLOWING" && status.tracked >= 1)) {
        require(System.nanoTime() < followDeadline, s"successor not following with the pod tracked: $status")
        Thread.sleep(5)
      }
      // Let the successor's latch node / campaign reach the server before the leader goes.
      Thread.sleep(300)
      require(!successor.isLeader(null, ns), s"the successor leads before the leader went: $status")
      require(kube.deletesOf(ns, "orphan").isEmpty, s"orphan deleted before the leader went: ${kube.deletesOf(ns, "orphan")}")

      val t0Millis = System.currentTimeMillis()
      val t0 = System.nanoTime()
      if (mode == "sigkill") leader.kill() else leader.requestClose()
      var leadingNs = -1L
      var first: Option[org.podsweep.testkit.Recorded] = None
      val limitS = if (KyuubiDefaults) 120 else 60
      val deadline = t0 + TimeUnit.SECONDS.toNanos(limitS)
      while (first.isEmpty) {
        if (leadingNs < 0 && successor.isLeader(null, ns)) leadingNs = System.nanoTime() - t0
        first = kube.podDeletes(ns).find(_.pod.contains((ns, "orphan")))
        if (first.isEmpty) {
          require(System.nanoTime() < deadline, s"no DELETE of the orphan $limitS s after $mode: ${ScopeStatus.parse(successor.scopeStatus(null, ns))}")
          Thread.sleep(1)
        }
      }
      if (leadingNs < 0) leadingNs = System.nanoTime() - t0
      val exit = leader.awaitExit(30000)
      val closeMs = if (mode == "sigkill") None else leader.closedMs
      // Late duplicates, if any, arrive within a moment.
      Thread.sleep(300)
      val deletes = kube.podDeletes(ns)
      Outcome(
        mode = mode,
        toFirstDeleteMs = first.get.atMillis - t0Millis,
        toSuccessorLeadingMs = leadingNs / 1e6,
        firstDeleteStatus = first.get.status,
        leaderDeletes = deletes.count(_.bearer.contains(leaderToken)),
        successorOrphanDeletes = deletes.count(r => r.bearer.contains(successorToken) && r.pod.contains((ns, "orphan"))),
        runningPodDeletes = deletes.count(_.pod.contains((ns, "running"))),
        leaderExit = exit,
        leaderCloseMs = closeMs)
    } finally {
      if (successor != null) Try(successor.close())
      leader.destroy()
    }
  }

  private def stats(xs: Seq[Double]): ListMap[String, Any] = ListMap(
    "median_ms" -> BenchOut.median(xs),
    "min_ms" -> (if (xs.isEmpty) Double.NaN else xs.min),
    "max_ms" -> (if (xs.isEmpty) Double.NaN else xs.max),
    "runs" -> xs.size,
    "all_ms" -> xs)

  private def report(backend: Backend, runs: Int, outcomes: Seq[Outcome]): Unit = {
    def of(mode: String) = outcomes.filter(_.mode == mode)
    val killed = of("sigkill")
    val closed = of("graceful_close")
    BenchOut.line("failover",
      "backend" -> backend.name,
      "timeouts" -> backend.timeouts(),
      "sigkill_to_first_delete" -> stats(killed.map(_.toFirstDeleteMs.toDouble)),
      "graceful_close_to_first_delete" -> stats(closed.map(_.toFirstDeleteMs.toDouble)),
      "successor_leading_after_ms" -> ListMap(
        "sigkill_median" -> BenchOut.median(killed.map(_.toSuccessorLeadingMs)),
        "graceful_close_median" -> BenchOut.median(closed.map(_.toSuccessorLeadingMs))),
      "leader_close_call_ms_median" -> BenchOut.median(closed.flatMap(_.leaderCloseMs)),
      "leader_exit_status" -> ListMap(
        "sigkill" -> killed.map(_.leaderExit).distinct,
        "graceful_close" -> closed.map(_.leaderExit).distinct),
      "deletes" -> ListMap(
        "by_old_leader" -> outcomes.map(_.leaderDeletes).sum,
        "of_overdue_pod_by_successor_per_run" -> outcomes.map(_.successorOrphanDeletes).distinct,
        "of_running_pod" -> outcomes.map(_.runningPodDeletes).sum,
        "first_delete_status" -> outcomes.map(_.firstDeleteStatus).distinct),
      "counted" -> ("times from the kill / close request (wall clock, this JVM) to the arrival of the successor's " +
        "first DELETE of the overdue pod at the mock API server (ms resolution); by_old_leader = DELETEs of any pod " +
        "in the run's namespace carrying the old leader's token (it observed only the running pod, never the " +
        "overdue one)"),
      "runs_per_mode" -> runs,
      "leader_process" -> "jvm",
      "load_average_1m" -> java.lang.management.ManagementFactory.getOperatingSystemMXBean.getSystemLoadAverage,
      "kill" -> "Process.destroyForcibly (SIGKILL; exit status 137 = 128 + 9)")
  }

  /** The leader JVM: [[FailoverLeader]] on this JVM's class path, stdout read line by line. */
  private final class LeaderProcess(conf: Map[String, String], serverId: String, ns: String, running: Pod) {
    private val lines = new LinkedBlockingQueue[String]()
    @volatile var closedMs: Option[Double] = None

    private val process: Process = {
      val javaBin = Paths.get(System.getProperty("java.home"), "bin", "java").toString
      val lib = Option(NativeLoader.loadedFrom()).filter(p => new File(p).isAbsolute && new File(p).isFile)
      val cmd = Seq(javaBin, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1") ++
        lib.map(p => s"-D${NativeLoader.PATH_PROPERTY}=$p") ++
        Seq(
          "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
          "-Dorg.slf4j.simpleLogger.log.org.podsweep=info",
          "-Dorg.slf4j.simpleLogger.showDateTime=true",
          "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
          "-Dorg.slf4j.simpleLogger.logFile=System.err",
          "-cp", System.getProperty("java.class.path"),
          classOf[FailoverLeader].getName,
          serverId, ns, KyuubiPods.tag(running), running.getMetadata.getName, uidOf(running)) ++
        conf.toSeq.sortBy(_._1).map { case (k, v) => s"$k=$v" }
      new ProcessBuilder(cmd: _*)
        .redirectError(ProcessBuilder.Redirect.appendTo(LeaderProcess.logFile))
        .start()
    }

    private val stdin: Writer = new OutputStreamWriter(process.getOutputStream, StandardCharsets.UTF_8)

    private val reader = new Thread(new Runnable {
      override def run(): Unit = {
        val in = new BufferedReader(new InputStreamReader(process.getInputStream, StandardCharsets.UTF_8))
        Iterator.continually(in.readLine()).takeWhile(_ != null).foreach { l =>
          if (l.startsWith("closed ")) closedMs = Try(l.stripPrefix("closed ").trim.toDouble).toOption
          lines.put(l)
        }
      }
    }, s"failover-leader-$serverId")
    reader.setDaemon(true)
    reader.start()

    def awaitLine(expected: String, timeoutMs: Long): Unit = {
      val deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMs)
      var seen = false
      while (!seen) {
        val l = lines.poll(50, TimeUnit.MILLISECONDS)
        if (l != null && l.trim == expected) seen = true
        else if (l == null) {
          if (!process.isAlive && lines.isEmpty)
            sys.error(s"leader process exited with ${process.exitValue()} before '$expected' (log: ${LeaderProcess.logFile})")
          if (System.nanoTime() > deadline)
            sys.error(s"leader process printed no '$expected' within $timeoutMs ms (log: ${LeaderProcess.logFile})")
        }
      }
    }

    def kill(): Unit = process.destroyForcibly()

    def requestClose(): Unit = {
      stdin.write("close\n")
      stdin.flush()
    }

    def awaitExit(timeoutMs: Long): Int = {
      if (!process.waitFor(timeoutMs, TimeUnit.MILLISECONDS)) sys.error(s"leader process $serverId did not exit")
      process.exitValue()
    }

    def destroy(): Unit = {
      Try(stdin.close())
      if (process.isAlive) {
        process.destroyForcibly()
        Try(process.waitFor(10, TimeUnit.SECONDS))
      }
    }
  }

  private object LeaderProcess {
    /** The leader JVMs' stderr (their logs), next to the bench log. */
    lazy val logFile: File = {
      val dir = Option(System.getProperty("org.slf4j.simpleLogger.logFile")).map(f => new File(f).getAbsoluteFile.getParentFile)
        .getOrElse(new File("target"))
      dir.mkdirs()
      new File(dir, "bench-failover-leader.log")
    }
  }
}
