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
            _ => (semantics.unwrap_or(Semantics::Counter), units),
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
