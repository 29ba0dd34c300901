package org.podsweep.fabric8

import java.time.Instant

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.{ContainerStatus, ContainerStatusBuilder, Pod, PodBuilder}
import org.podsweep.{LocalSweeper, PodEvent, ScopeStatus}
import org.podsweep.fabric8.KyuubiPodObserver.{Observation, StateSource}
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

class KyuubiPodObserverSuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(20, Seconds), Span(50, Millis))

  private val T1 = "2026-03-04T05:06:07Z"
  private val T2 = "2026-03-04T05:10:00.250+00:00"
  private val T3 = "2026-03-04T06:00:00Z"
  private def ms(t: String): Long = java.time.OffsetDateTime.parse(t).toInstant.toEpochMilli

  private def terminated(name: String, finishedAt: String): ContainerStatus =
    new ContainerStatusBuilder().withName(name)
      .withNewState().withNewTerminated().withExitCode(0).withFinishedAt(finishedAt).endTerminated().endState()
      .build()

  private def running(name: String): ContainerStatus =
    new ContainerStatusBuilder().withName(name)
      .withNewState().withNewRunning().withStartedAt(T1).endRunning().endState().build()

  private def driver(phase: String, containers: ContainerStatus*): PodBuilder =
    new PodBuilder()
      .withNewMetadata().withName("spark-driver-1").withUid("uid-1").withNamespace("spark")
      .addToLabels("kyuubi-unique-tag", "tag-1").addToLabels("spark-app-selector", "spark-123").endMetadata()
      .withNewStatus().withPhase(phase).withContainerStatuses(containers.asJava).endStatus()

  private def obs(pod: Pod, source: StateSource = StateSource.POD, container: String = null,
      event: PodEvent = PodEvent.UPDATE): Observation =
    KyuubiPodObserver.observation(pod, "ctx", "spark", event, "FINISHED", source, container)

  test("labels, name, UID, deletionTimestamp and the driver container's finishedAt reach the observation") {
    val pod = driver("Succeeded", terminated("spark-kubernetes-driver", T1)).build()
    assert(obs(pod) == new Observation("ctx", "spark", PodEvent.UPDATE, "tag-1", "spark-driver-1", "uid-1", "FINISHED",
      true, ms(T1), false))
    val deleting = new PodBuilder(pod).editMetadata().withDeletionTimestamp(T3).endMetadata().build()
    assert(obs(deleting, event = PodEvent.DELETE).deletionTimestampSet)
    val noSelector = new PodBuilder(pod).editMetadata().removeFromLabels("spark-app-selector").endMetadata().build()
    assert(!obs(noSelector).hasAppSelector && obs(noSelector).uniqueTag == "tag-1")
  }

  test("podsweep's annotations are read for a terminal state only") {
    val pod = new PodBuilder(driver("Succeeded", terminated("spark-kubernetes-driver", T1)).build())
      .editMetadata().addToAnnotations(KyuubiPodObserver.RETAIN_ANNOTATION, "PT6H")
      .addToAnnotations(KyuubiPodObserver.KEEP_ANNOTATION, "true").endMetadata().build()
    val done = obs(pod)
    assert(done.retainAnnotation == "PT6H" && done.keepAnnotation == "true", done)
    val running = KyuubiPodObserver.observation(pod, "ctx", "spark", PodEvent.UPDATE, "RUNNING", StateSource.POD, null)
    assert(running.retainAnnotation == null && running.keepAnnotation == null, running)
    assert(obs(driver("Succeeded").build()).retainAnnotation == null)
  }

  test("CONTAINER source takes the configured container; POD source the latest finishedAt of all") {
    // A sidecar finished later than the driver.
    val pod = driver("Running", terminated("spark-kubernetes-driver", T1), terminated("sidecar", T2)).build()
    assert(obs(pod, StateSource.CONTAINER).terminatedAtMillis == ms(T1))
    assert(obs(pod, StateSource.POD).terminatedAtMillis == ms(T2))
    // A custom container name (kyuubi.kubernetes.application.state.container).
    val custom = driver("Running", terminated("main", T2), terminated("spark-kubernetes-driver", T3)).build()
    assert(obs(custom, StateSource.CONTAINER, "main").terminatedAtMillis == ms(T2))
    // CONTAINER source, but the named container has not terminated: the latest of the others.
    val sidecarOnly = driver("Running", running("spark-kubernetes-driver"), terminated("sidecar", T2)).build()
    assert(obs(sidecarOnly, StateSource.CONTAINER).terminatedAtMillis == ms(T2))
    // lastState.terminated never counts: it is an earlier run of a restarted container.
    val restarted = new PodBuilder(driver("Running").build()).editStatus().withContainerStatuses(
      new ContainerStatusBuilder().withName("spark-kubernetes-driver").withNewState().withNewRunning().endRunning()
        .endState().withNewLastState().withNewTerminated().withFinishedAt(T1).endTerminated().endLastState().build())
      .endStatus().build()
    assert(obs(restarted).terminatedAtMillis == 0)
    assert(obs(restarted, StateSource.CONTAINER).terminatedAtMillis == 0)
    // The state container is matched ignoring case, as Kyuubi matches it.
    val upper = driver("Running", terminated("Spark-Kubernetes-Driver", T1), terminated("sidecar", T2)).build()
    assert(obs(upper, StateSource.CONTAINER).terminatedAtMillis == ms(T1))
  }

  test("no container finishedAt: the Ready condition's lastTransitionTime, only in a terminal phase") {
    def withReady(phase: String) = driver(phase, running("spark-kubernetes-driver")).editStatus()
      .addNewCondition().withType("PodScheduled").withStatus("True").withLastTransitionTime(T1).endCondition()
      .addNewCondition().withType("Ready").withStatus("False").withLastTransitionTime(T3).endCondition()
      .endStatus().build()
    assert(obs(withReady("Failed")).terminatedAtMillis == ms(T3))
    assert(obs(withReady("Succeeded"), StateSource.CONTAINER).terminatedAtMillis == ms(T3))
    assert(obs(withReady("Running")).terminatedAtMillis == 0)
    assert(obs(withReady("Pending")).terminatedAtMillis == 0)
  }

  test("missing fields never throw") {
    assert(obs(new Pod()) == new Observation("ctx", "spark", PodEvent.UPDATE, null, null, null, "FINISHED", false, 0, false))
    assert(!obs(new Pod()).complete())
    assert(!obs(null).complete())
    val bare = new PodBuilder().withNewMetadata().withName("p").withUid("u").endMetadata().build()
    assert(obs(bare).complete() && obs(bare).uniqueTag == null && !obs(bare).hasAppSelector)
    val emptyStatus = new PodBuilder(bare).withNewStatus().endStatus().build()
    assert(obs(emptyStatus, StateSource.CONTAINER).terminatedAtMillis == 0)
    val nullStates = new PodBuilder(bare).withNewStatus().withPhase("Failed").endStatus().build()
    nullStates.getStatus.setContainerStatuses(java.util.Arrays.asList(new ContainerStatus(), null))
    nullStates.getStatus.setConditions(java.util.Arrays.asList(null, new io.fabric8.kubernetes.api.model.PodCondition()))
    assert(obs(nullStates, StateSource.CONTAINER).terminatedAtMillis == 0)
    val badTime = driver("Failed", terminated("spark-kubernetes-driver", "yesterday")).build()
    assert(obs(badTime).terminatedAtMillis == 0)
  }

  test("RFC 3339 parsing") {
    assert(KyuubiPodObserver.parseRfc3339("2026-03-04T05:06:07Z") == Instant.parse("2026-03-04T05:06:07Z").toEpochMilli)
    assert(KyuubiPodObserver.parseRfc3339("2026-03-04t05:06:07.123456789z") ==
      Instant.parse("2026-03-04T05:06:07.123Z").toEpochMilli)
    assert(KyuubiPodObserver.parseRfc3339("2026-03-04 07:06:07+02:00") == Instant.parse("2026-03-04T05:06:07Z").toEpochMilli)
    Seq(null, "", "2026-03-04", "2026-03-04T05:06:07", "nonsense", "1969-12-31T23:59:59Z")
      .foreach(t => assert(KyuubiPodObserver.parseRfc3339(t) == 0, String.valueOf(t)))
  }

  test("configuration: state source and container from Kyuubi keys, with Kyuubi's defaults") {
    val s = LocalSweeper.create("observer:conf")
    try {
      val d = KyuubiPodObserver.fromKyuubiConf(s, Map.empty[String, String].asJava)
      assert(d.stateSource == StateSource.POD && d.stateContainer == "spark-kubernetes-driver")
      val c = KyuubiPodObserver.fromKyuubiConf(s, Map(
        "kyuubi.kubernetes.application.state.source" -> "container",
        "kyuubi.kubernetes.application.state.container" -> "main").asJava)
      assert(c.stateSource == StateSource.CONTAINER && c.stateContainer == "main")
      intercept[IllegalArgumentException](StateSource.parse("NODE"))
    } finally s.close()
  }

  test("observe() passes the observation to a real PodSweeper; incomplete pods are not passed") {
    val s = LocalSweeper.create("observer:1")
    try {
      val observer = new KyuubiPodObserver(s, StateSource.CONTAINER, null)
      val now = Instant.now().toString
      val pod = driver("Succeeded", terminated("spark-kubernetes-driver", now)).build()
      val o = observer.observe(pod, null, "observed", PodEvent.UPDATE, "FINISHED")
      assert(o.complete() && o.terminatedAtMillis == Instant.parse(now).toEpochMilli)
      eventually(assert(ScopeStatus.parse(s.scopeStatus(null, "observed")).tracked == 1))
      // No UID: not passed on (the native side requires one), no exception.
      val noUid = new PodBuilder(pod).editMetadata().withUid(null).endMetadata().build()
      assert(!observer.observe(noUid, null, "observed", PodEvent.UPDATE, "FINISHED").complete())
      // A pod without spark-app-selector is not a Spark driver: observed but not tracked.
      val other = new PodBuilder(pod).editMetadata().withUid("uid-2").removeFromLabels("spark-app-selector")
        .endMetadata().build()
      observer.observe(other, null, "observed", PodEvent.UPDATE, "FINISHED")
      // A running driver handed over after it is a barrier: the scope's task takes events in the
      // order they were handed over, so once it has taken the barrier (observed, nothing queued)
      // it has taken everything before it. The pod without spark-app-selector never reached it.
      val barrier = new PodBuilder(driver("Running", running("spark-kubernetes-driver")).build())
        .editMetadata().withName("spark-driver-3").withUid("uid-3").endMetadata().build()
      observer.observe(barrier, null, "observed", PodEvent.UPDATE, "RUNNING")
      eventually {
        val st = ScopeStatus.parse(s.scopeStatus(null, "observed"))
        assert(st.number("observed") >= 2 && st.number("queued") == 0, st)
      }
      val st = ScopeStatus.parse(s.scopeStatus(null, "observed"))
      assert(st.tracked == 1 && st.number("observed") == 2, st)
      intercept[IllegalArgumentException](observer.observe(pod, null, "observed", PodEvent.UPDATE, "DONE"))
    } finally s.close()
  }
}
