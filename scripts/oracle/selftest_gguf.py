#!/usr/bin/env python3
"""Self-test of gguf_read.py: hand-derived block values, a loop-based second implementation of every dequantizer
(written from the spec text, one element at a time), a metadata/tensor round trip through gguf_write.py, and
rejection of broken files. Needs only numpy. Exit status 0 on success.

    /usr/bin/python3 scripts/oracle/selftest_gguf.py
"""

import os
import struct
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_read as G  # noqa: E402
import gguf_write as W  # noqa: E402

N_PASS = 0
N_FAIL = 0


def check(cond, what):
    global N_PASS, N_FAIL
    if cond:
        N_PASS += 1
    else:
        N_FAIL += 1
        print("FAIL:", what)


def f16(b0, b1):
    return float(np.frombuffer(bytes([b0, b1]), "<f2")[0])


# ---------------------------------------------------------------- loop references (one element at a time)
def ref_q8_0(blk):
    d = f16(blk[0], blk[1])
    return [d * struct.unpack("b", bytes([blk[2 + i]]))[0] for i in range(32)]


def ref_q2_k(blk):
    scales, qs = blk[0:16], blk[16:80]
    d, dmin = f16(blk[80], blk[81]), f16(blk[82], blk[83])
    y = [0.0] * 256
    for h in range(2):
        for j in range(4):
            for s in range(2):
                sc = scales[8 * h + 2 * j + s]
                for l in range(16):
                    q = (qs[32 * h + 16 * s + l] >> (2 * j)) & 3
                    y[128 * h + 32 * j + 16 * s + l] = d * (sc & 15) * q - dmin * (sc >> 4)
    return y


def ref_q4_k(blk):
    d, dmin = f16(blk[0], blk[1]), f16(blk[2], blk[3])
    S, qs = blk[4:16], blk[16:144]

    def sm(j):
        if j < 4:
            return S[j] & 63, S[j + 4] & 63
        return (S[j + 4] & 15) | ((S[j - 4] >> 6) << 4), (S[j + 4] >> 4) | ((S[j] >> 6) << 4)

    y = [0.0] * 256
    for c in range(4):
        sc1, m1 = sm(2 * c)
        sc2, m2 = sm(2 * c + 1)
        for l in range(32):
            y[64 * c + l] = d * sc1 * (qs[32 * c + l] & 15) - dmin * m1
            y[64 * c + 32 + l] = d * sc2 * (qs[32 * c + l] >> 4) - dmin * m2
    return y


def ref_iq2_xxs(blk, grid_u64):
    d = f16(blk[0], blk[1])
    y = [0.0] * 256
    for b in range(8):
        a0 = struct.unpack("<I", bytes(blk[2 + 8 * b:6 + 8 * b]))[0]
        a1 = struct.unpack("<I", bytes(blk[6 + 8 * b:10 + 8 * b]))[0]
        db = d * (0.5 + (a1 >> 28)) * 0.25
        for l in range(4):
            g = (a0 >> (8 * l)) & 0xFF
            s = (a1 >> (7 * l)) & 127
            signs = s | ((bin(s).count("1") & 1) << 7)
            for k in range(8):
                mag = (grid_u64[g] >> (8 * k)) & 0xFF
                y[32 * b + 8 * l + k] = db * mag * (-1.0 if (signs >> k) & 1 else 1.0)
    return y


