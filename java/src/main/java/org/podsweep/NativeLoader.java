package org.podsweep;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.FileAttribute;
import java.nio.file.attribute.PosixFilePermission;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * Loads libpodsweep.so once per class loader.
 *
 * <p>Attempts, in order, stopping at the first that works:
 *
 * <ol>
 *   <li>the absolute path in the system property {@value #PATH_PROPERTY}, if set;
 *   <li>{@code System.loadLibrary("podsweep")} ({@code java.library.path});
 *   <li>the jar resource {@code /native/<os>/<arch>/libpodsweep.so}, copied into a fresh private
 *       temporary directory (owner-only permissions, removed when the JVM exits) and loaded from
 *       there.
 * </ol>
 *
 * If every attempt fails, an {@link UnsatisfiedLinkError} lists each attempt and its error.
 *
 * <p>The platform jars ({@code podsweep-<version>-linux-x86_64.jar}, {@code
 * podsweep-<version>-linux-aarch64.jar}) ship the resource for their architecture; {@code os.arch}
 * {@code amd64}/{@code x86_64} picks {@code x86_64}, {@code aarch64}/{@code arm64} picks {@code
 * aarch64}, and any other architecture is reported as unsupported.
 */
public final class NativeLoader {
  /** System property naming an absolute path to a libpodsweep.so to try first. */
  public static final String PATH_PROPERTY = "podsweep.native.path";

  static final String LIBRARY = "podsweep";

  /** The platforms with a platform jar (Maven classifiers). */
  static final String SUPPORTED = "linux-x86_64 and linux-aarch64";

  private static final Object LOCK = new Object();
  private static volatile String loadedFrom;
  // Set when the loaded library belongs to another build; every later load() throws it again.
  private static volatile String mismatch;

  private NativeLoader() {}

  /**
   * Loads the library if this class loader has not loaded it yet, then checks that it comes from
   * the same build as this jar ({@link BuildInfo}) and logs both, once, at INFO on the logger
   * {@code org.podsweep.NativeLoader}.
   *
   * @throws UnsatisfiedLinkError if no attempt works; the message lists every attempt
   * @throws PodsweepException if the loaded library's version or commit differs from the jar's
   *     (a library cannot be unloaded, so every later call throws it again)
   */
  public static void load() {
    if (loadedFrom == null) {
      synchronized (LOCK) {
        if (loadedFrom == null) {
          String from =
              load(
                  System.getProperty(PATH_PROPERTY),
                  LIBRARY,
                  resourcePath(System.getProperty("os.name"), System.getProperty("os.arch")));
          try {
            mismatch = verify(from);
          } catch (PodsweepException e) {
            mismatch = e.getMessage();
          }
          loadedFrom = from;
        }
      }
    }
    String m = mismatch;
    if (m != null) {
      throw new PodsweepException(m);
    }
  }

  /** Compares the library with the jar; logs the build once when they match. */
  private static String verify(String from) {
    BuildInfo jar = BuildInfo.jar();
    BuildInfo library = BuildInfo.library();
    String m = BuildInfo.mismatch(jar, library, from);
    if (m == null) {
      NativeLog.logJava(
          NativeLog.INFO,
          NativeLoader.class.getName(),
          "podsweep " + jar + ", native library " + library.version() + " (commit "
              + library.commit() + ") loaded from " + from);
    } else {
      NativeLog.logJava(NativeLog.ERROR, NativeLoader.class.getName(), m);
    }
    return m;
  }

  /** Where the library was loaded from, or {@code null} if it is not loaded yet. */
  public static String loadedFrom() {
    return loadedFrom;
  }

  /**
   * Runs the attempts and returns a description of the one that worked. Package-private so tests
   * can check the failure report with names that do not exist.
   */
  static String load(String explicitPath, String libraryName, String resource) {
    List<String> failures = new ArrayList<>();
    if (explicitPath != null && !explicitPath.trim().isEmpty()) {
      String path = explicitPath.trim();
      try {
        if (!new File(path).isAbsolute()) {
          throw new IllegalArgumentException("not an absolute path");
        }
        System.load(path);
        return path;
      } catch (Throwable t) {
        failures.add("-D" + PATH_PROPERTY + "=" + path + ": " + describe(t));
      }
    }
    try {
      System.loadLibrary(libraryName);
      return "java.library.path (" + System.mapLibraryName(libraryName) + ")";
    } catch (Throwable t) {
      failures.add(
          "System.loadLibrary(\"" + libraryName + "\") from java.library.path="
              + System.getProperty("java.library.path") + ": " + describe(t));
    }
    if (resource == null) {
      failures.add("jar resource: unsupported platform os.name=" + System.getProperty("os.name")
          + " os.arch=" + System.getProperty("os.arch") + " (podsweep ships " + SUPPORTED
          + "; os.arch amd64/x86_64 or aarch64/arm64 on Linux)");
    } else {
      try {
        Path extracted = extract(resource, System.mapLibraryName(libraryName));
        System.load(extracted.toString());
        return extracted.toString();
      } catch (Throwable t) {
        failures.add("jar resource " + resource + ": " + describe(t));
      }
    }
    StringBuilder message = new StringBuilder("could not load the podsweep native library; tried:");
    for (String failure : failures) {
      message.append("\n  - ").append(failure);
    }
    throw new UnsatisfiedLinkError(message.toString());
  }

  /** The resource path for a platform, or {@code null} if the platform is not supported. */
  static String resourcePath(String osName, String osArch) {
    String os = normalizeOs(osName);
    String arch = normalizeArch(osArch);
    if (os == null || arch == null) {
      return null;
    }
    return "/native/" + os + "/" + arch + "/" + System.mapLibraryName(LIBRARY);
  }

  static String normalizeOs(String osName) {
    if (osName == null) {
      return null;
    }
    String os = osName.trim().toLowerCase(Locale.ROOT);
    return os.startsWith("linux") ? "linux" : null;
  }

  static String normalizeArch(String osArch) {
    if (osArch == null) {
      return null;
    }
    switch (osArch.trim().toLowerCase(Locale.ROOT)) {
      case "amd64":
      case "x86_64":
      case "x86-64":
      case "x64":
        return "x86_64";
      case "aarch64":
      case "arm64":
        return "aarch64";
      default:
        return null;
    }
  }

  private static Path extract(String resource, String fileName) throws IOException {
    try (InputStream in = NativeLoader.class.getResourceAsStream(resource)) {
      if (in == null) {
        throw new IOException("resource not found on the class path");
      }
      Path dir = createPrivateTempDirectory();
      Path file = dir.resolve(fileName);
      // Registered before the file so that it is deleted after it (deleteOnExit runs in reverse).
      dir.toFile().deleteOnExit();
      file.toFile().deleteOnExit();
      Files.copy(in, file, StandardCopyOption.REPLACE_EXISTING);
      if (isPosix()) {
        Files.setPosixFilePermissions(file, PosixFilePermissions.fromString("r-x------"));
      }
      return file;
    }
  }

  private static Path createPrivateTempDirectory() throws IOException {
    if (isPosix()) {
      Set<PosixFilePermission> owner = PosixFilePermissions.fromString("rwx------");
      FileAttribute<Set<PosixFilePermission>> attr = PosixFilePermissions.asFileAttribute(owner);
      return Files.createTempDirectory("podsweep-native-", attr);
    }
    Path dir = Files.createTempDirectory("podsweep-native-");
    File f = dir.toFile();
    boolean ok = f.setReadable(false, false) && f.setReadable(true, true);
    ok &= f.setWritable(false, false) && f.setWritable(true, true);
    ok &= f.setExecutable(false, false) && f.setExecutable(true, true);
    if (!ok) {
      throw new IOException("cannot restrict permissions of " + dir);
    }
    return dir;
  }

  private static boolean isPosix() {
    return FileSystems.getDefault().supportedFileAttributeViews().contains("posix");
  }

  private static String describe(Throwable t) {
    String message = t.getMessage();
    return t.getClass().getName() + (message == null ? "" : ": " + message);
  }
}
