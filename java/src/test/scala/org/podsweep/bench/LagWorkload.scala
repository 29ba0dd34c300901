package org.podsweep.bench

import java.time.Instant
import java.time.temporal.ChronoUnit
import java.util.concurrent.{Callable, Executors}

import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.testkit.{KyuubiPods, Recorded, TestApi}

/** One driver pod's termination as the workload reported it to the API server. */
private[bench] final case class LagTermination(
    name: String,
    finishedAtMillis: Long,
    scheduledAtMillis: Long,
    reportedAtMillis: Long,
    retainMs: Long) {
  /** finishedAt (whole seconds, as Kubernetes reports it) + the retain period. */
  def deadline: Long = finishedAtMillis + retainMs

  /** How late the status update completed against its schedule (the API server keeping up, or not). */
  def behindScheduleMs: Long = reportedAtMillis - scheduledAtMillis
}

/**
 * The lag bench's workload in one namespace of a [[TestApi]] (a real kube-apiserver, or
 * [[org.podsweep.testkit.PodsApi]]): `pods` running Spark driver pods (created as a kubelet leaves
 * them, [[TestApi.createPod]]: on a real API server a create and a `pods/status` write), then
 * their terminations paced evenly over `spreadMs` (a status update whose driver container
 * `finishedAt` is the second the update is sent), so that deadlines fall within the spread.
 * Requests go out from a small thread pool.
 */
private[bench] final class LagWorkload(
    api: TestApi,
    val namespace: String,
    val pods: Int,
    val spreadMs: Long,
    val retainMs: Long,
    threads: Int = 16) extends AutoCloseable {
  private val admin: KubernetesClient = api.client("lag-admin")

  def podName(i: Int): String = f"spark-driver-$i%05d"

  /** Creates the running driver pods; returns them as the API server stored them (uid, version). */
  def create(): Seq[Pod] = LagWorkload.parallel(0 until pods, threads) { i =>
    api.createPod(admin, namespace, KyuubiPods.driver(podName(i)))
  }

  /** Terminates pod i at start + i * spread / pods (Succeeded, every third Failed). */
  def terminate(created: Seq[Pod]): Seq[LagTermination] = {
    val start = System.currentTimeMillis() + 100
    val step = spreadMs.toDouble / created.size
    LagWorkload.parallel(created.zipWithIndex, threads) { case (pod, i) =>
      val due = start + (i * step).toLong
      val wait = due - System.currentTimeMillis()
      if (wait > 0) Thread.sleep(wait)
      // Kubernetes reports whole seconds.
      val at = Instant.now().truncatedTo(ChronoUnit.SECONDS)
      admin.pods().inNamespace(namespace).resource(KyuubiPods.terminated(pod, i % 3 != 2, at)).updateStatus()
      LagTermination(pod.getMetadata.getName, at.toEpochMilli, due, System.currentTimeMillis(), retainMs)
    }
  }

  /**
   * Every pod DELETE request of this namespace the API server received (a real one: from its audit
   * log, the harness's own left out), by arrival.
   */
  def deletes: Seq[Recorded] = api.podDeletes(namespace).sortBy(_.atMillis)

  /** Pods with at least one DELETE the API server carried out (200). */
  def deletedPods(ds: Seq[Recorded] = deletes): Set[String] = LagWorkload.deletedPods(ds)

  /** The first DELETE (by arrival at the API server) of each pod that received one. */
  def firstDeletes(ds: Seq[Recorded] = deletes): Map[String, Recorded] =
    ds.groupBy(LagWorkload.podOf).map { case (pod, rs) => pod -> rs.minBy(_.atMillis) }

  /**
   * Waits until every pod was deleted or `untilMillis`; returns the pods deleted. Progress on
   * stderr every 10 s.
   */
  def awaitDeleted(label: String, untilMillis: Long): Set[String] = {
    var deleted = deletedPods()
    var nextNote = System.currentTimeMillis() + 10000
    while (deleted.size < pods && System.currentTimeMillis() < untilMillis) {
      Thread.sleep(250)
      deleted = deletedPods()
      if (System.currentTimeMillis() >= nextNote) {
        BenchOut.progress(s"lag $label: ${deleted.size}/$pods pods deleted")
        nextNote += 10000
      }
    }
    deleted
  }

  override def close(): Unit = admin.close()
}

private[bench] object LagWorkload {
  /** The pod's name of a DELETE of one pod. */
  def podOf(r: Recorded): String = r.pod.map(_._2).getOrElse(r.bare)

  /** Pods with at least one DELETE the API server carried out (200). */
  def deletedPods(ds: Seq[Recorded]): Set[String] = ds.iterator.filter(_.status == 200).map(podOf).toSet

  /** Runs `f` over `items` on `threads` threads, in order of submission; results in item order. */
  def parallel[A, B](items: Seq[A], threads: Int)(f: A => B): Seq[B] = {
    val pool = Executors.newFixedThreadPool(threads)
    try {
      val futures = items.map(i => pool.submit(new Callable[B] { override def call(): B = f(i) }))
      futures.map(_.get())
    } finally pool.shutdownNow()
  }

  /** p50, p99, max (and count) of `xs` under `prefix`; nulls when empty. */
  def summary(prefix: String, xs: Seq[Double]): Seq[(String, Any)] = Seq(
    s"${prefix}_p50_ms" -> BenchOut.percentile(xs, 50),
    s"${prefix}_p99_ms" -> BenchOut.percentile(xs, 99),
    s"${prefix}_max_ms" -> (if (xs.isEmpty) Double.NaN else xs.max))

  def seconds(fromNanos: Long): Double = (System.nanoTime() - fromNanos) / 1e9
}
