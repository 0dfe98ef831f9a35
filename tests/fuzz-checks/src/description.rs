//! Checks for the validation of what a plugin's `describe()` returns: the plugin wrote it, and
//! the host builds informers, indexes and grants from it.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::input::Input;
use kubeplug_informer::selector::{FieldSelector, LabelSelector};
use kubeplug_json::path::FieldPath;
use kubeplug_runtime::description::{
    Delivery, Description, DescriptionBounds, KeyMapping, MAX_INDEXES, MAX_PROJECTIONS,
    MAX_RECONCILE_WORKERS, MAX_RESOURCES, MAX_SUBSCRIPTIONS, MAX_TEXT, MetaFields, Projection,
    RawDescription, RawIndex, RawIndexSpec, RawSubscription, Read, SubscriptionSpec,
};
use kubeplug_runtime::{Gvk, WriteVerb};

/// Strings a description is likely to hold, valid and not: most picks come from here, so
/// that the fuzzer reaches the checks past the name and the counts.
const WORDS: &[&str] = &[
    "",
    "v1",
    "apps",
    "Pod",
    "ConfigMap",
    "Secret",
    "probe",
    "label-audit",
    "Label-Audit",
    "-probe",
    "namespace",
    "by-app",
    "app",
    "app=web",
    "app in (web,db),!legacy",
    "app=",
    "=web",
    "metadata.name=x",
    "metadata.namespace!=kube-system",
    "spec.replicas=3",
    "spec.volumes[*].configMap.name",
    "spec..name",
    "[*]",
    "metadata.labels",
];

impl Input<'_> {
    /// A count up to `limit + 2`, so that every bound is crossed now and then.
    fn count(&mut self, limit: usize) -> usize {
        usize::from(self.byte()) % (limit + 3)
    }

    fn gvk(&mut self) -> Gvk {
        Gvk {
            group: self.text(),
            version: self.text(),
            kind: self.text(),
        }
    }

    fn subscription(&mut self) -> RawSubscription {
        let resource = self.gvk();
        let namespace = self.optional_text();
        let label_selector = self.optional_text();
        let field_selector = self.optional_text();
        let spec = SubscriptionSpec {
            resource,
            namespace,
            labels: LabelSelector::everything(),
            fields: FieldSelector::everything(),
            resync_period: (self.byte() % 2 == 1)
                .then(|| Duration::from_millis(u64::from(self.byte()))),
            meta_fields: self.meta_fields(),
            wants_object_json: self.byte() % 2 == 1,
            wants_old_json: self.byte() % 2 == 1,
            enqueue: match self.byte() % 3 {
                0 => KeyMapping::OwnKey,
                1 => KeyMapping::Owner(self.gvk()),
                _ => KeyMapping::Computed,
            },
            // Paths the parser refuses never reach a description: `from_guest` refuses them.
            projections: (0..self.count(MAX_PROJECTIONS))
                .filter_map(|_| {
                    let name = self.text();
                    let path = FieldPath::parse(&self.text()).ok()?;
                    Some(Projection { name, path })
                })
                .collect::<Vec<_>>()
                .into(),
        };
        RawSubscription {
            spec,
            label_selector,
            field_selector,
        }
    }

    fn meta_fields(&mut self) -> MetaFields {
        let bits = self.byte();
        MetaFields {
            uid: bits & 1 != 0,
            labels: bits & 2 != 0,
            owner_references: bits & 4 != 0,
            deletion_timestamp: bits & 8 != 0,
        }
    }

    fn index(&mut self) -> RawIndex {
        RawIndex {
            name: self.text(),
            resource: self.gvk(),
            spec: match self.byte() % 3 {
                0 => RawIndexSpec::Label(self.text()),
                1 => RawIndexSpec::OwnerUid,
                _ => RawIndexSpec::Path(self.text()),
            },
        }
    }

    fn verb(&mut self) -> WriteVerb {
        [
            WriteVerb::Apply,
            WriteVerb::Patch,
            WriteVerb::PatchStatus,
            WriteVerb::Create,
            WriteVerb::Delete,
            WriteVerb::RecordEvent,
        ][usize::from(self.byte()) % 6]
    }

    fn description(&mut self) -> RawDescription {
        let name = self.text();
        let version = self.text();
        let subscriptions = (0..self.count(MAX_SUBSCRIPTIONS))
            .map(|_| self.subscription())
            .collect();
        let delivery = match self.byte() % 2 {
            0 => Delivery::Events,
            // Up to a few past the bound, so that both sides of it are tried.
            _ => Delivery::Reconcile {
                workers: usize::from(self.byte() % 20),
            },
        };
        let indexes = (0..self.count(MAX_INDEXES)).map(|_| self.index()).collect();
        let reads = (0..self.count(MAX_RESOURCES))
            .map(|_| Read {
                resource: self.gvk(),
                wants_object_json: self.byte().is_multiple_of(2),
            })
            .collect();
        let writes = (0..self.count(MAX_RESOURCES))
            .map(|_| {
                let resource = self.gvk();
                let verbs = (0..self.byte() % 4).map(|_| self.verb()).collect();
                (resource, verbs)
            })
            .collect();
        RawDescription {
            name,
            version,
            subscriptions,
            delivery,
            indexes,
            reads,
            writes,
        }
    }
}

