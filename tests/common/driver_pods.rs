//! Spark driver pods as Kyuubi's spark-submit creates them on a real API server (Spark 3.5's
//! driver pod: its labels, container, environment, ports, volumes; Kyuubi's `kyuubi-unique-tag`),
//! and their status as a kubelet writes it through the status subresource: scheduled and
//! creating, running, then Succeeded or Failed. The API server adds its own defaults, the
//! ServiceAccount's token volume and the managed fields, as it does in a cluster.

#![allow(dead_code)]

use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

/// A driver pod's name and tag (a UUID, as Kyuubi's): Kyuubi names a batch's driver after its
/// tag. `run` keeps the tags of different runs (or kinds of pods) apart.
pub fn names(i: usize, run: u16) -> (String, String) {
    let tag = format!("{:08x}-{run:04x}-4000-8000-{:012x}", i as u32, i as u64);
    (format!("kyuubi-batch-spark-{tag}-driver"), tag)
}

/// The Spark application id Spark derives for a driver (`spark-` and 32 hex digits).
pub fn app_id(tag: &str) -> String {
    format!(
        "spark-{}",
        tag.replace('-', "").chars().rev().collect::<String>()
    )
}

/// The pod spark-submit creates for the driver of Kyuubi's batch `tag`.
pub fn driver(name: &str, tag: &str) -> Value {
    let app = app_id(tag);
    let local = format!("/var/data/spark-{tag}");
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {
            "kyuubi-unique-tag": tag, "spark-app-selector": app,
            "spark-app-name": format!("kyuubi-batch-{}", &tag[..8]),
            "spark-role": "driver", "spark-version": "3.5.6"}},
        "spec": {
            "restartPolicy": "Never",
            "serviceAccountName": "default",
            "containers": [{
                "name": "spark-kubernetes-driver", "image": "apache/spark:3.5.6",
                "imagePullPolicy": "IfNotPresent",
                "args": ["driver", "--properties-file", "/opt/spark/conf/spark.properties",
                         "--class", "org.apache.kyuubi.engine.spark.SparkSQLEngine", "spark-internal"],
                "env": [
                    {"name": "SPARK_USER", "value": "anonymous"},
                    {"name": "SPARK_APPLICATION_ID", "value": app},
                    {"name": "SPARK_DRIVER_BIND_ADDRESS",
                     "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
                    {"name": "SPARK_LOCAL_DIRS", "value": local},
                    {"name": "SPARK_CONF_DIR", "value": "/opt/spark/conf"}
                ],
                "ports": [
                    {"name": "driver-rpc-port", "containerPort": 7078, "protocol": "TCP"},
                    {"name": "blockmanager", "containerPort": 7079, "protocol": "TCP"},
                    {"name": "spark-ui", "containerPort": 4040, "protocol": "TCP"}
                ],
                "resources": {"requests": {"cpu": "1", "memory": "1408Mi"},
                              "limits": {"memory": "1408Mi"}},
                "volumeMounts": [
                    {"name": "spark-local-dir-1", "mountPath": local},
                    {"name": "spark-conf-volume-driver", "mountPath": "/opt/spark/conf"}
                ]
            }],
            "volumes": [
                {"name": "spark-local-dir-1", "emptyDir": {}},
                {"name": "spark-conf-volume-driver", "configMap": {
                    "name": format!("spark-drv-{}-conf-map", &app[6..22]),
                    "items": [{"key": "spark.properties", "path": "spark.properties", "mode": 420}],
                    "defaultMode": 420}}
            ]
        }
    })
}

fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    jiff::Timestamp::from_second(secs as i64)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn condition(kind: &str, ok: bool, at: &str) -> Value {
    json!({"type": kind, "status": if ok { "True" } else { "False" }, "lastProbeTime": null,
           "lastTransitionTime": at})
}

/// A kubelet's status of a pod scheduled at `at` whose driver container is being created.
pub fn creating(at: SystemTime) -> Value {
    let t = rfc3339(at);
    json!({"status": {
        "phase": "Pending",
        "conditions": [condition("PodReadyToStartContainers", false, &t),
                       condition("Initialized", true, &t), condition("Ready", false, &t),
                       condition("ContainersReady", false, &t), condition("PodScheduled", true, &t)],
        "hostIP": "10.0.1.17", "hostIPs": [{"ip": "10.0.1.17"}], "startTime": t,
        "qosClass": "Burstable",
        "containerStatuses": [{"name": "spark-kubernetes-driver", "image": "apache/spark:3.5.6",
            "imageID": "", "ready": false, "restartCount": 0, "started": false,
            "state": {"waiting": {"reason": "ContainerCreating"}}}]
    }})
}

