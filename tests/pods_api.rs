//! The loopback pods API (`common::pods_api`) as the fleet harness uses it: clients at one address
//! (one cluster, so one election per scope) told apart by their bearer tokens, and one of them cut
//! off from the server while the others are served.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::pods_api::{driver_pod, PodsApi};
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use podsweep::kube_client::{build_client, MASTER, OAUTH_TOKEN};

const NS: &str = "spark";

/// podsweep's client for `api` with bearer token `token`.
async fn pods(api: &PodsApi, token: &str) -> kube::Api<Pod> {
    let conf: HashMap<String, String> = [(MASTER, api.url.clone()), (OAUTH_TOKEN, token.into())]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    kube::Api::namespaced(build_client(&conf).await.expect("client"), NS)
}

#[tokio::test]
async fn senders_at_one_address_are_told_apart_by_their_tokens() {
    let api = PodsApi::start().await;
    for name in ["a", "b", "c"] {
        api.create(NS, driver_pod(name, Some(5)));
    }
    let (t0, t1) = (api.token("server-0"), api.token("server-1"));
    assert_ne!(t0, t1);
    assert_eq!(api.token("server-0"), t0, "one token per tag");
    let dp = DeleteParams::default();
    pods(&api, &t0).await.delete("a", &dp).await.unwrap();
    pods(&api, &t1).await.delete("b", &dp).await.unwrap();
    pods(&api, "unknown").await.delete("c", &dp).await.unwrap();
    let via: Vec<(String, String)> = api.deletes().into_iter().map(|d| (d.name, d.via)).collect();
    let want: Vec<(String, String)> = [("a", "server-0"), ("b", "server-1"), ("c", "")]
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    assert_eq!(via, want);
}

#[tokio::test]
async fn a_cut_sender_is_never_answered_and_its_connection_closes_at_the_heal() {
    let api = PodsApi::start().await;
    api.create(NS, driver_pod("a", Some(5)));
    api.create(NS, driver_pod("b", Some(5)));
    let cut = pods(&api, &api.token("server-0")).await;
    let other = pods(&api, &api.token("server-1")).await;
    api.cut("server-0", true);
    assert!(api.is_cut("server-0") && !api.is_cut("server-1"));
    let pending =
        tokio::spawn(async move { cut.delete("a", &DeleteParams::default()).await.map(|_| ()) });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!pending.is_finished(), "a cut request gets no answer");
    // The others are served meanwhile.
    other
        .delete("b", &DeleteParams::default())
        .await
        .expect("another sender is served");
    api.cut("server-0", false);
    let answer = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("the held request ends at the heal")
        .unwrap();
    assert!(answer.is_err(), "closed without an answer: {answer:?}");
    assert!(api.exists(NS, "a"), "a cut request changes nothing");
    assert!(
        api.arrivals().iter().all(|d| d.via != "server-0"),
        "a cut request never reached the server"
    );
    // Healed: served again.
    pods(&api, &api.token("server-0"))
        .await
        .delete("a", &DeleteParams::default())
        .await
        .expect("served after the heal");
    let last = api.deletes().pop().unwrap();
    assert_eq!((last.name.as_str(), last.via.as_str()), ("a", "server-0"));
}

#[test]
fn field_selectors_on_the_phase() {
    use common::pods_fields::matches;
    let pod = |p: &str| serde_json::json!({"status": {"phase": p}});
    let past_running = "status.phase!=Pending,status.phase!=Running";
    assert_eq!(matches(past_running, &pod("Succeeded")), Ok(true));
    assert_eq!(matches(past_running, &pod("Running")), Ok(false));
    assert_eq!(matches("status.phase=Failed", &pod("Failed")), Ok(true));
    assert_eq!(matches("", &pod("Running")), Ok(true));
    assert!(matches("spec.nodeName=x", &pod("Running")).is_err());
}
