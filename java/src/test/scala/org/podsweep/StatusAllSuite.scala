package org.podsweep

import scala.collection.JavaConverters._

import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

object LocalSweeper {
  /** A server without HA (it leads every scope alone), cleanup kind ALL, nothing due for an hour. */
  def conf: Map[String, String] = Map(
    "kyuubi.kubernetes.master.address" -> "http://127.0.0.1:9",
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind" -> "ALL",
    "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "PT1H")

  def create(id: String): PodSweeper = PodSweeper.create(conf.asJava, id)

  /** A terminated Spark driver pod as Kyuubi would report it. */
  def finished(s: PodSweeper, context: String, namespace: String, name: String): Unit =
    s.observe(context, namespace, PodEvent.UPDATE, s"tag-$name", name, s"uid-$name", "FINISHED", true,
      System.currentTimeMillis(), false)
}

class StatusAllSuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(20, Seconds), Span(50, Millis))

  test("parseAll reads an array of scope objects and rejects anything else") {
    val all = ScopeStatus.parseAll(
      """[{"scope":"a:b","context":"a","namespace":"b","tracked":2,"outcomes":{"accepted":1}},
        | {"scope":"<default context>:x","context":null,"namespace":"x","tracked":0,"s":"q\"\\"}]""".stripMargin)
    assert(all.size == 2)
    assert(all.get(0).scope == "a:b" && all.get(0).tracked == 2 && all.get(0).outcome("accepted") == 1)
    assert(all.get(1).string("context") == null && all.get(1).string("namespace") == "x")
    // Each element's json() is valid JSON for parse().
    assert(ScopeStatus.parse(all.get(1).json).string("s") == "q\"\\")
    assert(ScopeStatus.parseAll("[]").isEmpty)
    Seq(null, "", "{}", "[1]", "[{}", "[{}] x").foreach(bad => intercept[IllegalArgumentException](ScopeStatus.parseAll(bad)))
  }

  test("statusAll lists every scope seen, sorted, with the scopeStatus fields") {
    val s = LocalSweeper.create("status-all:1")
    try {
      assert(ScopeStatus.parseAll(s.statusAll()).isEmpty)
      LocalSweeper.finished(s, "ctx", "ns-b", "p1")
      LocalSweeper.finished(s, "ctx", "ns-b", "p2")
      LocalSweeper.finished(s, null, "ns-a", "p3")
      eventually {
        val all = ScopeStatus.parseAll(s.statusAll()).asScala
        assert(all.map(st => (st.string("context"), st.string("namespace"))) == Seq((null, "ns-a"), ("ctx", "ns-b")))
        assert(all.map(_.tracked) == Seq(1L, 2L))
        all.foreach { st =>
          assert(st.number("leader") == 1 && st.string("server_id") == "status-all:1", st)
          Seq("leadership_transitions", "scheduled", "due", "inflight", "deletes_sent", "retries", "cancelled",
            "leaderless_ms", "oldest_overdue_ms", "log_records_dropped").foreach(f => assert(st.number(f) >= 0, s"$f: $st"))
          assert(st.fields.get("healthy") == true && st.outcome("accepted") == 0, st)
          assert(st.fields.get("lag").isInstanceOf[java.util.Map[_, _]], st)
        }
        // The same snapshot as scopeStatus for that scope (modulo timing fields).
        assert(ScopeStatus.parse(s.scopeStatus("ctx", "ns-b")).tracked == 2)
      }
    } finally s.close()
    intercept[IllegalStateException](s.statusAll())
  }
}