/// A kubelet's status of a pod whose driver has been running since `at`.
pub fn running(at: SystemTime) -> Value {
    let t = rfc3339(at);
    json!({"status": {
        "phase": "Running",
        "conditions": [condition("PodReadyToStartContainers", true, &t),
                       condition("Initialized", true, &t), condition("Ready", true, &t),
                       condition("ContainersReady", true, &t), condition("PodScheduled", true, &t)],
        "hostIP": "10.0.1.17", "hostIPs": [{"ip": "10.0.1.17"}],
        "podIP": "10.244.3.41", "podIPs": [{"ip": "10.244.3.41"}], "startTime": t,
        "qosClass": "Burstable",
        "containerStatuses": [{"name": "spark-kubernetes-driver", "image": "apache/spark:3.5.6",
            "imageID": "docker.io/apache/spark@sha256:5b9c2d8f0e7a41c3b6d1e9f8a7c6b5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8",
            "containerID": "containerd://4f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
            "ready": true, "restartCount": 0, "started": true,
            "state": {"running": {"startedAt": t}}}]
    }})
}

/// A kubelet's status of a pod whose driver ran from `started` and ended at `finished`:
/// `Succeeded` (exit 0) or `Failed` (exit 1).
pub fn terminated(phase: &str, started: SystemTime, finished: SystemTime) -> Value {
    let (s, f) = (rfc3339(started), rfc3339(finished));
    let ok = phase == "Succeeded";
    json!({"status": {
        "phase": phase,
        "conditions": [condition("PodReadyToStartContainers", false, &f),
                       condition("Initialized", true, &s), condition("Ready", false, &f),
                       condition("ContainersReady", false, &f), condition("PodScheduled", true, &s)],
        "hostIP": "10.0.1.17", "hostIPs": [{"ip": "10.0.1.17"}],
        "podIP": "10.244.3.41", "podIPs": [{"ip": "10.244.3.41"}], "startTime": s,
        "qosClass": "Burstable",
        "containerStatuses": [{"name": "spark-kubernetes-driver", "image": "apache/spark:3.5.6",
            "imageID": "docker.io/apache/spark@sha256:5b9c2d8f0e7a41c3b6d1e9f8a7c6b5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8",
            "containerID": "containerd://4f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0",
            "ready": false, "restartCount": 0, "started": false,
            "state": {"terminated": {"exitCode": if ok { 0 } else { 1 },
                "reason": if ok { "Completed" } else { "Error" },
                "startedAt": s, "finishedAt": f,
                "containerID": "containerd://4f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"}}}]
    }})
}

/// Creates the driver pod; returns its UID.
pub async fn create(api: &Api<Pod>, name: &str, tag: &str) -> kube::Result<String> {
    let pod: Pod = serde_json::from_value(driver(name, tag)).expect("a driver pod");
    let made = api.create(&PostParams::default(), &pod).await?;
    Ok(made.metadata.uid.unwrap_or_default())
}

/// Writes a status through the status subresource, as a kubelet does.
pub async fn set_status(api: &Api<Pod>, name: &str, status: &Value) -> kube::Result<()> {
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .map(|_| ())
}

/// A running driver pod: created, then its status (running for `ran` already).
pub async fn create_running(
    api: &Api<Pod>,
    name: &str,
    tag: &str,
    ran: Duration,
) -> kube::Result<String> {
    let uid = create(api, name, tag).await?;
    set_status(api, name, &running(SystemTime::now() - ran)).await?;
    Ok(uid)
}

/// A terminated driver pod: created, then its status (`phase`, ended `ago`).
pub async fn create_terminated(
    api: &Api<Pod>,
    name: &str,
    tag: &str,
    phase: &str,
    ago: Duration,
) -> kube::Result<String> {
    let uid = create(api, name, tag).await?;
    let finished = SystemTime::now() - ago;
    set_status(
        api,
        name,
        &terminated(phase, finished - Duration::from_secs(600), finished),
    )
    .await?;
    Ok(uid)
}
