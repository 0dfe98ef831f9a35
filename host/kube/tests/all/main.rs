//! Integration tests of the kube source against the fake API server, through a real kube
//! client. One binary (`tests/all`), sharing `support`.

mod config;
mod discovery;
mod fake_server;
mod lister;
mod reflect;
mod soak;
mod support;
