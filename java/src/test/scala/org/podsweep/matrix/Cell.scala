package org.podsweep.matrix

import java.io.{File, PrintWriter}
import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path, Paths}

import org.podsweep.demo.Phases
import org.podsweep.testkit.{ExternalHaBackend, KyuubiHome, KyuubiServer, RealKube}

/**
 * One cell of the compatibility matrix (scripts/matrix): podsweep in one mode, with one Kyuubi
 * version, electing through one HA server (started and stopped by scripts/matrix, reached at
 * `--ha-address`), on a real kube-apiserver of the version scripts/kube was given (`KUBE_VERSION`).
 * The workload and the judge are the demo's podsweep phase ([[Phases.podsweep]]) with its failover:
 * N servers, M scopes (namespaces), P terminated Spark driver pods in two waves plus decoys; the
 * first scope's leader is stopped while the first wave is being cleaned. DELETEs are counted from
 * the API server's audit log.
 *
 * Modes: `patch` (Kyuubi with java/kyuubi's patch), `drop-in` (stock Kyuubi, its cleaner off, with
 * podsweep's drop-in provider) and `daemon` (the podsweep daemon, next to stock Kyuubi servers of
 * that version whose own cleaner is off, as an operator runs them).
 *
 * Writes one JSON line (the `cell` object) to `--out` (else stdout) and exits 0 when the cell
 * passed (every driver pod deleted by exactly one accepted DELETE, and any other DELETE a 404 from a
 * scope's successor right after the failover, as docs/safety.md's guarantee 4 allows; none leaked;
 * no wrongful DELETE, no decoy lost; the failover happened and a successor led), 1 when a figure
 * failed, 2 when the cell could not run (the line then says why, with `"ran": false`).
 *
 * # Guarantees
 * - Every figure is from this run's audit log and the API server's own state after the run.
 * - A cell that cannot run (a Kyuubi version not set up, a mode that version lacks) writes a line
 *   saying so; it never runs another version in its place.
 *
 * # Caveats
 * - The HA server's and the API server's versions are the ones scripts/matrix passes in; this
 *   class does not start them.
 */
object Cell {
  final case class Args(
      mode: String = "patch",
      kyuubi: String = "1.12.0",
      ha: String = "",
      haKind: String = "",
      haAddress: String = "",
      haVersion: String = "",
      servers: Int = 3,
      scopes: Int = 2,
      pods: Int = 60,
      retainMs: Long = 2000,
      cluster: Boolean = true,
      podGcThreshold: Int = 100000,
      out: Option[File] = None,
      logDir: Path = Paths.get("target", "matrix-logs"))

  val Modes: Seq[String] = Seq("patch", "drop-in", "daemon")

  def main(argv: Array[String]): Unit = {
    val a = try parse(argv.toList, Args()) catch {
      case e: IllegalArgumentException =>
        System.err.println(s"matrix cell: ${e.getMessage}")
        System.exit(2)
        throw e
    }
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn")
    System.setProperty("org.slf4j.simpleLogger.log.org.podsweep", "info")
    System.setProperty("org.slf4j.simpleLogger.showDateTime", "true")
    System.setProperty("org.slf4j.simpleLogger.logFile", a.logDir.resolve("cell.log").toString)
    val (line, code) = try run(a) catch {
      case t: Throwable =>
        t.printStackTrace()
        (notRun(a, s"the cell failed to run: ${t.toString.replace('\n', ' ').take(400)}"), 2)
    }
    a.out match {
      case Some(f) => val w = new PrintWriter(f, StandardCharsets.UTF_8.name()); try w.println(line) finally w.close()
      case None => println(line)
    }
    System.out.flush()
    System.exit(code)
  }

  private def posInt(k: String, v: String): Int =
    scala.util.Try(v.toInt).toOption.filter(_ > 0).getOrElse(throw new IllegalArgumentException(s"$k needs a positive integer, got '$v'"))

  private def parse(rest: List[String], a: Args): Args = rest match {
    case Nil =>
      if (a.haKind.isEmpty || a.haAddress.isEmpty) throw new IllegalArgumentException("--ha-kind and --ha-address are required")
      a
    case "--mode" :: v :: t =>
      if (!Modes.contains(v)) throw new IllegalArgumentException(s"--mode takes ${Modes.mkString(", ")}, got '$v'")
      parse(t, a.copy(mode = v))
    case "--kyuubi" :: v :: t => parse(t, a.copy(kyuubi = v))
    case "--ha" :: v :: t => parse(t, a.copy(ha = v))
    case "--ha-kind" :: v :: t => parse(t, a.copy(haKind = v))
    case "--ha-address" :: v :: t => parse(t, a.copy(haAddress = v))
    case "--ha-version" :: v :: t => parse(t, a.copy(haVersion = v))
    case "--servers" :: v :: t => parse(t, a.copy(servers = posInt("--servers", v)))
    case "--scopes" :: v :: t => parse(t, a.copy(scopes = posInt("--scopes", v)))
    case "--pods" :: v :: t => parse(t, a.copy(pods = posInt("--pods", v)))
    case "--retain-ms" :: v :: t => parse(t, a.copy(retainMs = posInt("--retain-ms", v).toLong))
    case "--out" :: v :: t => parse(t, a.copy(out = Some(new File(v))))
    case "--apiserver-only" :: t => parse(t, a.copy(cluster = false))
    case "--pod-gc-threshold" :: v :: t => parse(t, a.copy(podGcThreshold = posInt("--pod-gc-threshold", v)))
    case "--log-dir" :: v :: t => parse(t, a.copy(logDir = Paths.get(v)))
    case other => throw new IllegalArgumentException(s"unknown arguments: ${other.mkString(" ")}")
  }

