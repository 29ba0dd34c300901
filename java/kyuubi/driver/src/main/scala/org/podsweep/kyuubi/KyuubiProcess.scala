package org.podsweep.kyuubi

import java.io.{BufferedReader, FileInputStream, FileOutputStream, FileDescriptor, InputStreamReader, PrintStream}
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Paths}
import java.util.Properties

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.utils.Serialization

import org.apache.kyuubi.config.KyuubiConf
import org.apache.kyuubi.config.KyuubiConf.KubernetesApplicationStateSource
import org.apache.kyuubi.engine.{ApplicationManagerInfo, KubernetesApplicationOperation, KubernetesInfo, KubernetesResourceEventTypes, KyuubiApplicationManager}

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
 *  - `stop` -> `stop()`, then `STOPPED` and exit 0.
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
        val o = new KubernetesApplicationOperation()
        o.initialize(conf, None)
        (Seq(o), () => o.stop())
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
    else op.getClass.getDeclaredFields.find(_.getName.endsWith("podSweeper")).flatMap { f =>
      f.setAccessible(true)
      Option(f.get(op))
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
