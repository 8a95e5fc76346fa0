// Attention on the CPU, reading K and V straight from the paged cache through
// each row's block table: nothing is gathered into copies. A row is a decoding
// sequence's query, or one token of a prompt being prefilled (its K and V written
// before, its context the prompt up to itself).
//
// One task per row, shared out over the threads torch uses when the contexts
// are large enough to pay for waking them. A task walks its context a tile of
// tokens at a time, each token's slot (every KV head's K, then V, side by side)
// read whole and in order while the next tile's slots are prefetched: reading one
// KV head's part of each slot instead, a task per head, ran at half the speed (the
// reads are scattered blocks, so it is their latency a step waits for). Scores,
// an online softmax and the weighted sum are float32 whatever the cache's dtype.
// KV_HEADS, GROUP (query heads per KV head) and HEAD_DIM are fixed when this is
// compiled, one build per model shape, so that the loops unroll into whole vectors.
//
// Compiled with -ffast-math (vector exp, dot products summed in any order), so
// nothing here may be infinite or NaN: the running maximum starts at -FLT_MAX.

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#include "bf16.h"

namespace {

constexpr int64_t TILE = 16;  // tokens scored before their values are summed
constexpr int64_t PARALLEL_ELEMENTS = 1 << 18;  // of K read, at most, by a step
constexpr int64_t SLOT = KV_HEADS * HEAD_DIM;  // one token's K (or V) in the cache
constexpr int LINE = 64;

// A context walked a tile of tokens at a time: each tile's offsets in the cache
// (in elements), while the next tile's slots are prefetched. Positions advance
// block by block, one division a tile.
template <typename T>
class Tiles {
  public:
    Tiles(const int32_t* table, int64_t length, int64_t block_size, const T* k_cache,
          const T* v_cache)
        : table_(table), length_(length), block_size_(block_size), k_(k_cache), v_(v_cache) {
        fill(upcoming_, 0);
    }

    // Moves to the next tile; false past the context's end.
    bool next() {
        if (start_ + count >= length_) return false;
        start_ += count;
        count = length_ - start_ < TILE ? length_ - start_ : TILE;
        std::memcpy(offsets, upcoming_, sizeof offsets);
        const int64_t after = start_ + count;
        if (after < length_) {
            fill(upcoming_, after);
            const int64_t ahead = length_ - after < TILE ? length_ - after : TILE;
            for (int64_t t = 0; t < ahead; ++t) {
                const char* k = reinterpret_cast<const char*>(k_ + upcoming_[t]);
                const char* v = reinterpret_cast<const char*>(v_ + upcoming_[t]);
                for (int64_t byte = 0; byte < int64_t(SLOT * sizeof(T)); byte += LINE) {
                    __builtin_prefetch(k + byte);
                    __builtin_prefetch(v + byte);
                }
            }
        }
        return true;
    }

    int64_t count = 0;
    int64_t offsets[TILE];

  private:
    void fill(int64_t* out, int64_t start) const {
        int64_t block = start / block_size_, within = start - block * block_size_;
        const int64_t end = length_ - start < TILE ? length_ : start + TILE;
        for (int64_t t = 0; t < end - start; ++t) {
            out[t] = (int64_t(table_[block]) * block_size_ + within) * SLOT;
            if (++within == block_size_) {
                within = 0;
                ++block;
            }
        }
    }

