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
        targets.binary_csr(&input);
        for kind in [
            Kind::MatrixMarket,
            Kind::Json,
            Kind::Multipart,
            Kind::BinaryCsr,
        ] {
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

/// Binary CSR bodies whose header lies are refused from the header alone: a
/// declared nnz over the limit (413) and an x section cut short (400), on
/// every route that takes the format.
#[test]
fn lying_binary_csr_headers_get_their_specific_status() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let targets = Targets::new(&root.join("../../models"));
    for (file, status) in [
        ("binary_csr_lying_nnz.csr", 413),
        ("binary_csr_x_truncated.csr", 400),
    ] {
        let input = std::fs::read(root.join("regressions").join(file)).unwrap();
        assert!(!targets.binary_csr(&input), "{file}");
        for variant in 0..3u8 {
            assert_eq!(
                targets.http(Kind::BinaryCsr, &input, variant),
                Ok(status),
                "{file}, variant {variant}"
            );
        }
    }
}
