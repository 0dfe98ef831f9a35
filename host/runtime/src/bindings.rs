//! The one `bindgen!` of the `kubeplug:plugin` world (the WIT files in `wit/` are the source of
//! truth). Host functions may trap (`trappable`): the outer `wasmtime::Result` is for a broken
//! sandbox, the inner `Result<_, Error>` is the ordinary answer the guest handles. Cluster
//! writes are `async` because they wait on the API server; exports are called asynchronously
//! so that epoch interruption can yield to the executor instead of blocking a thread.

#![allow(missing_docs)] // generated code; the WIT files document every item

wasmtime::component::bindgen!({
    world: "plugin",
    path: "../../wit",
    imports: {
        "kubeplug:plugin/cluster": async | trappable,
        default: trappable,
    },
    exports: { default: async },
});

pub(crate) use exports::kubeplug::plugin::handler as guest;
pub(crate) use kubeplug::plugin::types as wit;