/// A description built from the bytes (structure-aware: counts, then each field, strings
/// mostly from a list of likely ones).
///
/// Properties: checking never panics; it accepts a description exactly when the reference
/// below finds nothing wrong; an accepted one holds the contract of `Description`
/// (normalised: no empty namespace, selectors parsed, at least one worker, verbs merged) and keeps
/// the order of subscriptions; a refused one names, first thing in its message, a field the
/// reference found wrong.
pub fn plugin_description(data: &[u8]) {
    let raw = Input::new(data, WORDS, MAX_TEXT).description();
    let problems = reference_problems(&raw);
    match Description::check(raw.clone(), &DescriptionBounds::default()) {
        Ok(description) => {
            assert!(problems.is_empty(), "accepted, with problems {problems:?}");
            assert_eq!(description.name, raw.name);
            assert_eq!(
                description.subscribed().collect::<Vec<_>>(),
                raw.subscriptions
                    .iter()
                    .map(|s| &s.spec.resource)
                    .collect::<Vec<_>>()
            );
            for (s, sent) in description.subscriptions.iter().zip(&raw.subscriptions) {
                assert_ne!(
                    s.namespace.as_deref(),
                    Some(""),
                    "empty namespaces are dropped"
                );
                let labels = sent.label_selector.as_deref().unwrap_or_default();
                let fields = sent.field_selector.as_deref().unwrap_or_default();
                assert_eq!(s.labels, LabelSelector::parse(labels).unwrap());
                assert_eq!(s.fields, FieldSelector::parse(fields).unwrap());
            }
            if let Delivery::Reconcile { workers } = description.delivery {
                assert!(workers >= 1);
            }
            assert_eq!(description.indexes.len(), raw.indexes.len());
            for ((resource, verbs), (raw_resource, raw_verbs)) in
                description.writes.iter().zip(&raw.writes)
            {
                assert_eq!(resource, raw_resource);
                assert_eq!(verbs, &raw_verbs.iter().copied().collect::<BTreeSet<_>>());
            }
        }
        Err(error) => {
            let message = error.to_string();
            assert!(
                problems.iter().any(|field| {
                    message
                        .strip_prefix(field.as_str())
                        .is_some_and(|rest| rest.starts_with([':', ' ']))
                }),
                "{message:?} names none of the fields wrong: {problems:?}"
            );
        }
    }
}

