package org.podsweep.chaos

import scala.collection.immutable.ListMap

import org.podsweep.bench.BenchOut

/**
 * The JVM half of `scripts/chaos`: fault scenarios against real ZooKeeper / etcd, Kyuubi 1.12.0's
 * own classes and an API server we control. Each prints one JSON line on stdout
 * (`{"chaos": "<name>", ...}`) with what it injected and what happened, and the run fails (exit 1)
 * only when a safety figure is broken: a wrongful DELETE, a leaked pod, a crash, or duplicates
 * beyond the stated bound. `--smoke` runs every scenario at its smallest size (the pass
 * `scripts/test` runs); the full sizes run on demand.
 *
 * Usage: Chaos [--smoke] [--log FILE] [NAME ...]
 */
object Chaos {
  /** What every scenario reports, then its own fields. */
  final case class Outcome(
      backend: String,
      pods: Int,
      deleteRequests: Int,
      duplicates: Int,
      duplicatesWithinBound: Boolean,
      leaked: Int,
      wrongful: Int,
      crashes: Int,
      fields: Seq[(String, Any)] = Nil,
      /** A scenario-specific safety figure that is broken, with why. */
      broken: Seq[String] = Nil) {
    def safe: Boolean = leaked == 0 && wrongful == 0 && crashes == 0 && duplicatesWithinBound && broken.isEmpty
  }

  type Scenario = Boolean => Seq[Outcome]

  val Scenarios: Seq[(String, Scenario)] = Seq(
    "api_storm" -> FleetScenarios.apiStorm,
    "fuzz" -> FuzzScenario.run,
    "cycles" -> CyclesScenario.run,
    "mixed_fleet" -> FleetScenarios.mixedFleet,
    "graceful" -> FleetScenarios.graceful)

  def main(argv: Array[String]): Unit = {
    val smoke = argv.contains("--smoke")
    val log = argv.sliding(2).collectFirst { case Array("--log", f) => f }.getOrElse("target/chaos-output.log")
    val named = argv.filterNot(a => a.startsWith("--") || a == log).toSeq
    val unknown = named.filterNot(n => Scenarios.exists(_._1 == n))
    if (unknown.nonEmpty) {
      System.err.println(s"chaos: unknown scenario ${unknown.mkString(", ")} (known: ${Scenarios.map(_._1).mkString(", ")})")
      System.exit(2)
    }
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn")
    System.setProperty("org.slf4j.simpleLogger.log.org.podsweep", "info")
    System.setProperty("org.slf4j.simpleLogger.showDateTime", "true")
    System.setProperty("org.slf4j.simpleLogger.logFile", log)
    val chosen = if (named.isEmpty) Scenarios else Scenarios.filter(s => named.contains(s._1))
    var unsafe = 0
    chosen.foreach { case (name, run) =>
      progress(s"$name${if (smoke) " (smoke)" else ""}")
      val t0 = System.nanoTime()
      val outcomes = try run(smoke) catch {
        case t: Throwable =>
          System.err.println(s"chaos $name failed to run: $t")
          t.printStackTrace()
          Seq(Outcome("-", 0, 0, 0, duplicatesWithinBound = false, 0, 0, 0, broken = Seq(s"the scenario did not run: $t")))
      }
      val seconds = (System.nanoTime() - t0) / 1e9
      outcomes.foreach { o =>
        line(name, o, seconds, smoke)
        if (!o.safe) {
          unsafe += 1
          System.err.println(s"chaos $name (${o.backend}): a safety figure is broken: " +
            (o.broken ++ Seq(s"leaked=${o.leaked}", s"wrongful=${o.wrongful}", s"crashes=${o.crashes}",
              s"duplicates_within_bound=${o.duplicatesWithinBound}")).mkString(", "))
        }
      }
    }
    System.exit(if (unsafe == 0) 0 else 1)
  }

  def progress(msg: String): Unit = System.err.println(s"[chaos] $msg")

  private def line(name: String, o: Outcome, seconds: Double, smoke: Boolean): Unit = {
    val fields = ListMap[String, Any](
      "chaos" -> name,
      "backend" -> o.backend,
      "pods" -> o.pods,
      "delete_requests" -> o.deleteRequests,
      "duplicates" -> o.duplicates,
      "duplicates_within_bound" -> o.duplicatesWithinBound,
      "leaked" -> o.leaked,
      "wrongful" -> o.wrongful,
      "crashes" -> o.crashes) ++ o.fields ++ ListMap(
      "safe" -> o.safe,
      "broken" -> o.broken,
      "seconds" -> seconds,
      "smoke" -> smoke)
    System.out.println(BenchOut.json(fields))
    System.out.flush()
  }
}
