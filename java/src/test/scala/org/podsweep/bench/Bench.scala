package org.podsweep.bench

import org.podsweep.testkit.{RealKube, TestApi}

/**
 * The JVM side of `scripts/bench`: runs the named benches (all of them when none is named) in
 * this order and prints one JSON object per line on stdout; progress goes to stderr and logs to
 * a file. `--smoke` runs the smallest sizes (CI's pass that keeps the benches from rotting; its
 * figures are not checked).
 *
 * Usage: Bench [--smoke] [--log FILE] [deletes_per_pod] [lag] [drain] [failover] [observe]
 *
 * `deletes_per_pod`, `lag` and `drain` run on a real kube-apiserver (scripts/kube) and count DELETEs
 * from its audit log; `PODSWEEP_BENCH_API=mock|pods-api` picks a test API server instead (see
 * [[BenchApi]]).
 */
object Bench {
  /** Each bench prints its own lines through [[BenchOut]]. */
  val Benches: Seq[(String, Boolean => Unit)] = Seq(
    "deletes_per_pod" -> (smoke => DeletesPerPodBench.run(smoke)),
    "lag" -> (smoke => LagBench.run(smoke)),
    "drain" -> (smoke => DrainBench.run(smoke)),
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

/**
 * The API server the benches that send DELETEs run on: a real kube-apiserver
 * ([[org.podsweep.testkit.RealKube]], built by scripts/kube; DELETEs counted from its audit log) by
 * default; `PODSWEEP_BENCH_API` = `mock` (the fabric8 CRUD mock) or `pods-api` (the bench's own
 * [[org.podsweep.testkit.PodsApi]]) picks a test one (their own request logs). When no
 * kube-apiserver is built and none is asked for, a bench falls back to its test server and its
 * lines say why (`api_server_fallback`).
 */
object BenchApi {
  val EnvVar = "PODSWEEP_BENCH_API"

  /** Which API server, and why not a real one when it is not. */
  final case class Choice(name: String, fallback: Option[String])

  def choose(bench: String, fallback: String): Choice =
    sys.env.get(EnvVar).map(_.trim).filter(_.nonEmpty) match {
      case Some(asked) =>
        val name = if (asked == "real" || asked == "kube") "kube-apiserver" else asked
        require(TestApi.Names.contains(name), s"$EnvVar=$asked: one of ${TestApi.Names.mkString(", ")}")
        if (name == "kube-apiserver") RealKube.missing.foreach(w => throw new IllegalStateException(s"$EnvVar=$asked: $w"))
        Choice(name, None)
      case None =>
        RealKube.missing match {
          case None => Choice("kube-apiserver", None)
          case Some(why) =>
            BenchOut.progress(s"$bench: no real API server ($why): running on $fallback")
            Choice(fallback, Some(why))
        }
    }

  /**
   * The API servers of one bench's runs: a fresh one for each run, or one for all of them
   * (`shared`: the smoke pass, where a real control plane's start-up, about 5 s, would dominate).
   */
  final class Pool(val choice: Choice, shared: Boolean) extends AutoCloseable {
    private var one: Option[TestApi] = None
    @volatile private var last: String = choice.name

    /** The name of the API server started last (e.g. `kube-apiserver-1.34.4`), else the chosen kind. */
    def lastName: String = last

    def use[A](f: TestApi => A): A =
      if (shared) f(synchronized { if (one.isEmpty) one = Some(start()); one.get })
      else {
        val api = start()
        try f(api) finally { api.close(); removeDir(api) }
      }

    /** A fresh real API server's directory (etcd's data, the audit log: ~100 MB a run), once stopped. */
    private def removeDir(api: TestApi): Unit = api match {
      case k: RealKube =>
        scala.util.Try {
          val up = k.dir.resolveSibling(k.dir.getFileName.toString + ".up.log")
          val walk = java.nio.file.Files.walk(k.dir)
          try walk.sorted(java.util.Comparator.reverseOrder[java.nio.file.Path]()).forEach(p => java.nio.file.Files.deleteIfExists(p))
          finally walk.close()
          java.nio.file.Files.deleteIfExists(up)
        }
      case _ => ()
    }

    private def start(): TestApi = {
      val t0 = System.nanoTime()
      val api = TestApi.start(choice.name)
      last = api.name
      BenchOut.progress(f"API server ${api.name} at ${api.url} up in ${(System.nanoTime() - t0) / 1e9}%.1f s")
      api
    }

    /** The fields naming the API server, where the DELETE counts come from, and any fallback. */
    def fields(api: TestApi): Seq[(String, Any)] = BenchApi.fields(api) ++ choice.fallback.map("api_server_fallback" -> _)

    override def close(): Unit = synchronized {
      one.foreach { a => scala.util.Try(a.close()); removeDir(a) }
      one = None
    }
  }

  /** `api_server` (e.g. `kube-apiserver-1.34.4`, `mock`, `pods-api`) and `count_source`. */
  def fields(api: TestApi): Seq[(String, Any)] = Seq(
    "api_server" -> api.name,
    "count_source" -> (api match {
      case _: RealKube => "kube-apiserver audit log (requestReceivedTimestamp)"
      case _ => "the test API server's request log"
    }))

  /** API writes per driver pod created as a kubelet leaves it: a real server needs a status write too. */
  def writesPerCreatedPod(api: TestApi, running: Boolean): Int = api match {
    case _: RealKube if running => 2
    case _ => 1
  }

  /** CPU seconds (user + system) kube-apiserver and its etcd used so far; None for a test API server. */
  def controlPlaneCpuSeconds(api: TestApi): Option[Double] = api match {
    case k: RealKube =>
      val etcd = scala.util.Try(new String(java.nio.file.Files.readAllBytes(k.dir.resolve("etcd.pid"))).trim.toLong).toOption
      val pids = Seq(k.apiserverPid) ++ etcd
      scala.util.Try(pids.map { pid =>
        val stat = new String(java.nio.file.Files.readAllBytes(java.nio.file.Paths.get(s"/proc/$pid/stat")))
        // Fields after the command (which may hold spaces): state is field 3, utime 14, stime 15.
        val f = stat.substring(stat.lastIndexOf(')') + 2).split(" ")
        (f(11).toLong + f(12).toLong) / 100.0
      }.sum).toOption
    case _ => None
  }

  def delta(a: Option[Double], b: Option[Double]): Option[Double] = for (x <- a; y <- b) yield y - x

  /** DELETEs by answer code, e.g. `{"200": 100, "404": 3}`. */
  def codes(ds: Seq[org.podsweep.testkit.Recorded]): scala.collection.immutable.ListMap[String, Int] =
    scala.collection.immutable.ListMap(ds.groupBy(_.status).toSeq.sortBy(_._1).map { case (c, v) => c.toString -> v.size }: _*)
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
