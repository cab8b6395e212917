// The compiled functional pass's data movement and matrix chains (emulator/_functional_core.pyx).
//
// A bank's byte stream (HARDWARE.md): line i of a virtual bank of `col` physical banks from
// b0 lives in physical bank b0 + i % col, SRAM row i / col. `base` below is the core's SRAM
// at bank b0 (mem + b0 * rb); `row_stride` the bytes from one SRAM row to the next.
//
// A chain is `emulator.machine.Machine._matmul`'s deferred run of matmuls into one C region:
// the operands side by side, kept at int8 width (A's bytes + 128, as u8: the operand order of
// the VNNI kernel's u8 x s8 products), applied as one product when the bank is next touched.
// int8 x int8 products summed in int32 with wraparound are the exact sum mod 2**32 in any
// order, so the bits are the Python model's (its float32 BLAS slices summed in int32).
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace fk {

// Operand rows start on cache lines (64-byte buffers, `cap` a multiple of 64): no vector load
// of the kernels straddles two lines.
template <class T>
struct Aligned64 {
    using value_type = T;
    Aligned64() = default;
    template <class U>
    Aligned64(const Aligned64<U>&) {}
    T* allocate(size_t n) {
        void* p = nullptr;
        size_t bytes = n * sizeof(T);
        if (posix_memalign(&p, 64, bytes ? bytes : 64))
            throw std::bad_alloc();
        return (T*)p;
    }
    void deallocate(T* p, size_t) { std::free(p); }
    template <class U>
    bool operator==(const Aligned64<U>&) const { return true; }
    template <class U>
    bool operator!=(const Aligned64<U>&) const { return false; }
};
using Bytes = std::vector<uint8_t, Aligned64<uint8_t>>;

static inline long round64(long n) { return (n + 63) & ~63L; }

struct Chain {
    long c_start = 0, M = 0, N = 0, k = 0;  // C's first stream byte, its shape, the K terms gathered
    bool acc = false;
    long cap = 0;  // columns of a and b (a multiple of 64)
    Bytes a, b;  // M x cap (A + 128, u8), N x cap (B, s8)
};

// n bytes from s to d: a bank row of a few lines (16 to 128 bytes) in 16-byte moves the
// compiler makes inline, not a call into the C library each row (most of a transfer's time
// when each row is one or two lines).
static inline void copy_row(uint8_t* d, const uint8_t* s, long n) {
    if ((n & 15) == 0 && n <= 128) {
        for (long q = 0; q < n; q += 16) std::memcpy(d + q, s + q, 16);
        return;
    }
    std::memcpy(d, s, n);
}

// Rows r of `nrows` (the last `last` lines, the others `col`) between DRAM at addr + r * stride
// and the bank's rows (lines of a row are adjacent in SRAM).
static inline void dma_rows(uint8_t* base, long row_stride, long rb, long col, uint8_t* dram, long stride,
                            long nrows, long last, bool into_bank) {
    for (long r = 0; r < nrows; ++r) {
        long bytes = (r + 1 < nrows ? col : last) * rb;
        if (into_bank)
            copy_row(base + r * row_stride, dram + r * stride, bytes);
        else
            copy_row(dram + r * stride, base + r * row_stride, bytes);
    }
}

// A walk over a bank's stream in runs: the lines from `line` that lie side by side in one
// SRAM row (up to the row's last bank), f(pointer to the run in SRAM, its lines); then the
// next row. A wide bank's row is col lines in one piece: a run of col lines is one copy,
// not col of one line each.
struct Runs {
    uint8_t* row;
    long q, col, row_stride;
    Runs(uint8_t* base, long row_stride, long col, long line)
        : row(base + (line / col) * row_stride), q(line % col), col(col), row_stride(row_stride) {}
    template <class F>
    void take(long lines, long rb, F f) {
        while (lines > 0) {
            long run = col - q < lines ? col - q : lines;
            f(row + q * rb, run);
            lines -= run;
            q += run;
            if (q == col) {
                q = 0;
                row += row_stride;
            }
        }
    }
};

// n bytes from s to o, each XOR flip.
static inline void xor_copy(uint8_t* o, const uint8_t* s, long n, uint8_t flip) {
    long q = 0;
#if defined(__SSE2__)
    const __m128i f = _mm_set1_epi8((char)flip);
    for (; q + 16 <= n; q += 16)
        _mm_storeu_si128((__m128i*)(o + q), _mm_xor_si128(_mm_loadu_si128((const __m128i*)(s + q)), f));
#endif
    for (; q < n; ++q) o[q] = s[q] ^ flip;
}

// Copy `rows` x K operand bytes from the stream at `start` into columns k0 .. k0 + K of out
// (rows x cap), each byte XOR `flip` (0x80 for A: its int8 value + 128 as u8; 0 for B). K and
// start are whole lines.
static inline void gather(uint8_t* out, long cap, long rows, long K, long k0, uint8_t* base, long row_stride,
                          long rb, long col, long start, uint8_t flip) {
    long lines = K / rb;
    Runs w(base, row_stride, col, start / rb);
    for (long i = 0; i < rows; ++i) {
        uint8_t* o = out + i * cap + k0;
        w.take(lines, rb, [&](const uint8_t* s, long run) {
            xor_copy(o, s, run * rb, flip);
            o += run * rb;
        });
    }
}

// The kernels: p (M x N int32, row-major) = A @ B.T over K terms mod 2**32, A's rows at a
// (M x cap, each int8 + 128 as u8), B's at b (N x cap, int8). Any order of the sums gives the
// same bits.
static inline int32_t unbiased(uint8_t x) { return (int32_t)(int8_t)(x ^ 0x80); }

// The reference, and the kernel of any CPU: the int8 values back, plain products.
static void product_generic(int32_t* p, const uint8_t* a, const int8_t* b, long cap, long M, long N, long K) {
    for (long i = 0; i < M; ++i) {
        const uint8_t* ar = a + i * cap;
        for (long j = 0; j < N; ++j) {
            const int8_t* br = b + j * cap;
            uint32_t s = 0;
            for (long k = 0; k < K; ++k) s += (uint32_t)(unbiased(ar[k]) * (int32_t)br[k]);
            p[i * N + j] = (int32_t)s;
        }
    }
}

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

__attribute__((target("avx2"))) static inline int32_t hsum8(__m256i v) {
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0x4E));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0xB1));
    return _mm_cvtsi128_si32(x);
}

