package org.podsweep.testkit

import java.util.UUID

import org.apache.curator.test.TestingServer
import org.scalatest.{BeforeAndAfterAll, Suite}

/** One fabric8 mock API server and one ZooKeeper (Curator TestingServer) per suite. */
trait KubeAndZk extends KubeAndHa { this: Suite =>
  override def haBackendName: String = "zookeeper"

  def zk: TestingServer = ha match {
    case z: ZooKeeperBackend => z.server
    case other => sys.error(s"HA backend is $other, not ZooKeeper")
  }
}

/** One API server (`apiName`) and one HA service (`haBackendName`: zookeeper or etcd) per suite. */
trait KubeAndHa extends BeforeAndAfterAll { this: Suite =>
  @volatile private var kubeOpt: Option[TestApi] = None
  @volatile private var haOpt: Option[HaBackend] = None

  /** `zookeeper` or `etcd`. */
  def haBackendName: String

  /** `mock` (the fabric8 CRUD mock, the default) or `pods-api` ([[PodsApi]]: a real server's DELETE rules). */
  def apiName: String = "mock"

  def kube: TestApi = kubeOpt.getOrElse(sys.error("API server not started"))
  def ha: HaBackend = haOpt.getOrElse(sys.error("HA backend not started"))

  override protected def beforeAll(): Unit = {
    super.beforeAll()
    haOpt = Some(HaBackend.start(haBackendName))
    kubeOpt = Some(TestApi.start(apiName))
  }

  override protected def afterAll(): Unit = {
    try {
      kubeOpt.foreach(_.close())
      haOpt.foreach(_.close())
    } finally super.afterAll()
  }

  def unique(prefix: String): String = s"$prefix-${UUID.randomUUID().toString.take(8)}"

  /** The Kyuubi configuration of one server: cleanup kind ALL, a short retain period, the suite's HA. */
  def kyuubiConf(
      token: String,
      haNamespace: String,
      retain: String = "PT1S",
      extra: Map[String, String] = Map.empty): Map[String, String] = Map(
    "kyuubi.kubernetes.master.address" -> kube.url,
    "kyuubi.kubernetes.namespace" -> "default",
    "kyuubi.kubernetes.authenticate.oauthToken" -> token,
    "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind" -> "ALL",
    "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> retain,
    "kyuubi.ha.namespace" -> haNamespace
  ) ++ ha.kyuubiConf ++ extra

  /** Starts logical servers named `names` (token = name), runs `body`, closes them all. */
  def withServers[T](haNamespace: String, names: Seq[String], retain: String = "PT1S")(
      body: Seq[LogicalServer] => T): T = {
    val servers = scala.collection.mutable.ArrayBuffer.empty[LogicalServer]
    try {
      names.foreach(n => servers += new LogicalServer(n, kube, kyuubiConf(n, haNamespace, retain)))
      body(servers.toVector)
    } finally {
      servers.reverse.foreach(s => scala.util.Try(s.close()))
    }
  }
}
