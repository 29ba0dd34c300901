package org.podsweep

import java.util.UUID
import java.util.concurrent.{CountDownLatch, TimeUnit}

import scala.collection.JavaConverters._

import org.apache.curator.test.TestingServer
import org.scalatest.concurrent.Eventually
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.SpanSugar._

/**
 * Issue 10 (smaller): `observe` never blocks on `close`. A leader whose ZooKeeper went away needs
 * about 2 s to give up releasing its latch at close; meanwhile every other call returns at once.
 */
class CloseSuite extends AnyFunSuite with Eventually {
  implicit override val patienceConfig: PatienceConfig = PatienceConfig(30.seconds, 20.millis)

  test("observe, isClosed and isLeader do not wait for a slow native close") {
    val zk = new TestingServer(true)
    // An API server that answers (a leader campaigns only once it has read which cluster and
    // namespace it cleans); no DELETE is due in this test.
    val api = new org.podsweep.testkit.MockKube
    try {
      val conf = Map(
        "kyuubi.kubernetes.master.address" -> api.url,
        "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.kind" -> "ALL",
        "kyuubi.kubernetes.terminatedApplicationRetainPeriod" -> "PT1H",
        "kyuubi.ha.addresses" -> zk.getConnectString,
        "kyuubi.ha.namespace" -> s"close-${UUID.randomUUID().toString.take(8)}",
        "kyuubi.ha.zookeeper.session.timeout" -> "6000",
        "kyuubi.ha.zookeeper.connection.timeout" -> "4000")
      val s = PodSweeper.create(conf.asJava, "close:10009")
      s.observe(null, "ns", PodEvent.ADD, "tag", "driver", UUID.randomUUID().toString, "RUNNING", true, 0L, false)
      eventually(assert(s.isLeader(null, "ns")))
      zk.stop() // the leader cannot delete its latch node any more: close waits for its timeout
      val closing = new CountDownLatch(1)
      val closer = new Thread(new Runnable {
        override def run(): Unit = { closing.countDown(); s.close() }
      })
      closer.start()
      closing.await()
      eventually(assert(s.isClosed))
      assert(closer.isAlive, "the native close is still releasing leadership")
      val e = intercept[IllegalStateException](
        s.observe(null, "ns", PodEvent.UPDATE, "tag", "driver", UUID.randomUUID().toString, "FINISHED", true, 0L, false))
      assert(e.getMessage.contains("closed"))
      intercept[IllegalStateException](s.isLeader(null, "ns"))
      assert(closer.isAlive, "observe returned while close was still running")
      s.close() // a second close returns at once too
      closer.join(TimeUnit.SECONDS.toMillis(30))
      assert(!closer.isAlive)
    } finally {
      zk.close()
      api.close()
    }
  }
}
