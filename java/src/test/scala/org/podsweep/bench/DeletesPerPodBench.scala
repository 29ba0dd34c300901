package org.podsweep.bench

/** Placeholder until this bench is written. */
object DeletesPerPodBench {
  def run(smoke: Boolean): Unit = throw new UnsupportedOperationException("DeletesPerPodBench is not written yet")
}
