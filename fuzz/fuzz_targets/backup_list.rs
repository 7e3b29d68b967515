#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    halyard_engine::fuzzing::backup_list(data);
});
