"""Minimal strict GGUF v3 reader and numpy dequantizers (F32, F16, BF16, I32, Q8_0, Q2_K, Q4_K, IQ2_XXS).

Written from the layout description in shared/spec/model-moe-gguf-tokenizer.md §1.1 and §1.5, independently of the
engine's C code. Used by the HF oracle (oracle.py) to load the engine's own GGUF files into transformers.

Every count, length and offset read from the file is checked against the file size; errors name the key or tensor.
Dequantized values are returned as float64: every supported format's value (d * scale * q - dmin * m etc.) is exact
in float64, so the oracle sees exactly the weights the engine multiplies with.
"""

import os
import re
import struct

import numpy as np

GGUF_MAGIC = 0x46554747
DEFAULT_ALIGNMENT = 32

# value types
VT_U8, VT_I8, VT_U16, VT_I16, VT_U32, VT_I32, VT_F32, VT_BOOL, VT_STR, VT_ARR, VT_U64, VT_I64, VT_F64 = range(13)
_SCALAR_FMT = {
    VT_U8: "<B", VT_I8: "<b", VT_U16: "<H", VT_I16: "<h", VT_U32: "<I", VT_I32: "<i",
    VT_F32: "<f", VT_BOOL: "<B", VT_U64: "<Q", VT_I64: "<q", VT_F64: "<d",
}
_NP_DTYPE = {
    VT_U8: "<u1", VT_I8: "<i1", VT_U16: "<u2", VT_I16: "<i2", VT_U32: "<u4", VT_I32: "<i4",
    VT_F32: "<f4", VT_BOOL: "<u1", VT_U64: "<u8", VT_I64: "<i8", VT_F64: "<f8",
}
VT_NAMES = ["u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"]

# tensor types: id -> (name, block elems, block bytes)
T_F32, T_F16, T_Q8_0, T_Q2_K, T_Q4_K, T_IQ2_XXS, T_I32, T_BF16 = 0, 1, 8, 10, 12, 16, 26, 30
TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
    7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
    12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4),
    27: ("I64", 1, 8), 28: ("F64", 1, 8), 30: ("BF16", 1, 2),
}
DECODABLE = {T_F32, T_F16, T_BF16, T_I32, T_Q8_0, T_Q2_K, T_Q4_K, T_IQ2_XXS}
# weight types whose matmuls the engine runs with quantized activations (ds4 CPU numerics)
ACT_Q8_0_TYPES = {T_Q8_0}
ACT_Q8_K_TYPES = {T_Q2_K, T_Q4_K, T_IQ2_XXS}


def type_name(t):
    return TYPES[t][0] if t in TYPES else "type#%d" % t


class GGUFError(Exception):
    pass


class Tensor:
    __slots__ = ("name", "ne", "type", "offset", "nbytes", "n_elems")

    def __init__(self, name, ne, ttype, offset, nbytes, n_elems):
        self.name, self.ne, self.type, self.offset, self.nbytes, self.n_elems = name, ne, ttype, offset, nbytes, n_elems

    @property
    def np_shape(self):
        """numpy shape (row-major): reverse of ggml ne; ggml [in, out] == numpy/torch (out, in)."""
        return tuple(reversed(self.ne))

    def __repr__(self):
        return "Tensor(%s, ne=%s, %s)" % (self.name, list(self.ne), type_name(self.type))


