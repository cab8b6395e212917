// The compiled functional pass's data movement and matrix chains (emulator/_functional_core.pyx).
//
// A bank's byte stream (HARDWARE.md): line i of a virtual bank of `col` physical banks from
// b0 lives in physical bank b0 + i % col, SRAM row i / col. `base` below is the core's SRAM
// at bank b0 (mem + b0 * rb); `row_stride` the bytes from one SRAM row to the next.
//
// A chain is `emulator.machine.Machine._matmul`'s deferred run of matmuls into one C region:
// the operands side by side (here widened to int16), applied as one product when the bank is
// next touched. int8 x int8 products summed in int32 with wraparound are the exact sum mod
// 2**32 in any order, so the bits are the Python model's (its float32 BLAS slices summed in
// int32).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace fk {

struct Chain {
    long c_start = 0, M = 0, N = 0, k = 0;  // C's first stream byte, its shape, the K terms gathered
    bool acc = false;
    long cap = 0;  // columns of a and b
    std::vector<int16_t> a, b;  // M x cap, N x cap
};

// The line-by-line map of a stream range [start, start + n) (start and n whole lines) onto
// the bank's rows; f(pointer to the line in SRAM, offset in the range).
template <class F>
static inline void for_lines(uint8_t* base, long row_stride, long rb, long col, long start, long n, F f) {
    long line = start / rb, end = (start + n) / rb;
    for (long off = 0; line < end; ++line, off += rb)
        f(base + (line / col) * row_stride + (line % col) * rb, off);
}

// Rows r of `nrows` (the last `last` lines, the others `col`) between DRAM at addr + r * stride
// and the bank's rows (lines of a row are adjacent in SRAM).
static inline void dma_rows(uint8_t* base, long row_stride, long rb, long col, uint8_t* dram, long stride,
                            long nrows, long last, bool into_bank) {
    for (long r = 0; r < nrows; ++r) {
        long bytes = (r + 1 < nrows ? col : last) * rb;
        if (into_bank)
            std::memcpy(base + r * row_stride, dram + r * stride, bytes);
        else
            std::memcpy(dram + r * stride, base + r * row_stride, bytes);
    }
}

// 16 int8 to int16 (sign-extended): the usual line, in two SSE2 stores.
static inline void widen16(int16_t* __restrict o, const int8_t* __restrict s) {
#if defined(__SSE2__)
    __m128i x = _mm_loadu_si128((const __m128i*)s);
    _mm_storeu_si128((__m128i*)o, _mm_srai_epi16(_mm_unpacklo_epi8(x, x), 8));
    _mm_storeu_si128((__m128i*)(o + 8), _mm_srai_epi16(_mm_unpackhi_epi8(x, x), 8));
#else
    for (int q = 0; q < 16; ++q) o[q] = s[q];
#endif
}

// Copy `rows` x K int8 operand bytes from the stream at `start` into columns k0 .. k0 + K of
// out (rows x cap int16). K and start are whole lines.
static inline void gather(int16_t* out, long cap, long rows, long K, long k0, uint8_t* base, long row_stride,
                          long rb, long col, long start) {
    long lines = K / rb, line = start / rb;
    for (long i = 0; i < rows; ++i) {
        int16_t* o = out + i * cap + k0;
        for (long j = 0; j < lines; ++j, ++line, o += rb) {
            const int8_t* s = (const int8_t*)(base + (line / col) * row_stride + (line % col) * rb);
            if (rb == 16)
                widen16(o, s);
            else
                for (long q = 0; q < rb; ++q) o[q] = s[q];
        }
    }
}

#define FK_PRODUCT_BODY                                                          \
    for (long i = 0; i < M; ++i) {                                               \
        const int16_t* ar = a + i * cap;                                         \
        for (long j = 0; j < N; ++j) {                                           \
            const int16_t* br = b + j * cap;                                     \
            int32_t s = 0;                                                       \
            for (long k = 0; k < K; ++k) s += (int32_t)ar[k] * (int32_t)br[k];   \
            p[i * N + j] = s;                                                    \
        }                                                                        \
    }

static void product_generic(int32_t* p, const int16_t* a, const int16_t* b, long cap, long M, long N, long K) {
    FK_PRODUCT_BODY
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

__attribute__((target("avx2"))) static inline int32_t hsum8(__m256i v) {
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4E));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xB1));
    return _mm_cvtsi128_si32(x);
}

