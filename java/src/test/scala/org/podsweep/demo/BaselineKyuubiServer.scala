package org.podsweep.demo

import java.util.concurrent.{ConcurrentHashMap, Executors, ScheduledExecutorService, ThreadFactory, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

import scala.collection.JavaConverters._
import scala.util.control.NonFatal

import com.google.common.cache.{Cache, CacheBuilder, RemovalListener, RemovalNotification}
import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.KubernetesClient
import io.fabric8.kubernetes.client.informers.{ResourceEventHandler, SharedIndexInformer}
import org.podsweep.PodEvent
import org.podsweep.testkit.{KyuubiPods, TestApi}

/**
 * Today's Kyuubi cleanup path, modelled from the reference notes (KubernetesApplicationOperation,
 * section 3), for comparison only:
 *
 *  - per server: an `appInfoStore` (tag -> pod info) and a Guava cache (tag -> terminal state) with
 *    expire-after-write = retain period and a removal listener;
 *  - a startup LIST that marks already-terminated engine pods;
 *  - informer: ADD updates the store; UPDATE updates it and marks terminal states; DELETE updates it
 *    and always marks (so an entry removed after this server's own DELETE is armed again);
 *  - mark = put into the cache only if absent;
 *  - a "pod-cleanup-trigger-thread" calling `cleanUp()` every check interval;
 *  - removal listener (any cause): remove the tag from the store; if it was there and the kind
 *    allows, delete the pod by name with no precondition; an empty result (404) logs WARN
 *    "Failed to delete pod";
 *  - stop(): stop informers, `invalidateAll()` (deletes everything still tracked), close.
 */
final class BaselineKyuubiServer(
    val name: String,
    newClient: String => KubernetesClient,
    retainMillis: Long,
    checkIntervalMillis: Long,
    kind: String,
    startOffsetMillis: Long) extends AutoCloseable {

  /**
   * On the fabric8 mock, with identity (bearer token) `name`. `startOffsetMillis` delays the first
   * `cleanUp()`: Kyuubi servers are started at different moments, so their check threads tick out
   * of step (with every server ticking at once, each one's DELETE would go out before any DELETE
   * event arrived, and every server would re-arm: 2N requests per pod instead of N+1).
   */
  def this(name: String, kube: TestApi, retainMillis: Long, checkIntervalMillis: Long, kind: String = "ALL",
      startOffsetMillis: Long = 0L) =
    this(name, (token: String) => kube.client(token), retainMillis, checkIntervalMillis, kind, startOffsetMillis)

  private final case class AppInfo(namespace: String, podName: String, state: String)

  private val client: KubernetesClient = newClient(name)
  private val appInfoStore = new ConcurrentHashMap[String, AppInfo]()
  private val informers = new ConcurrentHashMap[String, SharedIndexInformer[Pod]]()

  val deletesIssued = new AtomicInteger()
  val deletedLines = new AtomicInteger()
  /** WARN "Failed to delete pod" lines (an empty delete result, i.e. a 404) plus ERROR lines. */
  val failedLines = new AtomicInteger()
  /** `namespace/pod` -> wall-clock millis at which this server issued its first DELETE of that pod. */
  val firstDeleteIssuedAt = new ConcurrentHashMap[String, java.lang.Long]()
  /** `namespace/pod` -> wall-clock millis at which this server first saw the pod terminated (its clock start). */
  val terminatedSeenAt = new ConcurrentHashMap[String, java.lang.Long]()

  private def seenTerminated(namespace: String, pod: Pod): Unit =
    terminatedSeenAt.putIfAbsent(s"$namespace/${pod.getMetadata.getName}", System.currentTimeMillis())

  private val cache: Cache[String, String] = CacheBuilder.newBuilder()
    .expireAfterWrite(retainMillis, TimeUnit.MILLISECONDS)
    .removalListener(new RemovalListener[String, String] {
      override def onRemoval(n: RemovalNotification[String, String]): Unit = onCacheRemoval(n.getKey, n.getValue)
    })
    .build[String, String]()

  private val trigger: ScheduledExecutorService = Executors.newSingleThreadScheduledExecutor(new ThreadFactory {
    override def newThread(r: Runnable): Thread = {
      val t = new Thread(r, s"$name-pod-cleanup-trigger-thread")
      t.setDaemon(true)
      t
    }
  })
  trigger.scheduleWithFixedDelay(new Runnable {
    override def run(): Unit = try cache.cleanUp() catch { case NonFatal(_) => failedLines.incrementAndGet() }
  }, checkIntervalMillis + startOffsetMillis, checkIntervalMillis, TimeUnit.MILLISECONDS)

  private def isSparkEnginePod(pod: Pod): Boolean =
    KyuubiPods.tag(pod) != null && KyuubiPods.hasAppSelector(pod)

  private def update(namespace: String, pod: Pod, event: PodEvent): String = {
    val state = KyuubiPods.appState(pod, event)
    appInfoStore.put(KyuubiPods.tag(pod), AppInfo(namespace, pod.getMetadata.getName, state))
    state
  }

  private def markTerminated(tag: String, state: String): Unit = synchronized {
    if (cache.getIfPresent(tag) == null) cache.put(tag, state)
  }

  private def onCacheRemoval(tag: String, state: String): Unit = {
    val info = appInfoStore.remove(tag)
    if (info != null) {
      val delete = kind match {
        case "ALL" => true
        case "COMPLETED" => !Set("FAILED", "KILLED", "NOT_FOUND")(state)
        case _ => false
      }
      if (delete) deletePod(info)
    }
  }

  private def deletePod(info: AppInfo): Unit = {
    deletesIssued.incrementAndGet()
    firstDeleteIssuedAt.putIfAbsent(s"${info.namespace}/${info.podName}", System.currentTimeMillis())
    try {
      val result = client.pods().inNamespace(info.namespace).withName(info.podName).delete()
      if (result != null && !result.isEmpty) deletedLines.incrementAndGet()
      else failedLines.incrementAndGet() // WARN "Failed to delete pod ..."
    } catch {
      case NonFatal(_) => failedLines.incrementAndGet() // ERROR "Failed to delete pod ..."
    }
  }

  /** Creates the namespace's client state: startup LIST, then the informer. */
  def watch(namespace: String): Unit = {
    client.pods().inNamespace(namespace).withLabel(KyuubiPods.TagLabel).list().getItems.asScala
      .filter(isSparkEnginePod)
      .foreach { pod =>
        val state = KyuubiPods.appState(pod, PodEvent.UPDATE)
        if (KyuubiPods.Terminated(state)) {
          seenTerminated(namespace, pod)
          appInfoStore.putIfAbsent(KyuubiPods.tag(pod), AppInfo(namespace, pod.getMetadata.getName, state))
          markTerminated(KyuubiPods.tag(pod), state)
        }
      }
    val handler = new ResourceEventHandler[Pod] {
      override def onAdd(pod: Pod): Unit =
        if (isSparkEnginePod(pod)) update(namespace, pod, PodEvent.ADD)
      override def onUpdate(oldPod: Pod, pod: Pod): Unit =
        if (isSparkEnginePod(pod)) {
          val state = update(namespace, pod, PodEvent.UPDATE)
          if (KyuubiPods.Terminated(state)) {
            seenTerminated(namespace, pod)
            markTerminated(KyuubiPods.tag(pod), state)
          }
        }
      override def onDelete(pod: Pod, finalStateUnknown: Boolean): Unit =
        if (isSparkEnginePod(pod)) {
          val state = update(namespace, pod, PodEvent.DELETE)
          markTerminated(KyuubiPods.tag(pod), state)
        }
    }
    informers.put(namespace, client.pods().inNamespace(namespace).withLabel(KyuubiPods.TagLabel).inform(handler, 0L))
  }

  /** Entries waiting in the cleanup cache (expired ones count until the next cleanUp). */
  def pending: Long = cache.size()

  /** Pods in the `appInfoStore` (every Spark engine pod the informers reported, running or not). */
  def tracked: Int = appInfoStore.size()

  override def close(): Unit = {
    informers.values().asScala.foreach(i => scala.util.Try(i.stop()))
    cache.invalidateAll()
    trigger.shutdownNow()
    client.close()
  }

  /**
   * Stops without Kyuubi's stop-time `invalidateAll()` (which would DELETE every tracked pod at
   * once): for benches that have measured what they need and only want the threads gone.
   */
  def discard(): Unit = {
    informers.values().asScala.foreach(i => scala.util.Try(i.stop()))
    trigger.shutdownNow()
    client.close()
  }
}
