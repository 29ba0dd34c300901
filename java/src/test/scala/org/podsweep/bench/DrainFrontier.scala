package org.podsweep.bench

import java.nio.file.{Files, Paths}
import java.util.concurrent.ConcurrentLinkedQueue

import scala.collection.JavaConverters._
import scala.collection.immutable.ListMap
import scala.util.Try

import org.podsweep.testkit.{RealKube, TestApi}

/**
 * One contender of the drain bench as the frontier sees it: its drain rate (DELETEs answered 200 a
 * second, from the audit log), the neighbour reader's p99 during the drain and while idle, and what
 * the drain cost the API server and etcd in CPU per cleaned pod (net of their idle use, see
 * [[ControlPlaneCpu]]). `inFlight` is set for the raw client's levels, which draw the curve.
 */
final case class FrontierPoint(
    label: String,
    inFlight: Option[Int],
    rate: Double,
    p99: Double,
    idleP99: Double,
    apiserverMsPerPod: Option[Double],
    etcdMsPerPod: Option[Double])

/**
 * The API server's own frontier: the raw client at 1, 2, 4, ... DELETEs in flight draws drain rate
 * against the neighbour reader's p99; a contender is on it when its p99 is within [[MaxP99OverCurve]]
 * of the curve's p99 at the contender's own rate.
 *
 * The curve is piecewise linear through the raw points in order of rate, starting from rate 0 at
 * the median of the raw runs' idle p99 (no drain: the reader's idle latency); past the fastest
 * raw point it stays at that point's p99 (`extrapolated` says so).
 */
object DrainFrontier {
  val MaxP99OverCurve = 1.1
  val MinOfRawBest = 0.5

  /** The curve's p99 at `rate`, and whether `rate` lies past the fastest raw point. */
  def curveAt(raw: Seq[FrontierPoint], rate: Double): Option[(Double, Boolean)] = {
    val pts = raw.filter(p => !p.rate.isNaN && !p.p99.isNaN).sortBy(_.rate)
    if (pts.isEmpty || rate.isNaN) None
    else {
      val origin = BenchOut.median(raw.map(_.idleP99).filterNot(_.isNaN))
      val curve = (if (origin.isNaN) Vector.empty else Vector((0.0, origin))) ++ pts.map(p => (p.rate, p.p99))
      if (rate >= curve.last._1) Some((curve.last._2, rate > curve.last._1))
      else if (rate <= curve.head._1) Some((curve.head._2, false))
      else {
        val i = curve.indexWhere(_._1 >= rate)
        val ((r0, p0), (r1, p1)) = (curve(i - 1), curve(i))
        Some((if (r1 == r0) p1 else p0 + (p1 - p0) * (rate - r0) / (r1 - r0), false))
      }
    }
  }