def test_hand_values():
    # Q8_0: d = 0.5, q = -128, -1, 0, 1, 127, ...
    blk = bytearray(34)
    blk[0:2] = np.array([0.5], "<f2").tobytes()
    for i, q in enumerate([-128, -1, 0, 1, 127]):
        blk[2 + i] = q & 0xFF
    y = G.dequantize(np.frombuffer(bytes(blk), np.uint8), G.T_Q8_0, 32)
    check(list(y[:5]) == [-64.0, -0.5, 0.0, 0.5, 63.5], "Q8_0 hand values %s" % y[:5])

    # Q2_K: d = 1, dmin = 0.25; scales[0] = 0x21 (sc 1, m 2), scales[2] = 0x03 (sc 3, m 0),
    # scales[1] = 0x15 (sc 5, m 1), scales[8] = 0x42 (sc 2, m 4); qs[0] = 0b11100100, qs[16] = 0b00000011,
    # qs[32] = 0b00000010
    blk = bytearray(84)
    blk[0], blk[2], blk[1], blk[8] = 0x21, 0x03, 0x15, 0x42
    blk[16 + 0] = 0b11100100
    blk[16 + 16] = 0b00000011
    blk[16 + 32] = 0b00000010
    blk[80:82] = np.array([1.0], "<f2").tobytes()
    blk[82:84] = np.array([0.25], "<f2").tobytes()
    y = G.dequantize(np.frombuffer(bytes(blk), np.uint8), G.T_Q2_K, 256)
    # elem 0: h0 j0 s0 l0: q = qs[0]&3 = 0, sc 0x21 -> 1*1*0 - 0.25*2 = -0.5
    check(y[0] == -0.5, "Q2_K elem 0 = %r" % y[0])
    # elem 32: h0 j1 s0 l0: q = (qs[0]>>2)&3 = 1, sc = scales[2] = 0x03 -> 3*1 - 0 = 3
    check(y[32] == 3.0, "Q2_K elem 32 = %r" % y[32])
    # elem 16: h0 j0 s1 l0: q = qs[16]&3 = 3, sc = scales[1] = 0x15 -> 5*3 - 0.25*1 = 14.75
    check(y[16] == 14.75, "Q2_K elem 16 = %r" % y[16])
    # elem 96: h0 j3 s0 l0: q = (qs[0]>>6)&3 = 3, sc = scales[6] = 0 -> 0
    check(y[96] == 0.0, "Q2_K elem 96 = %r" % y[96])
    # elem 128: h1 j0 s0 l0: q = qs[32]&3 = 2, sc = scales[8] = 0x42 -> 2*2 - 0.25*4 = 3
    check(y[128] == 3.0, "Q2_K elem 128 = %r" % y[128])

    # Q4_K: d = 1, dmin = 0.5; S[0] = 3, S[4] = 2, S[1] = 65 (sc 1, top bits 01), S[5] = 4, S[8] = 0x27, S[9] = 0x13
    blk = bytearray(144)
    blk[0:2] = np.array([1.0], "<f2").tobytes()
    blk[2:4] = np.array([0.5], "<f2").tobytes()
    S = {0: 3, 4: 2, 1: 65, 5: 4, 8: 0x27, 9: 0x13}
    for k, v in S.items():
        blk[4 + k] = v
    blk[16 + 0] = 0x5A
    blk[16 + 64] = 0x31
    y = G.dequantize(np.frombuffer(bytes(blk), np.uint8), G.T_Q4_K, 256)
    check(y[0] == 1 * 3 * 10 - 0.5 * 2, "Q4_K elem 0 = %r" % y[0])            # sub 0: sc 3, m 2, q = 0xA
    check(y[32] == 1 * 1 * 5 - 0.5 * 4, "Q4_K elem 32 = %r" % y[32])          # sub 1: sc 65&63 = 1, m 4, q = 5
    # sub 4 (elem 128): sc = (S[8]&15) | ((S[0]>>6)<<4) = 7, m = (S[8]>>4) | ((S[4]>>6)<<4) = 2, q = 0x31 & 15 = 1
    check(y[128] == 1 * 7 * 1 - 0.5 * 2, "Q4_K elem 128 = %r" % y[128])
    # sub 5 (elem 160): sc = (S[9]&15) | ((S[1]>>6)<<4) = 3 | 16 = 19, m = (S[9]>>4) | ((S[5]>>6)<<4) = 1, q = 3
    check(y[160] == 1 * 19 * 3 - 0.5 * 1, "Q4_K elem 160 = %r" % y[160])

    # IQ2_XXS: d = 1; sub-block 0: a0 = 0 (grid entry 0: all 8s), a1 = (3 << 28) | 1 (group 0 sign index 1 ->
    # ksigns 129: elements 0 and 7 negative); db = (0.5 + 3) * 0.25 = 0.875 -> magnitude 7
    blk = bytearray(66)
    blk[0:2] = np.array([1.0], "<f2").tobytes()
    blk[2:6] = struct.pack("<I", 0)
    blk[6:10] = struct.pack("<I", (3 << 28) | 1)
    # sub-block 1: a0 = 255 in group 0 (last grid entry 0x2b2b2b1908081908), a1 = 0 -> db = 0.125
    blk[10:14] = struct.pack("<I", 255)
    blk[14:18] = struct.pack("<I", 0)
    y = G.dequantize(np.frombuffer(bytes(blk), np.uint8), G.T_IQ2_XXS, 256)
    check(list(y[0:8]) == [-7, 7, 7, 7, 7, 7, 7, -7], "IQ2_XXS sub0 group0 %s" % y[0:8])
    check(list(y[8:16]) == [7] * 8, "IQ2_XXS sub0 group1 %s" % y[8:16])
    # 0x2b2b2b1908081908 little-endian bytes: 08 19 08 08 19 2b 2b 2b -> * 0.125
    check(list(y[32:40]) == [1.0, 3.125, 1.0, 1.0, 3.125, 5.375, 5.375, 5.375], "IQ2_XXS sub1 group0 %s" % y[32:40])

    # BF16 and F16 exactness
    x = np.array([1.0, -2.5, 3.140625, 65504.0, 6.103515625e-05, 5.960464477539063e-08], np.float32)
    y = G.dequantize(np.frombuffer(W.enc_f16(x), np.uint8), G.T_F16, len(x))
    check(np.array_equal(y, x.astype(np.float64)), "F16 exact %s" % y)
    xb = np.array([1.0, -2.5, 3.140625, 1e30], np.float32)
    y = G.dequantize(np.frombuffer(W.enc_bf16(xb), np.uint8), G.T_BF16, len(xb))
    check(np.allclose(y, xb, rtol=2 ** -8), "BF16 %s" % y)
    check(y[0] == 1.0 and y[1] == -2.5 and y[2] == 3.140625, "BF16 exact values %s" % y)