class GGUFFile:
    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.buf = f.read()
        self.size = len(self.buf)
        self.kv = {}        # key -> python value (arrays: list or numpy array)
        self.kv_type = {}   # key -> (value type, item type or None)
        self.tensors = {}   # name -> Tensor (file order kept in self.tensor_order)
        self.tensor_order = []
        self._parse()

    # ---- primitive readers with bounds checks ----
    def _need(self, pos, n, what):
        if n < 0 or pos + n > self.size:
            raise GGUFError("%s: truncated file (need %d bytes at offset %d, file has %d)" % (what, n, pos, self.size))

    def _scalar(self, pos, vt, what):
        fmt = _SCALAR_FMT[vt]
        n = struct.calcsize(fmt)
        self._need(pos, n, what)
        return struct.unpack_from(fmt, self.buf, pos)[0], pos + n

    def _string(self, pos, what):
        n, pos = self._scalar(pos, VT_U64, what + " (string length)")
        self._need(pos, n, what + " (string bytes)")
        raw = self.buf[pos:pos + n]
        try:
            s = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise GGUFError("%s: string is not valid UTF-8 (%s)" % (what, e))
        return s, pos + n

    def _value(self, pos, vt, what, depth=0):
        if vt == VT_STR:
            return self._string(pos, what)
        if vt == VT_ARR:
            if depth >= 8:
                raise GGUFError("%s: arrays nested deeper than 8" % what)
            it, pos = self._scalar(pos, VT_U32, what + " (array item type)")
            n, pos = self._scalar(pos, VT_U64, what + " (array length)")
            if it not in VT_NAMES_RANGE:
                raise GGUFError("%s: unknown array item type %d" % (what, it))
            if it in _NP_DTYPE:
                isz = np.dtype(_NP_DTYPE[it]).itemsize
                if n > (self.size - pos) // isz:
                    raise GGUFError("%s: array of %d items does not fit in the file" % (what, n))
                arr = np.frombuffer(self.buf, dtype=_NP_DTYPE[it], count=n, offset=pos).copy()
                if it == VT_BOOL:
                    arr = arr.astype(bool)
                return (arr, it), pos + n * isz
            if n > self.size - pos:  # each string/array item needs at least 8 bytes
                raise GGUFError("%s: array of %d items does not fit in the file" % (what, n))
            items = []
            for i in range(n):
                v, pos = self._value(pos, it, "%s[%d]" % (what, i), depth + 1)
                items.append(v[0] if it == VT_ARR else v)
            return (items, it), pos
        if vt not in _SCALAR_FMT:
            raise GGUFError("%s: unknown value type %d" % (what, vt))
        v, pos = self._scalar(pos, vt, what)
        if vt == VT_BOOL:
            if v not in (0, 1):
                raise GGUFError("%s: bool value %d is not 0 or 1" % (what, v))
            v = bool(v)
        return v, pos

    def _parse(self):
        pos = 0
        magic, pos = self._scalar(pos, VT_U32, "header magic")
        if magic != GGUF_MAGIC:
            raise GGUFError("%s: not a GGUF file (magic 0x%08x)" % (self.path, magic))
        ver, pos = self._scalar(pos, VT_U32, "header version")
        if ver != 3:
            raise GGUFError("%s: GGUF version %d, only 3 is supported" % (self.path, ver))
        n_tensors, pos = self._scalar(pos, VT_U64, "header n_tensors")
        n_kv, pos = self._scalar(pos, VT_U64, "header n_kv")
        if n_kv > self.size or n_tensors > self.size:
            raise GGUFError("implausible counts n_kv=%d n_tensors=%d" % (n_kv, n_tensors))
        for i in range(n_kv):
            key, pos = self._string(pos, "kv #%d key" % i)
            if key in self.kv:
                raise GGUFError("duplicate metadata key %r" % key)
            vt, pos = self._scalar(pos, VT_U32, "kv %r value type" % key)
            val, pos = self._value(pos, vt, "kv %r" % key)
            if vt == VT_ARR:
                self.kv[key] = val[0]
                self.kv_type[key] = (VT_ARR, val[1])
            else:
                self.kv[key] = val
                self.kv_type[key] = (vt, None)
        self.alignment = DEFAULT_ALIGNMENT
        if "general.alignment" in self.kv and self.kv_type["general.alignment"][0] == VT_U32:
            a = self.kv["general.alignment"]
            if a != 0:
                if a & (a - 1):
                    raise GGUFError("general.alignment %d is not a power of two" % a)
                self.alignment = a
        infos = []
        for i in range(n_tensors):
            name, pos = self._string(pos, "tensor #%d name" % i)
            nd, pos = self._scalar(pos, VT_U32, "tensor %r n_dims" % name)
            if nd < 1 or nd > 8:
                raise GGUFError("tensor %r: n_dims %d out of 1..8" % (name, nd))
            ne = []
            for d in range(nd):
                v, pos = self._scalar(pos, VT_U64, "tensor %r dim %d" % (name, d))
                if v == 0 or v > (1 << 40):
                    raise GGUFError("tensor %r: dim %d = %d is invalid" % (name, d, v))
                ne.append(v)
            tt, pos = self._scalar(pos, VT_U32, "tensor %r type" % name)
            off, pos = self._scalar(pos, VT_U64, "tensor %r offset" % name)
            infos.append((name, tuple(ne), tt, off))
        seen = set()
        for name, _, _, _ in infos:
            if name in seen:
                raise GGUFError("duplicate tensor name %r" % name)
            seen.add(name)
        self.data_offset = (pos + self.alignment - 1) // self.alignment * self.alignment
        for name, ne, tt, off in infos:
            if tt not in TYPES:
                raise GGUFError("tensor %r: unknown type id %d" % (name, tt))
            _, be, bb = TYPES[tt]
            n = int(np.prod(ne, dtype=np.uint64))
            if ne[0] % be:
                raise GGUFError("tensor %r: ne0=%d is not a multiple of the %s block (%d)" % (name, ne[0], type_name(tt), be))
            nbytes = n // be * bb
            absoff = self.data_offset + off
            if off % self.alignment:
                raise GGUFError("tensor %r: offset %d is not aligned to %d" % (name, off, self.alignment))
            if absoff + nbytes > self.size:
                raise GGUFError("tensor %r: data [%d, %d) runs past the end of the file (%d)" % (name, absoff, absoff + nbytes, self.size))
            t = Tensor(name, ne, tt, absoff, nbytes, n)
            self.tensors[name] = t
            self.tensor_order.append(name)
        # overlap check
        spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in self.tensors.values())
        for a, b in zip(spans, spans[1:]):
            if b[0] < a[1]:
                raise GGUFError("tensors %r and %r overlap" % (a[2], b[2]))

    # ---- accessors ----
    def get(self, key, default=None):
        return self.kv.get(key, default)

    def require(self, key):
        if key not in self.kv:
            raise GGUFError("%s: missing metadata key %r" % (self.path, key))
        return self.kv[key]

    def raw(self, name):
        t = self.tensors[name]
        return np.frombuffer(self.buf, dtype=np.uint8, count=t.nbytes, offset=t.offset)

    def tensor(self, name, dtype=np.float64):
        """Dequantized tensor as a numpy array of shape reversed(ne) (float64, or int64 for I32)."""
        if name not in self.tensors:
            raise GGUFError("%s: missing tensor %r" % (self.path, name))
        t = self.tensors[name]
        if t.type not in DECODABLE:
            raise GGUFError("tensor %r: type %s cannot be dequantized here" % (name, type_name(t.type)))
        flat = dequantize(self.raw(name), t.type, t.n_elems, what=name)
        if t.type == T_I32:
            return flat.reshape(t.np_shape)
        return flat.astype(dtype, copy=False).reshape(t.np_shape)


