package org.podsweep.testkit

import java.io.{File, RandomAccessFile}
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path, Paths}
import java.nio.file.attribute.PosixFilePermissions
import java.time.Instant
import java.util.concurrent.{ConcurrentHashMap, TimeUnit}

import scala.collection.JavaConverters._
import scala.io.Source
import scala.util.Try

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import io.fabric8.kubernetes.api.model.{ConfigMapBuilder, ContainerStatusBuilder, NamespaceBuilder, Pod, PodBuilder, ServiceAccountBuilder}
import io.fabric8.kubernetes.api.model.authentication.TokenRequestBuilder
import io.fabric8.kubernetes.api.model.rbac.{ClusterRole, ClusterRoleBindingBuilder, ClusterRoleBuilder, PolicyRule, PolicyRuleBuilder}
import io.fabric8.kubernetes.client.{Config, ConfigBuilder, KubernetesClient, KubernetesClientBuilder, KubernetesClientException}
import io.fabric8.kubernetes.client.okhttp.OkHttpClientFactory

/** One request of the API server's audit log (stage ResponseComplete or ResponseStarted). */
final case class AuditEvent(
    verb: String,
    user: String,
    namespace: String,
    resource: String,
    subresource: String,
    name: String,
    uri: String,
    code: Int,
    stage: String,
    userAgent: String,
    atMillis: Long) {
  /** The identity the harness gave the sender: a ServiceAccount's name, else the user name. */
  def identity: String = RealKube.identityOf(user)
}

/**
 * A real Kubernetes control plane for the harness: etcd and kube-apiserver (built from source by
 * `scripts/kube`), started by `scripts/kube up` on free loopback ports with TLS, RBAC, a
 * ServiceAccount issuer and an audit log of every pod request. Stopped by [[close]] (each process
 * by its own PID, `scripts/kube down`), and by the script's watchdog if this JVM dies first.
 *
 * Identities: [[client]] and [[clientConf]] give each named identity (a Kyuubi server, an
 * informer, a daemon) its own ServiceAccount in namespace [[ServersNamespace]], with a token from
 * the TokenRequest API, bound cluster-wide to the pod rules of docs/kyuubi-integration.md (get,
 * list, watch, delete pods) and to what Kyuubi's own Service informer reads (get, list, watch
 * services); identities whose name ends in `admin` get the static admin token
 * (system:masters). The harness's own writes (the admin, the kubelet stand-in that writes pod
 * status as a kubelet would) never count as an identity's DELETE: [[podDeletes]] leaves them out.
 *
 * Pod lifecycle without a kubelet: [[createPod]] creates the pod (the API server resets its status
 * to Pending) and, when the pod asked for another phase, writes that status through `pods/status`
 * with running container statuses, as a kubelet would; a graceful DELETE of a pod bound to a node
 * (`spec.nodeName`) is finished by [[NodeSim]] (containers stopped, DELETE with grace 0 and the
 * UID precondition), unless a finalizer holds the pod.
 *
 * `cluster = true` starts the full control plane instead (`scripts/kube up --cluster`): the
 * controller manager (its ServiceAccount controller and root-CA publisher make each namespace's
 * `default` ServiceAccount and `kube-root-ca.crt`, which [[ensureNamespace]] then waits for; the
 * garbage collector; PodGC with `podGcThreshold`), the scheduler and KWOK with `nodes` nodes
 * ([[nodeNames]]), which runs every pod bound to them (scripts/lib/kwok-stages.yaml: annotate a
 * pod `podsweep.test/succeed-after: 3s` to have it Succeeded 3 s after it runs). Create such pods
 * without a status: KWOK writes it.
 *
 * @param upFlags more options of `scripts/kube up` (e.g. `--cluster --pod-gc-threshold N`, which
 *                the `cluster` options above say more plainly)
 */
