package org.podsweep.bench

import java.io.OutputStream
import java.net.{InetAddress, InetSocketAddress, URLDecoder}
import java.nio.charset.StandardCharsets
import java.time.Instant
import java.util.UUID
import java.util.concurrent.{ConcurrentLinkedQueue, Executors, LinkedBlockingQueue, TimeUnit}

import scala.collection.JavaConverters._
import scala.collection.mutable
import scala.util.control.NonFatal

import com.sun.net.httpserver.{HttpExchange, HttpServer}
import io.fabric8.kubernetes.api.model.{DeleteOptions, ListMetaBuilder, Pod, PodList}
import io.fabric8.kubernetes.client.KubernetesClient
import io.fabric8.kubernetes.client.utils.KubernetesSerialization
import org.podsweep.testkit.TestClients

/** One request the lag bench's API server answered. */
private[bench] final case class LagRequest(
    method: String,
    path: String,
    namespace: String,
    pod: Option[String],
    subresource: Option[String],
    bearer: Option[String],
    atMillis: Long,
    status: Int)

/**
 * A small Kubernetes API server for pods, enough for fabric8 informers (list, then an HTTP
 * watch resumed from the list's resourceVersion), fabric8 create / updateStatus / delete and
 * podsweep's DELETE with a UID precondition (409 when it does not match, 404 when the pod is
 * gone). Every request is recorded with its arrival time and bearer token.
 *
 * Why not the fabric8 mock (`testkit.MockKube`) the demo uses: its CRUD dispatcher scans every
 * stored object under one write lock for each request, so with 10,000 pods one request costs
 * tens of milliseconds (creating them took 143 s) and it cannot take 167 status updates plus 167
 * DELETEs a second; the lag figures would measure the mock. Here a request costs a map lookup.
 */
