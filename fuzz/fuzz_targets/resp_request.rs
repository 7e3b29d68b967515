#![no_main]
use halyard_server::resp::{parse, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let limits = Limits { max_request_bytes: 1 << 16, max_args: 1024 };
    let mut pos = 0;
    // Parse request after request, as a connection does; never panic, always make progress.
    while let Ok(Some((args, used))) = parse(&data[pos..], limits) {
        assert!(used > 0 && pos + used <= data.len());
        assert!(args.iter().map(|a| a.len()).sum::<usize>() <= data.len());
        pos += used;
    }
});
