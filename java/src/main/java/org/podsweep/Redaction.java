package org.podsweep;

import java.util.ArrayList;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.regex.PatternSyntaxException;

/**
 * Keeps the secrets of a Kyuubi configuration out of what podsweep's JVM side logs, by Kyuubi's
 * rule: a value is secret when {@code kyuubi.server.redaction.regex} matches its key or the value
 * itself. Kyuubi 1.12.0 has no default for that key; podsweep always applies the pattern Kyuubi
 * 1.13 made the default, {@value #DEFAULT_PATTERN}, and a configured one on top of it. A configured
 * pattern that does not compile makes every value secret.
 *
 * <p>The native side applies the same rule to its log records and exception messages; the cases in
 * {@code tests/data/redaction.json} hold for both.
 */
public final class Redaction {
  /** Kyuubi's replacement text. */
  public static final String REPLACEMENT = "*********(redacted)";

  /** The pattern podsweep always applies (Kyuubi 1.13's default). */
  public static final String DEFAULT_PATTERN = "(?i)secret|password|token|access[.]key";

  /** Kyuubi's key of the redaction pattern. */
  public static final String REGEX_KEY = "kyuubi.server.redaction.regex";

  private static final Pattern DEFAULT = Pattern.compile(DEFAULT_PATTERN);
  private static final Pattern URL_PASSWORD =
      Pattern.compile("([A-Za-z][A-Za-z0-9+.-]*://[^/\\s:@]*):([^/\\s@]*)@");

  private Redaction() {}

  /**
   * Keys whose values are credentials though no pattern names them: ZooKeeper's digest ({@code
   * user:password}), whose password part alone is hidden too.
   */
  public static final List<String> CREDENTIAL_KEYS =
      Collections.unmodifiableList(
          java.util.Arrays.asList(
              "kyuubi.ha.zookeeper.auth.digest", "kyuubi.ha.zookeeper.engine.auth.digest"));

  /** Whether the value of {@code key} is secret under {@code conf}'s redaction pattern. */
  public static boolean isSecret(Map<String, String> conf, String key, String value) {
    if (CREDENTIAL_KEYS.contains(key)) {
      return true;
    }
    Pattern configured;
    try {
      configured = configured(conf);
    } catch (PatternSyntaxException e) {
      return true;
    }
    return matches(DEFAULT, configured, key) || matches(DEFAULT, configured, value);
  }

  private static boolean matches(Pattern a, Pattern b, String s) {
    return s != null && (a.matcher(s).find() || (b != null && b.matcher(s).find()));
  }

  private static Pattern configured(Map<String, String> conf) {
    String p = conf == null ? null : conf.get(REGEX_KEY);
    return p == null || p.trim().isEmpty() ? null : Pattern.compile(p.trim());
  }

  /**
   * {@code text} with every secret value of {@code conf} (values of at least three characters,
   * {@code true} and {@code false} aside) and every URL password ({@code scheme://user:pw@host})
   * replaced by {@value #REPLACEMENT}.
   */
  public static String scrub(Map<String, String> conf, String text) {
    if (text == null) {
      return null;
    }
    Matcher m = URL_PASSWORD.matcher(text);
    String out = m.replaceAll("$1:" + Matcher.quoteReplacement(REPLACEMENT) + "@");
    if (conf == null) {
      return out;
    }
    List<String> secrets = new ArrayList<>();
    for (Map.Entry<String, String> e : conf.entrySet()) {
      String v = e.getValue() == null ? "" : e.getValue().trim();
      if (v.codePointCount(0, v.length()) >= 3 && !v.equalsIgnoreCase("true")
          && !v.equalsIgnoreCase("false") && isSecret(conf, e.getKey(), e.getValue())) {
        secrets.add(v);
      }
    }
    // A digest's password may be shown without its user.
    for (String key : CREDENTIAL_KEYS) {
      String v = conf.get(key);
      int colon = v == null ? -1 : v.trim().indexOf(':');
      if (colon >= 0) {
        String password = v.trim().substring(colon + 1);
        if (password.codePointCount(0, password.length()) >= 3
            && !password.equalsIgnoreCase("true") && !password.equalsIgnoreCase("false")) {
          secrets.add(password);
        }
      }
    }
    // Longest first: a secret that contains another is replaced whole.
    Collections.sort(secrets, (a, b) -> b.length() - a.length());
    for (String s : secrets) {
      out = out.replace(s, REPLACEMENT);
    }
    return out;
  }

  /**
   * A throwable to log in place of {@code t}: the same classes' names, stack traces and causes,
   * with every message {@link #scrub}bed (a configuration check's message may quote the value).
   */
  public static Throwable redacted(Map<String, String> conf, Throwable t) {
    return redacted(conf, t, Collections.newSetFromMap(new IdentityHashMap<Throwable, Boolean>()));
  }

  /** {@link #redacted}, stopping at a cause seen before: a chain of causes may be a cycle. */
  private static Throwable redacted(Map<String, String> conf, Throwable t, Set<Throwable> seen) {
    if (t == null || !seen.add(t)) {
      return null;
    }
    Throwable cause = redacted(conf, t.getCause(), seen);
    String message = scrub(conf, t.getMessage());
    Throwable copy = new RedactedException(t.getClass().getName(), message, cause);
    copy.setStackTrace(t.getStackTrace());
    return copy;
  }

  /** A throwable that prints as the one it stands for ({@code class: message}). */
  private static final class RedactedException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    private final String className;

    RedactedException(String className, String message, Throwable cause) {
      super(message, cause);
      this.className = className;
    }

    @Override
    public String toString() {
      String m = getMessage();
      return m == null ? className : className + ": " + m;
    }
  }
}
