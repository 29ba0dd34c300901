package org.podsweep.bench

import java.nio.charset.StandardCharsets
import java.nio.file.Files
import java.util.concurrent.TimeUnit

import scala.collection.JavaConverters._
import scala.collection.immutable.ListMap

import org.openjdk.jmh.annotations.Mode
import org.openjdk.jmh.results.RunResult
import org.openjdk.jmh.runner.Runner
import org.openjdk.jmh.runner.format.OutputFormatFactory
import org.openjdk.jmh.runner.options.{OptionsBuilder, TimeValue, VerboseMode}
import org.podsweep.bench.jmh.ObserveJmh

/**
 * `observe`: JMH, one thread, `PodSweeper.observe` through JNI next to the Guava `Cache.put` Kyuubi
 * does today on its informer thread, over the same 65,536 terminated-pod facts in one JMH run
 * ([[ObserveJmh]]), and the same call for running pods (JNI alone). JMH's own report goes to
 * stderr; one JSON line with ns/op, ops/s (1e9 / ns/op, from the same average-time measurement)
 * and the ratio observe / put goes to stdout, with the sweeper's check that it made no API-server
 * connection and sent no DELETE.
 */
object ObserveBench {
  private final case class Setup(forks: Int, warmups: Int, warmupMs: Long, iterations: Int, iterationMs: Long) {
    def warmup: String = s"${warmups}x${warmupMs} ms"
    def measurement: String = s"${iterations}x${iterationMs} ms"
  }

  def run(smoke: Boolean): Unit = {
    val setup = if (smoke) Setup(forks = 1, warmups = 1, warmupMs = 200, iterations = 1, iterationMs = 200)
    else Setup(forks = 1, warmups = 3, warmupMs = 1000, iterations = 5, iterationMs = 1000)
    val report = Files.createTempFile("podsweep-observe-", ".txt")
    try {
      val loadBefore = java.lang.management.ManagementFactory.getOperatingSystemMXBean.getSystemLoadAverage
      // slf4j-simple, as in this JVM (logback is on the test class path for another suite's probe).
      val jvmArgs = Seq(s"-D${ObserveJmh.REPORT_PROPERTY}=$report",
        "-Dslf4j.provider=org.slf4j.simple.SimpleServiceProvider") ++
        Option(System.getProperty("org.slf4j.simpleLogger.logFile")).map(f => s"-Dorg.slf4j.simpleLogger.logFile=$f")
      val options = new OptionsBuilder()
        .include("^" + java.util.regex.Pattern.quote(classOf[ObserveJmh].getName) + "\\.")
        .mode(Mode.AverageTime)
        .timeUnit(TimeUnit.NANOSECONDS)
        .threads(1)
        .forks(setup.forks)
        .warmupIterations(setup.warmups)
        .warmupTime(TimeValue.milliseconds(setup.warmupMs))
        .measurementIterations(setup.iterations)
        .measurementTime(TimeValue.milliseconds(setup.iterationMs))
        .jvmArgsAppend(jvmArgs: _*)
        .shouldFailOnError(true)
        .build()
      BenchOut.progress(s"observe: JMH ${setup.forks} fork(s), warmup ${setup.warmup}, measurement ${setup.measurement}")
      val results = new Runner(options, OutputFormatFactory.createFormatInstance(System.err, VerboseMode.NORMAL))
        .run().asScala.toSeq

      def of(method: String): RunResult = results.find(_.getParams.getBenchmark.endsWith(s".$method"))
        .getOrElse(sys.error(s"JMH returned no result for $method (got ${results.map(_.getParams.getBenchmark)})"))
      // (score, 99.9% error, unit); no val of the result itself (an existential type in Scala).
      def score(method: String): (Double, Double, String) =
        (of(method).getPrimaryResult.getScore, of(method).getPrimaryResult.getScoreError,
          of(method).getPrimaryResult.getScoreUnit)
      val observe = score("podsweepObserve")
      val put = score("guavaCachePut")
      val running = score("podsweepObserveRunning")
      val handedOn = score("podsweepObserveHandedOn")
      require(observe._3 == "ns/op" && put._3 == "ns/op", s"unexpected units ${observe._3}, ${put._3}")

      // One line per sweeper trial (one per fork): connections=<n> deletes_sent=<n> tracked=<n> ...
      val checks = Files.readAllLines(report, StandardCharsets.UTF_8).asScala.map(_.trim).filter(_.nonEmpty)
        .map(_.split(" ").map(_.split("=", 2)).collect { case Array(k, v) => k -> v.toLong }.toMap)
      require(checks.nonEmpty, "the sweeper trial wrote no check line")
      def sum(k: String): Long = checks.map(_.getOrElse(k, 0L)).sum

      def ci(score: Double, error: Double): Any = if (error.isNaN) None else Seq(score - error, score + error)
      BenchOut.line("observe",
        "podsweep_observe_ns_per_op" -> observe._1,
        "podsweep_observe_ops_per_s" -> 1e9 / observe._1,
        "guava_cache_put_ns_per_op" -> put._1,
        "guava_cache_put_ops_per_s" -> 1e9 / put._1,
        "ratio_observe_to_put" -> observe._1 / put._1,
        "podsweep_observe_running_pod_ns_per_op" -> running._1,
        "podsweep_observe_handed_on_ns_per_op" -> handedOn._1,
        "ci99_9_ns_per_op" -> ListMap(
          "podsweep_observe" -> ci(observe._1, observe._2),
          "guava_cache_put" -> ci(put._1, put._2),
          "podsweep_observe_running_pod" -> ci(running._1, running._2),
          "podsweep_observe_handed_on" -> ci(handedOn._1, handedOn._2)),
        "notes" -> ("observe: UPDATE of a tracked terminated driver pod, as an informer repeats it (answered " +
          "on the calling thread from the UID's bits: the scope's task knows it); " +
          "observe_running_pod: the same for a running pod; " +
          "observe_handed_on: FAILED and a DELETE event by turns, so each event is read in full and handed to " +
          "the scope's task, as a pod's first events are; " +
          "put: Guava Cache<String,String> with expireAfterWrite = retain and a removal listener"),
        "facts" -> ObserveJmh.FACTS,
        "threads" -> 1,
        "retain_ms" -> ObserveJmh.RETAIN_MS,
        "sweeper" -> ListMap(
          "mode" -> "local (no HA keys)",
          "api_server_connections" -> sum("connections"),
          "deletes_sent" -> sum("deletes_sent"),
          "tracked_at_end_max" -> checks.map(_.getOrElse("tracked", 0L)).max,
          "observe_calls" -> sum("observed"),
          "answered_on_calling_thread" -> sum("answered")),
        "jmh" -> ListMap(
          "version" -> org.openjdk.jmh.util.Version.getPlainVersion,
          "mode" -> "avgt (ops/s = 1e9 / ns per op)",
          "forks" -> setup.forks,
          "warmup" -> setup.warmup,
          "measurement" -> setup.measurement,
          "jvm" -> s"${System.getProperty("java.vm.name")} ${System.getProperty("java.version")}"),
        "machine" -> ListMap(
          "cores" -> Runtime.getRuntime.availableProcessors,
          "load_average_1m_before" -> loadBefore,
          "load_average_1m_after" -> java.lang.management.ManagementFactory.getOperatingSystemMXBean.getSystemLoadAverage))
    } finally Files.deleteIfExists(report)
  }
}
