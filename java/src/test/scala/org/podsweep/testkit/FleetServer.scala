package org.podsweep.testkit

import org.podsweep.ScopeStatus

/**
 * One server of a podsweep fleet as the demo, the benches and the fleet suites see it: an
 * in-process [[LogicalServer]] or a patched Kyuubi in its own JVM ([[KyuubiServer]]).
 */
trait FleetServer extends AutoCloseable {
  def name: String

  /** Whether this server leads cleanup of the scope `(None, Some(namespace))`. */
  def isLeader(namespace: String): Boolean

  /** podsweep's status of that scope. */
  def status(namespace: String): ScopeStatus

  /** Stops the server the way an operator does (podsweep's close(): deletes nothing, hands over). */
  def stop(): Unit

  /** What went wrong inside the server that a correct run never shows (e.g. observe() throwing). */
  def problems: Seq[String]
}