  private def progress(msg: String): Unit = System.err.println(s"[matrix] $msg")

  private def str(s: String): String =
    "\"" + s.flatMap { case '"' => "\\\""; case '\\' => "\\\\"; case c if c < ' ' => " "; case c => c.toString } + "\""
  private def obj(m: Seq[(String, String)]): String = m.map { case (k, v) => str(k) + ":" + v }.mkString("{", ",", "}")

  /** The fields every line has: what the cell is. */
  private def identity(a: Args): Seq[(String, String)] = Seq(
    "matrix" -> str("cell"),
    "cell" -> str(s"kube-${sys.env.getOrElse("KUBE_VERSION", "?")}/kyuubi-${a.kyuubi}/${a.mode}/${a.ha}"),
    "kube" -> str(sys.env.getOrElse("KUBE_VERSION", "")),
    "kyuubi" -> str(a.kyuubi),
    "mode" -> str(a.mode),
    "ha" -> str(a.ha),
    "ha_kind" -> str(a.haKind),
    "ha_version" -> str(a.haVersion))

  private def notRun(a: Args, why: String): String =
    obj(identity(a) ++ Seq("ran" -> "false", "pass" -> "false", "why" -> str(why)))

  /** Why the cell cannot run with this Kyuubi version and mode, or None. */
  private def kyuubiMissing(a: Args): Option[String] = a.mode match {
    case "patch" => KyuubiHome.patchedMissing
    case "drop-in" => KyuubiHome.dropinMissing
    case _ => KyuubiHome.stockMissing
  }