// 16 bytes at s as int16 (A's flipped back to int8 first).
__attribute__((target("avx2"))) static inline __m256i widen_a16(const uint8_t* s) {
    return _mm256_cvtepi8_epi16(_mm_xor_si128(_mm_loadu_si128((const __m128i*)s), _mm_set1_epi8((char)0x80)));
}
__attribute__((target("avx2"))) static inline __m256i widen_b16(const int8_t* s) {
    return _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)s));
}

// The previous AVX2 kernel, kept for side-by-side figures: four columns of B at a time against
// one row of A (each A load used four times), operands widened to int16 in registers, 16 terms
// a step (vpmaddwd: pairs of int16 products summed into int32), the tail scalar.
__attribute__((target("avx2"))) static void product_avx2_v1(int32_t* p, const uint8_t* a, const int8_t* b, long cap,
                                                         long M, long N, long K) {
    long K16 = K & ~15L;
    for (long i = 0; i < M; ++i) {
        const uint8_t* ar = a + i * cap;
        long j = 0;
        for (; j + 4 <= N; j += 4) {
            const int8_t* bj[4] = {b + j * cap, b + (j + 1) * cap, b + (j + 2) * cap, b + (j + 3) * cap};
            __m256i s[4];
            for (int q = 0; q < 4; ++q) s[q] = _mm256_setzero_si256();
            for (long k = 0; k < K16; k += 16) {
                __m256i x = widen_a16(ar + k);
                for (int q = 0; q < 4; ++q) s[q] = _mm256_add_epi32(s[q], _mm256_madd_epi16(x, widen_b16(bj[q] + k)));
            }
            for (int q = 0; q < 4; ++q) {
                uint32_t r = (uint32_t)hsum8(s[q]);
                for (long k = K16; k < K; ++k) r += (uint32_t)(unbiased(ar[k]) * (int32_t)bj[q][k]);
                p[i * N + j + q] = (int32_t)r;
            }
        }
        for (; j < N; ++j) {
            const int8_t* br = b + j * cap;
            uint32_t s = 0;
            for (long k = 0; k < K; ++k) s += (uint32_t)(unbiased(ar[k]) * (int32_t)br[k]);
            p[i * N + j] = (int32_t)s;
        }
    }
}

