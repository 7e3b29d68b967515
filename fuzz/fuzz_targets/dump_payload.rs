#![no_main]
use halyard_server::commands::dump::{decode, encode};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // RESTORE's payloads come from clients: never panic, and what is accepted dumps back to
    // a payload that reads as the same value.
    if let Ok(o) = decode(data) {
        assert_eq!(decode(&encode(&o)), Ok(o));
    }
});
