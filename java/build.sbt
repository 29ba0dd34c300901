// podsweep JVM binding: Java 8 bytecode API around libpodsweep.so, Scala tests and demo.
//
// The native library is taken from the Rust build in the repository root
// (target/x86_64-unknown-linux-gnu/release/libpodsweep.so, built by scripts/package) or from the
// file named by the environment variable PODSWEEP_NATIVE_LIB, and shipped as the resource
// native/linux/x86_64/libpodsweep.so. Tests load it through NativeLoader's extraction path, i.e.
// exactly the way the packaged jar is used.

import java.util.zip.ZipFile

val repoRoot = settingKey[File]("root of the podsweep repository")
val nativeLibrary = settingKey[File]("the libpodsweep.so to ship")
val nativeResource = "native/linux/x86_64/libpodsweep.so"
val platformClassifier = "linux-x86_64"
val jmhClean = taskKey[Unit]("removes JMH's generated benchmark code before its sources are recompiled")

// The crate version is the single source of truth for the artifact version.
def crateVersion(root: File): String = {
  val cargo = root / "Cargo.toml"
  val Version = """^version\s*=\s*"([^"]+)"\s*$""".r
  IO.readLines(cargo).collectFirst { case Version(v) => v }
    .getOrElse(sys.error(s"no version line in $cargo"))
}

// Kyuubi 1.12.0 as scripts/kyuubi leaves it: kyuubi-server.jar, its runtime classpath, and the
// patched jar. The Kyuubi suites, the demo and the benches run Kyuubi's KubernetesApplicationOperation
// in child JVMs (org.podsweep.kyuubi.KyuubiProcess, compiled against these jars); without them
// the kyuubiDriver project compiles nothing and those suites cancel.
val kyuubiCache: File =
  file(sys.env.getOrElse("PODSWEEP_TOOLS", sys.props("user.home") + "/.cache/podsweep-tools")) / "kyuubi-1.12.0"
def kyuubiRuntime: Seq[File] = {
  val list = kyuubiCache / "runtime-classpath.txt"
  if (list.isFile) IO.readLines(list).map(_.trim).filter(_.nonEmpty).map(file) else Nil
}
def kyuubiAvailable: Boolean = (kyuubiCache / "kyuubi-server.jar").isFile && kyuubiRuntime.nonEmpty

val slf4jVersion = "1.7.36"
val fabric8Version = "6.14.0"
val curatorVersion = "5.7.1"
val jmhVersion = "1.37"

