package org.podsweep.demo

import java.io.{File, PrintWriter}
import java.nio.charset.StandardCharsets

import org.apache.curator.test.TestingServer
import org.podsweep.demo.Phases.PhaseResult
import org.podsweep.testkit.{EtcdBackend, EtcdServer, HaBackend, ZooKeeperBackend}

/**
 * Today's Kyuubi cleanup vs podsweep, on embedded infrastructure: a Curator TestingServer as
 * ZooKeeper (or the system's etcd, `--backend etcd`) and a fabric8 mock (CRUD) as the API server.
 * With `--faults` the mock answers podsweep's DELETEs with 403 (every one for the first 10 s),
 * then a share of 429 (`Retry-After: 1`), 503 and dropped connections. M scopes are M namespaces; P terminated
 * Spark driver pods are spread over them, plus decoys that must never be deleted. The phases
 * themselves are [[Phases]] (shared with the `deletes_per_pod` bench).
 *
 * Usage: Demo [--servers N] [--scopes M] [--pods P] [--retain-ms R] [--backend zookeeper|etcd] [--faults]
 *   [--podsweep patch|drop-in|standalone] [--api mock|pods-api] [--out FILE] [--report DIR]
 * `--podsweep` picks how podsweep reaches Kyuubi in phase 2 (see [[Phases.Spec]]); the API server is
 * the fabric8 CRUD mock for `patch` and [[org.podsweep.testkit.PodsApi]] (which serves the HTTP
 * watches podsweep's own watch needs) otherwise, unless `--api` says which.
 * The report (a table, then one JSON line) goes to FILE with --out, else to stdout. With --report,
 * the podsweep phase includes a failover (pods terminate in two waves; the first scope's leader is
 * closed while the first wave is being cleaned) and DIR gets `report.txt` (the same report) and
 * `timeline.svg` (leaders per scope and DELETEs per server over time, see [[TimelineSvg]]).
 */
object Demo {
  final case class Args(
      servers: Int = 3,
      scopes: Int = 2,
      pods: Int = 300,
      retainMs: Long = 2000,
      backend: String = "zookeeper",
      faults: Boolean = false,
      out: Option[File] = None,
      reportDir: Option[File] = None,
      log: String = "target/demo-output.log",
      mode: String = "patch",
      api: Option[String] = None) {
    def spec: Phases.Spec = Phases.Spec(servers, scopes, pods, retainMs, faults = faults,
      failover = reportDir.isDefined, mode = mode, progress = Demo.progress)
    /**
     * The API server: a real kube-apiserver (scripts/kube), unless `--api` names another, faults are
     * asked for (a real API server injects none: the fabric8 mock does) or none is built (the mock,
     * then, saying why).
     */
    def apiName: String = api.getOrElse {
      if (faults) "mock"
      else if (org.podsweep.testkit.RealKube.missing.isEmpty) "kube-apiserver"
      else if (mode == "patch") "mock"
      else "pods-api"
    }
  }

  def main(argv: Array[String]): Unit = {
    val args = parse(argv.toList, Args())
    // Logs (embedded servers, podsweep's native records) go to a file; the report is what matters.
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn")
    System.setProperty("org.slf4j.simpleLogger.log.org.podsweep", "info")
    System.setProperty("org.slf4j.simpleLogger.showDateTime", "true")
    System.setProperty("org.slf4j.simpleLogger.logFile", args.log)
    val code = try { run(args); 0 } catch {
      case t: Throwable =>
        System.err.println(s"demo failed: $t")
        t.printStackTrace()
        1
    }
    System.exit(code)
  }

  private def parse(rest: List[String], a: Args): Args = rest match {
    case Nil => a
    case "--servers" :: v :: t => parse(t, a.copy(servers = v.toInt))
    case "--scopes" :: v :: t => parse(t, a.copy(scopes = v.toInt))
    case "--pods" :: v :: t => parse(t, a.copy(pods = v.toInt))
    case "--retain-ms" :: v :: t => parse(t, a.copy(retainMs = v.toLong))
    case "--backend" :: v :: t if HaBackend.Names.contains(v) => parse(t, a.copy(backend = v))
    case "--faults" :: t => parse(t, a.copy(faults = true))
    case "--out" :: v :: t => parse(t, a.copy(out = Some(new File(v))))
    case "--report" :: v :: t => parse(t, a.copy(reportDir = Some(new File(v))))
    case "--log" :: v :: t => parse(t, a.copy(log = v))
    case "--podsweep" :: v :: t if Phases.Modes.contains(v) => parse(t, a.copy(mode = v))
    case "--api" :: v :: t if org.podsweep.testkit.TestApi.Names.contains(v) => parse(t, a.copy(api = Some(v)))
    case other => throw new IllegalArgumentException(s"unknown arguments: ${other.mkString(" ")}")
  }

