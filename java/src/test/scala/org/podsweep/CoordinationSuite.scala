package org.podsweep

import java.time.Instant

import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.testkit.{KubeAndHa, KyuubiPods, LogicalServer}
import org.scalatest.concurrent.Eventually
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.SpanSugar._

/** The coordination scenarios with leaders elected through ZooKeeper (Curator TestingServer). */
class CoordinationZooKeeperSuite extends CoordinationSuite("zookeeper")

/** The same scenarios with leaders elected through etcd (the system's etcd, lease TTL 2 s). */
class CoordinationEtcdSuite extends CoordinationSuite("etcd")

/**
 * The ZooKeeper scenarios on [[org.podsweep.testkit.PodsApi]], which deletes as a real API server
 * does (a Terminating pod answers a repeated DELETE with 200; finalizers hold a pod), instead of
 * the fabric8 CRUD mock (chaos scenario `graceful`).
 */
class CoordinationOnPodsApiSuite extends CoordinationSuite("zookeeper", "pods-api")

/**
 * Several logical Kyuubi servers, each with its informer and its own PodSweeper, against one API
 * server (`api`: the fabric8 mock or PodsApi) and one HA service (`backend`: zookeeper or etcd):
 * who deletes, how often, and after which events.
 */
abstract class CoordinationSuite(backend: String, api: String = "mock") extends AnyFunSuite with KubeAndHa with Eventually {
  override def haBackendName: String = backend
  override def apiName: String = api

  implicit override val patienceConfig: PatienceConfig = PatienceConfig(60.seconds, 100.millis)

  private lazy val admin: KubernetesClient = kube.client("test-admin")

  private def create(ns: String, pod: Pod): Pod = admin.pods().inNamespace(ns).resource(pod).create()

  private def terminate(ns: String, pod: Pod, at: Instant = Instant.now(), succeeded: Boolean = true): Pod =
    admin.pods().inNamespace(ns).resource(KyuubiPods.terminated(pod, succeeded, at)).updateStatus()

  private def exists(ns: String, name: String): Boolean = kube.pod(admin, ns, name).isDefined

  private def leaderOf(ns: String, servers: Seq[LogicalServer]): LogicalServer = {
    val leaders = eventually {
      val l = servers.filter(_.isLeader(ns))
      assert(l.size == 1, s"leaders of $ns: $l")
      l
    }
    leaders.head
  }

  private def noObserveErrors(servers: Seq[LogicalServer]): Unit =
    servers.foreach(s => assert(s.errors.isEmpty, s"$s: observe threw ${s.errors}"))

  test("(a) two servers on one scope: only the elected leader sends DELETEs, exactly one per pod") {
    val ns = unique("a")
    withServers(unique("ha-a"), Seq("server-a", "server-b")) { servers =>
      val pods = (1 to 5).map(i => create(ns, KyuubiPods.driver(s"driver-$i")))
      servers.foreach(_.watch(ns))
      val leader = leaderOf(ns, servers)
      val follower = servers.filterNot(_ eq leader).head

      pods.zipWithIndex.foreach { case (p, i) => terminate(ns, p, succeeded = i % 2 == 0) }
      eventually(pods.foreach(p => assert(!exists(ns, p.getMetadata.getName))))
      // A sentinel terminated after all of them: once it is gone, every earlier deadline has passed.
      val sentinel = create(ns, KyuubiPods.driver("sentinel"))
      terminate(ns, sentinel)
      eventually(assert(!exists(ns, "sentinel")))

      (pods :+ sentinel).map(_.getMetadata.getName).foreach { name =>
        assert(kube.deletesOf(ns, name) == Map(Some(leader.token) -> 1), s"DELETEs of $name")
      }
      assert(kube.podDeletes(ns).count(_.bearer.contains(follower.token)) == 0)
      assert(leader.isLeader(ns) && !follower.isLeader(ns))
      noObserveErrors(servers)
    }
  }

