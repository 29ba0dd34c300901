package org.podsweep.kyuubi

import java.net.ServerSocket
import java.nio.file.{Files, Path}
import javax.management.ObjectName
import javax.management.remote.{JMXConnectorFactory, JMXServiceURL}

import scala.collection.JavaConverters._

import org.podsweep.ScopeStatus
import org.podsweep.testkit.{HaBackend, KyuubiHome, KyuubiPods, KyuubiServer, PodsApi, PodsApiServer}
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * A scope's status read without code from a running Kyuubi server, with the patch and with the
 * drop-in: over remote JMX (the protocol jconsole and every JMX exporter use), and in its log on
 * `status.logInterval`. Neither the patch nor the drop-in does anything of its own for it: the
 * Java API's `PodSweeper` registers the MBean and writes the lines.
 */
class StatusJmxSuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(60, Seconds), Span(100, Millis))

  private lazy val logDir: Path = Files.createTempDirectory("podsweep-status-jmx-")
  private val P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."

  private def freePort(): Int = {
    val s = new ServerSocket(0)
    try s.getLocalPort finally s.close()
  }

  /** JMX over RMI on loopback, without authentication (a test JVM), as an operator would enable it. */
  private def jmxOptions(port: Int): Seq[String] = Seq(
    s"-Dcom.sun.management.jmxremote.port=$port", s"-Dcom.sun.management.jmxremote.rmi.port=$port",
    "-Dcom.sun.management.jmxremote.host=127.0.0.1", "-Djava.rmi.server.hostname=127.0.0.1",
    "-Dcom.sun.management.jmxremote.authenticate=false", "-Dcom.sun.management.jmxremote.ssl=false")

  for (kind <- Seq(KyuubiHome.Patched, KyuubiHome.Dropin)) {
    test(s"${kind.label}: a scope's status over remote JMX and as a line in Kyuubi's log every status.logInterval") {
      KyuubiHome.missing(kind).foreach(w => fail(s"cannot run ${kind.label}: $w"))
      val ha = HaBackend.start("zookeeper")
      val api = new PodsApi()
      val admin = api.client("suite-admin")
      val ns = "status-jmx"
      val port = freePort()
      val name = s"jmx-${kind.label.replace('+', '-').replace('.', '-')}"
      val mode = if (kind == KyuubiHome.Dropin) Map(P + "kind" -> "NONE", P + "watch.kind" -> "ALL") else Map.empty
      val conf = KyuubiServer.conf(name, new PodsApiServer(api), Seq(ns), 3600000L) ++ ha.kyuubiConf ++ mode ++
        Map("kyuubi.ha.namespace" -> s"status-jmx-${kind.label.hashCode.abs}", P + "status.logInterval" -> "PT1S")
      // The drop-in's server raises podsweep's loggers to DEBUG with the two lines of log4j2
      // properties docs/rollout.md gives; the patched one keeps Kyuubi's INFO.
      val debug = kind == KyuubiHome.Dropin
      val log4j = if (debug) Seq("logger.podsweep.name = org.podsweep", "logger.podsweep.level = debug") else Nil
      val server = new KyuubiServer(name, kind, conf, logDir, mode = KyuubiHome.Manager, jvmOptions = jmxOptions(port),
        log4jLines = log4j)
      try {
        // A running driver pod: the patched server's informer hands it over (the drop-in watches
        // its configured scope anyway).
        admin.pods().inNamespace(ns).resource(KyuubiPods.driver("driver-jmx-1")).create()
        val url = new JMXServiceURL(s"service:jmx:rmi:///jndi/rmi://127.0.0.1:$port/jmxrmi")
        val connector = JMXConnectorFactory.connect(url)
        val scope = try {
          val mbsc = connector.getMBeanServerConnection
          val names = eventually {
            val found = mbsc.queryNames(new ObjectName("org.podsweep:type=PodSweeper,*"), null).asScala.toSeq
            assert(found.size == 1, found)
            found
          }
          val mbean = names.head
          assert(mbean.getKeyProperty("server") == "\"" + s"$name:10009" + "\"", mbean)
          val scopeName = eventually {
            val scopes = mbsc.getAttribute(mbean, "Scopes").asInstanceOf[Array[String]].toSeq
            assert(scopes.exists(_.endsWith(s":$ns")), scopes)
            scopes.find(_.endsWith(s":$ns")).get
          }
          val status = eventually {
            val st = ScopeStatus.parse(mbsc.getAttribute(mbean, scopeName).asInstanceOf[String])
            assert(st.leadership == "LEADING", st)
            st
          }
          Seq("healthy", "paused", "pauses", "due", "retries", "last_failure").foreach(f =>
            assert(status.fields.containsKey(f), s"$f: $status"))
          info(s"JMX read of $mbean, attribute '$scopeName': $status")
          // The on-demand line, through the MBean's operation.
          mbsc.invoke(mbean, "logStatus", Array.empty[AnyRef], Array.empty[String])
          scopeName
        } finally connector.close()
        // The interval lines, in the server's own log4j2 file under the logger org.podsweep.status.
        eventually {
          val lines = server.logLines(s"Status of scope $scope on $name:10009: LEADING")
          assert(lines.size >= 3, s"${lines.size} status lines in ${server.logFile}")
          assert(lines.forall(_.contains(" INFO status: ")), lines.head)
          info(s"status line in Kyuubi's log: ${lines.last.take(300)}...")
        }
        val debugLines = server.log
          .filter(_.split(" ").lift(1).contains("DEBUG"))
        if (debug) assert(debugLines.nonEmpty, s"no DEBUG line of podsweep in ${server.logFile}")
        else assert(debugLines.isEmpty, debugLines.take(3))
      } finally {
        scala.util.Try(server.close())
        admin.close()
        api.close()
        ha.close()
      }
    }
  }
}
