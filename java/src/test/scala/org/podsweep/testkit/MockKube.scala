package org.podsweep.testkit

import java.net.InetAddress
import java.util.Queue
import java.util.concurrent.{ConcurrentHashMap, ConcurrentLinkedQueue}

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.{Pod, Status, StatusBuilder}
import io.fabric8.kubernetes.client.KubernetesClient
import io.fabric8.kubernetes.client.server.mock.{KubernetesMixedDispatcher, KubernetesMockServer}
import io.fabric8.mockwebserver.{Context, ServerRequest, ServerResponse}
import okhttp3.mockwebserver.{Dispatcher, MockResponse, MockWebServer, RecordedRequest, SocketPolicy}

/** One HTTP request the mock API server received. */
final case class Recorded(
    method: String,
    path: String,
    bearer: Option[String],
    body: String,
    atMillis: Long,
    status: Int,
    injected: Option[DeleteFault] = None,
    userAgent: String = "") {
  /** The path without its query string. */
  def bare: String = path.takeWhile(_ != '?')

  /** `(namespace, pod name)` if this is a request on a single pod. */
  def pod: Option[(String, String)] = Recorded.PodPath.unapplySeq(bare) match {
    case Some(List(ns, name)) => Some((ns, name))
    case _ => None
  }
}

object MockKube {
  // okhttp's MockWebServer logs every request through java.util.logging, and a WARNING for each
  // connection closed without a request (pooled connections, injected disconnects); keep it quiet.
  private val julQuiet = java.util.logging.Logger.getLogger(classOf[MockWebServer].getName)
  julQuiet.setLevel(java.util.logging.Level.SEVERE)

  /** `/api/v1/namespaces/<ns>/configmaps/kube-root-ca.crt`. */
  private val RootCaPath = "/api/v1/namespaces/([^/]+)/configmaps/kube-root-ca\\.crt".r
}

object Recorded {
  private[testkit] val PodPath = "^/api/v1/namespaces/([^/]+)/pods/([^/]+)$".r
}

/**
 * A fabric8 mock API server in CRUD mode (expectations, when set, win over CRUD) on plain HTTP
 * at 127.0.0.1, recording every request with its `Authorization: Bearer` token so DELETEs can be
 * attributed to the server that sent them.
 */
final class MockKube extends TestApi {
  override def name: String = "mock"
  MockKube.julQuiet.getLevel // initialise the JUL level before the server starts
  private val responses = new ConcurrentHashMap[ServerRequest, Queue[ServerResponse]]()
  private val recorded = new ConcurrentLinkedQueue[Recorded]()
  private val mixed = new KubernetesMixedDispatcher(responses)

  private val recording = new Dispatcher {
    override def dispatch(request: RecordedRequest): MockResponse = {
      val bearer = Option(request.getHeader("Authorization"))
        .filter(_.startsWith("Bearer ")).map(_.stripPrefix("Bearer ").trim)
      val body = Option(request.getBody).map(_.clone().readUtf8()).getOrElse("")
      val at = System.currentTimeMillis()
      val fault = faults.flatMap { f =>
        if (request.getMethod != "DELETE") None
        else Recorded.PodPath.unapplySeq(Option(request.getPath).getOrElse("").takeWhile(_ != '?')) match {
          case Some(List(ns, _)) => f.decide(ns)
          case _ => None
        }
      }
      val response = fault.map(faultResponse).orElse(rootCa(request)).getOrElse(mixed.dispatch(request))
      // "HTTP/1.1 404 Client Error" -> 404
      val answered = Option(response.getStatus).map(_.split(" ")).filter(_.length > 1)
        .flatMap(p => scala.util.Try(p(1).toInt).toOption).getOrElse(0)
      // A dropped connection carries no status.
      val code = if (fault.contains(DeleteFault.Disconnect)) 0 else answered
      recorded.add(Recorded(request.getMethod, request.getPath, bearer, body, at, code, fault,
        Option(request.getHeader("User-Agent")).getOrElse("")))
      response
    }
    override def shutdown(): Unit = mixed.shutdown()
  }