final class RealKube(
    val dir: Path,
    extraFlags: Seq[String] = Nil,
    minRequestTimeoutS: Int = 1800,
    shared: Boolean = false,
    cluster: Boolean = false,
    podGcThreshold: Int = 20,
    nodes: Int = 2,
    upFlags: Seq[String] = Nil) extends TestApi {
  import RealKube._

  private val env: Map[String, String] = {
    Files.createDirectories(dir)
    val pid = java.lang.management.ManagementFactory.getRuntimeMXBean.getName.takeWhile(_ != '@')
    val cmd = Seq(script.getAbsolutePath, "up", dir.toString, "--owner-pid", pid,
      "--min-request-timeout", minRequestTimeoutS.toString) ++
      (if (cluster) Seq("--cluster", "--pod-gc-threshold", podGcThreshold.toString, "--nodes", nodes.toString) else Nil) ++
      upFlags ++ (if (extraFlags.isEmpty) Nil else "--" +: extraFlags)
    val p = new ProcessBuilder(cmd: _*)
      .redirectError(ProcessBuilder.Redirect.appendTo(dir.resolveSibling(dir.getFileName.toString + ".up.log").toFile))
      .start()
    val out = Source.fromInputStream(p.getInputStream, "UTF-8").mkString
    if (!p.waitFor(15, TimeUnit.MINUTES) || p.exitValue() != 0)
      throw new IllegalStateException(s"scripts/kube up $dir failed (exit ${Try(p.exitValue()).getOrElse("?")}); " +
        s"see ${dir.resolveSibling(dir.getFileName.toString + ".up.log")}")
    out.linesIterator.map(_.split("=", 2)).collect { case Array(k, v) => k -> v }.toMap
  }
  RealKube.live.add(this)

  override val url: String = env("PODSWEEP_KUBE_SERVER")
  val version: String = env("PODSWEEP_KUBE_VERSION")
  override def name: String = s"kube-apiserver-$version"
  val caFile: String = env("PODSWEEP_KUBE_CA")
  val auditLog: Path = Paths.get(env("PODSWEEP_KUBE_AUDIT"))
  /** The etcd that stores this API server's objects (for compaction). */
  val etcdUrl: String = env("PODSWEEP_KUBE_ETCD")
  val kubeconfig: String = env("KUBECONFIG")
  /** The KWOK nodes of the full control plane (`cluster = true`); empty otherwise. */
  val nodeNames: Seq[String] = env.get("PODSWEEP_KUBE_NODES").toSeq.flatMap(_.split(",")).filter(_.nonEmpty)
  @volatile private var apiserverPidNow: Long = env("PODSWEEP_KUBE_APISERVER_PID").toLong
  /** The PID of the running kube-apiserver. */
  def apiserverPid: Long = apiserverPidNow

  /**
   * Stops `what` (`kube-apiserver` or `etcd`) by its PID and starts it again with the same command
   * line (scripts/kube restart); returns when kube-apiserver is ready. kube-apiserver: every open
   * watch and connection drops. etcd: the objects stay; the API server's own watches of etcd break
   * and resume (from a compacted revision, its watch cache lists again and ends every client watch).
   */
  def restart(what: String = "kube-apiserver"): Unit = {
    val p = new ProcessBuilder(script.getAbsolutePath, "restart", dir.toString, what)
      .redirectErrorStream(true).start()
    val out = Source.fromInputStream(p.getInputStream, "UTF-8").mkString
    if (!p.waitFor(120, TimeUnit.SECONDS) || p.exitValue() != 0)
      throw new IllegalStateException(s"scripts/kube restart $dir $what failed: $out")
    val env = Source.fromFile(dir.resolve("env").toFile, "UTF-8")
    try env.getLines().collectFirst { case l if l.startsWith("PODSWEEP_KUBE_APISERVER_PID=") => l.split("=", 2)(1).toLong }
      .foreach(apiserverPidNow = _)
    finally env.close()
  }

  private val adminToken: String = env("PODSWEEP_KUBE_TOKEN")

  /** The admin client (system:masters): creates namespaces, pods, RBAC objects. */
  val admin: KubernetesClient = clientWith(adminToken)

  private def clientWith(token: String, inFlight: Int = 0): KubernetesClient = {
    val builder = new ConfigBuilder(Config.empty())
      .withMasterUrl(url)
      .withCaCertFile(caFile)
      .withOauthToken(token)
      .withNamespace("default")
      .withRequestRetryBackoffLimit(0)
      .withWatchReconnectInterval(200)
    // fabric8 sends its requests asynchronously through a dispatcher that allows 5 per host.
    if (inFlight > 0) builder.withMaxConcurrentRequests(inFlight).withMaxConcurrentRequestsPerHost(inFlight)
    val config: Config = builder.build()
    new KubernetesClientBuilder().withConfig(config).withHttpClientFactory(new OkHttpClientFactory()).build()
  }

  // ---- identities -------------------------------------------------------------------------------

  private val tokens = new ConcurrentHashMap[(String, String), (String, Path)]()
  private val namespaces = ConcurrentHashMap.newKeySet[String]()

  private def ignoreConflict[A](f: => A): Unit =
    try f catch { case e: KubernetesClientException if e.getCode == 409 => () }

  /** Creates `ns` (and its `default` ServiceAccount, which a controller manager would) once. */
  def ensureNamespace(ns: String): Unit = if (!namespaces.contains(ns)) synchronized {
    if (!namespaces.contains(ns) && fullControlPlane) {
      // The controllers' work: the ServiceAccount controller's `default`, the publisher's CA.
      ignoreConflict(admin.namespaces().resource(new NamespaceBuilder().withNewMetadata().withName(ns).endMetadata().build()).create())
      val until = System.nanoTime() + TimeUnit.SECONDS.toNanos(30)
      while ((admin.serviceAccounts().inNamespace(ns).withName("default").get() == null ||
          admin.configMaps().inNamespace(ns).withName("kube-root-ca.crt").get() == null) && System.nanoTime() < until)
        Thread.sleep(100)
      if (admin.configMaps().inNamespace(ns).withName("kube-root-ca.crt").get() == null)
        throw new IllegalStateException(s"$ns: the controller manager made no kube-root-ca.crt within 30 s")
      namespaces.add(ns)
    } else if (!namespaces.contains(ns)) {
      ignoreConflict(admin.namespaces().resource(new NamespaceBuilder().withNewMetadata().withName(ns).endMetadata().build()).create())
      ignoreConflict(admin.serviceAccounts().inNamespace(ns)
        .resource(new ServiceAccountBuilder().withNewMetadata().withName("default").endMetadata().build()).create())
      if (!withoutRootCa.contains(ns)) publishRootCa(ns)
      namespaces.add(ns)
    }
  }

  /** Namespaces in which [[publishRootCa]] is not run (a cluster whose publisher is off). */
  private val withoutRootCa = ConcurrentHashMap.newKeySet[String]()

  /** Creates `ns` without its `kube-root-ca.crt` ConfigMap (call before anything uses `ns`). */
  def ensureNamespaceWithoutRootCa(ns: String): Unit = {
    withoutRootCa.add(ns)
    ensureNamespace(ns)
  }

  /**
   * What kube-controller-manager's root CA publisher does in every namespace of a real cluster
   * (this control plane runs no controller manager): the ConfigMap `kube-root-ca.crt` with the
   * cluster's CA. podsweep reads its UID as the namespace's identity.
   */
  def publishRootCa(ns: String): Unit = {
    val ca = new String(Files.readAllBytes(Paths.get(caFile)), StandardCharsets.UTF_8)
    ignoreConflict(admin.configMaps().inNamespace(ns).resource(new ConfigMapBuilder()
      .withNewMetadata().withName("kube-root-ca.crt").endMetadata()
      .addToData("ca.crt", ca).build()).create())
  }

  // Every ServiceAccount of ServersNamespace may do, in every namespace, what a Kyuubi server's
  // podsweep needs (the pod rules of docs/kyuubi-integration.md) and what Kyuubi's Service informer needs.
  ensureNamespace(ServersNamespace)
  ignoreConflict(admin.rbac().clusterRoles().resource(new ClusterRoleBuilder()
    .withNewMetadata().withName(ServersRole).endMetadata()
    .withRules(serversRules(delete = true): _*)
    .build()).create())
  ignoreConflict(admin.rbac().clusterRoleBindings().resource(new ClusterRoleBindingBuilder()
    .withNewMetadata().withName(ServersRole).endMetadata()
    .withNewRoleRef("rbac.authorization.k8s.io", "ClusterRole", ServersRole)
    .addNewSubject().withKind("Group").withApiGroup("rbac.authorization.k8s.io")
    .withName(s"system:serviceaccounts:$ServersNamespace").endSubject()
    .build()).create())

  /**
   * Grants or withdraws `delete pods` from the role of every identity's ServiceAccount (get, list
   * and watch stay): an RBAC mistake an operator makes and fixes.
   */
  def setServersCanDelete(can: Boolean): Unit =
    admin.rbac().clusterRoles().withName(ServersRole).edit(new java.util.function.UnaryOperator[ClusterRole] {
      override def apply(r: ClusterRole): ClusterRole = new ClusterRoleBuilder(r).withRules(serversRules(can): _*).build()
    })

  /** The servers' rules: pods (get, list, watch, and delete if `delete`) and Kyuubi's Service informer. */
  private def serversRules(delete: Boolean): Seq[PolicyRule] = Seq(
    new PolicyRuleBuilder().withApiGroups("").withResources("pods")
      .withVerbs((Seq("get", "list", "watch") ++ (if (delete) Seq("delete") else Nil)): _*).build(),
    // Kyuubi's own Service informer (its default app URL), not podsweep's.
    new PolicyRuleBuilder().withApiGroups("").withResources("services").withVerbs("get", "list", "watch").build(),
    // The namespace's identity, whatever URL reaches the cluster (docs/kyuubi-integration.md).
    new PolicyRuleBuilder().withApiGroups("").withResources("configmaps").withResourceNames("kube-root-ca.crt")
      .withVerbs("get").build())

  /**
   * A token of ServiceAccount `sa` in `namespace` (created when absent) from the TokenRequest API,
   * valid for a day, and the file holding it (owner-only), as `oauthTokenFile` takes it.
   */
  def serviceAccountToken(sa: String, namespace: String = ServersNamespace): (String, Path) =
    tokens.computeIfAbsent((namespace, sa), _ => {
      ensureNamespace(namespace)
      ignoreConflict(admin.serviceAccounts().inNamespace(namespace)
        .resource(new ServiceAccountBuilder().withNewMetadata().withName(sa).endMetadata().build()).create())
      val tr = admin.serviceAccounts().inNamespace(namespace).withName(sa)
        .tokenRequest(new TokenRequestBuilder().withNewSpec().withExpirationSeconds(86400L).endSpec().build())
      val token = tr.getStatus.getToken
      val tokenDir = dir.resolve("tokens")
      Files.createDirectories(tokenDir)
      val file = tokenDir.resolve(s"$namespace.$sa")
      Files.write(file, token.getBytes(StandardCharsets.UTF_8))
      Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("rw-------"))
      (token, file)
    })

  private def isAdmin(identity: String): Boolean = identity.endsWith("admin")

  override def client(identity: String): KubernetesClient =
    if (isAdmin(identity)) clientWith(adminToken) else clientWith(serviceAccountToken(saName(identity))._1)

  override def client(identity: String, inFlight: Int): KubernetesClient =
    if (isAdmin(identity)) clientWith(adminToken, inFlight)
    else clientWith(serviceAccountToken(saName(identity))._1, inFlight)

  /** A client with the token of ServiceAccount `sa` in `namespace`. */
  def serviceAccountClient(sa: String, namespace: String): KubernetesClient =
    clientWith(serviceAccountToken(sa, namespace)._1)

  override def clientConf(identity: String): Map[String, String] = Map(
    "kyuubi.kubernetes.master.address" -> url,
    "kyuubi.kubernetes.authenticate.caCertFile" -> caFile,
    "kyuubi.kubernetes.authenticate.oauthTokenFile" -> serviceAccountToken(saName(identity))._2.toString)

  // ---- pods -------------------------------------------------------------------------------------

  /** The full control plane (`--cluster`): the scheduler binds pods to kwok's nodes and kwok runs them. */
  def fullControlPlane: Boolean = cluster || upFlags.contains("--cluster")

  override def createPod(client: KubernetesClient, ns: String, pod: Pod): Pod = {
    ensureNamespace(ns)
    val wanted = Option(pod.getStatus).map(_.getPhase).orNull
    val created = client.pods().inNamespace(ns).resource(pod).create()
    if (wanted == null || wanted == "Pending") created
    else if (fullControlPlane) awaitRunning(client, ns, created.getMetadata.getName)
    else client.pods().inNamespace(ns).resource(kubeletStatus(created, wanted)).updateStatus()
  }

  /** On the full control plane: the pod once kwok (the kubelet's part) reports it Running (30 s at most). */
  private def awaitRunning(client: KubernetesClient, ns: String, name: String): Pod = {
    val deadline = System.currentTimeMillis() + 30000
    var p = client.pods().inNamespace(ns).withName(name).get()
    while ((p == null || p.getStatus == null || p.getStatus.getPhase != "Running") && System.currentTimeMillis() < deadline) {
      Thread.sleep(50)
      p = client.pods().inNamespace(ns).withName(name).get()
    }
    if (p == null || p.getStatus == null || p.getStatus.getPhase != "Running")
      throw new IllegalStateException(s"pod $ns/$name not Running within 30 s on the cluster (scheduler, kwok)")
    p
  }

  /** The status a kubelet writes for a started pod: the phase, its IPs, every container running. */
  private def kubeletStatus(pod: Pod, phase: String): Pod = {
    val now = Instant.now().truncatedTo(java.time.temporal.ChronoUnit.SECONDS).toString
    val running = pod.getSpec.getContainers.asScala.map(c => new ContainerStatusBuilder()
      .withName(c.getName).withImage(c.getImage).withImageID("").withReady(true).withRestartCount(0).withStarted(true)
      .withNewState().withNewRunning().withStartedAt(now).endRunning().endState().build())
    new PodBuilder(pod).editOrNewStatus()
      .withPhase(phase).withHostIP("10.1.0.1").withPodIP("10.2.0.1").withStartTime(now)
      .withContainerStatuses(running.asJava)
      .endStatus().build()
  }

  /**
   * DELETE of one pod through `client` with a `DeleteOptions` body (fabric8's DSL has no UID
   * precondition): `uid` as precondition when given, `graceSeconds` when given. Returns the HTTP
   * status and the body.
   */
  def deletePod(client: KubernetesClient, ns: String, pod: String, uid: Option[String], graceSeconds: Option[Long] = None): (Int, String) =
    RealKube.deletePod(client, url, ns, pod, uid, graceSeconds)

  // ---- the audit log ----------------------------------------------------------------------------

  private val mapper = new ObjectMapper()
  private val events = new java.util.ArrayList[AuditEvent]()
  private var offset = 0L
  private var partial = ""

  /** Every audit event so far (stages ResponseStarted and ResponseComplete), in log order. */
  def audit: Seq[AuditEvent] = synchronized {
    if (Files.isRegularFile(auditLog)) {
      val f = new RandomAccessFile(auditLog.toFile, "r")
      try {
        val len = f.length()
        if (len > offset) {
          val buf = new Array[Byte]((len - offset).toInt)
          f.seek(offset)
          f.readFully(buf)
          offset = len
          val text = partial + new String(buf, StandardCharsets.UTF_8)
          val lines = text.split("\n", -1)
          partial = lines.last
          lines.init.filter(_.nonEmpty).foreach(l => events.add(parse(mapper.readTree(l))))
        }
      } finally f.close()
    }
    events.asScala.toVector
  }

  private def parse(n: JsonNode): AuditEvent = {
    def s(node: JsonNode, field: String): String = Option(node.get(field)).filterNot(_.isNull).map(_.asText()).getOrElse("")
    val obj = Option(n.get("objectRef")).getOrElse(mapper.createObjectNode())
    val code = Option(n.get("responseStatus")).flatMap(r => Option(r.get("code"))).map(_.asInt()).getOrElse(0)
    AuditEvent(s(n, "verb"), s(Option(n.get("user")).getOrElse(mapper.createObjectNode()), "username"),
      s(obj, "namespace"), s(obj, "resource"), s(obj, "subresource"), s(obj, "name"), s(n, "requestURI"), code,
      s(n, "stage"), s(n, "userAgent"), Try(Instant.parse(s(n, "requestReceivedTimestamp")).toEpochMilli).getOrElse(0L))
  }

  /** Completed single-pod DELETEs, by anyone. */
  def allPodDeletes: Seq[AuditEvent] =
    audit.filter(e => e.stage == "ResponseComplete" && e.verb == "delete" && e.resource == "pods" &&
      e.subresource.isEmpty && e.name.nonEmpty)

  /** The harness's own identities, whose DELETEs are not the servers'. */
  private def harness(e: AuditEvent): Boolean = e.user == AdminUser || e.identity == NodeSim.Identity

  /**
   * The servers' pod DELETEs. A DELETE the API server refused before storage (401, 403, 429, 5xx)
   * carries the matching [[DeleteFault]] as `injected`, so that `stored` means, as on the mocks,
   * the DELETEs that reached the store.
   */
  override def podDeletes(namespace: String): Seq[Recorded] =
    allPodDeletes.filter(e => !harness(e) && (namespace == null || e.namespace == namespace)).map { e =>
      val refused = e.code match {
        case 401 => Some(DeleteFault.Refused)
        case 403 => Some(DeleteFault.Forbidden)
        case 429 => Some(DeleteFault.Throttled)
        case c if c >= 500 || c == 0 => Some(DeleteFault.Unavailable)
        case _ => None
      }
      Recorded("DELETE", s"/api/v1/namespaces/${e.namespace}/pods/${e.name}", Some(e.identity), "", e.atMillis, e.code,
        refused, e.userAgent)
    }

  override def watchRequests(agent: String, sinceMillis: Long, namespaces: Seq[String]): Int =
    audit.count(e => e.stage == "ResponseStarted" && e.verb == "watch" && e.resource == "pods" &&
      e.userAgent.startsWith(agent) && e.atMillis >= sinceMillis && namespaces.contains(e.namespace))

  // ---- what a real API server cannot be told to do ---------------------------------------------

  override def injectDeleteFaults(f: DeleteFaults): Unit =
    throw new UnsupportedOperationException(s"$name injects no faults: use the mock (--api mock) for fault injection")

  override def clearDeleteFaults(): Unit = ()

  override def failDeletes(namespace: String, pod: String, code: Int, reason: String, message: String): Unit =
    throw new UnsupportedOperationException(s"$name injects no faults: use the mock for fault injection")

  // ---- etcd -------------------------------------------------------------------------------------

  /** Compacts the API server's etcd at its current revision (watches from older versions get 410). */
  def compactEtcd(): Long = {
    val rev = etcdRevision()
    val c = new java.net.URL(s"$etcdUrl/v3/kv/compaction").openConnection().asInstanceOf[java.net.HttpURLConnection]
    c.setRequestMethod("POST")
    c.setDoOutput(true)
    c.getOutputStream.write(s"""{"revision":"$rev","physical":true}""".getBytes(StandardCharsets.UTF_8))
    val code = c.getResponseCode
    if (code != 200) throw new IllegalStateException(s"etcd compaction at $rev answered $code")
    rev
  }

  /** etcd's current revision (through its JSON gateway). */
  def etcdRevision(): Long = {
    val c = new java.net.URL(s"$etcdUrl/v3/kv/range").openConnection().asInstanceOf[java.net.HttpURLConnection]
    c.setRequestMethod("POST")
    c.setDoOutput(true)
    c.getOutputStream.write("""{"key":"AA==","limit":"1"}""".getBytes(StandardCharsets.UTF_8))
    mapper.readTree(c.getInputStream).get("header").get("revision").asText().toLong
  }

  @volatile private var nodeSim: Option[NodeSim] = None

  /**
   * Starts (once) the kubelet stand-in that finishes graceful deletions of pods bound to a node,
   * `stopDelayMs` after their `deletionTimestamp` (the time the kubelet takes to stop them); with
   * `podGc`, also the pod garbage collector's part (Terminating pods bound to no node).
   */
  def startNodeSim(stopDelayMs: Long = 300L, podGc: Boolean = false): NodeSim = synchronized {
    nodeSim.getOrElse { val n = new NodeSim(this, stopDelayMs, podGc); nodeSim = Some(n); n }
  }

  /** Stops the control plane, unless it is the JVM's shared one (stopped when the JVM exits). */
  override def close(): Unit = if (!shared) shutdown()

  /** Stops etcd and kube-apiserver, each by its own PID (scripts/kube down). */
  def shutdown(): Unit = {
    RealKube.live.remove(this)
    nodeSim.foreach(n => Try(n.close()))
    Try(admin.close())
    val p = new ProcessBuilder(script.getAbsolutePath, "down", dir.toString).inheritIO().start()
    p.waitFor(60, TimeUnit.SECONDS)
  }

  override def toString: String = s"$name($url)"
}

