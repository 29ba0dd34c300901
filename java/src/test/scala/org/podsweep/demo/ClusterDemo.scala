package org.podsweep.demo

import java.io.{File, PrintWriter}
import java.nio.charset.StandardCharsets
import java.nio.file.Files

import org.apache.curator.test.TestingServer
import org.podsweep.spark.{ClusterKube, SparkRun}
import org.podsweep.testkit.{EtcdBackend, EtcdServer, HaBackend, KyuubiHome, ZooKeeperBackend}

/**
 * `scripts/demo --cluster`: the demo on a full control plane (scheduler, KWOK nodes, garbage
 * collector, PodGC) with Spark's own spark-submit: SparkPi batches through Kyuubi's REST API on N
 * stock Kyuubi 1.12.0 servers (kind ALL), then on N servers with podsweep (patch or drop-in). The
 * table adds the garbage collector's orphan counts; the last line is the JSON line (podsweep's side,
 * the stock side as `baseline_*`).
 */
object ClusterDemo {
  final case class Args(
      servers: Int = 3,
      batches: Int = 6,
      canceled: Int = 2,
      executors: Int = 2,
      retainMs: Long = 2000,
      backend: String = "zookeeper",
      mode: String = "patch",
      out: Option[File] = None,
      log: String = "target/demo-output.log")

