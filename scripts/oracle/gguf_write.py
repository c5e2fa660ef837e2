"""Tiny GGUF v3 writer in numpy, for the reader's self-test and for test models (synth_tiny.py).

Not used to produce fixtures: the fixtures' models come from the engine's own `dsv4-gguf synth`.
"""

import struct

import numpy as np

from gguf_read import (VT_ARR, VT_BOOL, VT_F32, VT_F64, VT_I32, VT_I64, VT_STR, VT_U32, VT_U64, VT_U8, TYPES,
                       _NP_DTYPE, _SCALAR_FMT)


def _str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _value(vt, v, item_type=None):
    if vt == VT_STR:
        return _str(v)
    if vt == VT_ARR:
        out = struct.pack("<IQ", item_type, len(v))
        if item_type == VT_STR:
            return out + b"".join(_str(x) for x in v)
        return out + np.asarray(v, dtype=_NP_DTYPE[item_type]).tobytes()
    return struct.pack(_SCALAR_FMT[vt], v)


class Writer:
    def __init__(self, alignment=32):
        self.kv = []       # (key, vt, value, item_type)
        self.tensors = []  # (name, ne, type, bytes)
        self.alignment = alignment
        if alignment != 32:
            self.add("general.alignment", VT_U32, alignment)

    def add(self, key, vt, value, item_type=None):
        self.kv.append((key, vt, value, item_type))

    def add_tensor(self, name, ne, ttype, data):
        """ne in ggml order (ne0 contiguous); data: raw bytes of the encoded tensor."""
        _, be, bb = TYPES[ttype]
        n = int(np.prod(ne))
        assert ne[0] % be == 0, (name, ne, ttype)
        assert len(data) == n // be * bb, (name, len(data), n // be * bb)
        self.tensors.append((name, tuple(int(x) for x in ne), ttype, bytes(data)))

    def to_bytes(self):
        head = struct.pack("<IIQQ", 0x46554747, 3, len(self.tensors), len(self.kv))
        for key, vt, v, it in self.kv:
            head += _str(key) + struct.pack("<I", vt) + _value(vt, v, it)
        offs = []
        off = 0
        for name, ne, tt, data in self.tensors:
            offs.append(off)
            off += (len(data) + self.alignment - 1) // self.alignment * self.alignment
        for (name, ne, tt, data), o in zip(self.tensors, offs):
            head += _str(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", x) for x in ne)
            head += struct.pack("<IQ", tt, o)
        pad = (-len(head)) % self.alignment
        out = bytearray(head + b"\0" * pad)
        for (name, ne, tt, data), o in zip(self.tensors, offs):
            assert len(out) - (len(head) + pad) == o
            out += data + b"\0" * ((-len(data)) % self.alignment)
        return bytes(out)

    def write(self, path):
        with open(path, "wb") as f:
            f.write(self.to_bytes())


# ---- encoders used by tests (straightforward, not optimal) ----
def enc_f32(x):
    return np.asarray(x, dtype="<f4").tobytes()


def enc_f16(x):
    return np.asarray(x, dtype="<f2").tobytes()


def enc_i32(x):
    return np.asarray(x, dtype="<i4").tobytes()


def enc_bf16(x):
    u = np.asarray(x, dtype="<f4").view("<u4")
    # round to nearest even on the dropped 16 bits
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype("<u2")
    return r.tobytes()


def enc_q8_0(x):
    x = np.asarray(x, dtype=np.float32).reshape(-1, 32)
    amax = np.abs(x).max(axis=1)
    d = (amax / 127.0).astype(np.float16)
    df = d.astype(np.float32)
    q = np.where(df[:, None] > 0, np.rint(x / np.where(df[:, None] > 0, df[:, None], 1)), 0)
    q = np.clip(q, -127, 127).astype(np.int8)
    out = np.zeros((x.shape[0], 34), np.uint8)
    out[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.tobytes()


def random_blocks(rng, ttype, n_elems, scale):
    """Random but sane encoded blocks of a quant type (codes drawn directly, like synth does).
    scale sets the f16 super-block scale d; returns raw bytes."""
    _, be, bb = TYPES[ttype]
    nb = n_elems // be
    out = np.zeros((nb, bb), np.uint8)
    if ttype == 8:  # Q8_0
        d = np.full(nb, scale, np.float16)
        out[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
        out[:, 2:] = rng.integers(-127, 128, size=(nb, 32)).astype(np.int8).view(np.uint8)
    elif ttype == 10:  # Q2_K
        out[:, 0:16] = rng.integers(0, 256, size=(nb, 16))
        out[:, 16:80] = rng.integers(0, 256, size=(nb, 64))
        out[:, 80:82] = np.full(nb, scale, np.float16).view(np.uint8).reshape(-1, 2)
        out[:, 82:84] = np.full(nb, scale * 0.5, np.float16).view(np.uint8).reshape(-1, 2)
    elif ttype == 12:  # Q4_K
        out[:, 0:2] = np.full(nb, scale, np.float16).view(np.uint8).reshape(-1, 2)
        out[:, 2:4] = np.full(nb, scale * 0.5, np.float16).view(np.uint8).reshape(-1, 2)
        out[:, 4:16] = rng.integers(0, 256, size=(nb, 12))
        out[:, 16:144] = rng.integers(0, 256, size=(nb, 128))
    elif ttype == 16:  # IQ2_XXS
        out[:, 0:2] = np.full(nb, scale, np.float16).view(np.uint8).reshape(-1, 2)
        out[:, 2:66] = rng.integers(0, 256, size=(nb, 64))
    else:
        raise ValueError("random_blocks: unsupported type %d" % ttype)
    return out.tobytes()
