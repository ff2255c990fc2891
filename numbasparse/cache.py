"""The one cache of what numbasparse derives from a device :class:`~numbasparse.CSR`.

Everything a call builds from a matrix and keeps for the next call lives in its
``CSR.cache``, a :class:`MatrixCache` of four named sections:

========== ================================================================= ==================
section    holds                                                             shared by
========== ================================================================= ==================
plans      host-derived arrays (uploaded) and launch plans, by kernel        ``with_values``
           family and parameters (N, dtype, alignment, ...)                  copies
scratch    device buffers a kernel needs per stream (HP's look-back parts)   ``with_values``
                                                                             copies
bound      bound launches (:class:`numbasparse.cuda.launch.BoundLaunch`):    this matrix only
           arguments packed once, including the values' pointer
replays    recorded calls (:class:`numbasparse.replay.Replay`)               this matrix only
========== ================================================================= ==================

Policy: each section keeps at most ``LIMITS[section]`` entries and drops the least recently
used one beyond that (``replays``: the least recently stored, since a replayed call reads its
entry without marking it) (a dropped entry is rebuilt by the next call that needs it; a bound launch
or replay holds the buffers it points to, so dropping a scratch buffer never frees memory still
in use).  ``CSR.clear_cache()`` empties every section of the matrix and so frees its device
memory but the matrix itself.  Changes to the sections are made under one lock per sparsity
pattern (reads are single atomic dictionary operations), so threads may share a matrix (a plan
is built once, by the first thread that needs it).
Compiled kernels are not per matrix: their factories keep them for the process
(:func:`numbasparse.cuda.launch.kernel_factory`).
"""
import threading
from collections import OrderedDict

#: Entries kept per section (least recently used dropped first).
LIMITS = {"plans": 512, "scratch": 32, "bound": 512, "replays": 64}
#: Sections that depend only on the sparsity pattern, shared with ``with_values`` copies.
PATTERN_SECTIONS = ("plans", "scratch")


class MatrixCache:
    """Named sections of bounded LRU maps (see the module docstring)."""

    __slots__ = ("lock", "sections")

    def __init__(self, pattern=None):
        """A new cache; ``pattern``: a cache whose pattern sections (and lock) this one shares."""
        if pattern is None:
            self.lock = threading.RLock()
            self.sections = {name: OrderedDict() for name in LIMITS}
        else:
            self.lock = pattern.lock
            self.sections = {name: pattern.sections[name] if name in PATTERN_SECTIONS else OrderedDict()
                             for name in LIMITS}

    def get(self, section, key, default=None):
        """The entry ``key`` of ``section`` (marked as just used), or ``default``.  No lock: each
        step is one atomic operation of the C OrderedDict (the calls' hot path)."""
        entries = self.sections[section]
        value = entries.get(key, _MISSING)
        if value is _MISSING:
            return default
        try:
            entries.move_to_end(key)
        except KeyError:  # dropped by another thread meanwhile: still a valid value for this call
            pass
        return value

    def put(self, section, key, value):
        """Store ``value`` as entry ``key`` of ``section``, dropping the least recently used
        entries beyond the section's limit."""
        entries = self.sections[section]
        with self.lock:
            entries[key] = value
            entries.move_to_end(key)
            while len(entries) > LIMITS[section]:
                entries.popitem(last=False)
        return value

    def get_or_build(self, section, key, build):
        """The entry ``key`` of ``section``, built by ``build()`` and stored if missing (under the
        lock: two threads never build the same entry twice)."""
        value = self.get(section, key, _MISSING)
        if value is not _MISSING:
            return value
        with self.lock:
            value = self.sections[section].get(key, _MISSING)
            if value is _MISSING:
                value = self.put(section, key, build())
            return value

    def clear(self):
        """Empty every section (the pattern sections too, for every copy sharing them)."""
        with self.lock:
            for entries in self.sections.values():
                entries.clear()

    def sizes(self):
        """{section: number of entries}."""
        with self.lock:
            return {name: len(entries) for name, entries in self.sections.items()}


_MISSING = object()
