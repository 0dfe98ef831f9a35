// Types of kubeplug's JavaScript SDK (`./kubeplug.js`, which `kubeplug build` stages beside
// the plugin's sources), for editors and `tsc --checkJs`. The records are the WIT's, from
// `kubeplug-wit.d.ts`.

/// <reference path="./kubeplug-wit.d.ts" />

export type Gvk = KubeplugWit.Gvk;
export type Label = KubeplugWit.Label;
export type OwnerReference = KubeplugWit.OwnerReference;
export type ObjectMeta = KubeplugWit.ObjectMeta;
export type EventType = KubeplugWit.EventType;
export type Event = KubeplugWit.Event;
export type CachedObject = KubeplugWit.CachedObject;
export type ProjectedObject = KubeplugWit.ProjectedObject;
export type HostError = KubeplugWit.HostError;
export type Level = KubeplugWit.Level;
export type MetaFields = KubeplugWit.MetaFields;
export type KeyMapping = KubeplugWit.KeyMapping;
export type Subscription = KubeplugWit.Subscription;
export type Projection = KubeplugWit.Projection;
export type FieldValue = KubeplugWit.FieldValue;
/** A projected value as JavaScript: a string, number, bigint (an integer past 2^53), boolean, null, or a parsed object or array. */
export type Value = string | number | bigint | boolean | null | object;
export type IndexDecl = KubeplugWit.IndexDecl;
export type Read = KubeplugWit.Read;
export type WriteRequest = KubeplugWit.WriteRequest;
export type Description = KubeplugWit.Description;
export type ReconcileResult = KubeplugWit.ReconcileResult;
export type ObjectRef = KubeplugWit.ObjectRef;

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
export function projection(name: string, path: string): Projection;
export function read(resourceType: Gvk, options?: { wantsObjectJson?: boolean }): Read;
export function value(field: FieldValue): Value;
export function field(source: Event | ProjectedObject, name: string): Value[];
export function oldField(event: Event, name: string): Value[];
export function description(parts: {
  name: string;
  version: string;
  subscriptions: Subscription[];
  workers?: number | null;
  indexes?: IndexDecl[];
  reads?: Read[];
  writes?: WriteRequest[];
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