// The AVX2 kernel (no VNNI): vpmaddwd on int16 operands (each pair of int8 x int8 products
// summed into an int32 lane: no overflow; the vpaddd sums wrap mod 2**32), 16 terms a step.
// A's rows of a K panel widened to int16 once, into a buffer (zeros past K: no tail step);
// B's rows read at int8 width and widened in registers (half the cache traffic of a widened
// copy). Blocks of 4 rows x 3 columns: 12 sums, 3 widened columns and one product in the 16 ymm
// registers, A's terms read by vpmaddwd from memory (L1): 12 vpmaddwd for 3 widenings a step.
#define FK_AVX2 __attribute__((target("avx2")))

// Rows i of M: out[i * ld + k] = A's value (int8) at k0 + k, for k < kc; zeros up to ld.
FK_AVX2 static void widen_panel(int16_t* out, long ld, const uint8_t* a, long cap, long M, long k0, long kc) {
    for (long i = 0; i < M; ++i) {
        const uint8_t* s = a + i * cap + k0;
        int16_t* o = out + i * ld;
        long k = 0;
        for (; k + 16 <= kc; k += 16) _mm256_store_si256((__m256i*)(o + k), widen_a16(s + k));
        for (; k < kc; ++k) o[k] = (int16_t)unbiased(s[k]);
        for (; k < ld; ++k) o[k] = 0;
    }
}

// The sums of three vectors' lanes each: lanes 0-2 (the rest zero) of the result.
FK_AVX2 __attribute__((always_inline)) static inline __m128i sum3(__m256i v0, __m256i v1, __m256i v2) {
    __m256i g = _mm256_hadd_epi32(_mm256_hadd_epi32(v0, v1), _mm256_hadd_epi32(v2, _mm256_setzero_si256()));
    return _mm_add_epi32(_mm256_castsi256_si128(g), _mm256_extracti128_si256(g, 1));
}

