package org.podsweep.realapi

import java.nio.file.{Files, Path}

import scala.util.Try

import io.fabric8.kubernetes.api.model.rbac.{ClusterRoleBuilder, PolicyRuleBuilder, RoleBindingBuilder}
import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.demo.Phases
import org.podsweep.testkit.{HaBackend, KyuubiHome, KyuubiPods, KyuubiServer, RealKube}
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * A cleanup leader whose ServiceAccount may read pods but not delete them, on a real
 * kube-apiserver: two patched Kyuubi 1.12.0 servers on one namespace elect through ZooKeeper; the
 * first one runs with a ServiceAccount of its own namespace (`kyuubi-readonly`) bound to pods
 * get/list/watch only (and Kyuubi's Service informer's services get/list/watch) and is made the
 * leader before the second starts. Its DELETEs meet RBAC's real 403; with `ha.stepDownAfter` and
 * `forbidden.retryInterval` shortened it steps down, reports why, and the other server deletes
 * every pod, once.
 */
class ForbiddenLeaderSuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(120, Seconds), Span(200, Millis))

  private lazy val kube: RealKube = RealKube.sharedInstance
  private lazy val admin: KubernetesClient = kube.admin
  private lazy val logDir: Path = Files.createTempDirectory("podsweep-realapi-forbidden-")
  import RealApi._

  private def needPatched(): Unit = {
    RealKube.missing.foreach(w => cancel(w))
    KyuubiHome.patchedMissing.foreach(w => cancel(w))
  }

  test("a leader without 'delete pods' gets real 403s, steps down and says why; the other server deletes every pod once (200), decoys kept") {
    needPatched()
    val ns = "forbidden-spark"
    val roNs = "kyuubi-readonly"
    val roSa = "readonly-server"
    val role = "podsweep-realapi-readonly"
    Seq(ns, roNs).foreach(kube.ensureNamespace)
    admin.rbac().clusterRoles().resource(new ClusterRoleBuilder().withNewMetadata().withName(role).endMetadata()
      .withRules(
        new PolicyRuleBuilder().withApiGroups("").withResources("pods").withVerbs("get", "list", "watch").build(),
        new PolicyRuleBuilder().withApiGroups("").withResources("services").withVerbs("get", "list", "watch").build(),
        // The namespace's identity, as every server of the fleet reads it (else it would elect
        // under its URL, apart from the others).
        new PolicyRuleBuilder().withApiGroups("").withResources("configmaps").withResourceNames("kube-root-ca.crt")
          .withVerbs("get").build())
      .build()).createOr(_.update())
    admin.rbac().roleBindings().inNamespace(ns).resource(new RoleBindingBuilder()
      .withNewMetadata().withName(role).withNamespace(ns).endMetadata()
      .withNewRoleRef("rbac.authorization.k8s.io", "ClusterRole", role)
      .addNewSubject().withKind("ServiceAccount").withName(roSa).withNamespace(roNs).endSubject()
      .build()).createOr(_.update())
    val (_, roToken) = kube.serviceAccountToken(roSa, roNs)
    val roUser = saUser(roNs, roSa)
    val roClient = kube.serviceAccountClient(roSa, roNs)
    try {
      assert(can(roClient, "list", "pods", ns) && can(roClient, "watch", "pods", ns) && !can(roClient, "delete", "pods", ns))
    } finally roClient.close()

    val retainMs = 3000L
    val ha = HaBackend.start("zookeeper")
    val common = ha.kyuubiConf ++ Map(
      "kyuubi.ha.namespace" -> "kyuubi-realapi-forbidden",
      P + "ha.stepDownAfter" -> "PT10S",
      P + "forbidden.retryInterval" -> "PT2S",
      P + "failures.summaryInterval" -> "PT5S")
    val servers = scala.collection.mutable.ArrayBuffer.empty[KyuubiServer]
    try {
      val readonly = new KyuubiServer("readonly-1", KyuubiHome.Patched,
        KyuubiServer.conf("readonly-1", kube, Seq(ns), retainMs) ++ common +
          ("kyuubi.kubernetes.authenticate.oauthTokenFile" -> roToken.toString), logDir)
      servers += readonly
      // Its first driver pod makes the scope campaign: the only candidate leads.
      kube.createPod(admin, ns, KyuubiPods.driver("elector"))
      eventually(assert(readonly.isLeader(ns), readonly.statusOf(ns)))
      val deleter = new KyuubiServer("deleter-2", KyuubiHome.Patched,
        KyuubiServer.conf("deleter-2", kube, Seq(ns), retainMs) ++ common, logDir)
      servers += deleter
      eventually(assert(deleter.statusOf(ns).exists(_.leadership == "FOLLOWING"), deleter.statusOf(ns)))
      val deleterUser = saUser(RealKube.ServersNamespace, RealKube.saName("deleter-2"))

      val s = Phases.Spec(servers = 2, scopes = 1, pods = 6, retainMs = retainMs, logDir = logDir)
      val (drivers, decoys) = Phases.createPods(kube, admin, Seq(ns), s)
      val startedAt = System.currentTimeMillis()
      val w = Phases.terminate(admin, drivers, decoys, s.retainMs)
      // The read-only leader is refused, steps down after 10 s; the other one then deletes.
      Phases.settleFleet(kube, admin, servers.toSeq, Seq(ns), s.podPrefix)(!w.drivers.exists(Phases.present(admin, Seq(ns))))
      val barrier = Phases.barrierName(s.podPrefix)
      val r = Phases.judge("forbidden", "patched", s, kube, admin, Seq(ns), w, 0, startedAt)
      val deletes = audited(kube).filter(a => a.verb == "delete" && a.namespace == ns && a.name != barrier)
      val driverNames = w.drivers.map(_.name).toSet
      info(s"DELETEs: ${deletes.groupBy(a => (a.user, a.code)).map { case (k, v) => s"$k x ${v.size}" }.mkString(", ")}")
      assert(r.leaked == 0 && r.wrongful == 0 && r.decoysMissing == 0, r)

      // The read-only leader's DELETEs: every one a real 403, every driver pod tried.
      val refused = deletes.filter(_.user == roUser)
      assert(refused.nonEmpty && refused.forall(_.code == 403), refused)
      assert(refused.map(_.name).toSet == driverNames, refused.map(_.name).distinct)
      assert(refused.forall(_.message.contains("cannot delete resource \"pods\"")), refused.head.message)
      // Each driver pod deleted exactly once, with 200, by the server that took over; nothing else.
      val others = deletes.filterNot(_.user == roUser)
      assert(others.forall(a => a.user == deleterUser && a.code == 200), others)
      assert(others.map(_.name).sorted == driverNames.toSeq.sorted, others.map(_.name))
      assert(!deletes.exists(a => w.decoys.exists(_.name == a.name)))

      // Who leads now, and what the read-only server says about itself.
      assert(deleter.isLeader(ns) && !readonly.isLeader(ns))
      val st = readonly.status(ns)
      info(s"read-only server: healthy=${healthy(st)}, health_reason=${st.string("health_reason")}, " +
        s"leadership=${st.leadership} (${st.string("leadership_reason")}), outcomes=${outcomes(st)}")
      assert(healthy(st).contains(false), st)
      val why = Option(st.string("health_reason")).getOrElse("")
      assert(why.contains("completed no DELETE") && why.contains("forbidden") && why.contains("403"), why)
      assert(outcomes(st)("forbidden") == refused.size && outcomes(st)("accepted") == 0, st)
      assert(outcomes(deleter.status(ns))("accepted") == driverNames.size + 1, deleter.status(ns)) // and the barrier
      assert(healthy(deleter.status(ns)).contains(true), deleter.status(ns))
      assert(readonly.logLines("Stepping down as cleanup leader").nonEmpty, "no step-down ERROR")
      assert(readonly.logLines("DELETE is forbidden for").nonEmpty, "no forbidden summary ERROR")
      assert(deleter.log.count(_.contains(" ERROR ")) == 0, deleter.log.filter(_.contains(" ERROR ")).take(3))
      assert(kube.pod(admin, ns, "elector").isDefined)
    } finally {
      servers.foreach(x => Try(x.close()))
      ha.close()
    }
  }
}
