package org.podsweep.testkit

import java.io.{BufferedReader, File, InputStreamReader}
import java.net.{HttpURLConnection, URL}
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path}
import java.util.concurrent.{LinkedBlockingQueue, TimeUnit}

import scala.collection.JavaConverters._
import scala.io.Source

import org.podsweep.ScopeStatus

/**
 * The standalone daemon (`podsweep`, the Rust binary), one process per server: Kyuubi's
 * configuration file plus `--conf` overrides, self-watch mode, `/healthz`, `/metrics` and
 * `/status` on a loopback port it picks. Its log (stderr) goes to `logDir/<name>.log`.
 *
 * @param env environment changes (a null value removes the variable), e.g. `KUBECONFIG`
 * @param wrap a command the daemon runs under (e.g. `unshare` for a private mount namespace)
 * @param logLevel `--log-level` (`debug`: one line per failed DELETE, with the Retry-After read)
 * @param onStart called with the process id as soon as the process has started
 */
final class PodsweepDaemon(
    val name: String,
    conf: Map[String, String],
    logDir: Path,
    env: Map[String, String] = Map.empty,
    wrap: Seq[String] = Nil,
    logLevel: String = "info",
    onStart: Long => Unit = _ => ()) extends FleetServer {
  val logFile: Path = logDir.resolve(s"$name.log")

  private val process: Process = {
    val bin = PodsweepDaemon.binary.getOrElse(throw new IllegalStateException(PodsweepDaemon.missing.get))
    Files.createDirectories(logDir)
    // Kyuubi's file syntax (Java properties), as `key=value`: with `key value` a value starting with
    // ':' (an initialize-list entry without a context) would lose it to the separator.
    val confFile = logDir.resolve(s"$name-kyuubi-defaults.conf")
    Files.write(confFile, conf.map { case (k, v) => s"$k=$v" }.mkString("# podsweep daemon test\n", "\n", "\n")
      .getBytes(StandardCharsets.UTF_8))
    val pb = new ProcessBuilder((wrap ++ Seq(bin.getAbsolutePath, "--config", confFile.toString, "--server-id", name,
      "--listen", "127.0.0.1:0", "--log-level", logLevel)): _*)
      .redirectError(ProcessBuilder.Redirect.appendTo(logFile.toFile))
    env.foreach { case (k, v) => if (v == null) pb.environment().remove(k) else pb.environment().put(k, v) }
    val started = pb.start()
    onStart(ProcessIds.of(started))
    started
  }

  /** The daemon's HTTP address, from its one stdout line. */
  val url: String = {
    val lines = new LinkedBlockingQueue[String]()
    val t = new Thread(() => {
      val in = new BufferedReader(new InputStreamReader(process.getInputStream, StandardCharsets.UTF_8))
      Option(in.readLine()).foreach(lines.put)
    }, s"daemon-$name-stdout")
    t.setDaemon(true)
    t.start()
    val line = lines.poll(60, TimeUnit.SECONDS)
    if (line == null || !line.startsWith("podsweep listening on ")) {
      process.destroyForcibly()
      throw new IllegalStateException(s"$name did not start (${Option(line).getOrElse("no line")}; log: $logFile)")
    }
    line.stripPrefix("podsweep listening on ").trim
  }

  @volatile private var ended = false

  def alive: Boolean = process.isAlive

  /** GET `path`: (status code, body). */
  def get(path: String): (Int, String) = {
    val c = new URL(url + path).openConnection().asInstanceOf[HttpURLConnection]
    c.setConnectTimeout(5000)
    c.setReadTimeout(10000)
    val code = c.getResponseCode
    val in = if (code >= 400) c.getErrorStream else c.getInputStream
    val body = if (in == null) "" else { val s = Source.fromInputStream(in, "UTF-8"); try s.mkString finally s.close() }
    (code, body)
  }

  def statusAll: Seq[ScopeStatus] = ScopeStatus.parseAll(get("/status")._2).asScala.toVector

  def statusOf(namespace: String): Option[ScopeStatus] = statusAll.find(_.string("namespace") == namespace)

  override def status(namespace: String): ScopeStatus = statusOf(namespace).getOrElse(ScopeStatus.parse("{}"))

  override def isLeader(namespace: String): Boolean = statusOf(namespace).exists(_.number("leader") == 1)

  override def problems: Seq[String] = log.filter(l => l.contains("ERROR") || l.contains("panicked"))

  def log: Seq[String] =
    if (Files.isRegularFile(logFile)) Files.readAllLines(logFile, StandardCharsets.UTF_8).asScala.toVector else Nil

  /** SIGTERM: the daemon closes (deletes nothing, hands over) and exits; its exit status. */
  def terminate(): Int = {
    ended = true
    process.destroy()
    if (!process.waitFor(30, TimeUnit.SECONDS)) process.destroyForcibly()
    process.waitFor()
  }

  override def stop(): Unit = if (!ended && process.isAlive) terminate()

  /** SIGKILL: dies without closing anything. */
  def kill(): Unit = {
    ended = true
    process.destroyForcibly()
    process.waitFor(30, TimeUnit.SECONDS)
  }

  override def close(): Unit = {
    scala.util.Try(stop())
    if (process.isAlive) kill()
  }

  override def toString: String = s"daemon $name"
}

object PodsweepDaemon {
  /** The `podsweep` binary: `-Dpodsweep.daemon` (`PODSWEEP_DAEMON`), else the newest build in the repository. */
  def binary: Option[File] = {
    val explicit = Option(System.getProperty("podsweep.daemon")).filter(_.nonEmpty).map(new File(_))
    val repo = new File(System.getProperty("podsweep.repo", ".."))
    def ok(f: File) = f.isFile && f.canExecute
    explicit.filter(ok).orElse(Seq("target/debug/podsweep", "target/release/podsweep",
      "target/x86_64-unknown-linux-gnu/release/podsweep").map(new File(repo, _)).filter(ok)
      .sortBy(-_.lastModified()).headOption)
  }

  def missing: Option[String] =
    if (binary.isDefined) None else Some("no podsweep daemon binary (cargo build --bin podsweep)")
}
