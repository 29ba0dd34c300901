package org.podsweep.spark

import java.nio.file.Files

import org.podsweep.testkit.RealKube

/**
 * The full control plane the Spark runs take (`scripts/kube up --cluster`: kube-apiserver,
 * kube-controller-manager, kube-scheduler, KWOK with its nodes), one per JVM, stopped when the JVM
 * exits (by PID, and by the script's watchdog if the JVM dies first).
 */
object ClusterKube {
  lazy val instance: RealKube =
    new RealKube(Files.createTempDirectory("podsweep-cluster-"), shared = true, cluster = true)

  /** Why the full control plane cannot start here, or None. */
  def missing: Option[String] = RealKube.missing.orElse {
    val home = new java.io.File(sys.env.getOrElse("PODSWEEP_TOOLS", System.getProperty("user.home") + "/.cache/podsweep-tools"))
    val cm = Option(home.listFiles()).toSeq.flatten.exists(d => d.getName.startsWith("kube-") && new java.io.File(d, "kube-controller-manager").canExecute)
    if (cm) None else Some(s"no kube-controller-manager under $home (scripts/kube build --cluster)")
  }
}
