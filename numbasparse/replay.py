"""Replaying repeated calls: the GPU operations of a call, issued again on new operands.

A public call on device operands spends most of its host time choosing what to launch:
validation, dispatch, plans, keys (BENCHMARKS.md, "Host time per call").  A training loop
repeats the same call on new tensors of the same shapes.  So every public function that takes
a device matrix goes through :func:`call`:

1. The call's signature: the :class:`~numbasparse.CSR`, the call's options, and for each
   operand a C-contiguous CUDA ``torch.Tensor``'s shape, dtype, device and address alignment,
   plus the current stream.  Other calls (scipy matrices, ``out=``, NumPy, CuPy, strided
   tensors) have no signature and always make the full call.
2. A signature's first REPLAY_FROM_CALL - 1 calls make the full call (validation, dispatch,
   plans, launches).  The first compiles, the second binds its launches
   (:func:`numbasparse.cuda.launch.run_bound` binds on a key's second call), and from the third
   on the full call is recorded: every GPU operation it issues (bound launches and memsets) with
   the operand each variable pointer came from.  A recording that holds an operation that cannot
   be replayed (a launch through :func:`~numbasparse.cuda.launch.run`, a launch not yet bound,
   an array that is none of the call's operands, outputs or declared intermediates) is dropped.
3. From then on a call with that signature allocates its outputs (and its intermediates:
   arrays the call made and declared with :func:`numbasparse.cuda.launch.intermediate`,
   allocated again by the replay in the operands' framework, on their stream, and dropped after
   it) and reissues the recorded operations with the new data pointers: no validation or
   dispatch, which earlier calls with the same signature already passed.  The replay checks the
   operands' alignment (which chose the vector width) and falls back to the full call when it
   differs.

Replays live in the ``replays`` section of the matrix's cache (:mod:`numbasparse.cache`).
"""
from . import arrays
from .csr import CSR
from .cuda import launch
from .cuda.device import on_gpu, one_device, out_of_memory

#: The call of a signature that is first replayed (earlier ones compile, bind and record).
REPLAY_FROM_CALL = 4


def call(A, options, operands, out, new_outputs, full_call, args):
    """The result of one public call: replayed when its signature has a replay, else
    ``full_call(*args, record)``, which validates, dispatches and launches inside
    ``with record(*arrays):``, ``arrays`` being the device views of ``operands`` and of the
    outputs in the order of ``new_outputs(A, *operands)`` (the tensors a replay allocates).
    (Functions and an argument tuple rather than closures: this is the replayed call's path.)"""
    key, entry = _lookup(A, options, operands, out)
    if key is None:
        return full_call(*args, _NOT_RECORDED)
    if type(entry) is Replay:
        try:
            outputs = new_outputs(A, *operands)
            made = _intermediates(operands[0], entry.intermediates) if entry.intermediates else ()
        except Exception as error:  # the full call's MemoryError for an exhausted GPU, on a replay too
            replacement = out_of_memory(error, "the call's output and intermediates", None)
            if replacement is error:
                raise
            raise replacement from error
        pointers = [x.data_ptr() for x in operands + outputs + made]
        if one_device():
            replayed = entry(pointers, key[-1])
        else:  # the operands' GPU current, as the full call made it
            with on_gpu(key[1][0][2]):
                replayed = entry(pointers, key[-1])
        if replayed:
            return outputs[0] if len(outputs) == 1 else outputs
        entry = REPLAY_FROM_CALL - 1  # alignment differs, or the fast launch is off: record again
    return full_call(*args, _Recorder(A, key, (entry or 0) + 1))


