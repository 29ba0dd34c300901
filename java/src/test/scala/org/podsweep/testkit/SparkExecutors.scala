package org.podsweep.testkit

import scala.collection.JavaConverters._

import io.fabric8.kubernetes.api.model.{OwnerReferenceBuilder, Pod, PodBuilder}
import io.fabric8.kubernetes.client.KubernetesClient

/**
 * Executor pods of a driver pod as Spark's `ExecutorPodsAllocator` (with its executor feature steps)
 * makes them: the driver cannot run here (no container runtime), so the test makes them on the
 * driver's behalf, through the driver's ServiceAccount, once the driver runs.
 *
 * What Spark sets and the garbage collector and podsweep look at is the same: the name
 * `<spark.kubernetes.executor.podNamePrefix>-exec-<id>` (the prefix read from the driver's own
 * ConfigMap, as Spark wrote it), the labels `spark-app-selector` (the driver's application id),
 * `spark-exec-id`, `spark-role=executor`, `spark-exec-resourceprofile-id`, and an owner reference
 * to the driver pod (controller, as Spark sets it), so that deleting the driver deletes them. The
 * scheduler binds them (no `nodeName`), as it does Spark's.
 *
 * # Caveats
 * The container's command, environment and volumes are reduced to what tells an executor apart;
 * nothing runs them but KWOK.
 */
object SparkExecutors {
  /** The executor name prefix Spark wrote into the driver's ConfigMap, else the driver's name less `-driver`. */
  def namePrefix(client: KubernetesClient, ns: String, driver: Pod): String = {
    val fromConf = client.configMaps().inNamespace(ns).list().getItems.asScala.iterator
      .filter(cm => Option(cm.getMetadata.getOwnerReferences).exists(_.asScala.exists(_.getUid == driver.getMetadata.getUid)))
      .flatMap(cm => Option(cm.getData).toSeq.flatMap(_.asScala.values))
      .flatMap(_.linesIterator)
      .collectFirst { case l if l.startsWith("spark.kubernetes.executor.podNamePrefix=") => l.split("=", 2)(1).trim }
    fromConf.getOrElse(driver.getMetadata.getName.stripSuffix("-driver"))
  }

  /** Creates executors 1..n of `driver` through `client` (the driver's identity); returns them. */
  def create(client: KubernetesClient, ns: String, driver: Pod, n: Int): Seq[Pod] = {
    val labels = Option(driver.getMetadata.getLabels).map(_.asScala.toMap).getOrElse(Map.empty)
    val appId = labels.getOrElse("spark-app-selector",
      throw new IllegalArgumentException(s"driver ${driver.getMetadata.getName} has no spark-app-selector label"))
    val prefix = namePrefix(client, ns, driver)
    val image = driver.getSpec.getContainers.asScala.headOption.map(_.getImage).getOrElse("spark")
    val owner = new OwnerReferenceBuilder().withApiVersion("v1").withKind("Pod")
      .withName(driver.getMetadata.getName).withUid(driver.getMetadata.getUid).withController(true).build()
    (1 to n).map { id =>
      val pod = new PodBuilder()
        .withNewMetadata().withName(s"$prefix-exec-$id")
        .addToLabels("spark-app-selector", appId)
        .addToLabels("spark-exec-id", id.toString)
        .addToLabels("spark-exec-resourceprofile-id", "0")
        .addToLabels("spark-role", "executor")
        .addToLabels(labels.get("spark-app-name").map(v => Map("spark-app-name" -> v)).getOrElse(Map.empty[String, String]).asJava)
        .withOwnerReferences(owner)
        .endMetadata()
        .withNewSpec().withRestartPolicy("Never").withHostname(s"$prefix-exec-$id")
        .withServiceAccountName(Option(driver.getSpec.getServiceAccountName).getOrElse("default"))
        .addNewContainer().withName("spark-kubernetes-executor").withImage(image).withArgs("executor")
        .addNewEnv().withName("SPARK_EXECUTOR_ID").withValue(id.toString).endEnv()
        .addNewEnv().withName("SPARK_APPLICATION_ID").withValue(appId).endEnv()
        .endContainer()
        .endSpec().build()
      client.pods().inNamespace(ns).resource(pod).create()
    }
  }

  /** The executors of application `appId` in `ns` still stored. */
  def of(client: KubernetesClient, ns: String, appId: String): Seq[Pod] =
    client.pods().inNamespace(ns).withLabel("spark-app-selector", appId).withLabel("spark-role", "executor")
      .list().getItems.asScala.toVector
}
