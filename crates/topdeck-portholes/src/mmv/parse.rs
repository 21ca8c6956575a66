// SPDX-License-Identifier: Apache-2.0
//! The parser: bytes copied out of an MMV file to [`Mmv`], every offset
//! and count checked against the copy (the file may be half-written,
//! stale or hostile). It follows pmdammv's reading (`src/pmdas/mmv/mmv.c`):
//! what pmdammv leaves out of a file (a metric with an invalid name, a
//! duplicate item, an unknown type) is left out here too, and listed.

use std::collections::HashMap;
use std::ops::Range;

use super::error::{Error, ErrorKind, Result};
use super::layout::*;
use super::{
    Flags, Header, Indom, Instance, Label, Metric, Mmv, Sample, Semantics, Skipped, Type, Units,
    Value,
};

/// Parses a copy of the MMV file called `file` (its name in the mmv
/// directory, which PCP names its metrics after).
///
/// A file whose writer has not published it yet is
/// [`ErrorKind::NotReady`]; anything that does not fit is
/// [`ErrorKind::Truncated`] or [`ErrorKind::Corrupt`], never a panic and
/// never a read outside `bytes`. Labels never fail the file: a record
/// without readable JSON text is counted in [`Mmv::labels_skipped`].
///
/// ```
/// use topdeck_portholes::mmv::{self, ErrorKind, SyntheticBuffer, SyntheticMetric, Type, Value};
///
/// let bytes = SyntheticBuffer::new(2)
///     .metric(SyntheticMetric::new("workers", 1, Type::I32))
///     .value(1, None, (-3i64).to_ne_bytes(), 0)
///     .build();
/// let file = mmv::parse(&bytes, "app")?;
/// assert_eq!(file.get("workers").unwrap().values[0].value, Some(Value::I32(-3)));
/// let err = mmv::parse(&bytes[..100], "app").unwrap_err();
/// assert!(matches!(err.kind(), ErrorKind::Truncated { .. }));
/// # Ok::<(), mmv::Error>(())
/// ```
pub fn parse(bytes: &[u8], file: &str) -> Result<Mmv> {
    let header = parse_header(bytes)?;
    let fields = Fields { bytes };
    let sections = Sections::read(&fields, &header)?;
    let strings = Strings {
        fields: &fields,
        section: sections.strings.clone(),
    };
    let v1 = header.version == 1;

    let instances = parse_instances(&fields, &strings, &sections.instances, v1)?;
    let indoms = parse_indoms(&fields, &strings, &sections, &instances)?;
    let prefix = if header.flags.noprefix() {
        "mmv.".to_owned()
    } else {
        format!("mmv.{file}.")
    };
    let (mut metrics, by_offset, skipped) =
        parse_metrics(&fields, &strings, &sections.metrics, v1, &prefix)?;
    parse_values(
        &fields,
        &strings,
        &sections,
        &instances,
        &by_offset,
        header.flags,
        &mut metrics,
    )?;
    let (labels, labels_skipped) = parse_labels(&fields, sections.labels.as_ref());
    Ok(Mmv {
        header,
        indoms,
        metrics,
        labels,
        labels_skipped,
        skipped,
    })
}

/// The header, with the generation handshake: a file is published once
/// `g1 != 0 && g1 == g2`.
pub(crate) fn parse_header(bytes: &[u8]) -> Result<Header> {
    if bytes.len() < HEADER_SIZE {
        return Err(Error::truncated("the header", HEADER_SIZE, bytes.len()));
    }
    let fields = Fields { bytes };
    let magic = [bytes[0], bytes[1], bytes[2], bytes[3]];
    if magic != MAGIC {
        return Err(Error::new(ErrorKind::BadMagic { found: magic }));
    }
    let version = fields.i32(VERSION_OFFSET).unwrap_or_default();
    if !(1..=3).contains(&version) {
        return Err(Error::new(ErrorKind::UnsupportedVersion { version }));
    }
    let g1 = fields.u64(G1_OFFSET).unwrap_or_default();
    let g2 = fields.u64(G2_OFFSET).unwrap_or_default();
    if g1 == 0 || g1 != g2 {
        return Err(Error::new(ErrorKind::NotReady { g1, g2 }));
    }
    let tocs = fields.i32(TOCS_OFFSET).unwrap_or_default();
    let tocs = match usize::try_from(tocs) {
        Ok(n) if (2..=MAX_TOCS).contains(&n) => n as u32,
        _ => {
            return Err(Error::corrupt(
                TOCS_OFFSET,
                "the TOC count is not between 2 (metrics and values) and 16",
            ))
        }
    };
    Ok(Header {
        version,
        generation: g1,
        tocs,
        flags: Flags(fields.u32(FLAGS_OFFSET).unwrap_or_default()),
        process: fields.i32(PROCESS_OFFSET).unwrap_or_default(),
        cluster: fields.i32(CLUSTER_OFFSET).unwrap_or_default(),
    })
}

/// A section: where its records start, how many, their size, and where
/// its TOC entry is (for errors).
#[derive(Debug, Clone)]
struct Section {
    start: usize,
    count: usize,
    size: usize,
    toc_at: usize,
}

