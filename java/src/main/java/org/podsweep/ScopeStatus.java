package org.podsweep;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A parsed {@link PodSweeper#scopeStatus} snapshot.
 *
 * <p>The native side owns the field set; this class reads it leniently: a missing number reads as
 * {@code -1}, a missing string as {@code null}. {@link #fields()} exposes every top-level field.
 */
public final class ScopeStatus {
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
    if (json == null) {
      throw new IllegalArgumentException("json must not be null");
    }
    Object value = new Parser(json).parseDocument();
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
    if (json == null) {
      throw new IllegalArgumentException("json must not be null");
    }
    Object value = new Parser(json).parseDocument();
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
      StringBuilder text = new StringBuilder();
      write(text, map);
      out.add(new ScopeStatus(text.toString(), map));
    }
    return Collections.unmodifiableList(out);
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

  /** Writes a parsed value back as JSON (for the elements of {@link #parseAll}). */
  private static void write(StringBuilder out, Object v) {
    if (v instanceof Map) {
      out.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
        if (!first) {
          out.append(',');
        }
        first = false;
        write(out, String.valueOf(e.getKey()));
        out.append(':');
        write(out, e.getValue());
      }
      out.append('}');
    } else if (v instanceof List) {
      out.append('[');
      boolean first = true;
      for (Object e : (List<?>) v) {
        if (!first) {
          out.append(',');
        }
        first = false;
        write(out, e);
      }
      out.append(']');
    } else if (v instanceof String) {
      String str = (String) v;
      out.append('"');
      for (int k = 0; k < str.length(); k++) {
        char c = str.charAt(k);
        if (c == '"' || c == '\\') {
          out.append('\\').append(c);
        } else if (c < 0x20) {
          out.append(String.format("\\u%04x", (int) c));
        } else {
          out.append(c);
        }
      }
      out.append('"');
    } else {
      out.append(v); // Long, Double, Boolean or null
    }
  }

  private static long asLong(Object v) {
    return v instanceof Number ? ((Number) v).longValue() : -1;
  }

  /** A small recursive-descent JSON reader (RFC 8259), enough for status snapshots. */
  static final class Parser {
    private final String s;
    private int i;

    Parser(String s) {
      this.s = s;
    }

    Object parseDocument() {
      Object v = value();
      skipWhitespace();
      if (i != s.length()) {
        throw error("trailing characters");
      }
      return v;
    }

    private Object value() {
      skipWhitespace();
      if (i >= s.length()) {
        throw error("unexpected end");
      }
      char c = s.charAt(i);
      switch (c) {
        case '{':
          return object();
        case '[':
          return array();
        case '"':
          return string();
        case 't':
          return literal("true", Boolean.TRUE);
        case 'f':
          return literal("false", Boolean.FALSE);
        case 'n':
          return literal("null", null);
        default:
          if (c == '-' || (c >= '0' && c <= '9')) {
            return number();
          }
          throw error("unexpected character '" + c + "'");
      }
    }

    private Map<String, Object> object() {
      Map<String, Object> map = new LinkedHashMap<>();
      i++; // {
      skipWhitespace();
      if (peek() == '}') {
        i++;
        return map;
      }
      while (true) {
        skipWhitespace();
        if (peek() != '"') {
          throw error("expected a field name");
        }
        String key = string();
        skipWhitespace();
        expect(':');
        map.put(key, value());
        skipWhitespace();
        char c = next();
        if (c == '}') {
          return map;
        }
        if (c != ',') {
          throw error("expected ',' or '}'");
        }
      }
    }

    private List<Object> array() {
      List<Object> list = new ArrayList<>();
      i++; // [
      skipWhitespace();
      if (peek() == ']') {
        i++;
        return list;
      }
      while (true) {
        list.add(value());
        skipWhitespace();
        char c = next();
        if (c == ']') {
          return list;
        }
        if (c != ',') {
          throw error("expected ',' or ']'");
        }
      }
    }

    private String string() {
      expect('"');
      StringBuilder b = new StringBuilder();
      while (true) {
        char c = next();
        if (c == '"') {
          return b.toString();
        }
        if (c == '\\') {
          char e = next();
          switch (e) {
            case '"':
            case '\\':
            case '/':
              b.append(e);
              break;
            case 'b':
              b.append('\b');
              break;
            case 'f':
              b.append('\f');
              break;
            case 'n':
              b.append('\n');
              break;
            case 'r':
              b.append('\r');
              break;
            case 't':
              b.append('\t');
              break;
            case 'u':
              if (i + 4 > s.length()) {
                throw error("short \\u escape");
              }
              try {
                b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
              } catch (NumberFormatException ex) {
                throw error("bad \\u escape");
              }
              i += 4;
              break;
            default:
              throw error("bad escape '\\" + e + "'");
          }
        } else if (c < 0x20) {
          throw error("control character in string");
        } else {
          b.append(c);
        }
      }
    }

    private Object number() {
      int start = i;
      if (peek() == '-') {
        i++;
      }
      boolean integral = true;
      while (i < s.length()) {
        char c = s.charAt(i);
        if (c >= '0' && c <= '9') {
          i++;
        } else if (c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') {
          integral = false;
          i++;
        } else {
          break;
        }
      }
      String text = s.substring(start, i);
      try {
        if (integral) {
          return Long.parseLong(text);
        }
        return Double.parseDouble(text);
      } catch (NumberFormatException ex) {
        throw error("bad number '" + text + "'");
      }
    }

    private Object literal(String word, Object value) {
      if (!s.startsWith(word, i)) {
        throw error("expected " + word);
      }
      i += word.length();
      return value;
    }

    private void skipWhitespace() {
      while (i < s.length()) {
        char c = s.charAt(i);
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
          i++;
        } else {
          break;
        }
      }
    }

    private char peek() {
      return i < s.length() ? s.charAt(i) : '\0';
    }

    private char next() {
      if (i >= s.length()) {
        throw error("unexpected end");
      }
      return s.charAt(i++);
    }

    private void expect(char c) {
      if (next() != c) {
        i--;
        throw error("expected '" + c + "'");
      }
    }

    private IllegalArgumentException error(String what) {
      return new IllegalArgumentException("invalid JSON at offset " + i + ": " + what);
    }
  }
}
