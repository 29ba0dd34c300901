package org.podsweep.kyuubi

import java.nio.file.{Files, Path}

import scala.collection.JavaConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import org.podsweep.PodSweeper
import org.podsweep.testkit.{KyuubiHome, KyuubiServer}
import org.scalatest.BeforeAndAfterAll
import org.scalatest.funsuite.AnyFunSuite

/**
 * The patch's keys are Kyuubi's: the patched `kyuubi-server` jar registers podsweep's keys with
 * `KyuubiConf.buildConf`, so the entries Kyuubi's settings generator (`AllKyuubiConfiguration`)
 * lists are, beyond stock Kyuubi's, exactly the keys of podsweep's key table the patch reads
 * (`PodSweeper.configKeys()`, the Rust table), with the same default, type, documentation and
 * version; and Kyuubi's own checks of each entry refuse and accept what podsweep's parser does.
 * Each server is Kyuubi's `KubernetesApplicationOperation` in its own JVM (no Kubernetes needed:
 * no scope is configured). Cancelled when Kyuubi is not built (scripts/kyuubi patched).
 */
class KyuubiConfEntriesSuite extends AnyFunSuite with BeforeAndAfterAll {
  private lazy val logDir: Path = Files.createTempDirectory("podsweep-kyuubi-conf-")
  private val Prefix = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."
  private val mapper = new ObjectMapper()

  private def conf(name: String): Map[String, String] = Map(
    "kyuubi.frontend.advertised.host" -> name,
    "kyuubi.frontend.protocols" -> "THRIFT_BINARY")

  /** Rows of `settings <prefix>` by key. */
  private def rows(server: KyuubiServer): Map[String, JsonNode] =
    mapper.readTree(server.settings(Prefix)).elements().asScala.map(r => r.get("key").asText() -> r).toMap

  /** The key table's rows the patch reads, by key. */
  private lazy val table: Map[String, JsonNode] =
    mapper.readTree(PodSweeper.configKeys()).elements().asScala
      .filter(_.get("routes").elements().asScala.exists(_.asText() == "patch"))
      .map(r => r.get("key").asText() -> r).toMap

  private def text(n: JsonNode): String = if (n == null || n.isNull) null else n.asText()

  private def strings(n: JsonNode): Seq[String] =
    if (n == null || n.isNull) Nil else n.elements().asScala.map(_.asText()).toVector

  test("the patched jar registers exactly the key table's keys, with the table's default, type, doc and version") {
    KyuubiHome.patchedMissing.foreach(why => cancel(why))
    val stock = new KyuubiServer("conf-stock", KyuubiHome.Stock, conf("conf-stock"), logDir)
    val patched = new KyuubiServer("conf-patched", KyuubiHome.Patched, conf("conf-patched"), logDir)
    try {
      val stockRows = rows(stock)
      val patchedRows = rows(patched)
      // Kyuubi's own keys under the prefix (kind, checkInterval) are in both, unchanged.
      assert(stockRows.keySet.nonEmpty && stockRows.keySet.subsetOf(patchedRows.keySet), stockRows.keySet)
      stockRows.foreach { case (k, r) => assert(patchedRows(k) == r, k) }
      val added = patchedRows.keySet -- stockRows.keySet
      val documented = table.filterNot(_._2.get("internal").asBoolean()).keySet
      assert(added == documented, s"the patch registers $added, the key table documents $documented")
      added.toSeq.sorted.foreach { k =>
        val (row, want) = (patchedRows(k), table(k))
        // A key without a default is an optional entry: Kyuubi shows its default as <undefined>.
        assert(text(row.get("default")) == Option(text(want.get("default"))).getOrElse("<undefined>"), k)
        assert(text(row.get("type")) == text(want.get("type")), k)
        assert(text(row.get("doc")) == text(want.get("doc")), k)
        // Kyuubi's form: the release the patch targets.
        assert(text(row.get("version")) == text(want.get("kyuubi_version")), k)
        assert(strings(row.get("alternatives")) == strings(want.get("alternatives")), k)
      }
      // What Kyuubi's generated settings.md shows for them (Key | Default | Meaning | Type | Since).
      info(added.toSeq.sorted.map { k =>
        val r = patchedRows(k)
        Seq(k, text(r.get("default")), text(r.get("doc")), text(r.get("type")), text(r.get("version"))).mkString("| ", " | ", " |")
      }.mkString("\n"))
      // Internal keys are registered but left out of the documentation, as Kyuubi's are.
      val internal = table.filter(_._2.get("internal").asBoolean()).keySet
      internal.foreach(k => assert(patched.check(k, "false").startsWith("ok"), k))
    } finally {
      stock.close()
      patched.close()
    }
  }