impl Section {
    fn range(&self) -> Range<usize> {
        self.start..self.start + self.count * self.size
    }

    /// The index of the record at `offset`, when `offset` is the start of
    /// one of this section's records.
    fn index_of(&self, offset: u64) -> Option<usize> {
        let offset = usize::try_from(offset).ok()?;
        let rel = offset.checked_sub(self.start)?;
        (rel % self.size == 0 && rel / self.size < self.count).then_some(rel / self.size)
    }
}

/// The sections the TOC names, each inside the copy.
struct Sections {
    indoms: Option<Section>,
    instances: Option<Section>,
    metrics: Section,
    values: Section,
    strings: Option<Section>,
    labels: Option<Section>,
}

impl Sections {
    fn read(fields: &Fields<'_>, header: &Header) -> Result<Sections> {
        let len = fields.bytes.len();
        let tocs = header.tocs as usize;
        let toc_end = HEADER_SIZE + tocs * TOC_SIZE;
        if toc_end > len {
            return Err(Error::truncated("the table of contents", toc_end, len));
        }
        let v1 = header.version == 1;
        let mut found: [Option<Section>; 6] = Default::default();
        for i in 0..tocs {
            let at = HEADER_SIZE + i * TOC_SIZE;
            let kind = fields.i32(at).unwrap_or_default();
            let count = fields.i32(at + TOC_COUNT_OFFSET).unwrap_or_default();
            let offset = fields.u64(at + TOC_SECTION_OFFSET).unwrap_or_default();
            let size = match kind {
                TOC_INDOMS => INDOM_SIZE,
                TOC_INSTANCES if v1 => INSTANCE1_SIZE,
                TOC_INSTANCES => INSTANCE2_SIZE,
                TOC_METRICS if v1 => METRIC1_SIZE,
                TOC_METRICS => METRIC2_SIZE,
                TOC_VALUES => VALUE_SIZE,
                TOC_STRINGS => STRING_SIZE,
                TOC_LABELS => LABEL_SIZE,
                // pmdammv skips a type it does not know; so does this reader.
                _ => continue,
            };
            let slot = &mut found[(kind - 1) as usize];
            if slot.is_some() {
                return Err(Error::corrupt(at, "two TOC entries of the same type"));
            }
            let count = usize::try_from(count)
                .map_err(|_| Error::corrupt(at + TOC_COUNT_OFFSET, "a TOC count is negative"))?;
            if kind == TOC_VALUES && count > MAX_VALUES {
                return Err(Error::corrupt(
                    at + TOC_COUNT_OFFSET,
                    "more values than this reader reads (262144)",
                ));
            }
            if kind == TOC_METRICS && count > MAX_METRICS {
                return Err(Error::corrupt(
                    at + TOC_COUNT_OFFSET,
                    "more metrics than pmdammv reads (1023)",
                ));
            }
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            let section = Section {
                start,
                count,
                size,
                toc_at: at,
            };
            if kind != TOC_LABELS && count > 0 {
                // Checked before any multiplication can overflow: a count
                // is at most i32::MAX and a size 104 bytes.
                let end = start.saturating_add(count.saturating_mul(size));
                if end > len {
                    return Err(Error::truncated(section_name(kind), end, len));
                }
                if start < toc_end {
                    return Err(Error::corrupt(
                        at + TOC_SECTION_OFFSET,
                        "a section overlaps the header or the table of contents",
                    ));
                }
            }
            *slot = Some(section);
        }
        // Labels are excluded: their size differs between PCP releases.
        let mut ranges: Vec<(Range<usize>, usize)> = found[..5]
            .iter()
            .flatten()
            .filter(|s| s.count > 0)
            .map(|s| (s.range(), s.toc_at))
            .collect();
        ranges.sort_by_key(|(r, _)| r.start);
        for pair in ranges.windows(2) {
            if pair[1].0.start < pair[0].0.end {
                return Err(Error::corrupt(
                    pair[1].1 + TOC_SECTION_OFFSET,
                    "two sections overlap",
                ));
            }
        }
        let [indoms, instances, metrics, values, strings, labels] = found;
        let (Some(metrics), Some(values)) = (metrics, values) else {
            return Err(Error::corrupt(
                TOCS_OFFSET,
                "the table of contents has no metrics or no values section",
            ));
        };
        Ok(Sections {
            indoms,
            instances,
            metrics,
            values,
            strings,
            labels,
        })
    }
}

fn section_name(kind: i32) -> &'static str {
    match kind {
        TOC_INDOMS => "the indoms section",
        TOC_INSTANCES => "the instances section",
        TOC_METRICS => "the metrics section",
        TOC_VALUES => "the values section",
        TOC_STRINGS => "the strings section",
        _ => "a section",
    }
}

/// Strings by offset, only inside the strings section and on a slot.
struct Strings<'a> {
    fields: &'a Fields<'a>,
    section: Option<Section>,
}

