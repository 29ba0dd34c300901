package org.podsweep.alerts

import java.time.Instant
import java.util.concurrent.{Executors, ScheduledExecutorService, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

import scala.collection.JavaConverters._
import scala.util.{Failure, Try}

import io.fabric8.kubernetes.api.model.PodBuilder
import io.fabric8.kubernetes.api.model.rbac.{ClusterRoleBuilder, PolicyRule, PolicyRuleBuilder, RoleBindingBuilder}
import io.fabric8.kubernetes.client.KubernetesClientException
import org.scalatest.Assertions._
import org.scalatest.concurrent.Eventually._
import org.scalatest.time.{Millis, Seconds, Span}
import org.podsweep.ScopeStatus
import org.podsweep.realapi.RealApi
import org.podsweep.testkit.{KyuubiPods, RealKube}

/**
 * The states the alert rules are about, made on a real kube-apiserver the way an operator or a
 * cluster makes them: RBAC per namespace (everything podsweep needs, no `delete`, no `watch`, no
 * `list` at all), an admission policy that refuses every DELETE of one identity, terminated driver
 * pods to delete, and a steady trickle of them in a healthy namespace.
 */
object AlertStates {
  /** Where the test's ServiceAccounts live (no cluster-wide grant: only the RoleBindings below). */
  val AccountsNamespace = "alerts-servers"

  /** What an identity may do in a namespace. */
  sealed abstract class Grant(val role: String, val podVerbs: Seq[String])
  case object Full extends Grant("podsweep-alerts-full", Seq("get", "list", "watch", "delete"))
  case object NoDelete extends Grant("podsweep-alerts-nodelete", Seq("get", "list", "watch"))
  case object NoWatch extends Grant("podsweep-alerts-nowatch", Seq("get", "list", "delete"))
  case object NoList extends Grant("podsweep-alerts-nolist", Nil)
  val Grants: Seq[Grant] = Seq(Full, NoDelete, NoWatch, NoList)

  private def rules(g: Grant): Seq[PolicyRule] =
    (if (g.podVerbs.isEmpty) Nil
     else Seq(new PolicyRuleBuilder().withApiGroups("").withResources("pods").withVerbs(g.podVerbs: _*).build())) ++ Seq(
      // Kyuubi's own Service informer, and the namespace's identity podsweep elects by.
      new PolicyRuleBuilder().withApiGroups("").withResources("services").withVerbs("get", "list", "watch").build(),
      new PolicyRuleBuilder().withApiGroups("").withResources("configmaps").withResourceNames("kube-root-ca.crt")
        .withVerbs("get").build())

  /** The ClusterRoles of [[Grants]] (created or updated). */
  def roles(kube: RealKube): Unit = Grants.foreach { g =>
    kube.admin.rbac().clusterRoles().resource(new ClusterRoleBuilder().withNewMetadata().withName(g.role).endMetadata()
      .withRules(rules(g): _*).build()).createOr(_.update())
  }

  /** Grants `g` in `ns` to ServiceAccount `sa` of [[AccountsNamespace]]. */
  def grant(kube: RealKube, ns: String, sa: String, g: Grant): Unit = {
    kube.ensureNamespace(ns)
    kube.admin.rbac().roleBindings().inNamespace(ns).resource(new RoleBindingBuilder()
      .withNewMetadata().withName(s"$sa-${g.role}").withNamespace(ns).endMetadata()
      .withNewRoleRef("rbac.authorization.k8s.io", "ClusterRole", g.role)
      .addNewSubject().withKind("ServiceAccount").withName(sa).withNamespace(AccountsNamespace).endSubject()
      .build()).createOr(_.update())
  }

  /**
   * A ValidatingAdmissionPolicy (and its binding to `ns`) that refuses every pod DELETE of `sa`
   * with 422 Invalid: RBAC allows the DELETE, the API server still refuses it, so every DELETE of
   * that identity in `ns` fails with an outcome other than 403.
   */
  def refuseDeletes(kube: RealKube, ns: String, sa: String): Unit = {
    val name = s"podsweep-alerts-refuse-$sa-$ns"
    val user = RealApi.saUser(AccountsNamespace, sa)
    kube.admin.resource(
      s"""{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicy",
         |"metadata":{"name":"$name"},
         |"spec":{"failurePolicy":"Fail",
         |"matchConstraints":{"resourceRules":[{"apiGroups":[""],"apiVersions":["v1"],"operations":["DELETE"],"resources":["pods"]}]},
         |"matchConditions":[{"name":"that-identity","expression":"request.userInfo.username == '$user'"}],
         |"validations":[{"expression":"false","reason":"Invalid","message":"pod deletion is refused by admission policy $name"}]}}""".stripMargin)
      .createOr(_.update())
    kube.admin.resource(
      s"""{"apiVersion":"admissionregistration.k8s.io/v1","kind":"ValidatingAdmissionPolicyBinding",
         |"metadata":{"name":"$name"},
         |"spec":{"policyName":"$name","validationActions":["Deny"],
         |"matchResources":{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"$ns"}}}}}""".stripMargin)
      .createOr(_.update())
    // The API server applies a new policy once its own informer has it: until a dry-run DELETE of
    // that identity is refused with 422, its DELETEs would still go through.
    val probe = kube.createPod(kube.admin, ns, new PodBuilder().withNewMetadata().withName("policy-probe").endMetadata()
      .withNewSpec().addNewContainer().withName("c").withImage("none").endContainer().endSpec().build())
    val client = kube.serviceAccountClient(sa, AccountsNamespace)
    try {
      eventually(timeout(Span(60, Seconds)), interval(Span(200, Millis))) {
        val code = Try(client.pods().inNamespace(ns).withName("policy-probe").dryRun().delete()) match {
          case Failure(e: KubernetesClientException) => e.getCode
          case other => fail(s"a dry-run DELETE of $user in $ns went through: $other")
        }
        assert(code == 422, s"a dry-run DELETE of $user in $ns: $code")
      }
    } finally {
      client.close()
      kube.admin.pods().inNamespace(ns).withName(probe.getMetadata.getName).withGracePeriod(0).delete()
    }
  }

  /** A driver pod of `ns`, terminated (Succeeded) at `at`. */
  def terminatedDriver(kube: RealKube, ns: String, name: String, at: Instant): Unit = {
    val pod = kube.createPod(kube.admin, ns, KyuubiPods.driver(name))
    RealApi.terminate(kube.admin, ns, pod, succeeded = true, at)
  }

  /** A driver pod of `ns` that terminates every `everyMs` from now on, until [[Trickle.close]]. */
  final class Trickle(kube: RealKube, ns: String, prefix: String, everyMs: Long) extends AutoCloseable {
    val made = new AtomicInteger()
    private val timer: ScheduledExecutorService = Executors.newSingleThreadScheduledExecutor()
    timer.scheduleWithFixedDelay(() => {
      Try(terminatedDriver(kube, ns, f"$prefix-${made.get}%04d", Instant.now())).foreach(_ => made.incrementAndGet())
    }, 0, everyMs, TimeUnit.MILLISECONDS)
    override def close(): Unit = { timer.shutdownNow(); timer.awaitTermination(30, TimeUnit.SECONDS) }
  }

  // ---- what a scope's status says ---------------------------------------------------------------

  def pauseReasons(st: ScopeStatus): Set[String] = st.pauses().asScala.map(_.get("reason").toString).toSet

  def describe(st: ScopeStatus): String =
    s"${st.string("namespace")}: leader=${Try(st.number("leader")).getOrElse(-1)}, pauses=${pauseReasons(st).mkString("/")}, " +
      s"outcomes=${RealApi.outcomes(st).filter(_._2 > 0)}, tracked=${Try(st.tracked()).getOrElse(-1)}, " +
      s"queued=${Try(st.number("queued")).getOrElse(-1)}, healthy=${RealApi.healthy(st)}"
}