lazy val root = (project in file("."))
  .settings(
    name := "podsweep",
    organization := "org.podsweep",
    repoRoot := baseDirectory.value.getParentFile,
    version := crateVersion(repoRoot.value),
    scalaVersion := "2.12.20",
    // Main code is Java only: no Scala suffix, no scala-library dependency in the published jar.
    crossPaths := false,
    autoScalaLibrary := false,
    Compile / compile / javacOptions ++= Seq("--release", "8", "-Xlint:all", "-Werror"),
    Compile / doc / javacOptions ++= Seq("--release", "8", "-Xdoclint:none"),
    scalacOptions ++= Seq("-release", "8", "-deprecation", "-feature", "-unchecked"),
    libraryDependencies ++= Seq(
      "org.slf4j" % "slf4j-api" % slf4jVersion % Provided,
      "org.scala-lang" % "scala-library" % scalaVersion.value % Test,
      "org.scalatest" %% "scalatest" % "3.2.19" % Test,
      "io.fabric8" % "kubernetes-client" % fabric8Version % Test,
      "io.fabric8" % "kubernetes-httpclient-okhttp" % fabric8Version % Test,
      "io.fabric8" % "kubernetes-server-mock" % fabric8Version % Test,
      "org.apache.curator" % "curator-test" % curatorVersion % Test,
      "org.apache.curator" % "curator-framework" % curatorVersion % Test,
      "com.google.guava" % "guava" % "33.4.8-jre" % Test,
      "org.slf4j" % "slf4j-simple" % "2.0.13" % Test, // fabric8 brings slf4j-api 2.x into tests
      // Adapters (org.podsweep.metrics, org.podsweep.fabric8): supplied by the Kyuubi server.
      "io.dropwizard.metrics" % "metrics-core" % "4.2.30" % Provided,
      "io.fabric8" % "kubernetes-client-api" % fabric8Version % Provided,
      // Only for Slf4jRoutingSuite's forked JVM (slf4j-simple stays this JVM's provider); 1.3.x is
      // the Java 8 line that is an SLF4J 2 provider (the 1.2.x binding is ignored by slf4j-api 2.x).
      "ch.qos.logback" % "logback-classic" % "1.3.15" % Test,
      // The observe bench (bench.jmh): JMH's runner, and its annotation processor, which javac finds
      // on the test class path and which writes the generated benchmark classes and
      // META-INF/BenchmarkList next to the compiled test classes.
      "org.openjdk.jmh" % "jmh-core" % jmhVersion % Test,
      "org.openjdk.jmh" % "jmh-generator-annprocess" % jmhVersion % Test
    ),
    nativeLibrary := sys.env.get("PODSWEEP_NATIVE_LIB").filter(_.nonEmpty).map(file)
      .getOrElse(repoRoot.value / "target" / "x86_64-unknown-linux-gnu" / "release" / "libpodsweep.so"),
    Compile / resourceGenerators += Def.task {
      val src = nativeLibrary.value
      val dst = (Compile / resourceManaged).value / nativeResource
      val log = streams.value.log
      if (src.isFile) {
        IO.copyFile(src, dst, preserveLastModified = true)
        Seq(dst)
      } else {
        log.warn(s"native library $src not found; build it with scripts/package")
        IO.delete(dst)
        Seq.empty
      }
    }.taskValue,
    // podsweep-<version>-linux-x86_64.jar, and refuse to package a jar without the library.
    Compile / packageBin / artifactClassifier := Some(platformClassifier),
    Compile / packageBin / artifactPath :=
      target.value / s"${name.value}-${version.value}-$platformClassifier.jar",
    Compile / packageBin := {
      val jar = (Compile / packageBin).value
      val zip = new ZipFile(jar)
      try {
        if (zip.getEntry(nativeResource) == null)
          sys.error(s"$jar has no $nativeResource (missing ${nativeLibrary.value}?)")
      } finally zip.close()
      jar
    },
    Compile / packageDoc / publishArtifact := false,
    Test / fork := true,
    Test / parallelExecution := false,
    Test / testForkedParallel := false,
    Test / javaOptions ++= Seq(
      "-Xmx1g",
      "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
      "-Dorg.slf4j.simpleLogger.log.org.podsweep=info",
      "-Dorg.slf4j.simpleLogger.showDateTime=true",
      "-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
      s"-Dorg.slf4j.simpleLogger.logFile=${(target.value / "test-output.log").getAbsolutePath}",
      "-Dzookeeper.admin.enableServer=false"
    ),
    Test / testOptions += Tests.Argument(TestFrameworks.ScalaTest, "-oDS"),
    // JMH's annotation processor runs in javac over the Java test sources, with the main code's
    // javac options but without -Werror: when zinc recompiles a bench.jmh source that did not
    // change (new javac options, a changed class it uses), the processor finds its previous output
    // on the class path, warns and keeps it, which is then still correct. Generated sources go to
    // their own directory (not the class directory, which is on javac's class path). When the
    // bench.jmh sources change (content hash), the previous generated sources, META-INF/BenchmarkList
    // and every class of the bench.jmh package are removed before compiling: zinc recompiles sources
    // whose classes are gone, so the processor runs afresh and nothing stale survives.
    Test / compile / javacOptions := (Compile / compile / javacOptions).value.filterNot(_ == "-Werror") ++
      Seq("-s", ((Test / sourceManaged).value / "jmh").getAbsolutePath),
    jmhClean := {
      val generated = (Test / sourceManaged).value / "jmh"
      val classes = (Test / classDirectory).value
      val stamp = target.value / "jmh-sources.hash"
      val sources = ((Test / javaSource).value ** "*.java").get
        .filter(_.getPath.contains(s"${java.io.File.separator}jmh${java.io.File.separator}"))
        .sortBy(_.getPath)
      val hash = Hash.toHex(Hash(sources.map(f => f.getPath + "\n" + IO.read(f)).mkString("\n")))
      if (!stamp.isFile || IO.read(stamp) != hash) {
        IO.delete(Seq(generated, classes / "META-INF" / "BenchmarkList", classes / "org" / "podsweep" / "bench" / "jmh"))
        IO.write(stamp, hash)
      }
      IO.createDirectory(generated)
    },
    Test / compile := (Test / compile).dependsOn(jmhClean, LocalProject("kyuubiDriver") / Compile / products,
      LocalProject("kyuubiDropin") / Compile / products).value,
    // Where the Kyuubi child JVMs find their pieces (org.podsweep.testkit.KyuubiHome).
    Test / javaOptions ++= Seq(
      s"-Dpodsweep.kyuubi.cache=$kyuubiCache",
      s"-Dpodsweep.kyuubi.driver=${(LocalProject("kyuubiDriver") / Compile / classDirectory).value}",
      s"-Dpodsweep.kyuubi.dropin=${(LocalProject("kyuubiDropin") / Compile / classDirectory).value}",
      s"-Dpodsweep.classes=${(Compile / classDirectory).value}",
      s"-Dpodsweep.native.lib=${nativeLibrary.value}",
      s"-Dpodsweep.repo=${repoRoot.value}") ++
      sys.env.get("PODSWEEP_DAEMON").filter(_.nonEmpty).map(d => s"-Dpodsweep.daemon=$d").toSeq,
    Test / run / fork := true,
    Test / run / connectInput := false,
    Test / run / outputStrategy := Some(StdoutOutput)
  )

