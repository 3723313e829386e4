//! cargo-fuzz target: see `tern_fuzz::token_response`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_fuzz::token_response(data));