// Four widened rows of A (a[r], kp terms, kp a multiple of 16) against three columns of B (b[q]
// + k0) into p (row stride ldp), its first R rows and C columns (the others repeat a real row
// or column: computed and dropped): p = sums on the first K panel, p += sums on the others.
// The twelve sums in named registers (an array of them would live on the stack).
// One step of row r: s[r][q] += A's 16 terms . y[q] (vpmaddwd into t, vpaddd), in asm: gcc
// otherwise computes all twelve products before the sums, which then no longer fit in
// registers and go to the stack each step (a third slower).
#define FK_MADD3(r)                                                                             \
    {                                                                                           \
        __m256i t;                                                                              \
        __asm__("vpmaddwd %[x], %[y0], %[t]\n\tvpaddd %[t], %[s0], %[s0]\n\t"                  \
                "vpmaddwd %[x], %[y1], %[t]\n\tvpaddd %[t], %[s1], %[s1]\n\t"                  \
                "vpmaddwd %[x], %[y2], %[t]\n\tvpaddd %[t], %[s2], %[s2]"                      \
                : [s0] "+x"(s##r##0), [s1] "+x"(s##r##1), [s2] "+x"(s##r##2), [t] "=&x"(t)     \
                : [x] "m"(*(const __m256i*)(a##r + k)), [y0] "x"(y0), [y1] "x"(y1), [y2] "x"(y2)); \
    }
#define FK_STEP3                                                                                \
    {                                                                                           \
        __m256i y0 = widen_b16(b0 + k), y1 = widen_b16(b1 + k), y2 = widen_b16(b2 + k);         \
        FK_MADD3(0) FK_MADD3(1) FK_MADD3(2) FK_MADD3(3)                                         \
    }
FK_AVX2 static void block_avx2(int32_t* p, long ldp, int R, int C, const int16_t* const* a, const int8_t* const* b,
                               long k0, long kp, bool first) {
    const int16_t *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
    const int8_t *b0 = b[0] + k0, *b1 = b[1] + k0, *b2 = b[2] + k0;
    __m256i s00, s01, s02, s10, s11, s12, s20, s21, s22, s30, s31, s32, z = _mm256_setzero_si256();
    s00 = s01 = s02 = s10 = s11 = s12 = s20 = s21 = s22 = s30 = s31 = s32 = z;
    for (long k = 0; k < kp; k += 16) FK_STEP3
    const __m128i sums[4] = {sum3(s00, s01, s02), sum3(s10, s11, s12), sum3(s20, s21, s22), sum3(s30, s31, s32)};
    for (int r = 0; r < R; ++r) {
        alignas(16) int32_t out[4];
        _mm_store_si128((__m128i*)out, sums[r]);
        for (int q = 0; q < C; ++q) {
            int32_t* o = p + r * ldp + q;
            *o = first ? out[q] : (int32_t)((uint32_t)*o + (uint32_t)out[q]);
        }
    }
}
#undef FK_STEP3
#undef FK_MADD3

// Cache blocking as product_vnni8's (below): K panels of KC2 terms (A's four widened rows,
// 4 x KC2 x 2 bytes, in L1), B's rows in panels of NC2 (NC2 x KC2 bytes in L2; a multiple of
// the block's 3 columns). On the Llama layer's shapes KC2 1024-4096 x NC2 48-192 were within
// noise of each other.
static const long KC2 = 2048, NC2 = 48;

FK_AVX2 static void product_avx2(int32_t* p, const uint8_t* a, const int8_t* b, long cap, long M, long N, long K) {
    static thread_local std::vector<int16_t, Aligned64<int16_t>> panel;
    const int16_t* ar[4];
    const int8_t* br[3];
    for (long k0 = 0; k0 < K; k0 += KC2) {
        long kc = K - k0 < KC2 ? K - k0 : KC2, kp = (kc + 15) & ~15L;  // kp <= cap - k0: B's loads stay in its rows
        bool first = k0 == 0;
        panel.resize(M * kp);
        widen_panel(panel.data(), kp, a, cap, M, k0, kc);
        for (long j0 = 0; j0 < N; j0 += NC2) {
            long j1 = N - j0 < NC2 ? N : j0 + NC2;
            for (long i = 0; i < M; i += 4) {
                int R = M - i < 4 ? (int)(M - i) : 4;
                for (int r = 0; r < 4; ++r)
                    ar[r] = panel.data() + (i + (r < R ? r : R - 1)) * kp;  // the last row again
                for (long j = j0; j < j1; j += 3) {
                    int C = j1 - j < 3 ? (int)(j1 - j) : 3;
                    for (int q = 0; q < 3; ++q) br[q] = b + (j + (q < C ? q : C - 1)) * cap;
                    block_avx2(p + i * N + j, N, R, C, ar, br, k0, kp, first);
                }
            }
        }
    }
}

#define FK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vnni")))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // gcc 12's own _mm512_reduce_add_epi32
#pragma GCC diagnostic ignored "-Wuninitialized"

// The previous VNNI kernel, kept for side-by-side figures: operands widened to int16 (here in
// registers), two rows of A against four columns of B, 32 terms a step, each vpdpwssd summing
// pairs of int16 products into int32 lanes with wraparound, the tail below 32 terms scalar.
FK_AVX512 static inline __m512i widen_a32(const uint8_t* s) {
    return _mm512_cvtepi8_epi16(_mm256_xor_si256(_mm256_loadu_si256((const __m256i*)s), _mm256_set1_epi8((char)0x80)));
}
FK_AVX512 static void product_vnni16(int32_t* p, const uint8_t* a, const int8_t* b, long cap, long M, long N,
                                     long K) {
    long K32 = K & ~31L;
    for (long i = 0; i < M; i += 2) {
        bool two = i + 1 < M;
        const uint8_t* a0 = a + i * cap;
        const uint8_t* a1 = two ? a0 + cap : a0;  // one row left: computed twice, kept once
        long j = 0;
        for (; j + 4 <= N; j += 4) {
            const int8_t* bj[4] = {b + j * cap, b + (j + 1) * cap, b + (j + 2) * cap, b + (j + 3) * cap};
            __m512i s0[4], s1[4];
            for (int q = 0; q < 4; ++q) s0[q] = s1[q] = _mm512_setzero_si512();
            for (long k = 0; k < K32; k += 32) {
                __m512i x0 = widen_a32(a0 + k), x1 = widen_a32(a1 + k);
                for (int q = 0; q < 4; ++q) {
                    __m512i y = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i*)(bj[q] + k)));
                    s0[q] = _mm512_dpwssd_epi32(s0[q], x0, y);
                    s1[q] = _mm512_dpwssd_epi32(s1[q], x1, y);
                }
            }
            for (int q = 0; q < 4; ++q) {
                uint32_t r0 = (uint32_t)_mm512_reduce_add_epi32(s0[q]), r1 = (uint32_t)_mm512_reduce_add_epi32(s1[q]);
                for (long k = K32; k < K; ++k) {
                    r0 += (uint32_t)(unbiased(a0[k]) * (int32_t)bj[q][k]);
                    r1 += (uint32_t)(unbiased(a1[k]) * (int32_t)bj[q][k]);
                }
                p[i * N + j + q] = (int32_t)r0;
                if (two)
                    p[(i + 1) * N + j + q] = (int32_t)r1;
            }
        }
        for (; j < N; ++j) {
            const int8_t* br = b + j * cap;
            uint32_t r0 = 0, r1 = 0;
            for (long k = 0; k < K; ++k) {
                r0 += (uint32_t)(unbiased(a0[k]) * (int32_t)br[k]);
                r1 += (uint32_t)(unbiased(a1[k]) * (int32_t)br[k]);
            }
            p[i * N + j] = (int32_t)r0;
            if (two)
                p[(i + 1) * N + j] = (int32_t)r1;
        }
    }
}

// The int8 kernel: vpdpbusd multiplies 64 u8 x s8 pairs a step and sums each four into an
// int32 lane with wraparound (the non-saturating form). A's bytes are a + 128, so each sum is
// A @ B.T + 128 x (B's row sum): that second term, `bias` (mod 2**32), comes off once.

// 64 bytes at row + k, and those of K - k < 64 bytes (zeros after them: the masked load reads
// nothing past them), for a product's last step.
FK_AVX512 static inline __m512i load64(const void* row, long k) {
    return _mm512_loadu_si512((const void*)((const char*)row + k));
}
FK_AVX512 static inline __m512i load_tail(const void* row, long k, long K) {
    return _mm512_maskz_loadu_epi8(_cvtu64_mask64(~0ULL >> (64 - (K - k))), (const void*)((const char*)row + k));
}

// bias[j] = 128 x the sum of B's row j over K terms, mod 2**32.
FK_AVX512 static void row_bias(int32_t* bias, const int8_t* b, long cap, long N, long K) {
    const __m512i ones = _mm512_set1_epi8(1);
    for (long j = 0; j < N; ++j) {
        __m512i s = _mm512_setzero_si512();
        long k = 0;
        for (; k + 64 <= K; k += 64) s = _mm512_dpbusd_epi32(s, ones, load64(b + j * cap, k));
        if (k < K)
            s = _mm512_dpbusd_epi32(s, ones, load_tail(b + j * cap, k, K));
        bias[j] = (int32_t)((uint32_t)_mm512_reduce_add_epi32(s) << 7);
    }
}

// Sixteen vectors' lane sums as one vector, in order (v[4 r + q] at lane 4 r + q): a 4 x 4
// block's products, row r in 128-bit lane r.
FK_AVX512 __attribute__((always_inline)) static inline __m512i sum16(const __m512i* v) {
    __m512i t[8], u[4];
    for (int h = 0; h < 8; ++h)  // [v0 lanes 0+2, v1 0+2, v0 1+3, v1 1+3] in each 128-bit lane
        t[h] = _mm512_add_epi32(_mm512_unpacklo_epi32(v[2 * h], v[2 * h + 1]),
                                _mm512_unpackhi_epi32(v[2 * h], v[2 * h + 1]));
    for (int h = 0; h < 4; ++h)  // [v0, v1, v2, v3] partial sums in each 128-bit lane
        u[h] = _mm512_add_epi32(_mm512_unpacklo_epi64(t[2 * h], t[2 * h + 1]),
                                _mm512_unpackhi_epi64(t[2 * h], t[2 * h + 1]));
    __m512i w0 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[0], u[1], 0x88), _mm512_shuffle_i32x4(u[0], u[1], 0xDD));
    __m512i w1 = _mm512_add_epi32(_mm512_shuffle_i32x4(u[2], u[3], 0x88), _mm512_shuffle_i32x4(u[2], u[3], 0xDD));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(w0, w1, 0x88), _mm512_shuffle_i32x4(w0, w1, 0xDD));
}