impl Strings<'_> {
    /// The string at the offset stored at `field`; `None` for offset 0
    /// when `optional` (help texts).
    fn at(&self, field: usize, optional: bool) -> Result<Option<String>> {
        let offset = self.fields.u64(field).unwrap_or_default();
        if offset == 0 && optional {
            return Ok(None);
        }
        if self
            .section
            .as_ref()
            .and_then(|s| s.index_of(offset))
            .is_none()
        {
            return Err(Error::corrupt(
                field,
                "a string offset is not a slot of the strings section",
            ));
        }
        let start = offset as usize;
        let text = nul_bounded(&self.fields.bytes[start..start + STRING_SIZE])
            .ok_or_else(|| Error::corrupt(start, "a string has no NUL in its 256 bytes"))?;
        Ok(Some(String::from_utf8_lossy(text).into_owned()))
    }
}

/// The bytes of `slot` before its first NUL, `None` when it has none.
fn nul_bounded(slot: &[u8]) -> Option<&[u8]> {
    slot.iter().position(|&b| b == 0).map(|n| &slot[..n])
}

fn parse_instances(
    fields: &Fields<'_>,
    strings: &Strings<'_>,
    section: &Option<Section>,
    v1: bool,
) -> Result<Vec<Instance>> {
    let Some(section) = section else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(section.count);
    for i in 0..section.count {
        let at = section.start + i * section.size;
        let internal = fields
            .i32(at + INSTANCE_INTERNAL_OFFSET)
            .unwrap_or_default();
        let name = if v1 {
            let inline = &fields.bytes[at + INSTANCE_EXTERNAL_OFFSET..at + INSTANCE1_SIZE];
            let name = nul_bounded(inline).ok_or_else(|| {
                Error::corrupt(
                    at + INSTANCE_EXTERNAL_OFFSET,
                    "an instance name has no NUL in its 64 bytes",
                )
            })?;
            String::from_utf8_lossy(name).into_owned()
        } else {
            strings
                .at(at + INSTANCE_EXTERNAL_OFFSET, false)?
                .unwrap_or_default()
        };
        out.push(Instance { internal, name });
    }
    Ok(out)
}

fn parse_indoms(
    fields: &Fields<'_>,
    strings: &Strings<'_>,
    sections: &Sections,
    instances: &[Instance],
) -> Result<Vec<Indom>> {
    let Some(section) = &sections.indoms else {
        return Ok(Vec::new());
    };
    let mut out = Vec::with_capacity(section.count);
    for i in 0..section.count {
        let at = section.start + i * INDOM_SIZE;
        let serial = fields.u32(at).unwrap_or_default();
        let count = fields.u32(at + INDOM_COUNT_OFFSET).unwrap_or_default() as usize;
        let first = fields.u64(at + INDOM_FIRST_OFFSET).unwrap_or_default();
        let members = if count == 0 {
            Vec::new()
        } else {
            let index = sections
                .instances
                .as_ref()
                .and_then(|s| s.index_of(first))
                .filter(|&index| count <= instances.len() - index)
                .ok_or_else(|| {
                    Error::corrupt(
                        at + INDOM_FIRST_OFFSET,
                        "an indom's instances are not inside the instances section",
                    )
                })?;
            instances[index..index + count].to_vec()
        };
        out.push(Indom {
            serial,
            instances: members,
            short_help: strings
                .at(at + INDOM_SHORT_OFFSET, true)?
                .unwrap_or_default(),
            long_help: strings
                .at(at + INDOM_HELP_OFFSET, true)?
                .unwrap_or_default(),
        });
    }
    Ok(out)
}

/// What pmdammv's `verify_metric_name` accepts (of the name after the
/// prefix): a letter, then letters, digits, `_` and `.`.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
}

type MetricsParsed = (Vec<Metric>, HashMap<usize, usize>, Vec<Skipped>);

