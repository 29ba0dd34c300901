package org.podsweep.bench

/** Placeholder until this bench is written. */
object FailoverBench {
  def run(smoke: Boolean): Unit = throw new UnsupportedOperationException("FailoverBench is not written yet")
}