def test_against_loops():
    rng = np.random.default_rng(1234)
    grid_mags, origin = G.iq2xxs_grid()
    grid_u64 = [int(sum(int(grid_mags[i, k]) << (8 * k) for k in range(8))) for i in range(256)]
    check(grid_u64[0] == 0x0808080808080808 and grid_u64[-1] == 0x2B2B2B1908081908, "grid first/last")
    print("  IQ2_XXS grid from:", origin)
    for tt, ref, scale in ((G.T_Q8_0, ref_q8_0, 0.01), (G.T_Q2_K, ref_q2_k, 0.02), (G.T_Q4_K, ref_q4_k, 0.003),
                           (G.T_IQ2_XXS, lambda b: ref_iq2_xxs(b, grid_u64), 0.01)):
        be = G.TYPES[tt][1]
        raw = W.random_blocks(rng, tt, be * 7, scale)
        if tt in (G.T_Q2_K, G.T_Q4_K, G.T_IQ2_XXS):
            # random f16 scales per block too (including a subnormal and a negative one)
            raw = bytearray(raw)
            bb = G.TYPES[tt][2]
            ds = [0.0123, 3.0e-6, -0.5, 1.0, 65504.0, 6.0e-8, 0.25]
            for i, dv in enumerate(ds):
                off = i * bb + (80 if tt == G.T_Q2_K else 0)
                raw[off:off + 2] = np.array([dv], "<f2").tobytes()
            raw = bytes(raw)
        y = G.dequantize(np.frombuffer(raw, np.uint8), tt, be * 7)
        bb = G.TYPES[tt][2]
        exp = []
        for i in range(7):
            exp += ref(list(raw[i * bb:(i + 1) * bb]))
        exp = np.array(exp)
        check(np.array_equal(y, exp), "%s vectorized == loop reference (max diff %g)"
              % (G.type_name(tt), float(np.max(np.abs(y - exp)))))


