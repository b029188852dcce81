#!/usr/bin/env python3
"""gguf_edit.py - rewrites a GGUF file with changes, for the integration
tests that need damaged or unusual models (tests/cli_*.sh).

usage: gguf_edit.py IN OUT [edits...]
  --set KEY=TYPE:VALUE   add or replace a metadata value; TYPE is one of
                         u8 i8 u16 i16 u32 i32 u64 i64 f32 f64 bool str;
                         float values may be nan, inf, -inf
  --set-hex KEY=HEX      a string value given as hex bytes (any bytes)
  --set-f32-elem KEY=I:VALUE  element I of a float array
  --trim-array KEY=N     keep the first N elements of an array
  --alignment N          general.alignment = N, data section re-laid out
  --nan-row TENSOR=ROW   fill one row of an f32/f16 tensor with NaN

The header is parsed completely and written back in the same order; tensor
data is copied chunk by chunk (each tensor with the padding that followed
it) and re-placed at offsets that are multiples of the alignment.
"""
import math
import os
import struct
import sys

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
          10: "<Q", 11: "<q", 12: "<d"}
TYPE_OF = {"u8": 0, "i8": 1, "u16": 2, "i16": 3, "u32": 4, "i32": 5, "f32": 6, "bool": 7,
           "str": 8, "u64": 10, "i64": 11, "f64": 12}


class Reader:
    def __init__(self, data):
        self.d, self.p = data, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.d, self.p)[0]
        self.p += struct.calcsize(fmt)
        return v

    def string(self):
        n = self.take("<Q")
        s = self.d[self.p:self.p + n]
        self.p += n
        return s

    def value(self, t):
        if t == 8:
            return self.string()
        if t == 9:
            et, n = self.take("<I"), self.take("<Q")
            return (et, [self.value(et) for _ in range(n)])
        return self.take(SCALAR[t])


def enc_value(t, v):
    if t == 8:
        return struct.pack("<Q", len(v)) + v
    if t == 9:
        et, items = v
        return struct.pack("<IQ", et, len(items)) + b"".join(enc_value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def parse_scalar(t, text):
    if t == 8:
        return text.encode()
    if t in (6, 12):
        return float(text)
    if t == 7:
        return text in ("1", "true")
    return int(text, 0)


def main(argv):
    src, dst, edits = argv[1], argv[2], argv[3:]
    data = open(src, "rb").read()
    r = Reader(data)
    assert r.take("<4s") == b"GGUF", "not a GGUF file"
    version, n_t, n_kv = r.take("<I"), r.take("<Q"), r.take("<Q")
    kvs = []
    for _ in range(n_kv):
        k = r.string()
        t = r.take("<I")
        kvs.append([k, t, r.value(t)])
    tensors = []
    for _ in range(n_t):
        name = r.string()
        nd = r.take("<I")
        ne = [r.take("<Q") for _ in range(nd)]
        tt, off = r.take("<I"), r.take("<Q")
        tensors.append([name, nd, ne, tt, off])
    align = 32
    for k, t, v in kvs:
        if k == b"general.alignment":
            align = v
    data_start = (r.p + align - 1) // align * align
    by_off = sorted(range(n_t), key=lambda i: tensors[i][4])
    chunk = {}
    for j, i in enumerate(by_off):
        end = tensors[by_off[j + 1]][4] if j + 1 < n_t else len(data) - data_start
        chunk[i] = bytearray(data[data_start + tensors[i][4]:data_start + end])

    def kv_index(key):
        for i, kv in enumerate(kvs):
            if kv[0] == key:
                return i
        kvs.append([key, 0, 0])
        return len(kvs) - 1

    new_align = align
    i = 0
    while i < len(edits):
        op, arg = edits[i], edits[i + 1]
        i += 2
        if op == "--set":
            key, tv = arg.split("=", 1)
            tname, val = tv.split(":", 1)
            t = TYPE_OF[tname]
            kvs[kv_index(os.fsencode(key))][1:] = [t, parse_scalar(t, val)]
        elif op == "--set-hex":
            key, hx = arg.split("=", 1)
            kvs[kv_index(key.encode())][1:] = [8, bytes.fromhex(hx)]
        elif op == "--set-f32-elem":
            key, iv = arg.split("=", 1)
            idx, val = iv.split(":", 1)
            kv = kvs[kv_index(key.encode())]
            assert kv[1] == 9 and kv[2][0] == 6, key + " is not an f32 array"
            kv[2][1][int(idx)] = float(val)
        elif op == "--trim-array":
            key, n = arg.split("=", 1)
            kv = kvs[kv_index(key.encode())]
            assert kv[1] == 9, key + " is not an array"
            kv[2] = (kv[2][0], kv[2][1][:int(n)])
        elif op == "--alignment":
            new_align = int(arg)
            kvs[kv_index(b"general.alignment")][1:] = [4, new_align]
        elif op == "--nan-row":
            name, row = arg.split("=", 1)
            ti = [x[0] for x in tensors].index(name.encode())
            tt, ne0 = tensors[ti][3], tensors[ti][2][0]
            es, nan = {0: (4, struct.pack("<f", math.nan)), 1: (2, b"\x00\x7e")}[tt]
            at = int(row) * ne0 * es
            chunk[ti][at:at + ne0 * es] = nan * ne0
        else:
            sys.exit("gguf_edit: unknown edit " + op)

    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, n_t, len(kvs)))
    for k, t, v in kvs:
        out += struct.pack("<Q", len(k)) + k + struct.pack("<I", t) + enc_value(t, v)
    off = 0
    offsets = {}
    for i in by_off:
        offsets[i] = off
        off = (off + len(chunk[i]) + new_align - 1) // new_align * new_align
    for i, (name, nd, ne, tt, _) in enumerate(tensors):
        out += struct.pack("<Q", len(name)) + name + struct.pack("<I", nd)
        out += b"".join(struct.pack("<Q", x) for x in ne) + struct.pack("<IQ", tt, offsets[i])
    if n_t:
        out += b"\0" * ((-len(out)) % new_align)
    base = len(out)
    for i in by_off:
        out += b"\0" * (base + offsets[i] - len(out))
        out += chunk[i]
    open(dst, "wb").write(out)


if __name__ == "__main__":
    main(sys.argv)
