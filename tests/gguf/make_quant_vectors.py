#!/usr/bin/env python3
"""Writes tests/data/quant_vectors/<type>.bin: raw GGML blocks and the values
that the PyPI package `gguf` (llama.cpp's gguf-py, exactly version 0.19.0,
with numpy) dequantizes them to. tests/gguf/test_quant_vectors.cpp checks that
clchat's dequantize_row() gives the same float32 bit patterns. The expected
values come only from gguf.quants.dequantize(); nothing here decodes a block.

Run from the repository root, in a venv outside the repository:
    python3 -m venv /tmp/venv-gguf
    /tmp/venv-gguf/bin/pip install gguf==0.19.0 numpy
    /tmp/venv-gguf/bin/python tests/gguf/make_quant_vectors.py
The output is deterministic for a given gguf and numpy (fixed seeds); the
committed files were made with gguf 0.19.0 and numpy 2.4.6 on x86-64.

File layout (little endian):
    char[4] "CLQV"; u32 version = 1; u32 GGML type id; u32 n_values;
    u32 n_raw_bytes; then n_raw_bytes raw block bytes; then n_values float32.

What the blocks hold:
  - Payload bytes (everything but the fp16 scale fields) are random, so every
    byte value, hence every nibble, 2-bit, 3-bit and 6-bit pattern, occurs
    (checked below); every 16th block has an all-0x00 payload and another every
    16th an all-0xFF payload (the largest 6-bit sub-scales and mins, the top
    codes).
  - The fp16 scale fields (d, and m or dmin where the type has one) walk a list
    of finite halves: ordinary values, their negatives, +0, -0, 65504 and
    -65504 (largest finite), 2^-24 (smallest subnormal), the largest
    subnormal, 2^-14 (smallest normal); with two fields each block pairs two
    of them, and a few blocks hold both extremes at once. The other blocks
    (at least 6 per type) have random finite halves (any sign and exponent)
    or small model-like scales.
  - Inf and NaN scales: a few blocks per type have d or m/dmin = +-inf or a
    NaN (quiet, signaling, negative). Their finite results are compared bit for
    bit like any other; where the expected value is a NaN the test only checks
    that clchat also gives a NaN, because the payload of a NaN made by
    arithmetic is the hardware's choice (0 * inf gives 0xFFC00000 on x86,
    0x7FC00000 on Arm) and, when two NaNs meet, depends on operand order.
  - F16 and BF16: ~4k 16-bit patterns: +-0, +-inf, quiet and signaling NaNs of
    both signs with several payloads, the smallest and largest subnormals and
    normals, then random patterns. Both conversions here are exact bit
    shifts (numpy keeps NaN payloads; checked for gguf 0.19.0), so every
    value, NaNs included, is compared bit for bit.
"""

import importlib.metadata
import pathlib
import struct
import sys

import numpy as np

try:
    import gguf
    import gguf.quants
except ImportError:
    sys.exit("needs the PyPI package gguf==0.19.0 (pip install gguf==0.19.0 numpy)")

GGUF_VERSION = "0.19.0"
OUT_DIR = pathlib.Path(__file__).resolve().parents[1] / "data" / "quant_vectors"
MAGIC = b"CLQV"
VERSION = 1

T = gguf.GGMLQuantizationType

# type: (values per block, bytes per block, byte offsets of the fp16 scale
# fields, number of blocks to write). Offsets from GGML's block structs
# (engine/gguf/ggml_types.h spells the same structs).
LAYOUTS = {
    T.Q4_0: (32, 18, [0], 128),
    T.Q4_1: (32, 20, [0, 2], 128),
    T.Q5_0: (32, 22, [0], 128),
    T.Q5_1: (32, 24, [0, 2], 128),
    T.Q8_0: (32, 34, [0], 128),
    T.Q2_K: (256, 84, [80, 82], 40),
    T.Q3_K: (256, 110, [108], 40),
    T.Q4_K: (256, 144, [0, 2], 40),
    T.Q5_K: (256, 176, [0, 2], 40),
    T.Q6_K: (256, 210, [208], 40),
    T.IQ4_NL: (32, 18, [0], 128),
    T.IQ4_XS: (256, 136, [0], 40),
}

# Special finite halves (bit patterns).
SPECIAL_SCALES = [
    0x3C00,  # 1.0
    0xBC00,  # -1.0
    0x2E66,  # 0.1
    0x211F,  # ~0.0101, a typical weight scale
    0xA11F,  # its negative
    0x0000,  # +0
    0x8000,  # -0
    0x7BFF,  # 65504, largest finite
    0xFBFF,  # -65504
    0x0001,  # 2^-24, smallest subnormal
    0x8001,  # -2^-24
    0x03FF,  # largest subnormal
    0x0400,  # 2^-14, smallest normal
    0x8400,  # -2^-14
]
# Non-finite halves, a few blocks per type (see the header).
NONFINITE_SCALES = [0x7C00, 0xFC00, 0x7E00, 0x7C01, 0xFE00]


def random_finite_half(rng):
    while True:
        h = int(rng.integers(0, 1 << 16))
        if (h & 0x7C00) != 0x7C00:
            return h


def model_like_half(rng):
    return int(np.float16(rng.normal(0.0, 0.02)).view(np.uint16))


