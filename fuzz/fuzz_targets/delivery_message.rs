//! cargo-fuzz target: see `tern_fuzz::delivery_message`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_fuzz::delivery_message(data));