// Four columns of B at a time against one row of A (each A load used four times), 16 terms
// a step (vpmaddwd: pairs of int16 products summed into int32), the tail scalar.
__attribute__((target("avx2"))) static void product_avx2(int32_t* p, const int16_t* a, const int16_t* b, long cap,
                                                         long M, long N, long K) {
    long K16 = K & ~15L;
    for (long i = 0; i < M; ++i) {
        const int16_t* ar = a + i * cap;
        long j = 0;
        for (; j + 4 <= N; j += 4) {
            const int16_t* b0 = b + j * cap;
            const int16_t* b1 = b0 + cap;
            const int16_t* b2 = b1 + cap;
            const int16_t* b3 = b2 + cap;
            __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
            for (long k = 0; k < K16; k += 16) {
                __m256i x = _mm256_loadu_si256((const __m256i*)(ar + k));
                s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(x, _mm256_loadu_si256((const __m256i*)(b0 + k))));
                s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(x, _mm256_loadu_si256((const __m256i*)(b1 + k))));
                s2 = _mm256_add_epi32(s2, _mm256_madd_epi16(x, _mm256_loadu_si256((const __m256i*)(b2 + k))));
                s3 = _mm256_add_epi32(s3, _mm256_madd_epi16(x, _mm256_loadu_si256((const __m256i*)(b3 + k))));
            }
            int32_t r0 = hsum8(s0), r1 = hsum8(s1), r2 = hsum8(s2), r3 = hsum8(s3);
            for (long k = K16; k < K; ++k) {
                r0 += (int32_t)ar[k] * b0[k];
                r1 += (int32_t)ar[k] * b1[k];
                r2 += (int32_t)ar[k] * b2[k];
                r3 += (int32_t)ar[k] * b3[k];
            }
            p[i * N + j] = r0;
            p[i * N + j + 1] = r1;
            p[i * N + j + 2] = r2;
            p[i * N + j + 3] = r3;
        }
        for (; j < N; ++j) {
            const int16_t* br = b + j * cap;
            int32_t s = 0;
            for (long k = 0; k < K; ++k) s += (int32_t)ar[k] * (int32_t)br[k];
            p[i * N + j] = s;
        }
    }
}
// AVX-512 VNNI: two rows of A against four columns of B (6 loads for 8 products), 32 terms a
// step, each vpdpwssd summing pairs of int16 products into int32 lanes with wraparound (the
// non-saturating form), the tail below 32 terms scalar. 3-4x the AVX2 kernel on the Llama
// layer's chains; the same sums mod 2**32 in another order: the same bits.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // gcc 12's own _mm512_reduce_add_epi32
__attribute__((target("avx512f,avx512vnni"))) static void product_vnni(int32_t* p, const int16_t* a,
                                                                       const int16_t* b, long cap, long M,
                                                                       long N, long K) {
    long K32 = K & ~31L;
    for (long i = 0; i < M; i += 2) {
        bool two = i + 1 < M;
        const int16_t* a0 = a + i * cap;
        const int16_t* a1 = two ? a0 + cap : a0;  // one row left: computed twice, kept once
        long j = 0;
        for (; j + 4 <= N; j += 4) {
            const int16_t* bj[4] = {b + j * cap, b + (j + 1) * cap, b + (j + 2) * cap, b + (j + 3) * cap};
            __m512i s0[4], s1[4];
            for (int q = 0; q < 4; ++q) s0[q] = s1[q] = _mm512_setzero_si512();
            for (long k = 0; k < K32; k += 32) {
                __m512i x0 = _mm512_loadu_si512((const void*)(a0 + k));
                __m512i x1 = _mm512_loadu_si512((const void*)(a1 + k));
                for (int q = 0; q < 4; ++q) {
                    __m512i y = _mm512_loadu_si512((const void*)(bj[q] + k));
                    s0[q] = _mm512_dpwssd_epi32(s0[q], x0, y);
                    s1[q] = _mm512_dpwssd_epi32(s1[q], x1, y);
                }
            }
            for (int q = 0; q < 4; ++q) {
                int32_t r0 = _mm512_reduce_add_epi32(s0[q]), r1 = _mm512_reduce_add_epi32(s1[q]);
                for (long k = K32; k < K; ++k) {
                    r0 += (int32_t)a0[k] * bj[q][k];
                    r1 += (int32_t)a1[k] * bj[q][k];
                }
                p[i * N + j + q] = r0;
                if (two)
                    p[(i + 1) * N + j + q] = r1;
            }
        }
        for (; j < N; ++j) {
            const int16_t* br = b + j * cap;
            int32_t r0 = 0, r1 = 0;
            for (long k = 0; k < K; ++k) {
                r0 += (int32_t)a0[k] * br[k];
                r1 += (int32_t)a1[k] * br[k];
            }
            p[i * N + j] = r0;
            if (two)
                p[(i + 1) * N + j] = r1;
        }
    }
}
#pragma GCC diagnostic pop
static bool cpu_has_vnni() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni");
}
static const bool have_vnni = cpu_has_vnni();
static bool cpu_has_avx2() {
    __builtin_cpu_init();  // the CPU model before asking it (safe in a static initializer)
    return __builtin_cpu_supports("avx2");
}
static const bool have_avx2 = cpu_has_avx2();
#else
static const bool have_avx2 = false;
static const bool have_vnni = false;
#define product_avx2 product_generic
#define product_vnni product_generic
#endif

