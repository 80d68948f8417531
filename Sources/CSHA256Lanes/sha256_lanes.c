// SHA-256 compression (FIPS 180-4, 6.2.2) on 8 inputs at once: see CSHA256Lanes.h.
#include "CSHA256Lanes.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* Loads word t (big-endian) of the current block of each of the 8 lanes, 8 words at a time: W[o..o+7]. */
#define LOAD8(W, o) do { \
    const __m256i swap = _mm256_setr_epi8(3,2,1,0,7,6,5,4,11,10,9,8,15,14,13,12,3,2,1,0,7,6,5,4,11,10,9,8,15,14,13,12); \
    __m256i r0 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(p[0] + 4 * (o))), swap); \
    __m256i r1 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(p[1] + 4 * (o))), swap); \
    __m256i r2 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(p[2] + 4 * (o))), swap); \
    __m256i r3 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(p[3] + 4 * (o))), swap); \
    __m256i r4 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(p[4] + 4 * (o))), swap); \
    __m256i r5 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(p[5] + 4 * (o))), swap); \
    __m256i r6 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(p[6] + 4 * (o))), swap); \
    __m256i r7 = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(p[7] + 4 * (o))), swap); \
    __m256i t0 = _mm256_unpacklo_epi32(r0, r1), t1 = _mm256_unpackhi_epi32(r0, r1); \
    __m256i t2 = _mm256_unpacklo_epi32(r2, r3), t3 = _mm256_unpackhi_epi32(r2, r3); \
    __m256i t4 = _mm256_unpacklo_epi32(r4, r5), t5 = _mm256_unpackhi_epi32(r4, r5); \
    __m256i t6 = _mm256_unpacklo_epi32(r6, r7), t7 = _mm256_unpackhi_epi32(r6, r7); \
    __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2); \
    __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3); \
    __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6); \
    __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7); \
    W[(o) + 0] = _mm256_permute2x128_si256(u0, u4, 0x20); \
    W[(o) + 1] = _mm256_permute2x128_si256(u1, u5, 0x20); \
    W[(o) + 2] = _mm256_permute2x128_si256(u2, u6, 0x20); \
    W[(o) + 3] = _mm256_permute2x128_si256(u3, u7, 0x20); \
    W[(o) + 4] = _mm256_permute2x128_si256(u0, u4, 0x31); \
    W[(o) + 5] = _mm256_permute2x128_si256(u1, u5, 0x31); \
    W[(o) + 6] = _mm256_permute2x128_si256(u2, u6, 0x31); \
    W[(o) + 7] = _mm256_permute2x128_si256(u3, u7, 0x31); \
} while (0)

#define BODY(ROR, XOR3, CH, MAJ) \
    __m256i s[8]; \
    for (int i = 0; i < 8; i++) s[i] = _mm256_setr_epi32(state[i], state[8 + i], state[16 + i], state[24 + i], state[32 + i], state[40 + i], state[48 + i], state[56 + i]); \
    const uint8_t *p[8]; \
    for (int l = 0; l < 8; l++) p[l] = data[l]; \
    for (size_t b = 0; b < blocks; b++) { \
        __m256i W[64]; \
        LOAD8(W, 0); LOAD8(W, 8); \
        for (int t = 16; t < 64; t++) { \
            __m256i x15 = W[t - 15], x2 = W[t - 2]; \
            __m256i s0 = XOR3(ROR(x15, 7), ROR(x15, 18), _mm256_srli_epi32(x15, 3)); \
            __m256i s1 = XOR3(ROR(x2, 17), ROR(x2, 19), _mm256_srli_epi32(x2, 10)); \
            W[t] = _mm256_add_epi32(_mm256_add_epi32(W[t - 16], s0), _mm256_add_epi32(W[t - 7], s1)); \
        } \
        __m256i a = s[0], bb = s[1], c = s[2], d = s[3], e = s[4], f = s[5], g = s[6], h = s[7]; \
        for (int t = 0; t < 64; t++) { \
            __m256i S1 = XOR3(ROR(e, 6), ROR(e, 11), ROR(e, 25)); \
            __m256i t1 = _mm256_add_epi32(_mm256_add_epi32(h, S1), _mm256_add_epi32(CH(e, f, g), _mm256_add_epi32(W[t], _mm256_set1_epi32((int)K256[t])))); \
            __m256i S0 = XOR3(ROR(a, 2), ROR(a, 13), ROR(a, 22)); \
            __m256i t2 = _mm256_add_epi32(S0, MAJ(a, bb, c)); \
            h = g; g = f; f = e; e = _mm256_add_epi32(d, t1); d = c; c = bb; bb = a; a = _mm256_add_epi32(t1, t2); \
        } \
        s[0] = _mm256_add_epi32(s[0], a); s[1] = _mm256_add_epi32(s[1], bb); s[2] = _mm256_add_epi32(s[2], c); s[3] = _mm256_add_epi32(s[3], d); \
        s[4] = _mm256_add_epi32(s[4], e); s[5] = _mm256_add_epi32(s[5], f); s[6] = _mm256_add_epi32(s[6], g); s[7] = _mm256_add_epi32(s[7], h); \
        for (int l = 0; l < 8; l++) p[l] += 64; \
    } \
    for (int i = 0; i < 8; i++) { \
        uint32_t v[8]; _mm256_storeu_si256((__m256i *)v, s[i]); \
        for (int l = 0; l < 8; l++) state[l * 8 + i] = v[l]; \
    }