  def main(argv: Array[String]): Unit = {
    val a = parse(argv.toList, Args())
    System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn")
    System.setProperty("org.slf4j.simpleLogger.logFile", a.log)
    val code = try { run(a); 0 } catch {
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
    case "--batches" :: v :: t => parse(t, a.copy(batches = v.toInt))
    case "--canceled" :: v :: t => parse(t, a.copy(canceled = v.toInt))
    case "--executors" :: v :: t => parse(t, a.copy(executors = v.toInt))
    case "--retain-ms" :: v :: t => parse(t, a.copy(retainMs = v.toLong))
    case "--backend" :: v :: t if HaBackend.Names.contains(v) => parse(t, a.copy(backend = v))
    case "--podsweep" :: v :: t if v == "patch" || v == "drop-in" => parse(t, a.copy(mode = v))
    case "--out" :: v :: t => parse(t, a.copy(out = Some(new File(v))))
    case "--log" :: v :: t => parse(t, a.copy(log = v))
    case other => throw new IllegalArgumentException(s"unknown arguments: ${other.mkString(" ")}")
  }

  private def progress(msg: String): Unit = System.err.println(s"[demo] $msg")

  def run(a: Args): Unit = {
    require(a.servers >= 1 && a.batches >= 1 && a.canceled >= 0 && a.executors >= 0, "servers and batches must be positive")
    ClusterKube.missing.foreach(w => throw new IllegalStateException(s"no full control plane: $w"))
    val kube = ClusterKube.instance
    val logDir = Files.createTempDirectory("podsweep-demo-cluster-")
    def ha(): HaBackend = a.backend match {
      case "etcd" => new EtcdBackend(new EtcdServer(), leaseTimeout = "PT2S")
      case _ => new ZooKeeperBackend(new TestingServer(true), sessionTimeoutMs = 6000)
    }
    def phase(kind: KyuubiHome.Kind, ns: String, canceled: Int): SparkRun.Result = {
      val h = ha()
      progress(s"${kind.label}: ${a.servers} servers, ${a.batches} SparkPi batches + $canceled to cancel, HA $h, API server ${kube.name}")
      try SparkRun.run(SparkRun.Spec(kind, ns, logDir, servers = a.servers, batches = a.batches, canceled = canceled,
        executors = a.executors, retainMs = a.retainMs, progress = progress), kube, h)
      finally h.close()
    }
    val stock = phase(KyuubiHome.Stock, "demo-cluster-kyuubi", 0)
    val kind = if (a.mode == "drop-in") KyuubiHome.Dropin else KyuubiHome.Patched
    val ours = phase(kind, "demo-cluster-podsweep", a.canceled)
    report(a, stock, ours)
  }

  private def report(a: Args, b: SparkRun.Result, p: SparkRun.Result): Unit = {
    val out = new StringBuilder
    def line(s: String = ""): Unit = out.append(s).append('\n')
    val admin = ClusterKube.instance.admin
    def left(r: SparkRun.Result) = SparkRun.leftovers(admin, r.spec.namespace, r.drivers)
    def max(xs: Seq[Long]): String = if (xs.isEmpty) "-" else f"${xs.max / 1000.0}%.1f"
    def perDriver(r: SparkRun.Result): Double = if (r.drivers.isEmpty) 0 else r.perDriver(r.drivers).sum.toDouble / r.drivers.size
    line(s"podsweep demo --cluster: ${a.servers} Kyuubi servers, ${a.batches} SparkPi batches (+ ${a.canceled} canceled on " +
      s"podsweep's side) through POST /api/v1/batches, spark-submit ${org.podsweep.testkit.SparkHome.Version} in cluster mode, " +
      s"${a.executors} executors per driver, retain period ${a.retainMs} ms, HA ${a.backend}, API server ${p.apiServer} " +
      "with kube-controller-manager, kube-scheduler and KWOK nodes")
    line(s"baseline: ${b.spec.kind.label} (kind ALL); podsweep: ${p.spec.kind.label}")
    line()
    line(f"${"phase"}%-24s ${"drivers"}%8s ${"DELETEs"}%8s ${"per driver"}%11s ${"executors"}%10s ${"CMs GC'd"}%9s ${"Svcs GC'd"}%10s " +
      f"${"orphans (exec/CM/Svc)"}%22s ${"GC s (max)"}%11s ${"PodGC"}%6s ${"canceled gone s"}%16s")
    Seq(b, p).foreach { r =>
      val l = left(r)
      val dels = r.drivers.flatMap(_.pod).map(r.serverDeletes(_).size).sum
      line(f"${r.spec.kind.label}%-24s ${r.drivers.size}%8d $dels%8d ${perDriver(r)}%11.2f ${r.executorsMade}%10d ${r.gcDeletedOwned.getOrElse("configmaps", 0)}%9d " +
        f"${r.gcDeletedOwned.getOrElse("services", 0)}%10d ${s"${l.executors}/${l.configMaps}/${l.services}"}%22s ${max(r.gcMillis)}%11s " +
        f"${r.deletes.count(d => r.isPodGc(d.user))}%6d ${max(r.cancelMillis)}%16s")
    }
    line()
    Seq(b, p).foreach(r => line(s"${r.spec.kind.label}: pod DELETEs by others: ${r.othersByUser.toSeq.sorted.map { case (u, n) => s"$u=$n" }.mkString(", ")}; " +
      s"batch states ${r.states}"))
    def str(s: String) = "\"" + s + "\""
    def obj(m: Seq[(String, String)]): String = m.map { case (k, v) => "\"" + k + "\":" + v }.mkString("{", ",", "}")
    def side(prefix: String, r: SparkRun.Result): Seq[(String, String)] = {
      val l = left(r)
      Seq(
        s"${prefix}kind" -> str(r.spec.kind.label),
        s"${prefix}drivers" -> r.drivers.size.toString,
        s"${prefix}server_deletes_per_driver" -> f"${perDriver(r)}%.2f",
        s"${prefix}max_server_deletes_of_a_driver" -> r.perDriver(r.drivers).foldLeft(0)(math.max).toString,
        s"${prefix}executors" -> r.executorsMade.toString,
        s"${prefix}configmaps_deleted_by_gc" -> r.gcDeletedOwned.getOrElse("configmaps", 0).toString,
        s"${prefix}services_deleted_by_gc" -> r.gcDeletedOwned.getOrElse("services", 0).toString,
        s"${prefix}orphan_executors" -> l.executors.toString,
        s"${prefix}orphan_configmaps" -> l.configMaps.toString,
        s"${prefix}orphan_services" -> l.services.toString,
        s"${prefix}gc_ms_max" -> r.gcMillis.foldLeft(0L)(math.max).toString,
        s"${prefix}gc_ms" -> r.gcMillis.sorted.mkString("[", ",", "]"),
        s"${prefix}executors_deleted_by_gc" -> r.deletes.count(d => r.isGc(d.user) && !r.driverNames.contains(d.pod)).toString,
        s"${prefix}gc_deletes" -> r.deletes.count(d => r.isGc(d.user)).toString,
        s"${prefix}pod_gc_deletes" -> r.deletes.count(d => r.isPodGc(d.user)).toString,
        s"${prefix}pod_gc_double_deletes" -> r.podGcDoubles.toString,
        s"${prefix}submit_failures" -> r.submitFailures.toString,
        s"${prefix}states" -> obj(r.states.toSeq.sorted.map { case (k, v) => k -> v.toString }))
    }
    val json = obj(Seq(
      "demo" -> str("cluster"),
      "servers" -> a.servers.toString,
      "batches" -> a.batches.toString,
      "canceled" -> a.canceled.toString,
      "executors_per_driver" -> a.executors.toString,
      "retain_ms" -> a.retainMs.toString,
      "backend" -> str(a.backend),
      "spark" -> str(org.podsweep.testkit.SparkHome.Version),
      "canceled_gone_ms_max" -> p.cancelMillis.foldLeft(0L)(math.max).toString,
      "canceled_server_deletes_per_driver" -> p.perDriver(p.canceled).mkString("[", ",", "]"),
      "api_server" -> str(p.apiServer + " (full control plane: controller manager, scheduler, KWOK)")) ++
      side("", p) ++ side("baseline_", b))
    line(json)
    val text = out.toString
    a.out match {
      case Some(f) =>
        val w = new PrintWriter(f, StandardCharsets.UTF_8.name())
        try w.print(text) finally w.close()
      case None => print(text)
    }
  }
}