  private def progress(msg: String): Unit = System.err.println(s"[demo] $msg")

  def run(a: Args): Unit = {
    require(a.servers >= 1 && a.scopes >= 1 && a.pods >= 1, "servers, scopes and pods must be positive")
    a.reportDir.foreach { d =>
      if (!d.isDirectory && !d.mkdirs()) throw new IllegalArgumentException(s"--report: cannot create directory $d")
    }
    val ha: HaBackend = a.backend match {
      case "etcd" => new EtcdBackend(new EtcdServer(), leaseTimeout = "PT2S")
      case _ => new ZooKeeperBackend(new TestingServer(true), sessionTimeoutMs = 6000)
    }
    try {
      if (a.api.isEmpty && a.apiName != "kube-apiserver") progress(
        if (a.faults) "fault injection needs the fabric8 mock: the API server is the mock, not kube-apiserver"
        else s"no real API server: ${org.podsweep.testkit.RealKube.missing.getOrElse("")}; falling back to ${a.apiName}")
      val kube = org.podsweep.testkit.TestApi.start(a.apiName)
      val admin = kube.client("demo-admin")
      try {
        progress(s"HA backend $ha, API server ${kube.name} at ${kube.url}; logs in ${a.log}")
        // The real control plane has no kubelet and no kube-controller-manager. A DELETE whose
        // deletionTimestamp was stored but whose removal failed (the API server overloaded, or the
        // server that sent it stopped mid-request) leaves a pod Terminating that a real cluster's
        // pod garbage collector removes and every podsweep server rightly counts as being deleted;
        // a stand-in does that here (after 500 ms, not the real 20 s) and the line says how often.
        val podGc = kube match {
          case r: org.podsweep.testkit.RealKube => Some(r.startNodeSim(stopDelayMs = 500, podGc = true))
          case _ => None
        }
        def collected: Option[Int] = podGc.map(_.collected.get)
        val baseline = Phases.baseline(a.spec, kube, admin)
        val gcAfterBaseline = collected
        val podsweep = Phases.podsweep(a.spec, kube, admin, ha)
        val gc = PodGc(gcAfterBaseline, for (all <- collected; before <- gcAfterBaseline) yield all - before)
        report(a, baseline, podsweep, kube.name, gc)
      } finally {
        admin.close()
        kube.close()
      }
    } finally ha.close()
  }

  /** One line of run parameters, as the report and the picture title show them. */
  def parameters(a: Args, apiServer: String): String =
    s"${a.servers} servers, ${a.scopes} scopes (namespaces), ${a.pods} terminated Spark driver pods " +
      s"+ ${4 * a.scopes} decoys, retain period ${a.retainMs} ms, HA backend ${a.backend}" +
      (if (a.faults) ", DELETE faults injected" else "") +
      s", podsweep as ${a.mode}, API server $apiServer"

  // ---------------------------------------------------------------------------------------------
  // Report

  private def describe(kind: String): String = kind match {
    case Phases.StockKind => "Kyuubi 1.12.0's KubernetesApplicationOperation, one JVM per server"
    case Phases.PatchedKind => "Kyuubi 1.12.0's KubernetesApplicationOperation with the podsweep patch, one JVM per server"
    case Phases.ModelKind => "a model of Kyuubi's cleanup (Kyuubi not built)"
    case Phases.LogicalKind => "podsweep's Java API fed by fabric8 informers in the demo JVM (Kyuubi not built)"
    case Phases.DropinKind => "Kyuubi 1.12.0 as released (its cleaner off) with podsweep's drop-in jar, one JVM per server"
    case Phases.StandaloneKind => "podsweep's standalone daemon, one process per server"
    case other => other
  }

  private def write(f: File, text: String): Unit = {
    val w = new PrintWriter(f, StandardCharsets.UTF_8.name())
    try w.print(text) finally w.close()
  }

