package org.podsweep

import java.io.File
import java.nio.file.Paths
import java.util.concurrent.TimeUnit

import scala.io.Source

import org.scalatest.funsuite.AnyFunSuite

/**
 * Native records through a real SLF4J backend with configurable levels (logback-classic). The test
 * class path keeps slf4j-simple as this JVM's provider (the other suites' log file depends on it),
 * so the check runs in a fresh JVM on the same class path without slf4j-simple, with logback as
 * the provider.
 */
class Slf4jRoutingSuite extends AnyFunSuite {
  test("this JVM still logs through slf4j-simple (logback is only for the forked probe)") {
    assert(org.slf4j.LoggerFactory.getILoggerFactory.getClass.getName.startsWith("org.slf4j.simple."))
  }

  test("native records land on org.podsweep.native.<module> at their level; levelOf follows the configuration") {
    val cp = System.getProperty("java.class.path").split(File.pathSeparator)
      .filterNot(p => new File(p).getName.startsWith("slf4j-simple")).mkString(File.pathSeparator)
    val javaBin = Paths.get(System.getProperty("java.home"), "bin", "java").toString
    val pb = new ProcessBuilder(javaBin, "-Dslf4j.provider=ch.qos.logback.classic.spi.LogbackServiceProvider",
      "-cp", cp, "org.podsweep.Slf4jRoutingProbe").redirectErrorStream(true)
    val p = pb.start()
    val out = Source.fromInputStream(p.getInputStream, "UTF-8").mkString
    assert(p.waitFor(120, TimeUnit.SECONDS), out)
    assert(p.exitValue() == 0, out)
    val lines = out.split("\n").map(_.trim).toSeq
    def v(key: String) = lines.collectFirst { case l if l.startsWith(s"$key=") => l.stripPrefix(s"$key=") }
      .getOrElse(fail(s"no $key in:\n$out"))
    assert(v("factory") == "ch.qos.logback.classic.LoggerContext", out)
    assert(v("deleter-off") == "0", out)
    assert(v("deleter-debug") == "4", out)
    assert(v("deleter-trace") == "5", out)
    assert(v("deleter-error") == "1", out)
    assert(v("deleter-inherited") == "3", out)
    assert(v("election-zookeeper-inherited") == "3", out)
    assert(v("native-record").startsWith("org.podsweep.native.sweeper|DEBUG|Scheduled probe-pod (FINISHED)"), out)
    val records = lines.filter(_.startsWith("record=")).map(_.stripPrefix("record="))
    assert(records.contains("org.podsweep.native.sweeper|WARN|direct warn"), out)
    assert(!records.exists(_.contains("suppressed by OFF")), out)
    assert(lines.contains("probe-ok"), out)
  }
}
