#![no_main]
//! See `kubeplug_fuzz_checks::local_manifest` for the input format and the properties checked.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kubeplug_fuzz_checks::local_manifest(data));