private[bench] final class LagApiServer extends AutoCloseable {
  private val serde = new KubernetesSerialization()
  private val recorded = new ConcurrentLinkedQueue[LagRequest]()

  import LagApiServer.{Event, Watcher}

  // Guarded by `lock`.
  private val lock = new Object
  private val pods = mutable.HashMap.empty[(String, String), Pod]
  private val history = mutable.ArrayBuffer.empty[Event]
  private val watchers = mutable.LinkedHashSet.empty[Watcher]
  private var rv = 0L
  @volatile private var closed = false

  private val PodsPath = "^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(?:/([^/]+))?$".r

  LagApiServer.noDelay
  private val http = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress, 0), 512)
  private val pool = Executors.newCachedThreadPool()
  http.setExecutor(pool)
  http.createContext("/", (ex: HttpExchange) => handle(ex))
  http.start()

  /** The API server URL, as `kyuubi.kubernetes.master.address` takes it. */
  val url: String = s"http://127.0.0.1:${http.getAddress.getPort}"

  /** A fabric8 client with its own identity (bearer token); watches over HTTP, no retries. */
  def client(token: String): KubernetesClient = TestClients.forUrl(url, token, onlyHttpWatches = true)

  def requests: Seq[LagRequest] = recorded.asScala.toVector

  /** DELETE requests for single pods of `namespace`. */
  def podDeletes(namespace: String): Seq[LagRequest] =
    recorded.asScala.iterator.filter(r => r.method == "DELETE" && r.namespace == namespace && r.pod.isDefined).toVector

  /** Requests this server does not implement (a correct run has none). */
  def unhandled: Seq[LagRequest] = recorded.asScala.iterator.filter(r => r.status == 405 || r.status == 500).toVector

  private def handle(ex: HttpExchange): Unit = {
    val at = System.currentTimeMillis()
    val method = ex.getRequestMethod
    val path = ex.getRequestURI.getRawPath
    val query = LagApiServer.query(ex.getRequestURI.getRawQuery)
    val bearer = Option(ex.getRequestHeaders.getFirst("Authorization"))
      .filter(_.startsWith("Bearer ")).map(_.stripPrefix("Bearer ").trim)
    def record(ns: String, name: Option[String], sub: Option[String], code: Int): Unit =
      recorded.add(LagRequest(method, path, ns, name, sub, bearer, at, code))
    try {
      val body = new String(readAll(ex), StandardCharsets.UTF_8)
      path match {
        case PodsPath(ns, name, sub) =>
          val n = Option(name)
          val s = Option(sub)
          (method, n, s) match {
            case ("GET", None, None) if query.get("watch").contains("true") =>
              record(ns, None, None, 200)
              watch(ex, ns, query)
            case ("GET", None, None) =>
              record(ns, None, None, 200)
              reply(ex, 200, list(ns, query))
            case ("GET", Some(p), None) =>
              val (code, json) = lock.synchronized(pods.get((ns, p))) match {
                case Some(pod) => (200, serde.asJson(pod))
                case None => (404, LagApiServer.status(404, "NotFound", s"""pods "$p" not found"""))
              }
              record(ns, n, None, code)
              reply(ex, code, json)
            case ("POST", None, None) =>
              val pod = serde.unmarshal(body, classOf[Pod])
              val (code, json) = create(ns, pod)
              record(ns, Option(pod.getMetadata.getName), None, code)
              reply(ex, code, json)
            case ("PUT", Some(p), Some("status")) =>
              val (code, json) = updateStatus(ns, p, serde.unmarshal(body, classOf[Pod]))
              record(ns, n, s, code)
              reply(ex, code, json)
            case ("DELETE", Some(p), None) =>
              val uid = if (body.trim.isEmpty) None
                else Option(serde.unmarshal(body, classOf[DeleteOptions]).getPreconditions).flatMap(pc => Option(pc.getUid))
              val (code, json) = delete(ns, p, uid)
              record(ns, n, None, code)
              reply(ex, code, json)
            case _ =>
              record(ns, n, s, 405)
              reply(ex, 405, LagApiServer.status(405, "MethodNotAllowed", s"$method $path is not served here"))
          }
        case _ =>
          record("", None, None, 405)
          reply(ex, 405, LagApiServer.status(405, "MethodNotAllowed", s"$method $path is not served here"))
      }
    } catch {
      case NonFatal(e) =>
        record("", None, None, 500)
        scala.util.Try(reply(ex, 500, LagApiServer.status(500, "InternalError", String.valueOf(e.getMessage).replace("\"", "'"))))
    } finally ex.close()
  }

  private def readAll(ex: HttpExchange): Array[Byte] = {
    val in = ex.getRequestBody
    val out = new java.io.ByteArrayOutputStream()
    val buf = new Array[Byte](8192)
    var k = in.read(buf)
    while (k >= 0) { out.write(buf, 0, k); k = in.read(buf) }
    out.toByteArray
  }

  private def reply(ex: HttpExchange, code: Int, json: String): Unit = {
    val bytes = json.getBytes(StandardCharsets.UTF_8)
    ex.getResponseHeaders.set("Content-Type", "application/json")
    ex.sendResponseHeaders(code, bytes.length.toLong)
    val out = ex.getResponseBody
    out.write(bytes)
    out.flush()
  }

  private def labels(pod: Pod): Map[String, String] =
    Option(pod.getMetadata.getLabels).map(_.asScala.toMap).getOrElse(Map.empty)

  /** Appends an event for `pod` at the current resourceVersion (lock held). */
  private def emit(kind: String, ns: String, pod: Pod): Unit = {
    val e = Event(rv, ns, labels(pod), s"""{"type":"$kind","object":${serde.asJson(pod)}}""")
    history += e
    watchers.foreach(w => if (w.wants(e)) w.queue.add(e.json))
  }

  private def list(ns: String, query: Map[String, String]): String = {
    val selector = LagApiServer.selector(query.get("labelSelector"))
    val (items, at) = lock.synchronized {
      (pods.iterator.collect { case ((n, _), p) if n == ns && LagApiServer.matches(selector, labels(p)) => p }.toVector, rv)
    }
    val l = new PodList()
    l.setApiVersion("v1")
    l.setKind("PodList")
    l.setMetadata(new ListMetaBuilder().withResourceVersion(at.toString).build())
    l.setItems(items.asJava)
    serde.asJson(l)
  }

  private def create(ns: String, pod: Pod): (Int, String) = lock.synchronized {
    val name = pod.getMetadata.getName
    if (pods.contains((ns, name))) (409, LagApiServer.status(409, "AlreadyExists", s"""pods "$name" already exists"""))
    else {
      rv += 1
      val m = pod.getMetadata
      m.setNamespace(ns)
      m.setUid(UUID.randomUUID().toString)
      m.setResourceVersion(rv.toString)
      m.setCreationTimestamp(Instant.now().toString)
      pods((ns, name)) = pod
      emit("ADDED", ns, pod)
      (201, serde.asJson(pod))
    }
  }

  private def updateStatus(ns: String, name: String, pod: Pod): (Int, String) = lock.synchronized {
    pods.get((ns, name)) match {
      case None => (404, LagApiServer.status(404, "NotFound", s"""pods "$name" not found"""))
      case Some(old) =>
        rv += 1
        val updated = serde.clone(old)
        updated.setStatus(pod.getStatus)
        updated.getMetadata.setResourceVersion(rv.toString)
        pods((ns, name)) = updated
        emit("MODIFIED", ns, updated)
        (200, serde.asJson(updated))
    }
  }

  private def delete(ns: String, name: String, uid: Option[String]): (Int, String) = lock.synchronized {
    pods.get((ns, name)) match {
      case None => (404, LagApiServer.status(404, "NotFound", s"""pods "$name" not found"""))
      case Some(old) if uid.exists(_ != old.getMetadata.getUid) =>
        (409, LagApiServer.status(409, "Conflict",
          s"""Operation cannot be fulfilled on pods "$name": Precondition failed: UID in precondition: ${uid.get}, UID in object meta: ${old.getMetadata.getUid}"""))
      case Some(old) =>
        rv += 1
        pods.remove((ns, name))
        val gone = serde.clone(old)
        gone.getMetadata.setResourceVersion(rv.toString)
        emit("DELETED", ns, gone)
        (200, serde.asJson(gone))
    }
  }

  /** Streams events after the requested resourceVersion, then live ones, until close. */
  private def watch(ex: HttpExchange, ns: String, query: Map[String, String]): Unit = {
    val from = query.get("resourceVersion").filter(_.nonEmpty).map(_.toLong).getOrElse(0L)
    val w = new Watcher(ns, LagApiServer.selector(query.get("labelSelector")))
    val replay = lock.synchronized {
      watchers += w
      history.iterator.filter(e => e.rv > from && w.wants(e)).map(_.json).toVector
    }
    try {
      ex.getResponseHeaders.set("Content-Type", "application/json")
      ex.sendResponseHeaders(200, 0) // chunked
      val out: OutputStream = ex.getResponseBody
      def send(json: String): Unit = {
        out.write(json.getBytes(StandardCharsets.UTF_8))
        out.write('\n')
      }
      replay.foreach(send)
      out.flush()
      while (!closed) {
        val first = w.queue.poll(200, TimeUnit.MILLISECONDS)
        if (first != null) {
          send(first)
          var next = w.queue.poll()
          while (next != null) { send(next); next = w.queue.poll() }
          out.flush()
        }
      }
    } catch {
      case _: InterruptedException => // closing
      case NonFatal(_) => // the client went away
    } finally lock.synchronized(watchers -= w)
  }

  override def close(): Unit = {
    closed = true
    http.stop(0)
    pool.shutdownNow()
  }
}

