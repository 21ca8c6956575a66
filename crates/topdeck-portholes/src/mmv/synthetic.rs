// SPDX-License-Identifier: Apache-2.0
//! MMV files laid out as libpcp_mmv lays them out, for tests and examples
//! (a reader's tests need files no writer would make, built from ones it
//! would).

use super::layout::*;
use super::{Type, Units};

/// One metric of a [`SyntheticBuffer`]: a counter of no units and no
/// indom unless told otherwise.
#[derive(Debug, Clone)]
pub struct SyntheticMetric {
    name: String,
    item: u32,
    code: i32,
    semantics: u32,
    units: u32,
    indom: u32,
    short_help: String,
    long_help: String,
}

impl SyntheticMetric {
    /// A metric `name` with item number `item` and type `kind`.
    pub fn new(name: &str, item: u32, kind: Type) -> Self {
        Self::with_code(name, item, kind.code())
    }

    /// A metric whose type code is `code`, whatever it is (`-1` is
    /// `NOSUPPORT`).
    pub fn with_code(name: &str, item: u32, code: i32) -> Self {
        SyntheticMetric {
            name: name.to_owned(),
            item,
            code,
            semantics: 1,
            units: 0,
            indom: INDOM_NULL,
            short_help: String::new(),
            long_help: String::new(),
        }
    }

    /// Sets the semantics code (1 counter, 3 instant, 4 discrete).
    pub fn semantics(mut self, code: u32) -> Self {
        self.semantics = code;
        self
    }

    /// Sets the units.
    pub fn units(mut self, units: Units) -> Self {
        self.units = units.to_bits();
        self
    }

    /// Gives the metric the instance domain `serial`.
    pub fn indom(mut self, serial: u32) -> Self {
        self.indom = serial;
        self
    }

    /// Sets the help texts (empty: none).
    pub fn help(mut self, short: &str, long: &str) -> Self {
        self.short_help = short.to_owned();
        self.long_help = long.to_owned();
        self
    }
}

#[derive(Debug, Clone)]
struct SynthIndom {
    serial: u32,
    instances: Vec<(i32, String)>,
    short_help: String,
    long_help: String,
}

#[derive(Debug, Clone)]
struct SynthValue {
    item: u32,
    instance: Option<i32>,
    atom: [u8; 8],
    extra: i64,
    string: Option<String>,
}

/// Builds an MMV file section by section as `mmv_stats_start` does:
/// header, table of contents, indoms, instances, metrics, values, strings,
/// labels. The file ends with its last section, so that every shorter
/// slice of it is a truncated file.
///
/// ```
/// use topdeck_portholes::mmv::{self, SyntheticBuffer, SyntheticMetric, Type, Value};
///
/// let bytes = SyntheticBuffer::new(3)
///     .flags(0x2)
///     .process(4242)
///     .metric(SyntheticMetric::new("version", 1, Type::String).semantics(4))
///     .string_value(1, None, "1.2.3")
///     .label(0x1, 0, -1, r#"{"service":"checkout"}"#)
///     .build();
/// let file = mmv::parse(&bytes, "app")?;
/// assert_eq!((file.header.version, file.header.process), (3, 4242));
/// assert_eq!(file.metrics[0].values[0].value, Some(Value::String("1.2.3".into())));
/// assert_eq!(file.labels[0].name, "service");
/// # Ok::<(), mmv::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct SyntheticBuffer {
    version: i32,
    g1: u64,
    g2: u64,
    flags: u32,
    process: i32,
    cluster: i32,
    indoms: Vec<SynthIndom>,
    metrics: Vec<SyntheticMetric>,
    values: Vec<SynthValue>,
    labels: Vec<(u32, u32, i32, String)>,
    reversed_toc: bool,
}

