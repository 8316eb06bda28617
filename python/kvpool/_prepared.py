"""Prepared allocation calls (private to kvpool; made by ``Pool.prepare_*``).

An engine allocates into the same buffers every step (persistent ``seq_lens``, ``last_loc``
and ``out_cache_loc`` arrays, their host copies, one stream), so everything a call checks
about those buffers can be checked once: a prepared call keeps each buffer's address and
length from the preparation and takes only what changes per step, the batch size (and an
extend's token count). What remains per call is the ctypes call itself, the batch size
against the prepared capacity, and a check that no prepared tensor was re-pointed.

Buffers stay valid because the prepared call holds them: a buffer-protocol object through a
``memoryview`` (an exported buffer cannot be resized or freed: ``array.array`` raises
``BufferError`` on a resize, numpy refuses one), a torch tensor by reference and its
storage (``untyped_storage()``), with the tensor's and the storage's ``data_ptr()``
compared on every call (``resize_`` / ``set_`` / ``.data =`` can move a tensor's memory: the
call then refuses with ``ValueError`` instead of using a stale address). While the held
storage's address is unchanged it still owns that memory, so a tensor re-pointed elsewhere
cannot come back to the same address in smaller memory and pass the check (a resize that
moves the storage's own memory changes its address); a tensor emptied since has another
address too. Dropping the prepared call lets the buffers go. Lists and
read-only buffers are refused: their converted copy would be a snapshot, not the memory the
caller updates between steps.
"""

import array
import ctypes

from . import _buffers

_HANDLERS = _buffers.HANDLERS
_SIZE_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1


def host_buffer(values, elements, what, writable, pinned, tensors):
    """(address, length) of a host array for a prepared call: its memory is kept alive and
    unmovable in ``pinned`` (or, for a tensor, listed in ``tensors`` with its address)."""
    address, n, keep = _HANDLERS[type(values)](values, elements, what, writable)
    if isinstance(keep, array.array) and keep is not values:
        raise TypeError(f"{what}: a prepared call reads the caller's memory on every call, so "
                        f"it needs a writable buffer or a tensor (array.array, numpy, "
                        f"memoryview, torch), not a {type(values).__name__} (a list, a tuple "
                        "or a read-only buffer would be copied once)")
    track(values, address, n, pinned, tensors)
    return address, n


def track(values, address, n, pinned, tensors):
    """Keeps ``values`` (``n`` elements at ``address``) alive for a prepared call: a tensor
    by reference with its address (checked per call) and its storage, anything else through
    a memoryview (which stops a resize). An empty buffer is never read or written (the
    prepared capacity or output is 0), so it needs nothing."""
    if hasattr(values, "data_ptr"):
        if n:
            storage = getattr(values, "untyped_storage", None)
            storage = storage() if storage is not None else values
            tensors.append((values, address, storage, storage.data_ptr()))
    else:
        pinned.append(memoryview(values))


def moved(tensors):
    """The first prepared tensor whose memory moved since the preparation, or None."""
    for tensor, address, storage, storage_address in tensors:
        if tensor.data_ptr() != address or storage.data_ptr() != storage_address:
            return tensor
    return None


class Prepared:
    """One prepared allocation call: ``prepared(batch)`` (a decode) or ``prepared(batch,
    extend_num_tokens)`` (an extend) writes the slots into the prepared ``out``
    (``out[:batch]`` / ``out[:extend_num_tokens]``) and returns None; it raises ``KvpError``
    as the plain call would. ``capacity``: the most requests a call may name (the shortest
    prepared per-request array); ``out_len``: the prepared output's length."""

    __slots__ = ("_pool", "_function", "_head", "_tail", "_tensors", "_pinned", "capacity",
                 "out_len", "out", "_extend")

    def __init__(self, pool, function, head, tail, tensors, pinned, capacity, out_len, out,
                 extend):
        self._pool = pool
        self._function = function  # lib.fast.kvp_pool_*: head..., batch, [tokens], tail...
        self._head = head
        self._tail = tail
        self._tensors = tuple(tensors)
        self._pinned = tuple(pinned)
        self.capacity = capacity
        self.out_len = out_len
        self.out = out
        self._extend = extend

    def _refuse(self, batch, tokens):
        if type(batch) is not int:
            raise TypeError(f"batch must be an int, not {type(batch).__name__}")
        if not 0 <= batch <= self.capacity:
            raise ValueError(f"batch = {batch} is outside [0, {self.capacity}], the prepared "
                             "arrays' length")
        if self._extend and type(tokens) is not int:
            raise TypeError(f"extend_num_tokens must be an int, not {type(tokens).__name__}")
        if self._extend and tokens < 0:
            raise ValueError(f"extend_num_tokens = {tokens} is negative")
        if self._extend and tokens > _SIZE_MAX:  # (a ctypes function would wrap it)
            raise OverflowError(f"extend_num_tokens = {tokens} is out of range for size_t "
                                f"[0, {_SIZE_MAX}]")
        tensor = moved(self._tensors)
        if tensor is not None:
            raise ValueError("a prepared tensor's memory moved since the preparation "
                             f"(data_ptr {tensor.data_ptr():#x}): prepare the call again")
        raise AssertionError("unreachable")

    def __call__(self, batch, extend_num_tokens=None):
        # The checks of `_refuse` and `moved`, inlined (each Python call costs ~0.1 us); only
        # a refused call goes through them, to find what to say.
        if (type(batch) is not int or not 0 <= batch <= self.capacity
                or (self._extend and (type(extend_num_tokens) is not int
                                      or not 0 <= extend_num_tokens <= _SIZE_MAX))):
            self._refuse(batch, extend_num_tokens)
        for tensor, address, storage, storage_address in self._tensors:
            if tensor.data_ptr() != address or storage.data_ptr() != storage_address:
                self._refuse(batch, extend_num_tokens)
        pool = self._pool
        handle = pool._handle or pool.handle
        if self._extend:
            status = self._function(handle, *self._head, batch, extend_num_tokens, *self._tail)
        else:
            status = self._function(handle, *self._head, batch, *self._tail)
        if status:
            pool._lib.check(status)
