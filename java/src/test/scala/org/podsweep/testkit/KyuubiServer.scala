package org.podsweep.testkit

import java.io.{BufferedReader, File, InputStreamReader, OutputStreamWriter, PrintWriter}
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path}
import java.util.Properties
import java.util.concurrent.{LinkedBlockingQueue, TimeUnit}

import scala.collection.JavaConverters._
import scala.io.Source

import org.podsweep.ScopeStatus

/**
 * Where scripts/kyuubi and sbt left Kyuubi and the pieces its child JVMs need, for the Kyuubi
 * release [[Version]]: `-Dpodsweep.kyuubi.version=<v>` (1.10.3, 1.11.1 or 1.12.0), else the release
 * sbt compiled the driver and the drop-in against ([[SbtVersion]]: 1.12.0, or
 * `$PODSWEEP_KYUUBI_VERSION` of the sbt run, which sets both properties). The sbt release's pieces
 * come from the `podsweep.kyuubi.*` properties; another release's are where `KYUUBI_VERSION=<v>
 * scripts/kyuubi stock|dropin|patched` left them: its cache `$PODSWEEP_TOOLS/kyuubi-<v>` (beside
 * the sbt release's) and the class directories named in java/target/kyuubi-<v>-{driver,dropin}.path.
 * The patched jar is always the one named in java/target/kyuubi-patched.path (1.12.0) or
 * java/target/kyuubi-<v>-patched.path.
 */
object KyuubiHome {
  private def prop(name: String): Option[File] = Option(System.getProperty(name)).filter(_.nonEmpty).map(new File(_))

  /** The releases the testkit knows (docs/kyuubi-versions.md). */
  val Versions: Seq[String] = Seq("1.10.3", "1.11.1", "1.12.0")
  private def sysProp(name: String): Option[String] = Option(System.getProperty(name)).map(_.trim).filter(_.nonEmpty)
  /** The release sbt compiled the driver and the drop-in against (java/build.sbt). */
  val SbtVersion: String = sysProp("podsweep.kyuubi.sbtVersion").getOrElse("1.12.0")
  /** The release the servers of this JVM run. */
  val Version: String = {
    val v = sysProp("podsweep.kyuubi.version").getOrElse(SbtVersion)
    require(Versions.contains(v), s"podsweep.kyuubi.version=$v is not one of ${Versions.mkString(", ")}")
    v
  }
  private val sbtOwn: Boolean = Version == SbtVersion

  private def repoFile(path: String): File = new File(System.getProperty("podsweep.repo", ".."), path)
  /** The first line of a pointer file under java/target, as a file that exists. */
  private def pointer(name: String): Option[File] = {
    val f = repoFile(s"java/target/$name")
    if (!f.isFile) None
    else {
      val src = Source.fromFile(f, "UTF-8")
      try src.getLines().map(_.trim).find(_.nonEmpty).map(new File(_)).filter(_.exists) finally src.close()
    }
  }

  val cache: Option[File] = prop("podsweep.kyuubi.cache").map { c =>
    if (sbtOwn) c else new File(c.getParentFile, s"kyuubi-$Version")
  }
  val driverClasses: Option[File] =
    if (sbtOwn) prop("podsweep.kyuubi.driver") else pointer(s"kyuubi-$Version-driver.path")
  val podsweepClasses: Option[File] = prop("podsweep.classes")
  /** The drop-in provider's classes and its META-INF/services entry (sbt project kyuubiDropin). */
  val dropinClasses: Option[File] =
    if (sbtOwn) prop("podsweep.kyuubi.dropin") else pointer(s"kyuubi-$Version-dropin.path")
  /** The libpodsweep.so the patched servers load (sbt's `nativeLibrary`). */
  val nativeLibrary: Option[File] = prop("podsweep.native.lib")

  /** The scripts/kyuubi command line that builds a piece of [[Version]]. */
  private def script(verb: String): String =
    if (Version == "1.12.0") s"scripts/kyuubi $verb" else s"KYUUBI_VERSION=$Version scripts/kyuubi $verb"

