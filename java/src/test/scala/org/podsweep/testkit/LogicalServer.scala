package org.podsweep.testkit

import java.util.concurrent.{ConcurrentHashMap, ConcurrentLinkedQueue}

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.KubernetesClient
import io.fabric8.kubernetes.client.informers.{ResourceEventHandler, SharedIndexInformer}
import org.podsweep.{PodEvent, PodSweeper, ScopeStatus}
import org.podsweep.fabric8.KyuubiPodObserver

/** What a logical server passed to `PodSweeper.observe`. */
final case class Observed(
    namespace: String,
    event: PodEvent,
    pod: String,
    uid: String,
    state: String,
    terminatedAt: Long,
    deleting: Boolean)

/**
 * A "logical Kyuubi server": its own fabric8 client (identity `informer-<name>`), one Pod informer
 * per namespace restricted to the `kyuubi-unique-tag` label with no resync, handlers that compute
 * Kyuubi's facts and call `observe`, and its own PodSweeper (own ZooKeeper session, own kube
 * identity: the conf's oauthToken).
 */
final class LogicalServer(val name: String, kube: TestApi, conf: Map[String, String]) extends FleetServer {
  val sweeper: PodSweeper = PodSweeper.create(conf.asJava, s"$name:10009")
  private val client: KubernetesClient = kube.client(s"informer-$name")
  private val informers = new ConcurrentHashMap[String, SharedIndexInformer[Pod]]()
  val observed = new ConcurrentLinkedQueue[Observed]()
  /** Exceptions `observe` threw on informer threads (a correct run has none). */
  val errors = new ConcurrentLinkedQueue[Throwable]()

  /** The token this server's PodSweeper sends DELETEs with. */
  def token: String = conf("kyuubi.kubernetes.authenticate.oauthToken")

  /** Starts the informer for a namespace (scope `(None, Some(namespace))`); returns after its first list. */
  def watch(namespace: String): Unit = {
    val handler = new ResourceEventHandler[Pod] {
      override def onAdd(pod: Pod): Unit = feed(namespace, PodEvent.ADD, pod)
      override def onUpdate(oldPod: Pod, newPod: Pod): Unit = feed(namespace, PodEvent.UPDATE, newPod)
      override def onDelete(pod: Pod, finalStateUnknown: Boolean): Unit = feed(namespace, PodEvent.DELETE, pod)
    }
    val informer = client.pods().inNamespace(namespace).withLabel(KyuubiPods.TagLabel).inform(handler, 0L)
    informers.put(namespace, informer)
  }

  @volatile private var muted = false

  /**
   * From now on the informers' events are dropped, as if this server missed them. (Stopping an
   * informer instead can stall the fabric8 mock: a watch closing while the CRUD dispatcher sends
   * events made the next POST time out.)
   */
  def mute(): Unit = muted = true

  def stopInformers(): Unit = {
    informers.values().asScala.foreach(i => scala.util.Try(i.stop()))
    informers.clear()
  }

  /** Kyuubi's state mapping and podsweep's fabric8 adapter, with this server's state source. */
  private val observer = KyuubiPodObserver.fromKyuubiConf(sweeper, conf.asJava)

  def feed(namespace: String, event: PodEvent, pod: Pod): Unit = if (!muted) {
    try {
      val o = observer.observe(pod, null, namespace, event)
      observed.add(Observed(namespace, event, o.podName, o.podUid, o.appState, o.terminatedAtMillis, o.deletionTimestampSet))
    } catch {
      case t: Throwable => errors.add(t)
    }
  }

  override def isLeader(namespace: String): Boolean = sweeper.isLeader(null, namespace)

  override def status(namespace: String): ScopeStatus = status(namespace, null)

  def status(namespace: String, context: String): ScopeStatus =
    ScopeStatus.parse(sweeper.scopeStatus(context, namespace))

  override def stop(): Unit = close()

  override def problems: Seq[String] = errors.asScala.toVector.map(e => s"observe threw: $e")

  def sawTerminated(namespace: String, pod: String): Boolean =
    observed.asScala.exists(o => o.namespace == namespace && o.pod == pod && KyuubiPods.Terminated(o.state))

  override def close(): Unit = {
    stopInformers()
    try sweeper.close() finally client.close()
  }

  override def toString: String = name
}
