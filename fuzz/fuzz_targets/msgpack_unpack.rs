#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // A script's cmsgpack.unpack reads bytes a client sent: an error, never a panic or a hang.
    let _ = halyard_server::msgpack_unpack(data);
});