  /**
   * What kube-controller-manager's root CA publisher leaves in every namespace of a real cluster:
   * the ConfigMap `kube-root-ca.crt` with the cluster's CA certificate, whose digest podsweep
   * reads as the cluster's identity (the CRUD store would answer 404 for a namespace no test
   * wrote it to).
   */
  private def rootCa(request: RecordedRequest): Option[MockResponse] =
    MockKube.RootCaPath.unapplySeq(Option(request.getPath).getOrElse("").takeWhile(_ != '?')) match {
      case Some(List(ns)) if request.getMethod == "GET" =>
        Some(new MockResponse().setResponseCode(200).setHeader("Content-Type", "application/json").setBody(
          s"""{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kube-root-ca.crt","namespace":"$ns","uid":"root-ca-of-$ns"},"data":{"ca.crt":"mock API server CA"}}"""))
      case _ => None
    }

  @volatile private var faults: Option[DeleteFaults] = None

  /** From now on pod DELETEs fail as `f` decides (they do not reach the CRUD store). */
  override def injectDeleteFaults(f: DeleteFaults): Unit = faults = Some(f)

  override def clearDeleteFaults(): Unit = faults = None

  override def watchRequests(agent: String, sinceMillis: Long, namespaces: Seq[String]): Int =
    requests.count(r => r.method == "GET" && r.path.contains("watch=true") && r.userAgent.startsWith(agent) &&
      r.atMillis >= sinceMillis && namespaces.exists(ns => r.bare == s"/api/v1/namespaces/$ns/pods"))

  private def statusJson(code: Int, reason: String, message: String): String =
    s"""{"apiVersion":"v1","kind":"Status","metadata":{},"status":"Failure","message":"$message","reason":"$reason","code":$code}"""

  private def faultResponse(fault: DeleteFault): MockResponse = fault match {
    case DeleteFault.Forbidden =>
      new MockResponse().setResponseCode(403).setHeader("Content-Type", "application/json")
        .setBody(statusJson(403, "Forbidden", "pods is forbidden: injected fault"))
    case DeleteFault.Throttled =>
      new MockResponse().setResponseCode(429).setHeader("Content-Type", "application/json")
        .setHeader("Retry-After", "1").setBody(statusJson(429, "TooManyRequests", "too many requests, injected fault"))
    case DeleteFault.Unavailable =>
      new MockResponse().setResponseCode(503).setHeader("Content-Type", "application/json")
        .setBody(statusJson(503, "ServiceUnavailable", "the server is currently unable to handle the request (injected)"))
    case DeleteFault.Disconnect =>
      new MockResponse().setSocketPolicy(SocketPolicy.DISCONNECT_AFTER_REQUEST)
    case DeleteFault.Refused =>
      new MockResponse().setResponseCode(401).setHeader("Content-Type", "application/json")
        .setBody(statusJson(401, "Unauthorized", "Unauthorized"))
  }

  val server = new KubernetesMockServer(new Context(), new MockWebServer(), responses, recording, false)
  server.init(InetAddress.getLoopbackAddress, 0)

  /** The API server URL, as `kyuubi.kubernetes.master.address` takes it. */
  override val url: String = s"http://127.0.0.1:${server.getPort}"

  /** A client with its own identity (bearer token), e.g. an informer's or the test's admin. */
  override def client(token: String): KubernetesClient = TestClients.forUrl(url, token)

  def requests: Seq[Recorded] = recorded.asScala.toVector

  /** DELETE requests for single pods, optionally restricted to a namespace. */
  override def podDeletes(namespace: String = null): Seq[Recorded] =
    requests.filter(r => r.method == "DELETE" && r.pod.exists(p => namespace == null || p._1 == namespace))


  /** Makes every DELETE of one pod answer `code` with a Kubernetes Status body. */
  override def failDeletes(namespace: String, pod: String, code: Int, reason: String, message: String): Unit = {
    val status: Status = new StatusBuilder()
      .withApiVersion("v1").withKind("Status").withStatus("Failure")
      .withCode(code).withReason(reason).withMessage(message)
      .build()
    // Expectations match the path with its query string; kube-rs sends a bare "?".
    Seq("", "?").foreach { q =>
      server.expect().delete()
        .withPath(s"/api/v1/namespaces/$namespace/pods/$pod$q")
        .andReturn(code, status)
        .always()
    }
  }

  override def close(): Unit = server.destroy()
}
