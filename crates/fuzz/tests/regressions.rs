//! Every input in `crates/fuzz/regressions/` (crashes found by the fuzzer or
//! by tests, kept as fixtures) is replayed through every target and every
//! HTTP variant: none may panic or answer a 5xx other than 503.

use fuzz::seeds::Kind;
use fuzz::targets::Targets;
use std::path::Path;

#[test]
fn regressions_neither_panic_nor_fail_the_service() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let targets = Targets::new(&root.join("../../models"));
    let mut n = 0;
    for e in std::fs::read_dir(root.join("regressions")).unwrap() {
        let path = e.unwrap().path();
        let input = std::fs::read(&path).unwrap();
        targets.matrix_market(&input);
        targets.json_csr(&input);
        for kind in [Kind::MatrixMarket, Kind::Json, Kind::Multipart] {
            for variant in 0..7u8 {
                if let Err(e) = targets.http(kind, &input, variant) {
                    panic!("{}: {e}", path.display());
                }
            }
        }
        n += 1;
    }
    assert!(n >= 3, "the regression fixtures are missing");
}

/// The first crash: a gzip body under a decompression cap smaller than the
/// budget's first reservation step made `clamp` panic (a 500).
#[test]
fn gzip_under_a_small_decompression_cap_is_decoded() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let targets = Targets::new(&root.join("../../models"));
    let input =
        std::fs::read(root.join("regressions/gzip_cap_below_first_reservation.mtx.gz")).unwrap();
    assert_eq!(targets.http(Kind::MatrixMarket, &input, 0), Ok(200));
}
