package org.podsweep.alerts

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path}
import java.time.Instant

import scala.collection.JavaConverters._

/** One scrape of a metrics endpoint: when, and podsweep's lines of the answer. */
final case class Scrape(atMillis: Long, text: String) {
  private lazy val parsed: (Seq[Sample], Map[String, String]) = Exposition.parse(text)
  def samples: Seq[Sample] = parsed._1
  def types: Map[String, String] = parsed._2
}

/**
 * A state of a real run, seen by two scrapes of one server's metrics endpoint taken a few
 * seconds apart (`second` is None when the endpoint no longer answered: the server had stopped),
 * and the alerts it must raise: (alert name, scope) pairs, the scope being the namespace for the
 * daemon, the `scope` label for Kyuubi, "" for an alert without one.
 */
final case class Capture(
    source: String,
    state: String,
    description: String,
    instance: String,
    first: Scrape,
    second: Option[Scrape],
    noAnswer: String,
    expected: Set[(String, String)]) {
  def file: String = s"$source-$state.prom"
}

object Capture {
  /** Minutes of the one-minute series promtool is fed, and when the alerts are judged. */
  val Minutes = 40
  val EvalMinute = 30
  /** Minutes the last scrape of a server that stopped is still served before it goes stale. */
  val BeforeStale = 4

  /** Does `line` (of an answer) belong to podsweep? */
  def ours(source: String, line: String): Boolean = source match {
    case "daemon" => line.contains("podsweep_")
    case _ => line.contains("kyuubi_kubernetes_cleanup_")
  }

  /**
   * podsweep's lines of a scrape answer, with their `# TYPE` (and the daemon's `# HELP`; Kyuubi's
   * reporter writes the gauge's lambda class there, which differs from run to run).
   */
  def keep(source: String, text: String): String =
    text.split("\n").filter(l => ours(source, l) && !(source == "kyuubi" && l.startsWith("# HELP ")))
      .mkString("", "\n", "\n")

  // ---- how a series goes on after the two scrapes -----------------------------------------------

  private val KyuubiCounters = Seq("_deletes_sent", "_restarts", "_leadership_transitions", "_retries", "_cancelled",
    "_lag_count", "_log_records_dropped") ++ org.podsweep.metrics.PodsweepMetricSet.OUTCOMES.asScala.map("_deletes_" + _)

  /** counter (grows at its observed rate), duration (grows with the clock while it lasts) or gauge (held). */
  def kind(source: String, name: String, types: Map[String, String]): String = source match {
    case "daemon" =>
      val family = Seq("_bucket", "_sum", "_count").find(s => name.endsWith(s) && types.get(name.stripSuffix(s)).contains("histogram"))
        .map(name.stripSuffix).getOrElse(name)
      types.get(family) match {
        case Some("counter") | Some("histogram") => "counter"
        case _ if name.endsWith("_seconds") && !name.endsWith("_timestamp_seconds") => "duration"
        case _ => "gauge"
      }
    case _ =>
      if (KyuubiCounters.exists(name.endsWith)) "counter"
      else if (name.endsWith("_ms") && !name.endsWith("_paused_until_ms")) "duration"
      else "gauge"
  }

  /** A number as promtool's series notation takes it (no exponent). */
  private def num(v: Double): String =
    java.math.BigDecimal.valueOf(v).setScale(6, java.math.RoundingMode.HALF_UP).stripTrailingZeros().toPlainString

  /**
   * promtool's input series for a capture: one per sample (NaN ones left out: a quantile before
   * the first DELETE), labelled with `instance` and `job` as Prometheus labels a target's series.
   * With two scrapes, from minute 0 on: a counter grows at the rate seen between them (held when
   * it did not grow), a duration that grew with the clock between them keeps growing with it (a
   * pause, the age of the oldest overdue pod), every other gauge holds its last value. A server
   * that stopped: its first scrape for [[BeforeStale]] minutes, then a staleness marker.
   */
  def inputSeries(c: Capture): Seq[(String, String)] = {
    def labelled(s: Sample) = Exposition.notation(s.name, s.labels ++ Map("instance" -> c.instance, "job" -> c.source))
    c.second match {
      case None =>
        c.first.samples.filterNot(_.value.isNaN).map(s => labelled(s) -> s"${num(s.value)}x$BeforeStale stale")
      case Some(second) =>
        val before = c.first.samples.map(s => (s.name, s.labels) -> s.value).toMap
        val minutes = (second.atMillis - c.first.atMillis) / 60000.0
        val perMinute = if (c.source == "daemon") 60.0 else 60000.0
        second.samples.filterNot(_.value.isNaN).map { s =>
          val v = s.value
          val step = (kind(c.source, s.name, second.types), before.get((s.name, s.labels))) match {
            case ("counter", Some(v1)) if v > v1 => (v - v1) / minutes
            case ("duration", Some(v1)) if v - v1 >= 0.9 * minutes * perMinute => perMinute
            case _ => 0.0
          }
          labelled(s) -> (if (step == 0.0) s"${num(v)}x$Minutes" else s"${num(v)}+${num(step)}x$Minutes")
        }
    }
  }

