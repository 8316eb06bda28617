//! Dynamic chunk sizing (SGLang, pipeline parallelism): later chunks of a long prompt
//! attend to a longer history, so they are made smaller to keep every chunk's latency at
//! the first chunk's. The latency model `f(l) = a·l² + b·l + c` is fitted by the engine's
//! profiling (or [`ChunkSizePredictor::fit`]).

/// Predicts the next chunk size from the tokens already prefilled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ChunkSizePredictor {
    /// Quadratic coefficient (must be positive).
    pub a: f64,
    /// Linear coefficient (clamped to ≥ 0).
    pub b: f64,
    /// The configured chunk size, whose latency is the target.
    pub base_chunk: u64,
    /// Tokens per KV page.
    pub page_size: u64,
    /// The model's context length.
    pub context_len: u64,
    /// `max_prefill_tokens`.
    pub max_prefill_tokens: u64,
    /// `SGLANG_DYNAMIC_CHUNKING_SMOOTH_FACTOR` (0.75).
    pub smooth: f64,
}

impl ChunkSizePredictor {
    /// Least-squares fit of `(length, latency)` samples. `None` with fewer than 8 samples
    /// or a non-positive quadratic term (SGLang then keeps fixed chunks).
    pub fn fit(samples: &[(f64, f64)]) -> Option<(f64, f64, f64)> {
        if samples.len() < 8 {
            return None;
        }
        // Normal equations for [l², l, 1].
        let mut m = [[0f64; 4]; 3];
        for &(l, t) in samples {
            let row = [l * l, l, 1.0];
            for i in 0..3 {
                for j in 0..3 {
                    m[i][j] += row[i] * row[j];
                }
                m[i][3] += row[i] * t;
            }
        }
        for col in 0..3 {
            let pivot = (col..3).max_by(|&x, &y| m[x][col].abs().total_cmp(&m[y][col].abs()))?;
            m.swap(col, pivot);
            if m[col][col].abs() < 1e-300 {
                return None;
            }
            let pivot_row = m[col];
            for (row, values) in m.iter_mut().enumerate() {
                if row != col {
                    let f = values[col] / pivot_row[col];
                    for (x, p) in values.iter_mut().zip(pivot_row).skip(col) {
                        *x -= f * p;
                    }
                }
            }
        }
        let (a, b, c) = (m[0][3] / m[0][0], m[1][3] / m[1][1], m[2][3] / m[2][2]);
        (a > 0.0).then_some((a, b.max(0.0), c))
    }

    /// The next chunk for a request with `history` tokens prefilled, or `None` when it
    /// would be smaller than the alignment (SGLang then uses the fixed chunk).
    pub fn predict(&self, history: u64) -> Option<u64> {
        let (a, b) = (self.a, self.b.max(0.0));
        if a <= 0.0 {
            return None;
        }
        let base = self.base_chunk as f64;
        let target = a * base * base + b * base; // f(chunk) − f(0)
        let lin = 2.0 * a * history as f64 + b;
        let x = (-lin + (lin * lin + 4.0 * a * target).sqrt()) / (2.0 * a);
        let smoothed = (base + self.smooth * (x - base)).max(base / 4.0);
        let align = self.page_size.max(64);
        let cap = self
            .context_len
            .saturating_sub(history.saturating_add(100))
            .min(self.max_prefill_tokens);
        let size = ((smoothed as u64) / align * align).min(cap) / align * align;
        (size >= align).then_some(size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn predictor(a: f64, b: f64) -> ChunkSizePredictor {
        ChunkSizePredictor {
            a,
            b,
            base_chunk: 8192,
            page_size: 16,
            context_len: 131_072,
            max_prefill_tokens: 16384,
            smooth: 0.75,
        }
    }

    #[test]
    fn first_chunk_keeps_the_base_size_and_later_ones_shrink() {
        let p = predictor(1e-6, 0.01);
        assert_eq!(p.predict(0), Some(8192));
        let later = p.predict(65_536).unwrap();
        assert!(later < 8192 && later.is_multiple_of(64), "{later}");
        assert!(p.predict(131_000).is_none(), "no room left in the context");
        // Floor: never below a quarter of the base chunk.
        assert!(predictor(1.0, 0.0)
            .predict(1_000_000)
            .is_none_or(|s| s >= 2048));
    }

    #[test]
    fn fit_recovers_a_quadratic() {
        let samples: Vec<(f64, f64)> = (1..=10)
            .map(|i| {
                let l = i as f64 * 1000.0;
                (l, 2e-6 * l * l + 0.03 * l + 5.0)
            })
            .collect();
        let (a, b, c) = ChunkSizePredictor::fit(&samples).unwrap();
        assert!((a - 2e-6).abs() < 1e-9 && (b - 0.03).abs() < 1e-5 && (c - 5.0).abs() < 1e-2);
        assert!(ChunkSizePredictor::fit(&samples[..7]).is_none());
        let linear: Vec<(f64, f64)> = (1..=10).map(|i| (i as f64, 3.0 * i as f64)).collect();
        assert!(ChunkSizePredictor::fit(&linear).is_none());
    }
}
