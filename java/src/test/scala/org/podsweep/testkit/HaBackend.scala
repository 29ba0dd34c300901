package org.podsweep.testkit

import org.apache.curator.test.TestingServer

/** The HA service podsweep elects its cleanup leaders through, as Kyuubi configures it. */
sealed trait HaBackend extends AutoCloseable {
  /** `zookeeper` or `etcd`. */
  def name: String

  /** The `kyuubi.ha.*` keys selecting this service (client class, addresses, timeouts). */
  def kyuubiConf: Map[String, String]
}

object HaBackend {
  val Names: Seq[String] = Seq("zookeeper", "etcd")

  /** Starts the named backend: a Curator TestingServer, or the system's etcd. */
  def start(name: String): HaBackend = name match {
    case "zookeeper" => new ZooKeeperBackend(new TestingServer(true))
    case "etcd" => new EtcdBackend(new EtcdServer())
    case other => throw new IllegalArgumentException(s"unknown HA backend $other (zookeeper or etcd)")
  }
}

final class ZooKeeperBackend(val server: TestingServer, sessionTimeoutMs: Int = 4000) extends HaBackend {
  override def name: String = "zookeeper"
  override def kyuubiConf: Map[String, String] = Map(
    "kyuubi.ha.addresses" -> server.getConnectString,
    "kyuubi.ha.zookeeper.session.timeout" -> sessionTimeoutMs.toString,
    "kyuubi.ha.zookeeper.connection.timeout" -> "4000")
  override def close(): Unit = server.close()
  override def toString: String = s"ZooKeeper(${server.getConnectString})"
}

final class EtcdBackend(val server: EtcdServer, leaseTimeout: String = "PT2S") extends HaBackend {
  override def name: String = "etcd"
  override def kyuubiConf: Map[String, String] = server.kyuubiConf(leaseTimeout)
  override def close(): Unit = server.close()
  override def toString: String = server.toString
}