  // ---- promtool ---------------------------------------------------------------------------------

  /** The label that names an alert's scope in a source's rules. */
  def scopeLabel(source: String): String = if (source == "daemon") "namespace" else "scope"

  /** The alerts of a source's group (the Kyuubi group's names start with PodsweepKyuubi). */
  private def groupMatcher(source: String): String =
    if (source == "daemon") "alertname!~\"PodsweepKyuubi.*\"" else "alertname=~\"PodsweepKyuubi.*\""

  /**
   * A promtool test file for `captures`: each capture's series, and at minute [[EvalMinute]] the
   * alerts of its source's group firing, counted by alert name and scope, exactly as expected
   * (every other alert of the group silent).
   */
  def testFile(captures: Seq[Capture], rules: String, header: String): String = {
    val sb = new StringBuilder(header)
    sb ++= s"rule_files:\n  - ${quote(rules)}\n\nevaluation_interval: 1m\n\ntests:\n"
    captures.foreach { c =>
      sb ++= s"  # ${c.source}, ${c.state}: ${c.description}\n"
      sb ++= s"  - name: ${quote(s"${c.source} ${c.state}")}\n    interval: 1m\n    input_series:\n"
      inputSeries(c).foreach { case (series, values) =>
        sb ++= s"      - series: ${quote(series)}\n        values: ${quote(values)}\n"
      }
      val by = scopeLabel(c.source)
      sb ++= "    promql_expr_test:\n"
      val expr = "count by (alertname, " + by + ") (ALERTS{alertstate=\"firing\"," + groupMatcher(c.source) + "})"
      sb ++= s"      - expr: ${quote(expr)}\n"
      sb ++= s"        eval_time: ${EvalMinute}m\n"
      if (c.expected.isEmpty) sb ++= "        exp_samples: []\n"
      else {
        sb ++= "        exp_samples:\n"
        c.expected.toSeq.sorted.foreach { case (alert, scope) =>
          val labels = Map("alertname" -> alert) ++ (if (scope.isEmpty) Map.empty else Map(by -> scope))
          sb ++= s"          - labels: ${quote(Exposition.notation("", labels))}\n            value: 1\n"
        }
      }
    }
    sb.toString
  }

  /** A YAML single-quoted scalar. */
  private def quote(s: String): String = "'" + s.replace("'", "''") + "'"

  // ---- capture files ----------------------------------------------------------------------------

  /** The capture as a file: a header (`stamp` and the state), then each scrape after its `# scrape` line. */
  def render(c: Capture, stamp: String): String = {
    val sb = new StringBuilder
    sb ++= s"# podsweep alert capture: ${c.source}, state ${c.state}: ${c.description}\n"
    sb ++= s"# $stamp\n"
    sb ++= s"# expected alerts: ${if (c.expected.isEmpty) "none" else c.expected.toSeq.sorted.map { case (a, s) => if (s.isEmpty) a else s"$a($s)" }.mkString(", ")}\n"
    sb ++= s"# scrape 1 of ${c.instance} at ${Instant.ofEpochMilli(c.first.atMillis)}\n" + c.first.text
    c.second match {
      case Some(s) =>
        sb ++= f"# scrape 2 of ${c.instance} at ${Instant.ofEpochMilli(s.atMillis)} (+${(s.atMillis - c.first.atMillis) / 1000.0}%.1f s)\n" + s.text
      case None => sb ++= s"# scrape 2 of ${c.instance}: no answer (${c.noAnswer})\n"
    }
    sb.toString
  }

  /** The scrapes of a capture file, as [[render]] wrote them (samples only: enough for name checks). */
  def scrapesOf(file: Path): Seq[Scrape] = {
    val lines = Files.readAllLines(file, StandardCharsets.UTF_8).asScala.toVector
    val starts = lines.indices.filter(i => lines(i).startsWith("# scrape "))
    starts.zipWithIndex.map { case (s, k) =>
      val end = if (k + 1 < starts.size) starts(k + 1) else lines.size
      Scrape(0L, lines.slice(s + 1, end).mkString("\n"))
    }
  }

  def write(file: Path, text: String): Unit = {
    Files.createDirectories(file.getParent)
    Files.write(file, text.getBytes(StandardCharsets.UTF_8))
  }
}
