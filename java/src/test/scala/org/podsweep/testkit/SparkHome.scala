package org.podsweep.testkit

import java.io.File

/**
 * The SPARK_HOME scripts/spark lays out ($PODSWEEP_SPARK_HOME, else
 * `~/.cache/podsweep-tools/spark-<version>`): Spark's jars from the Maven registry and podsweep's own `bin/spark-submit` (Spark's `org.apache.spark.deploy.SparkSubmit`). Kyuubi finds
 * it through `kyuubi.engineEnv.SPARK_HOME`, as an operator's server does.
 *
 * # Caveats
 * Only spark-submit's client side runs here (no container runtime): the driver pod it creates is run
 * by KWOK on a simulated node.
 */
object SparkHome {
  val Version: String = "4.0.1"
  val Scala: String = "2.13"

  val dir: File = sys.env.get("PODSWEEP_SPARK_HOME").filter(_.nonEmpty).map(new File(_)).getOrElse {
    val tools = sys.env.get("PODSWEEP_TOOLS").filter(_.nonEmpty).map(new File(_))
      .getOrElse(new File(System.getProperty("user.home"), ".cache/podsweep-tools"))
    new File(tools, s"spark-$Version")
  }

  def sparkSubmit: File = new File(dir, "bin/spark-submit")

  /**
   * SparkPi's jar as a path inside Spark's image (`local://`, as Spark's docs submit it): spark-submit
   * in cluster mode does not open it, and the registry does not serve spark-examples.
   */
  def examplesResource: String = s"local:///opt/spark/examples/jars/spark-examples_$Scala-$Version.jar"

  /** Why this SPARK_HOME cannot be used, or None. */
  def missing: Option[String] =
    if (!sparkSubmit.canExecute) Some(s"no SPARK_HOME at $dir (scripts/spark)")
    else if (!new File(dir, s"jars/spark-core_$Scala-$Version.jar").isFile) Some(s"$dir has no spark-core jar (scripts/spark)")
    else None
}