/// The metrics pmdammv would serve, the index of each by its record's
/// index in the section, and those it would not.
fn parse_metrics(
    fields: &Fields<'_>,
    strings: &Strings<'_>,
    section: &Section,
    v1: bool,
    prefix: &str,
) -> Result<MetricsParsed> {
    let mut metrics = Vec::with_capacity(section.count);
    let mut by_record = HashMap::with_capacity(section.count);
    let mut skipped = Vec::new();
    let mut items = HashMap::with_capacity(section.count);
    for k in 0..section.count {
        let at = section.start + k * section.size;
        let (name, tail) = if v1 {
            let inline = &fields.bytes[at..at + METRIC1_NAME_SIZE];
            let name = nul_bounded(inline)
                .ok_or_else(|| Error::corrupt(at, "a metric name has no NUL in its 64 bytes"))?;
            (
                String::from_utf8_lossy(name).into_owned(),
                at + METRIC1_NAME_SIZE,
            )
        } else {
            (
                strings.at(at, false)?.unwrap_or_default(),
                at + METRIC2_NAME_SIZE,
            )
        };
        let item = fields.u32(tail + METRIC_ITEM).unwrap_or_default();
        let code = fields.i32(tail + METRIC_TYPE).unwrap_or_default();
        let sem = fields.u32(tail + METRIC_SEM).unwrap_or_default();
        let units = Units::from_bits(fields.u32(tail + METRIC_UNITS).unwrap_or_default());
        let indom = fields.u32(tail + METRIC_INDOM).unwrap_or_default();
        let short_help = strings.at(tail + METRIC_SHORT, true)?.unwrap_or_default();
        let long_help = strings.at(tail + METRIC_HELP, true)?.unwrap_or_default();
        let why = if !valid_name(&name) {
            Some("its name is not a PCP name (a letter, then letters, digits, '_' and '.')")
        } else if item >= 1 << 10 {
            Some("its item number does not fit a PMID's 10 bits")
        } else if items.contains_key(&item) {
            Some("another metric of the file has its item number")
        } else {
            None
        };
        let kind = Type::from_code(code);
        let semantics = Semantics::from_code(sem);
        let why = why.or(match (kind, semantics) {
            (None, _) => Some("its type is NOSUPPORT or one this reader does not know"),
            (Some(Type::Elapsed), _) => None,
            (_, None) => Some("its semantics are none of counter, instant and discrete"),
            _ => None,
        });
        if let Some(why) = why {
            skipped.push(Skipped { name, why });
            continue;
        }
        let kind = kind.unwrap_or(Type::I64);
        // pmdammv serves every ELAPSED metric as a counter of microseconds.
        let (semantics, units) = match kind {
            Type::Elapsed => (Semantics::Counter, Units::MICROSECONDS),
            _ => (semantics.unwrap_or(Semantics::Unspecified), units),
        };
        items.insert(item, k);
        by_record.insert(k, metrics.len());
        metrics.push(Metric {
            pcp_name: format!("{prefix}{name}"),
            name,
            item,
            kind,
            semantics,
            units,
            indom: (indom != 0 && indom != INDOM_NULL).then_some(indom),
            short_help,
            long_help,
            values: Vec::new(),
        });
    }
    Ok((metrics, by_record, skipped))
}

fn parse_values(
    fields: &Fields<'_>,
    strings: &Strings<'_>,
    sections: &Sections,
    instances: &[Instance],
    by_record: &HashMap<usize, usize>,
    flags: Flags,
    metrics: &mut [Metric],
) -> Result<()> {
    let section = &sections.values;
    for i in 0..section.count {
        let at = section.start + i * VALUE_SIZE;
        let metric_at = fields.u64(at + VALUE_METRIC_OFFSET).unwrap_or_default();
        let record = sections.metrics.index_of(metric_at).ok_or_else(|| {
            Error::corrupt(
                at + VALUE_METRIC_OFFSET,
                "a value's metric offset is not a record of the metrics section",
            )
        })?;
        let Some(&index) = by_record.get(&record) else {
            continue; // a metric left out, as pmdammv leaves it out
        };
        let metric = &mut metrics[index];
        let instance = match metric.indom {
            None => None,
            Some(_) => {
                let offset = fields.u64(at + VALUE_INSTANCE_OFFSET).unwrap_or_default();
                let index = sections
                    .instances
                    .as_ref()
                    .and_then(|s| s.index_of(offset))
                    .ok_or_else(|| {
                        Error::corrupt(
                            at + VALUE_INSTANCE_OFFSET,
                            "a value's instance offset is not a record of the instances section",
                        )
                    })?;
                Some(instances[index].clone())
            }
        };
        let atom: [u8; 8] = fields.array(at).unwrap_or_default();
        let extra = fields.i64(at + VALUE_EXTRA_OFFSET).unwrap_or_default();
        let value = decode(metric.kind, atom, extra, strings, at)?;
        let value = value.filter(|v| !(flags.sentinel() && is_sentinel(v, atom)));
        metric.values.push(Sample { instance, value });
    }
    Ok(())
}

/// The value of `kind` in `atom` (a `pmAtomValue`, whose members all start
/// at its first byte) and `extra`.
fn decode(
    kind: Type,
    atom: [u8; 8],
    extra: i64,
    strings: &Strings<'_>,
    at: usize,
) -> Result<Option<Value>> {
    let word = [atom[0], atom[1], atom[2], atom[3]];
    Ok(Some(match kind {
        Type::I32 => Value::I32(i32::from_ne_bytes(word)),
        Type::U32 => Value::U32(u32::from_ne_bytes(word)),
        Type::I64 => Value::I64(i64::from_ne_bytes(atom)),
        Type::U64 => Value::U64(u64::from_ne_bytes(atom)),
        Type::Float => Value::Float(f32::from_ne_bytes(word)),
        Type::Double => Value::Double(f64::from_ne_bytes(atom)),
        Type::Elapsed => Value::Elapsed {
            value: i64::from_ne_bytes(atom),
            extra,
        },
        Type::String => Value::String(
            strings
                .at(at + VALUE_EXTRA_OFFSET, false)?
                .unwrap_or_default(),
        ),
    }))
}

/// pmdammv's sentinels (`mmv_fetchCallBack`): all ones for the integers
/// and elapsed, NaN for the floats, an empty string.
fn is_sentinel(value: &Value, atom: [u8; 8]) -> bool {
    match value {
        Value::I32(_) | Value::U32(_) | Value::I64(_) | Value::U64(_) | Value::Elapsed { .. } => {
            atom == [0xff; 8]
        }
        Value::Float(f) => f.is_nan(),
        Value::Double(d) => d.is_nan(),
        Value::String(s) => s.is_empty(),
    }
}