/// Every field of `raw` that breaks the rules, as the error would name it. Written from the
/// WIT documentation and the bounds, not from the checker's code.
fn reference_problems(raw: &RawDescription) -> Vec<String> {
    let mut problems = Vec::new();
    let mut text = |field: String, value: &str| {
        if value.len() > MAX_TEXT {
            problems.push(field);
        }
    };
    // DNS-1123 labels and subdomains, and kinds as identifiers (the Kubernetes API
    // conventions); a type's parts and a namespace reach request paths.
    let dns_label = |text: &str| {
        !text.is_empty()
            && text.len() <= 63
            && text
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !text.starts_with('-')
            && !text.ends_with('-')
    };
    let dns_subdomain = |text: &str| text.len() <= 253 && text.split('.').all(dns_label);
    let identifier = |text: &str| {
        (1..=63).contains(&text.len())
            && text.starts_with(|c: char| c.is_ascii_alphabetic())
            && text.chars().all(|c| c.is_ascii_alphanumeric())
    };
    let name_valid = dns_label(&raw.name);
    let mut named_wrong = Vec::new();
    // A version is shown wherever the plugin is: short, and what version texts use.
    let version_valid = (1..=128).contains(&raw.version.len())
        && raw
            .version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_'));
    if !version_valid {
        named_wrong.push("version".into());
    }
    // The field, when the type's parts break their rules.
    let gvk = |text: &mut dyn FnMut(String, &str), field: String, g: &Gvk| {
        text(format!("{field}.group"), &g.group);
        text(format!("{field}.version"), &g.version);
        text(format!("{field}.kind"), &g.kind);
        let group_valid = g.group.is_empty() || dns_subdomain(&g.group);
        (!(group_valid && dns_label(&g.version) && identifier(&g.kind))).then_some(field)
    };
    for (i, sent) in raw.subscriptions.iter().enumerate() {
        let s = &sent.spec;
        let at = format!("subscriptions[{i}]");
        named_wrong.extend(gvk(&mut text, format!("{at}.resource-type"), &s.resource));
        if let KeyMapping::Owner(owner) = &s.enqueue {
            named_wrong.extend(gvk(&mut text, format!("{at}.enqueue.owner"), owner));
        }
        for (field, value) in [
            ("namespace", &s.namespace),
            ("label-selector", &sent.label_selector),
            ("field-selector", &sent.field_selector),
        ] {
            if let Some(value) = value {
                text(format!("{at}.{field}"), value);
            }
        }
        if s.namespace
            .as_deref()
            .is_some_and(|ns| !ns.is_empty() && !dns_label(ns))
        {
            named_wrong.push(format!("{at}.namespace"));
        }
        if s.projections.len() > MAX_PROJECTIONS {
            named_wrong.push(format!("{at}.projections"));
        }
        let mut projection_names = BTreeSet::new();
        for (j, p) in s.projections.iter().enumerate() {
            let name_valid = (1..=63).contains(&p.name.len())
                && p.name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
            if !name_valid || !projection_names.insert(&p.name) {
                named_wrong.push(format!("{at}.projections[{j}].name"));
            }
            if p.path.as_str().len() > 512 {
                named_wrong.push(format!("{at}.projections[{j}].path"));
            }
        }
    }
    for (i, r) in raw.reads.iter().enumerate() {
        named_wrong.extend(gvk(
            &mut text,
            format!("reads[{i}].resource-type"),
            &r.resource,
        ));
    }
    for (i, (r, _)) in raw.writes.iter().enumerate() {
        named_wrong.extend(gvk(&mut text, format!("writes[{i}].resource-type"), r));
    }
    for (i, index) in raw.indexes.iter().enumerate() {
        text(format!("indexes[{i}].name"), &index.name);
        named_wrong.extend(gvk(
            &mut text,
            format!("indexes[{i}].resource-type"),
            &index.resource,
        ));
        if let RawIndexSpec::Label(value) | RawIndexSpec::Path(value) = &index.spec {
            text(format!("indexes[{i}].spec"), value);
        }
    }
    problems.extend(named_wrong);
    if let Delivery::Reconcile { workers } = raw.delivery
        && workers > MAX_RECONCILE_WORKERS
    {
        problems.push("delivery".into());
    }
    if !name_valid {
        problems.push("name".into());
    }
    if raw.subscriptions.is_empty() || raw.subscriptions.len() > MAX_SUBSCRIPTIONS {
        problems.push("subscriptions".into());
    }
    for (field, count, limit) in [
        ("indexes", raw.indexes.len(), MAX_INDEXES),
        ("reads", raw.reads.len(), MAX_RESOURCES),
        ("writes", raw.writes.len(), MAX_RESOURCES),
    ] {
        if count > limit {
            problems.push(field.into());
        }
    }
    for (i, s) in raw.subscriptions.iter().enumerate() {
        if s.label_selector
            .as_deref()
            .is_some_and(|t| LabelSelector::parse(t).is_err())
        {
            problems.push(format!("subscriptions[{i}].label-selector"));
        }
        if s.field_selector
            .as_deref()
            .is_some_and(|t| FieldSelector::parse(t).is_err())
        {
            problems.push(format!("subscriptions[{i}].field-selector"));
        }
    }
    let mut names = BTreeSet::from(["namespace"]);
    for (i, index) in raw.indexes.iter().enumerate() {
        let known = raw
            .subscriptions
            .iter()
            .any(|s| s.spec.resource == index.resource)
            || raw.reads.iter().any(|r| r.resource == index.resource);
        let bad_path = matches!(&index.spec, RawIndexSpec::Path(p) if FieldPath::parse(p).is_err());
        if !known || !names.insert(&index.name) || bad_path {
            problems.push(format!("indexes[{i}]"));
        }
    }
    problems
}
