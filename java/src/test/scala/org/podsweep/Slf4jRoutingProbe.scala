package org.podsweep

import scala.collection.JavaConverters._

import ch.qos.logback.classic.{Level, LoggerContext}
import ch.qos.logback.classic.spi.ILoggingEvent
import ch.qos.logback.core.read.ListAppender
import org.slf4j.LoggerFactory

/**
 * Run by Slf4jRoutingSuite in a JVM whose SLF4J provider is logback (the suite's own JVM uses
 * slf4j-simple). Prints `key=value` lines the suite checks.
 */
object Slf4jRoutingProbe {
  def main(args: Array[String]): Unit = {
    val ctx = LoggerFactory.getILoggerFactory.asInstanceOf[LoggerContext]
    println(s"factory=${ctx.getClass.getName}")
    def logger(name: String) = ctx.getLogger(name)
    logger(org.slf4j.Logger.ROOT_LOGGER_NAME).setLevel(Level.WARN)
    val appender = new ListAppender[ILoggingEvent]
    appender.setContext(ctx)
    appender.start()
    logger("org.podsweep.native").addAppender(appender)
    logger("org.podsweep.native").setLevel(Level.INFO)

    // levelOf follows the configured level of the mapped logger.
    logger("org.podsweep.native.deleter").setLevel(Level.OFF)
    println(s"deleter-off=${NativeLog.levelOf("podsweep::deleter")}")
    NativeLog.log(NativeLog.ERROR, "podsweep::deleter", "suppressed by OFF")
    logger("org.podsweep.native.deleter").setLevel(Level.DEBUG)
    println(s"deleter-debug=${NativeLog.levelOf("podsweep::deleter")}")
    logger("org.podsweep.native.deleter").setLevel(Level.TRACE)
    println(s"deleter-trace=${NativeLog.levelOf("podsweep::deleter")}")
    logger("org.podsweep.native.deleter").setLevel(Level.ERROR)
    println(s"deleter-error=${NativeLog.levelOf("podsweep::deleter")}")
    logger("org.podsweep.native.deleter").setLevel(null) // inherits INFO from org.podsweep.native
    println(s"deleter-inherited=${NativeLog.levelOf("podsweep::deleter")}")
    println(s"election-zookeeper-inherited=${NativeLog.levelOf("podsweep::election::zookeeper")}")

    // A real native record: with the sweeper logger at DEBUG before the library starts logging,
    // scheduling a terminated pod logs "Scheduled <pod> ..." at DEBUG from podsweep::sweeper.
    logger("org.podsweep.native.sweeper").setLevel(Level.DEBUG)
    val s = LocalSweeper.create("slf4j-probe:1")
    try {
      LocalSweeper.finished(s, null, "logs", "probe-pod")
      val deadline = System.nanoTime() + 20000000000L
      // AppenderBase.doAppend holds the appender's lock while it appends (the native log thread).
      def scheduled = appender.synchronized(appender.list.asScala.toList)
        .find(e => e.getFormattedMessage.startsWith("Scheduled probe-pod"))
      while (scheduled.isEmpty && System.nanoTime() < deadline) Thread.sleep(50)
      scheduled.foreach(e => println(s"native-record=${e.getLoggerName}|${e.getLevel}|${e.getFormattedMessage}"))
    } finally s.close()

    NativeLog.log(NativeLog.WARN, "podsweep::sweeper", "direct warn")
    // The library's own threads may still log (a scope task ending after close).
    appender.synchronized(appender.list.asScala.toList).foreach { e =>
      println(s"record=${e.getLoggerName}|${e.getLevel}|${e.getFormattedMessage}")
    }
    println("probe-ok")
  }
}
