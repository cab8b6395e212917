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
#include <cstring>
#include <vector>

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

// Copy `rows` x K int8 operand bytes from the stream at `start` into columns k0 .. k0 + K of
// out (rows x cap int16). K and start are whole lines.
static inline void gather(int16_t* out, long cap, long rows, long K, long k0, uint8_t* base, long row_stride,
                          long rb, long col, long start) {
    long lines = K / rb, line = start / rb;
    for (long i = 0; i < rows; ++i) {
        int16_t* o = out + i * cap + k0;
        for (long j = 0; j < lines; ++j, ++line, o += rb) {
            const int8_t* s = (const int8_t*)(base + (line / col) * row_stride + (line % col) * rb);
            if (rb == 16)  // the usual line: a fixed count the compiler widens in vector registers
                for (long q = 0; q < 16; ++q) o[q] = s[q];
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
__attribute__((target("avx2"))) static void product_avx2(int32_t* p, const int16_t* a, const int16_t* b, long cap,
                                                         long M, long N, long K) {
    FK_PRODUCT_BODY
}
static const bool have_avx2 = __builtin_cpu_supports("avx2");
#else
static const bool have_avx2 = false;
#define product_avx2 product_generic
#endif

// p (M x N int32) = a @ b.T over K terms, wrapped to 32 bits (-fwrapv: signed sums wrap).
static inline void product(int32_t* p, const int16_t* a, const int16_t* b, long cap, long M, long N, long K) {
    if (have_avx2)
        product_avx2(p, a, b, cap, M, N, K);
    else
        product_generic(p, a, b, cap, M, N, K);
}

// Apply a bank's chains in order: C = (C if acc else 0) + product, in int32.
static void flush(std::vector<Chain>& chains, std::vector<int32_t>& scratch, uint8_t* base, long row_stride,
                  long rb, long col) {
    for (Chain& ch : chains) {
        long cells = ch.M * ch.N;
        scratch.resize(cells);
        int32_t* p = scratch.data();
        product(p, ch.a.data(), ch.b.data(), ch.cap, ch.M, ch.N, ch.k);
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
    chains.clear();
}

// `Machine._matmul`'s chain step: extend the last chain (same region, accumulating), replace
// it (same region, not accumulating: it is dead), or start a new one; then copy the operands in.
static void chain_add(std::vector<Chain>& chains, long c_start, long M, long N, long K, bool acc, uint8_t* a_base,
                      long a_col, long a_start, uint8_t* b_base, long b_col, long b_start, long row_stride, long rb) {
    Chain* ch = chains.empty() ? nullptr : &chains.back();
    bool same = ch && ch->c_start == c_start && ch->M == M && ch->N == N;
    if (!(same && acc)) {
        if (!same) {
            chains.emplace_back();
            ch = &chains.back();
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
