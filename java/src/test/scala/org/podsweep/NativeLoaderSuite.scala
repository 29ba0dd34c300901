package org.podsweep

import java.io.File
import java.nio.file.{Files, Paths}
import java.util.concurrent.TimeUnit

import scala.io.Source

import org.scalatest.funsuite.AnyFunSuite

class NativeLoaderSuite extends AnyFunSuite {
  test("platform names: os.arch amd64/x86_64 -> x86_64, aarch64/arm64 -> aarch64, Linux only") {
    assert(NativeLoader.normalizeArch("amd64") == "x86_64")
    assert(NativeLoader.normalizeArch("x86_64") == "x86_64")
    assert(NativeLoader.normalizeArch("aarch64") == "aarch64")
    assert(NativeLoader.normalizeArch("arm64") == "aarch64")
    assert(NativeLoader.normalizeArch("sparc") == null)
    assert(NativeLoader.normalizeOs("Linux") == "linux")
    assert(NativeLoader.normalizeOs("Mac OS X") == null)
    assert(NativeLoader.resourcePath("Linux", "amd64") == "/native/linux/x86_64/libpodsweep.so")
    assert(NativeLoader.resourcePath("Linux", "aarch64") == "/native/linux/aarch64/libpodsweep.so")
    assert(NativeLoader.resourcePath("Windows 11", "amd64") == null)
  }

  test("the library exports no test-only entry point unless built with jni-test-hooks") {
    val in = classOf[NativeLoader].getResourceAsStream("/native/linux/x86_64/libpodsweep.so")
    val bytes = try {
      val out = new java.io.ByteArrayOutputStream()
      val buf = new Array[Byte](1 << 16)
      Iterator.continually(in.read(buf)).takeWhile(_ >= 0).foreach(n => out.write(buf, 0, n))
      out.toByteArray
    } finally in.close()
    val text = new String(bytes, java.nio.charset.StandardCharsets.ISO_8859_1)
    val exported = text.contains("Java_org_podsweep_NativeBridge_panicForTest")
    val hooks = sys.env.get("PODSWEEP_TEST_HOOKS").contains("1")
    assert(exported == hooks, s"panicForTest exported: $exported, jni-test-hooks build: $hooks")
    assert(text.contains("Java_org_podsweep_NativeBridge_observe"))
  }

  test("the library is on the test class path at the shipped resource path") {
    assert(classOf[NativeLoader].getResource("/native/linux/x86_64/libpodsweep.so") != null)
  }

  test("when nothing works, UnsatisfiedLinkError lists every attempt and its error") {
    val e = intercept[UnsatisfiedLinkError] {
      NativeLoader.load("/nonexistent/libpodsweep.so", "podsweep-missing", "/native/none/none/libnothing.so")
    }
    val m = e.getMessage
    assert(m.contains("-Dpodsweep.native.path=/nonexistent/libpodsweep.so"), m)
    assert(m.contains("System.loadLibrary(\"podsweep-missing\")"), m)
    assert(m.contains("jar resource /native/none/none/libnothing.so: java.io.IOException: resource not found"), m)
    assert(m.split("\n").count(_.startsWith("  - ")) == 3, m)
    val relative = intercept[UnsatisfiedLinkError](NativeLoader.load("relative.so", "podsweep-missing", null))
    assert(relative.getMessage.contains("not an absolute path"), relative.getMessage)
  }

  test("in this JVM the library came from the jar resource, extracted to a temp directory") {
    NativeLoader.load()
    val from = NativeLoader.loadedFrom()
    assert(from.startsWith(new File(System.getProperty("java.io.tmpdir")).getCanonicalPath) ||
      from.startsWith(System.getProperty("java.io.tmpdir")), from)
    assert(from.contains("podsweep-native-"), from)
  }

  test("a fresh JVM extracts the library into an owner-only directory that is gone after exit") {
    val javaBin = Paths.get(System.getProperty("java.home"), "bin", "java").toString
    val cmd = new java.util.ArrayList[String]()
    Seq(javaBin, "-cp", System.getProperty("java.class.path"), "org.podsweep.LoaderProbe").foreach(cmd.add)
    val pb = new ProcessBuilder(cmd).redirectErrorStream(true)
    pb.environment().remove("LD_LIBRARY_PATH")
    val p = pb.start()
    val out = Source.fromInputStream(p.getInputStream, "UTF-8").mkString
    assert(p.waitFor(120, TimeUnit.SECONDS), out)
    assert(p.exitValue() == 0, out)
    val lines = out.split("\n").map(_.trim)
    val from = lines.collectFirst { case l if l.startsWith("loaded-from=") => l.stripPrefix("loaded-from=") }
      .getOrElse(fail(out))
    assert(from.contains("podsweep-native-") && from.endsWith("/libpodsweep.so"), out)
    assert(lines.contains("dir-perms=rwx------"), out)
    assert(lines.contains("probe-ok"), out)
    assert(!Files.exists(Paths.get(from)), s"$from should be deleted at exit")
    assert(!Files.exists(Paths.get(from).getParent), s"${Paths.get(from).getParent} should be deleted at exit")
  }

  test("-Dpodsweep.native.path, when it points at a real library, is used first") {
    // Copy the shipped library out and point a fresh JVM at it.
    val tmp = Files.createTempFile("podsweep-explicit-", ".so")
    try {
      val in = classOf[NativeLoader].getResourceAsStream("/native/linux/x86_64/libpodsweep.so")
      try Files.copy(in, tmp, java.nio.file.StandardCopyOption.REPLACE_EXISTING) finally in.close()
      val javaBin = Paths.get(System.getProperty("java.home"), "bin", "java").toString
      val pb = new ProcessBuilder(javaBin, s"-Dpodsweep.native.path=$tmp", "-cp", System.getProperty("java.class.path"),
        "org.podsweep.LoaderProbe").redirectErrorStream(true)
      val p = pb.start()
      val out = Source.fromInputStream(p.getInputStream, "UTF-8").mkString
      assert(p.waitFor(120, TimeUnit.SECONDS) && p.exitValue() == 0, out)
      assert(out.contains(s"loaded-from=$tmp"), out)
    } finally Files.deleteIfExists(tmp)
  }
}
