package org.podsweep.bench

/**
 * The JVM side of `scripts/bench`: runs the named benches (all of them when none is named) in
 * this order and prints one JSON object per line on stdout; progress goes to stderr and logs to
 * a file. `--smoke` runs the smallest sizes (CI's pass that keeps the benches from rotting; its
 * figures are not checked).
 *
 * Usage: Bench [--smoke] [--log FILE] [deletes_per_pod] [lag] [failover] [observe]
 */
object Bench {
  /** Each bench prints its own lines through [[BenchOut]]. */
  val Benches: Seq[(String, Boolean => Unit)] = Seq(
    "deletes_per_pod" -> (smoke => DeletesPerPodBench.run(smoke)),
    "lag" -> (smoke => LagBench.run(smoke)),
    "failover" -> (smoke => FailoverBench.run(smoke)),
    "observe" -> (smoke => ObserveBench.run(smoke))
  )

  def main(argv: Array[String]): Unit = {
    val smoke = argv.contains("--smoke")
    val log = argv.sliding(2).collectFirst { case Array("--log", f) => f }.getOrElse("target/bench-output.log")
    val named = argv.filterNot(a => a.startsWith("--") || a == log).toSeq
    val unknown = named.filterNot(n => Benches.exists(_._1 == n))
    if (unknown.nonEmpty) {
      System.err.println(s"bench: unknown bench ${unknown.mkString(", ")} (known: ${Benches.map(_._1).mkString(", ")})")
      System.exit(2)
    }
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn")
    System.setProperty("org.slf4j.simpleLogger.log.org.podsweep", "info")
    System.setProperty("org.slf4j.simpleLogger.showDateTime", "true")
    System.setProperty("org.slf4j.simpleLogger.logFile", log)
    val chosen = if (named.isEmpty) Benches else Benches.filter(b => named.contains(b._1))
    var failed = 0
    chosen.foreach { case (name, run) =>
      BenchOut.progress(s"$name${if (smoke) " (smoke)" else ""}")
      val t0 = System.nanoTime()
      try run(smoke)
      catch {
        case t: Throwable =>
          failed += 1
          System.err.println(s"bench $name failed: $t")
          t.printStackTrace()
      }
      BenchOut.progress(f"$name done in ${(System.nanoTime() - t0) / 1e9}%.1f s")
    }
    System.exit(if (failed == 0) 0 else 1)
  }
}

/** JSON lines on stdout (`{"bench": "<name>", ...}`) and progress on stderr. */
object BenchOut {
  def progress(msg: String): Unit = System.err.println(s"[bench] $msg")

  /** Prints `{"bench": name, k1: v1, ...}` on one line; values as [[json]] encodes them. */
  def line(name: String, fields: (String, Any)*): Unit = {
    val s = json(scala.collection.immutable.ListMap(("bench" -> name) +: fields: _*))
    System.out.println(s)
    System.out.flush()
  }

  /** Numbers, strings, booleans, null/None, Option, Map (keys as strings) and sequences. */
  def json(v: Any): String = v match {
    case null | None => "null"
    case Some(x) => json(x)
    case s: String => quote(s)
    case b: Boolean => b.toString
    case d: Double => if (d.isNaN || d.isInfinite) "null" else BigDecimal(d).setScale(3, BigDecimal.RoundingMode.HALF_UP).bigDecimal.stripTrailingZeros.toPlainString
    case f: Float => json(f.toDouble)
    case n: Number => n.toString
    case m: scala.collection.Map[_, _] => m.map { case (k, x) => s"${quote(k.toString)}: ${json(x)}" }.mkString("{", ", ", "}")
    case m: java.util.Map[_, _] =>
      import scala.collection.JavaConverters._
      json(m.asScala)
    case xs: Iterable[_] => xs.map(json).mkString("[", ", ", "]")
    case xs: Array[_] => json(xs.toSeq)
    case other => quote(other.toString)
  }

  private def quote(s: String): String = {
    val b = new StringBuilder("\"")
    s.foreach {
      case '"' => b ++= "\\\""
      case '\\' => b ++= "\\\\"
      case '\n' => b ++= "\\n"
      case '\r' => b ++= "\\r"
      case '\t' => b ++= "\\t"
      case c if c < ' ' => b ++= f"\\u${c.toInt}%04x"
      case c => b += c
    }
    b += '"'
    b.toString
  }

  /** p-th percentile (0..100, nearest rank) of `xs`; NaN when empty. */
  def percentile(xs: Seq[Double], p: Double): Double =
    if (xs.isEmpty) Double.NaN
    else {
      val sorted = xs.sorted
      val rank = math.ceil(p / 100.0 * sorted.size).toInt.max(1).min(sorted.size)
      sorted(rank - 1)
    }

  def median(xs: Seq[Double]): Double = {
    val s = xs.sorted
    if (s.isEmpty) Double.NaN
    else if (s.size % 2 == 1) s(s.size / 2)
    else (s(s.size / 2 - 1) + s(s.size / 2)) / 2
  }
}
