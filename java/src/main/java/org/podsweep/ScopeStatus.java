package org.podsweep;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;

/**
 * A parsed {@link PodSweeper#scopeStatus} snapshot.
 *
 * <p>The native side owns the field set; this class reads it leniently: a missing number reads as
 * {@code -1}, a missing string as {@code null}. {@link #fields()} exposes every top-level field.
 *
 * <p>The JSON is read with Jackson ({@code jackson-databind}, a provided dependency: every Kyuubi
 * server has it on its class path, and the podsweep jar does not bundle it). Only this class needs
 * it; a program that uses {@link PodSweeper} without {@code ScopeStatus} does not.
 */
public final class ScopeStatus {
  /**
   * Integers as {@code Long} (as {@link #fields()} documents), trailing text after the value an
   * error; otherwise strict JSON (RFC 8259), as Jackson reads it by default. Thread-safe once
   * configured.
   */
  private static final ObjectMapper MAPPER =
      new ObjectMapper()
          .enable(DeserializationFeature.USE_LONG_FOR_INTS)
          .enable(DeserializationFeature.FAIL_ON_TRAILING_TOKENS);

  private final String json;
  private final Map<String, Object> fields;

  private ScopeStatus(String json, Map<String, Object> fields) {
    this.json = json;
    this.fields = Collections.unmodifiableMap(fields);
  }

  /**
   * Parses a status JSON object.
   *
   * @throws IllegalArgumentException if {@code json} is null or not a JSON object
   */
  public static ScopeStatus parse(String json) {
    Object value = read(json);
    if (!(value instanceof Map)) {
      throw new IllegalArgumentException("scope status is not a JSON object: " + json);
    }
    @SuppressWarnings("unchecked")
    Map<String, Object> map = (Map<String, Object>) value;
    return new ScopeStatus(json, map);
  }

  /**
   * Parses a {@link PodSweeper#statusAll} JSON array; each element must be a JSON object.
   *
   * @throws IllegalArgumentException if {@code json} is null or not a JSON array of objects
   */
  public static List<ScopeStatus> parseAll(String json) {
    Object value = read(json);
    if (!(value instanceof List)) {
      throw new IllegalArgumentException("status list is not a JSON array: " + json);
    }
    List<ScopeStatus> out = new ArrayList<>();
    for (Object element : (List<?>) value) {
      if (!(element instanceof Map)) {
        throw new IllegalArgumentException("status list element is not a JSON object: " + element);
      }
      @SuppressWarnings("unchecked")
      Map<String, Object> map = (Map<String, Object>) element;
      String text;
      try {
        text = MAPPER.writeValueAsString(map);
      } catch (JsonProcessingException e) {
        // A map Jackson has just read always writes back; say so if it ever does not.
        throw new IllegalStateException("cannot write a status element back as JSON", e);
      }
      out.add(new ScopeStatus(text, map));
    }
    return Collections.unmodifiableList(out);
  }

  /**
   * One JSON value: maps, lists, strings, {@code Long}, {@code Double}, booleans, null. An integer
   * beyond a {@code long} is refused (Jackson's check of {@code USE_LONG_FOR_INTS}).
   */
  private static Object read(String json) {
    if (json == null) {
      throw new IllegalArgumentException("json must not be null");
    }
    try {
      return MAPPER.readValue(json, Object.class);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("not valid JSON: " + e.getOriginalMessage(), e);
    }
  }

  /** The JSON text as the native library returned it. */
  public String json() {
    return json;
  }

  /** Every top-level field: String, Long, Double, Boolean, null, List or Map values. */
  public Map<String, Object> fields() {
    return fields;
  }

  public String scope() {
    return string("scope");
  }

  public String backend() {
    return string("backend");
  }

  /** E.g. {@code LEADING}, {@code FOLLOWING}, {@code PAUSED}. */
  public String leadership() {
    return string("leadership");
  }

  public long tracked() {
    return number("tracked");
  }

  public long scheduled() {
    return number("scheduled");
  }

  public long due() {
    return number("due");
  }

  public long inflight() {
    return number("inflight");
  }

  public long deletesSent() {
    return number("deletes_sent");
  }

  /** The count of one DELETE outcome class ({@code accepted}, {@code already_absent}, ...), or -1. */
  public long outcome(String name) {
    Object outcomes = fields.get("outcomes");
    if (outcomes instanceof Map) {
      return asLong(((Map<?, ?>) outcomes).get(name));
    }
    return -1;
  }

  /** Whether the scope is held back now (see {@link #pauseReason()}); false when not said. */
  public boolean paused() {
    return Boolean.TRUE.equals(fields.get("paused"));
  }

  /**
   * Why the scope is held back now, the most severe cause first: {@code refused}, {@code
   * ha_session_lost}, {@code step_down_hold}, {@code restarting}, {@code watch_failing}, {@code
   * retry_after} or {@code backoff}; {@code null} when it is not (or a library that does not say).
   */
  public String pauseReason() {
    return string("pause_reason");
  }

  /**
   * When the pause of {@link #pauseReason()} ends, in epoch milliseconds; {@code -1} when it is
   * open-ended (or there is none).
   */
  public long pausedUntilMs() {
    return number("paused_until_ms");
  }

  /** How long the pause of {@link #pauseReason()} has lasted, in milliseconds; 0 when none. */
  public long pauseMs() {
    long ms = number("pause_ms");
    return ms < 0 ? 0 : ms;
  }

  /**
   * Every open pause: maps with {@code reason}, {@code detail}, {@code since_ms}, {@code until_ms}
   * (null when open-ended), {@code pause_ms} and {@code unhealthy}; empty when none.
   */
  public List<Map<String, Object>> pauses() {
    Object v = fields.get("pauses");
    if (!(v instanceof List)) {
      return Collections.emptyList();
    }
    List<Map<String, Object>> out = new ArrayList<>();
    for (Object p : (List<?>) v) {
      if (p instanceof Map) {
        @SuppressWarnings("unchecked")
        Map<String, Object> m = (Map<String, Object>) p;
        out.add(Collections.unmodifiableMap(m));
      }
    }
    return Collections.unmodifiableList(out);
  }

  /** A top-level string field, or {@code null}. */
  public String string(String name) {
    Object v = fields.get(name);
    return v instanceof String ? (String) v : null;
  }

  /** A top-level integral field, or {@code -1}. */
  public long number(String name) {
    return asLong(fields.get(name));
  }

  @Override
  public String toString() {
    return json;
  }

  private static long asLong(Object v) {
    return v instanceof Number ? ((Number) v).longValue() : -1;
  }
}
