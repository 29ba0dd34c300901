package org.podsweep.testkit

import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicInteger

import scala.collection.JavaConverters._
import scala.util.Random

/** A failure the mock API server answers a pod DELETE with instead of deleting the pod. */
sealed abstract class DeleteFault(val outcome: String)
object DeleteFault {
  /** 403 Forbidden (Kubernetes Status body). */
  case object Forbidden extends DeleteFault("forbidden")
  /** 429 TooManyRequests with `Retry-After: 1`. */
  case object Throttled extends DeleteFault("throttled")
  /** 503 ServiceUnavailable. */
  case object Unavailable extends DeleteFault("server_error")
  /** The request is read, then the connection is closed without an answer. */
  case object Disconnect extends DeleteFault("transport")
  /** Any other refusal (401 Unauthorized, 400, 422, ...): podsweep's outcome class `other`. */
  case object Refused extends DeleteFault("other")

  val All: Seq[DeleteFault] = Seq(Forbidden, Throttled, Unavailable, Disconnect)
}

/**
 * Which pod DELETEs fail, and how: every DELETE during the first `forbiddenForMs` after arming is
 * answered 403; afterwards a seeded random share is answered 429, 503 or dropped, the rest pass
 * through to the CRUD store. Only DELETEs in namespaces accepted by `namespaces` are touched.
 */
final class DeleteFaults(
    throttledShare: Double = 0.12,
    unavailableShare: Double = 0.10,
    disconnectShare: Double = 0.10,
    forbiddenForMs: Long = 10000L,
    seed: Long = 42L,
    namespaces: String => Boolean = _ => true) {
  require(throttledShare + unavailableShare + disconnectShare < 1.0, "fault shares must leave room for success")
  private val armedAt = System.currentTimeMillis()
  private val random = new Random(seed)
  private val counts = new ConcurrentHashMap[DeleteFault, AtomicInteger]()

  def decide(namespace: String): Option[DeleteFault] = if (!namespaces(namespace)) None else {
    val fault =
      if (System.currentTimeMillis() - armedAt < forbiddenForMs) Some(DeleteFault.Forbidden)
      else {
        val r = synchronized(random.nextDouble())
        if (r < throttledShare) Some(DeleteFault.Throttled)
        else if (r < throttledShare + unavailableShare) Some(DeleteFault.Unavailable)
        else if (r < throttledShare + unavailableShare + disconnectShare) Some(DeleteFault.Disconnect)
        else None
      }
    fault.foreach(f => counts.computeIfAbsent(f, _ => new AtomicInteger()).incrementAndGet())
    fault
  }

  /** Injected faults so far, by outcome class name (`forbidden`, `throttled`, ...). */
  def injected: Map[String, Int] =
    DeleteFault.All.map(f => f.outcome -> Option(counts.get(f)).map(_.get).getOrElse(0)).toMap
}
