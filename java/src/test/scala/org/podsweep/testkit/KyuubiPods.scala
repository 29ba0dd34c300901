package org.podsweep.testkit

import java.time.Instant
import java.util.UUID

import scala.collection.JavaConverters._
import scala.util.Try

import io.fabric8.kubernetes.api.model.{ContainerStateTerminatedBuilder, ContainerStatusBuilder, Pod, PodBuilder, PodConditionBuilder}
import org.podsweep.PodEvent

/** Kyuubi's view of a Spark driver pod, as KubernetesApplicationOperation computes it. */
object KyuubiPods {
  val TagLabel = "kyuubi-unique-tag"
  val AppSelectorLabel = "spark-app-selector"
  val DriverContainer = "spark-kubernetes-driver"

  val Terminated: Set[String] = Set("FINISHED", "FAILED", "KILLED", "NOT_FOUND")

  /** Kyuubi's pod-phase mapping (state source POD); DELETE forces FAILED unless already terminal. */
  def appState(pod: Pod, event: PodEvent): String = {
    val phase = Option(pod.getStatus).flatMap(s => Option(s.getPhase)).getOrElse("")
    val state = phase match {
      case "Pending" => "PENDING"
      case "Running" => "RUNNING"
      case "Succeeded" => "FINISHED"
      case "Failed" | "Error" => "FAILED"
      case "OOMKilled" => "KILLED"
      case _ => "UNKNOWN"
    }
    if (event == PodEvent.DELETE && !Terminated(state)) "FAILED" else state
  }

  /** Latest container `terminated.finishedAt`, else the Ready condition's transition time, else 0. */
  def terminatedAtMillis(pod: Pod): Long = {
    val status = Option(pod.getStatus)
    val finished = status.toSeq
      .flatMap(s => Option(s.getContainerStatuses).map(_.asScala).getOrElse(Nil))
      .flatMap(cs => Option(cs.getState).flatMap(st => Option(st.getTerminated)).flatMap(t => Option(t.getFinishedAt)))
      .flatMap(parse)
    if (finished.nonEmpty) finished.max
    else status
      .flatMap(s => Option(s.getConditions).map(_.asScala).getOrElse(Nil).find(_.getType == "Ready"))
      .flatMap(c => Option(c.getLastTransitionTime)).flatMap(parse)
      .getOrElse(0L)
  }

  def hasAppSelector(pod: Pod): Boolean = labels(pod).contains(AppSelectorLabel)

  def tag(pod: Pod): String = labels(pod).getOrElse(TagLabel, null)

  def deletionTimestampSet(pod: Pod): Boolean = pod.getMetadata.getDeletionTimestamp != null

  private def labels(pod: Pod): Map[String, String] =
    Option(pod.getMetadata.getLabels).map(_.asScala.toMap).getOrElse(Map.empty)

  private def parse(s: String): Option[Long] = Try(Instant.parse(s).toEpochMilli).toOption

  /** A Spark driver pod as Kyuubi submits it, in phase Running (or Pending). */
  def driver(
      name: String,
      tag: String = UUID.randomUUID().toString,
      appSelector: Boolean = true,
      phase: String = "Running",
      finalizers: Seq[String] = Nil): Pod = {
    val labels = Map(TagLabel -> tag, "spark-role" -> "driver") ++
      (if (appSelector) Map(AppSelectorLabel -> s"spark-${tag.take(8)}") else Map.empty)
    new PodBuilder()
      .withNewMetadata().withName(name).withLabels(labels.asJava).withFinalizers(finalizers.asJava).endMetadata()
      .withNewSpec().addNewContainer().withName(DriverContainer).withImage("spark:test").endContainer().endSpec()
      .withNewStatus().withPhase(phase).endStatus()
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
