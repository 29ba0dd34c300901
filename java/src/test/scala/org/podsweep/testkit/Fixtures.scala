package org.podsweep.testkit

import java.util.UUID

import org.apache.curator.test.TestingServer
import org.scalatest.{BeforeAndAfterAll, Suite}

/** One fabric8 mock API server and one ZooKeeper (Curator TestingServer) per suite. */
trait KubeAndZk extends BeforeAndAfterAll { this: Suite =>
  @volatile private var kubeOpt: Option[MockKube] = None
  @volatile private var zkOpt: Option[TestingServer] = None

  def kube: MockKube = kubeOpt.getOrElse(sys.error("mock API server not started"))
  def zk: TestingServer = zkOpt.getOrElse(sys.error("ZooKeeper not started"))

  override protected def beforeAll(): Unit = {
    super.beforeAll()
    zkOpt = Some(new TestingServer(true))
    kubeOpt = Some(new MockKube)
  }

  override protected def afterAll(): Unit = {
    try {
      kubeOpt.foreach(_.close())
      zkOpt.foreach(_.close())
    } finally super.afterAll()
  }

  def unique(prefix: String): String = s"$prefix-${UUID.randomUUID().toString.take(8)}"

  /** The Kyuubi configuration of one server: cleanup kind ALL, a short retain period, ZooKeeper HA. */
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
    "kyuubi.ha.addresses" -> zk.getConnectString,
    "kyuubi.ha.zookeeper.session.timeout" -> "4000",
    "kyuubi.ha.zookeeper.connection.timeout" -> "4000",
    "kyuubi.ha.namespace" -> haNamespace
  ) ++ extra

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