// The VNNI kernel unless DSE_EMULATOR_NO_VNNI is set (read once, at load): the AVX2 one stays
// reachable on a VNNI machine, for the tests and the benchmark's side-by-side figures.
static const bool use_vnni = have_vnni && !std::getenv("DSE_EMULATOR_NO_VNNI");

// p (M x N int32) = a @ b.T over K terms, wrapped to 32 bits (-fwrapv: signed sums wrap).
static inline void product(int32_t* p, const int16_t* a, const int16_t* b, long cap, long M, long N, long K) {
    if (use_vnni)
        product_vnni(p, a, b, cap, M, N, K);
    else if (have_avx2)
        product_avx2(p, a, b, cap, M, N, K);
    else
        product_generic(p, a, b, cap, M, N, K);
}

// A bank's pending chains, and finished ones kept for their buffers (a loop of like chains
// then allocates nothing); `kcap`, the terms of its last chain: the next chain's starting
// width (as `Machine._matmul`'s hint), so that its buffers need not grow while it gathers.
struct BankChains {
    std::vector<Chain> live, spare;
    long kcap = 0;
};

static inline size_t pending(const BankChains& bc) { return bc.live.size(); }

// Apply a bank's chains in order: C = (C if acc else 0) + product, in int32.
static void flush(BankChains& bc, std::vector<int32_t>& scratch, uint8_t* base, long row_stride, long rb,
                  long col) {
    for (Chain& ch : bc.live) {
        long cells = ch.M * ch.N;
        scratch.resize(cells);
        int32_t* p = scratch.data();
        product(p, ch.a.data(), ch.b.data(), ch.cap, ch.M, ch.N, ch.k);
        bc.kcap = ch.k;
        uint8_t* pb = (uint8_t*)p;
        bool acc = ch.acc;
        for_lines(base, row_stride, rb, col, ch.c_start, cells * 4, [&](uint8_t* line, long off) {
            if (acc) {
                for (long q = 0; q < rb; q += 4) {
                    uint32_t old, add;
                    std::memcpy(&old, line + q, 4);
                    std::memcpy(&add, pb + off + q, 4);
                    old += add;
                    std::memcpy(line + q, &old, 4);
                }
            } else {
                std::memcpy(line, pb + off, rb);
            }
        });
    }
    for (Chain& ch : bc.live) bc.spare.push_back(std::move(ch));
    bc.live.clear();
}

// Operand buffers past this many bytes start at one op's K and double (`_CHAIN_HINT_BYTES`).
static const long HINT_BYTES = 1L << 25;

// `Machine._matmul`'s chain step: extend the last chain (same region, accumulating), replace
// it (same region, not accumulating: it is dead), or start a new one; then copy the operands in.
static void chain_add(BankChains& bc, long c_start, long M, long N, long K, bool acc, uint8_t* a_base, long a_col,
                      long a_start, uint8_t* b_base, long b_col, long b_start, long row_stride, long rb) {
    std::vector<Chain>& chains = bc.live;
    Chain* ch = chains.empty() ? nullptr : &chains.back();
    bool same = ch && ch->c_start == c_start && ch->M == M && ch->N == N;
    if (!(same && acc)) {
        if (!same) {
            if (bc.spare.empty()) {
                chains.emplace_back();
            } else {
                chains.push_back(std::move(bc.spare.back()));
                bc.spare.pop_back();
            }
            ch = &chains.back();
            long want = K < bc.kcap && 2 * (M + N) * bc.kcap <= HINT_BYTES ? bc.kcap : K;
            if (ch->cap < want || (long)ch->a.size() < M * ch->cap || (long)ch->b.size() < N * ch->cap) {
                ch->cap = want > ch->cap ? want : ch->cap;
                ch->a.resize(M * ch->cap);
                ch->b.resize(N * ch->cap);
            }
        }
        ch->c_start = c_start;
        ch->M = M;
        ch->N = N;
        ch->acc = acc;
        ch->k = 0;
    }
    long k0 = ch->k;
    if (k0 + K > ch->cap || (long)ch->a.size() < M * ch->cap || (long)ch->b.size() < N * ch->cap) {
        long cap = ch->cap * 2 > k0 + K ? ch->cap * 2 : k0 + K;
        std::vector<int16_t> a(M * cap), b(N * cap);
        for (long i = 0; i < M && k0; ++i) std::memcpy(&a[i * cap], &ch->a[i * ch->cap], k0 * 2);
        for (long i = 0; i < N && k0; ++i) std::memcpy(&b[i * cap], &ch->b[i * ch->cap], k0 * 2);
        ch->a.swap(a);
        ch->b.swap(b);
        ch->cap = cap;
    }
    gather(ch->a.data(), ch->cap, M, K, k0, a_base, row_stride, rb, a_col, a_start);
    gather(ch->b.data(), ch->cap, N, K, k0, b_base, row_stride, rb, b_col, b_start);
    ch->k = k0 + K;
}

}  // namespace fk