// Four rows of A (a[r] + k0) against four columns of B (b[q] + k0) over K terms: 8 loads for
// 16 vpdpbusd a step, the sixteen sums in named registers (an array of them is past gcc's
// scalar replacement: it would live on the stack). Into p (row stride ldp), its first R rows
// and C columns (the others repeat a real row or column: computed and dropped): p = sums -
// bias on the first K panel, p += sums on the others.
#define FK_DP4(r, x)                               \
    s##r##0 = _mm512_dpbusd_epi32(s##r##0, x, y0); \
    s##r##1 = _mm512_dpbusd_epi32(s##r##1, x, y1); \
    s##r##2 = _mm512_dpbusd_epi32(s##r##2, x, y2); \
    s##r##3 = _mm512_dpbusd_epi32(s##r##3, x, y3);
#define FK_STEP(LOAD)                                                         \
    {                                                                         \
        __m512i y0 = LOAD(b0), y1 = LOAD(b1), y2 = LOAD(b2), y3 = LOAD(b3), x; \
        x = LOAD(a0);                                                         \
        FK_DP4(0, x)                                                          \
        x = LOAD(a1);                                                         \
        FK_DP4(1, x)                                                          \
        x = LOAD(a2);                                                         \
        FK_DP4(2, x)                                                          \
        x = LOAD(a3);                                                         \
        FK_DP4(3, x)                                                          \
    }
