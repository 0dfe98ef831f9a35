//! The sharding protocol through the crate's public API. Every test's name starts with
//! `shard::`, so `cargo test shard` runs these with the sharded host's tests.

mod shard {
    mod handover;
    mod membership;
    mod ring;
}
