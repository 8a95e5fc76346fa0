// The elementwise steps of a Llama layer on the CPU, each one pass over its rows
// instead of the handful of torch ops (and their temporaries) it takes in eager
// mode. Every step rounds where transformers' bf16 forward rounds (the norm
// before its weight, each product and sum of the rotation, the activation before
// the gate's product), so bf16 results are its own; arithmetic is float32.
//
// Compiled with -ffast-math (vector exp, sums in any order): inputs must be finite.
// The loops over a row are marked `omp simd`: the compiler cannot see that a row's
// input and output never overlap, and would not vectorize them otherwise.
// Rows are shared out over torch's threads only from PARALLEL_ELEMENTS elements
// (SmolLM2: 43 rows of its activation, 114 of its hidden state): below, waking the
// others costs more than it saves (its activation at 128 rows: 109 us on two
// threads, 165 on one).

#include <cmath>
#include <cstdint>
#include <cstring>

#include "bf16.h"

namespace {

constexpr int64_t PARALLEL_ELEMENTS = 1 << 16;

template <typename T>
void norm_row(const T* x, const T* weight, T* out, int64_t width, float eps) {
    float squares = 0.f;
    for (int64_t i = 0; i < width; ++i) squares += widen(x[i]) * widen(x[i]);
    const float scale = 1.f / std::sqrt(squares / float(width) + eps);
#pragma omp simd
    for (int64_t i = 0; i < width; ++i)
        store(widen(weight[i]) * round_to(widen(x[i]) * scale, T{}), out + i);
}

// out = weight * round(x / rms(x)), row by row: Llama's RMSNorm.
template <typename T>
void rms_norm(const T* x, const T* weight, T* out, int64_t rows, int64_t width, float eps,
              int threads) {
#pragma omp parallel for if (rows * width >= PARALLEL_ELEMENTS) num_threads(threads)
    for (int64_t r = 0; r < rows; ++r) norm_row(x + r * width, weight, out + r * width, width, eps);
}

// residual += delta, then out = rms_norm(residual): a residual connection and the
// norm that reads it, in one pass.
template <typename T>
void add_rms_norm(T* residual, const T* delta, const T* weight, T* out, int64_t rows,
                  int64_t width, float eps, int threads) {
#pragma omp parallel for if (rows * width >= PARALLEL_ELEMENTS) num_threads(threads)
    for (int64_t r = 0; r < rows; ++r) {
        T* row = residual + r * width;
        const T* add = delta + r * width;
#pragma omp simd
        for (int64_t i = 0; i < width; ++i) store(widen(row[i]) + widen(add[i]), row + i);
        norm_row(row, weight, out + r * width, width, eps);
    }
}

// x = x * cos + rotate_half(x) * sin in place, for `heads` heads of `dim` in each
// row (`row_stride` apart); cos and sin `[rows, dim]`.
template <typename T>
void rotate(T* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t dim, const T* cos,
            const T* sin, int threads) {
    const int64_t half = dim / 2;
#pragma omp parallel for if (rows * heads * dim >= PARALLEL_ELEMENTS) num_threads(threads)
    for (int64_t r = 0; r < rows; ++r) {
        const T* c = cos + r * dim;
        const T* s = sin + r * dim;
        for (int64_t h = 0; h < heads; ++h) {
            T* v = x + r * row_stride + h * dim;
#pragma omp simd
            for (int64_t i = 0; i < half; ++i) {
                const float a = widen(v[i]), b = widen(v[i + half]);
                const float first = round_to(a * widen(c[i]), T{}) + round_to(-b * widen(s[i]), T{});
                const float second = round_to(b * widen(c[i + half]), T{})
                                     + round_to(a * widen(s[i + half]), T{});
                store(first, v + i);
                store(second, v + i + half);
            }
        }
    }
}

// out = round(silu(gate)) * up, with gate and up the two halves of each row of
// `gate_up` ([rows, 2 * width]): the gated MLP's activation.
template <typename T>
void silu_mul(const T* gate_up, T* out, int64_t rows, int64_t width, int threads) {
#pragma omp parallel for if (rows * width >= PARALLEL_ELEMENTS) num_threads(threads)
    for (int64_t r = 0; r < rows; ++r) {
        const T* gate = gate_up + r * 2 * width;
        const T* up = gate + width;
        T* o = out + r * width;
#pragma omp simd
        for (int64_t i = 0; i < width; ++i) {
            const float g = widen(gate[i]);
            store(round_to(g / (1.f + std::exp(-g)), T{}) * widen(up[i]), o + i);
        }
    }
}

}  // namespace

#define LAYER_OPS(NAME, T)                                                                    \
    void rms_norm_##NAME(const T* x, const T* weight, T* out, int64_t rows, int64_t width,  \
                         float eps, int threads) {                                          \
        rms_norm(x, weight, out, rows, width, eps, threads);                                 \
    }                                                                                         \
    void add_rms_norm_##NAME(T* residual, const T* delta, const T* weight, T* out,          \
                             int64_t rows, int64_t width, float eps, int threads) {         \
        add_rms_norm(residual, delta, weight, out, rows, width, eps, threads);               \
    }                                                                                         \
    void rotate_##NAME(T* x, int64_t rows, int64_t row_stride, int64_t heads, int64_t dim,  \
                       const T* cos, const T* sin, int threads) {                           \
        rotate(x, rows, row_stride, heads, dim, cos, sin, threads);                          \
    }                                                                                         \
    void silu_mul_##NAME(const T* gate_up, T* out, int64_t rows, int64_t width, int threads) { \
        silu_mul(gate_up, out, rows, width, threads);                                        \
    }

extern "C" {
LAYER_OPS(float32, float)
LAYER_OPS(bfloat16, uint16_t)
}