  def stockJar: Option[File] = cache.map(new File(_, "kyuubi-server.jar")).filter(_.isFile)
  /**
   * This checkout's patched jar: scripts/kyuubi patched names it in java/target/kyuubi-patched.path
   * (1.12.0) or java/target/kyuubi-<version>-patched.path.
   */
  def patchedJar: Option[File] =
    pointer(if (Version == "1.12.0") "kyuubi-patched.path" else s"kyuubi-$Version-patched.path").filter(_.isFile)
  def runtime: Seq[File] = cache.map(new File(_, "runtime-classpath.txt")).filter(_.isFile).toSeq.flatMap { f =>
    val s = Source.fromFile(f, "UTF-8")
    try s.getLines().map(_.trim).filter(_.nonEmpty).map(new File(_)).toVector finally s.close()
  }
  private def driverCompiled: Boolean =
    driverClasses.exists(d => new File(d, "org/podsweep/kyuubi/KyuubiProcess.class").isFile)

  /** Why stock Kyuubi cannot run here, or None when it can. */
  def stockMissing: Option[String] =
    if (stockJar.isEmpty) Some(s"Kyuubi $Version is not built (${script("stock")})")
    else if (runtime.isEmpty) Some(s"Kyuubi $Version's runtime classpath is missing (${script("stock")})")
    else if (!driverCompiled)
      Some(s"the Kyuubi driver is not compiled for $Version (" +
        (if (sbtOwn) "sbt kyuubiDriver/compile" else script("dropin")) + ")")
    else None

  /** Why stock Kyuubi with podsweep's drop-in cannot run here, or None when it can. */
  def dropinMissing: Option[String] = stockMissing.orElse {
    if (!dropinClasses.exists(d => new File(d, "META-INF/services/org.apache.kyuubi.engine.ApplicationOperation").isFile))
      Some(s"the drop-in is not compiled for $Version (" + (if (sbtOwn) "sbt kyuubiDropin/compile" else script("dropin")) + ")")
    else if (!nativeLibrary.exists(_.isFile)) Some(s"no native library at ${nativeLibrary.orNull} (scripts/package)")
    else None
  }

  /** Why patched Kyuubi cannot run here, or None when it can. */
  def patchedMissing: Option[String] = stockMissing.orElse {
    if (patchedJar.isEmpty) Some(s"the patched Kyuubi $Version is not built (${script("patched")})")
    else if (!nativeLibrary.exists(_.isFile)) Some(s"no native library at ${nativeLibrary.orNull} (scripts/package)")
    else None
  }

  /** Which KubernetesApplicationOperation a server runs (of Kyuubi [[Version]]). */
  sealed abstract class Kind(suffix: String) {
    /** e.g. `kyuubi-1.12.0+podsweep`. */
    val label: String = s"kyuubi-$Version$suffix"
  }
  /** Kyuubi as released. */
  case object Stock extends Kind("")
  /** Kyuubi with java/kyuubi/kyuubi-<version>-podsweep.diff. */
  case object Patched extends Kind("+podsweep")
  /** Kyuubi as released, with podsweep's drop-in provider jar on its class path. */
  case object Dropin extends Kind("+drop-in")

  def missing(kind: Kind): Option[String] = kind match {
    case Stock => stockMissing
    case Patched => patchedMissing
    case Dropin => dropinMissing
  }

  /** How the driver runs the class: alone, in Kyuubi's application manager, or in a whole server. */
  sealed abstract class Mode(val flag: Option[String])
  case object OperationOnly extends Mode(None)
  case object Manager extends Mode(Some("--manager"))
  case object WholeServer extends Mode(Some("--server"))
}

/** What a Kyuubi server answered to `getApplicationInfoByTag`. */
final case class KyuubiAppInfo(state: String, podName: Option[String], id: Option[String], name: Option[String])