#define ROR2(x, n) _mm256_or_si256(_mm256_srli_epi32(x, n), _mm256_slli_epi32(x, 32 - (n)))
#define XOR3_2(x, y, z) _mm256_xor_si256(_mm256_xor_si256(x, y), z)
#define CH2(e, f, g) _mm256_xor_si256(_mm256_and_si256(e, f), _mm256_andnot_si256(e, g))
#define MAJ2(a, b, c) _mm256_or_si256(_mm256_and_si256(a, b), _mm256_and_si256(c, _mm256_or_si256(a, b)))

__attribute__((target("avx2")))
static void sha256_x8_avx2(uint32_t state[64], const uint8_t *const data[8], size_t blocks) {
    BODY(ROR2, XOR3_2, CH2, MAJ2)
}

#define ROR5(x, n) _mm256_ror_epi32(x, n)
#define XOR3_5(x, y, z) _mm256_ternarylogic_epi32(x, y, z, 0x96)
#define CH5(e, f, g) _mm256_ternarylogic_epi32(e, f, g, 0xca)
#define MAJ5(a, b, c) _mm256_ternarylogic_epi32(a, b, c, 0xe8)

__attribute__((target("avx2,avx512f,avx512vl")))
static void sha256_x8_avx512vl(uint32_t state[64], const uint8_t *const data[8], size_t blocks) {
    BODY(ROR5, XOR3_5, CH5, MAJ5)
}

/* What the CPU can run: 0 none, 1 AVX2, 2 AVX-512VL (with AVX2); `sha`: it has the SHA instructions. */
static int detect(int *sha) {
    unsigned a, b, c, d;
    *sha = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    // The OS must save the vector registers (OSXSAVE, then XCR0), and the CPU have AVX.
    if (!(c & (1u << 27)) || !(c & (1u << 28))) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0x6) != 0x6) return 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    *sha = (b >> 29) & 1;
    if (!(b & (1u << 5))) return 0;  // AVX2: both variants use its instructions
    if ((b & (1u << 16)) && (b & (1u << 31)) && (lo & 0xe6) == 0xe6) return 2;  // AVX-512F, VL; opmask and ZMM state
    return 1;
}

static int cachedSupported = -1, cachedSHA = -1;

int kiosk_sha256_lanes_supported(void) {
    int supported = __atomic_load_n(&cachedSupported, __ATOMIC_RELAXED);
    if (supported < 0) {
        int sha;
        supported = detect(&sha);
        __atomic_store_n(&cachedSHA, sha, __ATOMIC_RELAXED);
        __atomic_store_n(&cachedSupported, supported, __ATOMIC_RELAXED);
    }
    return supported;
}

int kiosk_sha256_lanes_variant(void) {
    int supported = kiosk_sha256_lanes_supported();
#if !defined(__OPTIMIZE__)
    // Built without optimization (a debug build): intrinsics at -O0 run at a tenth of BoringSSL's one
    // stream (14-54 MB/s against 201 here). Tests still run every variant, through kiosk_sha256_lanes_x8.
    (void)supported;
    return 0;
#elif defined(__APPLE__)
    // swift-crypto is CryptoKit there, and SHA256Hasher's own block function is plain Swift: lanes win.
    return supported;
#else
    // With SHA instructions BoringSSL's one stream is faster than 8 lanes.
    return __atomic_load_n(&cachedSHA, __ATOMIC_RELAXED) ? 0 : supported;
#endif
}

int kiosk_sha256_lanes_x8(int variant, uint32_t state[64], const uint8_t *const data[8], size_t blocks) {
    if (variant < 1 || variant > kiosk_sha256_lanes_supported()) return -1;
    if (variant == 2) sha256_x8_avx512vl(state, data, blocks);
    else sha256_x8_avx2(state, data, blocks);
    return 0;
}

#else

int kiosk_sha256_lanes_variant(void) { return 0; }

int kiosk_sha256_lanes_supported(void) { return 0; }

int kiosk_sha256_lanes_x8(int variant, uint32_t state[64], const uint8_t *const data[8], size_t blocks) {
    (void)variant; (void)state; (void)data; (void)blocks;
    return -1;
}

#endif
