package org.podsweep.alerts

import java.io.File
import java.nio.file.{Files, Path}
import java.time.Instant
import java.time.temporal.ChronoUnit

import scala.collection.JavaConverters._
import scala.io.Source
import scala.util.Try

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory
import org.podsweep.ScopeStatus
import org.podsweep.realapi.RealApi
import org.podsweep.testkit.{HaBackend, KyuubiHome, KyuubiServer, PodsweepDaemon, RealKube}
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * The alert rules of docs/alerts/podsweep-rules.yaml against what podsweep really exposes, on a
 * real kube-apiserver: a daemon, then a whole patched Kyuubi 1.12.0 server with its Prometheus
 * reporter, each driven into the states the rules are about (see [[AlertStates]]): one scope per
 * state at once (healthy and busy; every DELETE 403; every DELETE refused by an admission policy
 * with 422; no `list`, or no `watch`; refused by the allow lists), then ZooKeeper stopped (HA
 * session lost, no leader), then the server stopped (nothing reports). Each state's metrics
 * endpoint is scraped twice, [[Capture.inputSeries]] turns the two scrapes into promtool's input
 * series, and `promtool test rules` must find exactly the expected alerts of the group firing at
 * minute 30 (every other one silent). The captures and the promtool test files go to a temporary
 * directory, and to docs/alerts/captures/ with PODSWEEP_WRITE_ALERT_CAPTURES=1. Further tests,
 * without the API server: every series of the hand-written docs/alerts/podsweep-rules.test.yaml
 * is one a capture has (name and label names), the runbook names only gauges a capture has, and
 * the committed captures' promtool tests pass. Fails (never cancels) when the API server, the
 * daemon, the patched Kyuubi or promtool is missing.
 */
class AlertRulesSuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(120, Seconds), Span(500, Millis))
  import AlertStates._
  import AlertRulesSuite._

  private lazy val kube: RealKube = RealKube.sharedInstance
  private lazy val out: Path = Files.createTempDirectory("podsweep-alerts-")
  private val P = RealApi.P
  /** Captures of this run, by source. */
  private val live = scala.collection.mutable.LinkedHashMap.empty[String, Seq[Capture]]

  private def need(kyuubi: Boolean): Unit = {
    val missing = RealKube.missing.toSeq ++ PodsweepDaemon.missing ++ promtoolMissing ++
      (if (kyuubi) KyuubiHome.patchedMissing.toSeq else Nil)
    if (missing.nonEmpty) fail(missing.mkString("; "))
  }

  /** The scopes' statuses by namespace, from `all`. */
  private def byNs(all: Seq[ScopeStatus]): Map[String, ScopeStatus] = all.map(s => s.string("namespace") -> s).toMap

  /** Two scrapes `gapMs` apart. */
  private def twice(source: String, gapMs: Long)(scrape: () => String): (Scrape, Scrape) = {
    val a = Scrape(System.currentTimeMillis(), Capture.keep(source, scrape()))
    Thread.sleep(gapMs) // the interval the rates are measured over, not a wait for an event
    (a, Scrape(System.currentTimeMillis(), Capture.keep(source, scrape())))
  }

  /** promtool on the captures of `source`: must pass; the file and its output are kept in `out`. */
  private def judge(source: String, captures: Seq[Capture]): Unit = {
    live(source) = captures
    val file = out.resolve(s"$source.test.yaml")
    Capture.write(file, Capture.testFile(captures, rulesFile.getAbsolutePath, header(source)))
    captures.foreach(c => Capture.write(out.resolve(c.file), Capture.render(c, stamp)))
    val (rc, text) = promtool("test", "rules", file.toString)
    info(s"promtool test rules $file: exit $rc\n$text")
    captures.foreach { c =>
      info(s"${c.source} ${c.state}: ${Capture.inputSeries(c).size} series, expected firing: " +
        s"${c.expected.toSeq.sorted.mkString(", ")}")
    }
    assert(rc == 0, s"promtool test rules $file:\n$text")
    if (sys.env.get("PODSWEEP_WRITE_ALERT_CAPTURES").contains("1")) {
      Capture.write(capturesDir.resolve(s"$source.test.yaml"), Capture.testFile(captures, "../podsweep-rules.yaml", header(source)))
      captures.foreach(c => Capture.write(capturesDir.resolve(c.file), Capture.render(c, stamp)))
      info(s"written to $capturesDir")
    }
  }

  private def header(source: String): String = {
    val what = if (source == "daemon") "the daemon's /metrics" else "a patched Kyuubi server's Prometheus endpoint"
    s"# promtool tests of docs/alerts/podsweep-rules.yaml on real captures of $what\n" +
      s"# ($source-*.prom beside this file), written by AlertRulesSuite\n" +
      s"# (java/src/test/scala/org/podsweep/alerts/). $stamp\n"
  }

  private lazy val stamp: String = s"commit ${commit()}, ${Instant.now().truncatedTo(ChronoUnit.SECONDS)}, " +
    s"${kube.name} (${kube.url})"

  test("daemon: each state's real /metrics makes exactly its alerts fire (403s, 422s, no list, refused; HA lost; no daemon)") {
    need(kyuubi = false)
    val sa = "alerts-daemon"
    val ns = Seq("ok", "forbidden", "failing", "nolist", "refused").map(s => s -> s"alerts-d-$s").toMap
    roles(kube)
    grant(kube, ns("ok"), sa, Full)
    grant(kube, ns("forbidden"), sa, NoDelete)
    grant(kube, ns("failing"), sa, Full)
    grant(kube, ns("nolist"), sa, NoList)
    kube.ensureNamespace(ns("refused"))
    refuseDeletes(kube, ns("failing"), sa)
    val (_, token) = kube.serviceAccountToken(sa, AccountsNamespace)
    val longAgo = Instant.now().minusSeconds(3600)
    for (s <- Seq("forbidden", "failing", "nolist"); i <- 1 to 3) terminatedDriver(kube, ns(s), s"driver-$s-$i", longAgo)
    val ha = HaBackend.start("zookeeper")
    val conf = Map(
      "kyuubi.kubernetes.master.address" -> kube.url,
      "kyuubi.kubernetes.authenticate.caCertFile" -> kube.caFile,
      "kyuubi.kubernetes.authenticate.oauthTokenFile" -> token.toString,
      "kyuubi.kubernetes.client.initialize.list" -> ns.values.toSeq.sorted.map(":" + _).mkString(","),
      "kyuubi.kubernetes.namespace.allow.list" -> (ns - "refused").values.toSeq.sorted.mkString(","),
      "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "2000",
      "kyuubi.ha.namespace" -> "kyuubi-alerts-daemon",
      P + "kind" -> "ALL",
      // The leaders keep their state through the scrapes (they step down after 2 min by default;
      // a fleet that takes turns is a hand-written test); failed DELETEs retry between them.
      P + "ha.stepDownAfter" -> "PT1H",
      P + "forbidden.retryInterval" -> "PT10S",
      P + "retry.maxWait" -> "PT10S") ++ ha.kyuubiConf
    val daemon = new PodsweepDaemon(sa, conf, out.resolve("logs"))
    val trickle = new Trickle(kube, ns("ok"), "driver-ok", 3000)
    try {
      // Each state established, as the daemon's status says.
      eventually {
        val st = byNs(daemon.statusAll)
        val why = st.values.map(describe).mkString("\n")
        assert(RealApi.outcomes(st(ns("ok")))("accepted") >= 2, why)
        assert(RealApi.outcomes(st(ns("forbidden")))("forbidden") >= 3, why)
        assert(RealApi.outcomes(st(ns("failing")))("other") >= 3, why)
        assert(pauseReasons(st(ns("nolist")))("watch_failing"), why)
        assert(pauseReasons(st(ns("refused")))("refused"), why)
      }
      info(daemon.statusAll.map(describe).mkString("\n"))
      val metrics = () => { val (code, body) = daemon.get("/metrics"); assert(code == 200, body); body }
      val (a1, a2) = twice("daemon", 30000)(metrics)
      trickle.close()
      val scopes = Capture(
        "daemon", "scopes", "one daemon, five namespaces: ok (a pod terminates every 3 s), forbidden (RBAC without " +
          "delete: every DELETE 403), failing (an admission policy refuses every DELETE: 422), nolist (no list on " +
          "pods), refused (not in the namespace allow list)", sa, a1, Some(a2), "",
        Set("PodsweepDeleteForbidden" -> ns("forbidden"), "PodsweepLeaderStalled" -> ns("forbidden"),
          "PodsweepLeaderStalled" -> ns("failing"), "PodsweepWatchFailing" -> ns("nolist"),
          "PodsweepScopeRefused" -> ns("refused")))

      ha.close()
      val watched = (ns - "refused").values.toSeq
      eventually {
        val st = byNs(daemon.statusAll)
        assert(watched.forall(n => pauseReasons(st(n))("ha_session_lost")), st.values.map(describe).mkString("\n"))
      }
      info(daemon.statusAll.map(describe).mkString("\n"))
      val (b1, b2) = twice("daemon", 20000)(metrics)
      val haLost = Capture("daemon", "ha-lost", "the same daemon after its ZooKeeper was stopped", sa, b1, Some(b2), "",
        watched.flatMap(n => Seq("PodsweepHaSessionLost" -> n, "PodsweepScopeLeaderless" -> n)).toSet +
          ("PodsweepScopeRefused" -> ns("refused")))

      daemon.terminate()
      val refused = Try(daemon.get("/metrics")).failed.map(_.toString).getOrElse("it still answered")
      val absent = Capture("daemon", "absent", "the same daemon stopped (SIGTERM): nothing reports", sa, b2, None,
        refused, Set("PodsweepDaemonsAbsent" -> ""))
      judge("daemon", Seq(scopes, haLost, absent))
    } finally {
      trickle.close()
      daemon.close()
      Try(ha.close())
    }
  }

  test("Kyuubi: each state's real Prometheus endpoint makes exactly its alerts fire (403s, 422s, no watch; HA lost; no server)") {
    need(kyuubi = true)
    val sa = "alerts-kyuubi"
    val ns = Seq("ok", "forbidden", "failing", "nowatch").map(s => s -> s"alerts-k-$s").toMap
    def scope(state: String) = s"default_alerts_k_$state"
    roles(kube)
    grant(kube, ns("ok"), sa, Full)
    grant(kube, ns("forbidden"), sa, NoDelete)
    grant(kube, ns("failing"), sa, Full)
    grant(kube, ns("nowatch"), sa, NoWatch)
    refuseDeletes(kube, ns("failing"), sa)
    val (_, token) = kube.serviceAccountToken(sa, AccountsNamespace)
    val longAgo = Instant.now().minusSeconds(3600)
    for (s <- Seq("forbidden", "failing", "nowatch"); i <- 1 to 3) terminatedDriver(kube, ns(s), s"driver-$s-$i", longAgo)
    val ha = HaBackend.start("zookeeper")
    val port = { val s = new java.net.ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress); try s.getLocalPort finally s.close() }
    val dir = out.resolve("kyuubi")
    Files.createDirectories(dir)
    val conf = Map(
      "kyuubi.kubernetes.master.address" -> kube.url,
      "kyuubi.kubernetes.authenticate.caCertFile" -> kube.caFile,
      "kyuubi.kubernetes.authenticate.oauthTokenFile" -> token.toString,
      "kyuubi.kubernetes.client.initialize.list" -> ns.values.toSeq.sorted.map(":" + _).mkString(","),
      "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "2000",
      P + "kind" -> "ALL",
      P + "checkInterval" -> "1000",
      // Self-watch, as the drop-in runs it: the mode in which a watch can fail.
      P + "watch.enabled" -> "true",
      P + "ha.stepDownAfter" -> "PT1H",
      P + "forbidden.retryInterval" -> "PT10S",
      P + "retry.maxWait" -> "PT10S",
      "kyuubi.frontend.advertised.host" -> sa,
      "kyuubi.frontend.protocols" -> "THRIFT_BINARY",
      "kyuubi.frontend.bind.host" -> "127.0.0.1",
      "kyuubi.frontend.thrift.binary.bind.port" -> "0",
      "kyuubi.metadata.store.jdbc.url" -> s"jdbc:sqlite:$dir/metadata.db",
      "kyuubi.metrics.enabled" -> "true",
      "kyuubi.metrics.reporters" -> "PROMETHEUS",
      "kyuubi.metrics.prometheus.port" -> port.toString,
      "kyuubi.ha.namespace" -> "kyuubi-alerts") ++ ha.kyuubiConf
    val server = new KyuubiServer(sa, KyuubiHome.Patched, conf, dir, heapMb = 512, mode = KyuubiHome.WholeServer)
    val trickle = new Trickle(kube, ns("ok"), "driver-ok", 3000)
    val metrics = () => Source.fromURL(s"http://127.0.0.1:$port/metrics", "UTF-8").mkString
    try {
      eventually {
        val st = byNs(server.status())
        val why = st.values.map(describe).mkString("\n")
        assert(RealApi.outcomes(st(ns("ok")))("accepted") >= 2, why)
        assert(RealApi.outcomes(st(ns("forbidden")))("forbidden") >= 3, why)
        assert(RealApi.outcomes(st(ns("failing")))("other") >= 3, why)
        assert(pauseReasons(st(ns("nowatch")))("watch_failing"), why)
        // Every scope's gauges registered with Kyuubi's MetricsSystem (housekeeping does it).
        val text = metrics()
        assert(ns.keys.forall(s => text.contains(s"$KyuubiPrefix${scope(s)}_leader ")), Capture.keep("kyuubi", text))
      }
      info(server.status().map(describe).mkString("\n"))
      val (a1, a2) = twice("kyuubi", 30000)(metrics)
      trickle.close()
      val scopes = Capture(
        "kyuubi", "scopes", "one whole patched Kyuubi server in self-watch mode, four namespaces: ok (a pod " +
          "terminates every 3 s), forbidden (RBAC without delete: every DELETE 403), failing (an admission policy " +
          "refuses every DELETE: 422), nowatch (list but no watch on pods)", sa, a1, Some(a2), "",
        Set("PodsweepKyuubiDeleteForbidden" -> scope("forbidden"), "PodsweepKyuubiLeaderStalled" -> scope("forbidden"),
          "PodsweepKyuubiLeaderStalled" -> scope("failing"), "PodsweepKyuubiWatchFailing" -> scope("nowatch")))

      ha.close()
      eventually {
        val st = byNs(server.status())
        assert(ns.values.forall(n => pauseReasons(st(n))("ha_session_lost")), st.values.map(describe).mkString("\n"))
      }
      info(server.status().map(describe).mkString("\n"))
      val (b1, b2) = twice("kyuubi", 20000)(metrics)
      val haLost = Capture("kyuubi", "ha-lost", "the same server after its ZooKeeper was stopped", sa, b1, Some(b2), "",
        ns.keys.flatMap(s => Seq("PodsweepKyuubiHaSessionLost" -> scope(s), "PodsweepKyuubiLeaderless" -> scope(s))).toSet)

      server.close()
      val refused = Try(metrics()).failed.map(_.toString).getOrElse("it still answered")
      val absent = Capture("kyuubi", "absent", "the same server stopped: nothing reports", sa, b2, None, refused,
        Set("PodsweepKyuubiAbsent" -> ""))
      judge("kyuubi", Seq(scopes, haLost, absent))
    } finally {
      trickle.close()
      server.close()
      Try(ha.close())
    }
  }

  test("every series of the hand-written docs/alerts/podsweep-rules.test.yaml is one the exporters produce (name and label names)") {
    val caps = captured()
    val daemonSeries = caps.filter(_._1 == "daemon").flatMap(_._2.flatMap(_.samples)).map(s => s.name -> s.labelKeys).toSet
    val kyuubiGauges = caps.filter(_._1 == "kyuubi").flatMap(_._2.flatMap(_.samples)).flatMap(s => kyuubiGauge(s.name)).toSet
    assert(daemonSeries.nonEmpty && kyuubiGauges.nonEmpty, s"no captures of both sources: ${caps.map(_._1).distinct}")
    val yaml = new ObjectMapper(new YAMLFactory()).readTree(new File(RealApi.repo, "docs/alerts/podsweep-rules.test.yaml"))
    val series = yaml.get("tests").elements().asScala.flatMap(_.get("input_series").elements().asScala)
      .map(_.get("series").asText()).toVector
    val unknown = series.filterNot { text =>
      val (name, labels) = Exposition.series(text)
      val keys = labels.keySet -- Exposition.TargetLabels
      if (name.startsWith(KyuubiPrefix)) keys.isEmpty && kyuubiGauges.exists(g => name.endsWith("_" + g) && name.length > KyuubiPrefix.length + g.length + 1)
      else daemonSeries((name, keys))
    }
    info(s"${series.size} series checked against ${daemonSeries.size} daemon series and ${kyuubiGauges.size} Kyuubi gauges")
    assert(unknown.isEmpty, s"series no exporter produces: ${unknown.mkString(", ")}")
  }

  test("the runbook and docs/alerts/README.md name only metrics the exporters produce, and every alert") {
    val caps = captured()
    val daemonNames = caps.filter(_._1 == "daemon").flatMap(_._2.flatMap(_.samples)).map(_.name).toSet
    val kyuubiGauges = caps.filter(_._1 == "kyuubi").flatMap(_._2.flatMap(_.samples)).flatMap(s => kyuubiGauge(s.name)).toSet
    val Kyuubi = "`(?:…|\\.\\.\\.|kyuubi_kubernetes_cleanup_<ctx>_<ns>)[_.]([a-z_.<>]+)`".r
    val Daemon = "`(podsweep_[a-z_]+)(?:\\{[^`]*\\})?`".r
    val checked = for {
      doc <- Seq("docs/operations.md", "docs/alerts/README.md")
      text = RealApi.readDoc(doc)
      m <- Kyuubi.findAllMatchIn(text).map(m => "k" -> m.group(1)) ++ Daemon.findAllMatchIn(text).map(m => "d" -> m.group(1))
    } yield (doc, m._1, m._2)
    val wrong = checked.filterNot {
      case (_, "k", gauge) =>
        val re = gauge.replace('.', '_').replace("<reason>", "[a-z_]+").replace("<outcome>", "[a-z_]+").r
        kyuubiGauges.exists(g => re.pattern.matcher(g).matches())
      case (_, _, name) => daemonNames.exists(n => n == name || n.startsWith(name + "_"))
    }
    info(s"${checked.size} metric names in the docs checked")
    assert(wrong.isEmpty, s"named in the docs but produced by no exporter: ${wrong.mkString(", ")}")
    // Every rule has its row in both.
    val rules = new ObjectMapper(new YAMLFactory()).readTree(rulesFile).get("groups").elements().asScala
      .flatMap(_.get("rules").elements().asScala).map(_.get("alert").asText()).toVector
    val undocumented = for (doc <- Seq("docs/operations.md", "docs/alerts/README.md"); r <- rules
      if !RealApi.readDoc(doc).contains(s"`$r`")) yield s"$doc: $r"
    assert(rules.size >= 21 && undocumented.isEmpty, s"alerts without an entry: ${undocumented.mkString(", ")}")
  }

  test("the committed captures' promtool tests pass (docs/alerts/captures/*.test.yaml)") {
    promtoolMissing.foreach(fail(_))
    val files = Option(capturesDir.toFile.listFiles()).toSeq.flatten.filter(_.getName.endsWith(".test.yaml")).sortBy(_.getName)
    assert(files.map(_.getName) == Seq("daemon.test.yaml", "kyuubi.test.yaml"), files)
    val (rc, text) = promtool(Seq("test", "rules") ++ files.map(_.getPath): _*)
    info(text)
    assert(rc == 0, text)
  }

  /** This run's captures by source when it made them, else the committed ones. */
  private def captured(): Seq[(String, Seq[Scrape])] = Seq("daemon", "kyuubi").map { source =>
    source -> live.get(source).map(_.flatMap(c => Seq(c.first) ++ c.second)).getOrElse {
      Option(capturesDir.toFile.listFiles()).toSeq.flatten.filter(f => f.getName.startsWith(source + "-") && f.getName.endsWith(".prom"))
        .flatMap(f => Capture.scrapesOf(f.toPath))
    }
  }
}

