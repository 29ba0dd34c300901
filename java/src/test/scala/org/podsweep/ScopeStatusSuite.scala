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

  test("rejects what is not a JSON object") {
    Seq(null, "", "[]", "{", "{\"a\":}", "{\"a\":1} x", "{'a':1}", "{\"a\":tru}").foreach { bad =>
      intercept[IllegalArgumentException](ScopeStatus.parse(bad))
    }
  }
}
