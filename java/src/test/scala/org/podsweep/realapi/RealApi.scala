package org.podsweep.realapi

import java.io.File
import java.nio.charset.StandardCharsets
import java.nio.file.Files
import java.time.Instant
import java.util.concurrent.TimeUnit

import scala.collection.JavaConverters._
import scala.util.Try

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import com.fasterxml.jackson.databind.node.{ArrayNode, ObjectNode}
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory
import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.api.model.authorization.v1.{ResourceRule, SelfSubjectAccessReviewBuilder, SelfSubjectRulesReviewBuilder}
import io.fabric8.kubernetes.api.model.flowcontrol.v1.{FlowSchemaBuilder, PriorityLevelConfigurationBuilder}
import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.ScopeStatus
import org.podsweep.testkit.{KyuubiPods, RealKube}

/** What the real-API suites share: the docs' YAML, raw requests, access reviews, APF, the audit log. */
object RealApi {
  /** Prefix of podsweep's own keys. */
  val P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."

  def repo: File = new File(Option(System.getProperty("podsweep.repo")).getOrElse(".."))

  // ---- docs -------------------------------------------------------------------------------------

  def readDoc(relative: String): String =
    new String(Files.readAllBytes(new File(repo, relative).toPath), StandardCharsets.UTF_8)

  /** The lines of `md` from the heading starting with `heading` up to the next `## ` heading. */
  def section(md: String, heading: String): String = {
    val lines = md.split("\n", -1).toVector
    val start = lines.indexWhere(_.startsWith(heading))
    require(start >= 0, s"no heading '$heading'")
    val end = lines.indexWhere(_.startsWith("## "), start + 1)
    lines.slice(start + 1, if (end < 0) lines.size else end).mkString("\n")
  }

  /** The bodies of the fenced code blocks of `text` whose info string is `lang`. */
  def fenced(text: String, lang: String): Seq[String] = {
    val lines = text.split("\n", -1).toVector
    val out = Vector.newBuilder[String]
    var i = 0
    while (i < lines.size) {
      if (lines(i).trim == "```" + lang) {
        val end = lines.indexWhere(_.trim == "```", i + 1)
        require(end > i, s"unterminated ```$lang block")
        out += lines.slice(i + 1, end).mkString("\n")
        i = end + 1
      } else i += 1
    }
    out.result()
  }

  val json = new ObjectMapper()
  private val yaml = new ObjectMapper(new YAMLFactory())

  /** The documents of a multi-document YAML text (empty documents skipped). */
  def yamlDocs(text: String): Seq[ObjectNode] =
    yaml.readerFor(classOf[JsonNode]).readValues[JsonNode](text).readAll().asScala.toVector.collect {
      case o: ObjectNode => o
    }

  /**
   * Replaces the namespaces of an RBAC object (`metadata.namespace`, `subjects[].namespace`) as
   * `map` says; a namespace the map does not name is an error (the docs named one the test does
   * not know). Returns the adapted copy.
   */
  def adaptNamespaces(doc: ObjectNode, map: Map[String, String]): ObjectNode = {
    val copy = doc.deepCopy()
    def swap(o: ObjectNode): Unit = Option(o.get("namespace")).map(_.asText()).foreach { ns =>
      o.put("namespace", map.getOrElse(ns, throw new IllegalArgumentException(s"the docs name namespace $ns: not in $map")))
    }
    Option(copy.get("metadata")).collect { case m: ObjectNode => m }.foreach(swap)
    Option(copy.get("subjects")).collect { case a: ArrayNode => a }.foreach(_.elements().asScala.foreach {
      case s: ObjectNode => swap(s)
      case _ =>
    })
    copy
  }

  def kind(doc: JsonNode): String = Option(doc.get("kind")).map(_.asText()).getOrElse("")

  /** Creates (or updates) an object given as JSON/YAML through `client`. */
  def apply(client: KubernetesClient, doc: ObjectNode): Unit =
    client.resource(json.writeValueAsString(doc)).createOr(_.update())

  // ---- raw requests -----------------------------------------------------------------------------

  /** An HTTP answer: status, headers (lower-case names), body. */
  final case class Answer(code: Int, headers: Map[String, Seq[String]], body: String) {
    def header(name: String): Option[String] = headers.get(name.toLowerCase).flatMap(_.headOption)
    def bodyJson: JsonNode = Try(json.readTree(body)).getOrElse(json.createObjectNode())
  }

