//! Random input never panics.

use super::*;

/// xorshift64*: reproducible garbage without a dependency.
struct Garbage(u64);

impl Garbage {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// Mostly grammar pieces, so that many inputs get deep into the parser.
    fn string(&mut self) -> String {
        const PIECES: &[&str] = &[
            "cuda",
            "driver",
            "arch",
            "brand",
            "CUDA",
            "=",
            "==",
            "!=",
            "<",
            "<=",
            ">",
            ">=",
            "!",
            ",",
            " ",
            "\t",
            "\n",
            ".",
            "..",
            "0",
            "1",
            "12",
            "535",
            "261",
            "03",
            "99999999999999999999999",
            "tesla",
            "geforce",
            "-",
            "_",
            "v",
            "é",
            "\u{0}",
            "１",
            "\u{2003}",
            "NVIDIA_REQUIRE_",
            "JETPACK",
            "CUDA_VERSION",
            "NVIDIA_DISABLE_REQUIRE",
        ];
        let len = self.below(24);
        let mut s = String::new();
        for _ in 0..len {
            if self.below(8) == 0 {
                let c = char::from_u32(self.next() as u32 % 0x11_0000).unwrap_or('?');
                s.push(c);
            } else {
                s.push_str(PIECES[self.below(PIECES.len())]);
            }
        }
        s
    }
}

#[test]
fn garbage_never_panics() {
    let mut garbage = Garbage(0x9e37_79b9_7f4a_7c15);
    let names = [
        "NVIDIA_REQUIRE_CUDA=",
        "NVIDIA_REQUIRE_X=",
        "CUDA_VERSION=",
        "",
    ];
    let facts = [
        host_535(),
        Facts::default(),
        Facts {
            device: Some(DeviceFacts::default()),
            compat_cuda: Some(CudaVersion(i32::MAX)),
            cuda: Some(CudaVersion(i32::MIN)),
            driver: "99999999999999999999999".into(),
        },
    ];
    let mut parsed = 0;
    for _ in 0..20_000 {
        let entries: Vec<String> = (0..1 + garbage.below(3))
            .map(|_| format!("{}{}", names[garbage.below(names.len())], garbage.string()))
            .collect();
        let Ok(requirements) = Requirements::from_env(&entries) else {
            let err = Requirements::from_env(&entries).unwrap_err();
            assert!(!err.to_string().contains('\n'), "{entries:?}: {err}");
            continue;
        };
        parsed += 1;
        let _ = requirements.needs();
        for facts in &facts {
            if let Err(e) = requirements.check(facts) {
                assert!(!e.to_string().contains('\n'), "{entries:?}: {e}");
            }
        }
    }
    // The generator must reach evaluation, not only the parser's errors.
    assert!(parsed > 2_000, "only {parsed} inputs parsed");
}
