//! `spmv check` through the binary: every kernel and precision, and one plan per
//! scheme, on a shipped matrix passes; an unreadable input fails the command.
//! (The awkward shapes run in `scripts/gpu-campaign.sh rehearse`.)

use std::path::Path;
use std::process::Command;

fn device_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
        || std::env::var("SPMV_REQUIRE_DEVICE").is_ok_and(|v| v == "1")
}

fn spmv(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_spmv"))
        .args(args)
        .env_remove("SPMV_DEVICE")
        .output()
        .expect("spmv runs");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Whether `spmv check` failed for want of an OpenCL device: then the test
/// skips with the reason, or fails where a device is required.
fn skipped_for_no_device(ok: bool, text: &str) -> bool {
    if ok || !text.contains("platform") || text.contains("mismatch") {
        return false;
    }
    assert!(
        !device_required(),
        "an OpenCL device is required here:\n{text}"
    );
    eprintln!("SKIP: no OpenCL device:\n{text}");
    true
}

#[test]
fn every_kernel_passes_and_bad_input_fails() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sparse/tests/data");
    let m = data.join("HB__can_229.mtx.gz").display().to_string();
    let (ok, text) = spmv(&["check", &m]);
    if skipped_for_no_device(ok, &text) {
        return;
    }
    assert!(ok, "{text}");
    assert!(text.contains("ok   HB__can_229"), "{text}");
    assert!(
        text.contains(": 0 mismatches, 0 matrices not checked"),
        "{text}"
    );

    let missing = data.join("no-such-matrix.mtx").display().to_string();
    let (ok, text) = spmv(&["check", &m, &missing, "--no-plans"]);
    assert!(!ok, "{text}");
    assert!(text.contains("1 matrices not checked"), "{text}");
    let (ok, _) = spmv(&["check"]);
    assert!(!ok);
}

#[test]
fn merge_tile_parameters_given_to_check_are_the_ones_checked() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sparse/tests/data");
    let m = data.join("HB__can_229.mtx.gz").display().to_string();
    // Tiles of 12 items: the 229 rows + 1,777 nonzeros make 168 tiles, so the
    // fix-up runs a second level; every kernel still checked.
    let (ok, text) = spmv(&[
        "check",
        &m,
        "--no-plans",
        "--kernel-params",
        "mt_wg=4,mt_items=3",
    ]);
    if skipped_for_no_device(ok, &text) {
        return;
    }
    assert!(ok, "{text}");
    assert!(text.contains("merge tile 4 x 3 items"), "{text}");
    assert!(
        text.contains(&format!("({} kernels", sparse::KernelId::all().len())),
        "{text}"
    );
    assert!(text.contains(": 0 mismatches"), "{text}");
    let (ok, text) = spmv(&["check", &m, "--kernel-params", "mt_wg=1,mt_items=1"]);
    assert!(!ok && text.contains("at least 2 items"), "{text}");
}
