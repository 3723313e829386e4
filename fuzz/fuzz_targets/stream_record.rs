//! cargo-fuzz target: see `tern_fuzz::stream_record`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tern_fuzz::stream_record(data));
