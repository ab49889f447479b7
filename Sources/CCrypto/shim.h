// OpenSSL's libcrypto for TaskServer's cryptography: HMAC-SHA256 for webhook signatures and the
// CSPRNG for ids. libcrypto is libcurl's own TLS library (libcurl4 depends on libssl3), so it adds
// no runtime dependency; swift-crypto would double a clean debug build here for the same output.
#ifndef TASKSERVER_CCRYPTO_SHIM_H
#define TASKSERVER_CCRYPTO_SHIM_H

#include <openssl/hmac.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stddef.h>

/// HMAC-SHA256 of `data` keyed with `key`; writes 32 bytes to `out`. Returns 1 on success.
static inline int ts_hmac_sha256(const void *key, int key_length, const unsigned char *data, size_t data_length, unsigned char *out) {
    unsigned int length = 0;
    return HMAC(EVP_sha256(), key, key_length, data, data_length, out, &length) != NULL && length == 32;
}

#endif
