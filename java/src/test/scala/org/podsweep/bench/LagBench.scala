package org.podsweep.bench

/** Placeholder until this bench is written. */
object LagBench {
  def run(smoke: Boolean): Unit = throw new UnsupportedOperationException("LagBench is not written yet")
}
