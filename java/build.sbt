// podsweep JVM binding: Java 8 bytecode API around libpodsweep.so, Scala tests and demo.
//
// The native library is taken from the Rust build in the repository root
// (target/x86_64-unknown-linux-gnu/release/libpodsweep.so, built by scripts/package) or from the
// file named by the environment variable PODSWEEP_NATIVE_LIB, and put on the test class path as the
// resource native/linux/x86_64/libpodsweep.so. Tests load it through NativeLoader's extraction path,
// i.e. exactly the way the platform jar is used. The release artifacts (API jar, platform jars,
// sources, javadoc, pom, SBOM) are set up in the "Release artifacts" block at the end.

val repoRoot = settingKey[File]("root of the podsweep repository")
val nativeLibrary = settingKey[File]("the libpodsweep.so to ship")
val nativeResource = "native/linux/x86_64/libpodsweep.so"
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
// $PODSWEEP_KYUUBI_VERSION (set by `KYUUBI_VERSION=<v> scripts/kyuubi dropin`) compiles the driver
// and the drop-in against another release's cache instead, into target/kyuubi-<v> of each project,
// so the 1.12.0 classes the suites use by default are left alone.
val kyuubiVersion: String = sys.env.get("PODSWEEP_KYUUBI_VERSION").map(_.trim).filter(_.nonEmpty).getOrElse("1.12.0")
def kyuubiTarget(base: File): File =
  if (kyuubiVersion == "1.12.0") base / "target" else base / "target" / s"kyuubi-$kyuubiVersion"
