package org.podsweep.chaos

import java.nio.file.{Files, Paths}
import java.util.concurrent.TimeUnit

import scala.collection.JavaConverters._
import scala.collection.mutable
import scala.io.Source
import scala.util.Random

import org.podsweep.{PodEvent, PodSweeper, PodsweepException}
import org.podsweep.chaos.Chaos.Outcome
import org.podsweep.testkit.{KyuubiHome, PodsApi}

/**
 * `fuzz`: random and hostile arguments through the public Java API, in a JVM of its own (so a
 * crash is seen as one): `observe` with nulls, empty, huge and unicode strings, path characters,
 * times far in the past and future, every state name and garbage ones; and random configuration
 * maps through `create`. Every failure must be one of the documented exceptions
 * (IllegalArgumentException, IllegalStateException, PodsweepException); anything else, or the JVM
 * dying, breaks the scenario. The sweepers point at a [[PodsApi]] that holds no pod, with a retain
 * period of an hour: a DELETE may reach it only for a pod the fuzz reported as a terminated Spark
 * driver (the fuzz sends termination times far in the past, so some are due at once); a DELETE of
 * anything else is wrongful. The probe writes down every such observation it made (with the
 * default namespace for a null or empty one, as podsweep's scopes do).
 */
object FuzzScenario {
  def run(smoke: Boolean): Seq[Outcome] = {
    val calls = if (smoke) 100000 else 1000000
    val creates = if (smoke) 300 else 5000
    val api = new PodsApi()
    try {
      val dir = Files.createTempDirectory("podsweep-fuzz-")
      val summary = dir.resolve("summary.txt")
      val cp = System.getProperty("java.class.path")
      val java = Paths.get(System.getProperty("java.home"), "bin", "java").toString
      val native = KyuubiHome.nativeLibrary.map(_.getAbsolutePath).getOrElse("")
      val cmd = Seq(java, "-Xmx1g", s"-Dpodsweep.native.path=$native", "-Dorg.slf4j.simpleLogger.defaultLogLevel=off",
        "-cp", cp, "org.podsweep.chaos.FuzzProbe", calls.toString, creates.toString, "20261203", api.url, summary.toString)
      val t0 = System.nanoTime()
      val p = new ProcessBuilder(cmd: _*).directory(dir.toFile)
        .redirectOutput(dir.resolve("probe.out").toFile).redirectError(dir.resolve("probe.err").toFile).start()
      val finished = p.waitFor(30, TimeUnit.MINUTES)
      if (!finished) p.destroyForcibly()
      val code = if (finished) p.exitValue() else -1
      val hsErr = dir.toFile.listFiles().exists(_.getName.startsWith("hs_err_pid"))
      val crashed = code != 0 || hsErr
      val fields: Map[String, String] =
        if (Files.isRegularFile(summary)) Source.fromFile(summary.toFile, "UTF-8").getLines().flatMap { l =>
          l.split("=", 2) match { case Array(k, v) => Some(k -> v); case _ => None }
        }.toMap else Map.empty
      val undocumented = fields.get("undocumented").map(_.toLong).getOrElse(-1L)
      val deletable: Set[(String, String)] = {
        val f = dir.resolve("deletable.txt")
        if (!Files.isRegularFile(f)) Set.empty
        else Source.fromFile(f.toFile, "UTF-8").getLines().flatMap(_.split("\t") match {
          case Array(ns, name) => Some((ns, name)); case _ => None
        }).toSet
      }
      val deletes = api.podDeletes()
      val wrongful = deletes.count(d => !deletable.contains((d.namespace, d.pod.getOrElse(""))))
      if (wrongful > 0) Chaos.progress(s"fuzz: DELETEs ${deletes.map(d => s"${d.path} ${d.status}").mkString(", ")}; " +
        s"deletable observations ${deletable.take(10).mkString(", ")}")
      if (crashed) Chaos.progress(s"fuzz: the probe JVM ended with status $code (hs_err: $hsErr); see $dir")
      Seq(Outcome("local", 0, deletes.size, 0, duplicatesWithinBound = true, 0, wrongful,
        if (crashed) 1 else 0,
        Seq(
          "observe_calls" -> fields.getOrElse("calls", "0").toLong,
          "create_calls" -> fields.getOrElse("creates", "0").toLong,
          "created" -> fields.getOrElse("created", "0").toLong,
          "documented_exceptions" -> fields.getOrElse("documented", "").split(",").filter(_.nonEmpty).map { kv =>
            val Array(k, v) = kv.split(":"); k -> v.toLong }.toMap,
          "undocumented_exceptions" -> undocumented,
          "deletable_observations" -> deletable.size,
          "undocumented_examples" -> fields.getOrElse("examples", ""),
          "probe_exit" -> code,
          "probe_seconds" -> (System.nanoTime() - t0) / 1e9),
        broken = if (undocumented != 0) Seq(s"$undocumented failures outside the documented exceptions") else Nil))
    } finally api.close()
  }
}