/**
 * One Kyuubi server: Kyuubi's ([[KyuubiHome.Version]], default 1.12.0) `KubernetesApplicationOperation` (stock or patched) in its
 * own JVM, as a real deployment runs one per server, driven by `org.podsweep.kyuubi.KyuubiProcess`.
 * Its log (log4j2 through Kyuubi's own logging, podsweep's native log routed to the same place)
 * goes to `logFile`.
 *
 * @param conf the server's KyuubiConf entries
 * @param nativePath the libpodsweep.so the server loads (default: sbt's `nativeLibrary`); a path
 *                   that is not a loadable library makes the native load fail
 * @param mode the KubernetesApplicationOperation alone (the default); Kyuubi's
 *             `KyuubiApplicationManager`, which loads every provider on the class path; or a whole
 *             Kyuubi server (`KyuubiServer.startServer`)
 * @param podsweepClassPath what stands for podsweep's jar on the server's class path (default:
 *             sbt's classes of the Java API, and the drop-in's for [[KyuubiHome.Dropin]]); `Nil`
 *             leaves the jar out, as an operator who forgot it would
 * @param jvmOptions more options of the server's JVM (e.g. `-Dcom.sun.management.jmxremote.port`)
 * @param log4jLines more lines of the server's log4j2 properties (e.g. a logger's level)
 * @param onStart called with the process id as soon as the process has started, before it is ready
 */