// The Kyuubi-side driver of the child JVMs, compiled against Kyuubi 1.12.0's own jars (Scala
// 2.12.19 as Kyuubi); not part of any published artifact.
lazy val kyuubiDriver = (project in file("kyuubi/driver"))
  .dependsOn(root)
  .settings(
    name := "podsweep-kyuubi-driver",
    scalaVersion := "2.12.19",
    crossPaths := false,
    autoScalaLibrary := false, // Kyuubi's runtime classpath has scala-library 2.12.19
    scalacOptions ++= Seq("-release", "8", "-deprecation", "-feature", "-unchecked"),
    Compile / unmanagedJars := {
      if (kyuubiAvailable) ((kyuubiCache / "kyuubi-server.jar") +: kyuubiRuntime).map(Attributed.blank)
      else Nil
    },
    Compile / unmanagedSourceDirectories := {
      if (kyuubiAvailable) (Compile / unmanagedSourceDirectories).value else Nil
    },
    publish / skip := true
  )

// The drop-in for stock Kyuubi 1.12.0: an ApplicationOperation provider (META-INF/services) that
// runs podsweep in self-watch mode. Compiled against Kyuubi's own jars; shipped as
// podsweep-kyuubi-dropin-<version>.jar next to the podsweep platform jar in $KYUUBI_HOME/jars.
lazy val kyuubiDropin = (project in file("kyuubi/dropin"))
  .dependsOn(root)
  .settings(
    name := "podsweep-kyuubi-dropin",
    organization := "org.podsweep",
    version := (root / version).value,
    scalaVersion := "2.12.19",
    crossPaths := false,
    autoScalaLibrary := false, // Kyuubi's jars/ has scala-library 2.12.19
    scalacOptions ++= Seq("-release", "8", "-deprecation", "-feature", "-unchecked"),
    Compile / unmanagedJars := {
      if (kyuubiAvailable) ((kyuubiCache / "kyuubi-server.jar") +: kyuubiRuntime).map(Attributed.blank)
      else Nil
    },
    Compile / unmanagedSourceDirectories := {
      if (kyuubiAvailable) (Compile / unmanagedSourceDirectories).value else Nil
    },
    Compile / unmanagedResourceDirectories := {
      if (kyuubiAvailable) (Compile / unmanagedResourceDirectories).value else Nil
    },
    Compile / packageBin / artifactPath := target.value / s"podsweep-kyuubi-dropin-${version.value}.jar"
  )
