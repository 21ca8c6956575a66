#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes a hostile registry file: a real-looking header on a sparse file
whose descriptor table is mostly holes, so it costs its author one page of
data while claiming a huge table (docs/PERFORMANCE.md, "Hostile files").

    bench/hostile.py PATH [--capacity N] [--desc-len N] [--valid N]
                          [--shards N] [--shard-len N] [--far]

`--capacity` slots of `--desc-len` bytes are declared and all published
(`desc_count = capacity`); the first `--valid` of them are valid counters
`x`, the rest are zero (unknown kind). The default declares 2^24 slots of
64 bytes: a 1 GiB table. `--shards` shards of `--shard-len` bytes are all
in use; with `--far`, counter `x` lives in the last word of each shard.
"""

import argparse
import os
import struct

PAGE = 4096


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path")
    ap.add_argument("--capacity", type=int, default=1 << 24)
    ap.add_argument("--desc-len", type=int, default=64)
    ap.add_argument("--valid", type=int, default=0)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--shard-len", type=int, default=PAGE)
    ap.add_argument("--far", action="store_true")
    a = ap.parse_args()

    table = a.capacity * a.desc_len
    desc_offset = PAGE
    strings_offset = desc_offset + -(-table // PAGE) * PAGE
    shared_offset = strings_offset + PAGE
    shards_offset = shared_offset + PAGE
    shard_count, shard_len = a.shards, a.shard_len
    value_offset = shard_len - 8 if a.far else 0
    file_len = shards_offset + (shard_count + 1) * shard_len

    h = bytearray(PAGE)
    h[0:8] = b"TOPDECK\0"
    struct.pack_into("<IIQII", h, 8, 0x0001_0001, PAGE, file_len, os.getpid(), 0)
    struct.pack_into("<QQQIIII", h, 32, 1, 0, desc_offset, a.capacity, a.desc_len, a.capacity, shard_count)
    struct.pack_into("<QQQQQQI", h, 72, strings_offset, PAGE, shared_offset, PAGE,
                     shards_offset, shard_len, shard_count)
    h[128:131] = b"svc"
    h[192:196] = b"main"
    # A counter named `x` at word 0 of each shard.
    desc = bytearray(a.desc_len)
    struct.pack_into("<BbHIQII", desc, 0, 1, 0, 0, 8, value_offset, 0, 1)
    with open(a.path, "wb") as f:
        f.truncate(file_len)
        f.write(h)
        f.seek(desc_offset)
        f.write(bytes(desc) * a.valid)
        f.seek(strings_offset)
        f.write(b"x")
    print(f"{a.path}: {file_len} bytes, {table} of descriptor table, {a.valid} valid")


if __name__ == "__main__":
    main()
