package org.podsweep.testkit

import java.io.OutputStream
import java.net.{InetAddress, InetSocketAddress, URLDecoder}
import java.nio.charset.StandardCharsets
import java.time.Instant
import java.util.UUID
import java.util.concurrent.{ConcurrentLinkedQueue, Executors, LinkedBlockingQueue, ScheduledExecutorService, TimeUnit}

import scala.collection.JavaConverters._
import scala.collection.mutable
import scala.util.control.NonFatal

import com.sun.net.httpserver.{HttpExchange, HttpServer}
import io.fabric8.kubernetes.api.model.{DeleteOptions, Pod}
import io.fabric8.kubernetes.client.KubernetesClient
import io.fabric8.kubernetes.client.utils.KubernetesSerialization

/** One request [[PodsApi]] answered. */
final case class ApiRequest(
    method: String,
    path: String,
    namespace: String,
    pod: Option[String],
    subresource: Option[String],
    bearer: Option[String],
    userAgent: String,
    watch: Boolean,
    atMillis: Long,
    status: Int,
    fault: Option[ApiFault] = None)

/** What a request meets instead of the store. */
sealed trait ApiFault
object ApiFault {
  /** An error answer with a Kubernetes `Status` body (and `Retry-After`, if given). */
  final case class Answer(code: Int, reason: String, message: String, retryAfter: Option[String] = None) extends ApiFault
  /** The request is read, then the connection is closed without an answer. */
  case object Reset extends ApiFault
  /** The answer waits `ms` first (past a client's timeout, say), then the request is served. */
  final case class Slow(ms: Long) extends ApiFault

  def throttled(retryAfterSeconds: Int): Answer =
    Answer(429, "TooManyRequests", "Too many requests, please try again later.", Some(retryAfterSeconds.toString))
  val Unavailable: Answer = Answer(503, "ServiceUnavailable", "the server is currently unable to handle the request")
  val InternalError: Answer = Answer(500, "InternalError", "Internal error occurred: injected")
  val Forbidden: Answer = Answer(403, "Forbidden",
    """pods "x" is forbidden: User "system:serviceaccount:kyuubi:kyuubi" cannot delete resource "pods" in API group """"" +
      """ in the namespace "x"""")
  val Unauthorized: Answer = Answer(401, "Unauthorized", "Unauthorized")
}

/**
 * A small Kubernetes API server for pods, on the JDK's HTTP server: enough for fabric8 informers
 * (list, then an HTTP watch from the list's resourceVersion; a WebSocket upgrade is answered with a
 * plain 200, on which fabric8 falls back to an HTTP watch), kube-rs watchers (list, watch,
 * `410 Gone` for a resourceVersion older than the last [[compact]]), fabric8 create / updateStatus
 * / delete, and podsweep's DELETE with a UID precondition. Every request is recorded with its
 * arrival time, bearer token and user agent. A request costs a map lookup, so it keeps up with
 * 10,000 pods (the fabric8 CRUD mock scans its store under one lock per request).
 *
 * DELETE follows a real API server's rules (`realDeletes`, the default): a pod in phase
 * `Succeeded` / `Failed`, or never scheduled (no `spec.nodeName`), without finalizers is removed at
 * once (200, the pod, a DELETED event). Any other pod, e.g. one still `Running` because a sidecar
 * runs while Kyuubi's `CONTAINER` state source calls the driver terminated, or one with a
 * finalizer, is answered 200 with `deletionTimestamp` set (a MODIFIED event) and stays
 * Terminating until the kubelet confirms, `kubeletConfirmMs` later (never while [[nodeGone]]), or
 * until its finalizers are removed ([[removeFinalizers]]); a DELETE meanwhile is answered 200 again.
 * A failed UID precondition is a 409 `Status` with reason `Conflict`, a missing pod a 404
 * `NotFound`, both with a real server's messages and `details`. With `realDeletes = false` every
 * DELETE removes the pod at once, as the fabric8 CRUD mock does.
 *
 * Lists and watches take a label selector and a field selector on `status.phase` (`=`, `!=`), as
 * a real server applies it: a pod entering the selection is sent as ADDED, one leaving it as
 * DELETED with its last state inside. A streaming list (`sendInitialEvents`) is refused with 422,
 * as by a server without the WatchList feature, so a client lists instead. A pod removed carries
 * a `deletionTimestamp` in its DELETED event, as a real server's last state of it does.
 *
 * Faults: [[onRequest]] decides, per request, an [[ApiFault]] (answers such as 429 with
 * `Retry-After`, 5xx, 401, 403; a reset connection; a slow answer); [[dropWatches]] ends every
 * open watch stream.
 */
final class PodsApi(realDeletes: Boolean = true, kubeletConfirmMs: Long = 2000L) extends AutoCloseable {
  import PodsApi._

