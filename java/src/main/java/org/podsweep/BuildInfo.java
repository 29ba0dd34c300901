package org.podsweep;

import java.io.IOException;
import java.io.InputStream;
import java.util.Properties;

/**
 * What this jar and the loaded native library were built from: the version (the crate version in
 * {@code Cargo.toml}, which is also the Maven version) and the git commit.
 *
 * <p>The jar's side comes from the resource {@value #RESOURCE}, written by the sbt build; the
 * library's side from {@code NativeBridge.buildInfo()}, stamped by the Rust build. {@link
 * NativeLoader#load()} compares them once, right after loading the library, and refuses a library
 * of another version or commit with a {@link PodsweepException}.
 */
public final class BuildInfo {
  /** Class-path resource (relative to this class) with {@code version=} and {@code commit=}. */
  public static final String RESOURCE = "build-info.properties";

  /** The commit value when the build could not tell it (no git at build time). */
  public static final String UNKNOWN = "unknown";

  private static final String NATIVE_PREFIX = "podsweep-build-info ";

  private final String version;
  private final String commit;

  private BuildInfo(String version, String commit) {
    this.version = version;
    this.commit = commit;
  }

  public String version() {
    return version;
  }

  public String commit() {
    return commit;
  }

  @Override
  public String toString() {
    return version + " (commit " + commit + ")";
  }

  /** The jar's own build information. */
  public static BuildInfo jar() {
    Properties p = new Properties();
    try (InputStream in = BuildInfo.class.getResourceAsStream(RESOURCE)) {
      if (in == null) {
        throw new PodsweepException(
            "podsweep jar is incomplete: no org/podsweep/" + RESOURCE + " on the class path");
      }
      p.load(in);
    } catch (IOException e) {
      throw new PodsweepException("cannot read org/podsweep/" + RESOURCE + ": " + e, e);
    }
    String version = p.getProperty("version", "").trim();
    if (version.isEmpty()) {
      throw new PodsweepException("org/podsweep/" + RESOURCE + " has no version");
    }
    return new BuildInfo(version, p.getProperty("commit", UNKNOWN).trim());
  }

  /**
   * The loaded native library's build information. Call only after the library is loaded.
   *
   * @throws PodsweepException if the library predates {@code buildInfo()} or answers nonsense
   */
  static BuildInfo library() {
    String line;
    try {
      line = NativeBridge.buildInfo();
    } catch (UnsatisfiedLinkError e) {
      throw new PodsweepException(
          "the loaded podsweep native library has no buildInfo(): it is older than this jar ("
              + jar() + "); use the library shipped in the same build as the jar",
          e);
    }
    BuildInfo info = parseNative(line);
    if (info == null) {
      throw new PodsweepException("the podsweep native library reports an unreadable build: " + line);
    }
    return info;
  }

  /** Parses {@code podsweep-build-info version=<v> commit=<c>}; {@code null} if malformed. */
  static BuildInfo parseNative(String line) {
    if (line == null || !line.startsWith(NATIVE_PREFIX)) {
      return null;
    }
    String version = null;
    String commit = null;
    for (String field : line.substring(NATIVE_PREFIX.length()).trim().split(" +")) {
      if (field.startsWith("version=")) {
        version = field.substring("version=".length());
      } else if (field.startsWith("commit=")) {
        commit = field.substring("commit=".length());
      }
    }
    if (version == null || version.isEmpty() || commit == null || commit.isEmpty()) {
      return null;
    }
    return new BuildInfo(version, commit);
  }

  /**
   * Why the library does not belong to the jar, or {@code null} if it does: the versions must be
   * equal, and so must the commits unless either side is {@value #UNKNOWN}.
   */
  static String mismatch(BuildInfo jar, BuildInfo library, String loadedFrom) {
    boolean commitsKnown = !UNKNOWN.equals(jar.commit) && !UNKNOWN.equals(library.commit);
    if (jar.version.equals(library.version) && (!commitsKnown || jar.commit.equals(library.commit))) {
      return null;
    }
    return "podsweep version mismatch: the jar is podsweep "
        + jar
        + " but the native library loaded from "
        + loadedFrom
        + " is podsweep "
        + library
        + "; the jar and libpodsweep.so must come from the same build (use the platform jar alone,"
        + " or rebuild the library with scripts/package)";
  }
}