  /** The fields of the summary line: the curve, each other contender against it, and the verdict. */
  def summary(points: Seq[FrontierPoint], judged: String): Seq[(String, Any)] = {
    val raw = points.filter(_.inFlight.isDefined)
    val best = raw.filterNot(_.rate.isNaN).sortBy(-_.rate).headOption
    def against(p: FrontierPoint): ListMap[String, Any] = {
      val at = curveAt(raw, p.rate)
      ListMap(
        "label" -> p.label,
        "deletes_per_s" -> p.rate,
        "reader_p99_ms" -> p.p99,
        "reader_idle_p99_ms" -> p.idleP99,
        "curve_p99_at_rate_ms" -> at.map(_._1),
        "curve_extrapolated" -> at.map(_._2),
        "p99_over_curve" -> at.map(a => p.p99 / a._1),
        "of_raw_best" -> best.map(b => p.rate / b.rate),
        "apiserver_cpu_ms_per_pod" -> p.apiserverMsPerPod,
        "etcd_cpu_ms_per_pod" -> p.etcdMsPerPod)
    }
    val others = points.filter(_.inFlight.isEmpty).map(against)
    val judgedLine = others.find(_("label") == judged)
    def num(k: String): Option[Double] = judgedLine.flatMap(_.get(k)).collect {
      case Some(d: Double) if !d.isNaN => d
      case d: Double if !d.isNaN => d
    }
    val overCurve = num("p99_over_curve")
    val ofBest = num("of_raw_best")
    val onFrontier = overCurve.exists(_ <= MaxP99OverCurve)
    val fastEnough = ofBest.exists(_ >= MinOfRawBest)
    val pass = onFrontier && fastEnough
    def fmt(o: Option[Double]) = o.map(d => f"$d%.3f").getOrElse("unknown")
    Seq(
      "system" -> "frontier",
      "curve" -> raw.sortBy(_.inFlight).map(p => ListMap(
        "in_flight" -> p.inFlight,
        "deletes_per_s" -> p.rate,
        "reader_p99_ms" -> p.p99,
        "reader_idle_p99_ms" -> p.idleP99,
        "apiserver_cpu_ms_per_pod" -> p.apiserverMsPerPod,
        "etcd_cpu_ms_per_pod" -> p.etcdMsPerPod)),
      "curve_origin_p99_ms" -> BenchOut.median(raw.map(_.idleP99).filterNot(_.isNaN)),
      "raw_best_deletes_per_s" -> best.map(_.rate),
      "raw_best_in_flight" -> best.flatMap(_.inFlight),
      "contenders" -> others,
      "judged" -> judged,
      "judged_deletes_per_s" -> num("deletes_per_s"),
      "judged_reader_p99_ms" -> num("reader_p99_ms"),
      "curve_p99_at_judged_rate_ms" -> num("curve_p99_at_rate_ms"),
      "judged_p99_over_curve" -> overCurve,
      "judged_p99_over_curve_max" -> MaxP99OverCurve,
      "judged_of_raw_best" -> ofBest,
      "judged_of_raw_best_min" -> MinOfRawBest,
      "on_frontier" -> onFrontier,
      "fast_enough" -> fastEnough,
      "pass" -> pass,
      "verdict" -> (s"${if (pass) "pass" else "fail"}: $judged's p99 over the curve at its rate ${fmt(overCurve)} " +
        s"(at most $MaxP99OverCurve), its rate over the raw best ${fmt(ofBest)} (at least $MinOfRawBest)"))
  }
}

/**
 * CPU seconds (utime + stime, /proc/PID/stat) of the real API server's kube-apiserver and etcd, each
 * read by its own PID, and of the contender's own process once [[follow]] names it (a Kyuubi
 * server: 0 before it started, its last reading after it ended), sampled every [[ControlPlaneCpu.PeriodMs]] from creation until [[close]]. Empty for a
 * test API server. A span's use is interpolated between the samples around its ends.
 */
final class ControlPlaneCpu(api: TestApi) extends AutoCloseable {
  import ControlPlaneCpu._

  private val pids: Option[(Long, Long)] = api match {
    case k: RealKube =>
      Try(new String(Files.readAllBytes(k.dir.resolve("etcd.pid"))).trim.toLong).toOption.map(e => (k.apiserverPid, e))
    case _ => None
  }
  /** (wall ms, kube-apiserver s, etcd s, the client's s) */
  private val samples = new ConcurrentLinkedQueue[(Long, Double, Double, Double)]()
  @volatile private var running = pids.isDefined

  /** The command names of the two PIDs (`kube-apiserver`, `etcd`): what was read. */
  val commands: Option[(String, String)] = pids.map { case (a, e) => (comm(a), comm(e)) }

  @volatile private var client: Option[Long] = None
  @volatile private var clientLast = 0.0

  /** Reads `pid`'s CPU too from now on: the contender's own process, started after this. */
  def follow(pid: Long): Unit = {
    client = Some(pid)
    sample()
  }

  // One at a time, so that the samples stay in the order of their times.
  private def sample(): Unit = synchronized {
    pids.foreach { case (a, e) =>
      client.flatMap(cpuSeconds).foreach(x => clientLast = x)
      for (x <- cpuSeconds(a); y <- cpuSeconds(e)) samples.add((System.currentTimeMillis(), x, y, clientLast))
    }
  }

  sample()
  private val thread = new Thread(() => {
    while (running) {
      Thread.sleep(PeriodMs)
      sample()
    }
  }, "drain-cpu")
  thread.setDaemon(true)
  if (running) thread.start()

  /** (kube-apiserver s, etcd s, client s) used at `at`, interpolated; None before the first sample. */
  private def at(at: Long): Option[(Double, Double, Double)] = {
    val s = samples.asScala.toVector
    val after = s.indexWhere(_._1 >= at)
    if (s.isEmpty || at < s.head._1) None
    else if (after < 0) Some((s.last._2, s.last._3, s.last._4))
    else if (after == 0) Some((s.head._2, s.head._3, s.head._4))
    else {
      val (t0, a0, e0, c0) = s(after - 1)
      val (t1, a1, e1, c1) = s(after)
      val f = if (t1 == t0) 1.0 else (at - t0).toDouble / (t1 - t0)
      Some((a0 + (a1 - a0) * f, e0 + (e1 - e0) * f, c0 + (c1 - c0) * f))
    }
  }

