/* A small SHA-256 (FIPS 180-4) for tests that check generated files against recorded digests.
 * Header-only, no dependency; checked against the FIPS test vectors in tests/common/test_sha256.c. */
#ifndef DSV4_TESTS_T_SHA256_H
#define DSV4_TESTS_T_SHA256_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct t_sha256 {
    uint32_t h[8];
    uint64_t n_bytes;
    uint8_t buf[64];
    size_t n_buf;
} t_sha256;

static const uint32_t t_sha256_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

static inline uint32_t t_sha256_ror(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static inline void t_sha256_init(t_sha256 *s) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->n_bytes = 0;
    s->n_buf = 0;
}

static inline void t_sha256_block(t_sha256 *s, const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
               p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        const uint32_t s0 = t_sha256_ror(w[i - 15], 7) ^ t_sha256_ror(w[i - 15], 18) ^ (w[i - 15] >> 3);
        const uint32_t s1 = t_sha256_ror(w[i - 2], 17) ^ t_sha256_ror(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = s->h[0], b = s->h[1], c = s->h[2], d = s->h[3], e = s->h[4], f = s->h[5], g = s->h[6],
             h = s->h[7];
    for (int i = 0; i < 64; i++) {
        const uint32_t S1 = t_sha256_ror(e, 6) ^ t_sha256_ror(e, 11) ^ t_sha256_ror(e, 25);
        const uint32_t t1 = h + S1 + ((e & f) ^ (~e & g)) + t_sha256_k[i] + w[i];
        const uint32_t S0 = t_sha256_ror(a, 2) ^ t_sha256_ror(a, 13) ^ t_sha256_ror(a, 22);
        const uint32_t t2 = S0 + ((a & b) ^ (a & c) ^ (b & c));
        h = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    s->h[0] += a, s->h[1] += b, s->h[2] += c, s->h[3] += d;
    s->h[4] += e, s->h[5] += f, s->h[6] += g, s->h[7] += h;
}

static inline void t_sha256_update(t_sha256 *s, const void *data, size_t n) {
    const uint8_t *p = data;
    s->n_bytes += n;
    while (n) {
        if (s->n_buf == 0 && n >= 64) {
            t_sha256_block(s, p);
            p += 64, n -= 64;
            continue;
        }
        size_t take = 64 - s->n_buf < n ? 64 - s->n_buf : n;
        memcpy(s->buf + s->n_buf, p, take);
        s->n_buf += take, p += take, n -= take;
        if (s->n_buf == 64) {
            t_sha256_block(s, s->buf);
            s->n_buf = 0;
        }
    }
}

/* Finish and write the digest as 64 lowercase hex digits + NUL. */
static inline void t_sha256_hex(t_sha256 *s, char out[65]) {
    const uint64_t bits = s->n_bytes * 8;
    uint8_t pad[72] = {0x80};
    const size_t npad = (s->n_buf < 56 ? 56 : 120) - s->n_buf;
    for (int i = 0; i < 8; i++) pad[npad + i] = (uint8_t)(bits >> (56 - 8 * i));
    t_sha256_update(s, pad, npad + 8);
    for (int i = 0; i < 8; i++) snprintf(out + 8 * i, 9, "%08x", (unsigned)s->h[i]);
}

/* Digest of a whole file; returns 0, or -1 if it cannot be read. */
static inline int t_sha256_file(const char *path, char out[65]) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    t_sha256 s;
    t_sha256_init(&s);
    uint8_t buf[1 << 16];
    size_t r;
    while ((r = fread(buf, 1, sizeof buf, f)) > 0) t_sha256_update(&s, buf, r);
    const int bad = ferror(f);
    fclose(f);
    if (bad) return -1;
    t_sha256_hex(&s, out);
    return 0;
}

#endif
