//! The Pod every benchmark that needs realistic objects generates.

/// Pod number `i`, 5 to 6 KB of JSON, managedFields (four managers, about 1.3 KB) included,
/// as the API server lists it (no kind). Names, namespaces (50), nodes (200) and
/// resourceVersions vary with `i`, so keys and label values are realistic, not identical.
pub fn pod_json(i: usize) -> String {
    let managed: Vec<String> = ["kube-controller-manager", "kubelet", "kubectl-label", "kube-scheduler"]
        .iter()
        .map(|manager| {
            format!(
                r#"{{"manager":"{manager}","operation":"Update","apiVersion":"v1","time":"2026-11-29T08:34:14Z","fieldsType":"FieldsV1","fieldsV1":{{"f:metadata":{{"f:labels":{{".":{{}},"f:app":{{}},"f:pod-template-hash":{{}}}},"f:ownerReferences":{{".":{{}},"k:{{\"uid\":\"1b1f6c0e\"}}":{{}}}}}},"f:status":{{"f:conditions":{{"k:{{\"type\":\"Ready\"}}":{{".":{{}},"f:lastProbeTime":{{}},"f:lastTransitionTime":{{}},"f:status":{{}},"f:type":{{}}}}}},"f:podIP":{{}}}}}}}}"#
            )
        })
        .collect();
    let containers: Vec<String> = (0..2)
        .map(|c| {
            format!(
                r#"{{"name":"app-{c}","image":"registry.example.com/team/app-{c}:v1.2.{i}","ports":[{{"name":"http","containerPort":8080,"protocol":"TCP"}}],"env":[{{"name":"LOG_LEVEL","value":"info"}},{{"name":"POD_NAME","valueFrom":{{"fieldRef":{{"apiVersion":"v1","fieldPath":"metadata.name"}}}}}}],"resources":{{"limits":{{"memory":"256Mi"}},"requests":{{"cpu":"100m","memory":"128Mi"}}}},"volumeMounts":[{{"name":"config","mountPath":"/etc/app"}},{{"name":"kube-api-access-x7k2p","readOnly":true,"mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}}],"livenessProbe":{{"httpGet":{{"path":"/healthz","port":8080,"scheme":"HTTP"}},"timeoutSeconds":1,"periodSeconds":10,"successThreshold":1,"failureThreshold":3}},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File","imagePullPolicy":"IfNotPresent"}}"#
            )
        })
        .collect();
    let statuses: Vec<String> = (0..2)
        .map(|c| {
            format!(
                r#"{{"name":"app-{c}","state":{{"running":{{"startedAt":"2026-11-29T08:34:20Z"}}}},"lastState":{{}},"ready":true,"restartCount":0,"image":"registry.example.com/team/app-{c}:v1.2.{i}","imageID":"registry.example.com/team/app-{c}@sha256:4f1e0c6d9b2a8e7f3c5d1a9b8e7f6c5d4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d","containerID":"containerd://9b2a8e7f3c5d1a9b8e7f6c5d4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d4f1e0c6d","started":true}}"#
            )
        })
        .collect();
    format!(
        r#"{{"metadata":{{"name":"web-7c9f8d6b5-{i:06}","generateName":"web-7c9f8d6b5-","namespace":"team-{ns}","uid":"6b1f6c0e-8f7a-4c1e-9a57-{i:012}","resourceVersion":"{rv}","creationTimestamp":"2026-11-29T08:34:14Z","labels":{{"app":"web","pod-template-hash":"7c9f8d6b5","team":"team-{ns}"}},"annotations":{{"kubectl.kubernetes.io/restartedAt":"2026-11-29T08:30:00Z"}},"ownerReferences":[{{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-7c9f8d6b5","uid":"1b1f6c0e-8f7a-4c1e-9a57-3f1f2d9a0001","controller":true,"blockOwnerDeletion":true}}],"managedFields":[{managed}]}},"spec":{{"volumes":[{{"name":"config","configMap":{{"name":"web-config","defaultMode":420}}}},{{"name":"kube-api-access-x7k2p","projected":{{"sources":[{{"serviceAccountToken":{{"expirationSeconds":3607,"path":"token"}}}},{{"configMap":{{"name":"kube-root-ca.crt","items":[{{"key":"ca.crt","path":"ca.crt"}}]}}}}],"defaultMode":420}}}}],"containers":[{containers}],"restartPolicy":"Always","terminationGracePeriodSeconds":30,"dnsPolicy":"ClusterFirst","serviceAccountName":"default","nodeName":"node-{node}","securityContext":{{}},"schedulerName":"default-scheduler","tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}},{{"key":"node.kubernetes.io/unreachable","operator":"Exists","effect":"NoExecute","tolerationSeconds":300}}],"priority":0,"enableServiceLinks":true,"preemptionPolicy":"PreemptLowerPriority"}},"status":{{"phase":"Running","conditions":[{{"type":"Initialized","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-29T08:34:14Z"}},{{"type":"Ready","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-29T08:34:21Z"}},{{"type":"ContainersReady","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-29T08:34:21Z"}},{{"type":"PodScheduled","status":"True","lastProbeTime":null,"lastTransitionTime":"2026-11-29T08:34:14Z"}}],"hostIP":"10.0.0.{node}","podIP":"10.244.{node}.{ip}","podIPs":[{{"ip":"10.244.{node}.{ip}"}}],"startTime":"2026-11-29T08:34:14Z","containerStatuses":[{statuses}],"qosClass":"Burstable"}}}}"#,
        managed = managed.join(","),
        containers = containers.join(","),
        statuses = statuses.join(","),
        ns = i % 50,
        node = i % 200,
        ip = i % 250,
        rv = 1000 + i,
    )
}