  def run(a: Args): (String, Int) = {
    // The Kyuubi version the testkit's KyuubiHome follows (set before it is first read).
    System.setProperty("podsweep.kyuubi.version", a.kyuubi)
    val label = KyuubiHome.Stock.label
    if (!label.contains(a.kyuubi))
      return (notRun(a, s"the test kit runs $label, not Kyuubi ${a.kyuubi} (no version parameter here)"), 2)
    kyuubiMissing(a).foreach(w => return (notRun(a, s"Kyuubi ${a.kyuubi} ${a.mode}: $w"), 2))
    if (a.mode == "daemon") org.podsweep.testkit.PodsweepDaemon.missing.foreach(w => return (notRun(a, w), 2))
    Files.createDirectories(a.logDir)
    val ha = new ExternalHaBackend(a.haKind, a.haAddress, a.haVersion)
    // The full control plane (scripts/kube up --cluster): the scheduler binds the pods to kwok's
    // nodes, a DELETE is graceful and kwok finishes it as a kubelet does; PodGC's threshold is set
    // above the cell's pod count, so that every DELETE counted is podsweep's (PodGC racing podsweep
    // is issue 34 section 2's subject, not a version's).
    val kube = new RealKube(Files.createTempDirectory("podsweep-matrix-kube-"),
      upFlags = if (a.cluster) Seq("--cluster", "--pod-gc-threshold", a.podGcThreshold.toString) else Nil)
    val admin = kube.client("matrix-admin")
    val started = System.currentTimeMillis()
    try {
      progress(s"${identity(a).map(_._2).apply(1)}: API server ${kube.name} at ${kube.url}, HA $ha")
      // Without the controller manager and kwok, the demo's stand-in finishes graceful deletions.
      val podGc = if (a.cluster) None else Some(kube.startNodeSim(stopDelayMs = 500, podGc = true))
      val spec = Phases.Spec(a.servers, a.scopes, a.pods, a.retainMs, failover = true,
        mode = if (a.mode == "daemon") "standalone" else a.mode, namespacePrefix = "matrix-",
        logDir = a.logDir.toAbsolutePath, progress = progress)
      // The daemon runs next to that version's stock Kyuubi servers, whose own cleaner is off.
      // Named kyuubi-<i> (the daemons are server-<i>), so their DELETEs, if any, are told apart; they
      // are among the cell's DELETEs all the same (any would break one DELETE per pod).
      val besideDir = a.logDir.toAbsolutePath.resolve(s"beside-${System.currentTimeMillis()}")
      val beside: Seq[KyuubiServer] = if (a.mode != "daemon") Nil else (1 to a.servers).map { i =>
        val name = s"kyuubi-$i"
        new KyuubiServer(name, KyuubiHome.Stock, KyuubiServer.conf(name, kube, spec.namespaces("podsweep"), a.retainMs,
          kind = "NONE"), besideDir)
      }
      val r = try Phases.podsweep(spec, kube, admin, ha) finally beside.foreach(k => scala.util.Try(k.close()))
      val besideDeletes = r.deletes.count(d => d.bearer.exists(b => beside.exists(_.name == b)))
      // The servers' DELETEs (the podsweep servers', and the Kyuubi servers' beside the daemons); on the
      // full control plane the audit log also has the cluster's own (kwok finishing a graceful delete,
      // the controllers), which are counted apart and never podsweep's.
      def ours(d: org.podsweep.testkit.Recorded): Boolean =
        d.bearer.exists(b => b.startsWith("server-") || beside.exists(_.name == b))
      val deletes = r.deletes.filter(ours)
      val others = r.deletes.filterNot(ours).groupBy(d => s"${d.bearer.getOrElse("?")} ${d.status}").map { case (k, v) => k -> v.size }
      val accepted = deletes.filter(_.status == 200)
      val perPod = accepted.groupBy(_.pod).map(_._2.size)
      val f = r.failover
      val successor = f.flatMap(_.main).flatMap(_.server)
      // Any DELETE besides the accepted ones must be a 404 from a scope's successor after the stop:
      // its watch had not yet delivered the DELETE event of a pod its predecessor deleted just
      // before (docs/safety.md, guarantee 4). Anything else (a 409, a 404 from anyone else) fails.
      val extras = deletes.filter(_.status != 200)
      def successorsLate(d: org.podsweep.testkit.Recorded): Boolean = d.status == 404 && f.exists { x =>
        d.atMillis >= x.stopAtMillis && x.successors.exists(s => d.pod.exists(_._1 == s.scope) && s.server.isDefined && d.bearer == s.server)
      }
      val checks = Seq(
        "one_delete_per_pod" -> (accepted.size == a.pods && perPod.size == a.pods && perPod.forall(_ == 1)),
        "no_other_deletes" -> extras.forall(successorsLate),
        "none_leaked" -> (r.leaked == 0),
        "none_wrongful" -> (r.wrongful == 0 && r.decoysMissing == 0),
        "failover_once" -> (f.isDefined && successor.isDefined))
      val pass = checks.forall(_._2)
      def opt(x: Option[Long]): String = x.map(_.toString).getOrElse("null")
      val line = obj(identity(a) ++ Seq(
        "ran" -> "true",
        "pass" -> pass.toString,
        "checks" -> obj(checks.map { case (k, v) => k -> v.toString }),
        "kyuubi_kind" -> str(r.kind),
        "api_server" -> str(kube.name),
        "servers" -> a.servers.toString,
        "scopes" -> a.scopes.toString,
        "pods" -> a.pods.toString,
        "decoys" -> spec.decoys.toString,
        "retain_ms" -> a.retainMs.toString,
        "delete_requests" -> deletes.size.toString,
        "deletes_accepted" -> accepted.size.toString,
        "deletes_404" -> deletes.count(_.status == 404).toString,
        "successor_late_404s" -> extras.count(successorsLate).toString,
        "deletes_per_pod" -> f"${deletes.size.toDouble / a.pods}%.2f",
        "pods_deleted_twice" -> perPod.count(_ > 1).toString,
        "cluster_deletes" -> obj(others.toSeq.sorted.map { case (k, v) => k -> v.toString }),
        "leaked" -> r.leaked.toString,
        "wrongful_deletes" -> r.wrongful.toString,
        "decoys_deleted" -> r.decoysMissing.toString,
        "warn_error_lines" -> r.loudLines.toString,
        "control_plane" -> str(if (a.cluster) s"cluster: kube-apiserver, kube-controller-manager (PodGC threshold " +
          s"${a.podGcThreshold}), kube-scheduler, kwok" else "kube-apiserver only, with the demo's kubelet and PodGC stand-in"),
        "removed_by_pod_gc_stand_in" -> podGc.map(_.collected.get.toString).getOrElse("null"),
        "beside_servers" -> beside.size.toString,
        "beside_deletes" -> besideDeletes.toString,
        "failover" -> f.map(x => obj(Seq(
          "stopped_server" -> str(x.stopped),
          "how" -> str(x.how),
          "successor" -> successor.map(str).getOrElse("null"),
          "successor_leading_ms" -> opt(x.main.flatMap(_.leadingAtMillis).map(_ - x.stopAtMillis)),
          "successor_first_delete_ms" -> opt(x.main.flatMap(_.firstDeleteAtMillis).map(_ - x.stopAtMillis))))).getOrElse("null"),
        "failovers" -> f.size.toString,
        "seconds" -> f"${r.seconds}%.1f",
        "cell_seconds" -> f"${(System.currentTimeMillis() - started) / 1000.0}%.1f"))
      progress(s"${if (pass) "PASS" else "FAIL"}: ${checks.filterNot(_._2).map(_._1).mkString(", ")}")
      (line, if (pass) 0 else 1)
    } finally {
      admin.close()
      kube.close()
    }
  }
}
