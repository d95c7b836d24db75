//! The sentence saying why a plan was chosen, kept as the figures behind it
//! and written out only when read (a response's JSON, a log line): the first
//! call of a small matrix is planned in a few microseconds, and formatting
//! its floats was a sixth of that whether anyone read the sentence or not.

use crate::BINNED_GAIN_BOUND;
use serde::{Serialize, Serializer};
use sparse::KernelId;
use std::borrow::Cow;
use std::fmt;

/// Why a plan was chosen: serialized and displayed as one sentence.
#[derive(Debug, Clone, PartialEq)]
pub struct Reason(Kind);

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    /// A sentence made by the caller.
    Text(Cow<'static, str>),
    /// The feature pass weighed against the calls (`crate::weigh_features`),
    /// and the kernel chosen without it, when it did not pay.
    Features {
        features_ms: f64,
        bound_ms: Option<f64>,
        break_even_calls: u64,
        calls: u64,
        quick: Option<(&'static str, KernelId)>,
    },
    /// Binning weighed against the bandwidth bound (no performance model).
    Binning {
        extra_ms: f64,
        bound_ms: Option<f64>,
        break_even_calls: u64,
        calls: u64,
    },
}

impl Reason {
    /// The feature pass weighed: about `features_ms`, against at most
    /// [`BINNED_GAIN_BOUND`] of `bound_ms` saved per call (without a bound:
    /// from `break_even_calls` on), `calls` expected; `quick` says which
    /// kernel was chosen without features, and how.
    pub(crate) fn features(
        features_ms: f64,
        bound_ms: Option<f64>,
        break_even_calls: u64,
        calls: u64,
        quick: Option<(&'static str, KernelId)>,
    ) -> Reason {
        Reason(Kind::Features {
            features_ms,
            bound_ms,
            break_even_calls,
            calls,
            quick,
        })
    }

    /// Binning weighed: `extra_ms` more analysis than the single-bin plan
    /// against at most [`BINNED_GAIN_BOUND`] of `bound_ms` saved per call.
    pub(crate) fn binning(
        extra_ms: f64,
        bound_ms: Option<f64>,
        break_even_calls: u64,
        calls: u64,
    ) -> Reason {
        Reason(Kind::Binning {
            extra_ms,
            bound_ms,
            break_even_calls,
            calls,
        })
    }
}

impl From<String> for Reason {
    fn from(s: String) -> Reason {
        Reason(Kind::Text(Cow::Owned(s)))
    }
}

impl From<&'static str> for Reason {
    fn from(s: &'static str) -> Reason {
        Reason(Kind::Text(Cow::Borrowed(s)))
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = BINNED_GAIN_BOUND * 100.0;
        match &self.0 {
            Kind::Text(s) => f.write_str(s),
            Kind::Features {
                features_ms,
                bound_ms,
                break_even_calls: be,
                calls,
                quick,
            } => {
                match bound_ms {
                    Some(t) => write!(
                        f,
                        "the features and planning with them would cost about {features_ms:.4} \
                         ms; a plan chosen with features saves at most {pct:.0}% of the {t:.4} ms \
                         bandwidth bound per call, so features pay from {be} calls; {calls} \
                         expected"
                    )?,
                    None => write!(
                        f,
                        "no device bandwidth to weigh the features and planning with them \
                         (about {features_ms:.4} ms) against: features from {be} calls on; \
                         {calls} expected"
                    )?,
                }
                match quick {
                    Some((how, k)) => write!(f, "; {how} chose {k}"),
                    None => Ok(()),
                }
            }
            Kind::Binning {
                extra_ms,
                bound_ms,
                break_even_calls: be,
                calls,
            } => match bound_ms {
                Some(t) => write!(
                    f,
                    "no performance model: binning costs about {extra_ms:.4} ms more than the \
                     single-bin plan and saves at most {pct:.0}% of the {t:.4} ms bandwidth \
                     bound per call, so it pays from {be} calls; {calls} expected"
                ),
                None => write!(
                    f,
                    "no performance model and no device bandwidth: the binned plan from {be} \
                     calls on; {calls} expected"
                ),
            },
        }
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_as_the_sentences_they_replace() {
        let quick = Reason::features(
            0.0123,
            Some(0.05),
            4,
            1,
            Some(("the quick part", KernelId::Serial)),
        );
        assert_eq!(
            quick.to_string(),
            "the features and planning with them would cost about 0.0123 ms; a plan chosen \
             with features saves at most 25% of the 0.0500 ms bandwidth bound per call, so \
             features pay from 4 calls; 1 expected; the quick part chose serial"
        );
        let blind = Reason::features(0.5, None, 10, 3, None);
        assert_eq!(
            blind.to_string(),
            "no device bandwidth to weigh the features and planning with them (about 0.5000 \
             ms) against: features from 10 calls on; 3 expected"
        );
        let bin = Reason::binning(0.25, Some(1.0), 1, 7);
        assert!(bin.to_string().starts_with(
            "no performance model: binning costs about 0.2500 ms more than the single-bin plan"
        ));
        let text: Reason = "plain".into();
        assert_eq!(serde_json::to_string(&text).unwrap(), "\"plain\"");
        assert_eq!(
            serde_json::to_value(&quick).unwrap(),
            serde_json::Value::String(quick.to_string())
        );
    }
}