    const int32_t* table_;
    int64_t length_, block_size_;
    const T *k_, *v_;
    int64_t start_ = 0, upcoming_[TILE];
};

// q and out: the sequence's [KV_HEADS * GROUP, HEAD_DIM] rows.
template <typename T>
void attend_one(const T* q, const T* k_cache, const T* v_cache, const int32_t* table,
                int64_t length, T* out, int64_t block_size, float scale) {
    float query[KV_HEADS][GROUP][HEAD_DIM], acc[KV_HEADS][GROUP][HEAD_DIM];
    float top[KV_HEADS][GROUP], total[KV_HEADS][GROUP], scores[KV_HEADS][GROUP][TILE];
    float row[SLOT];
    for (int h = 0; h < KV_HEADS; ++h)
        for (int g = 0; g < GROUP; ++g) {
            for (int d = 0; d < HEAD_DIM; ++d) {
                query[h][g][d] = widen(q[(h * GROUP + g) * HEAD_DIM + d]) * scale;
                acc[h][g][d] = 0.f;
            }
            top[h][g] = -FLT_MAX;
            total[h][g] = 0.f;
        }
    Tiles<T> tiles(table, length, block_size, k_cache, v_cache);
    while (tiles.next()) {
        const int64_t count = tiles.count;
        const int64_t* offsets = tiles.offsets;
        for (int64_t t = 0; t < count; ++t) {
            const T* key = k_cache + offsets[t];
            for (int64_t d = 0; d < SLOT; ++d) row[d] = widen(key[d]);
            for (int h = 0; h < KV_HEADS; ++h)
                for (int g = 0; g < GROUP; ++g) {
                    float dot = 0.f;
                    for (int d = 0; d < HEAD_DIM; ++d) dot += query[h][g][d] * row[h * HEAD_DIM + d];
                    scores[h][g][t] = dot;
                }
        }
        for (int h = 0; h < KV_HEADS; ++h)
            for (int g = 0; g < GROUP; ++g) {
                float high = top[h][g];
                for (int64_t t = 0; t < count; ++t) high = scores[h][g][t] > high ? scores[h][g][t] : high;
                const float rescale = std::exp(top[h][g] - high);
                float sum = 0.f;
                for (int64_t t = 0; t < count; ++t) {
                    scores[h][g][t] = std::exp(scores[h][g][t] - high);
                    sum += scores[h][g][t];
                }
                total[h][g] = total[h][g] * rescale + sum;
                for (int d = 0; d < HEAD_DIM; ++d) acc[h][g][d] *= rescale;
                top[h][g] = high;
            }
        for (int64_t t = 0; t < count; ++t) {
            const T* value = v_cache + offsets[t];
            for (int64_t d = 0; d < SLOT; ++d) row[d] = widen(value[d]);
            for (int h = 0; h < KV_HEADS; ++h)
                for (int g = 0; g < GROUP; ++g)
                    for (int d = 0; d < HEAD_DIM; ++d) acc[h][g][d] += scores[h][g][t] * row[h * HEAD_DIM + d];
        }
    }
    for (int h = 0; h < KV_HEADS; ++h)
        for (int g = 0; g < GROUP; ++g)
            for (int d = 0; d < HEAD_DIM; ++d)
                store(acc[h][g][d] / total[h][g], out + (h * GROUP + g) * HEAD_DIM + d);
}

#if defined(__AVX512BF16__) && HEAD_DIM % 32 == 0
// bf16 on a CPU with AVX-512 bf16: a query and a key meet in `vdpbf16ps`, 32 of
// their pairs a call, each product exact in float32 and summed there, so the score
// is the generic loop's up to the order of its sums (and `scale` applied to the sum
// rather than to the query); nothing is widened first. The weighted sum of the
// values stays float32, a head's accumulators held in registers across its tile.
constexpr int PAIRS = HEAD_DIM / 32;  // vectors of 32 bf16 in a head
constexpr int LANES = HEAD_DIM / 16;  // vectors of 16 float32 in a head

inline __m512 widen16(const uint16_t* x) {
    const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

// The sums of 16 vectors, one lane each: `parts[s]` holds the lanes of the sum
// that lands in lane `transposed(s)`. Four rounds of swaps and adds, 45 operations
// where a reduction of each vector alone takes about 8 apiece.
constexpr int transposed(int s) { return 4 * (s % 4) + s / 4; }

inline __m512 sums16(const __m512* parts) {
    __m512 b[8], c[4], d[2];
    for (int k = 0; k < 8; ++k)  // quarters 0-1 hold parts[2k]'s halves summed, 2-3 parts[2k+1]'s
        b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(parts[2 * k], parts[2 * k + 1], 0x44),
                             _mm512_shuffle_f32x4(parts[2 * k], parts[2 * k + 1], 0xEE));
    for (int k = 0; k < 4; ++k)  // quarter i holds parts[4k+i]'s quarters summed
        c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0x88),
                             _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0xDD));
    for (int k = 0; k < 2; ++k)
        d[k] = _mm512_add_ps(_mm512_unpacklo_ps(c[2 * k], c[2 * k + 1]),
                             _mm512_unpackhi_ps(c[2 * k], c[2 * k + 1]));
    return _mm512_add_ps(
        _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(d[0]), _mm512_castps_pd(d[1]))),
        _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(d[0]), _mm512_castps_pd(d[1]))));
}

