package org.podsweep.kyuubi

import java.lang.management.ManagementFactory
import java.util.Locale
import java.util.concurrent.{Executors, ScheduledExecutorService, ThreadFactory, TimeUnit}
import java.util.concurrent.atomic.AtomicLong

import scala.collection.JavaConverters._
import scala.util.control.NonFatal

import com.codahale.metrics.Gauge
import javax.management.ObjectName
import org.podsweep.{PodSweeper, Redaction}
import org.podsweep.metrics.PodsweepMetricSet

import org.apache.kyuubi.Logging
import org.apache.kyuubi.config.KyuubiConf
import org.apache.kyuubi.engine.{ApplicationInfo, ApplicationManagerInfo, ApplicationOperation, KillResponse, KubernetesApplicationOperation}
import org.apache.kyuubi.metrics.MetricsSystem
import org.apache.kyuubi.server.metadata.MetadataManager
import org.apache.kyuubi.util.JavaUtils

/**
 * podsweep for stock Kyuubi (1.12.0, 1.11.1, 1.10.3: compiled against each, `KYUUBI_VERSION=<v>
 * scripts/kyuubi dropin`), without any change to Kyuubi: an `ApplicationOperation`
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
 *
 * Its identity in the elections is the host the server advertises and the Thrift port it binds;
 * with port 0 it is confirmed once the server is up (until then its scopes do not campaign).
 * podsweep's gauges go into Kyuubi's `MetricsSystem` once it runs, through its public
 * `registerGauge`, so Kyuubi's reporters (Prometheus, JMX, ...) show them. No log line shows a
 * secret of the configuration (`kyuubi.server.redaction.regex`).
 */
class PodsweepCleanupOperation extends ApplicationOperation with Logging {
  import PodsweepCleanupOperation._

  @volatile private var sweeper: PodSweeper = _
  @volatile private var localCleaner: KubernetesApplicationOperation = _
  @volatile private var settings: java.util.Map[String, String] = java.util.Collections.emptyMap()
  @volatile private var housekeeper: ScheduledExecutorService = _
  @volatile private var host: String = _
  private val ticks = new AtomicLong(0L)

  override def initialize(conf: KyuubiConf, metadataManager: Option[MetadataManager]): Unit = {
    settings = conf.getAll.asJava
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
    val all = (conf.getAll ++ Map(WatchEnabled -> "true") ++ embedded.map(_ => HaEmbedded -> "true")).asJava
    host = serverHost(conf)
    val port = conf.get(KyuubiConf.FRONTEND_THRIFT_BINARY_BIND_PORT)
    // Port 0: the frontend binds a port of its own choosing later; confirmed by housekeeping.
    val s = if (port == 0) PodSweeper.createAwaitingServerId(all, s"$host:0") else PodSweeper.create(all, s"$host:$port")
    sweeper = s
    val metricSet = new PodsweepMetricSet(s)
    val h = Executors.newSingleThreadScheduledExecutor(new ThreadFactory {
      override def newThread(r: Runnable): Thread = {
        val t = new Thread(r, "podsweep-dropin-housekeeping")
        t.setDaemon(true)
        t
      }
    })
    h.scheduleWithFixedDelay(new Runnable { override def run(): Unit = housekeeping(s, metricSet) }, 1, 1, TimeUnit.SECONDS)
    housekeeper = h
    info(s"podsweep drop-in started as ${s.serverId}" +
      (if (port == 0) " (the port is confirmed once the server bound it)" else "") +
      ": the elected server of each Kubernetes context and namespace watches its driver pods and" +
      " deletes the terminated ones")
  }

  /**
   * Every second: confirms the identity once the server bound its port 0; every fifth, registers
   * the gauges of new scopes with Kyuubi's MetricsSystem (when it runs).
   */
  private def housekeeping(s: PodSweeper, metricSet: PodsweepMetricSet): Unit =
    try {
      if (s.serverId.endsWith(":0")) boundThriftPort.foreach(port => s.confirmServerId(s"$host:$port"))
      if (ticks.getAndIncrement() % 5 == 0) {
        MetricsSystem.tracing { ms =>
          metricSet.getMetrics.asScala.foreach { case (name, metric) =>
            if (ms.getGauge(name).isEmpty) {
              val g = metric.asInstanceOf[Gauge[Number]]
              ms.registerGauge[Number](name, g.getValue, null)
            }
          }
        }
      }
    } catch {
      case NonFatal(e) => debug(s"podsweep drop-in housekeeping: ${Redaction.scrub(settings, e.toString)}")
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

  // Not `override`: Kyuubi 1.10 has no such member (1.11 added it to ApplicationOperation).
  def supportPersistedAppState: Boolean = false

  /**
   * podsweep did not start: ERROR, and this server deletes terminated driver pods on its own with
   * Kyuubi's own class, the kind podsweep would have applied. A kind of NONE (or one that does not
   * parse) leaves nothing to clean with, said in the ERROR.
   */
  private def cleanLocally(conf: KyuubiConf, cause0: Throwable): Unit = {
    val cause = Redaction.redacted(settings, cause0)
    stopHousekeeper()
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

  private def stopHousekeeper(): Unit = {
    Option(housekeeper).foreach(_.shutdownNow())
    housekeeper = null
  }

  override def stop(): Unit = {
    stopHousekeeper()
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
  def serverId(conf: KyuubiConf): String =
    s"${serverHost(conf)}:${conf.get(KyuubiConf.FRONTEND_THRIFT_BINARY_BIND_PORT)}"

  def serverHost(conf: KyuubiConf): String =
    conf.get(KyuubiConf.FRONTEND_ADVERTISED_HOST)
      .orElse(conf.get(KyuubiConf.FRONTEND_THRIFT_BINARY_BIND_HOST))
      .getOrElse(JavaUtils.findLocalInetAddress.getCanonicalHostName)

  /**
   * The port the running Kyuubi server's Thrift binary frontend bound (else its first frontend's),
   * once the server has started; by reflection, since Kyuubi keeps the server private to its
   * packages.
   */
  def boundThriftPort: Option[String] = scala.util.Try {
    val module = Class.forName("org.apache.kyuubi.server.KyuubiServer$").getField("MODULE$").get(null)
    Option(module.getClass.getMethod("kyuubiServer").invoke(module)).flatMap { server =>
      val fronts = server.getClass.getMethod("frontendServices").invoke(server).asInstanceOf[Seq[AnyRef]]
      fronts.find(_.getClass.getSimpleName.contains("TBinary")).orElse(fronts.headOption)
        .map(f => f.getClass.getMethod("connectionUrl").invoke(f).toString)
        .map(url => url.substring(url.lastIndexOf(':') + 1))
    }
  }.toOption.flatten

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
