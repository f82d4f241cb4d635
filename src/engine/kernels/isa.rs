//! Which instruction set the kernels run on: `Isa`, its detection on this CPU (once, capped by
//! `TOLLGATE_ISA`), and what each set implies (`packs`, `has_avx2`). Owns nothing else; uses
//! `std` only. The kernels (`mod.rs` and the per-ISA files) and other modules with SIMD paths
//! (attention, SwiGLU) ask it which path to take.

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

impl Isa {
    /// Whether this set includes AVX2 + FMA + F16C (the AVX2 paths of other modules, such as
    /// attention, run on it).
    pub fn has_avx2(self) -> bool {
        matches!(self, Self::Avx2 | Self::AvxVnni | Self::Avx512)
    }

    /// The best instruction set this CPU runs (checked once). `TOLLGATE_ISA=portable`,
    /// `TOLLGATE_ISA=avx2` (AVX2 without VNNI) or `TOLLGATE_ISA=avxvnni` in the environment
    /// caps it (for debugging and for running those paths on a machine with more).
    pub fn detect() -> Self {
        static BEST: std::sync::OnceLock<Isa> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            let cap = std::env::var("TOLLGATE_ISA").unwrap_or_default();
            let order: &[Isa] = match cap.as_str() {
                "portable" => &[],
                "avx2" => &[Isa::Avx2],
                "avxvnni" => &[Isa::AvxVnni, Isa::Avx2],
                _ => &[Isa::Avx512, Isa::AvxVnni, Isa::Avx2],
            };
            order
                .iter()
                .copied()
                .find(|i| i.supported())
                .unwrap_or(Isa::Portable)
        })
    }

    /// Whether its kernels run on the interleaved layout (`packed.rs`): every SIMD one does,
    /// for every type.
    pub fn packs(self) -> bool {
        match self {
            Self::Avx512 | Self::AvxVnni | Self::Avx2 => true,
            Self::Portable => false,
        }
    }

    /// Whether this CPU can run it.
    pub fn supported(self) -> bool {
        match self {
            Self::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Self::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Self::AvxVnni => Self::Avx2.supported() && is_x86_feature_detected!("avxvnni"),
            #[cfg(target_arch = "x86_64")]
            Self::Avx512 => {
                Self::Avx2.supported()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            Self::Avx2 | Self::AvxVnni | Self::Avx512 => false,
        }
    }
}
