package org.podsweep.bench

import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicInteger

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.KubernetesClient
import io.fabric8.kubernetes.client.informers.{ResourceEventHandler, SharedIndexInformer}
import org.podsweep.{PodEvent, PodSweeper, ScopeStatus}
import org.podsweep.testkit.KyuubiPods

/**
 * A Kyuubi server running podsweep for the lag bench, wired as `testkit.LogicalServer` is (Pod
 * informer on the `kyuubi-unique-tag` label, no resync, Kyuubi's facts -> `observe`) on a client
 * of the bench's API server (a real kube-apiserver or `testkit.PodsApi`), counting events instead
 * of keeping them.
 */
private[bench] final class LagPodsweepServer(val name: String, client: KubernetesClient, conf: Map[String, String])
    extends AutoCloseable {
  val sweeper: PodSweeper = PodSweeper.create(conf.asJava, s"$name:10009")
  private val informers = new ConcurrentHashMap[String, SharedIndexInformer[Pod]]()
  /** Events passed to `observe`. */
  val observed = new AtomicInteger()
  /** Exceptions `observe` threw (a correct run has none). */
  val errors = new AtomicInteger()

  def watch(namespace: String): Unit = {
    val handler = new ResourceEventHandler[Pod] {
      override def onAdd(pod: Pod): Unit = feed(namespace, PodEvent.ADD, pod)
      override def onUpdate(oldPod: Pod, newPod: Pod): Unit = feed(namespace, PodEvent.UPDATE, newPod)
      override def onDelete(pod: Pod, finalStateUnknown: Boolean): Unit = feed(namespace, PodEvent.DELETE, pod)
    }
    informers.put(namespace, client.pods().inNamespace(namespace).withLabel(KyuubiPods.TagLabel).inform(handler, 0L))
  }

  private def feed(namespace: String, event: PodEvent, pod: Pod): Unit = {
    val meta = pod.getMetadata
    try {
      sweeper.observe(null, namespace, event, KyuubiPods.tag(pod), meta.getName, meta.getUid,
        KyuubiPods.appState(pod, event), KyuubiPods.hasAppSelector(pod), KyuubiPods.terminatedAtMillis(pod),
        KyuubiPods.deletionTimestampSet(pod))
      observed.incrementAndGet()
    } catch {
      case _: Throwable => errors.incrementAndGet()
    }
  }

  def isLeader(namespace: String): Boolean = sweeper.isLeader(null, namespace)

  def status(namespace: String): ScopeStatus = ScopeStatus.parse(sweeper.scopeStatus(null, namespace))

  override def close(): Unit = {
    informers.values().asScala.foreach(i => scala.util.Try(i.stop()))
    try sweeper.close() finally client.close()
  }
}
