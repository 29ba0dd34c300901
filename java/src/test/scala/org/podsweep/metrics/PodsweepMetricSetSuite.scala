package org.podsweep.metrics

import java.util.concurrent.TimeUnit

import scala.collection.JavaConverters._

import com.codahale.metrics.{Gauge, MetricRegistry}
import org.podsweep.{LocalSweeper, PodSweeper, ScopeStatus}
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

class PodsweepMetricSetSuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(20, Seconds), Span(50, Millis))

  private val perScope = Seq("leader", "leadership_transitions", "leaderless_ms", "tracked", "scheduled", "due",
    "inflight", "retries", "cancelled", "oldest_overdue_ms", "deletes.sent", "healthy", "lag.count",
    "lag.p50_seconds", "lag.p99_seconds", "lag.max_seconds", "paused", "pause_ms", "paused_until_ms", "restarts",
    "queued", "queued_max", "capped", "kept", "annotations_malformed", "events.sent", "events.failed",
    "events.dropped", "election.layout", "election.legacy") ++
    PodsweepMetricSet.OUTCOMES.asScala.map("deletes." + _) ++ PodsweepMetricSet.PAUSES.asScala.map(r => s"pause.${r}_ms")

  private def value(r: MetricRegistry, name: String): Any = {
    val g = r.getGauges.get(name)
    assert(g != null, s"no gauge $name in ${r.getNames.asScala.mkString(", ")}")
    g.asInstanceOf[Gauge[_]].getValue
  }

  test("scope segments: lower case, [a-z0-9_] only, absent parts are 'default'") {
    assert(PodsweepMetricSet.scopeSegments(null, "spark") == "default.spark")
    assert(PodsweepMetricSet.scopeSegments("", null) == "default.default")
    assert(PodsweepMetricSet.scopeSegments("Kind-Dev", "jobs.x") == "kind_dev.jobs_x")
    assert(PodsweepMetricSet.scopeSegments("arn:aws:eks:eu/c1", "team_a") == "arn_aws_eks_eu_c1.team_a")
  }

  test("register(): Kyuubi-style gauge names and values per scope; new scopes on the next call") {
    val s = LocalSweeper.create("metrics:1")
    val registry = new MetricRegistry
    val set = new PodsweepMetricSet(s, 0, TimeUnit.MILLISECONDS)
    try {
      assert(set.register(registry) == 1) // only the server-wide gauge while no scope is known
      Seq("p1", "p2", "p3").foreach(LocalSweeper.finished(s, null, "spark", _))
      eventually(assert(set.register(registry) == perScope.size))
      val base = "kyuubi.kubernetes.cleanup.default.spark"
      perScope.foreach(n => assert(registry.getNames.contains(s"$base.$n"), n))
      assert(registry.getNames.asScala.forall(n => n.matches("kyuubi(\\.[a-z0-9_]+)+")), registry.getNames)
      eventually {
        assert(value(registry, s"$base.tracked") == 3L)
        assert(value(registry, s"$base.scheduled") == 3L)
        assert(value(registry, s"$base.leader") == 1L)
      }
      assert(value(registry, s"$base.healthy") == 1L)
      assert(value(registry, s"$base.due") == 0L && value(registry, s"$base.inflight") == 0L)
      assert(value(registry, s"$base.deletes.accepted") == 0L && value(registry, s"$base.deletes.sent") == 0L)
      assert(value(registry, s"$base.lag.count") == 0L)
      // Issue 32: the retention and Events counters of the status are gauges too.
      Seq("capped", "kept", "annotations_malformed", "events.sent", "events.failed", "events.dropped")
        .foreach(n => assert(value(registry, s"$base.$n") == 0L, n))
      // The election's key: this local sweeper's scopes are elected under their own (URL) key,
      // with no podsweep 0.1 election before it.
      eventually(assert(value(registry, s"$base.election.layout") == 1L))
      assert(value(registry, s"$base.election.legacy") == 0L)
      assert(value(registry, s"$base.lag.p50_seconds").asInstanceOf[Double].isNaN) // no DELETE yet
      assert(value(registry, s"$base.lag.max_seconds") == 0.0)
      assert(value(registry, "kyuubi.kubernetes.cleanup.log_records_dropped").asInstanceOf[Long] >= 0)

      // A new scope shows up at run time: only its gauges are added; repeating adds nothing.
      LocalSweeper.finished(s, "Kind-Dev", "spark-jobs", "q1")
      eventually(assert(set.register(registry) == perScope.size))
      assert(set.register(registry) == 0)
      eventually(assert(value(registry, "kyuubi.kubernetes.cleanup.kind_dev.spark_jobs.tracked") == 1L))
      assert(value(registry, s"$base.tracked") == 3L)

      // A closed sweeper: gauges read null (reporters skip them) and never throw.
      s.close()
      assert(value(registry, s"$base.tracked") == null)
      assert(value(registry, "kyuubi.kubernetes.cleanup.log_records_dropped") == null)
      set.unregister(registry)
      assert(registry.getNames.isEmpty)
    } finally s.close()
  }

  test("issue 20: a scope held back reads paused, with its cause and its end") {
    // The API server of LocalSweeper's conf is a closed port: every DELETE fails (transport) and
    // waits for its retry, so the scope is held back by the backoff.
    val conf = LocalSweeper.conf + ("kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "PT0.1S")
    val s = PodSweeper.create(conf.asJava, "metrics:pause")
    try {
      val registry = new MetricRegistry
      val set = new PodsweepMetricSet(s, 0, TimeUnit.MILLISECONDS)
      LocalSweeper.finished(s, null, "held", "h1")
      eventually {
        val st = ScopeStatus.parse(s.scopeStatus(null, "held"))
        assert(st.paused && st.pauseReason == "backoff", st)
        assert(st.pausedUntilMs > System.currentTimeMillis() - 1000, st)
        assert(st.pauses.get(0).get("detail").toString.contains("transport"), st)
      }
      set.register(registry)
      val base = "kyuubi.kubernetes.cleanup.default.held"
      eventually {
        assert(value(registry, s"$base.paused") == 1L)
        assert(value(registry, s"$base.paused_until_ms").asInstanceOf[Long] > 0L)
        assert(value(registry, s"$base.pause.retry_after_ms") == 0L)
        assert(value(registry, s"$base.pause.backoff_ms").asInstanceOf[Long] >= 0L)
      }
      assert(value(registry, s"$base.healthy") == 1L, "a backoff alone is healthy")
    } finally s.close()
  }

  test("getMetrics() works with MetricRegistry.registerAll; colliding scopes get distinct names") {
    // A context `default` with an API server of its own: another cluster than the one of no
    // context, so another scope task (scopes naming the same cluster share one), whose metric
    // names collide with the first one's.
    val conf = LocalSweeper.conf + ("kyuubi.kubernetes.default.master.address" -> "http://127.0.0.1:10")
    val s = PodSweeper.create(conf.asJava, "metrics:2")
    try {
      LocalSweeper.finished(s, null, "spark", "a")
      LocalSweeper.finished(s, "default", "spark", "b")
      eventually(assert(s.statusAll().split("\"scope\"").length == 3))
      val registry = new MetricRegistry
      registry.registerAll(new PodsweepMetricSet(s))
      val bases = registry.getNames.asScala.filter(_.endsWith(".tracked")).map(_.stripSuffix(".tracked")).toSet
      assert(bases.size == 2, bases)
      assert(bases.contains("kyuubi.kubernetes.cleanup.default.spark"), bases)
      assert(bases.exists(_.matches("kyuubi\\.kubernetes\\.cleanup\\.default\\.spark_[0-9a-f]{8}")), bases)
    } finally s.close()
  }

  test("gauges share one statusAll snapshot per cache period (1 s by default)") {
    val s = LocalSweeper.create("metrics:3")
    try {
      LocalSweeper.finished(s, null, "cache", "c1")
      eventually(assert(ScopeStatus.parse(s.scopeStatus(null, "cache")).tracked == 1))
      val set = new PodsweepMetricSet(s)
      val t0 = System.nanoTime()
      val tracked = set.getMetrics.get("kyuubi.kubernetes.cleanup.default.cache.tracked").asInstanceOf[Gauge[Number]]
      assert(tracked.getValue == 1L)
      LocalSweeper.finished(s, null, "cache", "c2")
      eventually(assert(ScopeStatus.parse(s.scopeStatus(null, "cache")).tracked == 2))
      val cached = tracked.getValue
      if (System.nanoTime() - t0 < TimeUnit.MILLISECONDS.toNanos(900)) {
        assert(cached == 1L, "a snapshot younger than the cache period is reused")
      }
      eventually(assert(tracked.getValue == 2L))
      assert(System.nanoTime() - t0 >= TimeUnit.MILLISECONDS.toNanos(1000))
    } finally s.close()
  }
}