/** Runs in its own JVM for [[FuzzScenario]]; writes `key=value` lines to the summary file. */
object FuzzProbe {
  private val States = Seq("PENDING", "RUNNING", "FINISHED", "KILLED", "FAILED", "ZOMBIE", "NOT_FOUND", "UNKNOWN",
    "finished", "Finished", "DONE", "", " ", "FINISHED\u0000", "\u00e9t\u00e9")
  private val Keys = Seq(
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind",
    "kyuubi.kubernetes.terminatedApplicationRetainPeriod",
    "kyuubi.kubernetes.context.allow.list", "kyuubi.kubernetes.namespace.allow.list",
    "kyuubi.kubernetes.context", "kyuubi.kubernetes.namespace", "kyuubi.kubernetes.trust.certificates",
    "kyuubi.kubernetes.authenticate.oauthToken", "kyuubi.kubernetes.authenticate.caCertFile",
    "kyuubi.kubernetes.client.initialize.list",
    "kyuubi.ha.client.class", "kyuubi.ha.namespace", "kyuubi.ha.zookeeper.session.timeout",
    "kyuubi.ha.zookeeper.connection.timeout", "kyuubi.ha.zookeeper.auth.type", "kyuubi.ha.zookeeper.auth.digest",
    "kyuubi.ha.zookeeper.connection.retry.policy", "kyuubi.ha.zookeeper.connection.max.retries",
    "kyuubi.ha.etcd.lease.timeout", "kyuubi.ha.etcd.ssl.enabled",
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.etcd.leaseTimeout",
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.rateLimit.qps",
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.rateLimit.burst",
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.maxInFlight",
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.dryRun",
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.retry.maxWait",
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.forbidden.retryInterval",
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.health.alertAfter",
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.stepDownAfter",
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.scope.releaseAfterIdle",
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.ha.embedded",
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.watch.enabled",
    "kyuubi.kubernetes.application.state.source")

