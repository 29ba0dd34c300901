package org.podsweep.kyuubi

import java.lang.management.ManagementFactory
import java.util.Locale

import scala.collection.JavaConverters._
import scala.util.control.NonFatal

import javax.management.ObjectName
import org.podsweep.PodSweeper

import org.apache.kyuubi.Logging
import org.apache.kyuubi.config.KyuubiConf
import org.apache.kyuubi.engine.{ApplicationInfo, ApplicationManagerInfo, ApplicationOperation, KillResponse, KubernetesApplicationOperation}
import org.apache.kyuubi.server.metadata.MetadataManager
import org.apache.kyuubi.util.JavaUtils

/**
 * podsweep for stock Kyuubi 1.12.0, without any change to Kyuubi: an `ApplicationOperation`
 * provider (registered in `META-INF/services`) that Kyuubi's `KyuubiApplicationManager` loads
 * with its own providers and initializes with the server's configuration.
 *
 * It starts podsweep in self-watch mode: the elected leader of each `(context, namespace)` of
 * Kyuubi's `kyuubi.kubernetes.client.initialize.list` (else the configured context and namespace)
 * watches that namespace's driver pods itself and deletes the terminated ones; followers hold no
 * watch. Kyuubi's own cleaner is switched off with
 * `kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind=NONE` (its informers keep working), and
 * the kind podsweep applies is `kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.kind`.
 *
 * It never claims an application (`isSupported` is false), so Kyuubi's own
 * `KubernetesApplicationOperation` keeps answering application info and kill calls. `stop()`
 * closes podsweep: nothing is deleted, leadership is handed over.
 *
 * If podsweep cannot start (a bad value of one of its keys, a native library that does not load:
 * an `UnsatisfiedLinkError`, which Kyuubi's `NonFatal` would let stop the server), nothing else
 * would clean, since Kyuubi's own cleaner is `NONE`. The drop-in then logs an ERROR and cleans
 * locally, as stock Kyuubi does: a `KubernetesApplicationOperation` of its own (no metadata store,
 * never registered with Kyuubi's application manager) with the cleanup kind podsweep would have
 * applied (`...watch.kind`), so this server deletes every terminated driver pod itself, as every
 * server without podsweep does.
 */
class PodsweepCleanupOperation extends ApplicationOperation with Logging {
  import PodsweepCleanupOperation._

  @volatile private var sweeper: PodSweeper = _
  @volatile private var localCleaner: KubernetesApplicationOperation = _

  override def initialize(conf: KyuubiConf, metadataManager: Option[MetadataManager]): Unit = {
    try start(conf)
    catch {
      // A LinkageError (UnsatisfiedLinkError: the native library did not load) is fatal to
      // NonFatal, which Kyuubi's application manager catches: it must not stop the server.
      case e @ (NonFatal(_) | _: LinkageError) => cleanLocally(conf, e)
    }
  }

  private def start(conf: KyuubiConf): Unit = {
    val enabled = conf.getOption(Enabled).map(_.trim.toLowerCase(Locale.ROOT)) match {
      case None | Some("true") => true
      case Some("false") => false
      case Some(other) => throw new IllegalArgumentException(s"$Enabled must be true or false, got $other")
    }
    if (!enabled) {
      info(s"podsweep drop-in is off ($Enabled=false)")
      return
    }
    val embedded = embeddedZooKeeper(conf)
    embedded.foreach(address => warn(s"kyuubi.ha.addresses ($address) is this server's embedded ZooKeeper"))
    val settings = conf.getAll ++ Map(WatchEnabled -> "true") ++ embedded.map(_ => HaEmbedded -> "true")
    val s = PodSweeper.create(settings.asJava, serverId(conf))
    sweeper = s
    info(s"podsweep drop-in started as ${s.serverId}: the elected server of each Kubernetes context and " +
      "namespace watches its driver pods and deletes the terminated ones")
  }

  /** Never: Kyuubi's own KubernetesApplicationOperation answers for Kubernetes applications. */
  override def isSupported(appMgrInfo: ApplicationManagerInfo): Boolean = false

  override def killApplicationByTag(
      appMgrInfo: ApplicationManagerInfo,
      tag: String,
      proxyUser: Option[String]): KillResponse =
    (false, "podsweep's cleanup provider does not kill applications")

  override def getApplicationInfoByTag(
      appMgrInfo: ApplicationManagerInfo,
      tag: String,
      proxyUser: Option[String],
      submitTime: Option[Long]): ApplicationInfo = ApplicationInfo.NOT_FOUND

