package org.podsweep.testkit

/** Process ids of the servers the tests and benches start (their CPU is read from /proc). */
object ProcessIds {
  /** `Process.pid()`, called by reflection: the test code is compiled for Java 8's API. */
  def of(p: Process): Long = classOf[Process].getMethod("pid").invoke(p).asInstanceOf[java.lang.Long].longValue
}