val kyuubiCache: File =
  file(sys.env.getOrElse("PODSWEEP_TOOLS", sys.props("user.home") + "/.cache/podsweep-tools")) / s"kyuubi-$kyuubiVersion"
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
    // Kyuubi's own Scala (the driver and the drop-in below need it): one compiler and one compiler
    // bridge for the whole build, which a fresh machine compiles once, not once per version.
    scalaVersion := "2.12.19",
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
      // ScopeStatus reads the native status JSON with Jackson; Kyuubi 1.12.0 ships 2.20.1.
      "com.fasterxml.jackson.core" % "jackson-databind" % "2.20.1" % Provided,
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
    // A test resource: the API jar (Compile / packageBin) has no native code, while tests and
    // Test/runMain (which runs on the tests jar) find the library where a platform jar has it.
    Test / resourceGenerators += Def.task {
      val src = nativeLibrary.value
      val dst = (Test / resourceManaged).value / nativeResource
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
      s"-Dpodsweep.kyuubi.sbtVersion=$kyuubiVersion",
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
    target := kyuubiTarget(baseDirectory.value),
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

// The drop-in for stock Kyuubi 1.12.0 (1.11.1, 1.10.3 with PODSWEEP_KYUUBI_VERSION): an ApplicationOperation provider (META-INF/services) that
// runs podsweep in self-watch mode. Compiled against Kyuubi's own jars; shipped as
// podsweep-kyuubi-dropin-<version>.jar next to the podsweep platform jar in $KYUUBI_HOME/jars.
lazy val kyuubiDropin = (project in file("kyuubi/dropin"))
  .dependsOn(root)
  .settings(
    name := "podsweep-kyuubi-dropin",
    target := kyuubiTarget(baseDirectory.value),
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
// =================================================================================================
// Release artifacts. Maven coordinates org.podsweep:podsweep:<crate version> (Cargo.toml's version):
//   podsweep-<v>.jar                 API jar: the classes and no native code; what a build such as
//                                    Kyuubi's compiles against
//   podsweep-<v>-linux-x86_64.jar    platform jars: the same classes plus native/linux/<arch>/
//   podsweep-<v>-linux-aarch64.jar   libpodsweep.so, META-INF/THIRD-PARTY-LICENSES.txt and the
//                                    library's SBOM; one of them is all a server's class path needs
//   podsweep-<v>-linux.jar           the same classes plus both libraries and both SBOMs: one jar
//                                    for every architecture (NativeLoader picks by os.arch)
//   podsweep-<v>-sources.jar, podsweep-<v>-javadoc.jar, podsweep-<v>.pom,
//   podsweep-<v>-cyclonedx.json (the jars' SBOM, sbt-sbom), podsweep-<v>-linux-<arch>-cyclonedx.json
//   (the library's SBOM, cargo-cyclonedx, also inside the platform jar)
// Every jar has META-INF/LICENSE, META-INF/NOTICE and org/podsweep/build-info.properties (version
// and git commit; NativeLoader compares them with the loaded library's). scripts/package makes the
// platform jars' inputs (the .so per architecture, the notices, the library SBOMs), runs
// `stageRelease` (every artifact into ../target/release) and `publishM2`.
// =================================================================================================

val gitCommit = taskKey[String]("the git commit being built ($PODSWEEP_GIT_COMMIT wins), or unknown")
val platformInputs = settingKey[Map[String, Seq[(File, String)]]](
  "per architecture: the files a platform jar adds to the API jar, with their paths in the jar")
val platformJarX86_64 = taskKey[File]("podsweep-<version>-linux-x86_64.jar")
val platformJarAarch64 = taskKey[File]("podsweep-<version>-linux-aarch64.jar")
val platformJarLinux = taskKey[File]("podsweep-<version>-linux.jar: both architectures in one jar")
val stageRelease = taskKey[Seq[File]]("copies every published artifact to ../target/release")

/**
 * A platform jar: the API jar plus the inputs of the given architectures (native library, SBOM,
 * the notices once). `linux-<arch>` for one architecture, `linux` for all of them: one jar an
 * operator drops into $KYUUBI_HOME/jars on any of them (NativeLoader picks the library of os.arch).
 */
def platformJar(archs: Seq[String], classifier: String): Def.Initialize[Task[File]] = Def.task {
  val extra = archs.flatMap(platformInputs.value).distinct
  extra.collect { case (f, _) if !f.isFile => f }.foreach { f =>
    sys.error(s"the $classifier platform jar needs $f; build it with scripts/package")
  }
  val jar = target.value / s"${name.value}-${version.value}-$classifier.jar"
  val manifest = new java.util.jar.Manifest()
  val attrs = manifest.getMainAttributes
  attrs.put(java.util.jar.Attributes.Name.MANIFEST_VERSION, "1.0")
  attrs.put(java.util.jar.Attributes.Name.IMPLEMENTATION_TITLE, s"${name.value} ($classifier)")
  attrs.put(java.util.jar.Attributes.Name.IMPLEMENTATION_VERSION, version.value)
  attrs.put(java.util.jar.Attributes.Name.IMPLEMENTATION_VENDOR, organization.value)
  IO.jar((Compile / packageBin / mappings).value ++ extra, jar, manifest, Package.defaultTimestamp)
  streams.value.log.info(s"platform jar: $jar")
  jar
}

gitCommit := sys.env.get("PODSWEEP_GIT_COMMIT").map(_.trim).filter(_.nonEmpty).getOrElse {
  scala.util.Try(
    scala.sys.process.Process(Seq("git", "rev-parse", "HEAD"), repoRoot.value).!!(scala.sys.process.ProcessLogger(_ => ())).trim
  ).toOption.filter(_.nonEmpty).getOrElse("unknown")
}

// org/podsweep/build-info.properties: the same version and commit the Rust build stamps (build.rs).
Compile / resourceGenerators += Def.task {
  val out = (Compile / resourceManaged).value / "org" / "podsweep" / "build-info.properties"
  val text = s"version=${version.value}\ncommit=${gitCommit.value}\n"
  if (!out.isFile || IO.read(out) != text) IO.write(out, text)
  Seq(out)
}.taskValue

// Every jar gets LICENSE and NOTICE.
Compile / packageBin / mappings ++= Seq(repoRoot.value / "LICENSE" -> "META-INF/LICENSE", repoRoot.value / "NOTICE" -> "META-INF/NOTICE")
Compile / packageSrc / mappings ++= Seq(repoRoot.value / "LICENSE" -> "META-INF/LICENSE", repoRoot.value / "NOTICE" -> "META-INF/NOTICE")
Compile / doc / javacOptions ++= Seq("-quiet", "-notimestamp") // -notimestamp: the same sources give the same javadoc jar
Compile / packageDoc / mappings ++= Seq(repoRoot.value / "LICENSE" -> "META-INF/LICENSE", repoRoot.value / "NOTICE" -> "META-INF/NOTICE")

platformInputs := {
  val root = repoRoot.value
  val env = sys.env.get(_: String).filter(_.nonEmpty).map(file)
  val so = Map(
    "x86_64" -> nativeLibrary.value,
    "aarch64" -> env("PODSWEEP_NATIVE_LIB_AARCH64")
      .getOrElse(root / "target" / "aarch64-unknown-linux-gnu" / "release" / "libpodsweep.so"))
  so.map { case (arch, lib) =>
    arch -> Seq(
      lib -> s"native/linux/$arch/libpodsweep.so",
      root / "target" / "notices" / "THIRD-PARTY-LICENSES.txt" -> "META-INF/THIRD-PARTY-LICENSES.txt",
      root / "target" / "sbom" / s"libpodsweep-linux-$arch.cdx.json" -> s"META-INF/sbom/libpodsweep-linux-$arch.cdx.json")
  }
}
platformJarX86_64 := platformJar(Seq("x86_64"), "linux-x86_64").value
platformJarAarch64 := platformJar(Seq("aarch64"), "linux-aarch64").value
platformJarLinux := platformJar(Seq("x86_64", "aarch64"), "linux").value
addArtifact(Def.setting(Artifact(name.value, "jar", "jar", "linux-x86_64")), platformJarX86_64)
addArtifact(Def.setting(Artifact(name.value, "jar", "jar", "linux-aarch64")), platformJarAarch64)
addArtifact(Def.setting(Artifact(name.value, "jar", "jar", "linux")), platformJarLinux)
Seq("x86_64" -> "linux-x86_64", "aarch64" -> "linux-aarch64").map { case (arch, classifier) =>
  packagedArtifacts += Artifact(name.value, "cyclonedx", "json", s"$classifier-cyclonedx") ->
    platformInputs.value(arch).collectFirst { case (f, path) if path.startsWith("META-INF/sbom/") => f }.get
}

// The pom: Apache-2.0, and no test-scoped dependencies (provided ones stay: the server supplies
// slf4j-api, metrics-core and kubernetes-client-api; the jars need nothing else).
description := "Coordinated cleanup of terminated Spark driver pods for Apache Kyuubi (JNI binding of libpodsweep.so)"
licenses := Seq("Apache-2.0" -> url("https://www.apache.org/licenses/LICENSE-2.0.txt"))
organizationName := "The podsweep contributors"
pomPostProcess := { (node: scala.xml.Node) =>
  new scala.xml.transform.RuleTransformer(new scala.xml.transform.RewriteRule {
    override def transform(n: scala.xml.Node): Seq[scala.xml.Node] = n match {
      case e: scala.xml.Elem if e.label == "dependency" && (e \ "scope").text == "test" => Seq.empty
      case other => other
    }
  }).transform(node).head
}

// The jars' own SBOM (sbt-sbom, project/plugins.sbt): CycloneDX JSON, published with classifier
// cyclonedx.
bomFormat := "json"

// publishM2 installs like `mvn install`: a rebuild of the same version replaces the previous one.
publishM2Configuration := publishM2Configuration.value.withOverwrite(true)

stageRelease := {
  val out = repoRoot.value / "target" / "release"
  IO.delete(out)
  packagedArtifacts.value.toSeq.map { case (a, f) =>
    val dst = out / s"${a.name}-${version.value}${a.classifier.fold("")("-" + _)}.${a.extension}"
    IO.copyFile(f, dst)
    dst
  }.sortBy(_.getName)
}
