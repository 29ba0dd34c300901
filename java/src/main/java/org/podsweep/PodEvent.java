package org.podsweep;

/**
 * The kind of informer callback a pod observation comes from.
 *
 * <p>The ordinal is the code passed to the native library: {@code ADD = 0}, {@code UPDATE = 1},
 * {@code DELETE = 2}. Do not reorder.
 */
public enum PodEvent {
  /** {@code onAdd}: the pod appeared, including the informer's initial list. */
  ADD,
  /** {@code onUpdate}: the pod changed; pass the new object's facts. */
  UPDATE,
  /** {@code onDelete}: the pod is gone (or its final state is unknown). */
  DELETE;

  private static final PodEvent[] BY_CODE = values();

  /** The integer code the native library understands. */
  public int code() {
    return ordinal();
  }

  /**
   * The event for a native code.
   *
   * @throws IllegalArgumentException if {@code code} is not 0, 1 or 2
   */
  public static PodEvent fromCode(int code) {
    if (code < 0 || code >= BY_CODE.length) {
      throw new IllegalArgumentException("event: unknown pod event code " + code + " (expected 0, 1 or 2)");
    }
    return BY_CODE[code];
  }
}