VT_NAMES_RANGE = set(range(13))


# ------------------------------------------------------------------------------------------------ dequantization
def _f16(u8pairs):
    """(..., 2) uint8 little-endian -> float64, exact."""
    return np.ascontiguousarray(u8pairs).view("<f2")[..., 0].astype(np.float64)


def _blocks(raw, n_elems, ttype, what):
    _, be, bb = TYPES[ttype]
    if n_elems % be:
        raise GGUFError("%s: %d elements not a multiple of the %s block %d" % (what, n_elems, type_name(ttype), be))
    nb = n_elems // be
    if raw.size != nb * bb:
        raise GGUFError("%s: %d bytes for %d %s blocks (expected %d)" % (what, raw.size, nb, type_name(ttype), nb * bb))
    return raw.reshape(nb, bb)


# Q2_K element layout inside a 256 block: half h, shift j, sub s, lane l -> element 128h+32j+16s+l
_Q2K_QIDX = np.zeros(256, np.int64)
_Q2K_SHIFT = np.zeros(256, np.int64)
_Q2K_SCIDX = np.zeros(256, np.int64)
for _h in range(2):
    for _j in range(4):
        for _s in range(2):
            for _l in range(16):
                _e = 128 * _h + 32 * _j + 16 * _s + _l
                _Q2K_QIDX[_e] = 32 * _h + 16 * _s + _l
                _Q2K_SHIFT[_e] = 2 * _j
                _Q2K_SCIDX[_e] = 8 * _h + 2 * _j + _s

# Q4_K: element 64c + 32k + l uses byte 32c+l (low nibble for k=0, high for k=1) and sub-scale 2c+k
_Q4K_QIDX = np.zeros(256, np.int64)
_Q4K_SHIFT = np.zeros(256, np.int64)
_Q4K_SUB = np.zeros(256, np.int64)
for _c in range(4):
    for _k in range(2):
        for _l in range(32):
            _e = 64 * _c + 32 * _k + _l
            _Q4K_QIDX[_e] = 32 * _c + _l
            _Q4K_SHIFT[_e] = 4 * _k
            _Q4K_SUB[_e] = 2 * _c + _k


