//! Which model may plan for which device: the fingerprint of the kernel sources a
//! model was trained with, and the match ladder exact device -> same architecture
//! class -> same device type -> none (then the rule baseline), each rung with a
//! sentence saying why.

use crate::device::{DeviceIdentity, DeviceType};
use crate::Model;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The kernel sources a model was trained with (or a service runs): a BLAKE3
/// hash of each file and one hash over all of them. Line ends are normalised
/// (CRLF -> LF) first, so a Windows checkout hashes like a Unix one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelSources {
    /// Hash over every file (names and contents, in name order), hex: the value compared.
    pub hash: String,
    /// Hash of each file's text, hex, by file name (`serial.cl`, ...).
    pub files: BTreeMap<String, String>,
}

impl KernelSources {
    /// The fingerprint of `(file name, source text)` pairs.
    pub fn of<'a>(sources: impl IntoIterator<Item = (&'a str, &'a str)>) -> KernelSources {
        let files: BTreeMap<String, String> = sources
            .into_iter()
            .map(|(name, text)| {
                let text = text.replace("\r\n", "\n");
                (
                    name.to_string(),
                    blake3::hash(text.as_bytes()).to_hex().to_string(),
                )
            })
            .collect();
        let mut all = blake3::Hasher::new();
        for (name, h) in &files {
            all.update(name.as_bytes());
            all.update(&[0]);
            all.update(h.as_bytes());
            all.update(b"\n");
        }
        KernelSources {
            hash: all.finalize().to_hex().to_string(),
            files,
        }
    }

    /// The files recorded here whose text differs in `service`, or that
    /// `service` lacks, in name order: what makes a model trained with these
    /// sources invalid for a service running `service`.
    pub fn changed_in(&self, service: &KernelSources) -> Vec<String> {
        self.files
            .iter()
            .filter(|(name, h)| service.files.get(*name) != Some(*h))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The files `service` has that are not recorded here (kernels added after
    /// training), in name order.
    pub fn added_in(&self, service: &KernelSources) -> Vec<String> {
        service
            .files
            .keys()
            .filter(|name| !self.files.contains_key(*name))
            .cloned()
            .collect()
    }

    /// The file names whose text differs, or that only one side has, in name order.
    pub fn differing_files(&self, other: &KernelSources) -> Vec<String> {
        let mut names: Vec<&String> = self.files.keys().chain(other.files.keys()).collect();
        names.sort();
        names.dedup();
        names
            .into_iter()
            .filter(|n| self.files.get(*n) != other.files.get(*n))
            .cloned()
            .collect()
    }
}

/// How close a model's device is to the device it would plan for, best first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MatchLevel {
    /// Trained on this very device (same OpenCL name).
    Exact,
    /// Same runtime and architecture class (PoCL on x86-64 with AVX2/AVX-512, NVIDIA Hopper, ...).
    SameClass,
    /// Only the device type is shared (a CPU model on another CPU).
    SameType,
    /// Nothing usable: the rule baseline plans.
    None,
}

impl MatchLevel {
    /// `exact`, `same_class`, `same_type` or `none` (as serialised).
    pub fn as_str(self) -> &'static str {
        match self {
            MatchLevel::Exact => "exact",
            MatchLevel::SameClass => "same_class",
            MatchLevel::SameType => "same_type",
            MatchLevel::None => "none",
        }
    }
}

/// A rung of the ladder with the reason, and a rank that orders models on the same rung.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceMatch {
    /// The rung.
    pub level: MatchLevel,
    /// Why, in a sentence.
    pub reason: String,
    /// Higher is closer within a rung (same driver version, same SIMD level).
    pub rank: u8,
}

/// Places a model trained on `model` against the device `target`:
/// 1. `Exact`: same device name (case and spaces ignored); a different driver
///    version keeps the rung but ranks lower;
/// 2. `SameClass`: both in the same known [`DeviceClass`] (identical ranks above compatible);
/// 3. `SameType`: both CPUs, or both GPUs, or both accelerators (known types);
/// 4. `None`: otherwise, including any unknown type: the rule baseline is safer
///    than a model for an unrelated device.
pub fn match_device(model: &DeviceIdentity, target: &DeviceIdentity) -> DeviceMatch {
    let known = |t: DeviceType| t != DeviceType::Other;
    let (mt, tt) = (model.device_type, target.device_type);
    let at = |level, rank, reason: String| DeviceMatch {
        level,
        reason,
        rank,
    };
    if known(mt) && known(tt) && mt != tt {
        return at(
            MatchLevel::None,
            0,
            format!(
                "trained on a {} ('{}'), this device is a {}",
                mt.as_str(),
                model.name,
                tt.as_str()
            ),
        );
    }
    if model.name.trim().eq_ignore_ascii_case(target.name.trim()) {
        let same_driver = model.driver.is_empty() || model.driver == target.driver;
        let note = if same_driver {
            String::new()
        } else {
            format!(" (driver {} there, {} here)", model.driver, target.driver)
        };
        return at(
            MatchLevel::Exact,
            u8::from(same_driver),
            format!("trained on this device ('{}'){note}", target.name),
        );
    }
    let (mc, tc) = (model.class(), target.class());
    if let Some(identical) = mc.compatible(&tc) {
        let how = if identical {
            "same class"
        } else {
            "compatible class"
        };
        return at(
            MatchLevel::SameClass,
            u8::from(identical),
            format!(
                "trained on '{}' ({mc}); this device '{}' is of the {how} ({tc})",
                model.name, target.name
            ),
        );
    }
    if known(mt) && mt == tt {
        return at(
            MatchLevel::SameType,
            0,
            format!(
                "trained on '{}' ({mc}), another {} than this '{}' ({tc})",
                model.name,
                mt.as_str(),
                target.name
            ),
        );
    }
    at(
        MatchLevel::None,
        0,
        format!(
            "trained on '{}' ({mc}, type {}); nothing known ties it to '{}' ({tc})",
            model.name,
            mt.as_str(),
            target.name
        ),
    )
}

