#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Reader driver of conformance/PROTOCOL.md for the Python package:

    python3 bindings/python/conformance/reader.py <dir>

Prints the canonical JSON document; exit 1 only if <dir> cannot be read.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from topdeck import reader  # noqa: E402


def histogram(v):
    counts = v.counts
    first = next((k for k, n in enumerate(counts) if n), None)
    if first is None:
        trimmed, min_index = [], v.min_index
    else:
        last = max(k for k, n in enumerate(counts) if n)
        trimmed, min_index = counts[first:last + 1], v.min_index + first
    return {"schema": v.schema, "zero_threshold": v.zero_threshold, "zero_count": v.zero_count,
            "min_index": min_index, "buckets": trimmed, "count": v.count, "sum": v.sum, "max": v.max}


def main():
    if len(sys.argv) != 2:
        print("usage: reader.py <dir>", file=sys.stderr)
        return 2
    directory = sys.argv[1]
    try:
        reader.check_dir(directory)
    except (reader.BadFile, OSError) as e:
        print(f"error: {directory}: {e}", file=sys.stderr)
        return 1
    found = reader.listing(directory)
    registries = []
    for r in found.registries:
        registries.append({
            "file": os.path.basename(r.path),
            "registry": r.registry,
            "state": r.state,
            "metrics": [{
                "kind": m.kind, "name": m.name, "labels": [[k, v] for k, v in m.labels.items()],
                "help": m.help, "unit": m.unit,
                "value": histogram(m.value) if m.kind == "histogram" else m.value,
            } for m in r.metrics],
        })
    registries.sort(key=lambda r: r["file"])
    rejected = sorted(os.path.basename(p) for p, _ in found.errors if p != directory)
    json.dump({"registries": registries, "rejected": rejected}, sys.stdout, ensure_ascii=False)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
