//! label-audit: flags Deployments and Pods that lack required labels.
//!
//! For each object missing one of the labels, it logs a warning and records a Warning Event
//! (`MissingLabels`) on the object. It reads typed metadata only: no JSON parsing.
//! Settings: `{"required_labels": ["app.kubernetes.io/name"]}` (the default).

use kubeplug_sdk::prelude::*;

#[derive(serde::Deserialize)]
struct Config {
    #[serde(default = "default_labels")]
    required_labels: Vec<String>,
}

fn default_labels() -> Vec<String> {
    vec!["app.kubernetes.io/name".to_owned()]
}

struct LabelAudit {
    required: Vec<String>,
}

fn deployments() -> Gvk {
    gvk("apps", "v1", "Deployment")
}

fn pods() -> Gvk {
    gvk("", "v1", "Pod")
}

impl Plugin for LabelAudit {
    fn init(settings: Settings) -> Result<Self, InitError> {
        let config: Config = settings.parse()?;
        if config.required_labels.is_empty() {
            return Err("settings: required_labels is empty; nothing to audit".into());
        }
        Ok(Self {
            required: config.required_labels,
        })
    }

    fn describe(&self) -> Description {
        let mut description = Description::events(
            "label-audit",
            "0.1.0",
            vec![
                Subscription::to(deployments()).meta(MetaFields::LABELS),
                Subscription::to(pods()).meta(MetaFields::LABELS),
            ],
        );
        description.writes = [deployments(), pods()]
            .into_iter()
            .map(|resource_type| WriteRequest {
                resource_type,
                verbs: vec![WriteVerb::RecordEvent],
            })
            .collect();
        description
    }

    fn on_event(&mut self, event: &Event) -> Result<(), String> {
        if event.change == EventType::Deleted {
            return Ok(());
        }
        let missing: Vec<&str> = self
            .required
            .iter()
            .filter(|label| event.label(label).is_none())
            .map(String::as_str)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let resource_type = if event.subscription == 0 {
            deployments()
        } else {
            pods()
        };
        let key = event.key();
        let missing = missing.join(", ");
        log::warn(
            "object lacks required labels",
            &[
                ("kind", &resource_type.kind),
                ("key", &key),
                ("missing", &missing),
            ],
        );
        let regarding = ObjectRef {
            resource_type,
            namespace: event.meta.namespace.clone(),
            name: event.meta.name.clone(),
        };
        let note = format!("missing required labels: {missing}");
        match cluster::record_event(
            &regarding,
            cluster::EventSeverity::Warning,
            "MissingLabels",
            &note,
        ) {
            Ok(()) => Ok(()),
            // Without the grant the audit still logs; the operator sees why no Event appears.
            Err(Error::NotPermitted(why)) => {
                log::warn("cannot record an Event", &[("why", &why)]);
                Ok(())
            }
            Err(error) => Err(format!("recording an Event on {key}: {error:?}")),
        }
    }
}

export_plugin!(LabelAudit);