  /** One request through `client`'s HTTP client (its token), `body` as JSON when given. */
  def request(client: KubernetesClient, method: String, uri: String, body: Option[String] = None): Answer = {
    val http = client.getHttpClient
    val b = http.newHttpRequestBuilder().uri(uri)
    body match {
      case Some(text) => b.method(method, "application/json", text)
      case None => b.method(method, "application/json", null)
    }
    val r = http.sendAsync(b.build(), classOf[String]).get(60, TimeUnit.SECONDS)
    val headers = r.headers().asScala.map { case (k, v) => k.toLowerCase -> v.asScala.toVector }.toMap
    Answer(r.code(), headers, Option(r.body()).getOrElse(""))
  }

  /**
   * DELETE of one pod with a DeleteOptions body: `uid` as precondition, `dryRun: [All]` in the body
   * when `dryRun`; `query` is appended to the URL as it is (e.g. `?dryRun=All`).
   */
  def deletePod(kube: RealKube, client: KubernetesClient, ns: String, pod: String, uid: Option[String],
      dryRun: Boolean = false, query: String = ""): Answer = {
    val fields = Seq(""""apiVersion":"v1"""", """"kind":"DeleteOptions"""") ++
      uid.map(u => s""""preconditions":{"uid":"$u"}""") ++ (if (dryRun) Seq(""""dryRun":["All"]""") else Nil)
    request(client, "DELETE", s"${kube.url}/api/v1/namespaces/$ns/pods/$pod$query", Some(fields.mkString("{", ",", "}")))
  }

  // ---- access reviews ---------------------------------------------------------------------------

  /** What the client's own identity may do (SelfSubjectAccessReview). */
  def can(client: KubernetesClient, verb: String, resource: String, namespace: String,
      group: String = "", subresource: String = ""): Boolean = {
    val review = new SelfSubjectAccessReviewBuilder().withNewSpec().withNewResourceAttributes()
      .withVerb(verb).withGroup(group).withResource(resource).withSubresource(subresource)
      .withNamespace(namespace).endResourceAttributes().endSpec().build()
    client.authorization().v1().selfSubjectAccessReview().create(review).getStatus.getAllowed
  }

  /** The client identity's resource rules in `namespace` (SelfSubjectRulesReview). */
  def rules(client: KubernetesClient, namespace: String): Seq[ResourceRule] =
    client.authorization().v1().selfSubjectRulesReview()
      .create(new SelfSubjectRulesReviewBuilder().withNewSpec().withNamespace(namespace).endSpec().build())
      .getStatus.getResourceRules.asScala.toVector

  // ---- API Priority and Fairness ----------------------------------------------------------------

  /**
   * A priority level that admits one request at a time and rejects the rest with 429 (no queue),
   * and a FlowSchema that sends the `delete` requests on pods of the given ServiceAccounts
   * `(namespace, name)` to it. [[close]] removes both.
   */
  final class Throttle(kube: RealKube, name: String, serviceAccounts: Seq[(String, String)]) extends AutoCloseable {
    private val admin = kube.admin
    admin.flowControl().v1().priorityLevelConfigurations().resource(new PriorityLevelConfigurationBuilder()
      .withNewMetadata().withName(name).endMetadata()
      .withNewSpec().withType("Limited").withNewLimited()
      .withNominalConcurrencyShares(0).withLendablePercent(0).withBorrowingLimitPercent(0)
      .withNewLimitResponse().withType("Reject").endLimitResponse()
      .endLimited().endSpec().build()).createOr(_.update())
    private val schema = admin.flowControl().v1().flowSchema().resource(new FlowSchemaBuilder()
      .withNewMetadata().withName(name).endMetadata()
      .withNewSpec()
      .withNewPriorityLevelConfiguration().withName(name).endPriorityLevelConfiguration()
      .withMatchingPrecedence(100)
      .withNewDistinguisherMethod().withType("ByUser").endDistinguisherMethod()
      .addNewRule()
      .withSubjects(serviceAccounts.map { case (ns, sa) =>
        new io.fabric8.kubernetes.api.model.flowcontrol.v1.SubjectBuilder().withKind("ServiceAccount")
          .withNewServiceAccount().withNamespace(ns).withName(sa).endServiceAccount().build()
      }.asJava)
      .addNewResourceRule().withVerbs("delete").withApiGroups("").withResources("pods").withNamespaces("*")
      .endResourceRule()
      .endRule()
      .endSpec().build()).createOr(_.update())
    val uid: String = schema.getMetadata.getUid

    /**
     * Whether the API server classifies `client`'s pod DELETEs by this FlowSchema yet (its
     * answer's `X-Kubernetes-PF-FlowSchema-UID`), probed with a DELETE of a pod that does not exist
     * in `probeNamespace`.
     */
    def active(client: KubernetesClient, probeNamespace: String): Boolean =
      deletePod(kube, client, probeNamespace, "no-such-pod", None).header("X-Kubernetes-PF-FlowSchema-UID").contains(uid)

    override def close(): Unit = {
      Try(admin.flowControl().v1().flowSchema().withName(name).delete())
      Try(admin.flowControl().v1().priorityLevelConfigurations().withName(name).delete())
    }
  }

  // ---- the audit log, raw -----------------------------------------------------------------------

  /** One audited request with what [[org.podsweep.testkit.AuditEvent]] leaves out. */
  final case class Audited(
      verb: String,
      user: String,
      namespace: String,
      name: String,
      uri: String,
      code: Int,
      message: String,
      receivedMicros: Long,
      completedMicros: Long)

  private def micros(s: String): Long = Try {
    val i = Instant.parse(s)
    i.getEpochSecond * 1000000L + i.getNano / 1000
  }.getOrElse(0L)

  /** Every completed request on single pods (stage ResponseComplete), with its Status message. */
  def audited(kube: RealKube): Seq[Audited] = {
    if (!Files.isRegularFile(kube.auditLog)) return Nil
    Files.readAllLines(kube.auditLog, StandardCharsets.UTF_8).asScala.iterator
      .filter(l => l.contains("\"ResponseComplete\""))
      .flatMap(l => Try(json.readTree(l)).toOption)
      .map { n =>
        def s(node: JsonNode, f: String) = Option(node).flatMap(x => Option(x.get(f))).filterNot(_.isNull).map(_.asText()).getOrElse("")
        val obj = n.get("objectRef")
        val rs = n.get("responseStatus")
        Audited(s(n, "verb"), s(n.get("user"), "username"), s(obj, "namespace"), s(obj, "name"), s(n, "requestURI"),
          Option(rs).flatMap(r => Option(r.get("code"))).map(_.asInt()).getOrElse(0), s(rs, "message"),
          micros(s(n, "requestReceivedTimestamp")), micros(s(n, "stageTimestamp")))
      }
      .filter(a => a.name.nonEmpty && !a.uri.contains("/status"))
      .toVector
  }

  /** `system:serviceaccount:<ns>:<name>`. */
  def saUser(namespace: String, name: String): String = s"system:serviceaccount:$namespace:$name"

  // ---- pods -------------------------------------------------------------------------------------

  /** Writes a terminated status (phase Succeeded / Failed, driver container ended at `at`). */
  def terminate(admin: KubernetesClient, ns: String, pod: Pod, succeeded: Boolean, at: Instant): Pod =
    admin.pods().inNamespace(ns).resource(KyuubiPods.terminated(latest(admin, ns, pod), succeeded, at)).updateStatus()

  /** Writes the driver container ended at `at` while the sidecar runs (phase stays Running). */
  def endDriver(admin: KubernetesClient, ns: String, pod: Pod, succeeded: Boolean, at: Instant): Pod =
    admin.pods().inNamespace(ns).resource(KyuubiPods.driverEnded(latest(admin, ns, pod), succeeded, at)).updateStatus()

  private def latest(admin: KubernetesClient, ns: String, pod: Pod): Pod =
    Option(admin.pods().inNamespace(ns).withName(pod.getMetadata.getName).get()).getOrElse(pod)

  /** The pod as stored now, if it exists. */
  def get(admin: KubernetesClient, ns: String, name: String): Option[Pod] =
    Option(admin.pods().inNamespace(ns).withName(name).get())

  /** Removes every finalizer of a pod (a controller finishing its work). */
  def dropFinalizers(admin: KubernetesClient, ns: String, name: String): Unit =
    admin.pods().inNamespace(ns).withName(name)
      .patch(io.fabric8.kubernetes.client.dsl.base.PatchContext.of(io.fabric8.kubernetes.client.dsl.base.PatchType.JSON_MERGE),
        """{"metadata":{"finalizers":null}}""")

  // ---- status -----------------------------------------------------------------------------------

  def healthy(s: ScopeStatus): Option[Boolean] = s.fields().get("healthy") match {
    case b: java.lang.Boolean => Some(b.booleanValue())
    case _ => None
  }

  def outcomes(s: ScopeStatus): Map[String, Long] =
    Seq("accepted", "already_absent", "replaced", "forbidden", "throttled", "server_error", "transport", "other")
      .map(c => c -> s.outcome(c)).toMap
}
