package org.podsweep.fabric8;

import io.fabric8.kubernetes.api.model.ContainerState;
import io.fabric8.kubernetes.api.model.ContainerStateTerminated;
import io.fabric8.kubernetes.api.model.ContainerStatus;
import io.fabric8.kubernetes.api.model.ObjectMeta;
import io.fabric8.kubernetes.api.model.Pod;
import io.fabric8.kubernetes.api.model.PodCondition;
import io.fabric8.kubernetes.api.model.PodStatus;
import java.time.OffsetDateTime;
import java.time.format.DateTimeFormatter;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import org.podsweep.PodEvent;
import org.podsweep.PodSweeper;

/**
 * Feeds fabric8 {@link Pod} informer events to a {@link PodSweeper} the way Kyuubi sees them.
 *
 * <p>Kyuubi's {@code SparkEnginePodEventHandler} computes the {@code ApplicationState} of a pod and
 * then calls {@link #observe(Pod, String, String, PodEvent, String)} with the pod, the scope
 * ({@code KubernetesInfo.context.orNull}, {@code KubernetesInfo.namespace.orNull}), the callback and
 * the state's name. From Scala:
 *
 * <pre>{@code
 * val observer = KyuubiPodObserver.fromKyuubiConf(sweeper, kyuubiConf.getAll.asJava)
 * observer.observe(pod, info.context.orNull, info.namespace.orNull, PodEvent.UPDATE, state.toString)
 * }</pre>
 *
 * <p>What reaches {@link PodSweeper#observe} ({@link #observation} computes it, without side
 * effects): the {@code kyuubi-unique-tag} label value, whether {@code spark-app-selector} is
 * present, {@code metadata.name}, {@code metadata.uid}, whether {@code metadata.deletionTimestamp}
 * is set, and the termination time, the first of:
 *
 * <ol>
 *   <li>with state source {@code CONTAINER}: the current {@code state.terminated.finishedAt} of the
 *       container named by {@code kyuubi.kubernetes.application.state.container} (default
 *       {@value #DEFAULT_STATE_CONTAINER}), the name compared ignoring case as Kyuubi does;
 *   <li>the latest current {@code state.terminated.finishedAt} over all containers
 *       ({@code status.containerStatuses});
 *   <li>when the pod phase is one Kyuubi maps to a terminal state ({@code Succeeded},
 *       {@code Failed}, {@code Error}, {@code OOMKilled}, case-sensitive as in Kyuubi): the
 *       {@code lastTransitionTime} of the {@code Ready} condition;
 *   <li>unknown ({@code 0}): podsweep then counts from its first observation of the pod.
 * </ol>
 *
 * {@code lastState.terminated} is never read: it belongs to an earlier run of a restarted
 * container, possibly days old, and Kyuubi's state never comes from it.
 *
 * <p>{@link #applicationState} is Kyuubi 1.12.0's own state mapping (state source, state
 * container, terminal phases, the DELETE rule), for callers that have a pod but no state computed
 * by Kyuubi; the patched {@code KubernetesApplicationOperation} passes the state Kyuubi computed.
 *
 * Timestamps are RFC 3339 ({@code 2026-01-02T03:04:05Z}, with optional fraction and offset); one
 * that does not parse counts as absent. Missing parts of the pod (metadata, labels, status,
 * containers) never throw; a pod without a name or UID is not passed on (the native side requires
 * both), and {@link Observation#complete()} says so.
 */
public final class KyuubiPodObserver {
  public static final String UNIQUE_TAG_LABEL = "kyuubi-unique-tag";
  public static final String APP_SELECTOR_LABEL = "spark-app-selector";
  public static final String STATE_SOURCE_KEY = "kyuubi.kubernetes.application.state.source";
  public static final String STATE_CONTAINER_KEY = "kyuubi.kubernetes.application.state.container";
  public static final String DEFAULT_STATE_CONTAINER = "spark-kubernetes-driver";
  /** podsweep's annotation with a pod's own retain period (a Kyuubi time value). */
  public static final String RETAIN_ANNOTATION = "podsweep.org/retain-period";
  /** podsweep's annotation that keeps a pod from deletion by retain period ({@code true}). */
  public static final String KEEP_ANNOTATION = "podsweep.org/keep";

