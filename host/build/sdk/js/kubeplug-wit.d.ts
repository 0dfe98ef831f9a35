// Types of the `kubeplug:plugin@0.2.0` WIT as componentize-qjs binds it: its records (the
// namespace `KubeplugWit`, camelCase) and the host's imports (`kubeplug:plugin/...`), for
// editors and `tsc --checkJs`. `kubeplug.d.ts`, the SDK's types, re-exports the records.
//
// An option is the value or `null`; an enum its case name; a variant `{ tag, val }`; an
// import returning `result` returns the ok value and throws the error case.

declare namespace KubeplugWit {
  interface Gvk { group: string; version: string; kind: string }
  interface ObjectRef { resourceType: Gvk; namespace: string | null; name: string }
  interface Label { key: string; value: string }
  interface OwnerReference { apiVersion: string; kind: string; name: string; uid: string; controller: boolean }
  interface ObjectMeta {
    namespace: string | null;
    name: string;
    uid: string | null;
    resourceVersion: string;
    generation: bigint | number | null;
    labels: Label[];
    ownerReferences: OwnerReference[];
    deletionTimestamp: string | null;
  }
  /** `json` is null when the plugin reads the type's metadata only. */
  interface CachedObject { meta: ObjectMeta; json: string | null }
  type EventType = "added" | "updated" | "deleted";
  interface Event {
    subscription: number;
    change: EventType;
    inInitialList: boolean;
    resync: boolean;
    tombstone: boolean;
    meta: ObjectMeta;
    objectJson: string | null;
    oldJson: string | null;
    projected: Projected[];
    oldProjected: Projected[];
  }
  type FieldValue =
    | { tag: "text"; val: string }
    | { tag: "integer"; val: bigint | number }
    | { tag: "float"; val: number }
    | { tag: "boolean"; val: boolean }
    | { tag: "null" }
    | { tag: "json"; val: string };
  interface Projected { name: string; values: FieldValue[] }
  interface Projection { name: string; path: string }
  interface ProjectedObject { meta: ObjectMeta; projected: Projected[] }
  /** What an import throws. */
  type HostError = { tag: "not-found" | "not-permitted" | "invalid-input" | "conflict" | "unavailable"; val: string };
  type Level = "trace" | "debug" | "info" | "warn" | "error";
  type PatchType = "merge" | "json";
  type EventSeverity = "normal" | "warning";
  interface MetaFields { uid: boolean; labels: boolean; ownerReferences: boolean; deletionTimestamp: boolean }
  type KeyMapping = { tag: "own-key" } | { tag: "owner"; val: Gvk } | { tag: "computed" };
  interface Subscription {
    resourceType: Gvk;
    namespace: string | null;
    labelSelector: string | null;
    fieldSelector: string | null;
    resyncPeriodMs: bigint | number | null;
    metaFields: MetaFields;
    wantsObjectJson: boolean;
    wantsOldJson: boolean;
    enqueue: KeyMapping;
    projections: Projection[];
  }
  type Delivery = { tag: "events" } | { tag: "reconcile"; val: number };
  type IndexSpec = { tag: "label"; val: string } | { tag: "owner-uid" } | { tag: "path"; val: string };
  interface IndexDecl { name: string; resourceType: Gvk; spec: IndexSpec }
  type WriteVerb = "apply" | "patch" | "patch-status" | "create" | "delete" | "record-event";
  interface Read { resourceType: Gvk; wantsObjectJson: boolean }
  interface WriteRequest { resourceType: Gvk; verbs: WriteVerb[] }
  interface Description {
    name: string;
    version: string;
    subscriptions: Subscription[];
    delivery: Delivery;
    indexes: IndexDecl[];
    reads: Read[];
    writes: WriteRequest[];
  }
  type ReconcileResult = { tag: "done" } | { tag: "requeue-after"; val: number } | { tag: "error"; val: string };
}

declare module "kubeplug:plugin/cache@0.2.0" {
  export function get(resourceType: KubeplugWit.Gvk, key: string): KubeplugWit.CachedObject | null;
  export function list(resourceType: KubeplugWit.Gvk, namespace: string | null, labelSelector: string | null): KubeplugWit.CachedObject[];
  export function getProjected(resourceType: KubeplugWit.Gvk, key: string, projections: KubeplugWit.Projection[]): KubeplugWit.ProjectedObject | null;
  export function listProjected(resourceType: KubeplugWit.Gvk, namespace: string | null, labelSelector: string | null, projections: KubeplugWit.Projection[]): KubeplugWit.ProjectedObject[];
  export function keys(resourceType: KubeplugWit.Gvk, namespace: string | null): string[];
  export function byIndex(resourceType: KubeplugWit.Gvk, index: string, value: string): KubeplugWit.CachedObject[];
  export function indexValues(resourceType: KubeplugWit.Gvk, index: string): string[];
}

declare module "kubeplug:plugin/log@0.2.0" {
  export function enabled(level: KubeplugWit.Level): boolean;
  export function log(level: KubeplugWit.Level, message: string, fields: KubeplugWit.Label[]): void;
}

declare module "kubeplug:plugin/cluster@0.2.0" {
  export function apply(target: KubeplugWit.ObjectRef, json: string, force: boolean): string;
  export function patch(target: KubeplugWit.ObjectRef, patchType: KubeplugWit.PatchType, patch: string, subresource: string | null): string;
  export function create(resourceType: KubeplugWit.Gvk, namespace: string | null, json: string): string;
  // A reserved word: import it renamed, `import { delete as remove } from ...`.
  function delete_(target: KubeplugWit.ObjectRef): void;
  export { delete_ as delete };
  export function recordEvent(regarding: KubeplugWit.ObjectRef, severity: KubeplugWit.EventSeverity, reason: string, message: string): void;
}

declare module "kubeplug:plugin/metrics@0.2.0" {
  export function counterAdd(name: string, labels: KubeplugWit.Label[], delta: number): void;
  export function gaugeSet(name: string, labels: KubeplugWit.Label[], value: number): void;
}
