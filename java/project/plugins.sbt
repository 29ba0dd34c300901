// CycloneDX SBOM of the jars (makeBom; published with classifier cyclonedx). See build.sbt's
// "Release artifacts" block.
addSbtPlugin("com.github.sbt" % "sbt-sbom" % "0.5.0")
