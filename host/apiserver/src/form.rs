//! The form of an answer's objects, from the request's `Accept`: whole objects, or
//! `meta.k8s.io/v1` `PartialObjectMetadata` (metadata only), which client-go's metadata
//! informers, controller-runtime's `OnlyMetadata` and kube's `metadata_watcher` ask for:
//! `application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1` for lists,
//! `...;as=PartialObjectMetadata;...` for gets and watches; or, for the types with a
//! [printer](crate::table), kubectl's `meta.k8s.io/v1` `Table`. The server answers JSON only,
//! with `Content-Type: application/json` in every form, as kube-apiserver v1.32 does.

use bytes::Bytes;
use kubeplug_memory::form::{LIST_KIND, META_API_VERSION, OBJECT_KIND, partial_object_metadata};

/// Which form a request's objects are answered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Form {
    /// Whole objects.
    Full,
    /// `PartialObjectMetadata`: `kind`, `apiVersion` and `metadata` only.
    Metadata,
}

/// What a read is answered as: objects in a form, or a table of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Objects(Form),
    /// `meta.k8s.io/v1` `Table`, its rows made from whole objects.
    Table,
}

/// What a request is, as far as its form goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// A list: its metadata form is `PartialObjectMetadataList`.
    List,
    /// One object, or a watch's objects: `PartialObjectMetadata`.
    Objects,
}

impl Form {
    /// The shape `accept` (the `Accept` header; none means anything) asks for first among
    /// those served (a table only when `table`: the resource has a printer), or `None` when
    /// it accepts none of them (`406`).
    pub(crate) fn negotiate(accept: Option<&str>, answer: Answer, table: bool) -> Option<Shape> {
        let metadata_kind = match answer {
            Answer::List => LIST_KIND,
            Answer::Objects => OBJECT_KIND,
        };
        Self::pick(accept, Some(metadata_kind), table)
    }

    /// [`negotiate`](Self::negotiate) for a resource served without the metadata form or a
    /// table, as some aggregated APIs are: whole objects when the request accepts them, else
    /// `None`.
    pub(crate) fn negotiate_whole_only(accept: Option<&str>) -> Option<Shape> {
        Self::pick(accept, None, false)
    }

    /// The first entry of `accept` served: plain JSON, the metadata form of `metadata_kind`
    /// when it is served, or a table when `table`.
    fn pick(accept: Option<&str>, metadata_kind: Option<&str>, table: bool) -> Option<Shape> {
        let Some(accept) = accept else {
            return Some(Shape::Objects(Form::Full));
        };
        accept.split(',').find_map(|entry| {
            let mut parts = entry.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            let mut kind = None;
            let (mut group, mut version) = (None, None);
            for parameter in parts {
                match parameter.split_once('=') {
                    Some(("as", value)) => kind = Some(value),
                    Some(("g", value)) => group = Some(value),
                    Some(("v", value)) => version = Some(value),
                    _ => {}
                }
            }
            if !matches!(media, "application/json" | "application/*" | "*/*") {
                return None;
            }
            let meta_v1 = group == Some("meta.k8s.io") && version == Some("v1");
            match kind {
                None => Some(Shape::Objects(Form::Full)),
                Some(kind) if Some(kind) == metadata_kind && meta_v1 => {
                    Some(Shape::Objects(Form::Metadata))
                }
                Some("Table") if table && meta_v1 => Some(Shape::Table),
                // Other forms are not served; a later entry may be.
                Some(_) => None,
            }
        })
    }

    /// A list's `kind` and `apiVersion` in this form, given the listed resource's.
    pub(crate) fn list_kind(self, kind: &str, api_version: &str) -> (String, String) {
        match self {
            Form::Full => (format!("{kind}List"), api_version.to_owned()),
            Form::Metadata => (LIST_KIND.to_owned(), META_API_VERSION.to_owned()),
        }
    }

    /// An object in this form: `object` (JSON with `kind` and `apiVersion`) as it is, or its
    /// metadata as a `PartialObjectMetadata`. An object whose metadata cannot be found is
    /// answered whole.
    pub(crate) fn object(self, object: Bytes) -> Bytes {
        match self {
            Form::Full => object,
            Form::Metadata => partial_object_metadata(object),
        }
    }

    /// The `kind` and `apiVersion` of a bookmark in this form, given the resource's.
    pub(crate) fn bookmark_kind<'a>(
        self,
        kind: &'a str,
        api_version: &'a str,
    ) -> (&'a str, &'a str) {
        match self {
            Form::Full => (kind, api_version),
            Form::Metadata => (OBJECT_KIND, META_API_VERSION),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_accept_header_picks_the_first_form_served() {
        let client_go_list = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,\
             application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(
            Form::negotiate(Some(client_go_list), Answer::List, false),
            Some(Shape::Objects(Form::Metadata))
        );
        // The list's form asked for an object: the plain JSON after it.
        assert_eq!(
            Form::negotiate(Some(client_go_list), Answer::Objects, false),
            Some(Shape::Objects(Form::Full))
        );
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json";
        assert_eq!(
            Form::negotiate(Some(kubectl), Answer::List, false),
            Some(Shape::Objects(Form::Full))
        );
        assert_eq!(
            Form::negotiate(None, Answer::Objects, false),
            Some(Shape::Objects(Form::Full))
        );
        let metadata_only = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        assert_eq!(
            Form::negotiate(Some(metadata_only), Answer::Objects, false),
            Some(Shape::Objects(Form::Metadata))
        );
        assert_eq!(
            Form::negotiate(Some("application/yaml"), Answer::List, false),
            None
        );
        assert_eq!(
            Form::negotiate(
                Some("application/json;as=Table;v=v1;g=meta.k8s.io"),
                Answer::List,
                false
            ),
            None
        );
    }

    #[test]
    fn a_table_is_served_first_to_kubectl_for_a_type_with_a_printer() {
        let kubectl = "application/json;as=Table;v=v1;g=meta.k8s.io,\
             application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        for answer in [Answer::List, Answer::Objects] {
            assert_eq!(
                Form::negotiate(Some(kubectl), answer, true),
                Some(Shape::Table)
            );
            assert_eq!(
                Form::negotiate(Some(kubectl), answer, false),
                Some(Shape::Objects(Form::Full))
            );
        }
        let beta_alone = "application/json;as=Table;v=v1beta1;g=meta.k8s.io";
        assert_eq!(Form::negotiate(Some(beta_alone), Answer::List, true), None);
        assert_eq!(
            Form::negotiate_whole_only(Some(kubectl)),
            Some(Shape::Objects(Form::Full))
        );
    }

    #[test]
    fn a_resource_without_the_metadata_form_answers_whole_objects_or_406() {
        let metadata_or_json =
            "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
        assert_eq!(
            Form::negotiate_whole_only(Some(metadata_or_json)),
            Some(Shape::Objects(Form::Full))
        );
        let metadata_alone = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
        assert_eq!(Form::negotiate_whole_only(Some(metadata_alone)), None);
    }

    #[test]
    fn an_object_becomes_its_metadata() {
        let object = Bytes::from_static(
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","labels":{"x":"y"}},"data":{"k":"v"}}"#,
        );
        assert_eq!(
            Form::Metadata.object(object.clone()),
            Bytes::from_static(
                br#"{"kind":"PartialObjectMetadata","apiVersion":"meta.k8s.io/v1","metadata":{"name":"a","labels":{"x":"y"}}}"#
            )
        );
        assert_eq!(Form::Full.object(object.clone()), object);
    }
}
