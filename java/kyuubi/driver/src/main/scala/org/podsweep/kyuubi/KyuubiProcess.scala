package org.podsweep.kyuubi

import java.io.{BufferedReader, FileInputStream, FileOutputStream, FileDescriptor, InputStreamReader, PrintStream}
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Paths}
import java.util.Properties

import java.lang.management.ManagementFactory

import scala.collection.JavaConverters._

import javax.management.ObjectName

import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.utils.Serialization

import org.apache.kyuubi.config.{ConfigEntry, KyuubiConf}
import org.apache.kyuubi.config.KyuubiConf.KubernetesApplicationStateSource
import org.apache.kyuubi.engine.{ApplicationManagerInfo, KubernetesApplicationOperation, KubernetesInfo, KubernetesResourceEventTypes, KyuubiApplicationManager}
import org.apache.kyuubi.server.metadata.MetadataManager
import org.apache.kyuubi.server.metadata.api.Metadata
import org.apache.kyuubi.session.SessionType

/**
 * One Kyuubi server's `KubernetesApplicationOperation` (stock or patched, whichever jar is on the
 * class path) in its own JVM, driven over stdin/stdout by the tests, the demo and the benches.
 *
 * Started with the path of a properties file holding the server's KyuubiConf. It calls
 * `initialize(conf, None)` (the `kyuubi.kubernetes.client.initialize.list` entries get their
 * client and informer at once), prints `READY <podsweep server id or ->` and then answers one
 * line per command. With `--server` before the path it starts a whole Kyuubi server instead
 * (`KyuubiServer.startServer`: frontends, metadata store, the embedded ZooKeeper when no HA
 * address is set) and drives the class that server's application manager loaded. With
 * `--manager` it starts Kyuubi's `KyuubiApplicationManager`, which loads every
 * `ApplicationOperation` provider on the class path (podsweep's drop-in among them) and
 * initializes each; `operations` then lists them.
 *
 *  - `info <ctx> <ns> <tag>` -> `INFO <state>\t<pod name>\t<app id>\t<app name>`, from
 *    `getApplicationInfoByTag` (`-` stands for an absent context or namespace, and for an absent value);
 *  - `status` -> `STATUS <json>`: podsweep's `statusAll()` of the patched class, `[]` when off;
 *  - `map <pods.json> <out.json>`: Kyuubi's own state mapping of every pod in the file (a JSON
 *    array of pods) for every state source and event, written to `out.json`; answers `MAPPED <n>`;
 *  - `stop` -> `stop()`, then `STOPPED` and exit 0;
 *  - `settings <key prefix>` -> `SETTINGS <json>`: the KyuubiConf entries registered once the
 *    configuration objects Kyuubi's `AllKyuubiConfiguration` loads are loaded (and, in a
 *    patched jar, `org.apache.kyuubi.engine.PodsweepConf`, which the patched generator loads
 *    too), not internal, whose key starts with the prefix: key, default, doc, type and version,
 *    the fields of a row of Kyuubi's generated `docs/configuration/settings.md`, and the
 *    entry's alternatives (earlier names read when the key is absent);
 *  - `check <key> <value>` -> `CHECK ok <value read>` or `CHECK error <message>`: the registered
 *    entry of `key` reading `value` (Kyuubi's type conversion and checks); `check-as <key>
 *    <set key> <value>` the same with the value set under another name (an alternative of `key`);
 *  - `cancel-batch <tag>` -> `CANCELED <tag>`: a batch with that identifier and state CANCELED in
 *    the metadata store (when started with `podsweep.driver.metadataStore=true`: a
 *    `MetadataManager` on `kyuubi.metadata.store.jdbc.url` is then handed to `initialize`);
 *  - `jmx <domain>` -> `JMX <names>`: the MBeans of the platform server in that domain.
 *
 * Anything else the JVM writes to stdout goes to stderr, so the protocol stays clean.
 */
