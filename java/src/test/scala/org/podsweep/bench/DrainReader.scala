package org.podsweep.bench

import java.util.concurrent.ConcurrentLinkedQueue

import scala.collection.JavaConverters._
import scala.util.Try

import org.podsweep.testkit.{KyuubiPods, TestApi}

/**
 * What a drain costs everybody else: another client, under an identity of its own (so API
 * Priority and Fairness sees another flow), GETs one pod every [[DrainReader.PeriodMs]] from
 * before a drain starts until it ends. Its latency while nothing else runs ([[idle]]) is the
 * baseline; its p99 over a drain's span is compared with it.
 */
final class DrainReader(api: TestApi, label: String) extends AutoCloseable {
  private val ns = s"drain-reader-$label"
  private val pod = "reader-target"
  private val client = api.client(DrainReader.Identity)
  /** (when sent, wall ms; latency ms; answered) */
  private val samples = new ConcurrentLinkedQueue[(Long, Double, Boolean)]()
  @volatile private var running = true

  private val admin = api.client("drain-admin")
  try api.createPod(admin, ns, KyuubiPods.driver(pod, phase = "Running")) finally admin.close()

  private val thread = new Thread(() => {
    while (running) {
      val at = System.currentTimeMillis()
      val t0 = System.nanoTime()
      val ok = Try(client.pods().inNamespace(ns).withName(pod).get()).toOption.exists(_ != null)
      val ms = (System.nanoTime() - t0) / 1e6
      samples.add((at, ms, ok))
      // Paced: one GET per period, whatever its latency (a slow one is followed at once).
      val left = DrainReader.PeriodMs - ms.toLong
      if (left > 0 && running) Thread.sleep(left)
    }
  }, s"drain-reader-$label")
  thread.setDaemon(true)
  thread.start()

  /** The baseline: GETs over `ms` while nothing else runs; returns its span. */
  def idle(ms: Long = DrainReader.IdleMs): (Long, Long) = {
    val from = System.currentTimeMillis()
    Thread.sleep(ms)
    (from, System.currentTimeMillis())
  }

  /** The p99 of the answered GETs over `idleSpan` and over `drain` (NaN without one). */
  def p99s(idleSpan: (Long, Long), drain: Option[(Long, Long)]): (Double, Double) = (
    BenchOut.percentile(within(idleSpan).filter(_._3).map(_._2), 99),
    BenchOut.percentile(drain.map(within).getOrElse(Vector.empty).filter(_._3).map(_._2), 99))

  private def within(span: (Long, Long)): Seq[(Long, Double, Boolean)] =
    samples.asScala.iterator.filter { case (at, _, _) => at >= span._1 && at <= span._2 }.toVector

  /** The line's fields: idle p50/p99, p50/p99 over `drain`, the ratio of the p99s, failures. */
  def fields(idleSpan: (Long, Long), drain: Option[(Long, Long)]): Seq[(String, Any)] = {
    val idleMs = within(idleSpan).filter(_._3).map(_._2)
    val during = drain.map(within).getOrElse(Vector.empty)
    val duringMs = during.filter(_._3).map(_._2)
    val idleP99 = BenchOut.percentile(idleMs, 99)
    val p99 = BenchOut.percentile(duringMs, 99)
    Seq(
      "reader" -> s"GET of one pod every ${DrainReader.PeriodMs} ms as ServiceAccount ${DrainReader.Identity}",
      "reader_idle_gets" -> idleMs.size,
      "reader_idle_p50_ms" -> BenchOut.percentile(idleMs, 50),
      "reader_idle_p99_ms" -> idleP99,
      "reader_gets" -> during.size,
      "reader_failed_gets" -> during.count(!_._3),
      "reader_p50_ms" -> BenchOut.percentile(duringMs, 50),
      "reader_p99_ms" -> p99,
      "reader_p99_over_idle" -> (if (idleP99 > 0 && !p99.isNaN) p99 / idleP99 else Double.NaN))
  }

  override def close(): Unit = {
    running = false
    thread.join(10000)
    client.close()
  }
}

object DrainReader {
  val Identity = "drain-reader"
  val PeriodMs = 20L
  val IdleMs = 15000L
}