  test("(b) different scopes can have different leaders, and each deletes only its own scope") {
    val ns1 = unique("b1")
    val ns2 = unique("b2")
    withServers(unique("ha-b"), Seq("server-a", "server-b")) { case Seq(a, b) =>
      val pods1 = (1 to 3).map(i => create(ns1, KyuubiPods.driver(s"one-$i")))
      val pods2 = (1 to 3).map(i => create(ns2, KyuubiPods.driver(s"two-$i")))
      // A enters scope 1 first and B scope 2 first; the first candidate of a scope leads it.
      a.watch(ns1)
      eventually(assert(a.isLeader(ns1)))
      b.watch(ns2)
      eventually(assert(b.isLeader(ns2)))
      a.watch(ns2)
      b.watch(ns1)
      eventually {
        assert(b.status(ns1).leadership != null && a.status(ns2).leadership != null)
      }
      assert(a.isLeader(ns1) && !b.isLeader(ns1))
      assert(b.isLeader(ns2) && !a.isLeader(ns2))

      pods1.foreach(p => terminate(ns1, p))
      pods2.foreach(p => terminate(ns2, p))
      eventually {
        (pods1 ++ pods2).foreach(p => assert(!exists(p.getMetadata.getNamespace, p.getMetadata.getName)))
      }
      pods1.foreach(p => assert(kube.deletesOf(ns1, p.getMetadata.getName) == Map(Some(a.token) -> 1)))
      pods2.foreach(p => assert(kube.deletesOf(ns2, p.getMetadata.getName) == Map(Some(b.token) -> 1)))
      noObserveErrors(Seq(a, b))
    }
  }

  test("(c) after the leader closes, the follower takes over and deletes a due pod it observed") {
    val ns = unique("c")
    withServers(unique("ha-c"), Seq("server-a", "server-b")) { case Seq(a, b) =>
      create(ns, KyuubiPods.driver("running"))
      a.watch(ns)
      eventually(assert(a.isLeader(ns)))
      b.watch(ns)
      eventually(assert(b.status(ns).leadership != null))
      assert(!b.isLeader(ns))

      // The leader goes blind, then a pod that terminated long ago appears: only B knows it, it is
      // overdue, and B, following, holds it.
      a.mute()
      val orphan = create(ns, KyuubiPods.terminated(KyuubiPods.driver("orphan"), true, Instant.now().minusSeconds(3600)))
      eventually(assert(b.sawTerminated(ns, "orphan")))
      eventually(assert(b.status(ns).tracked >= 1, b.status(ns)))
      assert(!b.isLeader(ns) && exists(ns, "orphan"))
      assert(kube.deletesOf(ns, "orphan").isEmpty)

      val closedAt = System.nanoTime()
      a.close()
      eventually(assert(b.isLeader(ns)))
      eventually(assert(!exists(ns, "orphan")))
      val takeoverSeconds = (System.nanoTime() - closedAt) / 1e9
      assert(takeoverSeconds < 30, "sanity bound on takeover + delete")
      assert(kube.deletesOf(ns, orphan.getMetadata.getName) == Map(Some(b.token) -> 1))
      assert(kube.pod(admin, ns, "running").isDefined, "a running driver is never deleted")
      noObserveErrors(Seq(a, b))
    }
  }

  test("(d) a pod deleted before its deadline, or carrying a deletionTimestamp, is never DELETEd by podsweep") {
    val ns = unique("d")
    withServers(unique("ha-d"), Seq("server-a", "server-b"), retain = "PT4S") { servers =>
      val gone = create(ns, KyuubiPods.driver("gone"))
      val held = create(ns, KyuubiPods.driver("held", finalizers = Seq("podsweep.test/hold")))
      val sentinel = create(ns, KyuubiPods.driver("sentinel"))
      servers.foreach(_.watch(ns))
      leaderOf(ns, servers)

      // Both terminate; "gone" is deleted by someone else before its deadline (DELETE event);
      // "held" is deleted too but its finalizer keeps it, with a deletionTimestamp (UPDATE event).
      terminate(ns, gone)
      terminate(ns, held)
      servers.foreach(s => eventually(assert(s.sawTerminated(ns, "gone") && s.sawTerminated(ns, "held"))))
      admin.pods().inNamespace(ns).withName("gone").delete()
      admin.pods().inNamespace(ns).withName("held").delete()
      servers.foreach { s =>
        eventually {
          assert(s.observed.toArray.exists { case o: testkit.Observed => o.pod == "gone" && o.event == PodEvent.DELETE })
          assert(s.observed.toArray.exists { case o: testkit.Observed => o.pod == "held" && o.deleting })
        }
      }
      // A pod terminated later than both: once the leader has deleted it, their deadlines are past.
      terminate(ns, sentinel)
      eventually(assert(!exists(ns, "sentinel")))

      assert(kube.deletesOf(ns, "gone") == Map(Some("test-admin") -> 1))
      assert(kube.deletesOf(ns, "held") == Map(Some("test-admin") -> 1))
      assert(kube.pod(admin, ns, "held").exists(KyuubiPods.deletionTimestampSet), "the finalizer still holds it")
      assert(kube.deletesOf(ns, "sentinel").values.sum == 1)
      noObserveErrors(servers)
    }
  }
}
