package org.podsweep

import java.lang.management.ManagementFactory
import javax.management.ObjectName

import scala.collection.JavaConverters._

import org.scalatest.concurrent.Eventually._
import org.scalatest.funsuite.AnyFunSuite
import org.scalatest.time.{Millis, Seconds, Span}

/**
 * Every PodSweeper's status, readable without code: its JMX MBean (an attribute per scope, the
 * whole JSON, an operation that logs) and the status lines on `status.logInterval`.
 */
class StatusMBeanSuite extends AnyFunSuite {
  implicit val patienceConfig: PatienceConfig = PatienceConfig(Span(20, Seconds), Span(50, Millis))
  private def mbs = ManagementFactory.getPlatformMBeanServer

  test("the MBean has an attribute per scope with its status JSON, the whole array, and goes at close") {
    val s = LocalSweeper.create("mbean-host:10009")
    val name = s.statusMBean()
    try {
      assert(name == new ObjectName("org.podsweep:type=PodSweeper,server=\"mbean-host:10009\""))
      assert(mbs.isRegistered(name))
      LocalSweeper.finished(s, null, "spark-a", "p1")
      LocalSweeper.finished(s, "ctx", "spark-b", "p2")
      LocalSweeper.finished(s, "ctx", "spark-b", "p3")
      eventually {
        val scopes = mbs.getAttribute(name, "Scopes").asInstanceOf[Array[String]].toSeq
        assert(scopes == Seq("<default context>:spark-a", "ctx:spark-b"))
        val b = ScopeStatus.parse(mbs.getAttribute(name, "ctx:spark-b").asInstanceOf[String])
        assert(b.tracked == 2 && b.leadership == "LEADING" && b.string("server_id") == "mbean-host:10009", b)
        // What an operator looks for: health, pauses (cause and end), due, retries, the last failure.
        Seq("healthy", "paused", "pauses", "due", "retries", "last_failure").foreach(f =>
          assert(b.fields.containsKey(f), s"$f: $b"))
      }
      assert(mbs.getAttribute(name, "ServerId") == "mbean-host:10009")
      assert(ScopeStatus.parseAll(mbs.getAttribute(name, "StatusJson").asInstanceOf[String]).size == 2)
      val info = mbs.getMBeanInfo(name)
      assert(info.getAttributes.map(_.getName).toSet ==
        Set("ServerId", "Scopes", "StatusJson", "<default context>:spark-a", "ctx:spark-b"))
      assert(info.getOperations.map(_.getName).toSeq == Seq("logStatus"))
      intercept[javax.management.AttributeNotFoundException](mbs.getAttribute(name, "nope:nope"))
    } finally s.close()
    assert(!mbs.isRegistered(name), "unregistered at close")
    assert(s.statusMBean() == null)
  }

  test("two handles of one server id get two names; a confirmed id renames the MBean") {
    val a = LocalSweeper.create("twin:1")
    val b = LocalSweeper.create("twin:1")
    val c = PodSweeper.createAwaitingServerId(LocalSweeper.conf.asJava, "late:0")
    try {
      assert(a.statusMBean.toString == "org.podsweep:type=PodSweeper,server=\"twin:1\"")
      assert(b.statusMBean.toString == "org.podsweep:type=PodSweeper,server=\"twin:1\",instance=2")
      val before = c.statusMBean
      assert(before.getKeyProperty("server") == "\"late:0\"")
      c.confirmServerId("late:10009")
      assert(!mbs.isRegistered(before))
      assert(c.statusMBean.getKeyProperty("server") == "\"late:10009\"" && mbs.isRegistered(c.statusMBean))
      assert(mbs.getAttribute(c.statusMBean, "ServerId") == "late:10009")
    } finally Seq(a, b, c).foreach(_.close())
  }

  test("the status line: the gist, then the whole JSON; logStatus writes them on demand") {
    // The lines in a server's log, on the interval, are checked in a Kyuubi server's own log4j2
    // file (kyuubi.StatusJmxSuite); here, their text.
    val s = LocalSweeper.create("lines:10009")
    try {
      LocalSweeper.finished(s, null, "spark-a", "p1")
      // The scope task starts FOLLOWING and the local backend makes it LEADING a moment later.
      eventually(assert(ScopeStatus.parseAll(s.statusAll()).asScala.map(st => (st.tracked, st.leadership)) ==
        Seq((1L, "LEADING"))))
      val line = PodSweeperStatus.line(ScopeStatus.parseAll(s.statusAll()).get(0))
      assert(line.startsWith("Status of scope <default context>:spark-a on lines:10009: LEADING for "), line)
      assert(line.contains(", healthy, not paused, tracked 1, due 0, in flight 0, retries 0, no failure; status {"), line)
      assert(ScopeStatus.parse(line.substring(line.indexOf("; status ") + 9)).tracked == 1)
      mbs.invoke(s.statusMBean, "logStatus", Array.empty[AnyRef], Array.empty[String])
    } finally s.close()
    assert(PodSweeperStatus.intervalMs(null) == 600000L)
    assert(PodSweeperStatus.intervalMs("1500") == 1500L)
    assert(PodSweeperStatus.intervalMs("pt2m") == 120000L)
  }

  test("a bad status.logInterval is refused by create, naming the key") {
    val key = "kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.status.logInterval"
    val e = intercept[IllegalArgumentException](PodSweeper.create((LocalSweeper.conf + (key -> "0")).asJava, "bad:1"))
    assert(e.getMessage.contains(key), e.getMessage)
  }
}