object AlertRulesSuite {
  val KyuubiPrefix = "kyuubi_kubernetes_cleanup_"

  def rulesFile: File = new File(RealApi.repo, "docs/alerts/podsweep-rules.yaml")
  def capturesDir: Path = new File(RealApi.repo, "docs/alerts/captures").toPath

  /** A Kyuubi gauge's name after its scope (the test's scopes are `default.alerts_k_<state>`), or the server-wide one. */
  def kyuubiGauge(name: String): Option[String] = {
    val Scoped = (KyuubiPrefix + "default_alerts_k_[a-z]+_(.+)").r
    name match {
      case Scoped(g) => Some(g)
      case n if n == KyuubiPrefix + "log_records_dropped" => Some("log_records_dropped")
      case _ => None
    }
  }

  def promtoolFile: File =
    new File(sys.env.get("PODSWEEP_TOOLS").filter(_.nonEmpty).getOrElse(sys.props("user.home") + "/.cache/podsweep-tools"), "promtool")

  def promtoolMissing: Option[String] =
    if (promtoolFile.canExecute) None else Some(s"no promtool at $promtoolFile (scripts/setup promtool)")

  /** Runs promtool: exit status and output. */
  def promtool(args: String*): (Int, String) = {
    val p = new ProcessBuilder((promtoolFile.getPath +: args): _*).redirectErrorStream(true).start()
    val text = Source.fromInputStream(p.getInputStream, "UTF-8").mkString
    (p.waitFor(), text)
  }

  /** The checkout's commit (`-dirty` with changes beside docs/alerts/captures). */
  def commit(): String = {
    def git(args: String*): String = {
      val p = new ProcessBuilder((Seq("git", "-C", RealApi.repo.getPath) ++ args): _*).redirectErrorStream(true).start()
      try Source.fromInputStream(p.getInputStream, "UTF-8").mkString.trim finally p.waitFor()
    }
    val dirty = git("status", "--porcelain", "--", ".", ":!docs/alerts/captures").nonEmpty
    git("rev-parse", "--short", "HEAD") + (if (dirty) "-dirty" else "")
  }
}
