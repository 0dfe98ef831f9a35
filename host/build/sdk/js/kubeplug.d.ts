// Types of kubeplug's JavaScript SDK (`./kubeplug.js`, which `kubeplug build` stages beside
// the plugin's sources), for editors and `tsc --checkJs`. The records are the WIT's
// (wit/*.wit), in camelCase.

export interface Gvk { group: string; version: string; kind: string }
export interface Label { key: string; value: string }
export interface OwnerReference { apiVersion: string; kind: string; name: string; uid: string; controller: boolean }
export interface ObjectMeta {
  namespace: string | null;
  name: string;
  uid: string | null;
  resourceVersion: string;
  generation: bigint | number | null;
  labels: Label[];
  ownerReferences: OwnerReference[];
  deletionTimestamp: string | null;
}
export type EventType = "added" | "updated" | "deleted";
export interface Event {
  subscription: number;
  change: EventType;
  inInitialList: boolean;
  resync: boolean;
  tombstone: boolean;
  meta: ObjectMeta;
  objectJson: string | null;
  oldJson: string | null;
}
export interface CachedObject { meta: ObjectMeta; json: string }
export type HostError = { tag: "not-found" | "not-permitted" | "invalid-input" | "conflict" | "unavailable"; val: string };
export type Level = "trace" | "debug" | "info" | "warn" | "error";
export interface MetaFields { uid: boolean; labels: boolean; ownerReferences: boolean; deletionTimestamp: boolean }
export type KeyMapping = { tag: "own-key" } | { tag: "owner"; val: Gvk } | { tag: "computed" };
export interface Subscription {
  resourceType: Gvk;
  namespace: string | null;
  labelSelector: string | null;
  fieldSelector: string | null;
  resyncPeriodMs: bigint | number | null;
  metaFields: MetaFields;
  wantsObjectJson: boolean;
  wantsOldJson: boolean;
  enqueue: KeyMapping;
}
export interface Description {
  name: string;
  version: string;
  subscriptions: Subscription[];
  delivery: { tag: "events" } | { tag: "reconcile"; val: number };
  indexes: unknown[];
  reads: Gvk[];
  writes: { resourceType: Gvk; verbs: string[] }[];
}
export type ReconcileResult = { tag: "done" } | { tag: "requeue-after"; val: number } | { tag: "error"; val: string };
export interface ObjectRef { resourceType: Gvk; namespace: string | null; name: string }

export function gvk(group: string, version: string, kind: string): Gvk;
export function key(meta: ObjectMeta): string;
export function label(meta: ObjectMeta, name: string): string | null;
export function log(level: Level, message: string, fields?: Record<string, unknown>): void;
export function debug(message: string, fields?: Record<string, unknown>): void;
export function info(message: string, fields?: Record<string, unknown>): void;
export function warn(message: string, fields?: Record<string, unknown>): void;
export function error(message: string, fields?: Record<string, unknown>): void;
export function counterAdd(name: string, labels?: Record<string, unknown>, delta?: number): void;
export function gaugeSet(name: string, value: number, labels?: Record<string, unknown>): void;
export function subscription(resourceType: Gvk, options?: Partial<Subscription>): Subscription;
export function description(parts: {
  name: string;
  version: string;
  subscriptions: Subscription[];
  workers?: number | null;
  indexes?: unknown[];
  reads?: Gvk[];
  writes?: { resourceType: Gvk; verbs: string[] }[];
}): Description;
export function settings<T extends object>(json: string, defaults?: T): T & Record<string, unknown>;
export function done(): ReconcileResult;
export function requeueAfter(ms: number): ReconcileResult;
export function failed(message: string): ReconcileResult;
export function hostError(thrown: unknown): HostError;
export interface Handler {
  init(settings: string): void;
  describe(): Description;
  handleEvents(batch: Event[]): void;
  reconcile(resourceType: Gvk, namespace: string | null, name: string): ReconcileResult;
  mapEvent(event: Event): ObjectRef[];
}
export function handler(functions: Partial<Handler> & { describe(): Description }): Handler;
