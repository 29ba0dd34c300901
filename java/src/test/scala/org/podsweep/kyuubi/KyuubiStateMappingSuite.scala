package org.podsweep.kyuubi

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path, Paths}

import scala.collection.JavaConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import io.fabric8.kubernetes.api.model.Pod
import io.fabric8.kubernetes.client.utils.Serialization
import org.podsweep.PodEvent
import org.podsweep.fabric8.KyuubiPodObserver
import org.podsweep.fabric8.KyuubiPodObserver.StateSource
import org.podsweep.testkit.{KyuubiHome, KyuubiServer}
import org.scalatest.funsuite.AnyFunSuite

/**
 * One table of driver pods (`tests/data/kyuubi-pods.json`), three readers: Kyuubi 1.12.0's own
 * `KubernetesApplicationOperation.toApplicationState` (the stock class, in its own JVM), podsweep's
 * fabric8 adapter, and (self-watch mode) the Rust engine. The table names the state for every state
 * source and event and podsweep's termination time; all readers must agree with it.
 */
class KyuubiStateMappingSuite extends AnyFunSuite {
  import KyuubiStateMappingSuite._

  test("podsweep's adapter maps every pod of the table as Kyuubi 1.12.0 does, with the table's termination time") {
    val wrong = for {
      c <- cases
      (key, expected) <- c.states.toSeq ++ c.terminatedAt.toSeq.map { case (k, v) => s"terminatedAt/$k" -> v }
      got = adapter(c, key)
      if got != expected
    } yield s"${c.name} $key: adapter $got, table $expected"
    assert(wrong.isEmpty, wrong.mkString("\n", "\n", ""))
  }

  test("the table is what Kyuubi 1.12.0's own class computes (stock KubernetesApplicationOperation)") {
    KyuubiHome.stockMissing.foreach(why => cancel(why))
    val dir = Files.createTempDirectory("podsweep-mapping-")
    val podsFile = dir.resolve("pods.json")
    Files.write(podsFile, cases.map(_.podJson).mkString("[", ",", "]").getBytes(StandardCharsets.UTF_8))
    val server = new KyuubiServer("mapping", KyuubiHome.Stock, Map("kyuubi.frontend.protocols" -> "THRIFT_BINARY"), dir)
    val kyuubi = try {
      assert(server.mapStates(podsFile, dir.resolve("kyuubi.json")) == cases.size)
      val out = mapper.readTree(dir.resolve("kyuubi.json").toFile)
      out.elements().asScala.map { row =>
        row.get("name").asText() -> row.get("states").fields().asScala.map(e => e.getKey -> e.getValue.asText()).toMap
      }.toMap
    } finally server.close()
    val wrong = for {
      c <- cases
      key <- KyuubiKeys
      tableKey = key.replace("/ADD", "").replace("/UPDATE", "")
      got = kyuubi(c.name)(key)
      if got != c.states(tableKey) || got != adapter(c, tableKey)
    } yield s"${c.name} $key: Kyuubi $got, table ${c.states(tableKey)}, adapter ${adapter(c, tableKey)}"
    assert(wrong.isEmpty, wrong.mkString("\n", "\n", ""))
  }
}

object KyuubiStateMappingSuite {
  private val mapper = new ObjectMapper()

  final case class Case(name: String, pod: Pod, podJson: String, states: Map[String, String], terminatedAt: Map[String, String])

  /** The table's state sources: (source, configured state container). */
  val Sources: Map[String, (StateSource, String)] = Map(
    "POD" -> (StateSource.POD, "spark-kubernetes-driver"),
    "CONTAINER" -> (StateSource.CONTAINER, "spark-kubernetes-driver"),
    "CONTAINER_UPPER" -> (StateSource.CONTAINER, "SPARK-KUBERNETES-DRIVER"))

  /** The keys KyuubiProcess's `map` writes: every source with every event. */
  val KyuubiKeys: Seq[String] = for (s <- Seq("POD", "CONTAINER", "CONTAINER_UPPER"); e <- Seq("ADD", "UPDATE", "DELETE")) yield s"$s/$e"

  val tablePath: Path = Paths.get(System.getProperty("podsweep.repo", ".."), "tests", "data", "kyuubi-pods.json")

  lazy val cases: Seq[Case] = {
    val root: JsonNode = mapper.readTree(tablePath.toFile)
    root.get("cases").elements().asScala.map { c =>
      def strings(n: JsonNode): Map[String, String] =
        n.fields().asScala.map(e => e.getKey -> (if (e.getValue.isNull) "null" else e.getValue.asText())).toMap
      val podJson = mapper.writeValueAsString(c.get("pod"))
      Case(c.get("name").asText(), Serialization.unmarshal(podJson, classOf[Pod]), podJson,
        strings(c.get("states")), strings(c.get("terminatedAt")))
    }.toVector
  }

  /** The adapter's answer for a table key: a state (`POD`, `CONTAINER/DELETE`, ...) or `terminatedAt/<source>`. */
  def adapter(c: Case, key: String): String =
    if (key.startsWith("terminatedAt/")) {
      val (source, container) = Sources(key.stripPrefix("terminatedAt/"))
      val t = KyuubiPodObserver.terminatedAtMillis(c.pod, source, container)
      if (t == 0) "null" else java.time.Instant.ofEpochMilli(t).toString
    } else {
      val (sourceKey, event) = key.split("/") match {
        case Array(s, "DELETE") => (s, PodEvent.DELETE)
        case Array(s) => (s, PodEvent.UPDATE)
        case _ => sys.error(s"bad key $key")
      }
      val (source, container) = Sources(sourceKey)
      KyuubiPodObserver.applicationState(c.pod, source, container, event)
    }
}
