#![no_main]
//! See `kubeplug_fuzz_checks::list_page` for the input format and the properties checked.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kubeplug_fuzz_checks::list_page(data));
