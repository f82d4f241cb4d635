//! Which instruction set the kernels run on, chosen once: `Isa`, and for each one its row of
//! `KERNELS` (a `KernelSet`: whether this CPU runs it, its matmul kernels for both weight
//! layouts, its activation quantizer, and how wide the float SIMD twins elsewhere run). At
//! start-up `Isa::detect` takes the first row this CPU runs, at or below the `TOLLGATE_ISA`
//! cap, and every kernel call after that reads the chosen row (`selected`) instead of
//! branching on the ISA.
//!
//! Adding an ISA: its file (the kernels and its `KernelSet` constant, declared in `mod.rs`),
//! and here a variant of `Isa` and its row in `KERNELS`. The kernel tests iterate
//! `Isa::all`. The portable row is defined here: every other row falls back to it.

pub use super::set::{KernelSet, Lanes, PackedKernel};

/// Instruction sets the kernels are written for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// Plain Rust; every CPU.
    Portable,
    /// AVX2 + FMA + F16C (x86-64 since Haswell).
    Avx2,
    /// AVX2's set plus AVX-VNNI: `vpdpbusd` on ymm registers (Intel since Alder Lake and
    /// Sapphire Rapids, AMD since Zen 5). CPUs with AVX-512 VNNI too run `Avx512` unless capped.
    AvxVnni,
    /// AVX2's set plus AVX-512 F/BW and VNNI (Ice Lake, Zen 4 and later).
    Avx512,
}

/// Best first: detection takes the first row this CPU runs, from the capped row on.
#[cfg(target_arch = "x86_64")]
static KERNELS: &[(Isa, KernelSet)] = &[
    (Isa::Avx512, super::avx512::SET),
    (Isa::AvxVnni, super::avx2::SET_VNNI),
    (Isa::Avx2, super::avx2::SET),
    (Isa::Portable, PORTABLE),
];
#[cfg(not(target_arch = "x86_64"))]
static KERNELS: &[(Isa, KernelSet)] = &[(Isa::Portable, PORTABLE)];

/// The portable row: every CPU, matrices in the file layout.
const PORTABLE: KernelSet = KernelSet {
    name: "portable",
    supported: always,
    lanes: Lanes::Scalar,
    packed: None,
    row_dot: super::portable::row_dot,
    rows_dot_m1: None,
    quantize: super::portable::quantize_portable,
};

fn always() -> bool {
    true
}

impl Isa {
    /// Every instruction set with kernels here, best first (whether this CPU runs it or not).
    pub fn all() -> impl Iterator<Item = Isa> {
        KERNELS.iter().map(|(isa, _)| *isa)
    }

    /// The best instruction set this CPU runs (chosen once, at the first call).
    /// `TOLLGATE_ISA=portable`, `TOLLGATE_ISA=avx2` (AVX2 without VNNI) or
    /// `TOLLGATE_ISA=avxvnni` in the environment caps it (for debugging and for running those
    /// paths on a machine with more); an unknown name caps nothing.
    pub fn detect() -> Self {
        static CHOSEN: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *CHOSEN.get_or_init(|| choose(&std::env::var("TOLLGATE_ISA").unwrap_or_default()))
    }

    /// This ISA's row of `KERNELS`.
    pub fn kernels(self) -> &'static KernelSet {
        let (_, set) = KERNELS
            .iter()
            .find(|(isa, _)| *isa == self)
            .unwrap_or(&KERNELS[KERNELS.len() - 1]);
        set
    }

    /// Whether its kernels run on the interleaved layout (`packed.rs`).
    pub fn packs(self) -> bool {
        self.kernels().packed.is_some()
    }

    /// Whether this CPU can run it.
    pub fn supported(self) -> bool {
        KERNELS
            .iter()
            .any(|(isa, set)| *isa == self && (set.supported)())
    }

    /// How wide the float SIMD twins run on it.
    pub fn lanes(self) -> Lanes {
        self.kernels().lanes
    }
}

/// The kernel set chosen at the first call, for the rest of the process (`Isa::detect`).
pub fn selected() -> &'static KernelSet {
    Isa::detect().kernels()
}

/// The first ISA this CPU runs from the row named `cap` on (from the best row when no row has
/// that name); portable when none.
fn choose(cap: &str) -> Isa {
    let from = KERNELS
        .iter()
        .position(|(_, set)| set.name == cap)
        .unwrap_or(0);
    KERNELS[from..]
        .iter()
        .find(|(_, set)| (set.supported)())
        .map_or(Isa::Portable, |(isa, _)| *isa)
}

/// How wide the float SIMD twins run on the chosen set (`selected`).
pub fn lanes() -> Lanes {
    selected().lanes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each `TOLLGATE_ISA` cap takes what it always took: `avx2` the AVX2 row (never VNNI or
    /// AVX-512), `avxvnni` at most AVX-VNNI, `portable` the portable row, nothing the best.
    #[test]
    fn each_cap_selects_its_row_or_the_best_below_it() {
        let best_of = |rows: &[Isa]| {
            rows.iter()
                .copied()
                .find(|i| i.supported())
                .unwrap_or(Isa::Portable)
        };
        assert_eq!(choose("portable"), Isa::Portable);
        assert_eq!(choose("avx2"), best_of(&[Isa::Avx2]));
        assert_eq!(choose("avxvnni"), best_of(&[Isa::AvxVnni, Isa::Avx2]));
        let all = [Isa::Avx512, Isa::AvxVnni, Isa::Avx2];
        assert_eq!(choose(""), best_of(&all));
        assert_eq!(choose("no-such-isa"), best_of(&all));
        for isa in Isa::all() {
            assert_eq!(
                Isa::all().filter(|i| *i == isa).count(),
                1,
                "one row per ISA"
            );
            let lanes = isa.lanes();
            assert_eq!(
                lanes == Lanes::Scalar,
                isa == Isa::Portable,
                "{isa:?}: {lanes:?}"
            );
        }
    }
}
