package org.podsweep.kyuubi

import java.nio.file.{Files, Path}

import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.demo.Phases
import org.podsweep.testkit.{HaBackend, KyuubiHome, RealKube}
import org.scalatest.funsuite.AnyFunSuite

/**
 * One Kyuubi release ([[KyuubiHome.Version]]: `-Dpodsweep.kyuubi.version`, or the release sbt
 * compiled against, `PODSWEEP_KYUUBI_VERSION`) in each kind, on the real kube-apiserver (the test
 * JVM's shared [[RealKube]]; DELETEs counted from its audit log) with real ZooKeeper: three servers,
 * each in its own JVM, 30 driver pods terminated.
 *
 *  - stock: Kyuubi's own cleanup (kind ALL) on every server, the baseline: every pod deleted, the
 *    extra DELETEs counted;
 *  - drop-in: stock Kyuubi with podsweep's drop-in provider (Kyuubi's cleaner NONE, podsweep's
 *    watch.kind ALL), loaded by Kyuubi's own application manager;
 *  - patched: Kyuubi with java/kyuubi/kyuubi-<version>-podsweep.diff (1.11.1's and 1.10.3's are made
 *    from 1.12.0's by `scripts/kyuubi port`).
 * The podsweep kinds run a failover (the first scope's leader stopped in mid-run) and must send one
 * DELETE per driver pod, by the scope's leader, none to a decoy. Each test is cancelled when its
 * pieces are not built (the reason names the scripts/kyuubi command).
 */
class KyuubiVersionSuite extends AnyFunSuite {
  private val version = KyuubiHome.Version
  private lazy val kube: RealKube = RealKube.sharedInstance
  private lazy val admin: KubernetesClient = kube.admin
  private lazy val logDir: Path = Files.createTempDirectory(s"podsweep-kyuubi-$version-")

  private def need(kind: KyuubiHome.Kind): Unit = {
    KyuubiHome.missing(kind).foreach(why => cancel(why))
    RealKube.missing.foreach(why => cancel(why))
  }

  /** Namespaces named by release and kind, so runs of several releases share one API server. */
  private def spec(kind: String, mode: String = "patch", failover: Boolean = false): Phases.Spec =
    Phases.Spec(servers = 3, scopes = 1, pods = 30, retainMs = 2000, mode = mode, failover = failover,
      namespacePrefix = s"v${version.replace('.', '-')}-$kind-", logDir = logDir, progress = m => info(m))

  private def summary(what: String, r: Phases.PhaseResult): String =
    f"$what: ${r.pods} pods, ${r.requests} DELETE requests (${r.perPod}%.2f per pod; ${r.code(200)} answered 200, " +
      s"${r.code(404)} 404), leaked ${r.leaked}, wrongful ${r.wrongful}, decoys missing ${r.decoysMissing}, " +
      s"WARN/ERROR lines ${r.loudLines}" + r.failover.map(f => s", failover: ${f.stopped} stopped (${f.how}), " +
        s"successor ${f.main.flatMap(_.server).getOrElse("none")}").getOrElse("")

  test(s"stock Kyuubi $version, 3 servers (cleanup kind ALL): every driver pod deleted, none wrongly") {
    need(KyuubiHome.Stock)
    val r = Phases.baseline(spec("stock"), kube, admin)
    info(summary(r.kind, r))
    assert(r.kind == KyuubiHome.Stock.label)
    assert(r.leaked == 0 && r.wrongful == 0 && r.decoysMissing == 0)
    val byPod = r.deletes.groupBy(_.pod)
    assert(byPod.size == r.pods && byPod.values.forall(_.exists(_.status == 200)))
  }

  private def podsweepRun(kind: KyuubiHome.Kind, mode: String): Unit = {
    need(kind)
    val ha = HaBackend.start("zookeeper")
    try {
      val r = Phases.podsweep(spec(mode.replace("-", ""), mode, failover = true), kube, admin, ha)
      info(summary(r.kind, r))
      assert(r.kind == kind.label)
      assert(r.leaked == 0 && r.wrongful == 0 && r.decoysMissing == 0)
      val successor = r.failover.flatMap(_.main).flatMap(_.server)
      assert(successor.nonEmpty, s"no successor after the failover: ${r.failover}")
      // The API server's own count: every driver pod deleted by exactly one DELETE (one 200 each).
      val audited = kube.allPodDeletes.filter(e => r.scopes.contains(e.namespace))
      val accepted = audited.filter(_.code == 200)
      assert(accepted.size == r.pods && accepted.groupBy(_.name).values.forall(_.size == 1), accepted)
      // Anything more can only be a 404 (the pod already gone) from the successor, whose informer
      // had not yet delivered the DELETE event of a pod its predecessor deleted when it took over
      // (docs/safety.md, guarantee 4): counted and reported, never a second deletion.
      val extra = audited.filter(_.code != 200)
      assert(extra.forall(e => e.code == 404 && successor.contains(e.identity)), extra)
      info(s"API server audit: ${audited.size} pod DELETEs, ${accepted.size} answered 200 (one per pod), " +
        s"${extra.size} answered 404 (the successor, ${successor.getOrElse("-")}, after the failover)")
    } finally ha.close()
  }

  test(s"Kyuubi $version with podsweep's drop-in, 3 servers, ZooKeeper, a failover: one DELETE per driver pod") {
    podsweepRun(KyuubiHome.Dropin, "drop-in")
  }

  test(s"Kyuubi $version with the podsweep patch, 3 servers, ZooKeeper, a failover: one DELETE per driver pod") {
    podsweepRun(KyuubiHome.Patched, "patch")
  }
}