impl SyntheticBuffer {
    /// An empty, published file of format `version` (1 to 3 are valid).
    pub fn new(version: i32) -> Self {
        SyntheticBuffer {
            version,
            g1: 1_700_000_000,
            g2: 1_700_000_000,
            flags: 0,
            process: 0,
            cluster: 42,
            indoms: Vec::new(),
            metrics: Vec::new(),
            values: Vec::new(),
            labels: Vec::new(),
            reversed_toc: false,
        }
    }

    /// Sets the generation fields (equal and non-zero once published).
    pub fn generation(mut self, g1: u64, g2: u64) -> Self {
        self.g1 = g1;
        self.g2 = g2;
        self
    }

    /// Sets the flags (`Flags::NOPREFIX`, `PROCESS`, `SENTINEL`).
    pub fn flags(mut self, flags: u32) -> Self {
        self.flags = flags;
        self
    }

    /// Sets the writer's pid.
    pub fn process(mut self, pid: i32) -> Self {
        self.process = pid;
        self
    }

    /// Writes the table of contents backwards (strings first): a reader
    /// must follow the offsets, not assume an order.
    pub fn reversed_toc(mut self) -> Self {
        self.reversed_toc = true;
        self
    }

    /// Adds an instance domain with `instances` (internal id, name).
    pub fn indom(
        mut self,
        serial: u32,
        instances: &[(i32, &str)],
        short: &str,
        long: &str,
    ) -> Self {
        self.indoms.push(SynthIndom {
            serial,
            instances: instances.iter().map(|&(i, n)| (i, n.to_owned())).collect(),
            short_help: short.to_owned(),
            long_help: long.to_owned(),
        });
        self
    }

    /// Adds a metric.
    pub fn metric(mut self, metric: SyntheticMetric) -> Self {
        self.metrics.push(metric);
        self
    }

    /// Adds a value of the metric `item` (of its instance `instance`) with
    /// its `pmAtomValue` bytes and `extra`.
    pub fn value(mut self, item: u32, instance: Option<i32>, atom: [u8; 8], extra: i64) -> Self {
        self.values.push(SynthValue {
            item,
            instance,
            atom,
            extra,
            string: None,
        });
        self
    }

    /// Adds a string value: the text in the strings section, its offset
    /// in the value's `extra`.
    pub fn string_value(mut self, item: u32, instance: Option<i32>, text: &str) -> Self {
        self.values.push(SynthValue {
            item,
            instance,
            atom: [0; 8],
            extra: 0,
            string: Some(text.to_owned()),
        });
        self
    }

    /// Adds a label record (6.0.3's layout) holding `json`.
    pub fn label(mut self, flags: u32, identity: u32, internal: i32, json: &str) -> Self {
        self.labels
            .push((flags, identity, internal, json.to_owned()));
        self
    }

