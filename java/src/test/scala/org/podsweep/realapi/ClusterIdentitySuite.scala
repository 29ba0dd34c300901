package org.podsweep.realapi

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path}
import java.time.Instant
import java.time.temporal.ChronoUnit

import io.fabric8.kubernetes.client.KubernetesClient
import org.podsweep.testkit.{HaBackend, KyuubiPods, PodsweepDaemon, RealKube}
import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * One cluster, one election per namespace, whatever URL a server uses: two daemons on the real
 * kube-apiserver and one ZooKeeper, one reaching the API server as `https://127.0.0.1:PORT`, the
 * other as `https://localhost:PORT` (the server's certificate names both), by each of the three
 * ways a server finds its API server: `kyuubi.kubernetes.master.address`, a kubeconfig, and the
 * in-cluster environment (`KUBERNETES_SERVICE_HOST`, the ServiceAccount files where Kubernetes
 * mounts them: the daemon runs in a private mount namespace with them there). Each time one
 * leader for the namespace, and each of 10 terminated driver pods gets one DELETE in the audit
 * log. Before the cluster's identity (the digest of the CA certificate in the namespace's
 * `kube-root-ca.crt` ConfigMap) named the election, the servers elected under their URLs: both
 * led, 20 DELETEs for 10 pods. Each daemon also wins podsweep 0.1's election of its own URL first
 * (`ha.legacyElection`): the two URLs are two such elections, and the cluster's election decides.
 */
class ClusterIdentitySuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(90, Seconds), Span(200, Millis))

  private lazy val kube: RealKube = RealKube.sharedInstance
  private lazy val admin: KubernetesClient = kube.admin
  private lazy val logDir: Path = Files.createTempDirectory("podsweep-realapi-identity-")
  private val P = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod."

  private def need(): Unit =
    RealKube.missing.orElse(PodsweepDaemon.missing).foreach(w => fail(s"cannot run: $w"))

  private def port: String = kube.url.substring(kube.url.lastIndexOf(':') + 1)
  private def urlOf(host: String): String = s"https://$host:$port"

  /** The keys every daemon of a test shares: its scope, kind ALL, a short retain period. */
  private def common(ns: String, ha: HaBackend, haNs: String): Map[String, String] = ha.kyuubiConf ++ Map(
    "kyuubi.kubernetes.client.initialize.list" -> s":$ns",
    P + "kind" -> "ALL",
    "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "2000",
    "kyuubi.ha.namespace" -> haNs)

  /** A kubeconfig whose one context reaches the API server at `host` with identity `name`'s token. */
  private def kubeconfig(name: String, host: String): Path = {
    val token = new String(Files.readAllBytes(java.nio.file.Paths.get(
      kube.clientConf(name)("kyuubi.kubernetes.authenticate.oauthTokenFile"))), StandardCharsets.UTF_8).trim
    val f = logDir.resolve(s"$name-kubeconfig.yaml")
    Files.write(f, s"""apiVersion: v1
                      |kind: Config
                      |clusters:
                      |- name: local
                      |  cluster:
                      |    server: ${urlOf(host)}
                      |    certificate-authority: ${kube.caFile}
                      |users:
                      |- name: $name
                      |  user:
                      |    token: $token
                      |contexts:
                      |- name: local
                      |  context:
                      |    cluster: local
                      |    user: $name
                      |current-context: local
                      |""".stripMargin.getBytes(StandardCharsets.UTF_8))
    f
  }

  /** The files Kubernetes mounts into a pod for its ServiceAccount: token, CA, namespace. */
  private def serviceAccountDir(name: String, ns: String): Path = {
    val dir = Files.createDirectories(logDir.resolve(s"$name-serviceaccount"))
    Files.copy(java.nio.file.Paths.get(kube.clientConf(name)("kyuubi.kubernetes.authenticate.oauthTokenFile")),
      dir.resolve("token"), java.nio.file.StandardCopyOption.REPLACE_EXISTING)
    Files.copy(java.nio.file.Paths.get(kube.caFile), dir.resolve("ca.crt"), java.nio.file.StandardCopyOption.REPLACE_EXISTING)
    Files.write(dir.resolve("namespace"), ns.getBytes(StandardCharsets.UTF_8))
    dir
  }

  /** Runs the daemon with `dir` mounted where Kubernetes mounts a pod's ServiceAccount files. */
  private def inPod(dir: Path): Seq[String] = Seq("unshare", "--mount", "--propagation", "private", "sh", "-c",
    "mount -t tmpfs tmpfs /run && mkdir -p /run/secrets/kubernetes.io/serviceaccount && " +
      s"mount --bind '$dir' /run/secrets/kubernetes.io/serviceaccount && exec " + "\"$@\"", "in-pod")

  /** No kubeconfig from the environment or the home directory. */
  private def noKubeconfig(name: String): Map[String, String] =
    Map("KUBECONFIG" -> null, "HOME" -> Files.createDirectories(logDir.resolve(s"$name-home")).toString,
      "KUBERNETES_SERVICE_HOST" -> null, "KUBERNETES_SERVICE_PORT" -> null)

  /**
   * Two daemons made by `make` (name, host) clean 10 terminated driver pods of `ns`: one leader,
   * one DELETE per pod in the audit log, one election key on both.
   */
  private def oneElection(ns: String)(make: (String, String, HaBackend) => PodsweepDaemon): Unit = {
    need()
    kube.ensureNamespace(ns)
    val ha = HaBackend.start("zookeeper")
    val daemons = Seq("127.0.0.1" -> s"$ns-ip", "localhost" -> s"$ns-dns").map { case (host, name) => make(name, host, ha) }
    try {
      val leader = eventually(daemons.filter(_.isLeader(ns)) match {
        case Seq(one) => one
        case other => fail(s"leaders: ${other.map(_.name)}")
      })
      val keys = eventually {
        val k = daemons.map(_.status(ns).string("election_scope"))
        assert(k.forall(_.startsWith("cluster:")), k)
        k
      }
      assert(keys.distinct.size == 1, keys)
      val pods = (0 until 10).map(i => kube.createPod(admin, ns, KyuubiPods.driver(f"identity-$i%02d")))
      val at = Instant.now().truncatedTo(ChronoUnit.SECONDS)
      pods.foreach(p => admin.pods().inNamespace(ns).resource(KyuubiPods.terminated(p, succeeded = true, at)).updateStatus())
      eventually(assert(admin.pods().inNamespace(ns).list().getItems.isEmpty))
      // Every pod was deleted: the leader's count settles at 10 and the follower sent none.
      eventually(assert(leader.status(ns).outcome("accepted") == 10, leader.status(ns)))
      val deletes = kube.podDeletes(ns)
      assert(deletes.size == 10 && deletes.forall(d => d.status == 200 && d.bearer.contains(leader.name)),
        deletes.map(d => (d.pod, d.status, d.bearer)))
      daemons.filterNot(_ eq leader).foreach(f => assert(f.status(ns).deletesSent == 0, f.status(ns)))
      info(s"$ns: ${daemons.map(_.name).mkString(" and ")} elected one leader (${leader.name}) under ${keys.head}; " +
        s"10 pods, ${deletes.size} DELETEs (audit log), all 200")
    } finally {
      daemons.foreach(d => scala.util.Try(d.close()))
      ha.close()
    }
  }

  test("master.address: https://127.0.0.1:PORT and https://localhost:PORT elect one leader, one DELETE per pod") {
    oneElection("identity-master") { (name, host, ha) =>
      new PodsweepDaemon(name, kube.clientConf(name) ++ common("identity-master", ha, "kyuubi-identity-master") ++
        Map("kyuubi.kubernetes.master.address" -> urlOf(host)), logDir)
    }
  }

  test("kubeconfig: two kubeconfigs naming the API server by IP and by name elect one leader, one DELETE per pod") {
    oneElection("identity-kubeconfig") { (name, host, ha) =>
      new PodsweepDaemon(name, common("identity-kubeconfig", ha, "kyuubi-identity-kubeconfig") ++
        Map("kyuubi.kubernetes.namespace" -> "identity-kubeconfig"), logDir,
        env = noKubeconfig(name) + ("KUBECONFIG" -> kubeconfig(name, host).toString))
    }
  }

  test("in-cluster: KUBERNETES_SERVICE_HOST 127.0.0.1 and localhost with the mounted ServiceAccount elect one leader") {
    oneElection("identity-incluster") { (name, host, ha) =>
      new PodsweepDaemon(name, common("identity-incluster", ha, "kyuubi-identity-incluster") ++
        Map("kyuubi.kubernetes.namespace" -> "identity-incluster"), logDir,
        env = noKubeconfig(name) ++ Map("KUBERNETES_SERVICE_HOST" -> host, "KUBERNETES_SERVICE_PORT" -> port),
        wrap = inPod(serviceAccountDir(name, "identity-incluster")))
    }
  }

  test("a namespace whose identity cannot be read is held: no campaign, unhealthy, one ERROR naming the RBAC rule; it campaigns once published") {
    need()
    val ns = "identity-unpublished"
    kube.ensureNamespaceWithoutRootCa(ns)
    val ha = HaBackend.start("zookeeper")
    val d = new PodsweepDaemon("identity-held", kube.clientConf("identity-held") ++
      common(ns, ha, "kyuubi-identity-held"), logDir)
    try {
      eventually {
        val st = d.status(ns)
        assert(st.string("pause_reason") == "cluster_identity" && st.fields().get("healthy") == java.lang.Boolean.FALSE, st)
      }
      assert(!d.isLeader(ns))
      val errors = d.log.filter(l => l.contains("ERROR") && l.contains("cannot read which cluster it is in"))
      assert(errors.size == 1, d.log.mkString("\n"))
      assert(errors.head.contains("kube-root-ca.crt") && errors.head.contains("404") &&
        errors.head.contains("electionKey=URL"), errors.head)
      // Published (as the root CA publisher would): the next read, at most a minute later, works.
      kube.publishRootCa(ns)
      eventually(timeout(Span(90, Seconds))) {
        assert(d.isLeader(ns))
        assert(d.status(ns).string("election_scope").startsWith("cluster:"), d.status(ns))
      }
    } finally {
      d.close()
      ha.close()
    }
  }
}
