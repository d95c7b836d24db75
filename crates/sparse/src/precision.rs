//! The value precision of a matrix, a vector, a kernel program or a
//! measurement: one type for every crate (engine, store, server, trainer and
//! the binaries re-export or use this one).

use crate::scalar::Scalar;
use std::fmt;
use std::str::FromStr;

/// `f32` or `f64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Precision {
    /// Single precision (`float` in OpenCL C).
    F32,
    /// Double precision (`double`, needs `cl_khr_fp64`).
    F64,
}

/// A name that is neither precision; carries the text given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("precision must be f32 or f64, not '{0}'")]
pub struct ParsePrecisionError(pub String);

impl Precision {
    /// Both precisions, single first.
    pub const ALL: [Precision; 2] = [Precision::F32, Precision::F64];

    /// The precision used when a request or a command names none.
    pub const DEFAULT: Precision = Precision::F64;

    /// `"f32"` or `"f64"`: how it is printed, stored and sent.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => f32::NAME,
            Precision::F64 => f64::NAME,
        }
    }

    /// The same as [`Precision::name`] (the spelling the store's code uses).
    pub fn as_str(self) -> &'static str {
        self.name()
    }

    /// Bytes of one value.
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => f32::BYTES,
            Precision::F64 => f64::BYTES,
        }
    }

    /// The OpenCL C type.
    pub fn cl_type(self) -> &'static str {
        match self {
            Precision::F32 => "float",
            Precision::F64 => "double",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = ParsePrecisionError;
    /// `f32` (also `float`, `float32`, `single`) or `f64` (also `double`,
    /// `float64`), in any case, surrounding spaces ignored.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "float" | "float32" | "single" => Ok(Precision::F32),
            "f64" | "double" | "float64" => Ok(Precision::F64),
            _ => Err(ParsePrecisionError(s.to_string())),
        }
    }
}

/// The precisions a command runs in: `f32`, `f64`, `both` (also `all`) or a
/// comma-separated list, as the binaries' `--precision` flags take them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Precisions(Vec<Precision>);

impl Precisions {
    /// Whether `p` is among them.
    pub fn contains(&self, p: Precision) -> bool {
        self.0.contains(&p)
    }

    /// Them, single first, each once.
    pub fn to_vec(&self) -> Vec<Precision> {
        self.0.clone()
    }
}

impl FromStr for Precisions {
    type Err = ParsePrecisionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim().to_ascii_lowercase();
        if t == "both" || t == "all" {
            return Ok(Precisions(Precision::ALL.to_vec()));
        }
        let mut v = t
            .split(',')
            .map(|p| p.parse::<Precision>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| ParsePrecisionError(s.to_string()))?;
        v.sort();
        v.dedup();
        Ok(Precisions(v))
    }
}

impl fmt::Display for Precisions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() == Precision::ALL.len() {
            return f.write_str("both");
        }
        let names: Vec<&str> = self.0.iter().map(|p| p.name()).collect();
        f.write_str(&names.join(","))
    }
}

impl serde::Serialize for Precision {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Precision {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_aliases_are_accepted() {
        for p in Precision::ALL {
            assert_eq!(p.name().parse::<Precision>(), Ok(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        assert_eq!(" Double ".parse::<Precision>(), Ok(Precision::F64));
        assert_eq!("single".parse::<Precision>(), Ok(Precision::F32));
        let e = "f16".parse::<Precision>().unwrap_err();
        assert_eq!(e, ParsePrecisionError("f16".into()));
        assert!(e.to_string().contains("f16"));
        assert_eq!((Precision::F32.bytes(), Precision::F64.bytes()), (4, 8));
        assert_eq!(Precision::F64.cl_type(), "double");
    }

    #[test]
    fn sets_of_precisions_parse_from_both_or_lists() {
        let both: Precisions = "both".parse().unwrap();
        assert_eq!(both.to_vec(), Precision::ALL.to_vec());
        assert_eq!(both.to_string(), "both");
        assert_eq!("f64,f32".parse::<Precisions>().unwrap(), both);
        let one: Precisions = "f32".parse().unwrap();
        assert!(one.contains(Precision::F32) && !one.contains(Precision::F64));
        assert_eq!(one.to_string(), "f32");
        assert!("f32,f16".parse::<Precisions>().is_err());
        assert!("".parse::<Precisions>().is_err());
    }

    #[test]
    fn serde_uses_the_names() {
        let j = serde_json::to_string(&Precision::ALL).unwrap();
        assert_eq!(j, r#"["f32","f64"]"#);
        let back: Vec<Precision> = serde_json::from_str(&j).unwrap();
        assert_eq!(back, Precision::ALL);
        assert!(serde_json::from_str::<Precision>(r#""half""#).is_err());
    }
}