  /** Kyuubi's {@code kyuubi.kubernetes.application.state.source} (default {@code POD}). */
  public enum StateSource {
    POD,
    CONTAINER;

    /** Case-insensitive; null or empty is {@code POD}. */
    public static StateSource parse(String value) {
      if (value == null || value.trim().isEmpty()) {
        return POD;
      }
      try {
        return valueOf(value.trim().toUpperCase(Locale.ROOT));
      } catch (IllegalArgumentException e) {
        throw new IllegalArgumentException(
            STATE_SOURCE_KEY + " must be POD or CONTAINER, got " + value, e);
      }
    }
  }

  private final PodSweeper sweeper;
  private final StateSource source;
  private final String stateContainer;

  public KyuubiPodObserver(PodSweeper sweeper, StateSource source, String stateContainer) {
    if (sweeper == null) {
      throw new IllegalArgumentException("sweeper must not be null");
    }
    this.sweeper = sweeper;
    this.source = source == null ? StateSource.POD : source;
    this.stateContainer =
        stateContainer == null || stateContainer.isEmpty() ? DEFAULT_STATE_CONTAINER : stateContainer;
  }

  /** Reads the state source and container from Kyuubi's configuration (Kyuubi's defaults if absent). */
  public static KyuubiPodObserver fromKyuubiConf(PodSweeper sweeper, Map<String, String> kyuubiConf) {
    String src = kyuubiConf == null ? null : kyuubiConf.get(STATE_SOURCE_KEY);
    String container = kyuubiConf == null ? null : kyuubiConf.get(STATE_CONTAINER_KEY);
    return new KyuubiPodObserver(sweeper, StateSource.parse(src), container);
  }

  public StateSource stateSource() {
    return source;
  }

  public String stateContainer() {
    return stateContainer;
  }

  /**
   * Computes the observation and passes it to {@link PodSweeper#observe} (skipped when the pod has
   * no name or UID). Non-blocking.
   *
   * @return what was (or, if not {@link Observation#complete()}, would have been) observed
   * @throws IllegalArgumentException if {@code event} is null or {@code appState} is not an
   *     ApplicationState name (from the native side)
   */
  public Observation observe(Pod pod, String context, String namespace, PodEvent event, String appState) {
    Observation o = observation(pod, context, namespace, event, appState, source, stateContainer);
    if (o.complete()) {
      sweeper.observe(
          o.context,
          o.namespace,
          o.event,
          o.uniqueTag,
          o.podName,
          o.podUid,
          o.appState,
          o.hasAppSelector,
          o.terminatedAtMillis,
          o.deletionTimestampSet,
          o.retainAnnotation,
          o.keepAnnotation);
    }
    return o;
  }

  /**
   * Kyuubi asks for the pod to be deleted at once (the pod of a CANCELED batch, an orphan pod):
   * hands it to {@link PodSweeper#dueNow} with what the observer reads from it, so the scope's
   * leader deletes it once, with its UID as precondition. A pod without a name or UID is not
   * passed on. Non-blocking.
   *
   * @param appState Kyuubi's {@code ApplicationState} name for the pod, or null to compute it
   *     ({@link #applicationState})
   * @return true when podsweep took the pod ({@link PodSweeper#dueNow}); false when it did not
   *     (no name or UID, no Kyuubi driver labels, a refused scope): the caller deletes it then
   */
  public boolean dueNow(Pod pod, String context, String namespace, String appState, String why) {
    String state = appState != null ? appState : applicationState(pod, source, stateContainer, PodEvent.UPDATE);
    Observation o = observation(pod, context, namespace, PodEvent.UPDATE, state, source, stateContainer);
    return o.complete()
        && sweeper.dueNow(o.context, o.namespace, o.uniqueTag, o.podName, o.podUid, o.appState,
            o.hasAppSelector, o.terminatedAtMillis, o.deletionTimestampSet, why,
            o.retainAnnotation, o.keepAnnotation);
  }

