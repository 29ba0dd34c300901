package org.podsweep

import java.nio.file.{Files, Paths}
import java.nio.file.attribute.PosixFilePermissions

import scala.collection.JavaConverters._

/** Run in a fresh JVM by NativeLoaderSuite: loads the library the way a Kyuubi server would. */
object LoaderProbe {
  def main(args: Array[String]): Unit = {
    try NativeLoader.load()
    catch {
      case e: PodsweepException =>
        // A library of another build (BuildInfoSuite): the error is thrown again on every use.
        println(s"mismatch=$e")
        try PodSweeper.create(java.util.Collections.emptyMap[String, String](), "probe:1")
        catch { case again: PodsweepException => println(s"again=$again") }
        sys.exit(3)
    }
    val from = NativeLoader.loadedFrom()
    println(s"loaded-from=$from")
    val path = Paths.get(from)
    if (Files.exists(path)) {
      println(s"dir-perms=${PosixFilePermissions.toString(Files.getPosixFilePermissions(path.getParent))}")
      println(s"file-perms=${PosixFilePermissions.toString(Files.getPosixFilePermissions(path))}")
    }
    val conf = Map(
      "kyuubi.kubernetes.master.address" -> "http://127.0.0.1:9",
      "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind" -> "NONE")
    val s = PodSweeper.create(conf.asJava, "probe:1")
    try {
      s.observe(null, "ns", PodEvent.ADD, "tag", "pod", "uid", "RUNNING", true, 0L, false)
      println(s"status=${s.scopeStatus(null, "ns")}")
    } finally s.close()
    println("probe-ok")
  }
}
