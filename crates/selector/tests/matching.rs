//! The match ladder on real model files: the shipped CPU models serve their own
//! device exactly, another PoCL CPU of the same class whatever its vendor, never
//! a GPU; the closest rung wins over a newer model; a recorded kernel source
//! that changed or went missing is refused, a kernel file added after training
//! is not; a card written before the new fields loads as legacy with a reason.

use selector::*;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The kernel sources in the repository's `kernels/` folder, every `*.cl` file.
fn repo_kernels() -> KernelSources {
    let mut texts = Vec::new();
    for e in std::fs::read_dir(repo().join("kernels")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "cl") {
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            texts.push((name, std::fs::read_to_string(&p).unwrap()));
        }
    }
    KernelSources::of(texts.iter().map(|(n, t)| (n.as_str(), t.as_str())))
}

/// The shipped f64 CPU model (the test fails when `models/` has none: they ship with the repository).
fn shipped_f64() -> Model {
    load_models_dir(repo().join("models"))
        .unwrap()
        .into_iter()
        .filter_map(|(_, m)| m.ok())
        .find(|m| m.card.precision == "f64" && m.card.device.starts_with("pthread-"))
        .expect("models/ ships a PoCL CPU model in f64")
}

fn cpu(name: &str, vendor: &str) -> DeviceIdentity {
    DeviceIdentity::new(name, vendor, "3.1+debian", "cpu")
}

/// Another PoCL CPU with AVX-512, from another vendor than the shipped models'.
fn avx512_xeon() -> DeviceIdentity {
    cpu(
        "pthread-skylake-avx512-Intel(R) Xeon(R) Processor",
        "GenuineIntel",
    )
}

/// Asserts that the choice's reason says each of `parts`.
fn assert_says(c: &Choice, parts: &[&str]) {
    for p in parts {
        assert!(c.reason.contains(p), "{p:?} not in: {}", c.reason);
    }
}

/// Why `m` is refused on its own device (f64) running `kernels`; a failure
/// when it is not refused.
fn refusal(m: &Model, kernels: &KernelSources) -> String {
    let own = m.card.identity();
    let target = Target {
        device: &own,
        precision: "f64",
        kernels,
    };
    match m.assess(&target) {
        Assessment::Refused(r) => r,
        other => panic!("not refused: {other:?}"),
    }
}

fn choose(models: &[Model], device: &DeviceIdentity, kernels: &KernelSources) -> Choice {
    Selector::choose(
        models,
        &Target {
            device,
            precision: "f64",
            kernels,
        },
    )
}

#[test]
fn shipped_cards_record_the_kernels_of_this_repository() {
    let m = shipped_f64();
    let k = m
        .card
        .kernel_sources
        .as_ref()
        .expect("kernel hashes on the card");
    let changed = k.changed_in(&repo_kernels());
    assert!(
        changed.is_empty(),
        "kernels/ files recorded on the shipped card changed since training: {changed:?}; retrain them"
    );
    assert_eq!(m.card.device_type, Some(DeviceType::Cpu));
}

#[test]
fn a_kernel_file_added_after_training_keeps_every_shipped_model_usable() {
    let ks = repo_kernels();
    let models: Vec<Model> = load_models_dir(repo().join("models"))
        .unwrap()
        .into_iter()
        .map(|(name, m)| m.unwrap_or_else(|e| panic!("{}: {e}", name.display())))
        .collect();
    assert!(models.len() >= 4);
    let mut older = 0;
    for m in &models {
        let recorded = m.card.kernel_sources.as_ref().expect("kernel hashes");
        let target = Target {
            device: &m.card.identity(),
            precision: &m.card.precision,
            kernels: &ks,
        };
        // Files added since the newest shipped models were fitted.
        let newer = ["csr_args.cl", "fused.cl", "merge_one.cl"];
        if recorded.files.contains_key("merge_tile.cl") {
            // Refitted since merge_tile existed: only the newer files added.
            let added = recorded.added_in(&ks);
            assert!(
                added.iter().all(|f| newer.contains(&f.as_str())),
                "{added:?}"
            );
            match m.assess(&target) {
                Assessment::Usable(d) => {
                    assert_eq!(d.level, MatchLevel::Exact, "{}", d.reason);
                    assert_eq!(
                        d.reason.contains("trained before"),
                        !added.is_empty(),
                        "{}",
                        d.reason
                    );
                }
                other => panic!("{}: {other:?}", m.card.device),
            }
            assert!(!m.card.kernels.contains(&sparse::KernelId::MergeOne) || added.is_empty());
            continue;
        }
        older += 1;
        assert_eq!(
            recorded.added_in(&ks),
            vec!["csr_args.cl", "fused.cl", "merge_one.cl", "merge_tile.cl"]
        );
        match m.assess(&target) {
            Assessment::Usable(d) => {
                assert_eq!(d.level, MatchLevel::Exact, "{}", d.reason);
                assert!(d.reason.contains("merge_tile.cl"), "{}", d.reason);
                assert!(d.reason.contains("trained before"), "{}", d.reason);
            }
            other => panic!("{}: {other:?}", m.card.device),
        }
        // Its kernel list lacks the new kernels, so it can never pick them.
        assert!(!m.card.kernels.contains(&sparse::KernelId::MergeTile));
        assert!(!m.card.kernels.contains(&sparse::KernelId::MergeOne));
    }
    assert!(older >= 1, "at least one shipped model predates merge_tile");
}