  /** Terminating pods the pod-GC stand-in removed in each phase (none without a real API server). */
  private final case class PodGc(baseline: Option[Int], podsweep: Option[Int])

  private def report(a: Args, b: PhaseResult, p: PhaseResult, apiServer: String, gc: PodGc): Unit = {
    val out = new StringBuilder
    def line(s: String = ""): Unit = out.append(s).append('\n')
    line(s"podsweep demo: ${parameters(a, apiServer)}")
    line(s"baseline: ${describe(b.kind)}; podsweep: ${describe(p.kind)}")
    line()
    line(f"${"phase"}%-28s ${"DELETEs"}%8s ${"per pod"}%8s ${"200"}%6s ${"404"}%6s ${"other"}%6s ${"wrongful"}%9s ${"leaked"}%7s ${"decoys lost"}%12s ${"WARN/ERROR"}%11s ${"seconds"}%8s")
    Seq(b, p).foreach { r =>
      line(f"${r.label}%-28s ${r.requests}%8d ${r.perPod}%8.2f ${r.code(200)}%6d ${r.code(404)}%6d ${r.otherCodes}%6d ${r.wrongful}%9d ${r.leaked}%7d ${r.decoysMissing}%12d ${r.loudLines}%11d ${r.seconds}%8.1f")
    }
    line()
    line("DELETE requests per server:")
    line(f"  ${"server"}%-10s ${"baseline"}%9s ${"podsweep"}%9s")
    (1 to a.servers).map(i => s"server-$i").foreach { s =>
      line(f"  $s%-10s ${b.byServer.getOrElse(s, 0)}%9d ${p.byServer.getOrElse(s, 0)}%9d")
    }
    def counted(r: PhaseResult): String =
      s"${r.requests} in the API server's ${if (apiServer.startsWith("kube-apiserver")) "audit log" else "request log"}, " +
        r.clientDeletes.map(c => s"$c by the servers' own count").getOrElse("no count of the servers' own")
    line(s"DELETEs counted: baseline ${counted(b)}; podsweep ${counted(p)}")
    line(s"podsweep leaders: ${p.leaders.toSeq.sorted.map { case (ns, s) => s"$ns -> $s" }.mkString(", ")}")
    p.failover.foreach { f =>
      def ms(x: Option[Long]): String = x.map(t => s"${t - f.stopAtMillis} ms").getOrElse("never")
      line(f"podsweep failover: ${f.stopped} (leader of ${f.successors.map(_.scope).mkString(", ")}) stopped by ${f.how} " +
        f"at ${(f.stopAtMillis - p.startMillis) / 1000.0}%.1f s; " + f.successors.map { x =>
          s"${x.scope}: ${x.server.getOrElse("no successor")} leading after ${ms(x.leadingAtMillis)}, first DELETE after ${ms(x.firstDeleteAtMillis)}"
        }.mkString("; "))
    }
    line(s"podsweep DELETE outcomes (sum over servers): ${Phases.OutcomeClasses.map(c => s"$c=${p.outcomes.getOrElse(c, 0L)}").mkString(" ")}")
    gc.podsweep.foreach { n =>
      line(s"Terminating pods removed by the pod garbage collector's stand-in: baseline ${gc.baseline.getOrElse(0)}, podsweep $n")
    }
    if (a.faults)
      line(s"faults injected by the mock: ${p.injected.toSeq.sorted.map { case (k, v) => s"$k=$v" }.mkString(" ")}")
    def obj(m: Seq[(String, String)]): String = m.map { case (k, v) => "\"" + k + "\":" + v }.mkString("{", ",", "}")
    def str(s: String): String = "\"" + s + "\""
    def opt(x: Option[Long]): String = x.map(_.toString).getOrElse("null")
    val failover = p.failover.toSeq.map { f =>
      val main = f.main
      def since(x: Option[Long]): Option[Long] = x.map(_ - f.stopAtMillis)
      "failover" -> obj(Seq(
        "scope" -> str(f.scope),
        "stopped_server" -> str(f.stopped),
        "how" -> str(f.how),
        "stopped_at_s" -> f"${(f.stopAtMillis - p.startMillis) / 1000.0}%.2f",
        "close_ms" -> (f.closedAtMillis - f.stopAtMillis).toString,
        "successor" -> main.flatMap(_.server).map(str).getOrElse("null"),
        "successor_leading_ms" -> opt(since(main.flatMap(_.leadingAtMillis))),
        "successor_first_delete_ms" -> opt(since(main.flatMap(_.firstDeleteAtMillis))),
        "scopes_handed_over" -> f.successors.map(x => obj(Seq(
          "scope" -> str(x.scope),
          "successor" -> x.server.map(str).getOrElse("null"),
          "leading_ms" -> opt(since(x.leadingAtMillis)),
          "first_delete_ms" -> opt(since(x.firstDeleteAtMillis))))).mkString("[", ",", "]")))
    }
    val json = obj(Seq(
      "servers" -> a.servers.toString,
      "scopes" -> a.scopes.toString,
      "pods" -> a.pods.toString,
      "decoys" -> (4 * a.scopes).toString,
      "retain_ms" -> a.retainMs.toString,
      "backend" -> str(a.backend),
      "faults" -> a.faults.toString,
      "delete_requests" -> p.requests.toString,
      "deletes_per_pod" -> f"${p.stored.size.toDouble / a.pods}%.2f",
      "pods_deleted_twice" -> p.duplicates.toString,
      "outcomes" -> obj(Phases.OutcomeClasses.map(c => c -> p.outcomes.getOrElse(c, 0L).toString)),
      "injected_faults" -> obj(Seq("forbidden", "throttled", "server_error", "transport").map(c => c -> p.injected.getOrElse(c, 0).toString)),
      "leaked" -> p.leaked.toString,
      "wrongful_deletes" -> p.wrongful.toString,
      "decoys_deleted" -> p.decoysMissing.toString,
      "warn_error_lines" -> p.loudLines.toString,
      "seconds" -> f"${p.seconds}%.1f",
      "baseline_delete_requests" -> b.requests.toString,
      "baseline_deletes_per_pod" -> f"${b.perPod}%.2f",
      "baseline_404" -> b.code(404).toString,
      "baseline_leaked" -> b.leaked.toString,
      "baseline_wrongful_deletes" -> b.wrongful.toString,
      "baseline_warn_error_lines" -> b.loudLines.toString,
      "baseline_seconds" -> f"${b.seconds}%.1f",
      "baseline_failed_to_delete_lines" -> b.failedToDelete.toString,
      "baseline_kind" -> str(b.kind),
      "client_counted_deletes" -> p.clientDeletes.map(_.toString).getOrElse("null"),
      "baseline_client_counted_deletes" -> b.clientDeletes.map(_.toString).getOrElse("null"),
      "podsweep_kind" -> str(p.kind),
      "pod_watches" -> p.podWatches.toString,
      "api_server" -> str(apiServer),
      "removed_by_pod_gc" -> gc.podsweep.map(_.toString).getOrElse("null"),
      "baseline_removed_by_pod_gc" -> gc.baseline.map(_.toString).getOrElse("null")
    ) ++ failover)
    line(json)
    val text = out.toString
    // scripts/demo prints the report it reads back from --out or --report (stamped): printing it
    // here too showed the table twice.
    if (a.out.isEmpty && a.reportDir.isEmpty) {
      print(text)
      System.out.flush()
    }
    a.out.foreach(write(_, text))
    a.reportDir.foreach { d =>
      write(new File(d, "report.txt"), text)
      write(new File(d, "timeline.svg"), TimelineSvg.render(s"podsweep demo: ${parameters(a, apiServer)}", b, p, apiServer))
      progress(s"report written to ${new File(d, "report.txt")} and ${new File(d, "timeline.svg")}")
    }
    // A podsweep side on which podsweep never ran (its servers fell back to Kyuubi's own cleanup:
    // a native library of another build, one that does not load) measured stock Kyuubi twice.
    val leaderless = p.leaders.filter(_._2.isEmpty).keys.toSeq.sorted
    if (p.leaders.isEmpty || leaderless.nonEmpty) {
      throw new IllegalStateException(s"podsweep did not run on the podsweep side: no leader of " +
        s"${if (leaderless.isEmpty) "any scope" else leaderless.mkString(", ")}; the servers' logs " +
        "say why (grep 'podsweep did not start' under java/target/kyuubi-logs/)")
    }
  }
}