  def main(args: Array[String]): Unit = {
    val Array(callsArg, createsArg, seedArg, apiUrl, summaryPath) = args
    val rnd = new Random(seedArg.toLong)
    val documented = mutable.LinkedHashMap.empty[String, Long].withDefaultValue(0L)
    var undocumented = 0L
    val examples = mutable.ArrayBuffer.empty[String]
    def attempt(what: String)(f: => Unit): Boolean =
      try { f; true } catch {
        case e @ (_: IllegalArgumentException | _: IllegalStateException | _: PodsweepException) =>
          documented(e.getClass.getSimpleName) += 1
          if (e.getMessage == null || e.getMessage.isEmpty) {
            undocumented += 1
            if (examples.size < 5) examples += s"$what: ${e.getClass.getSimpleName} without a message"
          }
          false
        case t: Throwable =>
          undocumented += 1
          if (examples.size < 5) examples += s"$what: $t"
          false
      }

    def string(): String = rnd.nextInt(14) match {
      case 0 => null
      case 1 => ""
      case 2 => "x/../kube-system"
      case 3 => "sp\u00e4rk-\u65e5\u672c"
      case 4 => "a" * (if (rnd.nextInt(50) == 0) 1000000 else 300)
      case 5 => "%2e%2e%2fetc"
      case 6 => "ns\u0000null"
      case 7 => " spaced name "
      case 8 => "UPPER-case"
      case 9 => rnd.alphanumeric.take(rnd.nextInt(40)).mkString
      case 10 => "\ud800" // a lone surrogate
      case _ => s"spark-${rnd.nextInt(1000)}"
    }
    def time(): Long = rnd.nextInt(8) match {
      case 0 => Long.MinValue
      case 1 => Long.MaxValue
      case 2 => 0L
      case 3 => -1L
      case 4 => System.currentTimeMillis() + rnd.nextInt(Int.MaxValue).toLong * 1000
      case 5 => System.currentTimeMillis() - rnd.nextInt(Int.MaxValue).toLong * 1000
      case 6 => rnd.nextLong()
      case _ => System.currentTimeMillis()
    }
    val events = PodEvent.values() :+ null

    val base = Map(
      "kyuubi.kubernetes.master.address" -> apiUrl,
      "kyuubi.kubernetes.authenticate.oauthToken" -> "fuzz",
      "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind" -> "ALL",
      "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "PT1H")
    val sweeper = PodSweeper.create(base.asJava, "fuzz:1")
    val calls = callsArg.toLong
    // Observations that may lead to a DELETE: a terminated Spark driver, not being deleted.
    // (An OutputStreamWriter replaces what UTF-8 cannot encode, e.g. a lone surrogate, where a
    // Files.newBufferedWriter would fail and leave the PrintWriter silently dead.)
    val deletable = new java.io.PrintWriter(new java.io.OutputStreamWriter(
      new java.io.FileOutputStream(Paths.get(summaryPath).resolveSibling("deletable.txt").toFile), "UTF-8"))
    val terminal = Set("FINISHED", "FAILED", "KILLED", "NOT_FOUND")
    var i = 0L
    while (i < calls) {
      val (ctx, ns, ev, tag, name, uid, state) =
        (string(), string(), events(rnd.nextInt(events.length)), string(), string(), string(),
          if (rnd.nextBoolean()) States(rnd.nextInt(States.size)) else string())
      val (selector, at, deleting) = (rnd.nextBoolean(), time(), rnd.nextBoolean())
      val took = attempt("observe")(sweeper.observe(ctx, ns, ev, tag, name, uid, state, selector, at, deleting))
      if (took && selector && !deleting && ev != PodEvent.DELETE && terminal(state))
        // podsweep's scope takes a null or empty namespace as the default one (src/scope.rs).
        deletable.println(s"${Option(ns).filter(_.nonEmpty).getOrElse("default")}\t$name")
      if (i % 1000 == 0) attempt("status")(sweeper.statusAll())
      i += 1
    }
    // The engine still works: a well-formed observation is taken.
    val sane = attempt("a well-formed observe after the fuzzing")(
      sweeper.observe(null, "fuzz-ok", PodEvent.UPDATE, "tag-ok", "driver-ok", "uid-ok", "FINISHED", true,
        System.currentTimeMillis(), false))
    if (!sane) { undocumented += 1; examples += "the engine refused a well-formed observation after the fuzzing" }
    sweeper.close()
    deletable.close()
    attempt("observe after close")(sweeper.observe(null, "x", PodEvent.ADD, "t", "n", "u", "RUNNING", true, 0, false))

    val creates = createsArg.toInt
    var created = 0
    (0 until creates).foreach { _ =>
      val conf = mutable.Map(base.toSeq: _*)
      (0 until rnd.nextInt(6)).foreach { _ =>
        val key = if (rnd.nextInt(5) == 0) string() else Keys(rnd.nextInt(Keys.size))
        val value = rnd.nextInt(10) match {
          case 0 => "-1"
          case 1 => "1e-300"
          case 2 => "99999999999999999999"
          case 3 => "P999999D"
          case 4 => "PT0.5S"
          case 5 => "127.0.0.1:1"
          case 6 => "true"
          case _ => string()
        }
        if (key != null && value != null) conf(key) = value
      }
      if (attempt("create")(PodSweeper.create(conf.asJava, s"fuzz:${rnd.nextInt(1000)}").close())) created += 1
    }
    attempt("create with null")(PodSweeper.create(null, "x"))
    attempt("create with a null server id")(PodSweeper.create(base.asJava, null))

    val lines = Seq(
      s"calls=$calls",
      s"creates=$creates",
      s"created=$created",
      s"documented=${documented.map { case (k, v) => s"$k:$v" }.mkString(",")}",
      s"undocumented=$undocumented",
      s"examples=${examples.mkString(" | ").replace('\n', ' ')}")
    Files.write(Paths.get(summaryPath), lines.mkString("\n").getBytes("UTF-8"))
    System.exit(0)
  }
}