  /**
   * Whether {@link #dueNow} would hand the pod on: it has a name, a UID and Kyuubi's driver
   * labels ({@code kyuubi-unique-tag} and {@code spark-app-selector}). A caller that deletes
   * several pods at once asks this of each first, so that it hands on all of them or none.
   */
  public static boolean takeable(Pod pod) {
    ObjectMeta meta = pod == null ? null : pod.getMetadata();
    Map<String, String> labels = meta == null ? null : meta.getLabels();
    String tag = labels == null ? null : labels.get(UNIQUE_TAG_LABEL);
    return meta != null && meta.getName() != null && !meta.getName().isEmpty()
        && meta.getUid() != null && !meta.getUid().isEmpty()
        && tag != null && !tag.isEmpty() && labels.containsKey(APP_SELECTOR_LABEL);
  }

  /**
   * Like {@link #observe(Pod, String, String, PodEvent, String)}, with the state computed by
   * {@link #applicationState} from this observer's state source and container, for callers that
   * have no state computed by Kyuubi.
   */
  public Observation observe(Pod pod, String context, String namespace, PodEvent event) {
    return observe(pod, context, namespace, event, applicationState(pod, source, stateContainer, event));
  }

  /** The pure part of {@link #observe}: what would reach {@link PodSweeper#observe}. */
  public static Observation observation(
      Pod pod,
      String context,
      String namespace,
      PodEvent event,
      String appState,
      StateSource source,
      String stateContainer) {
    ObjectMeta meta = pod == null ? null : pod.getMetadata();
    Map<String, String> labels = meta == null ? null : meta.getLabels();
    // Annotations matter only for an event that can lead to a DELETE: read them for a terminal
    // state only, so a running pod's events cost nothing more.
    Map<String, String> annotations =
        meta != null && isTerminal(appState) ? meta.getAnnotations() : null;
    return new Observation(
        context,
        namespace,
        event,
        labels == null ? null : labels.get(UNIQUE_TAG_LABEL),
        meta == null ? null : meta.getName(),
        meta == null ? null : meta.getUid(),
        appState,
        labels != null && labels.containsKey(APP_SELECTOR_LABEL),
        terminatedAtMillis(pod, source, stateContainer),
        meta != null && meta.getDeletionTimestamp() != null,
        annotations == null ? null : annotations.get(RETAIN_ANNOTATION),
        annotations == null ? null : annotations.get(KEEP_ANNOTATION));
  }

  /** The termination time in epoch milliseconds, or 0 if unknown (see the class comment). */
  public static long terminatedAtMillis(Pod pod, StateSource source, String stateContainer) {
    PodStatus status = pod == null ? null : pod.getStatus();
    if (status == null) {
      return 0;
    }
    List<ContainerStatus> containers = status.getContainerStatuses();
    if (source == StateSource.CONTAINER) {
      long t = finishedAt(stateContainerStatus(containers, stateContainer));
      if (t > 0) {
        return t;
      }
    }
    long latest = 0;
    if (containers != null) {
      for (ContainerStatus c : containers) {
        latest = Math.max(latest, finishedAt(c));
      }
    }
    if (latest > 0) {
      return latest;
    }
    if (isTerminal(phaseState(status.getPhase())) && status.getConditions() != null) {
      for (PodCondition cond : status.getConditions()) {
        if (cond != null && "Ready".equals(cond.getType())) {
          long t = parseRfc3339(cond.getLastTransitionTime());
          if (t > 0) {
            return t;
          }
        }
      }
    }
    return 0;
  }

