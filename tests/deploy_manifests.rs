//! The Kubernetes manifests in `deploy/` parse and hold the settings an operator relies on:
//! probes on the ops port, a grace period above the shutdown deadline, a non-root read-only
//! container, the PodDisruptionBudget, the Workload Identity annotation and the metrics scrape.
//! That the API server would accept them (kustomize's rendering of the base and every overlay,
//! validated against the Kubernetes and Prometheus operator schemas) is checked by
//! `tests/python/test_deploy_manifests.py`.

use std::path::Path;

use serde_json::Value;

fn manifest(path: &str) -> Value {
    let full = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path);
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
}

fn seconds(duration: &str) -> u64 {
    let digits = duration.trim_end_matches('s');
    digits
        .parse()
        .unwrap_or_else(|_| panic!("not a duration in seconds: {duration}"))
}

#[test]
fn kustomization_lists_every_manifest_of_the_base() {
    let k = manifest("base/kustomization.yaml");
    let resources: Vec<&str> = k["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    for file in &resources {
        let doc = manifest(&format!("base/{file}"));
        assert!(doc["kind"].is_string(), "{file} has no kind");
    }
    for kind_file in [
        "deployment.yaml",
        "configmap.yaml",
        "service.yaml",
        "podmonitor.yaml",
        "poddisruptionbudget.yaml",
        "serviceaccount.yaml",
    ] {
        assert!(
            resources.contains(&kind_file),
            "{kind_file} missing from the base"
        );
    }
}

#[test]
fn deployment_has_probes_security_context_and_a_grace_period_above_the_shutdown_deadline() {
    let d = manifest("base/deployment.yaml");
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert!(c["resources"]["requests"]["memory"].is_string());
    assert!(c["resources"]["limits"]["memory"].is_string());

    let config: Value = {
        let cm = manifest("base/configmap.yaml");
        serde_saphyr::from_str(cm["data"]["config.yaml"].as_str().unwrap()).unwrap()
    };
    let deadline = seconds(config["shutdown_deadline"].as_str().unwrap());
    let grace = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(
        grace > deadline,
        "grace period {grace}s must exceed shutdown_deadline {deadline}s"
    );
    let port = &c["ports"][0];
    assert_eq!(port["name"], "metrics");
    let listen = config["metrics"]["listen"].as_str().unwrap();
    assert!(
        listen.ends_with(&format!(":{}", port["containerPort"])),
        "metrics.listen {listen} is not the container port"
    );
}

#[test]
fn service_account_carries_the_workload_identity_annotation() {
    let sa = manifest("base/serviceaccount.yaml");
    let gsa = sa["metadata"]["annotations"]["iam.gke.io/gcp-service-account"]
        .as_str()
        .unwrap();
    assert!(gsa.ends_with(".iam.gserviceaccount.com"), "{gsa}");
}

#[test]
fn disruption_budget_and_scrape_config_select_the_sink_pods() {
    let pdb = manifest("base/poddisruptionbudget.yaml");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    let pm = manifest("base/podmonitor.yaml");
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["path"], "/metrics");
    assert_eq!(pm["spec"]["podMetricsEndpoints"][0]["port"], "metrics");
    let svc = manifest("base/service.yaml");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "metrics");
}

#[test]
fn production_overlay_builds_on_the_base() {
    let o = manifest("overlays/production/kustomization.yaml");
    assert_eq!(o["resources"][0], "../../base");
    assert!(o["images"][0]["newTag"].is_string());
}

#[test]
fn the_configmap_holds_a_config_that_validates() {
    let cm = manifest("base/configmap.yaml");
    let text = cm["data"]["config.yaml"].as_str().unwrap();
    let config = kafka_bigquery_sink::config::Config::from_yaml(text, Default::default())
        .unwrap_or_else(|e| panic!("the ConfigMap's config does not parse: {e:?}"));
    if let Err(errors) = kafka_bigquery_sink::config::validate(&config) {
        panic!("the ConfigMap's config does not validate: {errors:?}");
    }
}