FK_AVX512 static void block_vnni8(int32_t* p, long ldp, int R, int C, const uint8_t* const* a,
                                  const int8_t* const* b, long k0, long K, const int32_t* bias, bool first) {
    const uint8_t *a0 = a[0] + k0, *a1 = a[1] + k0, *a2 = a[2] + k0, *a3 = a[3] + k0;
    const int8_t *b0 = b[0] + k0, *b1 = b[1] + k0, *b2 = b[2] + k0, *b3 = b[3] + k0;
    // the last K % 64 terms first (a masked step from zero: nothing if there are none), then
    // whole steps: one loop with nothing after it keeps gcc from copying the sums each step
    __m512i s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, s31, s32, s33;
    long k = K & ~63L;
    {
        __mmask64 m = _cvtu64_mask64(K - k ? ~0ULL >> (64 - (K - k)) : 0);
        __m512i z = _mm512_setzero_si512();
        s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = z;
        s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = z;
#define FK_LOAD(row) _mm512_maskz_loadu_epi8(m, (const void*)((row) + k))
        FK_STEP(FK_LOAD)
#undef FK_LOAD
    }
    long end = k;
#define FK_LOAD(row) _mm512_loadu_si512((const void*)((row) + k))
    for (k = 0; k < end; k += 64) FK_STEP(FK_LOAD)
#undef FK_LOAD
    const __m512i all[16] = {s00, s01, s02, s03, s10, s11, s12, s13, s20, s21, s22, s23, s30, s31, s32, s33};
    __m512i v = sum16(all);
    if (first) {
        __m128i c = C == 4 ? _mm_loadu_si128((const __m128i*)bias)
                           : _mm_setr_epi32(bias[0], C > 1 ? bias[1] : 0, C > 2 ? bias[2] : 0, 0);
        v = _mm512_sub_epi32(v, _mm512_broadcast_i32x4(c));
    }
    alignas(64) int32_t out[16];
    _mm512_store_si512((void*)out, v);
    for (int r = 0; r < R; ++r) {
        int32_t* o = p + r * ldp;
        if (C == 4) {
            __m128i x = _mm_load_si128((const __m128i*)(out + 4 * r));
            if (!first)
                x = _mm_add_epi32(x, _mm_loadu_si128((const __m128i*)o));
            _mm_storeu_si128((__m128i*)o, x);
        } else {
            for (int q = 0; q < C; ++q)
                o[q] = first ? out[4 * r + q] : (int32_t)((uint32_t)o[q] + (uint32_t)out[4 * r + q]);
        }
    }
}
#undef FK_STEP
#undef FK_DP4

// Cache blocking: K panels of KC terms, B's rows in panels of NC; a panel of B (NC x KC bytes,
// 256 KB) stays in L2 while every block of A's rows passes over it, a block of A's four rows
// (4 x KC, 16 KB) in L1 while it meets the panel's columns. Measured on the Llama layer's
// chains (64 x 256 x 4096, 64 x 128 x 14336): 2048-8192 x 48-128 within noise of each other;
// no K panels, or no N panels, up to 30% slower.
static const long KC = 4096, NC = 64;

FK_AVX512 static void product_vnni8(int32_t* p, const uint8_t* a, const int8_t* b, long cap, long M, long N,
                                    long K) {
    static thread_local std::vector<int32_t> bias_buf;
    bias_buf.resize(N);
    int32_t* bias = bias_buf.data();
    row_bias(bias, b, cap, N, K);
    const uint8_t* ar[4];
    const int8_t* br[4];
    for (long k0 = 0; k0 < K; k0 += KC) {
        long kc = K - k0 < KC ? K - k0 : KC;
        bool first = k0 == 0;
        for (long j0 = 0; j0 < N; j0 += NC) {
            long j1 = N - j0 < NC ? N : j0 + NC;
            for (long i = 0; i < M; i += 4) {
                int R = M - i < 4 ? (int)(M - i) : 4;
                for (int r = 0; r < 4; ++r) ar[r] = a + (i + (r < R ? r : R - 1)) * cap;  // the last row again
                for (long j = j0; j < j1; j += 4) {
                    int C = j1 - j < 4 ? (int)(j1 - j) : 4;
                    for (int q = 0; q < 4; ++q) br[q] = b + (j + (q < C ? q : C - 1)) * cap;
                    block_vnni8(p + i * N + j, N, R, C, ar, br, k0, kc, bias + j, first);
                }
            }
        }
    }
}
#pragma GCC diagnostic pop

