package org.podsweep.testkit

import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.KubernetesClient

/**
 * The Kubernetes API server a test, the demo or a chaos scenario runs against: the fabric8 CRUD
 * mock ([[MockKube]]: deletes every pod at once) or our own [[PodsApi]] (a real server's deletion
 * rules: graceful Terminating, finalizers). [[TestApi.start]] picks one by name.
 */
trait TestApi extends AutoCloseable {
  /** `mock` or `pods-api`. */
  def name: String

  /** The API server URL, as `kyuubi.kubernetes.master.address` takes it. */
  def url: String

  /** A client with its own identity (bearer token), e.g. an informer's or the test's admin. */
  def client(token: String): KubernetesClient

  /** [[client]] that may have `inFlight` requests in flight at once (where the server is real). */
  def client(token: String, inFlight: Int): KubernetesClient = client(token)

  /**
   * The Kyuubi client keys (`kyuubi.kubernetes.master.address`, the credentials) of a server with
   * identity `identity`: on the mocks a bearer token naming it, on a real API server a
   * ServiceAccount token file and the cluster's CA.
   */
  def clientConf(identity: String): Map[String, String] = Map(
    "kyuubi.kubernetes.master.address" -> url,
    "kyuubi.kubernetes.authenticate.oauthToken" -> identity)

  /**
   * Creates `pod` in `ns` through `admin` as a kubelet would leave it: with the status the pod
   * asks for (the mocks store it as given; a real API server resets it, see [[RealKube]]).
   */
  def createPod(admin: KubernetesClient, ns: String, pod: Pod): Pod =
    admin.pods().inNamespace(ns).resource(pod).create()

  /** DELETE requests for single pods, optionally restricted to a namespace. */
  def podDeletes(namespace: String = null): Seq[Recorded]

  /** DELETE requests for one pod, by sender token. */
  def deletesOf(namespace: String, pod: String): Map[Option[String], Int] =
    podDeletes(namespace).filter(_.pod.contains((namespace, pod))).groupBy(_.bearer).map { case (k, v) => k -> v.size }

  def pod(client: KubernetesClient, namespace: String, name: String): Option[Pod] =
    Option(client.pods().inNamespace(namespace).withName(name).get())

  /** From now on pod DELETEs fail as `f` decides (they do not reach the store). */
  def injectDeleteFaults(f: DeleteFaults): Unit

  def clearDeleteFaults(): Unit

  /** Makes every DELETE of one pod answer `code` with a Kubernetes Status body. */
  def failDeletes(namespace: String, pod: String, code: Int, reason: String, message: String): Unit

  /** Watch requests on pods of `namespaces` since `sinceMillis` whose User-Agent starts with `agent`. */
  def watchRequests(agent: String, sinceMillis: Long, namespaces: Seq[String]): Int
}

object TestApi {
  val Names: Seq[String] = Seq("kube-apiserver", "mock", "pods-api")

  /**
   * `kube-apiserver` (a real one, [[RealKube]]: built and started by scripts/kube), `mock` or
   * `pods-api`. A real API server is started afresh here (closed with the returned TestApi).
   */
  def start(name: String): TestApi = name match {
    case "kube-apiserver" => new RealKube(java.nio.file.Files.createTempDirectory("podsweep-kube-"))
    case "mock" => new MockKube
    case "pods-api" => new PodsApiServer(new PodsApi())
    case other => throw new IllegalArgumentException(s"unknown API server $other (kube-apiserver, mock or pods-api)")
  }
}

/** [[PodsApi]] as a [[TestApi]]: its requests as [[Recorded]], [[DeleteFaults]] as its faults. */
final class PodsApiServer(val api: PodsApi) extends TestApi {
  override def name: String = "pods-api"
  override def url: String = api.url
  override def client(token: String): KubernetesClient = api.client(token)

  override def podDeletes(namespace: String): Seq[Recorded] =
    api.podDeletes(namespace).map { r =>
      val injected = r.fault.collect {
        case ApiFault.Reset => DeleteFault.Disconnect
        case a: ApiFault.Answer if a.code == 403 => DeleteFault.Forbidden
        case a: ApiFault.Answer if a.code == 429 => DeleteFault.Throttled
        case a: ApiFault.Answer if a.code >= 500 => DeleteFault.Unavailable
        case _: ApiFault.Answer => DeleteFault.Refused
      }
      Recorded(r.method, r.path, r.bearer, "", r.atMillis, r.status, injected)
    }

  private val failing = new java.util.concurrent.ConcurrentHashMap[(String, String), ApiFault.Answer]()
  @volatile private var faults: Option[DeleteFaults] = None
  api.onRequest = r =>
    if (r.method != "DELETE" || r.pod.isEmpty) None
    else Option(failing.get((r.namespace, r.pod.get))).orElse(faults.flatMap(_.decide(r.namespace).map {
      case DeleteFault.Forbidden => ApiFault.Forbidden
      case DeleteFault.Throttled => ApiFault.throttled(1)
      case DeleteFault.Unavailable => ApiFault.Unavailable
      case DeleteFault.Disconnect => ApiFault.Reset
      case DeleteFault.Refused => ApiFault.Unauthorized
    }))

  override def injectDeleteFaults(f: DeleteFaults): Unit = faults = Some(f)

  override def clearDeleteFaults(): Unit = faults = None

  override def watchRequests(agent: String, sinceMillis: Long, namespaces: Seq[String]): Int =
    api.watches(agent).count(r => r.atMillis >= sinceMillis && namespaces.contains(r.namespace))

  override def failDeletes(namespace: String, pod: String, code: Int, reason: String, message: String): Unit =
    failing.put((namespace, pod), ApiFault.Answer(code, reason, message))

  override def close(): Unit = api.close()

  override def toString: String = s"PodsApi(${api.url})"
}
