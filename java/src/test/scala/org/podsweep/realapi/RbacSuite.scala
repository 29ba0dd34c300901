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
 * The RBAC the integration guide gives, applied to a real kube-apiserver as the page writes it:
 * the YAML is read from docs/kyuubi-integration.md (section 5, the `kubectl apply` heredoc and the
 * `kubectl create rolebinding` line) when the test runs, and only the namespaces are changed.
 * With the ServiceAccount's own token, SelfSubjectAccessReviews and a SelfSubjectRulesReview show
 * what the grant allows: pods `get`, `list`, `watch`, `delete` and `get` on
 * `configmaps/kube-root-ca.crt` in the Spark namespace, and nothing else that matters. The
 * daemon's RBAC is its chart's since 0.2.0 (docs/daemon.md section 4 installs the chart):
 * `scripts/chart test` renders it, runs that page's blocks on a real kube-apiserver and counts
 * one DELETE per pod.
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

}