  test("Kyuubi's checks of the patch's entries refuse and accept what podsweep's parser does") {
    KyuubiHome.patchedMissing.foreach(why => cancel(why))
    val patched = new KyuubiServer("conf-checks", KyuubiHome.Patched, conf("conf-checks"), logDir)
    try {
      var checked = 0
      table.toSeq.sortBy(_._1).foreach { case (k, row) =>
        row.get("invalid").elements().asScala.map(_.asText()).foreach { bad =>
          val answer = patched.check(k, bad)
          assert(answer.startsWith("error"), s"$k = $bad: Kyuubi accepted it ($answer)")
          checked += 1
        }
        (row.get("valid").elements().asScala.map(_.asText()).toSeq ++ Option(text(row.get("default")))).foreach { good =>
          val answer = patched.check(k, good)
          assert(answer.startsWith("ok"), s"$k = $good: Kyuubi refused it ($answer)")
          checked += 1
        }
      }
      // A renamed key's earlier names are read by Kyuubi's entry when the key is absent.
      var renamed = 0
      table.toSeq.sortBy(_._1).foreach { case (k, row) =>
        val good = (row.get("valid").elements().asScala.map(_.asText()).toSeq ++ Option(text(row.get("default")))).head
        strings(row.get("alternatives")).foreach { old =>
          val answer = patched.checkAs(k, old, good)
          assert(answer == patched.check(k, good) && answer.startsWith("ok"), s"$k set as $old = $good: $answer")
          renamed += 1
        }
      }
      assert(renamed >= 2, s"$renamed deprecated names")
      info(s"$checked values checked against Kyuubi's entries, $renamed deprecated names read through withAlternative")
    } finally patched.close()
  }

  test("podsweep's log lines never print a secret of the configuration (Kyuubi's redaction rule)") {
    KyuubiHome.patchedMissing.foreach(why => cancel(why))
    val token = "tok-" + java.util.UUID.randomUUID()
    val zk = "zk-" + java.util.UUID.randomUUID().toString.take(8)
    val qps = "token-" + java.util.UUID.randomUUID().toString.take(8)
    // 1. A bad value of a key the configured pattern marks secret: podsweep's engine refuses it.
    val engine = new KyuubiServer("redact-engine", KyuubiHome.Patched, conf("redact-engine") ++ Map(
      "kyuubi.server.redaction.regex" -> "(?i)ha\\.addresses",
      "kyuubi.kubernetes.authenticate.oauthToken" -> token,
      "kyuubi.ha.client.class" -> "org.apache.kyuubi.ha.client.etcd.EtcdDiscoveryClient",
      "kyuubi.ha.addresses" -> s"http://$zk:2379,::bad::"), logDir)
    // 2. A value the default pattern marks secret (it names a token), refused by Kyuubi's own
    //    check of the patch's entry before podsweep's engine sees it.
    val kyuubi = new KyuubiServer("redact-kyuubi", KyuubiHome.Patched, conf("redact-kyuubi") ++ Map(
      "kyuubi.kubernetes.authenticate.oauthToken" -> token,
      "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.rateLimit.qps" -> qps), logDir)
    try {
      for ((server, key) <- Seq(engine -> "kyuubi.ha.addresses", kyuubi -> "rateLimit.qps")) {
        val errors = server.logLines("podsweep did not start")
        assert(errors.nonEmpty && errors.forall(_.contains(key)), server.log.mkString("\n"))
        assert(errors.exists(_.contains("*********(redacted)")), errors)
        val everything = (server.log ++ scala.io.Source.fromFile(logDir.resolve(s"${server.name}.stderr").toFile, "UTF-8").getLines()).mkString("\n")
        Seq(token, zk, qps).foreach(secret => assert(!everything.contains(secret), s"${server.name} logged $secret"))
        info(s"${server.name}: ${errors.head.take(240)}")
      }
    } finally {
      engine.close()
      kyuubi.close()
    }
  }
}