final class KyuubiServer(
    val name: String,
    val kind: KyuubiHome.Kind,
    conf: Map[String, String],
    logDir: Path,
    heapMb: Int = 256,
    mode: KyuubiHome.Mode = KyuubiHome.OperationOnly,
    nativePath: Option[String] = None,
    podsweepClassPath: Option[Seq[File]] = None,
    jvmOptions: Seq[String] = Nil,
    log4jLines: Seq[String] = Nil,
    onStart: Long => Unit = _ => ()) extends FleetServer {
  import KyuubiServer._

  val logFile: Path = logDir.resolve(s"$name.log")
  private val process: Process = {
    KyuubiHome.missing(kind).foreach(w => throw new IllegalStateException(s"cannot start $name (${kind.label}): $w"))
    Files.createDirectories(logDir)
    val props = new Properties()
    conf.foreach { case (k, v) => props.setProperty(k, v) }
    val confFile = logDir.resolve(s"$name.properties")
    val w = Files.newBufferedWriter(confFile, StandardCharsets.UTF_8)
    try props.store(w, s"KyuubiConf of $name") finally w.close()
    val log4j = logDir.resolve(s"$name-log4j2.properties")
    Files.write(log4j, (log4jConfig(logFile) + log4jLines.map(_ + "\n").mkString).getBytes(StandardCharsets.UTF_8))
    val serverJar = if (kind == KyuubiHome.Patched) KyuubiHome.patchedJar.get else KyuubiHome.stockJar.get
    val podsweep = podsweepClassPath.getOrElse(kind match {
      case KyuubiHome.Patched => KyuubiHome.podsweepClasses.toSeq
      case KyuubiHome.Dropin => KyuubiHome.dropinClasses.toSeq ++ KyuubiHome.podsweepClasses.toSeq
      case KyuubiHome.Stock => Nil
    })
    val cp = (KyuubiHome.driverClasses.toSeq ++ podsweep ++ Seq(serverJar) ++ KyuubiHome.runtime)
      .map(_.getAbsolutePath).mkString(File.pathSeparator)
    val java = new File(new File(System.getProperty("java.home"), "bin"), "java").getAbsolutePath
    val cmd = Seq(java, s"-Xmx${heapMb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
      s"-Dlog4j2.configurationFile=${log4j.toAbsolutePath}",
      s"-Dpodsweep.native.path=${nativePath.orElse(KyuubiHome.nativeLibrary.map(_.getAbsolutePath)).getOrElse("")}") ++
      jvmOptions ++ Seq("-cp", cp, "org.podsweep.kyuubi.KyuubiProcess") ++ mode.flag.toSeq ++ Seq(confFile.toAbsolutePath.toString)
    val started = new ProcessBuilder(cmd: _*)
      .redirectError(ProcessBuilder.Redirect.appendTo(logDir.resolve(s"$name.stderr").toFile))
      .start()
    onStart(ProcessIds.of(started))
    started
  }
  private val replies = new LinkedBlockingQueue[String]()
  private val reader = {
    val t = new Thread(() => {
      val in = new BufferedReader(new InputStreamReader(process.getInputStream, StandardCharsets.UTF_8))
      var line = in.readLine()
      while (line != null) { replies.put(line); line = in.readLine() }
      replies.put(Eof)
    }, s"kyuubi-$name-stdout")
    t.setDaemon(true)
    t.start()
    t
  }
  private val stdin = new PrintWriter(new OutputStreamWriter(process.getOutputStream, StandardCharsets.UTF_8), true)

  /** podsweep's server id (patched), or None (stock, or podsweep off). */
  val serverId: Option[String] = {
    val ready = reply("READY", StartTimeoutMs)
    Some(ready.stripPrefix("READY").trim).filter(s => s.nonEmpty && s != "-")
  }

  @volatile private var ended = false

  def alive: Boolean = process.isAlive

  private def reply(prefix: String, timeoutMs: Long): String = {
    val line = replies.poll(timeoutMs, TimeUnit.MILLISECONDS)
    if (line == null) throw new IllegalStateException(s"$name: no $prefix within $timeoutMs ms (log: $logFile)")
    if (line == Eof) throw new IllegalStateException(s"$name exited (status ${scala.util.Try(process.exitValue()).getOrElse("?")}; log: $logFile)")
    if (!line.startsWith(prefix)) throw new IllegalStateException(s"$name: expected $prefix, got: $line")
    line
  }

  private def ask(command: String, prefix: String): String = synchronized {
    stdin.println(command)
    reply(prefix, CommandTimeoutMs).stripPrefix(prefix).trim
  }

  /** Kyuubi's `getApplicationInfoByTag` for the tag in scope `(context, namespace)`. */
  def appInfo(context: Option[String], namespace: Option[String], tag: String): KyuubiAppInfo = {
    val parts = ask(s"info ${context.getOrElse("-")} ${namespace.getOrElse("-")} $tag", "INFO").split("\t", -1)
    def o(i: Int) = Some(parts(i)).filter(_ != "-")
    KyuubiAppInfo(parts(0), o(1), o(2), o(3))
  }

  /** podsweep's status of every scope this server has seen (empty for stock Kyuubi). */
  def status(): Seq[ScopeStatus] = ScopeStatus.parseAll(ask("status", "STATUS")).asScala.toVector

  /** The status of one scope, if this server has seen it. */
  def statusOf(namespace: String): Option[ScopeStatus] = status().find(_.string("namespace") == namespace)

  /** The status of one scope; an empty one if this server has not seen it. */
  override def status(namespace: String): ScopeStatus = statusOf(namespace).getOrElse(ScopeStatus.parse("{}"))

  override def isLeader(namespace: String): Boolean = statusOf(namespace).exists(_.number("leader") == 1)

  /** The patch's own complaints: podsweep refused an event, or did not start. */
  override def problems: Seq[String] = logLines("podsweep did not")

  /**
   * The KyuubiConf entries under `prefix` that Kyuubi's settings generator would list, as a JSON
   * array of `{key, default, doc, type, version}` (see KyuubiProcess).
   */
  def settings(prefix: String): String = ask(s"settings $prefix", "SETTINGS")

  /** Kyuubi's registered entry of `key` reading `value`: `ok <value>` or `error <message>`. */
  def check(key: String, value: String): String = ask(s"check $key $value", "CHECK")

  /** The registered entry of `key` reading `value` set under `setKey` (one of its alternatives). */
  def checkAs(key: String, setKey: String, value: String): String = ask(s"check-as $key $setKey $value", "CHECK")

  /** A batch `tag` in state CANCELED in the server's metadata store (see KyuubiProcess). */
  def cancelBatch(tag: String): Unit = ask(s"cancel-batch $tag", "CANCELED")

  /** The names of the MBeans of `domain` in the server's JVM. */
  def mbeans(domain: String): Seq[String] = ask(s"jmx $domain", "JMX").split(" ").toSeq.filter(_.nonEmpty)

  /** The class names of the ApplicationOperations Kyuubi loaded (manager mode). */
  def operations: Seq[String] = ask("operations", "OPERATIONS").split(",").toSeq.filter(_.nonEmpty)

  /** Kyuubi's own state mapping of the pods in `podsJson`, written to `out` (see KyuubiProcess). */
  def mapStates(podsJson: Path, out: Path): Int = ask(s"map $podsJson $out", "MAPPED").toInt

  /** `KubernetesApplicationOperation.stop()`, then the JVM exits. */
  override def stop(): Unit = if (!ended && process.isAlive) {
    ask("stop", "STOPPED")
    ended = true
    process.waitFor(30, TimeUnit.SECONDS)
  }

  /** SIGKILL: the server dies without stopping anything. */
  def kill(): Unit = {
    ended = true
    process.destroyForcibly()
    process.waitFor(30, TimeUnit.SECONDS)
  }

  /** The server's log so far. */
  def log: Seq[String] =
    if (Files.isRegularFile(logFile)) Files.readAllLines(logFile, StandardCharsets.UTF_8).asScala.toVector else Nil

  /** Lines of this server's log containing `text`. */
  def logLines(text: String): Seq[String] = log.filter(_.contains(text))

  override def close(): Unit = {
    scala.util.Try(stop())
    if (process.isAlive) kill()
  }

  override def toString: String = s"$name(${kind.label})"
}

