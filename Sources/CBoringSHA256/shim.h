#ifndef KIOSK_CBORINGSHA256_SHIM_H
#define KIOSK_CBORINGSHA256_SHIM_H
#include <stddef.h>
#include <stdint.h>

// BoringSSL's SHA256_TransformBlocks, as swift-nio-ssl builds it (every symbol
// prefixed CNIOBoringSSL_): compresses `num_blocks` 64-byte blocks of `data`
// into the hash state `state` (SHA-256's eight 32-bit words), on the CPU's SHA
// instructions or its vector units when it has them. swift-nio-ssl links it
// into every program that uses NIOSSL (the SDK does, for TLS) but does not
// export its header as a module, so it is declared here; KioskAPI's
// SHA256HasherTests check it against Crypto's SHA256, and a rename in
// swift-nio-ssl fails the link. Taking it from swift-nio-ssl rather than
// swift-crypto keeps swift-crypto (a second BoringSSL to compile) out of the
// SDK. Apple platforms: SHA256Hasher uses its own Swift block function.
void CNIOBoringSSL_SHA256_TransformBlocks(uint32_t state[8], const uint8_t *data, size_t num_blocks);

#endif
