//! cargo-fuzz target: see `tern_fuzz::retry_after`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_fuzz::retry_after(data));