  /** CPU seconds of each (kube-apiserver, etcd, client) over `[from, to]` (wall ms). */
  def between(from: Long, to: Long): Option[(Double, Double, Double)] = {
    sample()
    for (a <- at(from); b <- at(to)) yield (b._1 - a._1, b._2 - a._2, b._3 - a._3)
  }

  /**
   * The line's fields for a run over `run` whose reader was idle over `idle`, having cleaned `pods`:
   * CPU seconds of each over the run, their idle rate (the reader's GETs and the servers' own
   * background), and the run's CPU net of that idle rate, in ms per pod cleaned. With a client
   * process, also its CPU over the run and the cores it used over `drain` (first to last pod
   * deleted), beside the API server's and etcd's there.
   */
  def fields(idle: (Long, Long), run: (Long, Long), pods: Int,
      drain: Option[(Long, Long)] = None): (Seq[(String, Any)], Option[Double], Option[Double]) = {
    val idleUse = between(idle._1, idle._2)
    val runUse = between(run._1, run._2)
    val idleS = (idle._2 - idle._1) / 1000.0
    val runS = (run._2 - run._1) / 1000.0
    def net(pick: ((Double, Double, Double)) => Double): Option[Double] =
      for (i <- idleUse; r <- runUse if pods > 0 && idleS > 0) yield (pick(r) - pick(i) / idleS * runS) * 1000.0 / pods
    val apiserver = net(_._1)
    val etcd = net(_._2)
    def finite(d: Double): Option[Double] = Some(d).filterNot(x => x.isNaN || x.isInfinite)
    val drainUse = for (d <- drain if d._2 > d._1; u <- between(d._1, d._2)) yield (u, (d._2 - d._1) / 1000.0)
    val clientFields = if (client.isEmpty) Nil else Seq(
      "client_cpu_source" -> client.map(p => s"/proc/$p/stat utime+stime of ${comm(p)} (the contender's server process)"),
      "client_cpu_s" -> runUse.flatMap(u => finite(u._3)),
      "client_cpu_ms_per_pod" -> runUse.flatMap(u => finite(u._3 * 1000.0 / pods)).filter(_ => pods > 0),
      "client_cores_in_drain" -> drainUse.flatMap { case (u, s) => finite(u._3 / s) },
      "apiserver_cores_in_drain" -> drainUse.map { case (u, s) => u._1 / s },
      "etcd_cores_in_drain" -> drainUse.map { case (u, s) => u._2 / s })
    (Seq(
      "cpu_source" -> commands.map { case (a, e) => s"/proc/PID/stat utime+stime of $a and $e, each by its own PID" },
      "cpu_run_s" -> runS,
      "apiserver_cpu_s" -> runUse.map(_._1),
      "etcd_cpu_s" -> runUse.map(_._2),
      "apiserver_idle_cpu_s_per_s" -> idleUse.map(_._1 / idleS),
      "etcd_idle_cpu_s_per_s" -> idleUse.map(_._2 / idleS),
      "apiserver_cpu_ms_per_pod" -> apiserver,
      "etcd_cpu_ms_per_pod" -> etcd) ++ clientFields, apiserver, etcd)
  }

  override def close(): Unit = {
    running = false
    thread.join(1000)
  }
}

object ControlPlaneCpu {
  val PeriodMs = 100L
  /** USER_HZ: /proc/PID/stat counts clock ticks of 10 ms. */
  private val TicksPerS = 100.0

  private def comm(pid: Long): String =
    Try(new String(Files.readAllBytes(Paths.get(s"/proc/$pid/comm"))).trim).getOrElse("?")

  /** utime + stime of `pid`, in seconds. */
  def cpuSeconds(pid: Long): Option[Double] = Try {
    val stat = new String(Files.readAllBytes(Paths.get(s"/proc/$pid/stat")))
    // Fields after the command (which may hold spaces): state is field 3, utime 14, stime 15.
    val f = stat.substring(stat.lastIndexOf(')') + 2).split(" ")
    (f(11).toLong + f(12).toLong) / TicksPerS
  }.toOption
}