def _q4k_scale_min(sc):
    """sc: (nb, 12) uint8 -> (scale (nb, 8), min (nb, 8)) int64 (get_scale_min_k4)."""
    sc = sc.astype(np.int64)
    s = np.zeros((sc.shape[0], 8), np.int64)
    m = np.zeros((sc.shape[0], 8), np.int64)
    for j in range(8):
        if j < 4:
            s[:, j] = sc[:, j] & 63
            m[:, j] = sc[:, j + 4] & 63
        else:
            s[:, j] = (sc[:, j + 4] & 15) | ((sc[:, j - 4] >> 6) << 4)
            m[:, j] = (sc[:, j + 4] >> 4) | ((sc[:, j] >> 6) << 4)
    return s, m


# ---- IQ2_XXS tables ----
KSIGNS_IQ2XS = np.array([s | ((bin(s).count("1") & 1) << 7) for s in range(128)], dtype=np.int64)

# Copy of the standard 256-entry IQ2_XXS grid (each u64: 8 little-endian magnitude bytes in {8, 25, 43}).
# Used only when the engine's C source (src/quant/*.c, array dsv4_iq2xxs_grid) is not found.
_IQ2XXS_GRID_TEXT = """
0808080808080808 080808080808082b 0808080808081919 0808080808082b08 0808080808082b2b 0808080808190819
0808080808191908 08080808082b0808 08080808082b082b 08080808082b2b08 08080808082b2b2b 0808080819080819
0808080819081908 0808080819190808 0808080819192b08 08080808192b0819 08080808192b1908 080808082b080808
080808082b08082b 080808082b082b2b 080808082b2b082b 0808081908080819 0808081908081908 0808081908190808
0808081908191919 0808081919080808 080808192b081908 080808192b192b08 0808082b08080808 0808082b0808082b
0808082b082b082b 0808082b2b08082b 0808190808080819 0808190808081908 0808190808190808 08081908082b0819
08081908082b1908 0808190819080808 080819081908082b 0808190819082b08 08081908192b0808 080819082b080819
080819082b081908 080819082b190808 080819082b2b1908 0808191908080808 080819190808082b 0808191908082b08
08081919082b0808 080819191908192b 08081919192b2b19 080819192b080808 080819192b190819 0808192b08082b19
0808192b08190808 0808192b19080808 0808192b2b081908 0808192b2b2b1908 08082b0808080808 08082b0808081919
08082b0808082b08 08082b0808191908 08082b08082b2b08 08082b0819080819 08082b0819081908 08082b0819190808
08082b081919082b 08082b082b082b08 08082b1908081908 08082b1919080808 08082b2b0808082b 08082b2b08191908
0819080808080819 0819080808081908 0819080808190808 08190808082b0819 0819080819080808 08190808192b0808
081908082b081908 081908082b190808 081908082b191919 0819081908080808 0819081908082b08 08190819082b0808
0819081919190808 0819081919192b2b 081908192b080808 0819082b082b1908 0819082b19081919 0819190808080808
0819190808082b08 08191908082b0808 08191908082b1919 0819190819082b19 081919082b080808 0819191908192b08
08191919192b082b 0819192b08080808 0819192b0819192b 08192b0808080819 08192b0808081908 08192b0808190808
08192b0819080808 08192b082b080819 08192b1908080808 08192b1908081919 08192b192b2b0808 08192b2b19190819
082b080808080808 082b08080808082b 082b080808082b2b 082b080819081908 082b0808192b0819 082b08082b080808
082b08082b08082b 082b0819082b2b19 082b081919082b08 082b082b08080808 082b082b0808082b 082b190808080819
082b190808081908 082b190808190808 082b190819080808 082b19081919192b 082b191908080808 082b191919080819
082b1919192b1908 082b192b2b190808 082b2b0808082b08 082b2b08082b0808 082b2b082b191908 082b2b2b19081908
1908080808080819 1908080808081908 1908080808190808 1908080808192b08 19080808082b0819 19080808082b1908
1908080819080808 1908080819082b08 190808081919192b 19080808192b0808 190808082b080819 190808082b081908
190808082b190808 1908081908080808 19080819082b0808 19080819192b0819 190808192b080808 190808192b081919
1908082b08080819 1908082b08190808 1908082b19082b08 1908082b1919192b 1908082b192b2b08 1908190808080808
1908190808082b08 19081908082b0808 190819082b080808 190819082b192b19 190819190819082b 19081919082b1908
1908192b08080808 19082b0808080819 19082b0808081908 19082b0808190808 19082b0819080808 19082b0819081919
19082b1908080808 19082b1919192b08 19082b19192b0819 19082b192b08082b 19082b2b19081919 19082b2b2b190808
1919080808080808 1919080808082b08 1919080808190819 1919080808192b19 19190808082b0808 191908082b080808
191908082b082b08 1919081908081908 191908191908082b 191908192b2b1908 1919082b2b190819 191919082b190808
191919082b19082b 1919191908082b2b 1919192b08080819 1919192b19191908 19192b0808080808 19192b0808190819
19192b0808192b19 19192b08192b1908 19192b1919080808 19192b2b08082b08 192b080808081908 192b080808190808
192b080819080808 192b0808192b2b08 192b081908080808 192b081919191919 192b082b08192b08 192b082b192b0808
192b190808080808 192b190808081919 192b191908190808 192b19190819082b 192b19192b081908 192b2b081908082b
2b08080808080808 2b0808080808082b 2b08080808082b2b 2b08080819080819 2b0808082b08082b 2b08081908081908
2b08081908192b08 2b08081919080808 2b08082b08190819 2b08190808080819 2b08190808081908 2b08190808190808
2b08190808191919 2b08190819080808 2b081908192b0808 2b08191908080808 2b0819191908192b 2b0819192b191908
2b08192b08082b19 2b08192b19080808 2b08192b192b0808 2b082b080808082b 2b082b1908081908 2b082b2b08190819
2b19080808081908 2b19080808190808 2b190808082b1908 2b19080819080808 2b1908082b2b0819 2b1908190819192b
2b1908192b080808 2b19082b19081919 2b19190808080808 2b191908082b082b 2b19190819081908 2b19191919190819
2b192b082b080819 2b192b19082b0808 2b2b08080808082b 2b2b080819190808 2b2b08082b081919 2b2b081908082b19
2b2b082b08080808 2b2b190808192b08 2b2b2b0819190808 2b2b2b1908081908
"""