#[test]
fn a_recorded_kernel_file_missing_from_the_service_is_refused() {
    let m = shipped_f64();
    let recorded = m.card.kernel_sources.clone().unwrap();
    let fewer = KernelSources {
        hash: String::new(),
        files: recorded
            .files
            .into_iter()
            .filter(|(n, _)| n != "vector.cl")
            .collect(),
    };
    let r = refusal(&m, &fewer);
    assert!(r.contains("vector.cl"), "{r}");
}

#[test]
fn the_ladder_exact_same_class_same_type_none() {
    let m = shipped_f64();
    let ks = repo_kernels();
    let own = m.card.identity();
    let c = choose(std::slice::from_ref(&m), &own, &ks);
    assert_eq!(
        (c.level, c.index),
        (MatchLevel::Exact, Some(0)),
        "{}",
        c.reason
    );

    // Another PoCL CPU with AVX-512, from another vendor: same class.
    let xeon = avx512_xeon();
    let c = choose(std::slice::from_ref(&m), &xeon, &ks);
    assert_eq!(c.level, MatchLevel::SameClass, "{}", c.reason);
    assert_says(&c, &["same class", "avx512"]);
    // AVX2 is a compatible class; SSE only the same type.
    let c = choose(
        std::slice::from_ref(&m),
        &cpu("pthread-znver3-AMD EPYC 7763", "AuthenticAMD"),
        &ks,
    );
    assert_eq!(c.level, MatchLevel::SameClass, "{}", c.reason);
    assert_says(&c, &["compatible class"]);
    let c = choose(
        std::slice::from_ref(&m),
        &cpu("pthread-nehalem-Intel(R) Xeon(R) X5650", "GenuineIntel"),
        &ks,
    );
    assert_eq!(c.level, MatchLevel::SameType, "{}", c.reason);
    // Intel's own CPU runtime: no class known, still a CPU.
    let c = choose(
        std::slice::from_ref(&m),
        &DeviceIdentity::new(
            "Intel(R) Xeon(R) Platinum 8480+",
            "Intel(R) Corporation",
            "2024.18",
            "cpu",
        ),
        &ks,
    );
    assert_eq!(c.level, MatchLevel::SameType, "{}", c.reason);

    // A CPU model never plans for a GPU.
    let h100 = DeviceIdentity::new(
        "NVIDIA H100 80GB HBM3",
        "NVIDIA Corporation",
        "550.54",
        "gpu",
    );
    let c = choose(std::slice::from_ref(&m), &h100, &ks);
    assert_eq!((c.level, c.index), (MatchLevel::None, None));
    assert_eq!(c.selector, Selector::Rule);
    assert_says(&c, &["rule baseline", "gpu"]);
}

#[test]
fn gpu_models_match_by_architecture() {
    let ks = repo_kernels();
    let mut h100 = shipped_f64();
    h100.card.record_training(
        &DeviceIdentity::new(
            "NVIDIA H100 80GB HBM3",
            "NVIDIA Corporation",
            "550.54",
            "gpu",
        ),
        ks.clone(),
    );
    let h200 = DeviceIdentity::new("NVIDIA H200", "NVIDIA Corporation", "560.35", "gpu");
    let c = choose(std::slice::from_ref(&h100), &h200, &ks);
    assert_eq!(c.level, MatchLevel::SameClass, "{}", c.reason);
    assert_says(&c, &["hopper"]);
    let a100 = DeviceIdentity::new(
        "NVIDIA A100-SXM4-80GB",
        "NVIDIA Corporation",
        "550.54",
        "gpu",
    );
    assert_eq!(
        choose(std::slice::from_ref(&h100), &a100, &ks).level,
        MatchLevel::SameType
    );
    let epyc = cpu("pthread-skylake-avx512-AMD EPYC", "AuthenticAMD");
    assert_eq!(choose(&[h100], &epyc, &ks).level, MatchLevel::None);
}