object KyuubiServer {
  private val Eof = "\u0000EOF"
  private val StartTimeoutMs = 120000L
  private val CommandTimeoutMs = 60000L

  /** log4j2: everything at INFO and above (DEBUG for podsweep) to one file. */
  private def log4jConfig(file: Path): String =
    s"""status = error
       |appender.file.type = File
       |appender.file.name = file
       |appender.file.fileName = ${file.toAbsolutePath}
       |appender.file.layout.type = PatternLayout
       |appender.file.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n
       |rootLogger.level = info
       |rootLogger.appenderRef.file.ref = file
       |""".stripMargin

  /**
   * A KyuubiConf for a test server on a test API server (a real one, the fabric8 mock, the lag bench's): its URL and
   * credentials naming the server ([[TestApi.clientConf]]: a bearer token the mocks attribute, or a
   * ServiceAccount token file of a real API server), the scopes' clients and informers created at
   * start, the app URL as [[appUrl]] says, and the
   * frontend host naming the server (podsweep's server id).
   */
  def conf(
      name: String,
      api: TestApi,
      namespaces: Seq[String],
      retainMs: Long,
      kind: String = "ALL",
      checkIntervalMs: Long = 1000L): Map[String, String] = api.clientConf(name) ++ Map(
    "kyuubi.kubernetes.client.initialize.list" -> namespaces.map(ns => s":$ns").mkString(","),
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind" -> kind,
    "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> retainMs.toString,
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.checkInterval" -> checkIntervalMs.toString,
    "kyuubi.frontend.advertised.host" -> name,
    "kyuubi.frontend.protocols" -> "THRIFT_BINARY") ++ appUrl(api)

  /**
   * On a real API server Kyuubi's default app URL (from the driver's Service, with a Service informer
   * per scope, as deployed); on the mocks the URL from the pod (no Service informer). Not the pod URL
   * on a real API server: Kyuubi 1.12.0 then throws in every pod event of a scope without a context
   * (`buildSparkAppUrl` replaces the context pattern with null) once the pod has an IP and a
   * `spark-ui` port, as real driver pods do.
   */
  private def appUrl(api: TestApi): Map[String, String] = api match {
    case _: RealKube => Map.empty
    case _ => Map("kyuubi.kubernetes.spark.appUrlPattern" -> "http://{{SPARK_DRIVER_POD_IP}}:{{SPARK_UI_PORT}}")
  }
}
