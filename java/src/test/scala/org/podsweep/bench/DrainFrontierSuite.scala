package org.podsweep.bench

import org.scalatest.funsuite.AnyFunSuite

/** The drain bench's judgement of a contender against the raw client's curve (no server). */
class DrainFrontierSuite extends AnyFunSuite {
  private def raw(n: Int, rate: Double, p99: Double, idle: Double = 4.0) =
    FrontierPoint(s"raw-$n", Some(n), rate, p99, idle, None, None)
  private def other(label: String, rate: Double, p99: Double) =
    FrontierPoint(label, None, rate, p99, 4.0, Some(1.5), Some(0.5))

  // Listed out of order: the curve is ordered by rate.
  private val curve = Seq(raw(4, 400, 20), raw(1, 100, 8), raw(2, 200, 10, idle = 6), raw(8, 500, 60))

  test("the curve is linear between raw points, from the median idle p99 at rate 0, flat past the fastest") {
    def at(r: Double) = DrainFrontier.curveAt(curve, r).get
    assert(at(100) == ((8.0, false)))
    assert(at(300) == ((15.0, false)))
    assert(at(450) == ((40.0, false)))
    assert(at(50) == ((6.0, false))) // between (0, 4) and (100, 8)
    assert(at(500) == ((60.0, false)))
    assert(at(600) == ((60.0, true)))
    assert(DrainFrontier.curveAt(Nil, 100).isEmpty)
    assert(DrainFrontier.curveAt(curve, Double.NaN).isEmpty)
  }

  test("a contender within 1.1 x the curve at its rate and at least half the raw best passes") {
    val s = DrainFrontier.summary(curve :+ other("podsweep-default", 300, 16) :+ other("stock", 200, 30), "podsweep-default").toMap
    assert(s("raw_best_deletes_per_s") == Some(500.0) && s("raw_best_in_flight") == Some(8))
    assert(s("judged_p99_over_curve") == Some(16.0 / 15))
    assert(s("judged_of_raw_best") == Some(0.6))
    assert(s("on_frontier") == true && s("fast_enough") == true && s("pass") == true)
    assert(s("verdict").toString.startsWith("pass: "))
    val contenders = s("contenders").asInstanceOf[Seq[Map[String, Any]]]
    assert(contenders.map(_("label")) == Seq("podsweep-default", "stock"))
    assert(contenders(1)("p99_over_curve") == Some(3.0))
  }

  test("above the curve, or too slow, fails and says which") {
    val high = DrainFrontier.summary(curve :+ other("podsweep-default", 450, 60), "podsweep-default").toMap
    assert(high("judged_p99_over_curve") == Some(1.5) && high("on_frontier") == false && high("pass") == false)
    assert(high("verdict").toString.startsWith("fail: "))
    val slow = DrainFrontier.summary(curve :+ other("podsweep-default", 200, 10), "podsweep-default").toMap
    assert(slow("on_frontier") == true && slow("judged_of_raw_best") == Some(0.4) && slow("pass") == false)
    val missing = DrainFrontier.summary(curve, "podsweep-default").toMap
    assert(missing("pass") == false && missing("judged_p99_over_curve") == None)
  }

  test("variants name their keys, relative to the cleanup prefix unless they are kyuubi.* keys") {
    val v = DrainBench.variants("ceiling-100:rateLimit.qps=100; two:maxInFlight=2,kyuubi.ha.x=y")
    assert(v.map(_._1) == Seq("ceiling-100", "two"))
    assert(v(0)._2 == Map("kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.rateLimit.qps" -> "100"))
    assert(v(1)._2("kyuubi.ha.x") == "y")
    assert(DrainBench.variants("").isEmpty)
    val reserved = Seq(DrainBench.DefaultLabel, DrainBench.PatchedLabel, DrainBench.ColdLabel).map(l => s"$l:maxInFlight=1")
    for (bad <- Seq("noColon", "Upper:maxInFlight=1", "x:novalue") ++ reserved)
      assert(intercept[IllegalArgumentException](DrainBench.variants(bad)).getMessage.contains(DrainBench.VariantsEnv), bad)
  }
}