static bool cpu_has_vnni() {
    __builtin_cpu_init();  // the CPU model before asking it (safe in a static initializer)
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
}
static bool cpu_has_avx2() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}
#else
static bool cpu_has_vnni() { return false; }
static bool cpu_has_avx2() { return false; }
#define product_avx2 product_generic
#define product_avx2_v1 product_generic
#define product_vnni16 product_generic
#define product_vnni8 product_generic
#endif

// The kernels by name, in order of preference; which this CPU runs; the one in use: the best
// it runs, the AVX2 one if DSE_EMULATOR_NO_VNNI is set (read once, at load: the older path
// stays reachable on a VNNI machine, for the tests and the benchmark's side-by-side figures),
// or the one `use_kernel` names.
enum Kernel { K_VNNI8 = 0, K_VNNI16 = 1, K_AVX2 = 2, K_AVX2_V1 = 3, K_GENERIC = 4, N_KERNELS = 5 };
static const char* const kernel_names[N_KERNELS] = {"vnni8", "vnni16", "avx2", "avx2_v1", "generic"};
static const bool have_vnni = cpu_has_vnni();
static const bool have_avx2 = cpu_has_avx2();

static inline bool kernel_runs(int k) {
    return k == K_GENERIC || ((k == K_AVX2 || k == K_AVX2_V1) && have_avx2) ||
           ((k == K_VNNI8 || k == K_VNNI16) && have_vnni);
}

static int default_kernel() {
    if (have_vnni && !std::getenv("DSE_EMULATOR_NO_VNNI"))
        return K_VNNI8;
    return have_avx2 ? K_AVX2 : K_GENERIC;
}
static int kernel = default_kernel();

// Run kernel k from now on; false (nothing changed) if this CPU cannot.
static inline bool use_kernel(int k) {
    if (k < 0 || k >= N_KERNELS || !kernel_runs(k))
        return false;
    kernel = k;
    return true;
}

// p (M x N int32) = a @ b.T over K terms, wrapped to 32 bits, by kernel k (-1: the one in use).
static inline void product(int32_t* p, const uint8_t* a, const int8_t* b, long cap, long M, long N, long K,
                           int k = -1) {
    if (K <= 0) {  // no terms: zero sums (the blocked kernels loop over K panels and would write nothing)
        memset(p, 0, sizeof(int32_t) * M * N);
        return;
    }
    switch (k < 0 ? kernel : k) {
    case K_VNNI8: product_vnni8(p, a, b, cap, M, N, K); break;
    case K_VNNI16: product_vnni16(p, a, b, cap, M, N, K); break;
    case K_AVX2: product_avx2(p, a, b, cap, M, N, K); break;
    case K_AVX2_V1: product_avx2_v1(p, a, b, cap, M, N, K); break;
    default: product_generic(p, a, b, cap, M, N, K);
    }
}

// Products of at least this many multiply-adds run on two threads: the calling one and a
// helper, each taking blocks of the output rows from a shared counter (every sum still one
// thread's, in its kernel's order: the same bits). On a busy machine the helper may not get
// a core in time: the caller then takes every block, and waits only for a block the helper
// has begun, never for the helper to be scheduled. Below the threshold the hand-over (a few
// microseconds) is not paid back. The helper sleeps on a condition variable between products
// (no spinning pool: a core op's OpenMP pool kept one thread for that, emulator.machine).
static long split_macs = 1L << 25;

struct RowJob {
    int32_t* p;
    const uint8_t* a;
    const int8_t* b;
    long cap, M, N, K, rows;  // `rows` a block (a multiple of 4 but the last)
    int k;
    std::atomic<long> next{0};
    long blocks = 0;
    bool claimed = false, finished = false;  // by the helper (under Helper::mu)
    void work() {
        for (long i; (i = next.fetch_add(1)) < blocks;) {
            long r0 = i * rows, n = M - r0 < rows ? M - r0 : rows;
            product(p + r0 * N, a + r0 * cap, b, cap, n, N, K, k);
        }
    }
};

