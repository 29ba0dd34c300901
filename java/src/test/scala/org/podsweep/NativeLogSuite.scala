package org.podsweep

import org.podsweep.testkit.LogCapture
import org.scalatest.funsuite.AnyFunSuite

class NativeLogSuite extends AnyFunSuite {
  test("Rust targets map to org.podsweep.native.* logger names") {
    assert(NativeLog.loggerName("podsweep::deleter") == "org.podsweep.native.deleter")
    assert(NativeLog.loggerName("podsweep::election::zookeeper") == "org.podsweep.native.election.zookeeper")
    assert(NativeLog.loggerName("podsweep") == "org.podsweep.native")
    assert(NativeLog.loggerName("kube_client::client::builder") == "org.podsweep.native.kube_client.client.builder")
    assert(NativeLog.loggerName(null) == "org.podsweep.native")
    assert(NativeLog.loggerName("") == "org.podsweep.native")
  }

  test("listeners see records; a throwing listener or bad input never escapes log()") {
    val capture = new LogCapture
    val bad = new NativeLog.Listener {
      override def onLog(level: Int, target: String, message: String): Unit = throw new OutOfMemoryError("listener")
    }
    NativeLog.addListener(bad)
    try {
      NativeLog.log(NativeLog.WARN, "podsweep::test", "hello")
      NativeLog.log(99, null, null)
      NativeLog.log(-5, "podsweep::test", "low")
      val recs = capture.records
      assert(recs.exists(r => r.level == NativeLog.WARN && r.target == "podsweep::test" && r.message == "hello"))
      assert(recs.exists(r => r.level == NativeLog.TRACE && r.message == ""))
      assert(recs.exists(r => r.level == NativeLog.ERROR && r.message == "low"))
    } finally {
      NativeLog.removeListener(bad)
      capture.close()
    }
    intercept[IllegalArgumentException](NativeLog.addListener(null))
  }
}