object KyuubiProcess {
  def main(args: Array[String]): Unit = {
    val out = new PrintStream(new FileOutputStream(FileDescriptor.out), true, "UTF-8")
    System.setOut(System.err)
    val (mode, confPath) = args.toList match {
      case m :: path :: Nil if m == "--server" || m == "--manager" => (m, path)
      case path :: Nil => ("--operation", path)
      case _ => throw new IllegalArgumentException("usage: KyuubiProcess [--server|--manager] <kyuubi-conf.properties>")
    }
    val props = new Properties()
    val in = new FileInputStream(confPath)
    try props.load(new InputStreamReader(in, StandardCharsets.UTF_8)) finally in.close()
    val conf = new KyuubiConf(false)
    props.stringPropertyNames().asScala.foreach(k => conf.set(k, props.getProperty(k)))

    // What is driven: the operations Kyuubi's manager loaded (or the one class), and how it stops.
    val (ops, stopAll): (Seq[AnyRef], () => Unit) = mode match {
      case "--server" =>
        val loaded = serverOperations(conf)
        (loaded, () => loaded.foreach(o => o.getClass.getMethod("stop").invoke(o)))
      case "--manager" =>
        val manager = new KyuubiApplicationManager(None)
        manager.initialize(conf)
        manager.start()
        (managerOperations(manager), () => manager.stop())
      case _ =>
        val metadata = if (conf.getOption(MetadataStoreFlag).contains("true")) {
          val mm = new MetadataManager()
          mm.initialize(conf)
          mm.start()
          metadataManager = Some(mm)
          metadataManager
        } else None
        val o = new KubernetesApplicationOperation()
        o.initialize(conf, metadata)
        (Seq(o), () => { o.stop(); metadata.foreach(_.stop()) })
    }
    val op = ops.collectFirst { case k: KubernetesApplicationOperation => k }
      .getOrElse(throw new IllegalStateException("no KubernetesApplicationOperation was loaded"))
    val sweeper = ops.iterator.map(podSweeper).collectFirst { case Some(s) => s }
    out.println("READY " + sweeper.map(call(_, "serverId")).getOrElse("-"))

    val reader = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))
    var line = reader.readLine()
    while (line != null) {
      val words = line.trim.split("\\s+").toList
      words match {
        case "info" :: ctx :: ns :: tag :: Nil =>
          val kInfo = KubernetesInfo(opt(ctx), opt(ns))
          val i = op.getApplicationInfoByTag(ApplicationManagerInfo(Some("k8s://podsweep"), kInfo), tag)
          out.println(Seq("INFO " + i.state, i.podName.getOrElse("-"), dash(i.id), dash(i.name)).mkString("\t"))
        case "status" :: Nil =>
          val json = sweeper.filterNot(call(_, "isClosed") == true).map(call(_, "statusAll").toString).getOrElse("[]")
          out.println("STATUS " + json.replace('\n', ' '))
        case "map" :: pods :: dest :: Nil =>
          out.println("MAPPED " + map(pods, dest))
        case "settings" :: prefix :: Nil =>
          out.println("SETTINGS " + settings(prefix))
        case "check" :: key :: value :: Nil =>
          out.println("CHECK " + check(key, value))
        case "check-as" :: key :: setKey :: value :: Nil =>
          out.println("CHECK " + check(key, value, setKey))
        case "cancel-batch" :: tag :: Nil =>
          out.println("CANCELED " + cancelBatch(tag))
        case "jmx" :: domain :: Nil =>
          val names = ManagementFactory.getPlatformMBeanServer.queryNames(new ObjectName(s"$domain:*"), null)
          out.println("JMX " + names.asScala.map(_.toString).toSeq.sorted.mkString(" "))
        case "operations" :: Nil =>
          out.println("OPERATIONS " + ops.map(_.getClass.getName).mkString(","))
        case "stop" :: Nil =>
          stopAll()
          out.println("STOPPED")
          out.flush()
          System.exit(0)
        case _ =>
          out.println("ERROR unknown command: " + line)
      }
      line = reader.readLine()
    }
    // stdin closed: the parent went away; stop as a server would on shutdown.
    stopAll()
    System.exit(0)
  }

  /**
   * Starts a Kyuubi server and returns the operations its application manager loaded (reached by
   * reflection: the accessors are private to Kyuubi's packages).
   */
  private def serverOperations(conf: KyuubiConf): Seq[AnyRef] = {
    org.apache.kyuubi.server.KyuubiServer.startServer(conf)
    def get(target: AnyRef, name: String): AnyRef = target.getClass.getMethod(name).invoke(target)
    val module = Class.forName("org.apache.kyuubi.server.KyuubiServer$").getField("MODULE$").get(null)
    val server = get(module, "kyuubiServer")
    managerOperations(get(get(get(server, "backendService"), "sessionManager"), "applicationManager"))
  }

  /** The operations a KyuubiApplicationManager loaded (its private `operations`). */
  private def managerOperations(manager: AnyRef): Seq[AnyRef] =
    manager.getClass.getDeclaredFields.find(_.getName.endsWith("operations")).map { f =>
      f.setAccessible(true)
      f.get(manager).asInstanceOf[Seq[AnyRef]]
    }.getOrElse(Nil)

  /** The driver's own key: start a MetadataManager for the operation (OperationOnly mode). */
  val MetadataStoreFlag = "podsweep.driver.metadataStore"

  @volatile private var metadataManager: Option[MetadataManager] = None

  /**
   * The configuration objects Kyuubi's settings generator (`AllKyuubiConfiguration`) loads, and
   * the patched jar's PodsweepConf (absent from a stock jar), by name: loading an object
   * registers its entries with KyuubiConf.
   */
  private val ConfObjects = Seq(
    "org.apache.kyuubi.config.KyuubiConf$",
    "org.apache.kyuubi.ctl.CtlConf$",
    "org.apache.kyuubi.ha.HighAvailabilityConf$",
    "org.apache.kyuubi.server.metadata.jdbc.JDBCMetadataStoreConf$",
    "org.apache.kyuubi.metrics.MetricsConf$",
    "org.apache.kyuubi.engine.PodsweepConf$",
    "org.apache.kyuubi.zookeeper.ZookeeperConf$")

  private def loadConfObjects(): Unit = ConfObjects.foreach { name =>
    scala.util.Try(Class.forName(name).getField("MODULE$").get(null))
  }

  private def json(s: String): String =
    if (s == null) "null"
    else "\"" + s.flatMap {
      case '"' => "\\\""
      case '\\' => "\\\\"
      case '\n' => "\\n"
      case c if c < ' ' => " "
      case c => c.toString
    } + "\""

  /** The registered, non-internal entries under `prefix` as a JSON array. */
  private def settings(prefix: String): String = {
    loadConfObjects()
    // Kyuubi's registry accessors are private to its config package: reached by reflection.
    val all = KyuubiConf.getClass.getMethod("getConfigEntries").invoke(KyuubiConf)
      .asInstanceOf[java.util.Collection[ConfigEntry[_]]]
    all.asScala.toSeq.filter(e => !e.internal && e.key.startsWith(prefix))
      .sortBy(_.key).map { e =>
        s"""{"key": ${json(e.key)}, "default": ${json(e.defaultValStr)}, "doc": ${json(e.doc)}, """ +
          s""""type": ${json(e.typ)}, "version": ${json(e.version)}, """ +
          s""""alternatives": ${e.alternatives.map(json).mkString("[", ", ", "]")}}"""
      }.mkString("[", ", ", "]")
  }

  /**
   * The registered entry of `key` reading `value` set under `setKey` (`key` itself, or one of its
   * alternatives): `ok <value>` or `error <message>`.
   */
  private def check(key: String, value: String, setKey: String = null): String = {
    loadConfObjects()
    val entry = KyuubiConf.getClass.getMethod("getConfigEntry", classOf[String]).invoke(KyuubiConf, key)
    Option(entry.asInstanceOf[ConfigEntry[_]]) match {
      case None => "error no entry " + key
      case Some(entry) =>
        try "ok " + String.valueOf(new KyuubiConf(false).set(Option(setKey).getOrElse(key), value).get(entry))
        catch { case e: Exception => "error " + String.valueOf(e.getMessage).replace('\n', ' ') }
    }
  }

  /** A CANCELED batch `tag` in the metadata store. */
  private def cancelBatch(tag: String): String = {
    val mm = metadataManager.getOrElse(throw new IllegalStateException(s"no metadata store ($MetadataStoreFlag)"))
    mm.insertMetadata(Metadata(
      identifier = tag,
      sessionType = SessionType.BATCH,
      realUser = "podsweep",
      username = "podsweep",
      ipAddress = "127.0.0.1",
      kyuubiInstance = "podsweep-test",
      state = "CANCELED",
      requestName = "canceled-batch",
      createTime = System.currentTimeMillis(),
      engineType = "SPARK",
      clusterManager = Some("k8s")), asyncRetryOnError = false)
    tag
  }

  private def opt(s: String): Option[String] = if (s == "-") None else Some(s)
  private def dash(s: String): String = if (s == null || s.isEmpty) "-" else s

  /**
   * The PodSweeper of an operation: the patched class's private field, or the drop-in's
   * `podSweeper` accessor; None for stock Kyuubi. Through reflection: the stock server has no
   * podsweep classes on its class path.
   */
  private def podSweeper(op: AnyRef): Option[AnyRef] =
    if (op.getClass.getName == "org.podsweep.kyuubi.PodsweepCleanupOperation")
      call(op, "podSweeper").asInstanceOf[Option[AnyRef]]
    else field(op, _.getType.getName == "org.apache.kyuubi.engine.KubernetesPodsweep") match {
      // The patch keeps its PodSweeper in KubernetesPodsweepLink (field `link` of the class's
      // field `podsweep`; null when podsweep is off or did not start).
      case Some(support) => field(support, _.getName.endsWith("link")).flatMap(field(_, _.getName.endsWith("sweeper")))
      case None => field(op, _.getName.endsWith("podSweeper"))
    }

  private def field(target: AnyRef, which: java.lang.reflect.Field => Boolean): Option[AnyRef] =
    target.getClass.getDeclaredFields.find(which).flatMap { f =>
      f.setAccessible(true)
      Option(f.get(target))
    }

  private def call(target: AnyRef, method: String): Any = target.getClass.getMethod(method).invoke(target)

  /**
   * Kyuubi's state for every pod of a JSON array, by state source (POD; CONTAINER with the
   * default container and with `SPARK-KUBERNETES-DRIVER`, to exercise its case rule) and event:
   * `[{"name": ..., "states": {"POD/ADD": "FINISHED", ...}}, ...]`.
   */
  private def map(podsFile: String, dest: String): Int = {
    val text = new String(Files.readAllBytes(Paths.get(podsFile)), StandardCharsets.UTF_8)
    val pods = Serialization.unmarshal(text, classOf[Array[Pod]]).toSeq
    val sources = Seq(
      "POD" -> (KubernetesApplicationStateSource.POD, "spark-kubernetes-driver"),
      "CONTAINER" -> (KubernetesApplicationStateSource.CONTAINER, "spark-kubernetes-driver"),
      "CONTAINER_UPPER" -> (KubernetesApplicationStateSource.CONTAINER, "SPARK-KUBERNETES-DRIVER"))
    val events = Seq(
      "ADD" -> KubernetesResourceEventTypes.ADD,
      "UPDATE" -> KubernetesResourceEventTypes.UPDATE,
      "DELETE" -> KubernetesResourceEventTypes.DELETE)
    val rows = pods.map { pod =>
      val states = for ((sName, (source, container)) <- sources; (eName, event) <- events) yield {
        val state = KubernetesApplicationOperation.toApplicationState(pod, source, container, event)
        s""""$sName/$eName": "$state""""
      }
      s"""{"name": "${pod.getMetadata.getName}", "states": {${states.mkString(", ")}}}"""
    }
    Files.write(Paths.get(dest), rows.mkString("[\n", ",\n", "\n]\n").getBytes(StandardCharsets.UTF_8))
    pods.size
  }
}
