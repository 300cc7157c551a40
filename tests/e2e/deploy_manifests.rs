//! The Kubernetes manifests in `deploy/` parse and hold the settings an operator relies on:
//! probes on the ops port, a grace period above the shutdown deadline, a non-root read-only
//! container, the PodDisruptionBudget, the Workload Identity annotation and the metrics scrape.
//! That the API server would accept them (kustomize's rendering of the base and every overlay,
//! validated against the Kubernetes and Prometheus operator schemas) is checked by
//! `tests/python/test_deploy_manifests.py`, the Helm chart's renderings by
//! `tests/python/test_helm_chart.py`.

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
        "service.yaml",
        "poddisruptionbudget.yaml",
        "serviceaccount.yaml",
        "networkpolicy.yaml",
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

    let config: Value = serde_saphyr::from_str(&base_config_text()).unwrap();
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
    let pm = manifest("components/prometheus-operator/podmonitor.yaml");
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

/// The base's config file, which kustomize's configMapGenerator turns into the ConfigMap.
fn base_config_text() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/config.yaml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn the_configmap_holds_a_config_that_validates() {
    let text = base_config_text();
    let config = kafka_bigquery_sink::config::Config::from_yaml(&text, Default::default())
        .unwrap_or_else(|e| panic!("the ConfigMap's config does not parse: {e:?}"));
    if let Err(errors) = kafka_bigquery_sink::config::validate(&config) {
        panic!("the ConfigMap's config does not validate: {errors:?}");
    }
}

/// The base ConfigMap's config, parsed by the daemon's own loader (defaults filled in).
fn base_config() -> kafka_bigquery_sink::config::Config {
    kafka_bigquery_sink::config::Config::from_yaml(&base_config_text(), Default::default())
        .expect("the ConfigMap's config parses")
}

#[test]
fn the_base_generates_its_configmap_and_leaves_the_operators_objects_to_components() {
    let k = manifest("base/kustomization.yaml");
    let generator = &k["configMapGenerator"][0];
    assert_eq!(generator["name"], "kafka-bigquery-sink");
    assert_eq!(generator["files"], serde_json::json!(["config.yaml"]));
    let resources = k["resources"].as_array().unwrap();
    for crd_kind in ["podmonitor.yaml", "prometheusrule.yaml", "configmap.yaml"] {
        assert!(
            !resources.contains(&Value::from(crd_kind)),
            "{crd_kind} in the base"
        );
    }
    let component = manifest("components/prometheus-operator/kustomization.yaml");
    assert_eq!(component["kind"], "Component");
    assert_eq!(
        component["resources"],
        serde_json::json!(["podmonitor.yaml", "prometheusrule.yaml"])
    );
    assert_eq!(
        manifest("components/prometheus-operator/prometheusrule.yaml")["kind"],
        "PrometheusRule"
    );
    let production = manifest("overlays/production/kustomization.yaml");
    assert_eq!(
        production["components"][0],
        "../../components/prometheus-operator"
    );
}

#[test]
fn one_metrics_port_everywhere_and_no_manifest_overrides_log_level() {
    let default_port = kafka_bigquery_sink::config::defaults::METRICS_LISTEN
        .rsplit(':')
        .next()
        .unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    assert!(
        dockerfile.contains(&format!("EXPOSE {default_port}")),
        "the Dockerfile does not EXPOSE {default_port}"
    );
    let d = manifest("base/deployment.yaml");
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["ports"][0]["containerPort"].to_string(), default_port);
    assert_eq!(
        manifest("base/service.yaml")["spec"]["ports"][0]["port"].to_string(),
        default_port
    );
    let values = manifest("helm/kafka-bigquery-sink/values.yaml");
    assert_eq!(values["metricsPort"].to_string(), default_port);
    // RUST_LOG would only matter where log.level is unset; the manifests leave it to the config.
    assert!(c["env"].is_null() || !c["env"].to_string().contains("RUST_LOG"));
    assert!(!values["env"].to_string().contains("RUST_LOG"));
}

