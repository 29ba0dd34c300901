package org.podsweep.demo

import java.util.concurrent.{ConcurrentHashMap, ConcurrentLinkedQueue}

import scala.collection.JavaConverters._
import scala.util.control.NonFatal

import org.podsweep.testkit.FleetServer

/** Which servers said `isLeader` for each scope at `atMillis` (usually one, none during a handoff). */
final case class LeaderSample(atMillis: Long, leading: Map[String, Seq[String]])

/**
 * Asks every server whether it leads every scope, every `periodMs`, on a daemon thread, until
 * closed. A server marked stopped (before its `close()`) is no longer asked; a call that throws
 * counts as "not leading".
 */
final class LeadershipSampler(servers: Seq[FleetServer], scopes: Seq[String], periodMs: Long) extends AutoCloseable {
  private val queue = new ConcurrentLinkedQueue[LeaderSample]()
  private val stopped = ConcurrentHashMap.newKeySet[String]()
  @volatile private var running = true

  private def leads(s: FleetServer, ns: String): Boolean =
    !stopped.contains(s.name) && (try s.isLeader(ns) catch { case NonFatal(_) => false })

  private val thread = new Thread(new Runnable {
    override def run(): Unit = {
      var next = System.currentTimeMillis()
      while (running) {
        val at = System.currentTimeMillis()
        queue.add(LeaderSample(at, scopes.map(ns => ns -> servers.filter(leads(_, ns)).map(_.name)).toMap))
        next += periodMs
        val pause = next - System.currentTimeMillis()
        if (pause > 0) try Thread.sleep(pause) catch { case _: InterruptedException => running = false }
        else next = System.currentTimeMillis()
      }
    }
  }, "leadership-sampler")
  thread.setDaemon(true)
  thread.start()

  /** `name` is about to be closed: from now on it leads nothing. */
  def markStopped(name: String): Unit = stopped.add(name)

  def samples: Seq[LeaderSample] = queue.asScala.toVector

  override def close(): Unit = {
    running = false
    thread.interrupt()
    thread.join(2000)
  }
}