def _check_grid(vals, origin):
    if len(vals) != 256:
        raise GGUFError("IQ2_XXS grid from %s has %d entries, expected 256" % (origin, len(vals)))
    if vals[0] != 0x0808080808080808 or vals[-1] != 0x2B2B2B1908081908:
        raise GGUFError("IQ2_XXS grid from %s: first/last entries 0x%016x/0x%016x are wrong" % (origin, vals[0], vals[-1]))
    if len(set(vals)) != 256 or list(vals) != sorted(vals):
        raise GGUFError("IQ2_XXS grid from %s is not 256 distinct ascending values" % origin)
    for v in vals:
        for k in range(8):
            if (v >> (8 * k)) & 0xFF not in (8, 25, 43):
                raise GGUFError("IQ2_XXS grid from %s: entry 0x%016x has a byte outside {8,25,43}" % (origin, v))


def _grid_from_c_sources(src_dir):
    """Parse `dsv4_iq2xxs_grid[256] = { ... }` from the engine's C sources, if present."""
    if not src_dir or not os.path.isdir(src_dir):
        return None
    for fn in sorted(os.listdir(src_dir)):
        if not fn.endswith(".c"):
            continue
        text = open(os.path.join(src_dir, fn), encoding="utf-8", errors="replace").read()
        m = re.search(r"dsv4_iq2xxs_grid\s*\[\s*256\s*\]\s*=\s*\{(.*?)\}", text, re.S)
        if m:
            vals = [int(x, 16) for x in re.findall(r"0x([0-9a-fA-F]+)", m.group(1))]
            return vals, os.path.join(src_dir, fn)
    return None


_GRID_CACHE = {}