inline void attend_one(const uint16_t* q, const uint16_t* k_cache, const uint16_t* v_cache,
                       const int32_t* table, int64_t length, uint16_t* out, int64_t block_size,
                       float scale) {
    __m512bh query[KV_HEADS][GROUP][PAIRS];
    __m512 acc[KV_HEADS][GROUP][LANES];
    alignas(64) float scores[KV_HEADS][GROUP][TILE];
    float top[KV_HEADS][GROUP], total[KV_HEADS][GROUP];
    __m512 dots[KV_HEADS][GROUP][TILE];  // a tile's scores, each before its lanes are summed
    for (int h = 0; h < KV_HEADS; ++h)
        for (int g = 0; g < GROUP; ++g) {
            for (int c = 0; c < PAIRS; ++c)
                query[h][g][c] = (__m512bh)_mm512_loadu_si512(q + (h * GROUP + g) * HEAD_DIM + c * 32);
            for (int l = 0; l < LANES; ++l) acc[h][g][l] = _mm512_setzero_ps();
            top[h][g] = -FLT_MAX;
            total[h][g] = 0.f;
        }
    Tiles<uint16_t> tiles(table, length, block_size, k_cache, v_cache);
    while (tiles.next()) {
        const int64_t count = tiles.count;
        const int64_t* offsets = tiles.offsets;
        for (int64_t t = 0; t < count; ++t) {
            const uint16_t* key = k_cache + offsets[t];
            for (int h = 0; h < KV_HEADS; ++h) {
                __m512bh k[PAIRS];
                for (int c = 0; c < PAIRS; ++c)
                    k[c] = (__m512bh)_mm512_loadu_si512(key + h * HEAD_DIM + c * 32);
                for (int g = 0; g < GROUP; ++g) {
                    __m512 dot = _mm512_setzero_ps();
                    for (int c = 0; c < PAIRS; ++c) dot = _mm512_dpbf16_ps(dot, query[h][g][c], k[c]);
                    dots[h][g][transposed(t)] = dot;
                }
            }
        }
        // a short last tile sums zeros past its count, never read
        for (int64_t t = count; t < TILE; ++t)
            for (int h = 0; h < KV_HEADS; ++h)
                for (int g = 0; g < GROUP; ++g) dots[h][g][transposed(int(t))] = _mm512_setzero_ps();
        // The softmax a whole tile at a time, one vector exp for its 16 scores: lanes
        // past a short tile's count are set 80 below the maximum, whose exp (about
        // 1e-35, a normal float) adds nothing to a sum of at least 1 and is never
        // multiplied by a value.
        const __mmask16 valid = __mmask16((1u << count) - 1);
        const __m512 by = _mm512_set1_ps(scale), far = _mm512_set1_ps(-80.f);
        for (int h = 0; h < KV_HEADS; ++h)
            for (int g = 0; g < GROUP; ++g) {
                const __m512 dot = _mm512_mul_ps(sums16(dots[h][g]), by);
                const float most = _mm512_mask_reduce_max_ps(valid, dot);
                const float high = most > top[h][g] ? most : top[h][g];
                const float rescale = std::exp(top[h][g] - high);
                float* p = scores[h][g];
                _mm512_store_ps(p, _mm512_mask_sub_ps(far, valid, dot, _mm512_set1_ps(high)));
#pragma omp simd aligned(p : 64)
                for (int t = 0; t < TILE; ++t) p[t] = std::exp(p[t]);
                total[h][g] = total[h][g] * rescale + _mm512_reduce_add_ps(_mm512_load_ps(p));
                const __m512 shrink = _mm512_set1_ps(rescale);
                for (int l = 0; l < LANES; ++l) acc[h][g][l] = _mm512_mul_ps(acc[h][g][l], shrink);
                top[h][g] = high;
            }
        for (int h = 0; h < KV_HEADS; ++h)
            for (int64_t t = 0; t < count; ++t) {
                const uint16_t* value = v_cache + offsets[t] + h * HEAD_DIM;
                __m512 v[LANES];
                for (int l = 0; l < LANES; ++l) v[l] = widen16(value + l * 16);
                for (int g = 0; g < GROUP; ++g) {
                    const __m512 p = _mm512_set1_ps(scores[h][g][t]);
                    for (int l = 0; l < LANES; ++l) acc[h][g][l] = _mm512_fmadd_ps(p, v[l], acc[h][g][l]);
                }
            }
    }
    for (int h = 0; h < KV_HEADS; ++h)
        for (int g = 0; g < GROUP; ++g) {
            const __m512 by = _mm512_set1_ps(total[h][g]);
            for (int l = 0; l < LANES; ++l)  // rounded to nearest even, as `store` rounds
                _mm256_storeu_si256(
                    reinterpret_cast<__m256i*>(out + (h * GROUP + g) * HEAD_DIM + l * 16),
                    (__m256i)_mm512_cvtneps_pbh(_mm512_div_ps(acc[h][g][l], by)));
        }
}
#endif

// q and out [seqs, KV_HEADS * GROUP, HEAD_DIM], caches [blocks, block_size, KV_HEADS,
// HEAD_DIM], tables [seqs, width] (int32), lengths [seqs] (int32, each at least 1);
// all contiguous.
template <typename T>
void attend(const T* q, const T* k_cache, const T* v_cache, const int32_t* tables,
            int64_t width, const int32_t* lengths, T* out, int64_t seqs, int64_t block_size,
            float scale, int threads) {
    constexpr int64_t stride = KV_HEADS * GROUP * HEAD_DIM;
    const bool large = seqs * width * block_size * SLOT >= PARALLEL_ELEMENTS;
#pragma omp parallel for schedule(dynamic) if (large) num_threads(threads)
    for (int64_t s = 0; s < seqs; ++s)
        attend_one(q + s * stride, k_cache, v_cache, tables + s * width, lengths[s],
                   out + s * stride, block_size, scale);
}

}  // namespace

extern "C" {

void paged_decode_float32(const float* q, const float* k_cache, const float* v_cache,
                          const int32_t* tables, int64_t width, const int32_t* lengths,
                          float* out, int64_t seqs, int64_t block_size, float scale,
                          int threads) {
    attend(q, k_cache, v_cache, tables, width, lengths, out, seqs, block_size, scale, threads);
}

void paged_decode_bfloat16(const uint16_t* q, const uint16_t* k_cache, const uint16_t* v_cache,
                           const int32_t* tables, int64_t width, const int32_t* lengths,
                           uint16_t* out, int64_t seqs, int64_t block_size, float scale,
                           int threads) {
    attend(q, k_cache, v_cache, tables, width, lengths, out, seqs, block_size, scale, threads);
}

}
