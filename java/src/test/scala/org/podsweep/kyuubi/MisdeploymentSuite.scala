package org.podsweep.kyuubi

import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path, StandardCopyOption}
import java.time.Instant
import java.time.temporal.ChronoUnit

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.testkit.{KyuubiHome, KyuubiPods, KyuubiServer, RealKube}
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * A patched Kyuubi 1.12.0 deployed wrongly, as an operator can: podsweep's jar left out of
 * `jars/` (it is a `provided` dependency of the patch), its native library not loadable, a
 * podsweep jar of another version. Each time a whole patched server (`KyuubiServer.startServer`:
 * frontends, metadata store, Kyuubi's default embedded ZooKeeper) on the real kube-apiserver must
 * start, serve its REST frontend, clean terminated driver pods as stock Kyuubi does (kind ALL,
 * DELETEs from its own ServiceAccount in the audit log) and write exactly one WARN that names
 * what is missing and the key that turns podsweep off.
 */
class MisdeploymentSuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(90, Seconds), Span(200, Millis))

  private val OffKey = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.podsweep.enabled=false"
  private lazy val kube: RealKube = RealKube.sharedInstance
  private lazy val admin: KubernetesClient = kube.admin
  private lazy val logDir: Path = Files.createTempDirectory("podsweep-kyuubi-misdeployed-")

  private def need(): Unit =
    KyuubiHome.patchedMissing.orElse(RealKube.missing).foreach(why => fail(s"cannot run: $why"))

  /** podsweep's classes with `build-info.properties` saying `version`: a jar of another release. */
  private def classesOfVersion(version: String): File = {
    val src = KyuubiHome.podsweepClasses.getOrElse(fail("no podsweep classes (sbt's podsweep.classes)")).toPath
    val dst = logDir.resolve(s"podsweep-classes-$version")
    Files.walk(src).iterator().asScala.foreach { p =>
      val to = dst.resolve(src.relativize(p).toString)
      if (Files.isDirectory(p)) Files.createDirectories(to)
      else Files.copy(p, to, StandardCopyOption.REPLACE_EXISTING)
    }
    val info = dst.resolve("org/podsweep/build-info.properties")
    val text = new String(Files.readAllBytes(info), StandardCharsets.UTF_8)
    Files.write(info, text.replaceAll("(?m)^version=.*$", s"version=$version").getBytes(StandardCharsets.UTF_8))
    dst.toFile
  }

  /**
   * Starts the misdeployed whole server on namespace `ns`, checks it serves, cleans and warns
   * once with `expected` in the WARN.
   */
  private def misdeployed(
      ns: String,
      expected: String,
      podsweepClassPath: Option[Seq[File]] = None,
      nativePath: Option[String] = None): Unit = {
    need()
    val dir = logDir.resolve(ns)
    Files.createDirectories(dir)
    val rest = KyuubiFleetSuite.freePort()
    val conf = KyuubiServer.conf(ns, kube, Seq(ns), retainMs = 2000L) ++ Map(
      "kyuubi.frontend.protocols" -> "THRIFT_BINARY,REST",
      "kyuubi.frontend.bind.host" -> "127.0.0.1",
      "kyuubi.frontend.thrift.binary.bind.port" -> "0",
      "kyuubi.frontend.rest.bind.port" -> rest.toString,
      "kyuubi.metadata.store.jdbc.url" -> s"jdbc:sqlite:$dir/metadata.db",
      "kyuubi.zookeeper.embedded.client.port" -> "0",
      "kyuubi.zookeeper.embedded.data.dir" -> s"$dir/zookeeper",
      "kyuubi.metrics.enabled" -> "false")
    val server = new KyuubiServer(ns, KyuubiHome.Patched, conf, dir, heapMb = 512,
      mode = KyuubiHome.WholeServer, nativePath = nativePath, podsweepClassPath = podsweepClassPath)
    try {
      // The server started (READY came from a started KyuubiServer), without podsweep.
      assert(server.serverId.isEmpty, s"podsweep runs: ${server.serverId}")
      // It serves: its REST frontend answers, from its metadata store too.
      val base = s"http://127.0.0.1:$rest/api/v1"
      assert(scala.io.Source.fromURL(s"$base/ping", "UTF-8").mkString.trim == "pong")
      val batches = scala.io.Source.fromURL(s"$base/batches?batchType=SPARK", "UTF-8").mkString
      assert(batches.contains("\"batches\""), batches)
      // It cleans as stock Kyuubi does: every terminated driver pod DELETEd by this server.
      val pods = (0 until 3).map(i => kube.createPod(admin, ns, KyuubiPods.driver(f"driver-$i%02d")))
      val at = Instant.now().truncatedTo(ChronoUnit.SECONDS)
      pods.foreach(p => admin.pods().inNamespace(ns).resource(KyuubiPods.terminated(p, succeeded = true, at)).updateStatus())
      val names = pods.map(_.getMetadata.getName)
      eventually(assert(admin.pods().inNamespace(ns).list().getItems.isEmpty))
      val accepted = kube.podDeletes(ns).filter(d => d.status == 200 && d.bearer.contains(ns)).flatMap(_.pod.map(_._2))
      assert(accepted.sorted == names.sorted, kube.podDeletes(ns))
      // One WARN, naming what is missing and the switch; no other podsweep complaint.
      val warns = server.log.filter(l => l.contains(" WARN ") && l.contains("podsweep"))
      assert(warns.size == 1, warns.mkString("\n"))
      assert(warns.head.contains(expected) && warns.head.contains(OffKey), warns.head)
      assert(warns.head.contains("This server deletes terminated driver pods on its own"), warns.head)
      assert(server.logLines(" ERROR ").filter(_.contains("podsweep")).isEmpty, server.log.mkString("\n"))
      info(s"$ns: started, REST answered, ${names.size} pods deleted by the server itself; WARN: " +
        warns.head.substring(warns.head.indexOf("WARN")))
    } finally server.close()
  }

  test("a patched server without podsweep's jar starts, serves, cleans as stock Kyuubi and warns once") {
    misdeployed("misdeployed-nojar", "podsweep's jar is not on this server's class path",
      podsweepClassPath = Some(Nil))
  }

  test("a patched server whose podsweep native library does not load starts, serves, cleans and warns once") {
    misdeployed("misdeployed-nolib", "podsweep's native library did not load",
      nativePath = Some(logDir.resolve("no-such-dir/libpodsweep.so").toString))
  }

  test("a patched server with a podsweep jar of another version starts, serves, cleans and warns once") {
    need()
    misdeployed("misdeployed-version", "podsweep's jar on the class path is version 0.0.1",
      podsweepClassPath = Some(Seq(classesOfVersion("0.0.1"))))
  }
}
