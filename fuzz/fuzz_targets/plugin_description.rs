#![no_main]
//! See `kubeplug_fuzz_checks::plugin_description` for the input format and the properties checked.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kubeplug_fuzz_checks::plugin_description(data));