/// Labels from their JSON text, and how many records had none readable.
/// Never an error: their layout differs between PCP releases.
fn parse_labels(fields: &Fields<'_>, section: Option<&Section>) -> (Vec<Label>, usize) {
    let Some(section) = section else {
        return (Vec::new(), 0);
    };
    let len = fields.bytes.len();
    let fits = section.count <= MAX_LABELS
        && section
            .start
            .checked_add(section.count * LABEL_SIZE)
            .is_some_and(|end| end <= len);
    if !fits {
        return (Vec::new(), section.count.min(MAX_LABELS));
    }
    let mut labels = Vec::new();
    let mut skipped = 0;
    for i in 0..section.count {
        let at = section.start + i * LABEL_SIZE;
        let record = &fields.bytes[at..at + LABEL_SIZE];
        match label_json(record) {
            Some(map) => {
                let flags = fields.u32(at).unwrap_or_default();
                let identity = fields.u32(at + 4).unwrap_or_default();
                let internal = fields.i32(at + 8).unwrap_or_default();
                labels.extend(map.into_iter().map(|(name, value)| Label {
                    flags,
                    identity,
                    internal,
                    name,
                    value,
                }));
            }
            None => skipped += 1,
        }
    }
    (labels, skipped)
}

/// The JSON object in a label record: from its payload (6.0.3's layout)
/// or else its first `{`, to the NUL.
fn label_json(record: &[u8]) -> Option<serde_json::Map<String, serde_json::Value>> {
    let start = if record.get(LABEL_PAYLOAD_OFFSET) == Some(&b'{') {
        LABEL_PAYLOAD_OFFSET
    } else {
        record.iter().position(|&b| b == b'{')?
    };
    let text = nul_bounded(&record[start..])?;
    serde_json::from_slice(text).ok()
}

/// Fixed-size fields in host byte order, bounds-checked.
pub(crate) struct Fields<'a> {
    pub(crate) bytes: &'a [u8],
}

