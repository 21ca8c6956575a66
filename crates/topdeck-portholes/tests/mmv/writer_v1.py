#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# A real MMV writer through Debian's python3-pcp (pcp.mmv, ctypes over
# libpcp_mmv's mmv_stats_init, which writes format version 1): counters
# with instances, a double, a string and an i32, then "ready" on stdout;
# it keeps the file until stdin closes. Run with /usr/bin/python3 (the
# python3 python3-pcp installs into). Usage: writer_v1.py /abs/path/file
import sys

from pcp import mmv
from cpmapi import PM_COUNT_ONE, PM_TIME_MSEC, PM_INDOM_NULL
from cmmv import (MMV_SEM_COUNTER, MMV_SEM_INSTANT, MMV_TYPE_U64, MMV_TYPE_I32,
                  MMV_TYPE_DOUBLE, MMV_TYPE_STRING)

path = sys.argv[1]
units_count = mmv.pmUnits(0, 0, 1, 0, 0, PM_COUNT_ONE)
units_ms = mmv.pmUnits(0, 1, 0, 0, PM_TIME_MSEC, 0)
units_none = mmv.pmUnits(0, 0, 0, 0, 0, 0)

queues = mmv.mmv_indom(serial=7, shorttext="queues of the writer")
queues.set_instances([mmv.mmv_instance(0, "high"), mmv.mmv_instance(1, "low"),
                      mmv.mmv_instance(5, "bulk work")])

values = mmv.MemoryMappedValues(path)
values.add_indoms([queues])
values.add_metrics([
    mmv.mmv_metric("requests.total", 1, MMV_TYPE_U64, MMV_SEM_COUNTER, units_count, 7,
                   "requests served per queue"),
    mmv.mmv_metric("latency.mean", 2, MMV_TYPE_DOUBLE, MMV_SEM_INSTANT, units_ms, PM_INDOM_NULL,
                   "mean latency"),
    mmv.mmv_metric("build.version", 3, MMV_TYPE_STRING, MMV_SEM_INSTANT, units_none,
                   PM_INDOM_NULL, "version string"),
    mmv.mmv_metric("workers", 4, MMV_TYPE_I32, MMV_SEM_INSTANT, units_count, PM_INDOM_NULL,
                   "busy workers (may be negative in a broken pool)"),
])
values.start()
for inst, n in (("high", 41), ("low", 7), ("bulk work", 123456789012)):
    values.lookup_set("requests.total", inst, n)
values.lookup_inc("requests.total", "high")
values.lookup_set("latency.mean", None, 12.375)
values.lookup_set_string("build.version", None, "1.2.3 (py)")
values.lookup_set("workers", None, -3)
print("ready", flush=True)
sys.stdin.read()
values.stop()