// The one helper thread, started on first use, never stopped (a process ends with it asleep;
// never freed, so no destructor runs under it). A child process after fork() has no helper:
// nothing claims its jobs, and the caller does them all.
struct Helper {
    std::mutex mu;
    std::condition_variable wake, done;
    RowJob* job = nullptr;
    bool started = false;
    void loop() {
        std::unique_lock<std::mutex> lk(mu);
        for (;;) {
            wake.wait(lk, [&] { return job != nullptr; });
            RowJob* j = job;
            job = nullptr;
            j->claimed = true;
            lk.unlock();
            j->work();
            lk.lock();
            j->finished = true;
            done.notify_all();
        }
    }
};
static Helper* helper = new Helper;

// `product` on two threads if it is that large (`split_macs`; `min_macs` >= 0 overrides it).
static inline void product_split(int32_t* p, const uint8_t* a, const int8_t* b, long cap, long M, long N, long K,
                                 int k = -1, long min_macs = -1) {
    int kk = k < 0 ? kernel : k;
    if (M < 2 || (double)M * N * K < (double)(min_macs < 0 ? split_macs : min_macs)) {
        product(p, a, b, cap, M, N, K, kk);
        return;
    }
    RowJob j;
    j.p = p, j.a = a, j.b = b, j.cap = cap, j.M = M, j.N = N, j.K = K, j.k = kk;
    // four blocks of whole 4-row groups where there are enough rows (each block sums B's
    // rows again for the int8 kernel's bias: more blocks, more of that)
    j.rows = M >= 16 ? ((M + 3) / 4 + 3) & ~3L : (M + 1) / 2;
    j.blocks = (M + j.rows - 1) / j.rows;
    Helper& h = *helper;
    {
        std::unique_lock<std::mutex> lk(h.mu);
        if (!h.started) {
            try {
                std::thread([] { helper->loop(); }).detach();
                h.started = true;
            } catch (const std::system_error&) {  // no thread to be had: this one does it all
                lk.unlock();
                j.work();
                return;
            }
        }
        if (h.job != nullptr) {  // another thread's product has the helper: do this one alone
            lk.unlock();
            j.work();
            return;
        }
        h.job = &j;
    }
    h.wake.notify_one();
    j.work();
    std::unique_lock<std::mutex> lk(h.mu);
    if (!j.claimed) {  // the helper never came: nothing of it to wait for
        h.job = nullptr;
        return;
    }
    h.done.wait(lk, [&] { return j.finished; });
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
        product_split(p, ch.a.data(), (const int8_t*)ch.b.data(), ch.cap, ch.M, ch.N, ch.k);
        bc.kcap = ch.k;
        const uint8_t* pb = (const uint8_t*)p;
        bool acc = ch.acc;
        Runs w(base, row_stride, col, ch.c_start / rb);
        w.take(cells * 4 / rb, rb, [&](uint8_t* line, long run) {
            long n = run * rb, q = 0;
            if (acc) {
#if defined(__SSE2__)
                for (; q + 16 <= n; q += 16)
                    _mm_storeu_si128((__m128i*)(line + q), _mm_add_epi32(_mm_loadu_si128((const __m128i*)(line + q)),
                                                                         _mm_loadu_si128((const __m128i*)(pb + q))));
#endif
                for (; q < n; q += 4) {
                    uint32_t old, add;
                    std::memcpy(&old, line + q, 4);
                    std::memcpy(&add, pb + q, 4);
                    old += add;
                    std::memcpy(line + q, &old, 4);
                }
            } else {
                copy_row(line, pb, n);
            }
            pb += n;
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
            long want = round64(K < bc.kcap && (M + N) * bc.kcap <= HINT_BYTES ? bc.kcap : K);
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
        long cap = round64(ch->cap * 2 > k0 + K ? ch->cap * 2 : k0 + K);
        Bytes a(M * cap), b(N * cap);
        for (long i = 0; i < M && k0; ++i) std::memcpy(&a[i * cap], &ch->a[i * ch->cap], k0);
        for (long i = 0; i < N && k0; ++i) std::memcpy(&b[i * cap], &ch->b[i * ch->cap], k0);
        ch->a.swap(a);
        ch->b.swap(b);
        ch->cap = cap;
    }
    gather(ch->a.data(), ch->cap, M, K, k0, a_base, row_stride, rb, a_col, a_start, 0x80);
    gather(ch->b.data(), ch->cap, N, K, k0, b_base, row_stride, rb, b_col, b_start, 0);
    ch->k = k0 + K;
}

}  // namespace fk
