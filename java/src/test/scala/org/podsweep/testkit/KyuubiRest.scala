package org.podsweep.testkit

import java.net.{HttpURLConnection, URL}
import java.nio.charset.StandardCharsets
import java.util.Base64

import scala.collection.JavaConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}

/** A batch as Kyuubi's REST API reports it (`GET /api/v1/batches/<id>`). */
final case class KyuubiBatch(id: String, state: String, appId: Option[String], appState: Option[String],
    appDiagnostic: Option[String], kyuubiInstance: Option[String]) {
  def terminal: Boolean = Set("FINISHED", "ERROR", "CANCELED", "CLOSED").contains(state)
}

/**
 * A client of one Kyuubi server's batch REST API (`/api/v1/batches`), as an operator's tool calls it:
 * JSON over HTTP, the user in HTTP Basic (the server authenticates nobody: kyuubi.authentication NONE).
 */
final class KyuubiRest(val baseUrl: String, user: String = "podsweep") {
  private val json = new ObjectMapper()
  private val auth = "Basic " + Base64.getEncoder.encodeToString(s"$user:".getBytes(StandardCharsets.UTF_8))

  private def send(method: String, path: String, body: Option[String]): (Int, String) = {
    val c = new URL(baseUrl + path).openConnection().asInstanceOf[HttpURLConnection]
    try {
      c.setConnectTimeout(5000)
      c.setReadTimeout(60000)
      c.setRequestMethod(method)
      c.setRequestProperty("Authorization", auth)
      c.setRequestProperty("Accept", "application/json")
      body.foreach { s =>
        c.setDoOutput(true)
        c.setRequestProperty("Content-Type", "application/json")
        val out = c.getOutputStream
        try out.write(s.getBytes(StandardCharsets.UTF_8)) finally out.close()
      }
      val code = c.getResponseCode
      val in = Option(if (code / 100 == 2) c.getInputStream else c.getErrorStream)
      val text = in.map { i =>
        try new String(readAll(i), StandardCharsets.UTF_8) finally i.close()
      }.getOrElse("")
      (code, text)
    } finally c.disconnect()
  }

  private def readAll(in: java.io.InputStream): Array[Byte] = {
    val out = new java.io.ByteArrayOutputStream()
    val buf = new Array[Byte](8192)
    var n = in.read(buf)
    while (n >= 0) { out.write(buf, 0, n); n = in.read(buf) }
    out.toByteArray
  }

  private def ok(what: String, r: (Int, String)): JsonNode = {
    if (r._1 / 100 != 2) throw new IllegalStateException(s"$what at $baseUrl: HTTP ${r._1}: ${r._2}")
    json.readTree(r._2)
  }

  private def batch(n: JsonNode): KyuubiBatch = {
    def o(f: String) = Option(n.get(f)).filterNot(_.isNull).map(_.asText()).filter(_.nonEmpty)
    KyuubiBatch(o("id").getOrElse(""), o("state").getOrElse(""), o("appId"), o("appState"), o("appDiagnostic"), o("kyuubiInstance"))
  }

  /** `POST /api/v1/batches`: a batch of type SPARK; returns it as created. */
  def submit(name: String, className: String, resource: String, conf: Map[String, String], args: Seq[String] = Nil): KyuubiBatch = {
    val req = json.createObjectNode()
    req.put("batchType", "SPARK").put("resource", resource).put("className", className).put("name", name)
    val c = req.putObject("conf")
    conf.foreach { case (k, v) => c.put(k, v) }
    val a = req.putArray("args")
    args.foreach(a.add)
    batch(ok("POST /api/v1/batches", send("POST", "/api/v1/batches", Some(json.writeValueAsString(req)))))
  }

  /** `GET /api/v1/batches/<id>`. */
  def get(id: String): KyuubiBatch = batch(ok(s"GET batch $id", send("GET", s"/api/v1/batches/$id", None)))

  /** `DELETE /api/v1/batches/<id>`: Kyuubi closes the batch, killing its application; (success, message). */
  def cancel(id: String): (Boolean, String) = {
    val n = ok(s"DELETE batch $id", send("DELETE", s"/api/v1/batches/$id", None))
    (Option(n.get("success")).exists(_.asBoolean()), Option(n.get("msg")).map(_.asText()).getOrElse(""))
  }

  /** The last lines of a batch's submission log (`GET /api/v1/batches/<id>/localLog`). */
  def localLog(id: String, size: Int = 200): Seq[String] = {
    val r = send("GET", s"/api/v1/batches/$id/localLog?from=0&size=$size", None)
    if (r._1 / 100 != 2) Seq(s"HTTP ${r._1}: ${r._2}")
    else Option(json.readTree(r._2).get("logRowSet")).toSeq.flatMap(_.elements().asScala.map(_.asText()))
  }
}