  private val serde = new KubernetesSerialization()
  private val recorded = new ConcurrentLinkedQueue[ApiRequest]()

  // Guarded by `lock`.
  private val lock = new Object
  private val pods = mutable.HashMap.empty[(String, String), Pod]
  private val history = mutable.ArrayBuffer.empty[Event]
  private val watchers = mutable.LinkedHashSet.empty[Watcher]
  private var rv = 0L
  private var compactedRv = 0L
  @volatile private var closed = false
  /** While true, Terminating pods are never confirmed by a kubelet (their node is gone). */
  @volatile var nodeGone: Boolean = false
  private val confirmsScheduled = new java.util.concurrent.atomic.AtomicLong
  private val confirmsPutOff = new java.util.concurrent.atomic.AtomicLong

  /** Kubelet confirmations scheduled by DELETEs (one per pod that went Terminating without finalizers). */
  def kubeletConfirmsScheduled: Long = confirmsScheduled.get

  /** Kubelet confirmations that came while [[nodeGone]] and were put off (the pod stayed). */
  def kubeletConfirmsPutOff: Long = confirmsPutOff.get
  /** The fault a request meets, if any (decided before the request is served). */
  @volatile var onRequest: ApiRequest => Option[ApiFault] = (_: ApiRequest) => None

  noDelay
  private val http = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress, 0), 512)
  private val pool = Executors.newCachedThreadPool()
  private val kubelet: ScheduledExecutorService = Executors.newSingleThreadScheduledExecutor()
  http.setExecutor(pool)
  http.createContext("/", (ex: HttpExchange) => handle(ex))
  http.start()

  /** The API server URL, as `kyuubi.kubernetes.master.address` takes it. */
  val url: String = s"http://127.0.0.1:${http.getAddress.getPort}"

  /** A fabric8 client with its own identity (bearer token); watches over HTTP, no retries. */
  def client(token: String): KubernetesClient = TestClients.forUrl(url, token, onlyHttpWatches = true)

  def requests: Seq[ApiRequest] = recorded.asScala.toVector

  /** DELETE requests for single pods of `namespace` (every namespace when null). */
  def podDeletes(namespace: String = null): Seq[ApiRequest] =
    recorded.asScala.iterator.filter(r =>
      r.method == "DELETE" && r.pod.isDefined && (namespace == null || r.namespace == namespace)).toVector

  /** Watch requests whose user agent starts with `userAgent` (e.g. `kube` for podsweep's kube-rs). */
  def watches(userAgent: String): Seq[ApiRequest] =
    recorded.asScala.iterator.filter(r => r.watch && r.userAgent.startsWith(userAgent)).toVector

  /** Watch streams open now, by user agent prefix. */
  def openWatches(userAgent: String): Int = lock.synchronized(watchers.count(_.userAgent.startsWith(userAgent)))

  /** Requests this server does not implement (a correct run has none). */
  def unhandled: Seq[ApiRequest] = recorded.asScala.iterator.filter(r => r.status == 405 || r.status == 500 && r.fault.isEmpty).toVector

  /** The pod as stored now. */
  def pod(namespace: String, name: String): Option[Pod] = lock.synchronized(pods.get((namespace, name)).map(serde.clone(_)))

  /** Names of the pods stored in `namespace` (Terminating ones included). */
  def podNames(namespace: String): Set[String] = lock.synchronized(pods.keysIterator.collect { case (n, p) if n == namespace => p }.toSet)

  /** Ends every open watch stream (clients see the stream close and must watch again). */
  def dropWatches(): Unit = lock.synchronized(watchers.foreach(_.dropped = true))

  /** Forgets the event history: a watch from an older resourceVersion gets `410 Gone`. */
  def compact(): Unit = lock.synchronized {
    compactedRv = rv
    history.clear()
  }

  /** A controller removes the pod's finalizers; a Terminating pod then goes. */
  def removeFinalizers(namespace: String, name: String): Unit = lock.synchronized {
    pods.get((namespace, name)).foreach { old =>
      val p = serde.clone(old)
      p.getMetadata.setFinalizers(java.util.Collections.emptyList())
      store(namespace, p, "MODIFIED")
      if (p.getMetadata.getDeletionTimestamp != null) remove(namespace, name)
    }
  }

  private def handle(ex: HttpExchange): Unit = {
    val at = System.currentTimeMillis()
    val method = ex.getRequestMethod
    val path = ex.getRequestURI.getRawPath
    val query = PodsApi.query(ex.getRequestURI.getRawQuery)
    val bearer = Option(ex.getRequestHeaders.getFirst("Authorization"))
      .filter(_.startsWith("Bearer ")).map(_.stripPrefix("Bearer ").trim)
    val agent = Option(ex.getRequestHeaders.getFirst("User-Agent")).getOrElse("")
    val (ns, name, sub) = path match {
      case PodsPath(n, p, s) => (n, Option(p), Option(s))
      case _ => ("", None, None)
    }
    val isWatch = method == "GET" && name.isEmpty && query.get("watch").contains("true")
    val base = ApiRequest(method, path, ns, name, sub, bearer, agent, isWatch, at, 0)
    def record(code: Int, fault: Option[ApiFault] = None): Unit = recorded.add(base.copy(status = code, fault = fault))
    var keepOpen = false
    try {
      val body = new String(readAll(ex), StandardCharsets.UTF_8)
      val fault = if (closed) None else onRequest(base)
      fault match {
        case Some(ApiFault.Reset) =>
          record(0, fault)
          return // closed below without an answer
        case Some(a: ApiFault.Answer) =>
          record(a.code, fault)
          a.retryAfter.foreach(ex.getResponseHeaders.set("Retry-After", _))
          reply(ex, a.code, status(a.code, a.reason, a.message))
          return
        case Some(ApiFault.Slow(ms)) => Thread.sleep(ms)
        case None =>
      }
      path match {
        // What kube-controller-manager's root CA publisher leaves in every namespace of a real
        // cluster: podsweep reads the digest of its CA certificate as the cluster's identity.
        case PodsApi.RootCaPath(n) if method == "GET" =>
          record(200, fault)
          reply(ex, 200, s"""{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"kube-root-ca.crt",""" +
            s""""namespace":"$n","uid":"root-ca-of-$n"},"data":{"ca.crt":"pods api test CA"}}""")
          return
        case _ =>
      }
      if (!PodsPath.pattern.matcher(path).matches()) {
        record(405, fault)
        reply(ex, 405, status(405, "MethodNotAllowed", s"$method $path is not served here"))
        return
      }
      (method, name, sub) match {
        case ("GET", None, None) if isWatch && ex.getRequestHeaders.containsKey("Upgrade") =>
          // No WebSocket here: a plain 200 makes fabric8 fall back to an HTTP watch.
          record(200, fault)
          reply(ex, 200, "")
        case ("GET", None, None) if isWatch && query.contains("sendInitialEvents") =>
          record(422, fault)
          reply(ex, 422, status(422, "Invalid", "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for " +
            "watch unless the WatchList feature gate is enabled"))
        case ("GET", None, None) if isWatch =>
          record(200, fault)
          keepOpen = true
          watch(ex, ns, query, agent)
        case ("GET", None, None) =>
          record(200, fault)
          reply(ex, 200, list(ns, query))
        case ("GET", Some(p), None) =>
          val (code, json) = lock.synchronized(pods.get((ns, p))) match {
            case Some(pod) => (200, serde.asJson(pod))
            case None => (404, notFound(p))
          }
          record(code, fault)
          reply(ex, code, json)
        // A change and its record are one step under the lock: whoever sees the change (a GET,
        // a watch event) finds the request that made it recorded.
        case ("POST", None, None) =>
          val pod = serde.unmarshal(body, classOf[Pod])
          val (code, json) = lock.synchronized { val r = create(ns, pod); record(r._1, fault); r }
          reply(ex, code, json)
        case ("PUT", Some(p), Some("status")) =>
          val pod = serde.unmarshal(body, classOf[Pod])
          val (code, json) = lock.synchronized { val r = updateStatus(ns, p, pod); record(r._1, fault); r }
          reply(ex, code, json)
        case ("DELETE", Some(p), None) =>
          val options = if (body.trim.isEmpty) None else Some(serde.unmarshal(body, classOf[DeleteOptions]))
          val uid = options.flatMap(o => Option(o.getPreconditions)).flatMap(pc => Option(pc.getUid))
          val grace = options.flatMap(o => Option(o.getGracePeriodSeconds)).map(_.longValue)
          val (code, json) = lock.synchronized { val r = delete(ns, p, uid, grace); record(r._1, fault); r }
          reply(ex, code, json)
        case _ =>
          record(405, fault)
          reply(ex, 405, status(405, "MethodNotAllowed", s"$method $path is not served here"))
      }
    } catch {
      case NonFatal(e) =>
        record(500)
        scala.util.Try(reply(ex, 500, status(500, "InternalError", String.valueOf(e.getMessage).replace("\"", "'"))))
    } finally if (!keepOpen) ex.close() else scala.util.Try(ex.close())
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
    ex.sendResponseHeaders(code, if (bytes.isEmpty) -1L else bytes.length.toLong)
    if (bytes.nonEmpty) {
      val out = ex.getResponseBody
      out.write(bytes)
      out.flush()
    }
  }

  private def labels(pod: Pod): Map[String, String] =
    Option(pod.getMetadata.getLabels).map(_.asScala.toMap).getOrElse(Map.empty)

  /** Stores the pod at the next resourceVersion and tells the watchers (lock held). */
  private def store(ns: String, pod: Pod, kind: String): Pod = {
    val old = pods.get((ns, pod.getMetadata.getName))
    rv += 1
    pod.getMetadata.setResourceVersion(rv.toString)
    pods((ns, pod.getMetadata.getName)) = pod
    emit(kind, ns, pod, old)
    pod
  }

  /**
   * Removes the pod for good and tells the watchers (lock held). Its last state carries a
   * `deletionTimestamp`, as a real server's does (it sets one before it removes the pod).
   */
  private def remove(ns: String, name: String): Option[Pod] = pods.remove((ns, name)).map { old =>
    rv += 1
    val gone = serde.clone(old)
    gone.getMetadata.setResourceVersion(rv.toString)
    if (gone.getMetadata.getDeletionTimestamp == null) {
      gone.getMetadata.setDeletionTimestamp(Instant.now().toString)
      gone.getMetadata.setDeletionGracePeriodSeconds(0L)
    }
    emit("DELETED", ns, gone, Some(gone))
    gone
  }

  private def emit(kind: String, ns: String, pod: Pod, old: Option[Pod]): Unit = {
    val before = old.map { o =>
      val at = serde.clone(o)
      at.getMetadata.setResourceVersion(rv.toString)
      (phaseOf(o), serde.asJson(at))
    }
    val e = Event(rv, ns, labels(pod), kind, phaseOf(pod), serde.asJson(pod), before)
    history += e
    watchers.foreach(w => w.render(e).foreach(w.queue.add))
  }

  private def list(ns: String, query: Map[String, String]): String = {
    val selector = PodsApi.selector(query.get("labelSelector"))
    val (items, at) = lock.synchronized {
      val fields = PodsApi.fields(query.get("fieldSelector"))
      (pods.iterator.collect {
        case ((n, _), p) if n == ns && matches(selector, labels(p)) && phaseMatches(fields, phaseOf(p)) => p
      }.toVector, rv)
    }
    // Written by hand: fabric8's serializer leaves out an empty `items`, which a real server always
    // sends (and kube-rs requires).
    s"""{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"$at"},"items":""" +
      items.map(p => serde.asJson(p)).mkString("[", ",", "]}")
  }

  private def create(ns: String, pod: Pod): (Int, String) = lock.synchronized {
    val name = pod.getMetadata.getName
    if (pods.contains((ns, name)))
      (409, status(409, "AlreadyExists", s"""pods "$name" already exists""", Some(name)))
    else {
      val m = pod.getMetadata
      m.setNamespace(ns)
      m.setUid(UUID.randomUUID().toString)
      m.setCreationTimestamp(Instant.now().toString)
      (201, serde.asJson(store(ns, pod, "ADDED")))
    }
  }

  private def updateStatus(ns: String, name: String, pod: Pod): (Int, String) = lock.synchronized {
    pods.get((ns, name)) match {
      case None => (404, notFound(name))
      case Some(old) =>
        val updated = serde.clone(old)
        updated.setStatus(pod.getStatus)
        (200, serde.asJson(store(ns, updated, "MODIFIED")))
    }
  }

  private def delete(ns: String, name: String, uid: Option[String], grace: Option[Long]): (Int, String) = lock.synchronized {
    pods.get((ns, name)) match {
      case None => (404, notFound(name))
      case Some(old) if uid.exists(_ != old.getMetadata.getUid) =>
        (409, status(409, "Conflict",
          s"""Operation cannot be fulfilled on Pod "$name": Precondition failed: UID in precondition: ${uid.get}, """ +
            s"UID in object meta: ${old.getMetadata.getUid}", Some(name)))
      case Some(old) if old.getMetadata.getDeletionTimestamp != null =>
        (200, serde.asJson(old)) // already Terminating: answered again, nothing changes
      case Some(old) =>
        val finalizers = Option(old.getMetadata.getFinalizers).exists(!_.isEmpty)
        val phase = Option(old.getStatus).flatMap(s => Option(s.getPhase)).getOrElse("")
        val scheduled = Option(old.getSpec).flatMap(s => Option(s.getNodeName)).exists(_.nonEmpty)
        val immediate = !realDeletes || phase == "Succeeded" || phase == "Failed" || !scheduled
        if (immediate && !finalizers) (200, serde.asJson(remove(ns, name).get))
        else {
          val seconds = if (immediate) 0L else grace.getOrElse(Option(old.getSpec.getTerminationGracePeriodSeconds).map(_.longValue).getOrElse(30L))
          val p = serde.clone(old)
          p.getMetadata.setDeletionTimestamp(Instant.now().plusSeconds(seconds).toString)
          p.getMetadata.setDeletionGracePeriodSeconds(seconds)
          val stored = store(ns, p, "MODIFIED")
          if (!finalizers) {
            val uidNow = p.getMetadata.getUid
            confirmsScheduled.incrementAndGet()
            kubelet.schedule(new Runnable {
              override def run(): Unit = confirm(ns, name, uidNow)
            }, kubeletConfirmMs, TimeUnit.MILLISECONDS)
          }
          (200, serde.asJson(stored))
        }
    }
  }

  /** The kubelet reports the pod's containers stopped: the pod goes (unless its node is gone). */
  private def confirm(ns: String, name: String, uid: String): Unit =
    if (nodeGone) {
      confirmsPutOff.incrementAndGet()
      kubelet.schedule(new Runnable { override def run(): Unit = confirm(ns, name, uid) }, 200, TimeUnit.MILLISECONDS)
    }
    else lock.synchronized {
      pods.get((ns, name)).filter(_.getMetadata.getUid == uid).foreach(_ => remove(ns, name))
    }

  /**
   * Streams events after the requested resourceVersion, then live ones, until the client goes,
   * the server closes, [[dropWatches]], or `timeoutSeconds`. A resourceVersion older than the last
   * [[compact]] gets one ERROR event with a `410 Gone` Status, as a real server sends it.
   */
  private def watch(ex: HttpExchange, ns: String, query: Map[String, String], agent: String): Unit = {
    val from = query.get("resourceVersion").filter(_.nonEmpty).map(_.toLong).getOrElse(0L)
    val until = query.get("timeoutSeconds").filter(_.nonEmpty).map(s => System.currentTimeMillis() + s.toLong * 1000)
      .getOrElse(Long.MaxValue)
    val w = new Watcher(ns, PodsApi.selector(query.get("labelSelector")), PodsApi.fields(query.get("fieldSelector")), agent)
    val (replay, expired) = lock.synchronized {
      if (from != 0 && from < compactedRv) (Vector.empty, true)
      else {
        watchers += w
        (history.iterator.filter(_.rv > from).flatMap(w.render).toVector, false)
      }
    }
    try {
      ex.getResponseHeaders.set("Content-Type", "application/json")
      ex.sendResponseHeaders(200, 0) // chunked
      val out: OutputStream = ex.getResponseBody
      def send(json: String): Unit = {
        out.write(json.getBytes(StandardCharsets.UTF_8))
        out.write('\n')
      }
      if (expired) {
        send(s"""{"type":"ERROR","object":${status(410, "Expired", s"too old resource version: $from ($compactedRv)")}}""")
        out.flush()
      } else {
        replay.foreach(send)
        out.flush()
        // A client that asked for bookmarks gets one after each quiet second, as a real server
        // sends them: it also tells this server when the client has gone (the write fails).
        val bookmarks = query.get("allowWatchBookmarks").contains("true")
        var lastWrite = System.currentTimeMillis()
        while (!closed && !w.dropped && System.currentTimeMillis() < until) {
          val first = w.queue.poll(100, TimeUnit.MILLISECONDS)
          if (first != null) {
            send(first)
            var next = w.queue.poll()
            while (next != null) { send(next); next = w.queue.poll() }
            out.flush()
            lastWrite = System.currentTimeMillis()
          } else if (bookmarks && System.currentTimeMillis() - lastWrite >= 1000) {
            val at = lock.synchronized(rv)
            send(s"""{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"$at"}}}""")
            out.flush()
            lastWrite = System.currentTimeMillis()
          }
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
    kubelet.shutdownNow()
  }
}

object PodsApi {
  private val PodsPath = "^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(?:/([^/]+))?$".r
  private val RootCaPath = "^/api/v1/namespaces/([^/]+)/configmaps/kube-root-ca\\.crt$".r

  /**
   * A change at resourceVersion `rv`: its kind, the pod's phase and JSON, and for a change of a
   * pod that existed (or a removal) its phase and JSON before, at `rv`.
   */
  private final case class Event(
      rv: Long,
      namespace: String,
      labels: Map[String, String],
      kind: String,
      phase: String,
      json: String,
      before: Option[(String, String)])

  private def line(kind: String, json: String): String = s"""{"type":"$kind","object":$json}"""

  /** One open watch: its filters and the events waiting to be written. */
  private final class Watcher(
      val namespace: String,
      val selector: Map[String, Option[String]],
      val fields: Seq[(String, Boolean)],
      val userAgent: String) {
    val queue = new LinkedBlockingQueue[String]()
    @volatile var dropped = false

    /** The line this watch gets for `e`, if any: a pod entering the field selection is ADDED, one leaving it DELETED. */
    def render(e: Event): Option[String] =
      if (e.namespace != namespace || !matches(selector, e.labels)) None
      else if (e.kind == "DELETED") Some(line("DELETED", e.json)).filter(_ => phaseMatches(fields, e.phase))
      else {
        val now = phaseMatches(fields, e.phase)
        val was = e.before.exists(b => phaseMatches(fields, b._1))
        (now, was) match {
          case (true, true) => Some(line(e.kind, e.json))
          case (true, false) => Some(line("ADDED", e.json))
          case (false, true) => e.before.map(b => line("DELETED", b._2))
          case _ => None
        }
      }
  }

  private def phaseOf(p: Pod): String = Option(p.getStatus).flatMap(s => Option(s.getPhase)).getOrElse("")

  /** `status.phase=X` and `status.phase!=X` terms, comma-separated (all must hold): (value, equal). */
  def fields(s: Option[String]): Seq[(String, Boolean)] =
    s.toSeq.flatMap(_.split(",")).map(_.trim).filter(_.nonEmpty).map { t =>
      val (key, value, equal) = t.indexOf("!=") match {
        case i if i >= 0 => (t.take(i), t.drop(i + 2), false)
        case _ =>
          val i = t.indexOf('=')
          require(i > 0, s"bad field selector term $t")
          (t.take(i), t.drop(i + 1).stripPrefix("="), true)
      }
      require(key == "status.phase", s"field label not supported here: $key")
      (value, equal)
    }

  def phaseMatches(fields: Seq[(String, Boolean)], phase: String): Boolean =
    fields.forall { case (v, equal) => (phase == v) == equal }

  /**
   * TCP_NODELAY on accepted sockets. Without it the JDK server sends a response's headers and
   * body as two segments and the body can wait for the client's delayed ACK (Nagle): thread
   * dumps showed every client waiting on a response while the server sat idle in epoll;
   * creating 10,000 pods from 8 threads took 73 s and terminations fell up to 8 s behind
   * schedule. With it: 32 s, and terminations on time (p50 8 ms). Read once, when the first
   * server starts.
   */
  lazy val noDelay: Unit = System.setProperty("sun.net.httpserver.nodelay", "true")

  /** A Kubernetes `Status` body, as a real API server writes it. */
  def status(code: Int, reason: String, message: String, name: Option[String] = None): String = {
    val details = name.map(n => s""","details":{"name":"${esc(n)}","kind":"pods"}""").getOrElse("")
    s"""{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"${esc(message)}",""" +
      s""""reason":"$reason"$details,"code":$code}"""
  }

  private def notFound(name: String): String = status(404, "NotFound", s"""pods "$name" not found""", Some(name))

  private def esc(s: String): String = s.replace("\\", "\\\\").replace("\"", "\\\"")

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
