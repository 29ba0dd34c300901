package org.podsweep.bench

/** Placeholder until this bench is written. */
object ObserveBench {
  def run(smoke: Boolean): Unit = throw new UnsupportedOperationException("ObserveBench is not written yet")
}
