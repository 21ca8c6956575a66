# SPDX-License-Identifier: Apache-2.0
"""Exponential bucket maths (docs/FORMAT.md section 5), the scheme of
Prometheus native histograms and OpenTelemetry exponential histograms.

This is the format's frexp formulation, which indexes exactly as
``crates/topdeck-format/src/exponential.rs`` does (the Rust library uses a
table on the mantissa for speed); ``tests/test_exponential.py`` holds the
two to each other on vectors the Rust library printed.

>>> bucket_index(3, 1.0), bucket_index(3, 1.01), bucket_index(0, 3.0)
(0, 1, 2)
>>> upper_bound(3, 8)
2.0
"""

import math
import struct
import sys
from bisect import bisect_left

MIN_SCHEMA = -4
MAX_SCHEMA = 8
DEFAULT_SCHEMA = 3
MAX_BUCKETS = 1024
#: The library's default range when recording seconds: 1 ns to 10^6 s.
DEFAULT_MIN = 1e-9
DEFAULT_MAX = 1e6


def _octave_bounds(schema):
    """``bounds[j] = 2^(j/2^s - 1)`` for ``j < 2^s``: the fractions (in
    ``[0.5, 1)``) at which buckets change within one power of two."""
    n = 1 << schema
    return tuple(2.0 ** (j / n - 1) for j in range(n))


_BOUNDS = {s: _octave_bounds(s) for s in range(1, MAX_SCHEMA + 1)}


def check_schema(schema):
    if not isinstance(schema, int) or not MIN_SCHEMA <= schema <= MAX_SCHEMA:
        raise ValueError(f"histogram schema {schema!r} is outside {MIN_SCHEMA}..={MAX_SCHEMA}")


def bucket_index(schema, v):
    """The index of the bucket ``(base^(i-1), base^i]`` holding a finite
    ``v > 0``, computed as Prometheus does."""
    frac, exp = math.frexp(v)
    if schema > 0:
        return bisect_left(_BOUNDS[schema], frac) + ((exp - 1) << schema)
    key = exp - 1 if frac == 0.5 else exp
    shift = -schema
    return (key + (1 << shift) - 1) >> shift


def upper_bound(schema, index):
    """``base^index``, saturating to the largest finite double."""
    if schema > 0:
        n = 1 << schema
        frac, exp = 2.0 ** ((index % n) / n), index // n
    else:
        frac, exp = 1.0, index << -schema
    if exp >= 1024:
        return sys.float_info.max
    try:
        return math.ldexp(frac, exp)
    except OverflowError:
        return sys.float_info.max


def buckets(schema=DEFAULT_SCHEMA, lo=DEFAULT_MIN, hi=DEFAULT_MAX):
    """The range of a new histogram: ``(lo, hi]`` at ``schema``, refused
    (ValueError) when invalid or past the format's 1024 buckets, as the
    Rust library's ``Buckets::exponential`` refuses it.

    >>> buckets().bucket_count
    400
    """
    check_schema(schema)
    if not (0 < lo < hi < math.inf):
        raise ValueError(f"histogram range ({lo}, {hi}] must satisfy 0 < min < max < inf")
    r = BucketRange.covering(schema, lo, hi)
    if r.bucket_count > MAX_BUCKETS:
        raise ValueError(
            f"histogram range ({lo}, {hi}] at schema {schema} needs {r.bucket_count} buckets, "
            f"more than {MAX_BUCKETS}; narrow the range or lower the schema")
    return r


class BucketRange:
    """``bucket_count`` buckets from ``min_index`` at ``schema``, and a zero
    bucket below them up to ``zero_threshold``."""

    __slots__ = ("schema", "min_index", "bucket_count", "zero_threshold")

    def __init__(self, schema, min_index, bucket_count):
        self.schema = schema
        self.min_index = min_index
        self.bucket_count = bucket_count
        self.zero_threshold = upper_bound(schema, min_index - 1)

    @classmethod
    def covering(cls, schema, lo, hi):
        """The range that covers ``(lo, hi]`` with whole buckets."""
        first = bucket_index(schema, lo)
        last = bucket_index(schema, hi)
        return cls(schema, first, (last if last > first else first) - first + 1)

    def slot(self, v):
        """Where ``v`` is counted: a bucket offset, ``-1`` for the zero
        bucket, ``None`` for NaN (not recorded)."""
        if v > self.zero_threshold:
            i = bucket_index(self.schema, v) - self.min_index
            return min(max(i, 0), self.bucket_count - 1)
        if v != v:
            return None
        return -1

    def __eq__(self, other):
        return isinstance(other, BucketRange) and (
            self.schema, self.min_index, self.bucket_count) == (
            other.schema, other.min_index, other.bucket_count)

    def __repr__(self):
        return f"BucketRange(schema={self.schema}, min_index={self.min_index}, bucket_count={self.bucket_count})"


def ordered_bits(v):
    """A u64 with the order of the floats, never 0 for a non-NaN value."""
    (b,) = struct.unpack("<Q", struct.pack("<d", v))
    return b | (1 << 63) if b >> 63 == 0 else ~b & 0xFFFF_FFFF_FFFF_FFFF


def from_ordered_bits(o):
    """Inverse of :func:`ordered_bits`; ``None`` for 0 (no value)."""
    if o == 0:
        return None
    raw = o & ~(1 << 63) if o >> 63 else ~o & 0xFFFF_FFFF_FFFF_FFFF
    return struct.unpack("<d", struct.pack("<Q", raw))[0]