def test_round_trip():
    rng = np.random.default_rng(7)
    w = W.Writer()
    w.add("general.name", G.VT_STR, "selftest ü")
    w.add("a.u8", G.VT_U8, 200)
    w.add("a.i8", G.VT_I8, -100)
    w.add("a.u16", G.VT_U16, 60000)
    w.add("a.i16", G.VT_I16, -30000)
    w.add("a.u32", G.VT_U32, 4000000000)
    w.add("a.i32", G.VT_I32, -2000000000)
    w.add("a.f32", G.VT_F32, 1.5)
    w.add("a.bool", G.VT_BOOL, 1)
    w.add("a.u64", G.VT_U64, 1 << 60)
    w.add("a.i64", G.VT_I64, -(1 << 60))
    w.add("a.f64", G.VT_F64, 1e-300)
    w.add("a.arr_u32", G.VT_ARR, [0, 0, 4, 16], G.VT_U32)
    w.add("a.arr_f32", G.VT_ARR, [10.0, 10.0], G.VT_F32)
    w.add("a.arr_str", G.VT_ARR, ["<｜begin▁of▁sentence｜>", "Ġthe", ""], G.VT_STR)
    w.add("a.arr_bool", G.VT_ARR, [1, 0], G.VT_BOOL)
    tensors = {}
    f32 = rng.standard_normal((3, 64)).astype(np.float32)
    w.add_tensor("t.f32", (64, 3), G.T_F32, W.enc_f32(f32))
    tensors["t.f32"] = f32.astype(np.float64)
    f16v = rng.standard_normal((5, 32)).astype(np.float16)
    w.add_tensor("t.f16", (32, 5), G.T_F16, W.enc_f16(f16v))
    tensors["t.f16"] = f16v.astype(np.float64)
    i32 = rng.integers(0, 8, size=(10, 2)).astype(np.int32)
    w.add_tensor("t.i32", (2, 10), G.T_I32, W.enc_i32(i32))
    x = rng.standard_normal((4, 64)).astype(np.float32)
    w.add_tensor("t.q8_0", (64, 4), G.T_Q8_0, W.enc_q8_0(x))
    raw_q2 = W.random_blocks(rng, G.T_Q2_K, 256 * 2 * 3, 0.01)
    w.add_tensor("t.q2k", (256, 2, 3), G.T_Q2_K, raw_q2)
    raw_iq = W.random_blocks(rng, G.T_IQ2_XXS, 512 * 3, 0.02)
    w.add_tensor("t.iq2", (512, 3), G.T_IQ2_XXS, raw_iq)
    with tempfile.TemporaryDirectory() as td:
        p = os.path.join(td, "t.gguf")
        w.write(p)
        g = G.GGUFFile(p)
        check(g.get("general.name") == "selftest ü", "string kv")
        for k, v in (("a.u8", 200), ("a.i8", -100), ("a.u16", 60000), ("a.i16", -30000), ("a.u32", 4000000000),
                     ("a.i32", -2000000000), ("a.f32", 1.5), ("a.bool", True), ("a.u64", 1 << 60),
                     ("a.i64", -(1 << 60)), ("a.f64", 1e-300)):
            check(g.get(k) == v and type(g.get(k)) is type(v), "kv %s = %r" % (k, g.get(k)))
        check(list(g.get("a.arr_u32")) == [0, 0, 4, 16] and g.kv_type["a.arr_u32"] == (G.VT_ARR, G.VT_U32), "arr u32")
        check(list(g.get("a.arr_f32")) == [10.0, 10.0], "arr f32")
        check(g.get("a.arr_str") == ["<｜begin▁of▁sentence｜>", "Ġthe", ""], "arr str %r" % g.get("a.arr_str"))
        check(list(g.get("a.arr_bool")) == [True, False], "arr bool")
        check(g.data_offset % 32 == 0, "data offset aligned")
        check(np.array_equal(g.tensor("t.f32"), tensors["t.f32"]), "tensor f32")
        check(np.array_equal(g.tensor("t.f16"), tensors["t.f16"]), "tensor f16")
        ti = g.tensor("t.i32")
        check(ti.dtype == np.int64 and np.array_equal(ti, i32), "tensor i32 -> int64")
        tq = g.tensor("t.q8_0")
        check(tq.shape == (4, 64) and np.max(np.abs(tq - x)) < np.abs(x).max() / 127, "tensor q8_0 close to source")
        t2 = g.tensor("t.q2k")
        check(t2.shape == (3, 2, 256), "3-D tensor shape reversed: %s" % (t2.shape,))
        exp = np.array(sum((ref_q2_k(list(raw_q2[i * 84:(i + 1) * 84])) for i in range(6)), [])).reshape(3, 2, 256)
        check(np.array_equal(t2, exp), "3-D Q2_K expert slices in order")
        check(g.tensor("t.iq2").shape == (3, 512), "iq2 shape")

        # broken files
        good = open(p, "rb").read()
        for what, data in (("truncated header", good[:20]), ("truncated data", good[:-40]),
                           ("bad magic", b"GGUX" + good[4:]), ("version 2", good[:4] + struct.pack("<I", 2) + good[8:])):
            q = os.path.join(td, "bad.gguf")
            open(q, "wb").write(data)
            try:
                G.GGUFFile(q)
                check(False, "broken file accepted: " + what)
            except G.GGUFError as e:
                check(True, what)
                print("  rejected (%s): %s" % (what, e))


def main():
    test_hand_values()
    test_against_loops()
    test_round_trip()
    print("selftest_gguf: %d passed, %d failed" % (N_PASS, N_FAIL))
    return 1 if N_FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
