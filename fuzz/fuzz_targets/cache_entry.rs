//! Worker cache entries: any key and value bytes read back without panic — a key names a
//! canonical region or nothing, a value is facts or nothing — and what reads back writes
//! back the same.
#![no_main]

use cram_engine::facts::Facts;
use cram_engine::region::AnyRegion;
use cram_engine::Query;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let split = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let (key, value) = (&data[..split], data.get(split + 1..).unwrap_or(&[]));
    if let Some(r) = std::str::from_utf8(key).ok().and_then(AnyRegion::from_key) {
        let again = AnyRegion::from_key(&r.key()).expect("a region's own key reads back");
        assert_eq!(again, r);
        assert!(r.cells() >= 1 && r.cells() <= 128);
    }
    if let Some(f) = Facts::from_bytes(value) {
        assert_eq!(Facts::from_bytes(&f.to_bytes()), Some(f));
        // What the worker asks of cached facts.
        let _ = (f.value(), f.floor(), f.is_contradictory());
        for q in [Query::Nimber, Query::IsValue(value.first().copied().unwrap_or(0))] {
            let _ = q.answered_by(f);
        }
        assert_eq!(cram_proto::facts_from_pb(Some(&cram_proto::facts_to_pb(f))), f);
    }
});