/// What a service plans for: its device, a precision and the kernels it runs.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The device.
    pub device: &'a DeviceIdentity,
    /// `f32` or `f64`.
    pub precision: &'a str,
    /// The kernel sources the service runs.
    pub kernels: &'a KernelSources,
}

/// Whether a model may plan for a [`Target`], and how closely it fits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assessment {
    /// It may plan, at this rung (the reason notes a legacy card's unknowns).
    Usable(DeviceMatch),
    /// Not a candidate: a model of another precision.
    OtherPrecision(String),
    /// Not a candidate: its device is unrelated to the target's (rung `None`).
    Unsuitable(String),
    /// Refused outright: trained with other kernel sources than the ones run here.
    Refused(String),
}

impl Assessment {
    /// The rung (`None` unless usable).
    pub fn level(&self) -> MatchLevel {
        match self {
            Assessment::Usable(m) => m.level,
            _ => MatchLevel::None,
        }
    }

    /// The reason, whatever the outcome.
    pub fn reason(&self) -> &str {
        match self {
            Assessment::Usable(m) => &m.reason,
            Assessment::OtherPrecision(r) | Assessment::Unsuitable(r) | Assessment::Refused(r) => r,
        }
    }
}

impl Model {
    /// Assesses this model for `target`: the precision must be the target's,
    /// every kernel source file the card records (when it records them) must be
    /// the target's file of the same name (files the target has beyond them are
    /// kernels added after training, which the model's kernel list lacks), and
    /// the device must be on a rung of [`match_device`] above `None`. A card
    /// without kernel hashes or device details (written before they were
    /// recorded) is not refused: its reason says what is unknown.
    pub fn assess(&self, target: &Target) -> Assessment {
        let card = &self.card;
        if !card
            .precision
            .trim()
            .eq_ignore_ascii_case(target.precision.trim())
        {
            return Assessment::OtherPrecision(format!(
                "a {} model, not {}",
                card.precision, target.precision
            ));
        }
        let mut notes = Vec::new();
        if let Some(k) = &card.kernel_sources {
            let changed = k.changed_in(target.kernels);
            if !changed.is_empty() {
                return Assessment::Refused(format!(
                    "refused: trained with other kernel sources than this service runs \
                     (differing: {}); retrain it with the current kernels/",
                    changed.join(", ")
                ));
            }
            let added = k.added_in(target.kernels);
            if !added.is_empty() {
                notes.push(format!(
                    "trained before {} existed (kernels it never picks)",
                    added.join(", ")
                ));
            }
        }
        let m = match_device(&card.identity(), target.device);
        if m.level == MatchLevel::None {
            return Assessment::Unsuitable(m.reason);
        }
        let unknown = card.unrecorded();
        if !unknown.is_empty() {
            notes.push(format!(
                "its card does not record the {} (an older model file)",
                unknown.join(", ")
            ));
        }
        if notes.is_empty() {
            return Assessment::Usable(m);
        }
        Assessment::Usable(DeviceMatch {
            reason: format!("{}; {}", m.reason, notes.join("; ")),
            ..m
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_sources_name_the_differing_files() {
        let a = KernelSources::of([("a.cl", "x\n"), ("b.cl", "y\n")]);
        let crlf = KernelSources::of([("b.cl", "y\r\n"), ("a.cl", "x\r\n")]);
        assert_eq!(a, crlf);
        assert_eq!(a.hash.len(), 64);
        let b = KernelSources::of([("a.cl", "x\n"), ("b.cl", "z\n"), ("c.cl", "")]);
        assert_ne!(a.hash, b.hash);
        assert_eq!(a.differing_files(&b), vec!["b.cl", "c.cl"]);
        // A renamed file changes the overall hash even with the same text.
        let renamed = KernelSources::of([("a2.cl", "x\n"), ("b.cl", "y\n")]);
        assert_ne!(a.hash, renamed.hash);
    }

    #[test]
    fn levels_order_best_first_and_serialise_in_snake_case() {
        assert!(MatchLevel::Exact < MatchLevel::SameClass);
        assert!(MatchLevel::SameType < MatchLevel::None);
        assert_eq!(
            serde_json::to_string(&MatchLevel::SameClass).unwrap(),
            "\"same_class\""
        );
        assert_eq!(MatchLevel::SameType.as_str(), "same_type");
    }
}
