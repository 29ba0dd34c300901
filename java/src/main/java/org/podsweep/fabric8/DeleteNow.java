package org.podsweep.fabric8;

import io.fabric8.kubernetes.api.model.ObjectMeta;
import io.fabric8.kubernetes.api.model.Pod;
import io.fabric8.kubernetes.client.informers.SharedIndexInformer;
import io.fabric8.kubernetes.client.informers.cache.Indexer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.function.Function;

/**
 * Kyuubi deletes a driver pod at once ({@code deletePod}: the pod of a CANCELED batch, an orphan):
 * the pods Kyuubi would delete at that call, read from the scope's pod informer cache, go to
 * podsweep as due now ({@link org.podsweep.PodSweeper#dueNow}), so that only the scope's leader deletes them, once each, with the pod's UID
 * as precondition.
 *
 * <h2>Guarantees</h2>
 *
 * Every pod Kyuubi would delete at that call is either taken by podsweep (its leader deletes it) or
 * left to Kyuubi's own DELETE; never neither:
 *
 * <ul>
 *   <li>With a pod name, the pod of that name (looked up by its key, {@code namespace/name}), as
 *       Kyuubi deletes by name; without one, every pod carrying the {@code kyuubi-unique-tag}
 *       value (through an index on that label, added to the informer on first use), as Kyuubi
 *       deletes by label.
 *   <li>{@link Outcome#TAKEN}: podsweep took every such pod. {@link Outcome#GONE}: the synced
 *       cache holds none, so there is nothing to delete. {@link Outcome#DECLINED}: Kyuubi deletes
 *       them itself, as without podsweep: no informer for the scope or one not synced yet, a pod
 *       without a name, UID or Kyuubi's driver labels (then none of the pods is handed on, so that
 *       Kyuubi's DELETE by label is not doubled by podsweep's), or a scope podsweep refuses.
 * </ul>
 *
 * Cost: one cache lookup by key, or one index lookup (the index is built once per informer, over
 * the pods it holds then); the store is never scanned per call.
 */
public final class DeleteNow {
  /** The name of the informer index podsweep adds: pods by {@code kyuubi-unique-tag} value. */
  public static final String TAG_INDEX = "podsweep-kyuubi-unique-tag";

  /** What became of the pods Kyuubi wanted deleted. */
  public enum Outcome {
    /** podsweep took every pod: its leader deletes them; the caller sends nothing. */
    TAKEN,
    /** The informer's synced cache holds no such pod: it is gone, nothing to delete. */
    GONE,
    /** podsweep took none: the caller deletes them as it would without podsweep. */
    DECLINED
  }

  private final Outcome outcome;
  private final List<String> pods;
  private final String reason;

  private DeleteNow(Outcome outcome, List<String> pods, String reason) {
    this.outcome = outcome;
    this.pods = Collections.unmodifiableList(pods);
    this.reason = reason;
  }

  public Outcome outcome() {
    return outcome;
  }

  /** Whether the caller must not delete the pods itself ({@link Outcome#TAKEN} or {@link Outcome#GONE}). */
  public boolean handled() {
    return outcome != Outcome.DECLINED;
  }

  /** The names of the pods found in the cache. */
  public List<String> pods() {
    return pods;
  }

  /** Why podsweep declined, for the caller's log line; empty otherwise. */
  public String reason() {
    return reason;
  }

  @Override
  public String toString() {
    return outcome + (pods.isEmpty() ? "" : " " + pods) + (reason.isEmpty() ? "" : ": " + reason);
  }

  /**
   * Hands the pods Kyuubi would delete to podsweep ({@link KyuubiPodObserver#dueNow}).
   *
   * @param informer the scope's pod informer, or null when the scope has none
   * @param context the scope's context ({@code KubernetesInfo.context.orNull})
   * @param namespace the scope's namespace ({@code KubernetesInfo.namespace.orNull})
   * @param podNamespace the namespace the informer's pods live in (the client's namespace)
   * @param podName the pod's name, or null to take every pod with the tag
   * @param tag the {@code kyuubi-unique-tag} value, or null (then {@code podName} is required)
   * @param why why Kyuubi deletes it, for the log
   */
  public static DeleteNow handOff(
      KyuubiPodObserver observer,
      SharedIndexInformer<Pod> informer,
      String context,
      String namespace,
      String podNamespace,
      String podName,
      String tag,
      String why) {
    if (informer == null) {
      return declined("the scope has no pod informer");
    }
    if (!informer.hasSynced()) {
      return declined("the scope's pod informer has not synced yet");
    }
    List<Pod> found = new ArrayList<>();
    if (podName != null) {
      Pod pod = informer.getIndexer().getByKey(podNamespace + "/" + podName);
      if (pod != null) {
        found.add(pod);
      }
    } else if (tag != null) {
      found.addAll(byTag(informer, tag));
    } else {
      return declined("neither a pod name nor a kyuubi-unique-tag to look up");
    }
    List<String> names = new ArrayList<>();
    for (Pod p : found) {
      names.add(p.getMetadata().getName());
    }
    if (found.isEmpty()) {
      return new DeleteNow(Outcome.GONE, names, "");
    }
    for (Pod p : found) {
      if (!KyuubiPodObserver.takeable(p)) {
        ObjectMeta m = p.getMetadata();
        return new DeleteNow(Outcome.DECLINED, names, "pod " + m.getName()
            + " lacks a name, a UID or Kyuubi's driver labels (" + KyuubiPodObserver.UNIQUE_TAG_LABEL
            + ", " + KyuubiPodObserver.APP_SELECTOR_LABEL + ")");
      }
    }
    int taken = 0;
    for (Pod p : found) {
      if (observer.dueNow(p, context, namespace, null, why)) {
        taken++;
      } else if (taken == 0) {
        // All pods share the scope, so the first one's answer is the scope's: podsweep refuses it.
        return new DeleteNow(Outcome.DECLINED, names, "podsweep does not clean this scope");
      }
    }
    if (taken < found.size()) {
      // Not expected (the pods share their scope and were all checked): Kyuubi deletes them all;
      // the ones podsweep took may get a second DELETE, answered 404 or 200, never none.
      return new DeleteNow(Outcome.DECLINED, names,
          "podsweep took " + taken + " of " + found.size() + " pods");
    }
    return new DeleteNow(Outcome.TAKEN, names, "");
  }

  private static DeleteNow declined(String reason) {
    return new DeleteNow(Outcome.DECLINED, new ArrayList<String>(), reason);
  }

  /** The pods carrying the tag, through {@link #TAG_INDEX}, added on first use. */
  static List<Pod> byTag(SharedIndexInformer<Pod> informer, String tag) {
    Indexer<Pod> indexer = informer.getIndexer();
    if (!indexer.getIndexers().containsKey(TAG_INDEX)) {
      synchronized (informer) {
        if (!indexer.getIndexers().containsKey(TAG_INDEX)) {
          Map<String, Function<Pod, List<String>>> index =
              Collections.singletonMap(TAG_INDEX, DeleteNow::tagOf);
          informer.addIndexers(index);
        }
      }
    }
    return indexer.byIndex(TAG_INDEX, tag);
  }

  private static List<String> tagOf(Pod pod) {
    ObjectMeta m = pod.getMetadata();
    Map<String, String> labels = m == null ? null : m.getLabels();
    String tag = labels == null ? null : labels.get(KyuubiPodObserver.UNIQUE_TAG_LABEL);
    return tag == null ? Collections.<String>emptyList() : Collections.singletonList(tag);
  }
}
