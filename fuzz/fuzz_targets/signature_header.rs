//! cargo-fuzz target: see `tern_fuzz::signature_header`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_fuzz::signature_header(data));
