package org.podsweep

import org.scalatest.funsuite.AnyFunSuite

class ScopeStatusSuite extends AnyFunSuite {
  test("reads the documented fields") {
    val st = ScopeStatus.parse(
      """{"scope":"ctx:ns","backend":"zookeeper","leadership":"LEADING","tracked":3,"scheduled":2,"due":0,
        |"inflight":0,"deletes_sent":1,"outcomes":{"accepted":1,"already_absent":0,"replaced":0,"forbidden":0,
        |"throttled":0,"server_error":0,"transport":0,"other":0},"context":null,"ratio":0.5,"ok":true,
        |"list":[1,"two",{"x":[]}],"esc":"a\"b\\c\u00e9\n"}""".stripMargin)
    assert(st.scope == "ctx:ns" && st.backend == "zookeeper" && st.leadership == "LEADING")
    assert(st.tracked == 3 && st.scheduled == 2 && st.due == 0 && st.inflight == 0 && st.deletesSent == 1)
    assert(st.outcome("accepted") == 1 && st.outcome("transport") == 0 && st.outcome("nope") == -1)
    assert(st.fields.get("context") == null && st.fields.containsKey("context"))
    assert(st.fields.get("ratio") == 0.5 && st.fields.get("ok") == true)
    assert(st.string("esc") == "a\"b\\c\u00e9\n")
    assert(st.number("missing") == -1 && st.string("missing") == null)
  }

  test("reads the pause fields, and their absence, leniently") {
    val st = ScopeStatus.parse(
      """{"paused":true,"pause_reason":"retry_after","paused_until_ms":1800000000000,"pause_ms":4200,
        |"pauses":[{"reason":"retry_after","detail":"429","since_ms":1,"until_ms":1800000000000,
        |"pause_ms":4200,"unhealthy":false},{"reason":"backoff","until_ms":null},7]}""".stripMargin)
    assert(st.paused && st.pauseReason == "retry_after" && st.pausedUntilMs == 1800000000000L && st.pauseMs == 4200)
    assert(st.pauses.size == 2)
    assert(st.pauses.get(0).get("detail") == "429" && st.pauses.get(1).get("until_ms") == null)
    val old = ScopeStatus.parse("{\"scope\":\"a:b\"}")
    assert(!old.paused && old.pauseReason == null && old.pausedUntilMs == -1 && old.pauseMs == 0 && old.pauses.isEmpty)
    val open = ScopeStatus.parse("{\"paused\":true,\"pause_reason\":\"refused\",\"paused_until_ms\":null}")
    assert(open.pausedUntilMs == -1, "open-ended")
  }

  test("rejects what is not a JSON object") {
    Seq(null, "", "[]", "{", "{\"a\":}", "{\"a\":1} x", "{'a':1}", "{\"a\":tru}").foreach { bad =>
      intercept[IllegalArgumentException](ScopeStatus.parse(bad))
    }
  }

  test("parseAll: each element's json() reads back as the same fields; integers are Long") {
    val all = ScopeStatus.parseAll(
      """[{"scope":"a:b","tracked":1,"big":123456789012,"pauses":[{"reason":"x","until_ms":null}]},
        |{"scope":"c:\"d\"","ratio":0.5}]""".stripMargin)
    assert(all.size == 2)
    all.forEach(st => assert(ScopeStatus.parse(st.json).fields == st.fields))
    assert(all.get(0).fields.get("tracked").isInstanceOf[java.lang.Long])
    assert(all.get(0).number("big") == 123456789012L && all.get(1).scope == "c:\"d\"")
    // An integer beyond a long is refused, as the native side never writes one.
    Seq(null, "[1]", "{}", "[{}] x", "[", "[{\"huge\":99999999999999999999}]").foreach { bad =>
      intercept[IllegalArgumentException](ScopeStatus.parseAll(bad))
    }
    val e = intercept[IllegalArgumentException](ScopeStatus.parse("{\"a\":}"))
    assert(e.getMessage.startsWith("not valid JSON"), e.getMessage)
  }
}
