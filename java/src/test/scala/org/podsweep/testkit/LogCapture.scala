package org.podsweep.testkit

import java.util.concurrent.ConcurrentLinkedQueue

import scala.collection.JavaConverters._

import org.podsweep.NativeLog

final case class LogRecord(level: Int, target: String, message: String) {
  def levelName: String = level match {
    case 1 => "ERROR"
    case 2 => "WARN"
    case 3 => "INFO"
    case 4 => "DEBUG"
    case _ => "TRACE"
  }
  def warnOrError: Boolean = level <= NativeLog.WARN
  override def toString: String = s"$levelName [$target] $message"
}

/** Collects native log records while open. */
final class LogCapture extends NativeLog.Listener with AutoCloseable {
  private val queue = new ConcurrentLinkedQueue[LogRecord]()
  NativeLog.addListener(this)

  override def onLog(level: Int, target: String, message: String): Unit =
    queue.add(LogRecord(level, target, message))

  def records: Seq[LogRecord] = queue.asScala.toVector

  def mentioning(text: String): Seq[LogRecord] = records.filter(_.message.contains(text))

  def clear(): Unit = queue.clear()

  override def close(): Unit = NativeLog.removeListener(this)
}
