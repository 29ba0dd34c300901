package org.podsweep.testkit

import java.util.concurrent.{ConcurrentHashMap, Executors, ScheduledExecutorService, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

import scala.collection.JavaConverters._
import scala.util.Try

import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.api.model.rbac.{ClusterRoleBindingBuilder, ClusterRoleBuilder, PolicyRuleBuilder}
import io.fabric8.kubernetes.client.informers.ResourceEventHandler

/**
 * What a kubelet does when a pod bound to its node is deleted gracefully, for a control plane that
 * has no kubelet: once the pod carries a `deletionTimestamp` and no finalizer, its containers are
 * "stopped" (after `stopDelayMs`, much shorter than a real grace period) and the pod is deleted with
 * grace period 0 and its UID as precondition, as the kubelet's status manager does. It acts as its
 * own ServiceAccount ([[NodeSim.Identity]]), so its DELETEs are told apart in the audit log.
 *
 * With `podGc`, it also does what kube-controller-manager's pod garbage collector does for a pod
 * that is Terminating but bound to no node (no kubelet will ever finish it): it deletes it with
 * grace period 0. A real API server leaves such a pod behind when a DELETE's first write (the
 * `deletionTimestamp`) is stored and its second (the removal) fails, e.g. with a 504 after the
 * server was frozen; podsweep, seeing the `deletionTimestamp`, rightly counts the pod as being
 * deleted. The real collector looks every 20 s; this one after `stopDelayMs`.
 */
final class NodeSim(kube: RealKube, stopDelayMs: Long = 300L, podGc: Boolean = false) extends AutoCloseable {
  import NodeSim._

  private val client = {
    kube.ensureNamespace(Namespace)
    Try(kube.admin.rbac().clusterRoles().resource(new ClusterRoleBuilder()
      .withNewMetadata().withName(Identity).endMetadata()
      .withRules(
        new PolicyRuleBuilder().withApiGroups("").withResources("pods").withVerbs("get", "list", "watch", "delete").build(),
        new PolicyRuleBuilder().withApiGroups("").withResources("pods/status").withVerbs("update", "patch").build())
      .build()).create())
    Try(kube.admin.rbac().clusterRoleBindings().resource(new ClusterRoleBindingBuilder()
      .withNewMetadata().withName(Identity).endMetadata()
      .withNewRoleRef("rbac.authorization.k8s.io", "ClusterRole", Identity)
      .addNewSubject().withKind("ServiceAccount").withName(Identity).withNamespace(Namespace).endSubject()
      .build()).create())
    kube.serviceAccountClient(Identity, Namespace)
  }

  private val timer: ScheduledExecutorService = Executors.newSingleThreadScheduledExecutor { r =>
    val t = new Thread(r, "node-sim")
    t.setDaemon(true)
    t
  }
  private val pending = ConcurrentHashMap.newKeySet[String]()
  /** Graceful deletions this stand-in finished as a kubelet (pods bound to a node). */
  val finished = new AtomicInteger()
  /** Terminating pods bound to no node that it deleted as the pod garbage collector (`podGc`). */
  val collected = new AtomicInteger()

  private def finish(pod: Pod): Unit = {
    val m = pod.getMetadata
    val uid = m.getUid
    val bound = pod.getSpec.getNodeName != null
    if (m.getDeletionTimestamp != null && (bound || podGc) &&
      Option(m.getFinalizers).forall(_.isEmpty) && pending.add(uid)) {
      timer.schedule(new Runnable {
        override def run(): Unit = try {
          val (code, _) = kube.deletePod(client, m.getNamespace, m.getName, Some(uid), Some(0L))
          if (code == 200) (if (bound) finished else collected).incrementAndGet()
        } catch {
          case _: Exception => ()
        } finally pending.remove(uid)
      }, stopDelayMs, TimeUnit.MILLISECONDS)
    }
  }

  // An informer (list, then watch from the list's version), as a kubelet watches its pods.
  private val informer = client.pods().inAnyNamespace().inform(new ResourceEventHandler[Pod] {
    override def onAdd(pod: Pod): Unit = finish(pod)
    override def onUpdate(old: Pod, pod: Pod): Unit = finish(pod)
    override def onDelete(pod: Pod, deletedFinalStateUnknown: Boolean): Unit = ()
  })

  override def close(): Unit = {
    Try(informer.close())
    timer.shutdownNow()
    Try(client.close())
  }
}

object NodeSim {
  /** The stand-in's ServiceAccount (in [[Namespace]]). */
  val Identity = "node-sim"
  val Namespace = "kube-system"
}
