//! Tests of the `Table` form: each built-in type's columns and cells.

use super::*;

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn cells(printer: &Printer, object: Value, now: &str) -> Vec<Value> {
    (printer.cells)(&object, at(now))
}

#[test]
fn durations_print_in_the_units_kubernetes_uses() {
    for (seconds, printed) in [
        (-2, "<invalid>"),
        (-1, "0s"),
        (0, "0s"),
        (119, "119s"),
        (120, "2m"),
        (330, "5m30s"),
        (600, "10m"),
        (179 * 60 + 59, "179m"),
        (3 * 3600, "3h"),
        (2 * 3600 + 15 * 60 + 10, "135m"),
        (5 * 3600 + 15 * 60 + 10, "5h15m"),
        (8 * 3600, "8h"),
        (47 * 3600 + 3599, "47h"),
        (48 * 3600, "2d"),
        (3 * 86400 + 5 * 3600, "3d5h"),
        (8 * 86400, "8d"),
        (729 * 86400, "729d"),
        (730 * 86400, "2y"),
        (3 * 365 * 86400 + 10 * 86400, "3y10d"),
        (9 * 365 * 86400 + 10 * 86400, "9y"),
    ] {
        assert_eq!(human_duration(seconds), printed, "{seconds} s");
    }
}

#[test]
fn a_pod_prints_its_readiness_status_restarts_and_wide_columns() {
    let pod = json!({
        "metadata": {"name": "web", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "a"}, {"name": "b"}],
                 "readinessGates": [{"conditionType": "example.com/gate"}]},
        "status": {"phase": "Running", "podIPs": [{"ip": "10.1.2.3"}],
                   "conditions": [{"type": "example.com/gate", "status": "True"}],
                   "containerStatuses": [
            {"name": "a", "ready": true, "restartCount": 3, "state": {"running": {}},
             "lastState": {"terminated": {"finishedAt": "2026-01-01T00:50:00Z"}}},
            {"name": "b", "ready": true, "restartCount": 1, "state": {"running": {}}}]}
    });
    assert_eq!(
        cells(&POD, pod, "2026-01-01T01:00:00Z"),
        json!([
            "web",
            "2/2",
            "Running",
            "4 (10m ago)",
            "60m",
            "10.1.2.3",
            "node-a",
            "<none>",
            "1/1"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
}

fn status_of(spec: Value, status: Value, deleted: bool) -> String {
    let mut pod = json!({"metadata": {"name": "p"}, "spec": spec, "status": status});
    if deleted {
        pod["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    let cells = cells(&POD, pod, "2026-01-01T00:00:00Z");
    format!(
        "{} {}",
        cells[1].as_str().unwrap(),
        cells[2].as_str().unwrap()
    )
}

#[test]
fn a_pods_status_follows_its_init_containers_then_its_containers() {
    let two = json!({"containers": [{"name": "a"}, {"name": "b"}]});
    let running = json!({"ready": true, "state": {"running": {}}});
    let with_init = json!({"initContainers": [{"name": "i"}],
                           "containers": [{"name": "a"}]});
    let cases = [
        (two.clone(), json!({}), false, "0/2 Pending"),
        (
            two.clone(),
            json!({"phase": "Running", "containerStatuses": [
            {"state": {"waiting": {"reason": "CrashLoopBackOff"}}}, running]}),
            false,
            "1/2 CrashLoopBackOff",
        ),
        (
            two.clone(),
            json!({"containerStatuses": [
            {"state": {"terminated": {"exitCode": 137}}},
            {"state": {"terminated": {"exitCode": 0, "signal": 9}}}]}),
            false,
            "0/2 ExitCode:137",
        ),
        (
            two.clone(),
            json!({"containerStatuses": [
            running, {"state": {"terminated": {"exitCode": 0, "signal": 9}}}]}),
            false,
            "1/2 Signal:9",
        ),
        (
            two.clone(),
            json!({"phase": "Running", "containerStatuses": [running, running]}),
            true,
            "2/2 Terminating",
        ),
        (
            two.clone(),
            json!({"phase": "Succeeded", "containerStatuses": [
            {"state": {"terminated": {"reason": "Completed"}}}]}),
            true,
            "0/2 Completed",
        ),
        (
            two.clone(),
            json!({"phase": "Unknown", "reason": "NodeLost"}),
            true,
            "0/2 Unknown",
        ),
        (
            two.clone(),
            json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": "True"}], "containerStatuses": [
            running, {"state": {"terminated": {"reason": "Completed"}}}]}),
            false,
            "1/2 Running",
        ),
        (
            two.clone(),
            json!({"phase": "Running", "containerStatuses": [
            running, {"state": {"terminated": {"reason": "Completed"}}}]}),
            false,
            "1/2 NotReady",
        ),
        (
            two.clone(),
            json!({"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
            false,
            "0/2 SchedulingGated",
        ),
        (
            with_init.clone(),
            json!({"initContainerStatuses": [{"state": {"running": {}}}]}),
            false,
            "0/1 Init:0/1",
        ),
        (
            with_init.clone(),
            json!({"initContainerStatuses": [
            {"state": {"waiting": {"reason": "ImagePullBackOff"}}}]}),
            false,
            "0/1 Init:ImagePullBackOff",
        ),
        (
            with_init.clone(),
            json!({"initContainerStatuses": [
            {"state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]}),
            false,
            "0/1 Init:Error",
        ),
        (
            with_init.clone(),
            json!({"initContainerStatuses": [
            {"state": {"terminated": {"exitCode": 2}}}]}),
            false,
            "0/1 Init:ExitCode:2",
        ),
        (
            with_init,
            json!({"phase": "Running", "initContainerStatuses": [
            {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}],
            "containerStatuses": [running]}),
            false,
            "1/1 Running",
        ),
        (
            json!({"initContainers": [{"name": "side", "restartPolicy": "Always"}],
                "containers": [{"name": "a"}, {"name": "b"}]}),
            json!({"phase": "Running",
                "initContainerStatuses": [{"name": "side", "started": true, "ready": true,
                                           "state": {"running": {}}}],
                "containerStatuses": [running,
                    {"state": {"waiting": {"reason": "ContainerCreating"}}}]}),
            false,
            "2/3 ContainerCreating",
        ),
    ];
    for (spec, status, deleted, printed) in cases {
        assert_eq!(
            status_of(spec.clone(), status.clone(), deleted),
            printed,
            "{spec} {status}"
        );
    }
}

#[test]
fn restart_counts_a_writer_chose_to_overflow_saturate() {
    let huge = json!({"restartCount": i64::MAX, "state": {"running": {}}});
    let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{}, {}]},
                     "status": {"containerStatuses": [huge, huge]}});
    let cells = cells(&POD, pod, "2026-01-01T00:00:00Z");
    assert_eq!(cells[3], i64::MAX.to_string());
}

#[test]
fn an_ended_pods_row_carries_a_completed_condition() {
    let ended = |phase: &str| json!({"metadata": {"name": "p"}, "status": {"phase": phase}});
    let row = POD.row(
        &Bytes::from(ended("Failed").to_string()),
        IncludeObject::None,
        at("2026-01-01T00:00:00Z"),
    );
    assert_eq!(row["conditions"][0]["reason"], "Failed", "{row}");
    assert_eq!(row.get("object"), None, "{row}");
    assert!(pod_row_conditions(&ended("Running")).is_none());
}

#[test]
fn a_deployment_prints_replicas_containers_and_its_selector() {
    let deployment = json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}, "matchExpressions": [
                     {"key": "tier", "operator": "In", "values": ["b", "a"]},
                     {"key": "canary", "operator": "DoesNotExist"}]},
                 "template": {"spec": {"containers": [
                     {"name": "nginx", "image": "nginx:1.27"},
                     {"name": "side", "image": "busybox"}]}}},
        "status": {"readyReplicas": 1, "updatedReplicas": 1}
    });
    assert_eq!(
        cells(&DEPLOYMENT, deployment, "2026-01-01T00:00:00Z"),
        json!([
            "web",
            "1/1",
            1,
            0,
            "<unknown>",
            "nginx,side",
            "nginx:1.27,busybox",
            "app=web,!canary,tier in (a,b)"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
}

#[test]
fn namespaces_config_maps_and_secrets_count_what_they_hold() {
    let now = "2026-01-01T00:00:00Z";
    let namespace = json!({"metadata": {"name": "team"}});
    assert_eq!(cells(&NAMESPACE, namespace, now)[1], "Active");
    let config_map = json!({"metadata": {"name": "c"}, "data": {"a": "1", "b": "2"},
                            "binaryData": {"c": "AA=="}});
    assert_eq!(cells(&CONFIG_MAP, config_map, now)[1], 3);
    let secret = json!({"metadata": {"name": "s"}, "data": {"a": "AA=="},
                        "stringData": {"a": "x", "b": "y"}});
    let cells = cells(&SECRET, secret, now);
    assert_eq!((&cells[1], &cells[2]), (&json!("Opaque"), &json!(2)));
}

#[test]
fn events_print_when_who_and_what_in_both_groups() {
    let now = "2026-01-01T06:00:00Z";
    let recorded = json!({
        "metadata": {"name": "web.1"}, "type": "Warning", "reason": "MissingLabels",
        "regarding": {"kind": "Deployment", "name": "web", "fieldPath": "spec"},
        "note": " missing labels\n", "reportingController": "kubeplug",
        "reportingInstance": "host-1", "eventTime": "2026-01-01T04:59:59.500000Z",
    });
    assert_eq!(
        cells(&EVENT, recorded, now),
        json!([
            "60m",
            "Warning",
            "MissingLabels",
            "deployment/web",
            "spec",
            "kubeplug, host-1",
            "missing labels",
            "60m",
            1,
            "web.1"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let core = json!({
        "metadata": {"name": "n.2"}, "type": "Normal", "reason": "Scaled",
        "involvedObject": {"kind": "Namespace"}, "message": "m",
        "source": {"component": "controller"},
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T05:00:00Z",
        "count": 4, "series": {"count": 9, "lastObservedTime": "2026-01-01T05:59:00.000000Z"},
    });
    let cells = cells(&CORE_EVENT, core, now);
    assert_eq!(
        (&cells[0], &cells[3], &cells[5], &cells[7], &cells[8]),
        (
            &json!("60s"),
            &json!("namespace"),
            &json!("controller"),
            &json!("6h"),
            &json!(9)
        )
    );
}

#[test]
fn include_object_takes_the_three_values_and_names_a_wrong_one() {
    assert_eq!(IncludeObject::parse(None), Ok(IncludeObject::Metadata));
    assert_eq!(
        IncludeObject::parse(Some("Object")),
        Ok(IncludeObject::Object)
    );
    assert_eq!(IncludeObject::parse(Some("None")), Ok(IncludeObject::None));
    let error = IncludeObject::parse(Some("Everything"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("\"Everything\""), "{error}");
}
