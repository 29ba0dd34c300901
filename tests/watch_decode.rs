//! What one page of the watch's list costs in memory once decoded: 500 watch events of Spark
//! driver pods as a real API server sends them (spec with its defaults, status, managed fields),
//! decoded into the type the watch decodes pods into, held together as kube-rs holds a page.
//! Heap bytes are counted by a `#[global_allocator]` around the system allocator (requested
//! sizes).

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::SystemTime;

use common::driver_pods;
use kube::api::WatchEvent;
use serde_json::{json, Value};

/// The type the self-watch decodes pods into.
type Decoded = podsweep::watch::WatchedPod;

struct Counting;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);
static FREED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to the system allocator; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size(), Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        FREED.fetch_add(layout.size(), Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> usize {
    ALLOCATED.load(Relaxed).saturating_sub(FREED.load(Relaxed))
}

/// A driver pod as the API server returns it: its defaults, the ServiceAccount's token volume,
/// two managers' fields, a running status.
fn served(i: usize) -> Value {
    let (name, tag) = driver_pods::names(i, 9);
    let mut pod = driver_pods::driver(&name, &tag);
    let status = driver_pods::running(SystemTime::now());
    pod["status"] = status["status"].clone();
    let m = &mut pod["metadata"];
    m["namespace"] = "spark".into();
    m["uid"] = format!("3f6c2a9e-{i:04x}-4b1d-9c8e-5a7f3e2d1c0b").into();
    m["resourceVersion"] = (100_000 + i).to_string().into();
    m["creationTimestamp"] = "2026-12-06T10:00:00Z".into();
    m["managedFields"] = json!([
        {"manager": "spark-submit", "operation": "Update", "apiVersion": "v1",
         "time": "2026-12-06T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {
            "f:metadata": {"f:labels": {".": {}, "f:kyuubi-unique-tag": {}, "f:spark-app-name": {},
                "f:spark-app-selector": {}, "f:spark-role": {}, "f:spark-version": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"spark-kubernetes-driver\"}": {
                ".": {}, "f:args": {}, "f:env": {}, "f:image": {}, "f:imagePullPolicy": {},
                "f:name": {}, "f:ports": {}, "f:resources": {}, "f:volumeMounts": {}}},
                "f:restartPolicy": {}, "f:serviceAccountName": {}, "f:volumes": {}}}},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
         "time": "2026-12-06T10:00:05Z", "fieldsType": "FieldsV1", "fieldsV1": {
            "f:status": {"f:conditions": {}, "f:containerStatuses": {}, "f:hostIP": {},
                "f:hostIPs": {}, "f:phase": {}, "f:podIP": {}, "f:podIPs": {}, "f:startTime": {}}}}
    ]);
    let s = &mut pod["spec"];
    s["dnsPolicy"] = "ClusterFirst".into();
    s["schedulerName"] = "default-scheduler".into();
    s["securityContext"] = json!({});
    s["terminationGracePeriodSeconds"] = 30.into();
    s["enableServiceLinks"] = true.into();
    s["preemptionPolicy"] = "PreemptLowerPriority".into();
    s["priority"] = 0.into();
    s["nodeName"] = "node-17".into();
    s["tolerations"] = json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 300}
    ]);
    s["volumes"].as_array_mut().unwrap().push(json!({"name": "kube-api-access-x7k2p",
        "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
                "fieldPath": "metadata.namespace"}}]}}]}}));
    pod
}

#[test]
fn a_decoded_page_of_pods_keeps_only_what_podsweep_reads() {
    const PAGE: usize = 500;
    let lines: Vec<String> = (0..PAGE)
        .map(|i| json!({"type": "ADDED", "object": served(i)}).to_string())
        .collect();
    let wire = lines.iter().map(String::len).sum::<usize>() / PAGE;
    let before = live();
    let page: Vec<WatchEvent<Decoded>> = lines
        .iter()
        .map(|l| serde_json::from_str(l).expect("a watch event"))
        .collect();
    let per_pod = live().saturating_sub(before) / PAGE;
    assert_eq!(page.len(), PAGE);
    println!(
        "{PAGE} watch events of {wire} bytes each decoded into {}: {per_pod} heap bytes per pod",
        std::any::type_name::<Decoded>()
    );
    // 29,992 with the full `Pod` (the watch's type before 0.2.0's slim decoding).
    assert!(per_pod < 4000, "{per_pod} bytes per decoded pod");
}