#[test]
fn the_closest_rung_wins_over_a_newer_model() {
    let ks = repo_kernels();
    let base = shipped_f64();
    let at = |name: &str, created: &str| {
        let mut m = base.clone();
        m.card
            .record_training(&cpu(name, "GenuineIntel"), ks.clone());
        m.card.created = created.into();
        m
    };
    let target = cpu(
        "pthread-skylake-avx512-Intel(R) Xeon(R) Gold",
        "GenuineIntel",
    );
    let avx2 = at("pthread-haswell-Intel(R) Core(TM) i7", "2030-01-01");
    let avx512 = at("pthread-icelake-server-Intel(R) Xeon(R)", "2020-01-01");
    let exact = at("pthread-skylake-avx512-Intel(R) Xeon(R) Gold", "2019-01-01");
    let sse = at("pthread-nehalem-Intel(R) Xeon(R)", "2031-01-01");
    let models = [sse.clone(), avx2.clone(), avx512.clone(), exact];
    let c = choose(&models, &target, &ks);
    assert_eq!((c.level, c.index), (MatchLevel::Exact, Some(3)));
    // Without the exact one: the identical SIMD class before the compatible one.
    let c = choose(&models[..3], &target, &ks);
    assert_eq!((c.level, c.index), (MatchLevel::SameClass, Some(2)));
    let c = choose(&models[..2], &target, &ks);
    assert_eq!((c.level, c.index), (MatchLevel::SameClass, Some(1)));
    let c = choose(&models[..1], &target, &ks);
    assert_eq!((c.level, c.index), (MatchLevel::SameType, Some(0)));
}

#[test]
fn other_kernel_sources_are_refused_with_the_files_named() {
    let m = shipped_f64();
    let mut texts: Vec<(String, String)> = Vec::new();
    // Every file of the repository (merge_tile.cl included, which the card
    // lacks): one recorded file changed is enough to refuse.
    for name in repo_kernels().files.keys() {
        let text = std::fs::read_to_string(repo().join("kernels").join(name)).unwrap();
        let text = if name == "merge_path.cl" {
            text + "\n// changed\n"
        } else {
            text
        };
        texts.push((name.clone(), text));
    }
    let changed = KernelSources::of(texts.iter().map(|(n, t)| (n.as_str(), t.as_str())));
    let r = refusal(&m, &changed);
    assert!(
        r.contains("merge_path.cl") && !r.contains("serial.cl") && !r.contains("merge_tile"),
        "{r}"
    );
    let c = choose(std::slice::from_ref(&m), &m.card.identity(), &changed);
    assert_eq!(c.selector, Selector::Rule);
    assert_says(&c, &["refused", "merge_path.cl"]);
}

#[test]
fn a_legacy_card_loads_and_says_what_is_unknown() {
    let m = shipped_f64();
    let mut v: serde_json::Value = serde_json::from_str(&m.to_json_string()).unwrap();
    let card = v["card"].as_object_mut().unwrap();
    for k in ["vendor", "driver", "device_type", "kernel_sources"] {
        card.remove(k);
    }
    let legacy = Model::from_json_str(&v.to_string()).expect("a legacy card still loads");
    assert_eq!(legacy.card.unrecorded().len(), 4);
    let ks = repo_kernels();
    let xeon = avx512_xeon();
    let c = choose(std::slice::from_ref(&legacy), &xeon, &ks);
    assert_eq!(c.level, MatchLevel::SameClass, "{}", c.reason);
    assert_says(&c, &["older model file", "kernel source hashes"]);
    // The type of a legacy non-PoCL name is unknown: no rung without it.
    let mut other = legacy.clone();
    other.card.device = "Some Device".into();
    assert_eq!(choose(&[other], &xeon, &ks).level, MatchLevel::None);
}

#[test]
fn models_of_another_precision_are_not_candidates() {
    let m = shipped_f64();
    let own = m.card.identity();
    let ks = repo_kernels();
    let f32_here = Target {
        device: &own,
        precision: "f32",
        kernels: &ks,
    };
    let c = Selector::choose(std::slice::from_ref(&m), &f32_here);
    assert_eq!(c.selector, Selector::Rule);
    assert_says(&c, &["none of the 1 models loaded is for f32"]);
    assert!(matches!(m.assess(&f32_here), Assessment::OtherPrecision(_)));
}
