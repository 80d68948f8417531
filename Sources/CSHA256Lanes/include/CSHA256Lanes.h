#ifndef KIOSK_CSHA256LANES_H
#define KIOSK_CSHA256LANES_H
#include <stddef.h>
#include <stdint.h>

// SHA-256's block function over 8 independent inputs at once, one per 32-bit
// lane of the CPU's vector registers (AVX2, or AVX-512VL's rotates and
// three-way logic on the same 256-bit registers). One core compresses 8
// blocks in about the time BoringSSL's AVX code compresses 3 (AVX2) or 5
// (AVX-512VL), so a download whose chunks are hashed from their announced
// SHA-256 states hashes 8 chunks at a time. On a CPU with the SHA
// instructions BoringSSL's single stream is faster still, and none of this
// is used. KioskAPI's SHA256Hasher.update(lanes:) is the caller; its tests
// check every variant the CPU has against BoringSSL.

/// The variant worth using here: 0 none (also in a build without
/// optimization, and, but on Apple platforms, on a CPU with SHA instructions,
/// which BoringSSL uses on one stream faster), 1 AVX2, 2 AVX-512VL.
int kiosk_sha256_lanes_variant(void);

/// The best variant the CPU can run at all (the SHA instructions aside): what tests check.
int kiosk_sha256_lanes_supported(void);

/// Compresses `blocks` 64-byte blocks of each of the 8 inputs `data[lane]`
/// into `state[lane * 8 ..< lane * 8 + 8]` (SHA-256's eight words per lane),
/// with `variant` (1 or 2). Every input must hold `blocks * 64` bytes; an
/// unused lane may point at any readable memory of that size. Returns 0, or
/// -1 without touching `state` when the CPU cannot run `variant`.
int kiosk_sha256_lanes_x8(int variant, uint32_t state[64], const uint8_t *const data[8], size_t blocks);

#endif
