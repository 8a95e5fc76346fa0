// Greedy picks on the CPU: the index of each row's largest logit, the first of
// equals (as torch's argmax). One pass over the row in float32 lanes; torch's own
// max over dim on bf16 logits takes several times as long.
//
// Compiled with -ffast-math: logits must be finite.

#include <cstdint>
#include <cstring>

#include "bf16.h"

namespace {

constexpr int64_t LANES = 16;
// Rows are shared out over torch's threads from this many logits (SmolLM2: 6
// rows): a decode step of 128 rows picked in 2.1 to 2.8 ms on one thread, 1.5 to
// 1.8 on two.
constexpr int64_t PARALLEL_LOGITS = 1 << 18;

template <typename T>
int64_t first_max(const T* row, int64_t vocab) {
    // Each lane keeps the largest it has seen and where; a later equal never
    // replaces it, so each lane holds its first maximum, and the lanes' ties are
    // settled by index.
    float best[LANES];
    int64_t at[LANES];
    for (int64_t l = 0; l < LANES; ++l) {
        best[l] = l < vocab ? widen(row[l]) : widen(row[0]);
        at[l] = l < vocab ? l : 0;
    }
    int64_t i = LANES;
    for (; i + LANES <= vocab; i += LANES)
#pragma omp simd
        for (int64_t l = 0; l < LANES; ++l) {
            const float x = widen(row[i + l]);
            const bool larger = x > best[l];
            best[l] = larger ? x : best[l];
            at[l] = larger ? i + l : at[l];
        }
    for (; i < vocab; ++i)
        if (widen(row[i]) > best[0]) best[0] = widen(row[i]), at[0] = i;
    int64_t pick = at[0];
    float top = best[0];
    for (int64_t l = 1; l < LANES; ++l)
        if (best[l] > top || (best[l] == top && at[l] < pick)) top = best[l], pick = at[l];
    return pick;
}

template <typename T>
void greedy(const T* logits, int64_t rows, int64_t vocab, int64_t* out, int threads) {
#pragma omp parallel for if (rows * vocab >= PARALLEL_LOGITS) num_threads(threads)
    for (int64_t r = 0; r < rows; ++r) out[r] = first_max(logits + r * vocab, vocab);
}

}  // namespace

extern "C" {

void greedy_float32(const float* logits, int64_t rows, int64_t vocab, int64_t* out,
                    int threads) {
    greedy(logits, rows, vocab, out, threads);
}

void greedy_bfloat16(const uint16_t* logits, int64_t rows, int64_t vocab, int64_t* out,
                     int threads) {
    greedy(logits, rows, vocab, out, threads);
}

}
