//! Reads of a resource: `get` of one object and `list` of many, paged, selected and in the
//! form the request negotiated.

use bytes::Bytes;
use http::{Response, StatusCode};
use kubeplug_informer::source::{ListPage, ListRequest, ListerWatcher};
use kubeplug_memory::Call;
use serde_json::json;

use super::{Body, Ctx, full, source_error, take_raw, with_kind};
use crate::{lock, table};

impl Ctx<'_> {
    pub(super) async fn list(&self) -> Response<Body> {
        if let Some(raw) = take_raw(self.shared, Call::List) {
            return raw;
        }
        let lister = match self.lister() {
            Ok(lister) => lister,
            Err(response) => return response,
        };
        let request = ListRequest {
            limit: self.query.get("limit").and_then(|l| l.parse().ok()),
            continue_token: self.query.get("continue").cloned(),
            resource_version: self.query.get("resourceVersion").cloned(),
        };
        let page = match lister.list(request.clone()).await {
            Ok(page) => page,
            Err(e) => return source_error(e),
        };
        let mut metadata = json!({"resourceVersion": page.resource_version});
        if let Some(token) = &page.continue_token {
            metadata["continue"] = json!(token);
            if let Some(remaining) = self.remaining_items(&lister, &request, &page, token).await {
                metadata["remainingItemCount"] = json!(remaining);
            }
        }
        if let Some(table) = self.table {
            let objects: Vec<Bytes> = page
                .items
                .iter()
                .map(|item| with_kind(self.resource, &self.view.show(item.clone())))
                .collect();
            return full(StatusCode::OK, table.table(metadata, true, &objects));
        }
        let mut out =
            Vec::with_capacity(page.items.iter().map(|i| i.len() + 1).sum::<usize>() + 256);
        let (kind, api_version) = self
            .form
            .list_kind(&self.resource.kind, &self.resource.api_version());
        let mut head =
            json!({"kind": kind, "apiVersion": api_version, "metadata": metadata}).to_string();
        head.pop(); // the closing brace: the items follow
        out.extend_from_slice(head.as_bytes());
        out.extend_from_slice(b",\"items\":[");
        for (i, item) in page.items.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(&self.form.object(self.view.show(item.clone())));
        }
        out.extend_from_slice(b"]}");
        full(StatusCode::OK, out)
    }

    /// The objects a list still holds after `page`, which ends at `token`: counted on a
    /// list's first page, then carried from page to page (all of a list's pages read one
    /// version, so the count only shrinks by what each page served).
    async fn remaining_items(
        &self,
        lister: &kubeplug_memory::MemoryListerWatcher,
        request: &ListRequest,
        page: &ListPage,
        token: &str,
    ) -> Option<usize> {
        // Tokens are only unique within one list: the same version and last key can end a
        // page of another namespace's or selector's list.
        let list = format!(
            "{}/{}/{:?}?{:?}&{:?}#",
            self.resource.api_version(),
            self.resource.plural,
            self.namespace(),
            self.query.get("labelSelector"),
            self.query.get("fieldSelector"),
        );
        let carried = request
            .continue_token
            .as_ref()
            .and_then(|served| lock(&self.shared.remaining_items).remove(&(list.clone() + served)));
        let remaining = match carried {
            Some(before) => before.checked_sub(page.items.len())?,
            None => {
                let rest = lister
                    .list(ListRequest {
                        limit: None,
                        continue_token: Some(token.to_owned()),
                        resource_version: None,
                    })
                    .await
                    .ok()?;
                rest.items.len()
            }
        };
        let mut counts = lock(&self.shared.remaining_items);
        if counts.len() >= crate::REMAINING_COUNTS {
            counts.clear();
        }
        counts.insert(list + token, remaining);
        Some(remaining)
    }

    pub(super) fn get(&self) -> Response<Body> {
        let stored = self.shared.memory.get(self.storage, &self.key());
        let Some(json) = stored else {
            return self.not_found();
        };
        let object = with_kind(self.resource, &self.view.show(json));
        match self.table {
            Some(table) => {
                let metadata = json!({"resourceVersion": table::resource_version(&object)});
                full(StatusCode::OK, table.table(metadata, true, [&object]))
            }
            None => full(StatusCode::OK, self.form.object(object)),
        }
    }
}
