#![no_main]
//! See `kubeplug_fuzz_checks::config_file` for the input format and the properties checked.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kubeplug_fuzz_checks::config_file(data));
