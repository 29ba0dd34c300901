package org.podsweep.realapi

import java.nio.file.{Files, Path}

import scala.collection.JavaConverters._

import com.fasterxml.jackson.databind.node.{JsonNodeFactory, ObjectNode}
import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.demo.Phases
import org.podsweep.testkit.{HaBackend, PodsweepDaemon, RealKube}
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * The RBAC the operator docs give, applied to a real kube-apiserver as the docs write it: the
 * YAML is read from docs/daemon.md (section 4) and docs/kyuubi-integration.md (section 5, the
 * `kubectl apply` heredoc and the `kubectl create rolebinding` line) when the test runs, and only
 * the namespaces are changed (each test has its own). With the ServiceAccount's own token,
 * SelfSubjectAccessReviews and a SelfSubjectRulesReview show what the grant allows: pods `get`,
 * `list`, `watch`, `delete` in the Spark namespace and nothing else that matters; and two
 * podsweep daemons (self-watch mode, one ZooKeeper election) running with that token alone clean
 * the terminated driver pods, one DELETE per pod in the API server's audit log.
 */
class RbacSuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(120, Seconds), Span(200, Millis))

  private lazy val kube: RealKube = RealKube.sharedInstance
  private lazy val admin: KubernetesClient = kube.admin
  private lazy val logDir: Path = Files.createTempDirectory("podsweep-realapi-rbac-")
  import RealApi._

  private def needKube(): Unit = RealKube.missing.foreach(w => cancel(w))

  /** Verbs a pod request can carry. */
  private val podVerbs = Seq("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")

  /**
   * With `sa`'s token: exactly get/list/watch/delete on pods in `spark` and get on the ConfigMap
   * kube-root-ca.crt, and the denials below (any other ConfigMap among them); the rules review of
   * `spark` holds no other resource rule than those two (and the self reviews every
   * authenticated user has).
   */
  private def checkGrants(sa: KubernetesClient, spark: String, saNamespace: String, other: String): Unit = {
    val allowed = podVerbs.filter(v => can(sa, v, "pods", spark))
    assert(allowed.toSet == Set("get", "list", "watch", "delete"), s"pod verbs allowed in $spark: $allowed")
    val denied: Seq[(String, String, String, String, String)] = Seq(
      // (verb, group, resource, subresource, namespace)
      ("update", "", "pods", "status", spark),
      ("patch", "", "pods", "status", spark),
      ("create", "", "pods", "eviction", spark),
      ("get", "", "pods", "log", spark),
      ("create", "", "pods", "exec", spark),
      ("get", "", "secrets", "", spark),
      ("list", "", "secrets", "", spark),
      ("get", "", "configmaps", "", spark),
      ("create", "", "events", "", spark),
      ("get", "", "services", "", spark),
      ("list", "", "services", "", spark),
      ("watch", "", "services", "", spark),
      ("get", "coordination.k8s.io", "leases", "", spark),
      ("create", "coordination.k8s.io", "leases", "", spark),
      ("update", "coordination.k8s.io", "leases", "", spark),
      ("create", "coordination.k8s.io", "leases", "", saNamespace),
      ("list", "", "namespaces", "", ""),
      ("list", "", "nodes", "", ""),
      ("list", "", "pods", "", "")) ++
      Seq("get", "list", "watch", "delete").flatMap(v => Seq((v, "", "pods", "", other), (v, "", "pods", "", saNamespace)))
    val wrongly = denied.filter { case (v, g, r, sub, ns) => can(sa, v, r, ns, g, sub) }
    assert(wrongly.isEmpty, s"allowed although not needed: $wrongly")
    val selfReviews = Set("authorization.k8s.io", "authentication.k8s.io")
    val extra = rules(sa, spark).filterNot(r => r.getApiGroups.asScala.forall(selfReviews))
    assert(extra.size == 2, extra)
    val (podRules, identity) = extra.partition(_.getResources.asScala == Seq("pods"))
    val r = podRules.head
    assert(r.getApiGroups.asScala == Seq("") && r.getResources.asScala == Seq("pods") &&
      r.getVerbs.asScala.toSet == Set("get", "list", "watch", "delete") &&
      Option(r.getResourceNames).forall(_.isEmpty), r)
    // The namespace's identity: get on the one ConfigMap Kubernetes publishes, nothing more.
    val c = identity.head
    assert(c.getApiGroups.asScala == Seq("") && c.getResources.asScala == Seq("configmaps") &&
      c.getVerbs.asScala == Seq("get") && c.getResourceNames.asScala == Seq("kube-root-ca.crt"), c)
    info(s"allowed in $spark: pods ${allowed.mkString("/")}, get configmaps/kube-root-ca.crt; " +
      s"${denied.size} other requests denied")
  }

  test("docs/daemon.md section 4: its ServiceAccount, Role and RoleBinding grant pods get/list/watch/delete and get configmaps/kube-root-ca.crt in the Spark namespace, nothing else") {
    needKube()
    val ns = Map("kyuubi" -> "rbac-daemon-kyuubi", "spark" -> "rbac-daemon-spark")
    val other = "rbac-daemon-other"
    val blocks = fenced(section(readDoc("docs/daemon.md"), "## 4."), "yaml")
    assert(blocks.size == 1, s"docs/daemon.md section 4 has ${blocks.size} yaml blocks")
    val docs = yamlDocs(blocks.head)
    val rbac = docs.filter(d => Set("ServiceAccount", "Role", "RoleBinding")(kind(d)))
    assert(rbac.map(kind).sorted == Seq("Role", "RoleBinding", "ServiceAccount"), docs.map(kind))
    // The Deployment of the same block runs as the ServiceAccount the RoleBinding names.
    val deployment = docs.find(d => kind(d) == "Deployment").getOrElse(fail("no Deployment in section 4"))
    val binding = rbac.find(d => kind(d) == "RoleBinding").get
    val subject = binding.get("subjects").get(0)
    assert(deployment.at("/spec/template/spec/serviceAccountName").asText() == subject.get("name").asText())
    assert(deployment.at("/metadata/namespace").asText() == subject.get("namespace").asText())
    val sa = subject.get("name").asText()
    (ns.values.toSeq :+ other).foreach(kube.ensureNamespace)
    rbac.map(adaptNamespaces(_, ns)).foreach(apply(admin, _))
    val client = kube.serviceAccountClient(sa, ns("kyuubi"))
    try checkGrants(client, ns("spark"), ns("kyuubi"), other) finally client.close()
  }

  test("docs/kyuubi-integration.md section 5: the kubectl apply heredoc and create rolebinding grant pods get/list/watch/delete and get configmaps/kube-root-ca.crt, nothing else") {
    needKube()
    val ns = Map("spark-jobs" -> "rbac-kyuubi-spark", "kyuubi" -> "rbac-kyuubi-kyuubi")
    val other = "rbac-kyuubi-other"
    val blocks = fenced(section(readDoc("docs/kyuubi-integration.md"), "## 5."), "bash")
    assert(blocks.size == 1, s"docs/kyuubi-integration.md section 5 has ${blocks.size} bash blocks")
    val lines = blocks.head.split("\n").toVector
    val Apply = """kubectl -n (\S+) apply -f - <<'(\w+)'""".r
    val Bind = """kubectl -n (\S+) create rolebinding (\S+) --role=(\S+) --serviceaccount=([^:\s]+):(\S+)""".r
    val (applyNs, heredoc) = lines.zipWithIndex.collectFirst { case (Apply(n, end), i) =>
      val stop = lines.indexWhere(_ == end, i + 1)
      assert(stop > i, s"heredoc $end not closed")
      n -> lines.slice(i + 1, stop).mkString("\n")
    }.getOrElse(fail(s"no 'kubectl -n NS apply -f - <<'YAML'' line in section 5: ${blocks.head}"))
    val (bindNs, bindName, role, saNs, sa) = lines.collectFirst { case Bind(a, b, c, d, e) => (a, b, c, d, e) }
      .getOrElse(fail(s"no 'kubectl -n NS create rolebinding' line in section 5: ${blocks.head}"))
    val docs = yamlDocs(heredoc)
    assert(docs.map(kind) == Seq("Role"), docs)
    assert(docs.head.at("/metadata/name").asText() == role, s"the rolebinding names role $role")
    assert(applyNs == bindNs)
    // kubectl -n puts the Role in that namespace; `create rolebinding` makes this object.
    val roleDoc = docs.head.deepCopy()
    roleDoc.get("metadata").asInstanceOf[ObjectNode].put("namespace", applyNs)
    val f = JsonNodeFactory.instance
    val bindingDoc = f.objectNode()
    bindingDoc.put("apiVersion", "rbac.authorization.k8s.io/v1").put("kind", "RoleBinding")
    bindingDoc.putObject("metadata").put("name", bindName).put("namespace", bindNs)
    bindingDoc.putArray("subjects").addObject().put("kind", "ServiceAccount").put("name", sa).put("namespace", saNs)
    bindingDoc.putObject("roleRef").put("apiGroup", "rbac.authorization.k8s.io").put("kind", "Role").put("name", role)
    (ns.values.toSeq :+ other).foreach(kube.ensureNamespace)
    // The ServiceAccount is Kyuubi's own (its Helm chart's); the guide assumes it exists.
    val client = kube.serviceAccountClient(sa, ns(saNs))
    try {
      Seq(roleDoc, bindingDoc).map(adaptNamespaces(_, ns)).foreach(apply(admin, _))
      checkGrants(client, ns(applyNs), ns(saNs), other)
    } finally client.close()
  }

  test("two podsweep daemons with only docs/daemon.md's ServiceAccount clean every terminated driver pod, one DELETE per pod") {
    needKube()
    PodsweepDaemon.missing.foreach(w => cancel(w))
    val kyuubiNs = "rbac-daemon-kyuubi"
    val spark = "rbac-daemon-spark"
    // Section 4's objects, as the first test applies them (applied again: the tests stand alone).
    val docs = yamlDocs(fenced(section(readDoc("docs/daemon.md"), "## 4."), "yaml").head)
      .filter(d => Set("ServiceAccount", "Role", "RoleBinding")(kind(d)))
      .map(adaptNamespaces(_, Map("kyuubi" -> kyuubiNs, "spark" -> spark)))
    Seq(kyuubiNs, spark).foreach(kube.ensureNamespace)
    docs.foreach(apply(admin, _))
    val sa = docs.find(d => kind(d) == "ServiceAccount").get.at("/metadata/name").asText()
    val (_, tokenFile) = kube.serviceAccountToken(sa, kyuubiNs)
    val user = saUser(kyuubiNs, sa)
    val ha = HaBackend.start("zookeeper")
    val conf = Map(
      "kyuubi.kubernetes.master.address" -> kube.url,
      "kyuubi.kubernetes.authenticate.caCertFile" -> kube.caFile,
      "kyuubi.kubernetes.authenticate.oauthTokenFile" -> tokenFile.toString,
      "kyuubi.kubernetes.client.initialize.list" -> s":$spark",
      P + "kind" -> "NONE",
      P + "watch.kind" -> "ALL",
      "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "2000",
      "kyuubi.ha.namespace" -> "kyuubi-realapi-rbac") ++ ha.kyuubiConf
    val daemons = (1 to 2).map(i => new PodsweepDaemon(s"rbac-daemon-$i", conf, logDir))
    try {
      eventually(assert(daemons.count(_.isLeader(spark)) == 1, daemons.map(_.statusOf(spark))))
      val s = Phases.Spec(servers = 2, scopes = 1, pods = 10, retainMs = 2000, logDir = logDir)
      val (drivers, decoys) = Phases.createPods(kube, admin, Seq(spark), s)
      val startedAt = System.currentTimeMillis()
      val w = Phases.terminate(admin, drivers, decoys, s.retainMs)
      Phases.settleFleet(kube, admin, daemons, Seq(spark), s.podPrefix)(!w.drivers.exists(Phases.present(admin, Seq(spark))))
      val barrier = Phases.barrierName(s.podPrefix)
      val r = Phases.judge("rbac", "daemon", s, kube, admin, Seq(spark), w, 0, startedAt)
      assert(r.leaked == 0 && r.wrongful == 0 && r.decoysMissing == 0, r)
      val deletes = audited(kube).filter(a => a.verb == "delete" && a.namespace == spark && a.name != barrier)
      assert(deletes.forall(_.user == user), deletes.map(_.user).distinct)
      assert(deletes.map(_.name).sorted == w.drivers.map(_.name).sorted, deletes)
      assert(deletes.forall(_.code == 200), deletes)
      // Nothing the daemons asked for on pods was refused (list and watch included).
      val refused = audited(kube).filter(a => a.user == user && a.code == 403) ++
        kube.audit.filter(e => e.user == user && e.code == 403)
      assert(refused.isEmpty, refused)
      val statuses = daemons.map(_.status(spark))
      assert(statuses.map(outcomes).map(_("accepted")).sum == s.pods + 1, statuses) // and the barrier
      assert(statuses.forall(st => outcomes(st)("forbidden") == 0 && healthy(st).contains(true)), statuses)
      daemons.foreach(d => assert(d.problems.isEmpty, s"${d.name}: ${d.problems.take(3)}"))
      info(s"${deletes.size} DELETEs for ${s.pods} pods, all by $user, all 200; ${decoys.size} decoys kept")
    } finally {
      daemons.foreach(d => scala.util.Try(d.close()))
      ha.close()
    }
  }
}
