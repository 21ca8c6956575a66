# SPDX-License-Identifier: Apache-2.0
"""``Counter``, ``Gauge`` and ``Histogram`` shaped like prometheus_client's,
so that switching is a change of import:

>>> import tempfile, topdeck
>>> reg = topdeck.Registry(dir=tempfile.mkdtemp())
>>> requests = topdeck.Counter("http_requests", "Requests served.", ["route"], registry=reg)
>>> requests.labels(route="/").inc()
>>> latency = topdeck.Histogram("http_request_duration_seconds", "Time to serve.", registry=reg)
>>> with latency.time():
...     pass
>>> reg.close()

Differences, each for a reason:

- counters count whole events (``inc(0.5)`` is refused): the format's
  counter is a u64, exact however long it runs;
- histograms use exponential buckets (Prometheus native histograms), 8 per
  power of two from 1 ns to 10^6 s; ``buckets=`` is accepted and only
  widens that range to cover the bounds given;
- series are never removed (``remove``/``clear`` raise): a reader sums
  them, and a value that vanished would make totals go backwards;
- ``registry=None`` means the default registry: every metric lives in a file.
"""

import threading
import time

from . import exponential
from .registry import Registry, _Timer

_default = None
_default_lock = threading.Lock()


def default_registry():
    """The process's default registry, whose file is created at its first
    metric (in ``TOPDECK_DIR``, else ``/dev/shm/topdeck-<euid>``)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = Registry(_lazy=True)
    return _default


class _DefaultRegistry:
    """``REGISTRY``: stands for :func:`default_registry`, made on first use."""

    def __getattr__(self, name):
        return getattr(default_registry(), name)

    def __repr__(self):
        return repr(default_registry())


REGISTRY = _DefaultRegistry()


def _resolve(registry):
    if registry is None or isinstance(registry, _DefaultRegistry):
        return default_registry()
    return registry


class _Family:
    _suffix = ""

    def __init__(self, name, documentation="", labelnames=(), namespace="", subsystem="", unit="",
                 registry=REGISTRY, **kwargs):
        full = "_".join(p for p in (namespace, subsystem, name) if p)
        if self._suffix and full.endswith(self._suffix):
            full = full[: -len(self._suffix)]
        if unit and not full.endswith("_" + unit):
            full += "_" + unit
        self._name = full + self._suffix
        self._help = documentation
        self._unit = unit
        self._labelnames = tuple(labelnames)
        self._registry = _resolve(registry)
        self._options = kwargs
        self._children = {}
        self._lock = threading.Lock()
        if not self._labelnames:
            self._bind_unlabelled(self._make(()))

    def _bind_unlabelled(self, child):
        self._child = child

    def labels(self, *values, **kwvalues):
        """The child series for these label values (made at first use)."""
        if not kwvalues:
            try:
                child = self._children.get(values)
            except TypeError:  # unhashable values: the slow path says what is wrong
                child = None
            if child is not None:
                return child
        return self._labels(values, kwvalues)

    def _labels(self, values, kwvalues):
        raw = values
        if not self._labelnames:
            raise ValueError(f"{self._name} has no labels")
        if values and kwvalues:
            raise ValueError("give label values by position or by name, not both")
        if kwvalues:
            if sorted(kwvalues) != sorted(self._labelnames):
                raise ValueError(f"{self._name} has labels {list(self._labelnames)}; got {sorted(kwvalues)}")
            values = tuple(kwvalues[k] for k in self._labelnames)
        elif len(values) != len(self._labelnames):
            raise ValueError(f"{self._name} has {len(self._labelnames)} labels; got {len(values)} values")
        values = tuple(str(v) for v in values)
        child = self._children.get(values)
        if child is None:
            with self._lock:
                child = self._children.get(values)
                if child is None:
                    child = self._make(tuple(zip(self._labelnames, values)))
                    self._children[values] = child
        if not kwvalues:
            # Also under the values as given (200 as well as "200"): the
            # next call finds the child with one dict lookup.
            try:
                self._children[raw] = child
            except TypeError:
                pass
        return child

    def remove(self, *values):
        raise NotImplementedError(
            "topdeck never removes a series: readers sum them, and a removed one would make totals go "
            "backwards; set a gauge to 0 instead")

    clear = remove

    def describe(self):
        return {"name": self._name, "help": self._help, "unit": self._unit, "labels": self._labelnames}


class Counter(_Family):
    """A counter; the name gets ``_total`` (and ``_<unit>``) like prometheus_client's."""

    _suffix = "_total"

    def _make(self, labels):
        return self._registry.counter(self._name, labels, self._help, self._unit)

    def _bind_unlabelled(self, child):
        self._child = child
        self.inc = child.inc

    def count_exceptions(self, exception=Exception):
        """Counts exceptions raised in a block or a function."""
        return _ExceptionCounter(self._child.inc, exception)


class Gauge(_Family):
    """A floating-point gauge (``integer=True``: an i64 gauge)."""

    def _make(self, labels):
        reg = self._registry
        make = reg.gauge if self._options.get("integer") else reg.gauge_f64
        return _GaugeChild(make(self._name, labels, self._help, self._unit))

    def _bind_unlabelled(self, child):
        self._child = child
        for m in ("set", "inc", "dec", "set_to_current_time", "track_inprogress", "time"):
            setattr(self, m, getattr(child, m))


class _GaugeChild:
    __slots__ = ("_h", "set", "inc", "dec")

    def __init__(self, handle):
        self._h = handle
        self.set, self.inc, self.dec = handle.set, handle.inc, handle.dec

    def set_to_current_time(self):
        self._h.set(time.time())

    def track_inprogress(self):
        """Counts the blocks or calls in progress."""
        return _InProgress(self._h)

    def time(self):
        """Sets the gauge to the seconds a block or call took."""
        return _Timer(self._h.set)

    def get(self):
        return self._h.get()


class Histogram(_Family):
    """A histogram with exponential buckets (schema 3, 1 ns to 10^6 s by
    default; ``schema=``, ``min=``, ``max=`` to change them)."""

    def _make(self, labels):
        o = self._options
        lo, hi = o.get("min", exponential.DEFAULT_MIN), o.get("max", exponential.DEFAULT_MAX)
        finite = [b for b in o.get("buckets", ()) if 0 < b < float("inf")]
        if finite:
            lo, hi = min(lo, min(finite)), max(hi, max(finite))
        return self._registry.histogram(self._name, labels, self._help, self._unit,
                                        schema=o.get("schema", exponential.DEFAULT_SCHEMA), min=lo, max=hi)

    def _bind_unlabelled(self, child):
        self._child = child
        self.observe = child.observe
        self.time = child.time


class _Decorator:
    """A context manager that also decorates: the function runs inside it."""

    def __call__(self, f):
        import functools

        @functools.wraps(f)
        def wrapped(*args, **kwargs):
            with self:
                return f(*args, **kwargs)
        return wrapped


class _ExceptionCounter(_Decorator):
    def __init__(self, inc, exception):
        self._inc, self._exception = inc, exception

    def __enter__(self):
        return self

    def __exit__(self, typ, value, tb):
        if typ is not None and issubclass(typ, self._exception):
            self._inc()


class _InProgress(_Decorator):
    def __init__(self, handle):
        self._h = handle

    def __enter__(self):
        self._h.inc()
        return self

    def __exit__(self, *exc):
        self._h.dec()