#[test]
fn the_keda_component_scales_the_deployment_on_the_lag_of_the_configs_group() {
    let component = manifest("components/keda/kustomization.yaml");
    assert_eq!(component["kind"], "Component");
    assert_eq!(component["resources"][0], "scaledobject.yaml");
    assert!(
        component["patches"][0]["patch"]
            .as_str()
            .unwrap()
            .contains("path: /spec/replicas"),
        "the component hands the replica count to the autoscaler"
    );
    let overlay = manifest("overlays/autoscaling/kustomization.yaml");
    assert_eq!(overlay["components"][0], "../../components/keda");

    let so = manifest("components/keda/scaledobject.yaml");
    let deployment = manifest("base/deployment.yaml");
    assert_eq!(
        so["spec"]["scaleTargetRef"]["name"],
        deployment["metadata"]["name"]
    );
    let config = base_config();
    let trigger = &so["spec"]["triggers"][0];
    assert_eq!(trigger["type"], "kafka");
    let meta = &trigger["metadata"];
    assert_eq!(
        meta["bootstrapServers"],
        config.kafka.bootstrap_servers.as_str()
    );
    assert_eq!(meta["consumerGroup"], config.kafka.group_id.as_str());
    assert!(
        config
            .kafka
            .topics
            .iter()
            .any(|t| meta["topic"] == t.as_str()),
        "the trigger's topic {} is not one of the config's",
        meta["topic"]
    );
    // Replicas beyond the partition count would only idle: KEDA must not count them.
    assert_eq!(meta["allowIdleConsumers"], "false");
    // A partition failed closed keeps its lag: it must not drive scale-out.
    assert_eq!(meta["excludePersistentLag"], "true");
    // A group without backlog shows a committed lag of its rate times a checkpoint cycle
    // (interval + about a second): the threshold is one replica's rate times that cycle, so the
    // rate the file assumes, threshold / cycle, is a whole number of records per second.
    let threshold: u64 = meta["lagThreshold"].as_str().unwrap().parse().unwrap();
    let cycle = config.checkpoint.interval.0.as_secs() + 1;
    assert_eq!(
        threshold % cycle,
        0,
        "lagThreshold {threshold} is not a rate times the {cycle} s cycle"
    );
    let min = so["spec"]["minReplicaCount"].as_u64().unwrap();
    let max = so["spec"]["maxReplicaCount"].as_u64().unwrap();
    assert!((1..=max).contains(&min), "replicas {min}..{max}");
}

#[test]
fn keda_scaling_steps_are_further_apart_than_a_checkpoint_cycle_and_a_rebalance() {
    let config = base_config();
    // A step's cost: the leaving replica's final checkpoint (shutdown_deadline), the group's
    // rebalance (at most the session timeout, librdkafka's default 45 s unless set), and the new
    // owner's first checkpoint cycle.
    let session_ms: u64 = config
        .kafka
        .properties
        .0
        .get("session.timeout.ms")
        .map(|v| v.parse().unwrap())
        .unwrap_or(45_000);
    let bound = config.checkpoint.interval.0.as_secs()
        + config.shutdown_deadline.0.as_secs()
        + session_ms / 1000;
    assert!(
        bound >= 90,
        "the bound was computed from the config: {bound}"
    );
    let so = manifest("components/keda/scaledobject.yaml");
    let behavior = &so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"];
    let mut windows = vec![(
        "cooldownPeriod".to_string(),
        so["spec"]["cooldownPeriod"].as_u64().unwrap(),
    )];
    for direction in ["scaleUp", "scaleDown"] {
        let b = &behavior[direction];
        windows.push((
            format!("{direction}.stabilizationWindowSeconds"),
            b["stabilizationWindowSeconds"].as_u64().unwrap(),
        ));
        for (i, p) in b["policies"].as_array().unwrap().iter().enumerate() {
            windows.push((
                format!("{direction}.policies[{i}].periodSeconds"),
                p["periodSeconds"].as_u64().unwrap(),
            ));
        }
    }
    for (name, seconds) in windows {
        assert!(
            seconds > bound,
            "{name} = {seconds}s is not above a checkpoint cycle plus a rebalance ({bound}s)"
        );
    }
}

#[test]
fn only_the_scraper_reaches_the_ops_port_and_the_pod_mounts_no_api_token() {
    let np = manifest("base/networkpolicy.yaml");
    assert_eq!(np["kind"], "NetworkPolicy");
    assert_eq!(
        np["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"],
        "kafka-bigquery-sink"
    );
    assert_eq!(np["spec"]["policyTypes"], serde_json::json!(["Ingress"]));
    let rules = np["spec"]["ingress"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "one rule: the scraper");
    let rule = &rules[0];
    assert_eq!(
        rule["ports"],
        serde_json::json!([{"port": "metrics", "protocol": "TCP"}])
    );
    let peers = rule["from"].as_array().unwrap();
    assert_eq!(peers.len(), 1);
    // Both selectors in one peer: the scraper's pods in the scraper's namespace, not either.
    assert!(peers[0]["namespaceSelector"].is_object());
    assert!(peers[0]["podSelector"]["matchExpressions"].is_array());

    let d = manifest("base/deployment.yaml");
    assert_eq!(
        d["spec"]["template"]["spec"]["automountServiceAccountToken"],
        false
    );
    let sa = manifest("base/serviceaccount.yaml");
    assert_eq!(sa["automountServiceAccountToken"], false);
}

#[test]
fn no_manifest_names_an_image_by_the_latest_tag() {
    fn walk(dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "yaml" || e == "tpl") {
                let text = std::fs::read_to_string(&path).unwrap();
                for (i, line) in text.lines().enumerate() {
                    if line.contains(":latest") {
                        found.push(format!("{}:{}: {line}", path.display(), i + 1));
                    }
                }
            }
        }
    }
    let mut found = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy"),
        &mut found,
    );
    assert!(found.is_empty(), "{found:#?}");
}