def _intermediates(like, sizes):
    """New tensors of at least ``sizes`` bytes each, allocated as ``like`` (a CUDA tensor: its
    device, and torch's allocator on the current stream, which orders their reuse after the
    replay's launches)."""
    itemsize = like.element_size()
    return tuple(like.new_empty((-(-n // itemsize),)) for n in sizes)


class _Recorder:
    """``record(*views)`` of a full call with a signature: counts the call in the matrix's
    ``replays`` section and, from the signature's REPLAY_FROM_CALL - 1-th call on, records it
    and keeps its :class:`Replay` (or the count, if it cannot be replayed)."""

    __slots__ = ("A", "key", "seen", "recording", "observing")

    def __init__(self, A, key, seen):
        self.A, self.key, self.seen = A, key, seen
        self.recording = self.observing = None

    @property
    def replays(self):
        """Whether this is a repeated call, which is replayed from its signature's
        REPLAY_FROM_CALL-th call on (where the driver's launch is there to replay with): what
        :func:`numbasparse.dispatch.fuse_pays` weighs.  A signature's first call is not (a matrix
        made for one call, e.g. a new minibatch, is never replayed)."""
        return self.seen >= 2 and launch.fast_launch_available()  # (seen counts this call)

    def __call__(self, *views):
        if self.seen >= REPLAY_FROM_CALL - 1:
            self.recording = Recording(views)
        return self

    def __enter__(self):
        if self.recording is not None:
            self.observing = launch.observing(self.recording)
            self.observing.__enter__()

    def __exit__(self, kind, error, trace):
        if self.observing is not None:
            self.observing.__exit__(kind, error, trace)
        if kind is None:
            replayed = self.recording.replay() if self.recording is not None else None
            self.A.cache.put("replays", self.key, replayed or self.seen)
        return False


class _NotRecorded:
    """``record(*views)`` of a call without a signature: nothing to do."""

    replays = False

    def __call__(self, *views):
        return self

    def __enter__(self):
        pass

    def __exit__(self, kind, error, trace):
        return False


_NOT_RECORDED = _NotRecorded()


def composite(A, options, operands):
    """(key, kept) for a call made of other public calls and a framework's operations
    (``spmm_dense``'s unfused path): ``kept`` is what an earlier call with this signature kept
    under ``key`` with ``A.cache.put("replays", key, ...)`` (the rest of the call, validated),
    else None; key None for a call without a signature."""
    return _lookup(A, options, operands, None)


def _lookup(A, options, operands, out):
    """(key, entry) of the call's signature in the ``replays`` section (entry None where nothing
    is kept yet), or (None, None) for a call without a signature or with an unhashable option
    (the full call says what is wrong with it)."""
    key = _signature(A, options, operands, out)
    if key is None:
        return None, None
    try:
        return key, A.cache.sections["replays"].get(key)  # (a hit is not moved to the end: FIFO)
    except TypeError:
        return None, None


def _signature(A, options, operands, out):
    """The call's key in the ``replays`` section (the stream's driver handle its last item), or
    None for a call that is not replayed."""
    if out is not None or type(A) is not CSR:
        return None
    signatures = tuple(map(arrays.torch_signature, operands))
    if None in signatures:
        return None
    return options, signatures, arrays.torch_stream_handle(signatures[0][2])


class Recording:
    """The GPU operations of one call (the observer of :func:`numbasparse.cuda.launch.observing`).
    ``views``: the call's device arrays, recognised by identity."""

    def __init__(self, views):
        self.views = list(views)
        self.intermediate_bytes = []  # per intermediate (views after the call's own)
        self.steps = []
        self.replayable = True

    def _roles(self, arrays_):
        roles = [next((i for i, view in enumerate(self.views) if view is a), None) for a in arrays_]
        return None if None in roles else roles

    def launch(self, bound, arrays_):
        roles = self._roles(arrays_)
        if bound is None or roles is None:
            self.replayable = False
        else:
            self.steps.append((bound, roles))

    def unbound(self):
        self.replayable = False

    def intermediate(self, array):
        self.views.append(array)
        self.intermediate_bytes.append(array.size * array.dtype.itemsize)

    def memset(self, array, n_bytes):
        roles = self._roles([array])
        if roles is None:
            self.replayable = False
        else:
            self.steps.append((n_bytes, roles))

    def replay(self):
        """The :class:`Replay` of what was recorded, or None if something cannot be replayed."""
        if not self.replayable:
            return None
        alignments = tuple(launch.device_pointer(view) % launch.MAX_ALIGNMENT for view in self.views)
        return Replay(tuple(self.steps), alignments, tuple(self.intermediate_bytes))


class Replay:
    """A recorded call's GPU operations (bound launches and memsets), issued again by
    ``replay(pointers, handle)`` on new operands: ``pointers`` their data pointers in the
    recorded order (operands, outputs, then new intermediates of ``intermediates`` bytes each),
    ``handle`` the driver handle of the stream.  The caller guarantees that the
    operands have the recorded ones' shapes and dtypes; the replay checks their alignment and
    returns False, issuing nothing, when it differs or a launch's fast path has been turned off.
    It also returns False after a driver error in a launch, having issued the steps before it
    (which the caller's full call then issues again)."""

    __slots__ = ("steps", "alignments", "intermediates")

    def __init__(self, steps, alignments, intermediates=()):
        self.steps, self.alignments, self.intermediates = steps, alignments, intermediates

    def __call__(self, pointers, handle):
        for pointer, alignment in zip(pointers, self.alignments):
            if pointer % launch.MAX_ALIGNMENT != alignment:
                return False
        for step, _ in self.steps:  # all or nothing: a step may add to what an earlier one left
            if not isinstance(step, int) and not step.fast.enabled:  # (a 16-bit C's workspace)
                return False
        with launch.ISSUE_LOCK:  # (a step may share scratch with the next: another thread's waits)
            for step, roles in self.steps:
                if isinstance(step, int):  # a memset of that many bytes
                    if launch.memset_zero(pointers[roles[0]], step, handle):
                        return False
                elif not step.replay(pointers, roles, handle):
                    return False
        return True
