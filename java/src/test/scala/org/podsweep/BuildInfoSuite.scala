package org.podsweep

import java.nio.charset.StandardCharsets
import java.nio.file.{Files, Path, Paths}
import java.util.concurrent.TimeUnit

import scala.io.Source

import org.scalatest.funsuite.AnyFunSuite

/** The jar and the native library report one version and commit; a mismatch is a clear exception. */
class BuildInfoSuite extends AnyFunSuite {
  private def info(version: String, commit: String): BuildInfo =
    BuildInfo.parseNative(s"podsweep-build-info version=$version commit=$commit")

  test("the jar's build-info resource carries the crate version and a commit") {
    val jar = BuildInfo.jar()
    val cargo = new String(Files.readAllBytes(Paths.get("..", "Cargo.toml")), StandardCharsets.UTF_8)
    val crateVersion = """(?m)^version\s*=\s*"([^"]+)"""".r.findFirstMatchIn(cargo).get.group(1)
    assert(jar.version == crateVersion)
    assert(jar.commit.matches("[0-9a-f]{40}|unknown"), jar.commit)
  }

  test("the loaded library reports the jar's version and commit") {
    NativeLoader.load()
    val jar = BuildInfo.jar()
    val lib = BuildInfo.library()
    assert(lib.version == jar.version && lib.commit == jar.commit, s"jar $jar, library $lib")
    assert(BuildInfo.mismatch(jar, lib, "x") == null)
  }

  test("parseNative reads the library's line and refuses anything else") {
    val i = info("1.2.3", "abc")
    assert(i.version == "1.2.3" && i.commit == "abc")
    assert(BuildInfo.parseNative(null) == null)
    assert(BuildInfo.parseNative("version=1 commit=2") == null)
    assert(BuildInfo.parseNative("podsweep-build-info version=1") == null)
  }

  test("versions must be equal; commits too, unless either is unknown") {
    assert(BuildInfo.mismatch(info("1.0.0", "a"), info("1.0.0", "a"), "x") == null)
    assert(BuildInfo.mismatch(info("1.0.0", "a"), info("1.0.0", "unknown"), "x") == null)
    assert(BuildInfo.mismatch(info("1.0.0", "unknown"), info("1.0.0", "b"), "x") == null)
    val m = BuildInfo.mismatch(info("1.0.0", "a"), info("1.0.0", "b"), "/lib/libpodsweep.so")
    assert(m != null && m.contains("commit a") && m.contains("commit b") && m.contains("/lib/libpodsweep.so"), m)
    val v = BuildInfo.mismatch(info("1.0.0", "unknown"), info("2.0.0", "unknown"), "x")
    assert(v != null && v.contains("version mismatch") && v.contains("1.0.0") && v.contains("2.0.0"), v)
  }

  /** Runs LoaderProbe in a fresh JVM with `extra` in front of the class path. */
  private def probe(extra: Option[Path]): (Int, String) = {
    val javaBin = Paths.get(System.getProperty("java.home"), "bin", "java").toString
    val cp = (extra.map(_.toString).toSeq :+ System.getProperty("java.class.path")).mkString(java.io.File.pathSeparator)
    val pb = new ProcessBuilder(javaBin, "-cp", cp, "org.podsweep.LoaderProbe").redirectErrorStream(true)
    val p = pb.start()
    val out = Source.fromInputStream(p.getInputStream, "UTF-8").mkString
    assert(p.waitFor(120, TimeUnit.SECONDS), out)
    (p.exitValue(), out)
  }

  test("a fresh JVM logs the jar's and the library's build once, at load") {
    val (rc, out) = probe(None)
    assert(rc == 0, out)
    val jar = BuildInfo.jar()
    val line = s"podsweep $jar, native library ${jar.version} (commit ${jar.commit}) loaded from "
    assert(out.split("\n").count(_.contains(line)) == 1, out)
  }

  test("a jar whose version differs from the library's: PodsweepException naming both, no crash") {
    val dir = Files.createTempDirectory("podsweep-mismatch-")
    try {
      val res = dir.resolve("org/podsweep/" + BuildInfo.RESOURCE)
      Files.createDirectories(res.getParent)
      Files.write(res, "version=0.0.0-other\ncommit=unknown\n".getBytes(StandardCharsets.UTF_8))
      val (rc, out) = probe(Some(dir))
      assert(rc == 3, out)
      assert(out.contains("mismatch=org.podsweep.PodsweepException: podsweep version mismatch: the jar is podsweep 0.0.0-other"), out)
      assert(out.contains(s"is podsweep ${BuildInfo.jar().version} (commit"), out)
      assert(out.contains("again=org.podsweep.PodsweepException"), out)
      assert(!out.contains("hs_err") && !out.contains("probe-ok"), out)
    } finally {
      Files.walk(dir).sorted(java.util.Comparator.reverseOrder[Path]()).forEach(p => Files.delete(p))
    }
  }
}