private[bench] object LagApiServer {
  /** A watch event at resourceVersion `rv`, already encoded as one line of a watch stream. */
  private final case class Event(rv: Long, namespace: String, labels: Map[String, String], json: String)

  /** One open watch: its filter and the events waiting to be written. */
  private final class Watcher(val namespace: String, val selector: Map[String, Option[String]]) {
    val queue = new LinkedBlockingQueue[String]()
    def wants(e: Event): Boolean = e.namespace == namespace && matches(selector, e.labels)
  }

  /**
   * TCP_NODELAY on accepted sockets. Without it the JDK server sends a response's headers and
   * body as two segments and the body can wait for the client's delayed ACK (Nagle): thread
   * dumps showed every client waiting on a response while the server sat idle in epoll;
   * creating 10,000 pods from 8 threads took 73 s and terminations fell up to 8 s behind
   * schedule. With it: 32 s, and terminations on time (p50 8 ms). Read once, when the first
   * server starts.
   */
  lazy val noDelay: Unit = System.setProperty("sun.net.httpserver.nodelay", "true")

  def status(code: Int, reason: String, message: String): String =
    s"""{"apiVersion":"v1","kind":"Status","metadata":{},"status":"Failure","message":"$message","reason":"$reason","code":$code}"""

  def query(raw: String): Map[String, String] =
    Option(raw).toSeq.flatMap(_.split("&")).filter(_.nonEmpty).map { kv =>
      val i = kv.indexOf('=')
      def dec(s: String) = URLDecoder.decode(s, "UTF-8")
      if (i < 0) dec(kv) -> "" else dec(kv.take(i)) -> dec(kv.drop(i + 1))
    }.toMap

  /** `key` (exists) and `key=value` terms, comma-separated. */
  def selector(s: Option[String]): Map[String, Option[String]] =
    s.toSeq.flatMap(_.split(",")).map(_.trim).filter(_.nonEmpty).map { t =>
      val i = t.indexOf('=')
      if (i < 0) t -> None else t.take(i).stripSuffix("=") -> Some(t.drop(i + 1).stripPrefix("="))
    }.toMap

  def matches(selector: Map[String, Option[String]], labels: Map[String, String]): Boolean =
    selector.forall {
      case (k, None) => labels.contains(k)
      case (k, Some(v)) => labels.get(k).contains(v)
    }
}