  /**
   * Kyuubi 1.12.0's {@code ApplicationState} name for a pod: with state source {@code CONTAINER}
   * and a container named like {@code stateContainer} (ignoring case), a terminal container state
   * wins, else a terminal pod phase, else the container's state; otherwise the pod phase. For a
   * DELETE event a state that is not terminal becomes {@code FAILED}. Never throws; missing parts
   * count as absent.
   *
   * <p>Phases (case-sensitive): {@code Pending} PENDING, {@code Running} RUNNING, {@code Succeeded}
   * FINISHED, {@code Failed} and {@code Error} FAILED, {@code OOMKilled} KILLED, anything else
   * UNKNOWN. Container state: waiting with no reason, {@code ContainerCreating} or
   * {@code PodInitializing} PENDING, waiting for any other reason FAILED, running RUNNING,
   * terminated with exit code 0 FINISHED, otherwise FAILED, none set UNKNOWN.
   */
  public static String applicationState(Pod pod, StateSource source, String stateContainer, PodEvent event) {
    PodStatus status = pod == null ? null : pod.getStatus();
    String podState = phaseState(status == null ? null : status.getPhase());
    String containerState = null;
    if (source == StateSource.CONTAINER && status != null) {
      ContainerStatus c = stateContainerStatus(status.getContainerStatuses(), stateContainer);
      if (c != null) {
        containerState = containerState(c.getState());
      }
    }
    String state;
    if (containerState != null && isTerminal(containerState)) {
      state = containerState;
    } else if (isTerminal(podState)) {
      state = podState;
    } else {
      state = containerState != null ? containerState : podState;
    }
    return event == PodEvent.DELETE && !isTerminal(state) ? "FAILED" : state;
  }

  /** Kyuubi's terminal states: FINISHED, FAILED, KILLED, NOT_FOUND. */
  public static boolean isTerminal(String state) {
    return "FINISHED".equals(state) || "FAILED".equals(state) || "KILLED".equals(state) || "NOT_FOUND".equals(state);
  }

  private static String phaseState(String phase) {
    if (phase == null) {
      return "UNKNOWN";
    }
    switch (phase) {
      case "Pending":
        return "PENDING";
      case "Running":
        return "RUNNING";
      case "Succeeded":
        return "FINISHED";
      case "Failed":
      case "Error":
        return "FAILED";
      case "OOMKilled":
        return "KILLED";
      default:
        return "UNKNOWN";
    }
  }

  private static String containerState(ContainerState s) {
    if (s == null) {
      return "UNKNOWN";
    }
    if (s.getWaiting() != null) {
      String reason = s.getWaiting().getReason() == null ? "" : s.getWaiting().getReason().trim();
      return reason.isEmpty() || reason.equals("ContainerCreating") || reason.equals("PodInitializing")
          ? "PENDING"
          : "FAILED";
    }
    if (s.getRunning() != null) {
      return "RUNNING";
    }
    ContainerStateTerminated t = s.getTerminated();
    if (t == null) {
      return "UNKNOWN";
    }
    return t.getExitCode() != null && t.getExitCode() == 0 ? "FINISHED" : "FAILED";
  }

  /** The first container status whose name equals {@code stateContainer} ignoring case, or null. */
  private static ContainerStatus stateContainerStatus(List<ContainerStatus> containers, String stateContainer) {
    if (containers == null) {
      return null;
    }
    String wanted = stateContainer == null || stateContainer.isEmpty() ? DEFAULT_STATE_CONTAINER : stateContainer;
    for (ContainerStatus c : containers) {
      if (c != null && wanted.equalsIgnoreCase(c.getName())) {
        return c;
      }
    }
    return null;
  }

  /** {@code terminated.finishedAt} of the current state, else 0 (never the last state). */
  private static long finishedAt(ContainerStatus c) {
    return c == null || c.getState() == null ? 0 : finishedAt(c.getState().getTerminated());
  }

  private static long finishedAt(ContainerStateTerminated terminated) {
    return terminated == null ? 0 : parseRfc3339(terminated.getFinishedAt());
  }

  /**
   * Epoch milliseconds of an RFC 3339 date-time ({@code T} or {@code t} or a space between date and
   * time, {@code Z}/{@code z} or a numeric offset, optional fraction), or 0 if null or invalid.
   */
  public static long parseRfc3339(String text) {
    if (text == null) {
      return 0;
    }
    String t = text.trim();
    if (t.length() < 11) {
      return 0;
    }
    char sep = t.charAt(10);
    if (sep == 't' || sep == ' ') {
      t = t.substring(0, 10) + 'T' + t.substring(11);
    }
    if (t.endsWith("z")) {
      t = t.substring(0, t.length() - 1) + 'Z';
    }
    try {
      long ms = OffsetDateTime.parse(t, DateTimeFormatter.ISO_OFFSET_DATE_TIME).toInstant().toEpochMilli();
      return ms > 0 ? ms : 0;
    } catch (RuntimeException e) {
      return 0;
    }
  }