object RealKube {
  /** Where the Kyuubi servers' (and other identities') ServiceAccounts live. */
  val ServersNamespace = "kyuubi"
  val ServersRole = "podsweep-test-servers"
  val AdminUser = "podsweep-admin"

  private[testkit] val live = ConcurrentHashMap.newKeySet[RealKube]()
  Runtime.getRuntime.addShutdownHook(new Thread(() => live.asScala.toVector.foreach(k => Try(k.shutdown()))))

  /** scripts/kube of this repository. */
  def script: File = new File(Option(System.getProperty("podsweep.repo")).getOrElse(".."), "scripts/kube")

  private[testkit] def deletePod(
      client: KubernetesClient,
      url: String,
      ns: String,
      pod: String,
      uid: Option[String],
      graceSeconds: Option[Long]): (Int, String) = {
    val fields = Seq(""""apiVersion":"v1"""", """"kind":"DeleteOptions"""") ++
      uid.map(u => s""""preconditions":{"uid":"$u"}""") ++ graceSeconds.map(g => s""""gracePeriodSeconds":$g""")
    val body = fields.mkString("{", ",", "}")
    val http = client.getHttpClient
    val req = http.newHttpRequestBuilder().uri(s"$url/api/v1/namespaces/$ns/pods/$pod")
      .method("DELETE", "application/json", body).build()
    val r = http.sendAsync(req, classOf[String]).get(30, TimeUnit.SECONDS)
    (r.code(), Option(r.body()).getOrElse(""))
  }

  /** A ServiceAccount name for a harness identity (a DNS-1123 label). */
  def saName(identity: String): String = {
    val s = identity.toLowerCase.replaceAll("[^a-z0-9-]", "-").replaceAll("^-+|-+$", "")
    if (s.isEmpty) "anonymous" else s.take(63)
  }

  /** `system:serviceaccount:<ns>:<name>` -> `<name>`; any other user name as it is. */
  def identityOf(user: String): String =
    if (user.startsWith("system:serviceaccount:")) user.split(":").last else user

  /** Why a real API server cannot start here, or None. */
  def missing: Option[String] =
    if (!script.isFile) Some(s"no scripts/kube at $script")
    else {
      val p = new ProcessBuilder(script.getAbsolutePath, "status").redirectErrorStream(true).start()
      val out = Source.fromInputStream(p.getInputStream, "UTF-8").mkString
      if (p.waitFor() == 0) None else Some(out.trim + " (scripts/kube build)")
    }

  private lazy val sharedOne: RealKube = new RealKube(Files.createTempDirectory("podsweep-kube-"), shared = true)
  private lazy val sharedClusterOne: RealKube =
    new RealKube(Files.createTempDirectory("podsweep-cluster-"), shared = true, cluster = true)

  /**
   * One full control plane for the whole test JVM (`scripts/kube up --cluster`: controller manager,
   * scheduler, two KWOK nodes, PodGC's threshold 20), started on first use, stopped when the JVM exits.
   */
  def sharedCluster: RealKube = sharedClusterOne

  /**
   * One control plane for the whole test JVM (suites use namespaces of their own), started on first
   * use and stopped when the JVM exits.
   */
  def sharedInstance: RealKube = sharedOne
}
