package org.podsweep

import java.nio.file.{Files, Paths}

import scala.collection.JavaConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.scalatest.funsuite.AnyFunSuite

/**
 * `org.podsweep.Redaction`, the JVM side's redaction of configuration secrets, on the cases of
 * `tests/data/redaction.json`, which the native side's `config::redact` passes too; and the
 * native side's exception messages, which never carry a secret value.
 */
class RedactionSuite extends AnyFunSuite {
  private val table = Paths.get(System.getProperty("podsweep.repo", ".."), "tests", "data", "redaction.json")

  test("the shared cases of tests/data/redaction.json") {
    val cases = new ObjectMapper().readTree(Files.readAllBytes(table))
    assert(cases.size() >= 5)
    cases.elements().asScala.foreach { c =>
      val conf = c.get("conf").fields().asScala.map(e => e.getKey -> e.getValue.asText()).toMap.asJava
      assert(Redaction.scrub(conf, c.get("text").asText()) == c.get("want").asText(), c.get("name").asText())
    }
  }

  test("a redacted throwable keeps classes and stack traces and drops the secret from every message") {
    val conf = Map("kyuubi.kubernetes.authenticate.oauthToken" -> "tok-91c2e7").asJava
    val cause = new NumberFormatException("For input string: \"tok-91c2e7\"")
    val t = new IllegalArgumentException("bad value tok-91c2e7", cause)
    val r = Redaction.redacted(conf, t)
    assert(r.toString == "java.lang.IllegalArgumentException: bad value *********(redacted)")
    assert(r.getCause.toString.startsWith("java.lang.NumberFormatException"))
    assert(!r.getCause.getMessage.contains("tok-91c2e7"))
    assert(r.getStackTrace.sameElements(t.getStackTrace))
  }

  test("a chain of causes that is a cycle is redacted once round, without overflowing the stack") {
    val conf = Map("kyuubi.ha.zookeeper.auth.digest" -> "kyuubi:zk-pw-77").asJava
    val a = new IllegalStateException("auth kyuubi:zk-pw-77 refused")
    val b = new RuntimeException("retry with zk-pw-77")
    a.initCause(b)
    b.initCause(a) // a -> b -> a
    val r = Redaction.redacted(conf, a)
    assert(r.toString == "java.lang.IllegalStateException: auth *********(redacted) refused", r)
    assert(r.getCause.toString == "java.lang.RuntimeException: retry with *********(redacted)", r.getCause)
    assert(r.getCause.getCause == null)
  }

  test("the native side's exception message about a secret value does not show it") {
    val e = intercept[IllegalArgumentException](PodSweeper.create(
      Map("kyuubi.kubernetes.spark.cleanupTerminatedDriverPod.rateLimit.qps" -> "password-4d1a").asJava, "s1"))
    assert(e.getMessage.contains("rateLimit.qps") && !e.getMessage.contains("password-4d1a"), e.getMessage)
    assert(e.getMessage.contains(Redaction.REPLACEMENT), e.getMessage)
  }
}