def iq2xxs_grid(src_dir=None):
    """(256, 8) int64 magnitudes and a description of where the table came from."""
    if src_dir is None:
        here = os.path.dirname(os.path.abspath(__file__))
        src_dir = os.path.normpath(os.path.join(here, "..", "..", "src", "quant"))
    if src_dir in _GRID_CACHE:
        return _GRID_CACHE[src_dir]
    embedded = [int(x, 16) for x in _IQ2XXS_GRID_TEXT.split()]
    _check_grid(embedded, "the embedded copy")
    found = _grid_from_c_sources(src_dir)
    if found is not None:
        vals, origin = found
        _check_grid(vals, origin)
        if vals != embedded:
            raise GGUFError("IQ2_XXS grid in %s differs from the embedded standard table" % origin)
    else:
        vals, origin = embedded, "embedded copy (no dsv4_iq2xxs_grid in %s)" % src_dir
    g = np.array(vals, dtype=np.uint64)
    mags = np.stack([((g >> np.uint64(8 * k)) & np.uint64(0xFF)).astype(np.int64) for k in range(8)], axis=1)
    _GRID_CACHE[src_dir] = (mags, origin)
    return mags, origin


def dequantize(raw, ttype, n_elems, what="tensor"):
    """raw: uint8 array of the tensor's bytes -> flat float64 (int64 for I32) array of n_elems values."""
    raw = np.asarray(raw, dtype=np.uint8)
    if ttype == T_F32:
        _blocks(raw, n_elems, ttype, what)
        return raw.view("<f4").astype(np.float64)
    if ttype == T_F16:
        _blocks(raw, n_elems, ttype, what)
        return raw.view("<f2").astype(np.float64)
    if ttype == T_BF16:
        _blocks(raw, n_elems, ttype, what)
        u = raw.view("<u2").astype(np.uint32) << np.uint32(16)
        return u.view("<f4").astype(np.float64)
    if ttype == T_I32:
        _blocks(raw, n_elems, ttype, what)
        return raw.view("<i4").astype(np.int64)
    if ttype == T_Q8_0:
        b = _blocks(raw, n_elems, ttype, what)
        d = _f16(b[:, 0:2])
        q = b[:, 2:34].view(np.int8).astype(np.float64)
        return (d[:, None] * q).reshape(-1)
    if ttype == T_Q2_K:
        b = _blocks(raw, n_elems, ttype, what)
        scales = b[:, 0:16].astype(np.int64)
        qs = b[:, 16:80].astype(np.int64)
        d = _f16(b[:, 80:82])
        dmin = _f16(b[:, 82:84])
        q = (qs[:, _Q2K_QIDX] >> _Q2K_SHIFT[None, :]) & 3
        sc = scales[:, _Q2K_SCIDX]
        x = d[:, None] * (sc & 15).astype(np.float64) * q.astype(np.float64) - dmin[:, None] * (sc >> 4).astype(np.float64)
        return x.reshape(-1)
    if ttype == T_Q4_K:
        b = _blocks(raw, n_elems, ttype, what)
        d = _f16(b[:, 0:2])
        dmin = _f16(b[:, 2:4])
        s, m = _q4k_scale_min(b[:, 4:16])
        qs = b[:, 16:144].astype(np.int64)
        q = (qs[:, _Q4K_QIDX] >> _Q4K_SHIFT[None, :]) & 15
        x = d[:, None] * s[:, _Q4K_SUB].astype(np.float64) * q.astype(np.float64) - dmin[:, None] * m[:, _Q4K_SUB].astype(np.float64)
        return x.reshape(-1)
    if ttype == T_IQ2_XXS:
        b = _blocks(raw, n_elems, ttype, what)
        nb = b.shape[0]
        mags, _ = iq2xxs_grid()
        d = _f16(b[:, 0:2])
        words = np.ascontiguousarray(b[:, 2:66]).view("<u4").astype(np.int64).reshape(nb, 8, 2)
        a0, a1 = words[:, :, 0], words[:, :, 1]                       # (nb, 8 sub-blocks)
        db = d[:, None] * (0.5 + (a1 >> 28).astype(np.float64)) * 0.25  # (nb, 8)
        gidx = np.stack([(a0 >> (8 * l)) & 0xFF for l in range(4)], axis=2)          # (nb, 8, 4)
        sidx = np.stack([(a1 >> (7 * l)) & 127 for l in range(4)], axis=2)           # (nb, 8, 4)
        grid = mags[gidx]                                                            # (nb, 8, 4, 8)
        signs = KSIGNS_IQ2XS[sidx]                                                   # (nb, 8, 4)
        bits = (signs[..., None] >> np.arange(8)[None, None, None, :]) & 1           # (nb, 8, 4, 8)
        val = grid.astype(np.float64) * np.where(bits == 1, -1.0, 1.0)
        x = db[:, :, None, None] * val
        return x.reshape(-1)
    raise GGUFError("%s: cannot dequantize type %s" % (what, type_name(ttype)))
