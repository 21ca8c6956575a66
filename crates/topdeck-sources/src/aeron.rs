// SPDX-License-Identifier: Apache-2.0
//! An Aeron media driver's counters as series. The driver's system
//! counters (type id 0) are named after their label (`Bytes sent` is
//! `aeron_bytes_sent`), counters unless the label says they hold a
//! maximum, a current amount, a status or a version. Every other counter
//! (a stream's positions and limits) is a gauge named after its label's
//! prefix (`pub-pos (sampled): 19 1001 aeron:ipc` is `aeron_pub_pos_sampled`)
//! with the rest of the label as `detail`, as AeronStat prints it.

use std::collections::HashSet;

use topdeck::{MetricInfo, Value};
use topdeck_portholes::aeron::Cnc;

use crate::jvm::kind_of;
use crate::names::metric_name;

/// Prefix of every series from `cnc.dat`.
pub const PREFIX: &str = "aeron_";

/// Words in a system counter's label that make it a gauge.
const GAUGE_WORDS: [&str; 5] = [" max ", "currently", "status", "version", "Aeron software"];

/// Type id of the driver's system counters.
const SYSTEM: i32 = 0;

/// The series of one copy of a driver's counters, by counter id.
pub(crate) fn series(cnc: &Cnc) -> Vec<(MetricInfo, Value)> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(cnc.counters.len());
    for c in &cnc.counters {
        let (head, detail) = match c.label.split_once(':') {
            Some((head, rest)) => (head, rest.trim()),
            None => (c.label.as_str(), ""),
        };
        let head = head.split(',').next().unwrap_or(head);
        let name = metric_name(PREFIX, head, "");
        let system = c.type_id == SYSTEM;
        let gauge = !system || GAUGE_WORDS.iter().any(|w| c.label.contains(w));
        let value = if gauge {
            Value::Gauge(c.value)
        } else {
            Value::Counter(u64::try_from(c.value).unwrap_or(0))
        };
        let mut labels = Vec::new();
        if !system && !detail.is_empty() {
            labels.push(("detail".to_owned(), detail.to_owned()));
        }
        // Two counters with the same label (two streams alike): the id
        // tells them apart.
        if !seen.insert((name.clone(), labels.clone())) {
            labels.push(("id".to_owned(), c.id.to_string()));
        }
        out.push((
            MetricInfo {
                kind: kind_of(&value),
                name,
                labels,
                help: format!("{} (Aeron counter type {})", c.label, c.type_id),
                unit: String::new(),
            },
            value,
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use topdeck_portholes::aeron::CncBuilder;

    #[test]
    fn system_counters_are_named_by_label_and_streams_carry_their_detail() {
        let bytes = CncBuilder::new()
            .counter(0, "Bytes sent", 4096)
            .counter(0, "Conductor max cycle time doing its work in ns", 900)
            .counter(
                0,
                "Sender flow control limits, i.e. back-pressure events",
                2,
            )
            .counter(1, "pub-pos (sampled): 19 1001 aeron:ipc", 640)
            .counter(1, "pub-pos (sampled): 19 1001 aeron:ipc", 128)
            .heartbeat_ms(1)
            .build();
        let cnc = Cnc::parse(&bytes).unwrap();
        let got = crate::testing::flat(series(&cnc));
        let detail = ("detail".to_string(), "19 1001 aeron:ipc".to_string());
        assert_eq!(
            got,
            [
                ("aeron_bytes_sent".into(), vec![], Value::Counter(4096)),
                (
                    "aeron_conductor_max_cycle_time_doing_its_work_in_ns".into(),
                    vec![],
                    Value::Gauge(900)
                ),
                (
                    "aeron_sender_flow_control_limits".into(),
                    vec![],
                    Value::Counter(2)
                ),
                (
                    "aeron_pub_pos_sampled".into(),
                    vec![detail.clone()],
                    Value::Gauge(640)
                ),
                (
                    "aeron_pub_pos_sampled".into(),
                    vec![detail, ("id".into(), "4".into())],
                    Value::Gauge(128)
                ),
            ]
        );
    }
}