    /// The file's bytes.
    pub fn build(&self) -> Vec<u8> {
        let v1 = self.version == 1;
        let (inst_size, metric_size) = if v1 {
            (INSTANCE1_SIZE, METRIC1_SIZE)
        } else {
            (INSTANCE2_SIZE, METRIC2_SIZE)
        };
        let n_instances: usize = self.indoms.iter().map(|i| i.instances.len()).sum();
        let mut tocs = vec![TOC_METRICS, TOC_VALUES];
        if !self.indoms.is_empty() {
            tocs.splice(0..0, [TOC_INDOMS, TOC_INSTANCES]);
        }
        let mut strings: Vec<String> = Vec::new();
        let mut count_string = |text: &str, optional: bool| {
            if !(optional && text.is_empty()) {
                strings.push(text.to_owned());
            }
        };
        // The strings, in the order they are laid out below.
        for indom in &self.indoms {
            if !v1 {
                for (_, name) in &indom.instances {
                    count_string(name, false);
                }
            }
        }
        for m in &self.metrics {
            if !v1 {
                count_string(&m.name, false);
            }
            count_string(&m.short_help, true);
            count_string(&m.long_help, true);
        }
        for v in &self.values {
            if let Some(s) = &v.string {
                count_string(s, false);
            }
        }
        for indom in &self.indoms {
            count_string(&indom.short_help, true);
            count_string(&indom.long_help, true);
        }
        if !strings.is_empty() {
            tocs.push(TOC_STRINGS);
        }
        if !self.labels.is_empty() {
            tocs.push(TOC_LABELS);
        }
        let indoms_at = HEADER_SIZE + tocs.len() * TOC_SIZE;
        let instances_at = indoms_at + self.indoms.len() * INDOM_SIZE;
        let metrics_at = instances_at + n_instances * inst_size;
        let values_at = metrics_at + self.metrics.len() * metric_size;
        let strings_at = values_at + self.values.len() * VALUE_SIZE;
        let labels_at = strings_at + strings.len() * STRING_SIZE;
        let end = labels_at + self.labels.len() * LABEL_SIZE;

        let mut out = vec![0u8; end];
        let mut next_string = strings_at;
        let mut put_string = |out: &mut Vec<u8>, text: &str, optional: bool| -> u64 {
            if optional && text.is_empty() {
                return 0;
            }
            let at = next_string;
            let bytes = text.as_bytes();
            let n = bytes.len().min(STRING_SIZE - 1);
            out[at..at + n].copy_from_slice(&bytes[..n]);
            next_string += STRING_SIZE;
            at as u64
        };

        out[..4].copy_from_slice(&MAGIC);
        put(&mut out, VERSION_OFFSET, &self.version.to_ne_bytes());
        put(&mut out, G1_OFFSET, &self.g1.to_ne_bytes());
        put(&mut out, G2_OFFSET, &self.g2.to_ne_bytes());
        put(&mut out, TOCS_OFFSET, &(tocs.len() as i32).to_ne_bytes());
        put(&mut out, FLAGS_OFFSET, &self.flags.to_ne_bytes());
        put(&mut out, PROCESS_OFFSET, &self.process.to_ne_bytes());
        put(&mut out, CLUSTER_OFFSET, &self.cluster.to_ne_bytes());
        let mut order = tocs.clone();
        if self.reversed_toc {
            order.reverse();
        }
        for (i, kind) in order.iter().enumerate() {
            let (count, offset) = match *kind {
                TOC_INDOMS => (self.indoms.len(), indoms_at),
                TOC_INSTANCES => (n_instances, instances_at),
                TOC_METRICS => (self.metrics.len(), metrics_at),
                TOC_VALUES => (self.values.len(), values_at),
                TOC_STRINGS => (strings.len(), strings_at),
                _ => (self.labels.len(), labels_at),
            };
            let at = HEADER_SIZE + i * TOC_SIZE;
            put(&mut out, at, &kind.to_ne_bytes());
            put(
                &mut out,
                at + TOC_COUNT_OFFSET,
                &(count as i32).to_ne_bytes(),
            );
            put(
                &mut out,
                at + TOC_SECTION_OFFSET,
                &(offset as u64).to_ne_bytes(),
            );
        }

        // Instances, then their indoms (which point at their first one).
        let mut instance_at = Vec::new();
        let mut slot = instances_at;
        for (k, indom) in self.indoms.iter().enumerate() {
            let first = slot;
            for (internal, name) in &indom.instances {
                put(
                    &mut out,
                    slot,
                    &((indoms_at + k * INDOM_SIZE) as u64).to_ne_bytes(),
                );
                put(
                    &mut out,
                    slot + INSTANCE_INTERNAL_OFFSET,
                    &internal.to_ne_bytes(),
                );
                if v1 {
                    let n = name.len().min(NAME_MAX - 1);
                    let at = slot + INSTANCE_EXTERNAL_OFFSET;
                    out[at..at + n].copy_from_slice(&name.as_bytes()[..n]);
                } else {
                    let offset = put_string(&mut out, name, false);
                    put(
                        &mut out,
                        slot + INSTANCE_EXTERNAL_OFFSET,
                        &offset.to_ne_bytes(),
                    );
                }
                instance_at.push((indom.serial, *internal, slot));
                slot += inst_size;
            }
            let at = indoms_at + k * INDOM_SIZE;
            put(&mut out, at, &indom.serial.to_ne_bytes());
            put(
                &mut out,
                at + INDOM_COUNT_OFFSET,
                &(indom.instances.len() as u32).to_ne_bytes(),
            );
            put(
                &mut out,
                at + INDOM_FIRST_OFFSET,
                &(first as u64).to_ne_bytes(),
            );
        }
        for (k, m) in self.metrics.iter().enumerate() {
            let at = metrics_at + k * metric_size;
            let tail = if v1 {
                let n = m.name.len().min(NAME_MAX - 1);
                out[at..at + n].copy_from_slice(&m.name.as_bytes()[..n]);
                at + METRIC1_NAME_SIZE
            } else {
                let offset = put_string(&mut out, &m.name, false);
                put(&mut out, at, &offset.to_ne_bytes());
                at + METRIC2_NAME_SIZE
            };
            put(&mut out, tail + METRIC_ITEM, &m.item.to_ne_bytes());
            put(&mut out, tail + METRIC_TYPE, &m.code.to_ne_bytes());
            put(&mut out, tail + METRIC_SEM, &m.semantics.to_ne_bytes());
            put(&mut out, tail + METRIC_UNITS, &m.units.to_ne_bytes());
            put(&mut out, tail + METRIC_INDOM, &m.indom.to_ne_bytes());
            let short = put_string(&mut out, &m.short_help, true);
            put(&mut out, tail + METRIC_SHORT, &short.to_ne_bytes());
            let long = put_string(&mut out, &m.long_help, true);
            put(&mut out, tail + METRIC_HELP, &long.to_ne_bytes());
        }
        for (i, v) in self.values.iter().enumerate() {
            let at = values_at + i * VALUE_SIZE;
            let metric = self.metrics.iter().position(|m| m.item == v.item);
            let metric_offset = metric.map_or(0, |k| metrics_at + k * metric_size);
            let instance_offset = match (metric, v.instance) {
                (Some(k), Some(internal)) => instance_at
                    .iter()
                    .find(|&&(serial, i, _)| serial == self.metrics[k].indom && i == internal)
                    .map_or(0, |&(_, _, at)| at),
                _ => 0,
            };
            let extra = match &v.string {
                Some(text) => put_string(&mut out, text, false) as i64,
                None => v.extra,
            };
            put(&mut out, at, &v.atom);
            put(&mut out, at + VALUE_EXTRA_OFFSET, &extra.to_ne_bytes());
            put(
                &mut out,
                at + VALUE_METRIC_OFFSET,
                &(metric_offset as u64).to_ne_bytes(),
            );
            put(
                &mut out,
                at + VALUE_INSTANCE_OFFSET,
                &(instance_offset as u64).to_ne_bytes(),
            );
        }
        for (k, indom) in self.indoms.iter().enumerate() {
            let at = indoms_at + k * INDOM_SIZE;
            let short = put_string(&mut out, &indom.short_help, true);
            put(&mut out, at + INDOM_SHORT_OFFSET, &short.to_ne_bytes());
            let long = put_string(&mut out, &indom.long_help, true);
            put(&mut out, at + INDOM_HELP_OFFSET, &long.to_ne_bytes());
        }
        for (i, (flags, identity, internal, json)) in self.labels.iter().enumerate() {
            let at = labels_at + i * LABEL_SIZE;
            put(&mut out, at, &flags.to_ne_bytes());
            put(&mut out, at + 4, &identity.to_ne_bytes());
            put(&mut out, at + 8, &internal.to_ne_bytes());
            let n = json.len().min(LABEL_SIZE - LABEL_PAYLOAD_OFFSET - 1);
            let payload = at + LABEL_PAYLOAD_OFFSET;
            out[payload..payload + n].copy_from_slice(&json.as_bytes()[..n]);
        }
        out
    }
}

fn put(out: &mut [u8], at: usize, bytes: &[u8]) {
    out[at..at + bytes.len()].copy_from_slice(bytes);
}