  override def supportPersistedAppState: Boolean = false

  /**
   * podsweep did not start: ERROR, and this server deletes terminated driver pods on its own with
   * Kyuubi's own class, the kind podsweep would have applied. A kind of NONE (or one that does not
   * parse) leaves nothing to clean with, said in the ERROR.
   */
  private def cleanLocally(conf: KyuubiConf, cause: Throwable): Unit = {
    Option(sweeper).foreach { s =>
      sweeper = null
      try s.close() catch { case NonFatal(e) => warn(s"podsweep drop-in close failed: $e") }
    }
    val kind = conf.getOption(WatchKind).orElse(conf.getOption(StockKind))
      .map(_.trim.toUpperCase(Locale.ROOT)).getOrElse("NONE")
    kind match {
      case "ALL" | "COMPLETED" =>
        error(s"podsweep drop-in did not start, so this server cleans terminated driver pods locally, " +
          s"as stock Kyuubi with $StockKind=$kind does (every server deletes every pod, with 404 " +
          s"warnings, until podsweep starts): $cause", cause)
        try {
          val op = new KubernetesApplicationOperation()
          op.initialize(conf.clone.set(StockKind, kind), None)
          localCleaner = op
        } catch {
          case e @ (NonFatal(_) | _: LinkageError) =>
            error(s"the local cleaner did not start either ($e): no terminated driver pod is deleted " +
              "by this server", e)
        }
      case other =>
        error(s"podsweep drop-in did not start, and with cleanup kind $other ($WatchKind, else " +
          s"$StockKind) there is nothing to clean locally: $cause", cause)
    }
  }

  override def stop(): Unit = {
    Option(sweeper).foreach { s =>
      sweeper = null
      try s.close()
      catch { case NonFatal(e) => warn(s"podsweep drop-in close failed: $e") }
    }
    Option(localCleaner).foreach { op =>
      localCleaner = null
      try op.stop()
      catch { case NonFatal(e) => warn(s"podsweep drop-in's local cleaner stop failed: $e") }
    }
  }

  /** The PodSweeper, while started (for status and tests). */
  def podSweeper: Option[PodSweeper] = Option(sweeper)
}

object PodsweepCleanupOperation {
  /** The drop-in's switch (default true). */
  val Enabled = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.dropin.enabled"
  val WatchEnabled = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.enabled"
  val WatchKind = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.kind"
  val StockKind = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind"
  val HaEmbedded = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.embedded"

  /**
   * The server's identity in elections: the host and Thrift port it advertises in its HA
   * registration (`kyuubi.frontend.advertised.host`, else the Thrift bind host, else the local
   * canonical host name), stable across restarts of the same host.
   */
  def serverId(conf: KyuubiConf): String = {
    val host = conf.get(KyuubiConf.FRONTEND_ADVERTISED_HOST)
      .orElse(conf.get(KyuubiConf.FRONTEND_THRIFT_BINARY_BIND_HOST))
      .getOrElse(JavaUtils.findLocalInetAddress.getCanonicalHostName)
    s"$host:${conf.get(KyuubiConf.FRONTEND_THRIFT_BINARY_BIND_PORT)}"
  }

  /**
   * `kyuubi.ha.addresses` when it is the ZooKeeper Kyuubi embedded in this JVM (no HA address was
   * configured): ZooKeeper's server registers a `StandaloneServer_port<port>` MBean, so the
   * address is embedded when this JVM serves ZooKeeper on that port. Stock Kyuubi sets no marker.
   */
  def embeddedZooKeeper(conf: KyuubiConf): Option[String] = {
    val address = conf.getOption("kyuubi.ha.addresses").orElse(conf.getOption("kyuubi.ha.zookeeper.quorum"))
      .map(_.trim).filter(_.nonEmpty)
    address.filter { a =>
      val ports = a.split(",").map(_.trim).flatMap(h => h.lastIndexOf(':') match {
        case -1 => None
        case i => scala.util.Try(h.substring(i + 1).takeWhile(_.isDigit).toInt).toOption
      }).toSet
      ports.size == 1 && {
        val beans = ManagementFactory.getPlatformMBeanServer.queryNames(new ObjectName("*:name0=StandaloneServer_port*"), null)
        beans.asScala.exists(n => ports.contains(scala.util.Try(n.getKeyProperty("name0").stripPrefix("StandaloneServer_port").toInt).getOrElse(-1)))
      }
    }
  }
}
