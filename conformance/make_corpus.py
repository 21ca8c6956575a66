#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes conformance/corpus/: the hostile-file corpus every reader driver
must sort into the same accepted and rejected files. Run from the
repository's top: `python3 conformance/make_corpus.py`.

The files are the reader fuzz target's seeds (fuzz/corpus/reader/seed-*,
made by `td-fuzz-seeds` from real registries and the damaged files of
tests/tests/integration/bad_input.rs), copied as they are, and the other
damaged files of bad_input.rs that the seeds lack, made here from the
committed `seed-kinds` by the same patches. Everything is derived from
committed bytes and fixed seeds, so a second run writes the same files.
`rejected.txt` lists the files the Rust reader rejects, as reviewed by
hand against bad_input.rs (see corpus/README.md)."""

import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layout as L  # noqa: E402

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEEDS = os.path.join(TOP, "fuzz", "corpus", "reader")
OUT = os.path.join(TOP, "conformance", "corpus")


def patched(kinds, f):
    b = bytearray(kinds)
    f(b)
    return bytes(b)


def extra(kinds):
    """The damaged files of bad_input.rs that the fuzz seeds do not hold."""
    h = L.header(kinds)
    d = lambda i: L.desc_at(h, i)  # noqa: E731
    # Descriptors of the `kinds` seed (tests/src/lib.rs, template_metrics):
    # 0 requests_total (counter), 1 queue_depth (gauge), 2 load_ratio
    # (f64 gauge), 3 latency_seconds (histogram).
    out = {}
    for cut in (0, 4, L.HEADER_FIELDS_END, len(kinds) - 1):
        out[f"truncated-{cut}"] = kinds[:cut]
    out["table-past-end"] = patched(kinds, lambda b: L.put_u64(b, L.DESC_OFFSET, len(kinds)))
    out["table-huge-offset"] = patched(kinds, lambda b: L.put_u64(b, L.DESC_OFFSET, L.U64 - 8))
    out["gauge-offset"] = patched(
        kinds, lambda b: L.put_u64(b, d(1) + L.D_VALUE_OFFSET, h["shared_len"]))
    out["histogram-offset"] = patched(
        kinds, lambda b: L.put_u64(b, d(3) + L.D_VALUE_OFFSET, L.U64 - 8))
    out["name-ref"] = patched(kinds, lambda b: L.put_u32(b, d(0) + L.D_NAME, h["strings_len"]))
    out["unknown-kind"] = patched(kinds, lambda b: b.__setitem__(d(2) + L.D_KIND, 9))
    out["schema"] = patched(kinds, lambda b: b.__setitem__(d(3) + L.D_SCHEMA, 9))
    out["shards-in-use"] = patched(
        kinds, lambda b: L.put_u32(b, L.SHARDS_IN_USE, h["shard_count"] + 1))
    out["version-zero"] = patched(kinds, lambda b: L.put_u32(b, L.VERSION, 0))
    rng = random.Random(20240601)
    for seed in range(1, 5):
        out[f"random-{seed}"] = rng.randbytes(rng.randrange(40_000))
        # Right magic and version, random everything else.
        b = bytearray(rng.randbytes(4096 + rng.randrange(40_000)))
        b[:8] = L.MAGIC
        L.put_u32(b, L.VERSION, 1 << 16)
        out[f"random-header-{seed}"] = bytes(b)
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    for old in os.listdir(OUT):
        if old.endswith(".topdeck"):
            os.remove(os.path.join(OUT, old))
    files = {}
    for name in sorted(os.listdir(SEEDS)):
        with open(os.path.join(SEEDS, name), "rb") as f:
            files[name.removeprefix("seed-")] = f.read()
    files.update(extra(files["kinds"]))
    for name, b in sorted(files.items()):
        with open(os.path.join(OUT, name + ".topdeck"), "wb") as f:
            f.write(b)
    print(f"{len(files)} files in {os.path.relpath(OUT, TOP)}")


if __name__ == "__main__":
    main()