  /** What one informer event contributes: the arguments of {@link PodSweeper#observe}. */
  public static final class Observation {
    public final String context;
    public final String namespace;
    public final PodEvent event;
    public final String uniqueTag;
    public final String podName;
    public final String podUid;
    public final String appState;
    public final boolean hasAppSelector;
    public final long terminatedAtMillis;
    public final boolean deletionTimestampSet;
    /** {@link #RETAIN_ANNOTATION}'s value, read for a terminal state only (else null). */
    public final String retainAnnotation;
    /** {@link #KEEP_ANNOTATION}'s value, read for a terminal state only (else null). */
    public final String keepAnnotation;

    public Observation(
        String context,
        String namespace,
        PodEvent event,
        String uniqueTag,
        String podName,
        String podUid,
        String appState,
        boolean hasAppSelector,
        long terminatedAtMillis,
        boolean deletionTimestampSet) {
      this(context, namespace, event, uniqueTag, podName, podUid, appState, hasAppSelector,
          terminatedAtMillis, deletionTimestampSet, null, null);
    }

    public Observation(
        String context,
        String namespace,
        PodEvent event,
        String uniqueTag,
        String podName,
        String podUid,
        String appState,
        boolean hasAppSelector,
        long terminatedAtMillis,
        boolean deletionTimestampSet,
        String retainAnnotation,
        String keepAnnotation) {
      this.context = context;
      this.namespace = namespace;
      this.event = event;
      this.uniqueTag = uniqueTag;
      this.podName = podName;
      this.podUid = podUid;
      this.appState = appState;
      this.hasAppSelector = hasAppSelector;
      this.terminatedAtMillis = terminatedAtMillis;
      this.deletionTimestampSet = deletionTimestampSet;
      this.retainAnnotation = retainAnnotation;
      this.keepAnnotation = keepAnnotation;
    }

    /** Whether the pod had a name and a UID, i.e. whether {@link #observe} passes it on. */
    public boolean complete() {
      return podName != null && podUid != null;
    }

    @Override
    public boolean equals(Object o) {
      if (this == o) {
        return true;
      }
      if (!(o instanceof Observation)) {
        return false;
      }
      Observation x = (Observation) o;
      return hasAppSelector == x.hasAppSelector
          && terminatedAtMillis == x.terminatedAtMillis
          && deletionTimestampSet == x.deletionTimestampSet
          && Objects.equals(context, x.context)
          && Objects.equals(namespace, x.namespace)
          && event == x.event
          && Objects.equals(uniqueTag, x.uniqueTag)
          && Objects.equals(podName, x.podName)
          && Objects.equals(podUid, x.podUid)
          && Objects.equals(appState, x.appState)
          && Objects.equals(retainAnnotation, x.retainAnnotation)
          && Objects.equals(keepAnnotation, x.keepAnnotation);
    }

    @Override
    public int hashCode() {
      return Objects.hash(context, namespace, event, uniqueTag, podName, podUid, appState,
          hasAppSelector, terminatedAtMillis, deletionTimestampSet, retainAnnotation, keepAnnotation);
    }

    @Override
    public String toString() {
      return "Observation[context=" + context + ", namespace=" + namespace + ", event=" + event
          + ", uniqueTag=" + uniqueTag + ", podName=" + podName + ", podUid=" + podUid
          + ", appState=" + appState + ", hasAppSelector=" + hasAppSelector
          + ", terminatedAtMillis=" + terminatedAtMillis
          + ", deletionTimestampSet=" + deletionTimestampSet
          + (retainAnnotation != null ? ", retainAnnotation=" + retainAnnotation : "")
          + (keepAnnotation != null ? ", keepAnnotation=" + keepAnnotation : "") + "]";
    }
  }
}
