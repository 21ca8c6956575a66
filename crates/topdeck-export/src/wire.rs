// SPDX-License-Identifier: Apache-2.0
//! Protobuf fields as `prost` writes them for proto3 messages: scalars at
//! their default value are left out, repeated scalars are packed. Keys and
//! varints are pushed straight onto the `Vec` (prost's generic `BufMut`
//! versions were a sixth of a scrape); lengths come from prost. Shared by
//! the protobuf encoder and the label fields rendered once per source.

use prost::encoding::{encoded_len_varint, WireType};

#[inline]
pub(crate) fn varint(mut v: u64, buf: &mut Vec<u8>) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

#[inline]
fn key(tag: u32, wire_type: WireType, buf: &mut Vec<u8>) {
    varint(u64::from(tag << 3 | wire_type as u32), buf);
}

/// Bytes of a non-default `uint` field with a one-byte key.
pub(crate) fn uint_len(v: u64) -> usize {
    if v == 0 {
        0
    } else {
        1 + encoded_len_varint(v)
    }
}

/// Bytes of a non-default `sint32` field with a one-byte key.
pub(crate) fn sint32_len(v: i32) -> usize {
    if v == 0 {
        0
    } else {
        1 + encoded_len_varint(zigzag32(v))
    }
}

/// Bytes of a non-default `double` field with a one-byte key.
pub(crate) fn double_len(v: f64) -> usize {
    if v == 0.0 {
        0
    } else {
        9
    }
}

#[inline]
pub(crate) fn uint(tag: u32, v: u64, buf: &mut Vec<u8>) {
    if v != 0 {
        key(tag, WireType::Varint, buf);
        varint(v, buf);
    }
}

fn zigzag32(v: i32) -> u64 {
    u64::from(((v << 1) ^ (v >> 31)) as u32)
}

fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

pub(crate) fn sint32(tag: u32, v: i32, buf: &mut Vec<u8>) {
    if v != 0 {
        sint32_always(tag, v, buf);
    }
}

pub(crate) fn sint32_always(tag: u32, v: i32, buf: &mut Vec<u8>) {
    key(tag, WireType::Varint, buf);
    varint(zigzag32(v), buf);
}

#[inline]
pub(crate) fn double(tag: u32, v: f64, buf: &mut Vec<u8>) {
    if v != 0.0 {
        double_always(tag, v, buf);
    }
}

#[inline]
pub(crate) fn double_always(tag: u32, v: f64, buf: &mut Vec<u8>) {
    key(tag, WireType::SixtyFourBit, buf);
    buf.extend_from_slice(&v.to_le_bytes());
}

#[inline]
pub(crate) fn string(tag: u32, s: &str, buf: &mut Vec<u8>) {
    if !s.is_empty() {
        message(tag, s.as_bytes(), buf);
    }
}

#[inline]
pub(crate) fn message_header(tag: u32, len: usize, buf: &mut Vec<u8>) {
    key(tag, WireType::LengthDelimited, buf);
    varint(len as u64, buf);
}

/// Bytes of a length-delimited field of `len` bytes with a one-byte key.
pub(crate) fn message_len(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

#[inline]
pub(crate) fn message(tag: u32, body: &[u8], buf: &mut Vec<u8>) {
    message_header(tag, body.len(), buf);
    buf.extend_from_slice(body);
}

/// A message holding one double in field 1 (`Gauge`, `Counter`).
#[inline]
pub(crate) fn double_message(tag: u32, v: f64, buf: &mut Vec<u8>) {
    message_header(tag, double_len(v), buf);
    double(1, v, buf);
}

fn string_len(s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        1 + encoded_len_varint(s.len() as u64) + s.len()
    }
}

/// `Metric.label`: a `LabelPair` in field 1.
pub(crate) fn label_pair(name: &str, value: &str, buf: &mut Vec<u8>) {
    message_header(1, string_len(name) + string_len(value), buf);
    string(1, name, buf);
    string(2, value, buf);
}

pub(crate) fn packed_sint64(tag: u32, vs: &[i64], buf: &mut Vec<u8>) {
    if vs.is_empty() {
        return;
    }
    let len: usize = vs.iter().map(|&v| encoded_len_varint(zigzag64(v))).sum();
    message_header(tag, len, buf);
    for &v in vs {
        varint(zigzag64(v), buf);
    }
}
