#![no_main]
//! See `kubeplug_fuzz_checks::host_calls` for the input format and the properties checked.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kubeplug_fuzz_checks::host_calls(data));
