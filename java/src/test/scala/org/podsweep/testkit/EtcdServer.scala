package org.podsweep.testkit

import java.io.File
import java.net.{HttpURLConnection, ServerSocket, URL}
import java.nio.file.{Files, Path}
import java.util.concurrent.TimeUnit

import scala.io.Source
import scala.util.Try

/**
 * A single-member etcd (the system's `etcd` binary, by default /usr/bin/etcd or `$PODSWEEP_ETCD`)
 * on free loopback client and peer ports with a temporary data directory. The constructor returns
 * once `GET /health` answers healthy; `close()` kills the process and removes the data directory.
 */
final class EtcdServer(binary: String = EtcdServer.defaultBinary, startTimeoutMs: Long = 30000L)
    extends AutoCloseable {
  private val dataDir: Path = Files.createTempDirectory("podsweep-etcd-")
  private val logFile: File = dataDir.resolveSibling(dataDir.getFileName.toString + ".log").toFile

  val clientPort: Int = EtcdServer.freePort()
  val peerPort: Int = {
    var p = EtcdServer.freePort()
    while (p == clientPort) p = EtcdServer.freePort()
    p
  }

  /** The endpoint as `kyuubi.ha.addresses` takes it. */
  val address: String = s"127.0.0.1:$clientPort"
  val clientUrl: String = s"http://$address"

  private val process: Process = {
    val peerUrl = s"http://127.0.0.1:$peerPort"
    val cmd = Seq(
      binary,
      "--name", "default",
      "--data-dir", dataDir.resolve("data").toString,
      "--listen-client-urls", clientUrl,
      "--advertise-client-urls", clientUrl,
      "--listen-peer-urls", peerUrl,
      "--initial-advertise-peer-urls", peerUrl,
      "--initial-cluster", s"default=$peerUrl",
      "--initial-cluster-state", "new",
      "--heartbeat-interval", "50",
      "--election-timeout", "500",
      "--logger", "zap",
      "--log-outputs", "stderr",
      "--log-level", "error")
    val pb = new ProcessBuilder(cmd: _*)
      .redirectErrorStream(true)
      .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile))
    pb.start()
  }

  EtcdServer.live.add(this)
  awaitHealthy()

  private def awaitHealthy(): Unit = {
    val deadline = System.currentTimeMillis() + startTimeoutMs
    while (!healthy) {
      if (!process.isAlive) {
        val out = Try(Source.fromFile(logFile).mkString).getOrElse("")
        close()
        throw new IllegalStateException(s"etcd exited with ${process.exitValue()} before it was healthy: $out")
      }
      if (System.currentTimeMillis() > deadline) {
        close()
        throw new IllegalStateException(s"etcd at $clientUrl not healthy within $startTimeoutMs ms")
      }
      Thread.sleep(50)
    }
  }

  /** `GET /health` answers 200 with `"health":"true"`. */
  def healthy: Boolean = Try {
    val c = new URL(s"$clientUrl/health").openConnection().asInstanceOf[HttpURLConnection]
    c.setConnectTimeout(500)
    c.setReadTimeout(1000)
    try {
      val body = Source.fromInputStream(c.getInputStream, "UTF-8").mkString
      c.getResponseCode == 200 && body.replace(" ", "").contains("\"health\":\"true\"")
    } finally c.disconnect()
  }.getOrElse(false)

  /**
   * Kyuubi's HA keys selecting this etcd, with short leases (Kyuubi's registrations' and
   * podsweep's election lease) so a lost leader is replaced quickly.
   */
  def kyuubiConf(leaseTimeout: String = "PT2S"): Map[String, String] = Map(
    "kyuubi.ha.client.class" -> EtcdServer.ClientClass,
    "kyuubi.ha.addresses" -> address,
    "kyuubi.ha.etcd.lease.timeout" -> leaseTimeout,
    EtcdServer.ElectionLeaseKey -> leaseTimeout)

  @volatile private var closed = false

  override def close(): Unit = synchronized {
    if (!closed) {
      closed = true
      EtcdServer.live.remove(this)
      process.destroyForcibly()
      Try(process.waitFor(10, TimeUnit.SECONDS))
      EtcdServer.deleteRecursively(dataDir.toFile)
      Try(Files.deleteIfExists(logFile.toPath))
    }
  }

  override def toString: String = s"etcd($clientUrl)"
}

object EtcdServer {
  val ClientClass = "org.apache.kyuubi.ha.client.etcd.EtcdDiscoveryClient"
  /** podsweep's own election lease on etcd (its default PT30S). */
  val ElectionLeaseKey = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.etcd.leaseTimeout"

  def defaultBinary: String = sys.env.get("PODSWEEP_ETCD").filter(_.nonEmpty).getOrElse("/usr/bin/etcd")

  def available: Boolean = new File(defaultBinary).canExecute

  private val live = java.util.concurrent.ConcurrentHashMap.newKeySet[EtcdServer]()

  // An etcd left behind by a JVM that exits without closing it would keep its ports and data dir.
  Runtime.getRuntime.addShutdownHook(new Thread(new Runnable {
    override def run(): Unit = live.toArray(Array.empty[EtcdServer]).foreach(e => Try(e.close()))
  }, "etcd-server-cleanup"))

  private def freePort(): Int = {
    val s = new ServerSocket(0)
    try s.getLocalPort finally s.close()
  }

  private def deleteRecursively(f: File): Unit = {
    Option(f.listFiles()).foreach(_.foreach(deleteRecursively))
    f.delete()
  }
}
