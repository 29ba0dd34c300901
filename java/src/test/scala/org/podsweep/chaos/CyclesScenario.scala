package org.podsweep.chaos

import java.lang.management.ManagementFactory
import java.nio.file.{Files, Paths}
import java.util.concurrent.TimeUnit

import scala.collection.JavaConverters._
import scala.io.Source

import org.apache.curator.framework.CuratorFrameworkFactory
import org.apache.curator.retry.RetryOneTime
import org.apache.curator.test.TestingServer
import org.podsweep.{PodEvent, PodSweeper}
import org.podsweep.chaos.Chaos.Outcome
import org.podsweep.testkit.{KyuubiHome, PodsApi}

/**
 * `cycles`: create / observe / close, again and again, in one JVM of its own: local mode, and with
 * a ZooKeeper (each cycle's scope campaigns, leads and resigns). Threads, file descriptors and RSS
 * of that JVM after the first cycle and at the end, and the ZooKeeper ephemeral nodes left behind.
 * Safety: the JVM lives, and no ephemeral node (a latch candidate that would keep leading) remains.
 */
object CyclesScenario {
  def run(smoke: Boolean): Seq[Outcome] = {
    val n = if (smoke) 300 else 10000
    val api = new PodsApi()
    try Seq(cycle("local", n, api, None), {
      val zk = new TestingServer(true)
      try cycle("zookeeper", if (smoke) 100 else n, api, Some(zk.getConnectString)) finally zk.close()
    }) finally api.close()
  }

  private def ephemerals(connect: String): Int = {
    val c = CuratorFrameworkFactory.newClient(connect, new RetryOneTime(100))
    c.start()
    try {
      def walk(path: String): Int = {
        val stat = c.checkExists().forPath(path)
        val own = if (stat != null && stat.getEphemeralOwner != 0) 1 else 0
        own + c.getChildren.forPath(path).asScala.map(ch => walk(if (path == "/") s"/$ch" else s"$path/$ch")).sum
      }
      walk("/")
    } finally c.close()
  }

  private def cycle(backend: String, n: Int, api: PodsApi, zk: Option[String]): Outcome = {
    val dir = Files.createTempDirectory("podsweep-cycles-")
    val summary = dir.resolve("summary.txt")
    val java = Paths.get(System.getProperty("java.home"), "bin", "java").toString
    val native = KyuubiHome.nativeLibrary.map(_.getAbsolutePath).getOrElse("")
    val cmd = Seq(java, "-Xmx512m", s"-Dpodsweep.native.path=$native", "-Dorg.slf4j.simpleLogger.defaultLogLevel=off",
      "-cp", System.getProperty("java.class.path"), "org.podsweep.chaos.CyclesProbe",
      n.toString, api.url, zk.getOrElse("-"), summary.toString)
    val t0 = System.nanoTime()
    val p = new ProcessBuilder(cmd: _*).directory(dir.toFile)
      .redirectOutput(dir.resolve("probe.out").toFile).redirectError(dir.resolve("probe.err").toFile).start()
    val finished = p.waitFor(60, TimeUnit.MINUTES)
    if (!finished) p.destroyForcibly()
    val code = if (finished) p.exitValue() else -1
    val left = zk.map(ephemerals).getOrElse(0)
    val f: Map[String, String] =
      if (Files.isRegularFile(summary)) Source.fromFile(summary.toFile, "UTF-8").getLines().flatMap { l =>
        l.split("=", 2) match { case Array(k, v) => Some(k -> v); case _ => None }
      }.toMap else Map.empty
    def num(k: String): Long = f.get(k).map(_.toLong).getOrElse(-1L)
    if (code != 0) Chaos.progress(s"cycles $backend: the probe JVM ended with status $code; see $dir")
    Outcome(backend, n, api.podDeletes().size, 0, duplicatesWithinBound = true, 0, api.podDeletes().size,
      if (code != 0) 1 else 0,
      Seq(
        "cycles" -> num("cycles"),
        "threads_start" -> num("threads_start"), "threads_end" -> num("threads_end"),
        "fds_start" -> num("fds_start"), "fds_end" -> num("fds_end"),
        "rss_mb_start" -> num("rss_kb_start") / 1024, "rss_mb_end" -> num("rss_kb_end") / 1024,
        "zk_ephemeral_nodes_end" -> left,
        "led_every_cycle" -> (num("led") == num("cycles")),
        "probe_seconds" -> (System.nanoTime() - t0) / 1e9),
      broken = (if (left != 0) Seq(s"$left ZooKeeper ephemeral nodes left after the last close") else Nil) ++
        (if (num("led") != num("cycles")) Seq(s"led in ${num("led")} of ${num("cycles")} cycles") else Nil))
  }
}

/** Runs in its own JVM for [[CyclesScenario]]; writes `key=value` lines to the summary file. */
object CyclesProbe {
  private def fds: Long = Option(new java.io.File("/proc/self/fd").list()).map(_.length.toLong).getOrElse(-1L)
  private def rssKb: Long = Source.fromFile("/proc/self/status").getLines()
    .collectFirst { case l if l.startsWith("VmRSS:") => l.split("\\s+")(1).toLong }.getOrElse(-1L)
  private def threads: Long = ManagementFactory.getThreadMXBean.getThreadCount.toLong

  def main(args: Array[String]): Unit = {
    val Array(nArg, apiUrl, zk, summaryPath) = args
    val n = nArg.toInt
    val conf = Map(
      "kyuubi.kubernetes.master.address" -> apiUrl,
      "kyuubi.kubernetes.authenticate.oauthToken" -> "cycles",
      "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind" -> "ALL",
      "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "PT1H") ++
      (if (zk == "-") Map.empty else Map("kyuubi.ha.addresses" -> zk, "kyuubi.ha.namespace" -> "chaos-cycles",
        "kyuubi.ha.zookeeper.session.timeout" -> "6000"))
    var led = 0
    var start = (0L, 0L, 0L)
    (1 to n).foreach { i =>
      val s = PodSweeper.create(conf.asJava, s"cycles:$i")
      try {
        s.observe(null, "cycles", PodEvent.UPDATE, s"tag-$i", s"driver-$i", s"uid-$i", "FINISHED", true,
          System.currentTimeMillis(), false)
        val by = System.currentTimeMillis() + 10000
        while (!s.isLeader(null, "cycles") && System.currentTimeMillis() < by) Thread.sleep(2)
        if (s.isLeader(null, "cycles")) led += 1
      } finally s.close()
      if (i == 1) start = (threads, fds, rssKb)
    }
    System.gc()
    Thread.sleep(1000)
    val lines = Seq(
      s"cycles=$n", s"led=$led",
      s"threads_start=${start._1}", s"fds_start=${start._2}", s"rss_kb_start=${start._3}",
      s"threads_end=$threads", s"fds_end=$fds", s"rss_kb_end=$rssKb")
    Files.write(Paths.get(summaryPath), lines.mkString("\n").getBytes("UTF-8"))
    System.exit(0)
  }
}
