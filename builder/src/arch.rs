//! GPU architectures (the `sm_XX` names shared by rustc, llc and ptxas).

use std::fmt;
use std::str::FromStr;

/// A GPU architecture: the `-Ctarget-cpu` given to rustc, the `-mcpu` given to
/// `llc` and the `-arch` given to `ptxas`.
///
/// PTX written for one architecture is accepted by `ptxas` (and the driver's
/// JIT) for every later one, so one `sm_75` PTX file serves sm_75..sm_90+.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[non_exhaustive]
pub enum Arch {
    /// Turing; the oldest architecture CUDA 13 still supports. The default.
    #[default]
    Sm75,
    /// Ampere (A100).
    Sm80,
    /// Ampere (consumer).
    Sm86,
    /// Ada.
    Sm89,
    /// Hopper (H100, H200).
    Sm90,
    /// Blackwell (B200).
    Sm100,
    /// Blackwell (consumer).
    Sm120,
}

impl Arch {
    /// Every architecture this crate knows, oldest first.
    pub const ALL: &'static [Arch] = &[
        Arch::Sm75,
        Arch::Sm80,
        Arch::Sm86,
        Arch::Sm89,
        Arch::Sm90,
        Arch::Sm100,
        Arch::Sm120,
    ];

    /// The name as the tools spell it: `"sm_75"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Arch::Sm75 => "sm_75",
            Arch::Sm80 => "sm_80",
            Arch::Sm86 => "sm_86",
            Arch::Sm89 => "sm_89",
            Arch::Sm90 => "sm_90",
            Arch::Sm100 => "sm_100",
            Arch::Sm120 => "sm_120",
        }
    }
}

impl fmt::Display for Arch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing an [`Arch`] from a string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown GPU architecture `{0}` (expected one of sm_75, sm_80, sm_86, sm_89, sm_90, sm_100, sm_120)"
)]
pub struct ParseArchError(pub String);

impl FromStr for Arch {
    type Err = ParseArchError;

    /// Accepts `sm_90`, `sm90`, `90` and `compute_90`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        let digits = t
            .strip_prefix("sm_")
            .or_else(|| t.strip_prefix("compute_"))
            .or_else(|| t.strip_prefix("sm"))
            .unwrap_or(t);
        Arch::ALL
            .iter()
            .copied()
            .find(|a| &a.as_str()[3..] == digits)
            .ok_or_else(|| ParseArchError(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trip() {
        for &a in Arch::ALL {
            assert_eq!(a.as_str().parse::<Arch>(), Ok(a));
        }
        assert_eq!("90".parse::<Arch>(), Ok(Arch::Sm90));
        assert_eq!("sm75".parse::<Arch>(), Ok(Arch::Sm75));
        assert_eq!("compute_80".parse::<Arch>(), Ok(Arch::Sm80));
        assert!("sm_70".parse::<Arch>().is_err());
        assert!("".parse::<Arch>().is_err());
        assert_eq!(Arch::default(), Arch::Sm75);
    }
}
