// Decode attention on the CPU, reading K and V straight from the paged cache
// through each sequence's block table: nothing is gathered into copies.
//
// One task per sequence, shared out over the threads torch uses when the contexts
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

#include "bf16.h"

namespace {

constexpr int64_t TILE = 16;  // tokens scored before their values are summed
constexpr int64_t PARALLEL_ELEMENTS = 1 << 18;  // of K read, at most, by a step
constexpr int64_t SLOT = KV_HEADS * HEAD_DIM;  // one token's K (or V) in the cache
constexpr int LINE = 64;

inline int64_t slot_of(const int32_t* table, int64_t position, int64_t block_size) {
    return int64_t(table[position / block_size]) * block_size + position % block_size;
}

// q and out: the sequence's [KV_HEADS * GROUP, HEAD_DIM] rows.
template <typename T>
void attend_one(const T* q, const T* k_cache, const T* v_cache, const int32_t* table,
                int64_t length, T* out, int64_t block_size, float scale) {
    float query[KV_HEADS][GROUP][HEAD_DIM], acc[KV_HEADS][GROUP][HEAD_DIM];
    float top[KV_HEADS][GROUP], total[KV_HEADS][GROUP], scores[KV_HEADS][GROUP][TILE];
    float row[SLOT];
    int64_t offsets[TILE];
    for (int h = 0; h < KV_HEADS; ++h)
        for (int g = 0; g < GROUP; ++g) {
            for (int d = 0; d < HEAD_DIM; ++d) {
                query[h][g][d] = widen(q[(h * GROUP + g) * HEAD_DIM + d]) * scale;
                acc[h][g][d] = 0.f;
            }
            top[h][g] = -FLT_MAX;
            total[h][g] = 0.f;
        }
    for (int64_t start = 0; start < length; start += TILE) {
        const int64_t count = length - start < TILE ? length - start : TILE;
        for (int64_t t = 0; t < count; ++t) offsets[t] = slot_of(table, start + t, block_size) * SLOT;
        for (int64_t position = start + TILE; position < start + 2 * TILE && position < length;
             ++position) {
            const char* k = reinterpret_cast<const char*>(k_cache + slot_of(table, position, block_size) * SLOT);
            const char* v = reinterpret_cast<const char*>(v_cache + slot_of(table, position, block_size) * SLOT);
            for (int64_t byte = 0; byte < int64_t(SLOT * sizeof(T)); byte += LINE) {
                __builtin_prefetch(k + byte);
                __builtin_prefetch(v + byte);
            }
        }
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
