package org.podsweep.testkit

import java.time.Instant
import java.util.UUID

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.{ContainerStateTerminatedBuilder, ContainerStatusBuilder, Pod, PodBuilder, PodConditionBuilder}
import org.podsweep.PodEvent
import org.podsweep.fabric8.KyuubiPodObserver

/** Kyuubi's view of a Spark driver pod, as KubernetesApplicationOperation computes it. */
object KyuubiPods {
  val TagLabel = "kyuubi-unique-tag"
  val AppSelectorLabel = "spark-app-selector"
  val DriverContainer = "spark-kubernetes-driver"

  val Terminated: Set[String] = Set("FINISHED", "FAILED", "KILLED", "NOT_FOUND")

  /** Kyuubi's state with state source POD (podsweep's adapter, checked against Kyuubi's own class). */
  def appState(pod: Pod, event: PodEvent): String =
    KyuubiPodObserver.applicationState(pod, KyuubiPodObserver.StateSource.POD, null, event)

  /** podsweep's termination time with state source POD, 0 when unknown. */
  def terminatedAtMillis(pod: Pod): Long =
    KyuubiPodObserver.terminatedAtMillis(pod, KyuubiPodObserver.StateSource.POD, null)

  def hasAppSelector(pod: Pod): Boolean = labels(pod).contains(AppSelectorLabel)

  def tag(pod: Pod): String = labels(pod).getOrElse(TagLabel, null)

  def deletionTimestampSet(pod: Pod): Boolean = pod.getMetadata.getDeletionTimestamp != null

  private def labels(pod: Pod): Map[String, String] =
    Option(pod.getMetadata.getLabels).map(_.asScala.toMap).getOrElse(Map.empty)


  /**
   * A Spark driver pod as Kyuubi submits it, in phase Running (or Pending); with `nodeName` it is
   * scheduled (a real API server then deletes it gracefully while it runs), with `sidecar` it has a
   * second container that keeps running after the driver's ends.
   */
  def driver(
      name: String,
      tag: String = UUID.randomUUID().toString,
      appSelector: Boolean = true,
      phase: String = "Running",
      finalizers: Seq[String] = Nil,
      nodeName: Option[String] = None,
      sidecar: Boolean = false): Pod = {
    val labels = Map(TagLabel -> tag, "spark-role" -> "driver") ++
      (if (appSelector) Map(AppSelectorLabel -> appId(tag)) else Map.empty)
    val b = new PodBuilder()
      .withNewMetadata().withName(name).withLabels(labels.asJava).withFinalizers(finalizers.asJava).endMetadata()
      .withNewSpec().addNewContainer().withName(DriverContainer).withImage("spark:test")
      // The ports Spark's driver pod declares (Kyuubi reads "spark-ui" for the app URL).
      .addNewPort().withName("driver-rpc-port").withContainerPort(7078).withProtocol("TCP").endPort()
      .addNewPort().withName("blockmanager").withContainerPort(7079).withProtocol("TCP").endPort()
      .addNewPort().withName("spark-ui").withContainerPort(4040).withProtocol("TCP").endPort()
      .endContainer()
      .withNodeName(nodeName.orNull).endSpec()
      .withNewStatus().withPhase(phase).endStatus()
    if (sidecar) b.editSpec().addNewContainer().withName(SidecarContainer).withImage("proxy:test").endContainer().endSpec()
    b.build()
  }

  val SidecarContainer = "sidecar"

  /** A Spark application id as Spark makes one (`spark-` and 32 hex digits), derived from `tag`. */
  def appId(tag: String): String =
    "spark-" + UUID.nameUUIDFromBytes(tag.getBytes(java.nio.charset.StandardCharsets.UTF_8)).toString.replace("-", "")

  /**
   * The same pod whose driver container ended at `at` (exit 0 or 1) while its sidecar still runs:
   * phase Running, so Kyuubi's `POD` state source says RUNNING and its `CONTAINER` source
   * FINISHED or FAILED.
   */
  def driverEnded(pod: Pod, succeeded: Boolean, at: Instant): Pod = {
    val term = new ContainerStateTerminatedBuilder()
      .withExitCode(if (succeeded) 0 else 1)
      .withReason(if (succeeded) "Completed" else "Error")
      .withFinishedAt(at.toString)
      .withStartedAt(at.minusSeconds(30).toString)
      .build()
    new PodBuilder(pod)
      .editOrNewStatus()
      .withPhase("Running")
      .withContainerStatuses(
        new ContainerStatusBuilder()
          .withName(DriverContainer).withReady(false).withRestartCount(0).withImage("spark:test")
          .withNewState().withTerminated(term).endState().build(),
        new ContainerStatusBuilder()
          .withName(SidecarContainer).withReady(true).withRestartCount(0).withImage("proxy:test")
          .withNewState().withNewRunning().withStartedAt(at.minusSeconds(30).toString).endRunning().endState().build())
      .endStatus()
      .build()
  }

  /** The same pod, terminated at `at`: phase Succeeded (exit 0) or Failed (exit 1). */
  def terminated(pod: Pod, succeeded: Boolean, at: Instant): Pod = {
    val term = new ContainerStateTerminatedBuilder()
      .withExitCode(if (succeeded) 0 else 1)
      .withReason(if (succeeded) "Completed" else "Error")
      .withFinishedAt(at.toString)
      .withStartedAt(at.minusSeconds(30).toString)
      .build()
    new PodBuilder(pod)
      .editOrNewStatus()
      .withPhase(if (succeeded) "Succeeded" else "Failed")
      .withContainerStatuses(new ContainerStatusBuilder()
        .withName(DriverContainer).withReady(false).withRestartCount(0).withImage("spark:test")
        .withNewState().withTerminated(term).endState()
        .build())
      .withConditions(new PodConditionBuilder()
        .withType("Ready").withStatus("False").withLastTransitionTime(at.toString).build())
      .endStatus()
      .build()
  }
}
