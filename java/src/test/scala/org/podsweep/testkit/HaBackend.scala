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

/**
 * A ZooKeeper or etcd that someone else started and stops (scripts/matrix: ZooKeeper 3.4, 3.8 or
 * 3.9, etcd 3.4 or 3.6, each a process of its own), reached at `address` (`host:port`). The same
 * `kyuubi.ha.*` keys and timeouts as [[ZooKeeperBackend]] (session 6 s, as the demo) and
 * [[EtcdBackend]] (lease 2 s); `close()` leaves the server running.
 *
 * @param version what the server says it is (ZooKeeper's `srvr`, etcd's `/version`), for the name
 */
final class ExternalHaBackend(val name: String, address: String, version: String, sessionTimeoutMs: Int = 6000,
    leaseTimeout: String = "PT2S") extends HaBackend {
  require(HaBackend.Names.contains(name), s"unknown HA backend $name (zookeeper or etcd)")
  require(address.matches("[^,:\\s]+:[0-9]+"), s"the HA address must be host:port, got '$address'")
  override def kyuubiConf: Map[String, String] = name match {
    case "etcd" => Map(
      "kyuubi.ha.client.class" -> EtcdServer.ClientClass,
      "kyuubi.ha.addresses" -> address,
      "kyuubi.ha.etcd.lease.timeout" -> leaseTimeout,
      EtcdServer.ElectionLeaseKey -> leaseTimeout)
    case _ => Map(
      "kyuubi.ha.addresses" -> address,
      "kyuubi.ha.zookeeper.session.timeout" -> sessionTimeoutMs.toString,
      "kyuubi.ha.zookeeper.connection.timeout" -> "4000")
  }
  override def close(): Unit = ()
  override def toString: String = s"$name $version ($address)"
}