impl Fields<'_> {
    fn array<const N: usize>(&self, offset: usize) -> Option<[u8; N]> {
        self.bytes.get(offset..)?.get(..N)?.try_into().ok()
    }

    fn i32(&self, offset: usize) -> Option<i32> {
        self.array(offset).map(i32::from_ne_bytes)
    }

    fn u32(&self, offset: usize) -> Option<u32> {
        self.array(offset).map(u32::from_ne_bytes)
    }

    fn i64(&self, offset: usize) -> Option<i64> {
        self.array(offset).map(i64::from_ne_bytes)
    }

    pub(crate) fn u64(&self, offset: usize) -> Option<u64> {
        self.array(offset).map(u64::from_ne_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mmv::{SyntheticBuffer, SyntheticMetric};

    /// A file of every kind of record: an indom of two instances, a
    /// counter over it, a double, a string, an elapsed timing in progress.
    fn sample(version: i32) -> SyntheticBuffer {
        SyntheticBuffer::new(version)
            .indom(3, &[(0, "high"), (1, "low")], "queues", "work queues")
            .metric(
                SyntheticMetric::new("requests", 1, Type::U64)
                    .indom(3)
                    .help("requests served", "requests served, per queue"),
            )
            .metric(SyntheticMetric::new("latency", 2, Type::Double).semantics(3))
            .metric(SyntheticMetric::new("version", 3, Type::String).semantics(4))
            .metric(SyntheticMetric::new("busy", 4, Type::Elapsed).semantics(3))
            .value(1, Some(0), 41u64.to_ne_bytes(), 0)
            .value(1, Some(1), 7u64.to_ne_bytes(), 0)
            .value(2, None, 12.5f64.to_ne_bytes(), 0)
            .string_value(3, None, "1.2.3")
            .value(4, None, 100i64.to_ne_bytes(), -1_000)
    }

    fn kind(bytes: &[u8]) -> ErrorKind {
        match parse(bytes, "app") {
            Ok(m) => panic!("parsed a hostile file: {m:?}"),
            Err(e) => e.kind().clone(),
        }
    }

    /// Offset of the TOC entry of section `kind`.
    fn toc_of(bytes: &[u8], kind: i32) -> usize {
        let tocs = i32::from_ne_bytes(bytes[TOCS_OFFSET..TOCS_OFFSET + 4].try_into().unwrap());
        (0..tocs as usize)
            .map(|i| HEADER_SIZE + i * TOC_SIZE)
            .find(|&at| i32::from_ne_bytes(bytes[at..at + 4].try_into().unwrap()) == kind)
            .expect("section in the TOC")
    }

    fn section_of(bytes: &[u8], kind: i32) -> usize {
        let at = toc_of(bytes, kind) + TOC_SECTION_OFFSET;
        u64::from_ne_bytes(bytes[at..at + 8].try_into().unwrap()) as usize
    }

    fn put_i32(bytes: &mut [u8], at: usize, v: i32) {
        bytes[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    }

    fn put_u64(bytes: &mut [u8], at: usize, v: u64) {
        bytes[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    }

    fn corrupt(kind: ErrorKind) -> &'static str {
        match kind {
            ErrorKind::Corrupt { problem, .. } => problem,
            other => panic!("not corrupt: {other:?}"),
        }
    }

    #[test]
    fn every_version_parses_to_the_same_metrics_and_values() {
        let v1 = parse(&sample(1).build(), "app").unwrap();
        for version in [2, 3] {
            let other = parse(&sample(version).build(), "app").unwrap();
            assert_eq!(other.metrics, v1.metrics, "version {version}");
            assert_eq!(other.indoms, v1.indoms);
        }
        let requests = v1.get("requests").unwrap();
        assert_eq!(requests.pcp_name, "mmv.app.requests");
        assert_eq!(requests.short_help, "requests served");
        assert_eq!(requests.long_help, "requests served, per queue");
        assert_eq!(requests.indom, Some(3));
        let names: Vec<_> = requests
            .values
            .iter()
            .map(|s| (s.instance.clone().unwrap().name, s.value.clone()))
            .collect();
        assert_eq!(
            names,
            [
                ("high".into(), Some(Value::U64(41))),
                ("low".into(), Some(Value::U64(7)))
            ]
        );
        assert_eq!(v1.indoms[0].long_help, "work queues");
        // An ELAPSED metric is served as a counter of microseconds.
        let busy = v1.get("busy").unwrap();
        assert_eq!(
            (busy.semantics, busy.units),
            (Semantics::Counter, Units::MICROSECONDS)
        );
        let value = busy.values[0].value.clone().unwrap();
        assert_eq!(value.as_f64(1_500), Some(600.0));
    }

    #[test]
    fn the_table_of_contents_is_followed_in_any_order() {
        let plain = parse(&sample(2).build(), "app").unwrap();
        let reversed = parse(&sample(2).reversed_toc().build(), "app").unwrap();
        assert_eq!(plain, reversed);
    }

    #[test]
    fn every_truncation_is_an_error_and_never_a_panic() {
        for version in 1..=3 {
            let bytes = sample(version).build();
            for len in 0..bytes.len() {
                let kind = kind(&bytes[..len]);
                assert!(
                    matches!(kind, ErrorKind::Truncated { .. }),
                    "version {version} at {len}: {kind:?}"
                );
            }
        }
    }

    #[test]
    fn truncated_labels_are_skipped_not_fatal() {
        let bytes = sample(3).label(0x1, 0, -1, r#"{"a":1}"#).build();
        let labels_at = section_of(&bytes, TOC_LABELS);
        for len in labels_at..bytes.len() {
            let m = parse(&bytes[..len], "app").unwrap();
            assert_eq!((m.labels.len(), m.labels_skipped), (0, 1), "at {len}");
        }
        assert_eq!(parse(&bytes, "app").unwrap().labels.len(), 1);
    }

    #[test]
    fn a_wrong_magic_or_version_is_refused() {
        let mut bytes = sample(1).build();
        bytes[0] = b'X';
        assert!(matches!(kind(&bytes), ErrorKind::BadMagic { found } if found == *b"XMV\0"));
        for version in [0, 4, -1, i32::MAX] {
            let mut bytes = sample(1).build();
            put_i32(&mut bytes, VERSION_OFFSET, version);
            assert_eq!(kind(&bytes), ErrorKind::UnsupportedVersion { version });
        }
    }

    #[test]
    fn an_unpublished_file_is_not_ready() {
        for (g1, g2) in [(0, 0), (5, 0), (5, 6), (0, 5)] {
            let bytes = sample(2).generation(g1, g2).build();
            let err = parse(&bytes, "app").unwrap_err();
            assert_eq!(*err.kind(), ErrorKind::NotReady { g1, g2 });
            assert!(err.is_not_ready());
        }
    }

    #[test]
    fn a_toc_count_out_of_range_is_corrupt() {
        for tocs in [-1, 0, 1, 17, i32::MAX] {
            let mut bytes = sample(1).build();
            put_i32(&mut bytes, TOCS_OFFSET, tocs);
            assert!(
                matches!(kind(&bytes), ErrorKind::Corrupt { offset, .. } if offset == TOCS_OFFSET as u64),
                "{tocs}"
            );
        }
    }

    #[test]
    fn sections_outside_the_file_or_over_each_other_are_refused() {
        let bytes = sample(2).build();
        let values = toc_of(&bytes, TOC_VALUES);
        let mut outside = bytes.clone();
        put_u64(&mut outside, values + TOC_SECTION_OFFSET, u64::MAX - 3);
        assert!(matches!(kind(&outside), ErrorKind::Truncated { .. }));
        let mut into_header = bytes.clone();
        put_u64(&mut into_header, values + TOC_SECTION_OFFSET, 8);
        assert!(corrupt(kind(&into_header)).contains("header"));
        let mut overlapping = bytes.clone();
        let metrics_at = section_of(&bytes, TOC_METRICS) as u64;
        put_u64(
            &mut overlapping,
            values + TOC_SECTION_OFFSET,
            metrics_at + 8,
        );
        assert_eq!(corrupt(kind(&overlapping)), "two sections overlap");
        let mut twice = bytes.clone();
        put_i32(&mut twice, toc_of(&bytes, TOC_STRINGS), TOC_VALUES);
        assert_eq!(corrupt(kind(&twice)), "two TOC entries of the same type");
        let mut no_metrics = bytes.clone();
        put_i32(&mut no_metrics, toc_of(&bytes, TOC_METRICS), 99);
        assert!(corrupt(kind(&no_metrics)).contains("no metrics"));
    }

    #[test]
    fn huge_or_negative_counts_are_refused_before_anything_is_allocated() {
        let bytes = sample(2).build();
        for (section, count) in [
            (TOC_METRICS, i32::MAX),
            (TOC_METRICS, 1024),
            (TOC_VALUES, i32::MAX),
            (TOC_INSTANCES, i32::MAX),
            (TOC_STRINGS, i32::MAX),
            (TOC_INDOMS, -1),
        ] {
            let mut hostile = bytes.clone();
            put_i32(
                &mut hostile,
                toc_of(&bytes, section) + TOC_COUNT_OFFSET,
                count,
            );
            assert!(
                matches!(
                    kind(&hostile),
                    ErrorKind::Corrupt { .. } | ErrorKind::Truncated { .. }
                ),
                "{section} {count}"
            );
        }
        // An indom claiming more instances than the section holds.
        let mut hostile = bytes.clone();
        let indom = section_of(&bytes, TOC_INDOMS);
        put_i32(&mut hostile, indom + INDOM_COUNT_OFFSET, i32::MAX);
        assert!(corrupt(kind(&hostile)).contains("instances section"));
    }

    #[test]
    fn names_and_strings_without_a_nul_are_corrupt() {
        let mut bytes = sample(1).build();
        let metrics = section_of(&bytes, TOC_METRICS);
        bytes[metrics..metrics + NAME_MAX].fill(b'a');
        assert!(corrupt(kind(&bytes)).contains("metric name has no NUL"));
        let mut bytes = sample(1).build();
        let instances = section_of(&bytes, TOC_INSTANCES);
        let at = instances + INSTANCE_EXTERNAL_OFFSET;
        bytes[at..at + NAME_MAX].fill(b'b');
        assert!(corrupt(kind(&bytes)).contains("instance name has no NUL"));
        let mut bytes = sample(2).build();
        let strings = section_of(&bytes, TOC_STRINGS);
        bytes[strings..strings + STRING_SIZE].fill(b'c');
        assert!(corrupt(kind(&bytes)).contains("no NUL in its 256 bytes"));
    }

    #[test]
    fn offsets_that_point_elsewhere_or_loop_are_corrupt() {
        let bytes = sample(2).build();
        let values = section_of(&bytes, TOC_VALUES);
        let metrics = section_of(&bytes, TOC_METRICS) as u64;
        let instances = section_of(&bytes, TOC_INSTANCES) as u64;
        let indoms = section_of(&bytes, TOC_INDOMS);
        // A value's metric: misaligned, outside, or a value (a loop).
        for target in [metrics + 1, u64::MAX, values as u64, 0] {
            let mut hostile = bytes.clone();
            put_u64(&mut hostile, values + VALUE_METRIC_OFFSET, target);
            assert!(
                corrupt(kind(&hostile)).contains("metric offset"),
                "{target}"
            );
        }
        // A value's instance: misaligned or the indom itself.
        for target in [instances + 3, indoms as u64, 0] {
            let mut hostile = bytes.clone();
            put_u64(&mut hostile, values + VALUE_INSTANCE_OFFSET, target);
            assert!(
                corrupt(kind(&hostile)).contains("instance offset"),
                "{target}"
            );
        }
        // An indom whose first instance is itself.
        let mut hostile = bytes.clone();
        put_u64(&mut hostile, indoms + INDOM_FIRST_OFFSET, indoms as u64);
        assert!(corrupt(kind(&hostile)).contains("instances section"));
        // A metric name pointing at the values, and a help text off a slot.
        let mut hostile = bytes.clone();
        put_u64(&mut hostile, metrics as usize, values as u64);
        assert!(corrupt(kind(&hostile)).contains("strings section"));
        let mut hostile = bytes.clone();
        let short = metrics as usize + METRIC2_NAME_SIZE + METRIC_SHORT;
        let strings = section_of(&bytes, TOC_STRINGS) as u64;
        put_u64(&mut hostile, short, strings + 1);
        assert!(corrupt(kind(&hostile)).contains("strings section"));
        // A string value's offset outside the strings section.
        let string_value = values + 3 * VALUE_SIZE;
        let mut hostile = bytes.clone();
        put_u64(&mut hostile, string_value + VALUE_EXTRA_OFFSET, u64::MAX);
        assert!(corrupt(kind(&hostile)).contains("strings section"));
    }

    #[test]
    fn errors_name_the_file_and_the_problem() {
        let mut bytes = sample(1).build();
        put_i32(&mut bytes, TOCS_OFFSET, 1);
        let err = parse(&bytes, "app")
            .map_err(|e| e.at(std::path::Path::new("/var/lib/pcp/tmp/mmv/app")))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with("/var/lib/pcp/tmp/mmv/app: corrupt at byte 24"),
            "{text}"
        );
    }

    #[test]
    fn sentinels_are_no_value_only_with_the_sentinel_flag() {
        let build = |flags| {
            SyntheticBuffer::new(2)
                .flags(flags)
                .metric(SyntheticMetric::new("i", 1, Type::U64))
                .metric(SyntheticMetric::new("d", 2, Type::Double))
                .metric(SyntheticMetric::new("f", 3, Type::Float))
                .metric(SyntheticMetric::new("s", 4, Type::String))
                .metric(SyntheticMetric::new("e", 5, Type::Elapsed))
                .metric(SyntheticMetric::new("k", 6, Type::I32))
                .value(1, None, [0xff; 8], 0)
                .value(2, None, f64::NAN.to_ne_bytes(), 0)
                .value(3, None, [0, 0, 0xc0, 0x7f, 0, 0, 0, 0], 0)
                .string_value(4, None, "")
                .value(5, None, [0xff; 8], 0)
                // The low half all ones is a value: the sentinel is the whole atom.
                .value(6, None, [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0], 0)
                .build()
        };
        let with = parse(&build(Flags::SENTINEL), "app").unwrap();
        let values: Vec<_> = with
            .metrics
            .iter()
            .map(|m| m.values[0].value.clone())
            .collect();
        assert_eq!(values, [None, None, None, None, None, Some(Value::I32(-1))]);
        let without = parse(&build(0), "app").unwrap();
        assert_eq!(
            without.metrics[0].values[0].value,
            Some(Value::U64(u64::MAX))
        );
        assert_eq!(
            without.metrics[3].values[0].value,
            Some(Value::String(String::new()))
        );
    }

    #[test]
    fn metrics_pmdammv_leaves_out_are_left_out_and_listed() {
        let bytes = SyntheticBuffer::new(2)
            .metric(SyntheticMetric::new("ok", 1, Type::U32))
            .metric(SyntheticMetric::new("9lives", 2, Type::U32))
            .metric(SyntheticMetric::new("has-dash", 3, Type::U32))
            .metric(SyntheticMetric::new("again", 1, Type::U32))
            .metric(SyntheticMetric::with_code("nosupport", 4, -1))
            .metric(SyntheticMetric::with_code("aggregate", 5, 7))
            .metric(SyntheticMetric::new("odd.sem", 6, Type::U32).semantics(2))
            .metric(SyntheticMetric::new("big.item", 1 << 10, Type::U32))
            .value(1, None, 1u64.to_ne_bytes(), 0)
            .value(2, None, 2u64.to_ne_bytes(), 0)
            .value(5, None, 2u64.to_ne_bytes(), 0)
            .build();
        let m = parse(&bytes, "app").unwrap();
        assert_eq!(m.metrics.len(), 1);
        assert_eq!(m.metrics[0].values.len(), 1);
        let skipped: Vec<_> = m.skipped.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            skipped,
            [
                "9lives",
                "has-dash",
                "again",
                "nosupport",
                "aggregate",
                "odd.sem",
                "big.item"
            ]
        );
    }

    #[test]
    fn noprefix_names_go_without_the_file() {
        let bytes = sample(1)
            .flags(Flags::NOPREFIX | Flags::PROCESS)
            .process(77)
            .build();
        let m = parse(&bytes, "app").unwrap();
        assert_eq!(m.metrics[0].pcp_name, "mmv.requests");
        assert!(m.header.flags.process() && m.header.flags.noprefix());
        assert_eq!(m.header.process, 77);
    }

    #[test]
    fn labels_are_read_from_their_json_text_or_skipped() {
        let bytes = sample(3)
            .label(0x1 | 0x80, 0, -1, r#"{"service":"checkout","replicas":3}"#)
            .label(0x20, 3, 1, "not json")
            .label(0x10, 1, -1, "")
            .build();
        let m = parse(&bytes, "app").unwrap();
        let labels: Vec<_> = m
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.clone()))
            .collect();
        assert_eq!(
            labels,
            [
                ("replicas", serde_json::json!(3)),
                ("service", serde_json::json!("checkout"))
            ]
        );
        assert_eq!((m.labels[0].flags, m.labels[0].internal), (0x81, -1));
        assert_eq!(m.labels_skipped, 2);
        // A labels section out of the file, or of a hostile size, fails nothing.
        for (count, offset) in [(1, u64::MAX), (i32::MAX, 200), (3, 0)] {
            let mut hostile = bytes.clone();
            let toc = toc_of(&bytes, TOC_LABELS);
            put_i32(&mut hostile, toc + TOC_COUNT_OFFSET, count);
            put_u64(&mut hostile, toc + TOC_SECTION_OFFSET, offset);
            let m = parse(&hostile, "app").unwrap();
            assert_eq!(m.metrics.len(), 4, "{count} {offset}");
        }
    }

    #[test]
    fn flipped_bytes_never_panic() {
        // A fixed-seed xorshift: the same thousands of mutations each run.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for version in 1..=3 {
            let bytes = sample(version).label(1, 0, -1, r#"{"a":"b"}"#).build();
            for _ in 0..3000 {
                let mut hostile = bytes.clone();
                for _ in 0..1 + next() % 4 {
                    let at = (next() as usize) % hostile.len();
                    hostile[at] = next() as u8;
                }
                let _ = parse(&hostile, "app");
            }
        }
    }
}
