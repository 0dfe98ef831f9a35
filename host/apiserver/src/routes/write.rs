//! Writes to a resource: create (with `generateName`), update, patch (merge, JSON, and the
//! subset of server-side apply served) and delete, of an object or its `status`.

use bytes::Bytes;
use http::{Response, StatusCode};
use kubeplug_informer::source::Status;
use kubeplug_memory::creation_timestamp;
use kubeplug_memory::status::Endpoint;
use kubeplug_policy::names::is_dns_subdomain;
use serde_json::{Value, json};

use super::{Body, Ctx, error, full, status_response, with_kind};
use crate::patch::{self, PatchError};

impl Ctx<'_> {
    /// The body as an object with the path's name and namespace checked and filled in.
    fn object_from(&self, body: &[u8], name_from_path: bool) -> Result<Value, Response<Body>> {
        let mut object: Value = serde_json::from_slice(body)
            .map_err(|e| error(400, format!("the request body is not JSON: {e}")))?;
        if !object.is_object() {
            return Err(error(400, "the request body is not a JSON object"));
        }
        if !object["metadata"].is_object() {
            object["metadata"] = json!({});
        }
        let metadata = &mut object["metadata"];
        if let Some(ns) = self.namespace() {
            match metadata.get("namespace").and_then(Value::as_str) {
                Some(given) if given != ns => {
                    return Err(error(
                        400,
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => metadata["namespace"] = json!(ns),
            }
        }
        if name_from_path {
            let name = self.path.name.clone().unwrap_or_default();
            match metadata.get("name").and_then(Value::as_str) {
                Some(given) if given != name => {
                    return Err(error(
                        400,
                        "the name of the object does not match the name on the URL",
                    ));
                }
                _ => metadata["name"] = json!(name),
            }
        }
        if let Some(map) = object.as_object_mut() {
            map.remove("kind");
            map.remove("apiVersion");
        }
        Ok(object)
    }

    fn invalid_name(&self, name: &str, field: &str) -> Response<Body> {
        let message = format!("Invalid value: \"{name}\": {}", patch::SUBDOMAIN_MESSAGE);
        status_response(
            &Status::new(
                422,
                "Invalid",
                format!(
                    "{} \"{name}\" is invalid: {field}: {message}",
                    self.resource.kind
                ),
            ),
            Some(json!({"name": name, "kind": self.resource.kind,
                "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field}]})),
        )
    }

    pub(super) fn create(&self, body: &[u8]) -> Response<Body> {
        let mut object = match self.object_from(body, false) {
            Ok(object) => self.view.store(object),
            Err(response) => return response,
        };
        let metadata = &mut object["metadata"];
        let name = match metadata.get("name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => name.to_owned(),
            _ => match metadata.get("generateName").and_then(Value::as_str) {
                Some(prefix) => {
                    if !is_dns_subdomain(&format!("{prefix}a")) {
                        return self.invalid_name(prefix, "metadata.generateName");
                    }
                    format!("{prefix}{}", generated_suffix())
                }
                None => {
                    return error(
                        422,
                        format!(
                            "{} \"\" is invalid: metadata.name: Required value: name or generateName is required",
                            self.resource.kind
                        ),
                    );
                }
            },
        };
        if !is_dns_subdomain(&name) {
            return self.invalid_name(&name, "metadata.name");
        }
        metadata["name"] = json!(name);
        if let Some(map) = metadata.as_object_mut() {
            map.remove("resourceVersion");
            map.remove("uid");
        }
        metadata["creationTimestamp"] = json!(creation_timestamp());
        let object = Endpoint::Object.stored(None, object);
        match self.shared.memory.create(self.storage, &object.to_string()) {
            Ok(written) => full(
                StatusCode::CREATED,
                with_kind(self.resource, &self.view.show(written.json)),
            ),
            Err(status) if status.reason == "AlreadyExists" => status_response(
                &Status::new(
                    409,
                    "AlreadyExists",
                    format!("{} \"{name}\" already exists", self.resource.plural),
                ),
                Some(json!({"name": name, "kind": self.resource.plural})),
            ),
            Err(status) => status_response(&status, None),
        }
    }

    /// Whether the request is for the object or its `status`.
    fn endpoint(&self) -> Endpoint {
        if self.path.status {
            Endpoint::Status
        } else {
            Endpoint::Object
        }
    }

    fn current(&self) -> Option<Value> {
        let json = self.shared.memory.get(self.storage, &self.key())?;
        serde_json::from_slice(&json).ok()
    }

    /// Stores `object` as the new state, with the current version as precondition unless
    /// `object` carries its own.
    fn store(&self, mut object: Value, current: &Value) -> Result<Bytes, Response<Body>> {
        if object["metadata"].get("resourceVersion").is_none() {
            object["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"].clone();
        }
        for keep in ["uid", "creationTimestamp"] {
            if let Some(value) = current["metadata"].get(keep) {
                object["metadata"][keep] = value.clone();
            }
        }
        match self.shared.memory.update(self.storage, &object.to_string()) {
            Ok(written) => Ok(written.json),
            Err(status) if status.reason == "Conflict" => {
                let name = self.path.name.clone().unwrap_or_default();
                Err(status_response(
                    &Status::new(
                        409,
                        "Conflict",
                        format!(
                            "Operation cannot be fulfilled on {}.{} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                            self.resource.plural,
                            if self.resource.group.is_empty() { "" } else { &self.resource.group }
                        ).replace(". \"", " \""),
                    ),
                    Some(json!({"name": name, "kind": self.resource.plural})),
                ))
            }
            Err(status) if status.code == 404 => Err(self.not_found()),
            Err(status) => Err(status_response(&status, None)),
        }
    }

    pub(super) fn update(&self, body: &[u8]) -> Response<Body> {
        let object = match self.object_from(body, true) {
            Ok(object) => object,
            Err(response) => return response,
        };
        let Some(current) = self.current() else {
            return self.not_found();
        };
        let object = self.endpoint().stored(Some(&current), object);
        match self.store(object, &current) {
            Ok(json) => full(
                StatusCode::OK,
                with_kind(self.resource, &self.view.show(json)),
            ),
            Err(response) => response,
        }
    }

    pub(super) fn patch(&self, content_type: &str, body: &[u8]) -> Response<Body> {
        let media = content_type.split(';').next().unwrap_or_default().trim();
        // Strategic merge patches need every built-in type's merge keys: applied as a merge
        // patch, one would replace a Deployment's containers with only the changed ones.
        if media == "application/strategic-merge-patch+json" {
            return error(
                415,
                "strategic merge patches are not supported by kubeplug's local API server (kubectl edit, \
                 client-side kubectl apply and kubectl patch without --type send them): use \
                 kubectl apply --server-side, or kubectl patch --type merge or --type json",
            );
        }
        let patch: Value = match serde_json::from_slice(body) {
            Ok(patch) => patch,
            Err(e) => {
                return error(
                    415,
                    format!(
                        "this server accepts JSON patch bodies only (YAML is not supported): {e}"
                    ),
                );
            }
        };
        let apply = media == "application/apply-patch+yaml";
        // Read-modify-write with the read version as precondition; retried on a conflict.
        for _ in 0..10 {
            let current = self.current();
            let response = match (current, apply) {
                (None, false) => return self.not_found(),
                (None, true) => return self.apply_create(&patch),
                (Some(current), _) => {
                    // The patch applies to the whole object, whichever the endpoint; what the
                    // endpoint may not change is then taken back from the current object.
                    let mut next = current.clone();
                    let patched = match media {
                        "application/merge-patch+json" => {
                            json_patch::merge(&mut next, &patch);
                            Ok(())
                        }
                        "application/json-patch+json" => patch::json_patch(&mut next, &patch),
                        "application/apply-patch+yaml" => {
                            json_patch::merge(&mut next, &patch);
                            self.record_apply(&mut next, &patch)
                        }
                        other => {
                            return error(
                                415,
                                format!(
                                    "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {other:?})"
                                ),
                            );
                        }
                    };
                    if let Err(failed) = patched {
                        return error(422, failed.message());
                    }
                    next["metadata"]["name"] = json!(self.path.name.clone().unwrap_or_default());
                    if let Some(ns) = self.namespace() {
                        next["metadata"]["namespace"] = json!(ns);
                    }
                    next["metadata"]["resourceVersion"] =
                        current["metadata"]["resourceVersion"].clone();
                    if let Some(map) = next.as_object_mut() {
                        map.remove("kind");
                        map.remove("apiVersion");
                    }
                    let next = self.endpoint().stored(Some(&current), next);
                    self.store(next, &current)
                }
            };
            match response {
                Ok(json) => {
                    return full(
                        StatusCode::OK,
                        with_kind(self.resource, &self.view.show(json)),
                    );
                }
                Err(response) if response.status() == StatusCode::CONFLICT => continue,
                Err(response) => return response,
            }
        }
        error(409, "too many concurrent writes")
    }

    /// Adds or replaces the `Apply` managedFields entry of the request's field manager.
    fn record_apply(&self, object: &mut Value, applied: &Value) -> Result<(), PatchError> {
        let manager = self
            .query
            .get("fieldManager")
            .filter(|m| !m.is_empty())
            .ok_or(PatchError::NoFieldManager)?;
        let entry = json!({"manager": manager, "operation": "Apply", "apiVersion": self.resource.api_version(),
            "time": creation_timestamp(), "fieldsType": "FieldsV1", "fieldsV1": patch::fields_v1(applied)});
        let fields = &mut object["metadata"]["managedFields"];
        if !fields.is_array() {
            *fields = json!([]);
        }
        let list = fields.as_array_mut().expect("made an array above");
        list.retain(|e| !(e["manager"] == json!(manager) && e["operation"] == json!("Apply")));
        list.push(entry);
        Ok(())
    }

    fn apply_create(&self, applied: &Value) -> Response<Body> {
        if self.path.status {
            return self.not_found();
        }
        let mut object = match self.object_from(applied.to_string().as_bytes(), true) {
            Ok(object) => object,
            Err(response) => return response,
        };
        let name = self.path.name.clone().unwrap_or_default();
        if !is_dns_subdomain(&name) {
            return self.invalid_name(&name, "metadata.name");
        }
        if let Err(failed) = self.record_apply(&mut object, applied) {
            return error(422, failed.message());
        }
        object["metadata"]["creationTimestamp"] = json!(creation_timestamp());
        let object = Endpoint::Object.stored(None, object);
        match self.shared.memory.create(self.storage, &object.to_string()) {
            Ok(written) => full(
                StatusCode::CREATED,
                with_kind(self.resource, &self.view.show(written.json)),
            ),
            Err(status) => status_response(&status, None),
        }
    }

    pub(super) fn delete(&self) -> Response<Body> {
        match self.shared.memory.delete(self.storage, &self.key()) {
            Ok(written) => full(
                StatusCode::OK,
                with_kind(self.resource, &self.view.show(written.json)),
            ),
            Err(_) => self.not_found(),
        }
    }
}

/// A `generateName` suffix as kube-apiserver makes one: five characters drawn at random from
/// its alphabet (no vowels, so no words; no `0`, `1` or `3`, which read as letters).
fn generated_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| char::from(ALPHABET[rand::random_range(0..ALPHABET.len())]))
        .collect()
}