def scale_plan(n_blocks, n_fields, rng):
    """Per block, the fp16 bits of each scale field."""
    plan = []
    # Each special value in each field: alone (random partner) for d, paired
    # with another special for d and m/dmin.
    n = len(SPECIAL_SCALES)
    for k, s in enumerate(SPECIAL_SCALES):
        if n_fields == 1:
            plan.append([s])
        else:
            plan.append([s, SPECIAL_SCALES[(k + 5) % n]])
    if n_fields == 2:  # the extremes together
        plan += [[0x7BFF, 0x7BFF], [0x7BFF, 0xFBFF], [0x0001, 0x0001], [0x3C00, 0x0000]]
    # Non-finite: each value as d, two as m/dmin.
    for s in NONFINITE_SCALES:
        row = [random_finite_half(rng) for _ in range(n_fields)]
        row[0] = s
        plan.append(row)
    if n_fields == 2:
        plan += [[0x3C00, 0x7C00], [0x3C00, 0x7E01]]
    n_nonfinite = len(NONFINITE_SCALES) + (2 if n_fields == 2 else 0)
    assert len(plan) <= n_blocks - 6, "too few blocks for the scale plan"
    while len(plan) < n_blocks:
        pick = model_like_half if len(plan) % 2 else random_finite_half
        plan.append([pick(rng) for _ in range(n_fields)])
    # Spread the special blocks over the file rather than leading with them.
    order = rng.permutation(n_blocks)
    return [plan[i] for i in order], n_nonfinite


def make_blocks(qtype, rng):
    block_values, block_bytes, scale_offsets, n_blocks = LAYOUTS[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    for i in range(n_blocks):
        if i % 16 == 3:
            raw[i, :] = 0x00
        elif i % 16 == 11:
            raw[i, :] = 0xFF
    payload = np.ones(block_bytes, dtype=bool)
    for off in scale_offsets:
        payload[off : off + 2] = False
    seen = np.unique(raw[:, payload])
    assert len(seen) == 256, f"{qtype.name}: not every payload byte value occurs"

    plan, _ = scale_plan(n_blocks, len(scale_offsets), rng)
    for i, row in enumerate(plan):
        for off, h in zip(scale_offsets, row):
            raw[i, off : off + 2] = np.frombuffer(struct.pack("<H", h), dtype=np.uint8)
    return raw.reshape(-1), n_blocks * block_values


def make_halves(rng, is_bf16):
    if is_bf16:
        # BF16 = the top half of a float32.
        special = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x7FFF,
                   0xFFFF, 0x7FA0, 0x0001, 0x8001, 0x007F, 0x0080, 0x8080, 0x7F7F, 0xFF7F,
                   0x3F80, 0xBF80]
    else:
        special = [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0xFE00, 0x7C01, 0xFC01, 0x7FFF,
                   0xFFFF, 0x7D55, 0x0001, 0x8001, 0x03FF, 0x83FF, 0x0400, 0x8400, 0x7BFF,
                   0xFBFF, 0x3C00, 0xBC00, 0x3BFF, 0x3C01]
    n = 4096
    bits = rng.integers(0, 1 << 16, size=n, dtype=np.uint16)
    # Extra subnormals and NaNs beyond what random bits give (~1/32 each).
    bits[n // 2 : n // 2 + 256] &= 0x807F if is_bf16 else 0x83FF  # subnormals
    bits[n // 2 + 256 : n // 2 + 320] |= 0x7F80 if is_bf16 else 0x7C00  # inf/NaN
    bits[: len(special)] = special
    return bits.view(np.uint8), n


def write_vector(qtype, raw, n_values):
    with np.errstate(all="ignore"):  # inf/NaN scales
        values = gguf.quants.dequantize(raw, qtype)
    values = np.ascontiguousarray(values, dtype=np.float32).reshape(-1)
    assert values.size == n_values, (qtype.name, values.size, n_values)
    assert values.dtype == np.float32
    nonzero = np.count_nonzero(values) / n_values
    assert nonzero > 0.5, f"{qtype.name}: only {nonzero:.0%} non-zero"

    path = OUT_DIR / f"{qtype.name.lower()}.bin"
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<4I", VERSION, int(qtype), n_values, raw.size))
        f.write(raw.astype(np.uint8).tobytes())
        f.write(values.astype("<f4").tobytes())
    nan = np.count_nonzero(np.isnan(values))
    print(f"{path.name:10} {path.stat().st_size:6} bytes  {n_values:5} values  "
          f"{nonzero:.0%} non-zero  {nan} NaN")


def main():
    have = importlib.metadata.version("gguf")
    if have != GGUF_VERSION:
        sys.exit(f"needs gguf=={GGUF_VERSION}, found {have}")
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for qtype in [T.F16, T.BF16]:
        rng = np.random.default_rng(20240 + int(qtype))
        raw, n = make_halves(rng, qtype == T.BF16)
        write_vector(qtype, raw, n)
    for qtype in LAYOUTS:
        rng = np.random.default_rng(20240 + int(qtype))  # one seed per type
        raw, n = make_blocks(qtype, rng)
        write_vector(qtype, raw, n)


if __name__ == "__main__":
    main()
