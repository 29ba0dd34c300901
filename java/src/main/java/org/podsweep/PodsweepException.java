package org.podsweep;

/**
 * A failure inside the native library that is not caused by a bad argument or a closed handle,
 * including a Rust panic caught at the JNI boundary.
 *
 * <p>The native side constructs it through the {@code (String)} constructor.
 */
public class PodsweepException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public PodsweepException(String message) {
    super(message);
  }

  public PodsweepException(String message, Throwable cause) {
    super(message, cause);
  }
}
