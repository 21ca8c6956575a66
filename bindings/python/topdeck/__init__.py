# SPDX-License-Identifier: Apache-2.0
"""topdeck from Python: write and read topdeck registries (docs/FORMAT.md)
with the standard library alone.

>>> import tempfile, topdeck
>>> reg = topdeck.Registry(dir=tempfile.mkdtemp())
>>> jobs = topdeck.Counter("jobs", "Jobs done.", ["queue"], registry=reg)
>>> jobs.labels("fast").inc()
>>> [(m.name, m.value) for m in topdeck.reader.open(reg.path).snapshot()]
[('jobs_total', 1)]
>>> reg.close()
"""

from . import exponential, reader
from .metrics import REGISTRY, Counter, Gauge, Histogram, default_registry
from .registry import Registry

__all__ = ["Counter", "Gauge", "Histogram", "Registry", "REGISTRY", "default_registry", "reader",
           "exponential"]
__version__ = "0.1.0"
