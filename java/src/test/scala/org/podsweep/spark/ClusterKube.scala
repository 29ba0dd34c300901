package org.podsweep.spark

import org.podsweep.testkit.RealKube

/** The full control plane the Spark runs take (scripts/kube up --cluster), shared by the JVM. */
object ClusterKube {
  lazy val instance: RealKube = RealKube.sharedInstance
  def missing: Option[String] = RealKube.missing
}
