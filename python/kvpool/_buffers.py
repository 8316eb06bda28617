"""Argument conversion for the pool's hot calls (private to kvpool).

A host array argument (lengths, indices) becomes ``(address, length, keep)``: the address of
memory holding the elements as the C type, the element count, and the object that owns that
memory (the caller keeps it alive until the call has returned). What is accepted, and what
each costs:

- an ``array.array`` of the element type (typecode ``'q'`` for int64, ``'i'`` for int32):
  its buffer, zero-copy, O(1);
- any other object exposing the buffer protocol (numpy arrays, ``memoryview``, ...): 1-D,
  C-contiguous, signed integers of the element's width in native byte order (numpy
  ``int64`` / ``int32``), zero-copy, O(1); a read-only buffer is copied (memcpy);
- a torch tensor: on the CPU, of the element dtype, 1-D and contiguous, by ``data_ptr()``,
  zero-copy, O(1);
- a list, tuple or other iterable of integers: converted to an ``array.array`` in C
  (O(n) at C speed, about 30 ns an element), which refuses an element that does not fit the
  C type; only then is the sequence walked in Python, to name the element in the
  ``OverflowError`` (or ``TypeError`` for a non-integer).

Given buffers for every array and ``out``, the hot calls (``alloc_extend``, ``alloc_decode``,
``alloc``, ``free_indices``) skip this module: the library reads the buffers itself
(``_native.py``), for tens of nanoseconds an array instead of 0.5-0.9 us, and reads a
read-only input in place. What it does not take falls back to the conversion here. Given
CPU tensors of the common case, the same calls check them in the method itself (see
``TENSOR_TYPES``), without a handler call a tensor.

The elements of a buffer or tensor are not looked at here: the library checks every length
and index it is given (the lengths are signed, so a negative one is refused by the library,
not read as a huge unsigned number).

An output argument (``out=``) is a writable buffer or a tensor of the pool's index type;
without one, a new buffer of the kind of the inputs is made (see ``out_buffer``).
"""

import array
import ctypes
import operator
import struct
import sys

# A valid, never-written address for empty arrays: the library then sees a non-NULL pointer
# with length 0 whatever the input was (an empty tensor's data_ptr() may be 0).
_EMPTY = array.array("q", [0])
EMPTY_ADDRESS = _EMPTY.buffer_info()[0]

_from_buffer = ctypes.c_char.from_buffer
_addressof = ctypes.addressof


def _native_formats(itemsize):
    """The struct format strings of native signed integers of ``itemsize`` bytes (what
    ``memoryview.format`` says for numpy int64, array 'q', ...)."""
    byteorder = "<" if sys.byteorder == "little" else ">"
    formats = set()
    for code in "bhilqn":
        for prefix in ("", "@", "=", byteorder):
            try:
                if prefix in ("=", byteorder) and code == "n":
                    continue  # 'n' has no standard size
                if struct.calcsize(prefix + code) == itemsize:
                    formats.add(prefix + code)
            except struct.error:
                pass
    return frozenset(formats)


_NEVER = object()


class Elements:
    """One element type of a host array: signed integers of ``bits`` bits."""

    def __init__(self, bits):
        self.bits = bits
        self.c_type = f"int{bits}_t"
        self.name = f"int{bits}"  # torch's and numpy's dtype name
        self.low, self.high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        itemsize = bits // 8
        self.itemsize = itemsize
        self.typecodes = frozenset(c for c in "hilq" if array.array(c).itemsize == itemsize)
        self.typecode = "q" if bits == 64 else "i"
        assert self.typecode in self.typecodes
        self.formats = _native_formats(itemsize)
        self.zero = array.array(self.typecode, [0])
        self._torch_dtype = None
        # torch.<name> and numpy.dtype(<name>), set once torch / numpy arrays are seen
        # (compared with ``is`` on the fast paths; never equal until then)
        self.torch = self.numpy = _NEVER

    def torch_dtype(self, torch):
        dtype = self._torch_dtype
        if dtype is None:
            dtype = self._torch_dtype = getattr(torch, self.name)
        return dtype

    def numpy_dtype(self):
        """numpy's dtype of the elements, as an object once numpy arrays have been seen (a
        dtype given by name is parsed on every call: 50-170 ns of a new output's cost)."""
        dtype = self.numpy
        return self.name if dtype is _NEVER else dtype

    def expected(self):
        return (f"{self.name} elements (array typecode {self.typecode!r}, numpy "
                f"{self.name}, torch.{self.name})")


INT64 = Elements(64)
INT32 = Elements(32)


def _out_of_range(what, value, c_type, low, high):
    return OverflowError(f"{what} = {value} is out of range for {c_type} [{low}, {high}]")


def checked_ints(values, elements, what):
    """The elements of ``values`` as a list of ints, each checked against the element type
    in Python (O(n)): the slow path that names a bad element."""
    low, high = elements.low, elements.high
    ints = []
    for i, value in enumerate(values):
        try:
            number = operator.index(value)
        except TypeError:
            raise TypeError(f"{what}[{i}] must be an integer, not "
                            f"{type(value).__name__}") from None
        if not low <= number <= high:
            raise _out_of_range(f"{what}[{i}]", number, elements.c_type, low, high)
        ints.append(number)
    return ints


def sequence_array(values, elements, what):
    """An ``array.array`` of the element type holding the integers of ``values`` (a list,
    tuple or other iterable), every one range-checked: in C by ``array.array`` (O(n) at C
    speed), and only when it refuses one, again in Python to name it."""
    if type(values) is not list and type(values) is not tuple:
        values = list(values)  # an iterator must be read once, whatever happens below
    try:
        return array.array(elements.typecode, values)
    except (OverflowError, TypeError):
        pass
    return array.array(elements.typecode, checked_ints(values, elements, what))


def _torch(value):
    """torch, if ``value`` is a torch tensor (torch is never imported here: a caller that
    has tensors has imported it already), else None."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(value, torch.Tensor) else None


def _numpy(value):
    """numpy, if ``value`` is a numpy array (never imported here), else None."""
    numpy = sys.modules.get("numpy")
    return numpy if numpy is not None and isinstance(value, numpy.ndarray) else None


def tensor_pointer(tensor, elements, what, torch, device=None):
    """(data pointer, element count) of a tensor the library may read or write directly.

    ``device`` None: a host buffer, so the tensor must be on the CPU (a CUDA tensor's
    pointer must never be read as a host pointer). ``device`` N: a device buffer of a pool on
    CUDA device N, so the tensor must be on ``cuda:N``. Cheap checks only (no
    ``tensor.device`` object unless the check fails)."""
    if device is None:
        if not tensor.is_cpu:
            raise ValueError(f"{what} is on {tensor.device}, but this call reads host memory: "
                             "it must be on the CPU (a CUDA pool takes tensors on its device "
                             "in its *_async methods)")
    elif not tensor.is_cuda or tensor.get_device() != device:
        raise ValueError(f"{what} is on {tensor.device}: it must be on cuda:{device}, the "
                         "pool's device")
    if tensor.dtype is not elements.torch_dtype(torch):
        raise TypeError(f"{what} has dtype {tensor.dtype}; it must be torch.{elements.name}")
    if tensor.dim() != 1:
        raise ValueError(f"{what} must be 1-D, not of shape {tuple(tensor.shape)}")
    if not tensor.is_contiguous():
        raise ValueError(f"{what} must be contiguous")
    return tensor.data_ptr(), tensor.numel()


def device_pointer(tensor, elements, what, device):
    """(data pointer, element count) of a torch tensor on ``cuda:device`` holding the
    elements, 1-D and contiguous: the common case in five attribute reads (a device pool's
    ``*_async`` calls take up to four tensors, so this is most of their Python cost);
    anything else through ``tensor_pointer``'s checks and messages."""
    try:
        if (tensor.is_cuda and tensor.dtype is elements.torch
                and tensor.stride() == _UNIT_STRIDE and tensor.get_device() == device):
            return tensor.data_ptr(), tensor.numel()
    except AttributeError:
        pass  # not a tensor: said below
    torch = _torch(tensor)
    if torch is None:
        raise TypeError(f"{what} must be a torch tensor on cuda:{device} (device memory), "
                        f"not {type(tensor).__name__}")
    elements.torch = elements.torch_dtype(torch)  # the fast path's dtype from now on
    return tensor_pointer(tensor, elements, what, torch, device)


def _view(buffer, elements, what, writable):
    """(address, length, keep) of a buffer-protocol object holding the elements: every
    check with its message (the fast handlers below fall back to this)."""
    view = memoryview(buffer)
    if view.ndim != 1:
        raise ValueError(f"{what} must be 1-D, not of shape {view.shape}")
    if view.format not in elements.formats:
        raise TypeError(f"{what} holds elements of format {view.format!r} ({view.itemsize} "
                        f"bytes); it must hold {elements.expected()}")
    if not view.c_contiguous:
        raise ValueError(f"{what} must be contiguous")
    n = view.shape[0]
    if view.readonly:
        if writable:
            raise TypeError(f"{what} is read-only; an output buffer must be writable")
        copy = array.array(elements.typecode, view.tobytes())
        return (copy.buffer_info()[0] if n else EMPTY_ADDRESS), n, copy
    if n == 0:
        return EMPTY_ADDRESS, 0, view
    return _addressof(_from_buffer(view)), n, view


# ---- host arrays: one handler per exact type, found by a dict lookup --------------------------
# A handler takes (values, elements, what, writable) and returns (address, length, keep):
# `keep` must be held until the library call has returned; for a buffer it holds an export
# (a memoryview, or the ctypes object over the buffer), so the memory cannot be resized
# away meanwhile.


def _from_array(values, elements, what, writable):
    if values.typecode not in elements.typecodes:
        raise TypeError(f"{what} is an array of typecode {values.typecode!r}; it must hold "
                        f"{elements.expected()}")
    address, n = values.buffer_info()
    # Kept: a memoryview, whose export stops a resize (which would move the memory at
    # `address`) until the call has returned.
    return (address, n, memoryview(values)) if n else (EMPTY_ADDRESS, 0, values)


def _from_memoryview(values, elements, what, writable):
    if values.ndim == 1 and values.format in elements.formats:
        n = len(values)
        if n:
            try:  # asks for a writable C-contiguous buffer: refused otherwise
                exported = _from_buffer(values)  # kept: its export stops a resize
                return _addressof(exported), n, exported
            except TypeError:
                pass  # read-only or not contiguous: _view copies, or says why not
    return _view(values, elements, what, writable)


def _from_sequence(values, elements, what, writable):
    if writable:
        raise TypeError(f"{what} must be a torch tensor or a writable buffer (numpy array, "
                        f"array.array, memoryview) of {elements.expected()}, not "
                        f"{type(values).__name__}")
    converted = sequence_array(values, elements, what)
    address, n = converted.buffer_info()
    return (address if n else EMPTY_ADDRESS), n, converted


def _from_buffer_object(values, elements, what, writable):
    return _view(values, elements, what, writable)


def _from_tensor(values, elements, what, writable):
    """A torch tensor: the common case (a CPU tensor of the dtype, 1-D, contiguous) in a
    few attribute reads; anything else through ``tensor_pointer``'s messages."""
    if values.is_cpu and values.dtype is elements.torch and values.stride() == _UNIT_STRIDE:
        n = values.numel()
        return (values.data_ptr() if n else EMPTY_ADDRESS), n, values
    address, n = tensor_pointer(values, elements, what, sys.modules["torch"])
    return (address if n else EMPTY_ADDRESS), n, values


def _from_ndarray(values, elements, what, writable):
    """A numpy array: the common case (of the dtype, 1-D, C-contiguous, writable) without
    a memoryview; anything else (another native dtype of the width, read-only, ...)
    through ``_view``."""
    if values.dtype is elements.numpy and values.ndim == 1:
        n = len(values)
        if n:
            try:  # asks for a writable C-contiguous buffer: refused otherwise
                exported = _from_buffer(values)  # kept: its export stops a resize
                return _addressof(exported), n, exported
            except TypeError:
                pass  # read-only or not contiguous: _view copies, or says why not
    return _view(values, elements, what, writable)


_UNIT_STRIDE = (1,)  # the stride() of a 1-D contiguous tensor (of more than one element)

class _Handlers(dict):
    """{type: handler}; a type not seen yet gets ``_first_seen``, so that the hot calls find
    any handler in one lookup, ``HANDLERS[type(values)]``, without a call to dispatch."""

    def __missing__(self, cls):
        return _first_seen


_HANDLERS = HANDLERS = _Handlers({
    array.array: _from_array,
    list: _from_sequence,
    tuple: _from_sequence,
    memoryview: _from_memoryview,
})


def _first_seen(values, elements, what, writable):
    """The handler of a type not seen yet: finds the real one (``_handler`` remembers it,
    except for iterables, which stay one-offs) and converts with it."""
    return _handler(values)(values, elements, what, writable)


def _handler(values):
    """The handler for ``values``'s type, remembered per type (torch tensors and numpy
    arrays are recognized without importing either: only once the caller has)."""
    cls = type(values)
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(values, torch.Tensor):
        for elements in (INT64, INT32):
            elements.torch = elements.torch_dtype(torch)
        handler = _from_tensor
        TENSOR_TYPES.add(cls)
    else:
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(values, numpy.ndarray):
            for elements in (INT64, INT32):
                elements.numpy = numpy.dtype(elements.name)
            handler = _from_ndarray
        elif _is_buffer(values):
            handler = _from_buffer_object
        else:
            return _from_sequence  # an iterable: not remembered (it may be a one-off)
    _HANDLERS[cls] = handler
    return handler


def _is_buffer(value):
    try:
        memoryview(value)
    except TypeError:
        return False
    return True


def host_array(values, elements, what, writable=False):
    """(address, length, keep) of a host array argument (see the module's docs); ``keep``
    owns the memory and must stay referenced until the call returns. ``writable``: an
    output (``out=``), which must be a tensor or a writable buffer. (The pool's hot methods
    call ``HANDLERS[type(values)](values, elements, what, writable)`` themselves: one Python
    call less per array.)"""
    return _HANDLERS[type(values)](values, elements, what, writable)


# memoryview reads the elements of native formats only ('q', 'l', '@i', ...), not those of
# the standard-size formats the package also takes ('<q', '=i': a ctypes array's): such a
# view is read through a cast to the native code of its width.
_NATIVE_CODES = {8: "q", 4: "i"}


def _readable(view):
    """``view`` (a C-contiguous memoryview of signed integers), readable element by
    element."""
    if view.format[0] in "<=":
        return view.cast("B").cast(_NATIVE_CODES[view.itemsize])
    return view


def total(values, keep):
    """The sum of a host array argument (``values`` as given, ``keep`` from
    ``host_array``): vectorized for tensors and numpy arrays, else ``sum`` over the array or
    memoryview (O(n) at C speed)."""
    if _torch(values) is not None or _numpy(values) is not None:
        return int(values.sum())
    # (for a memoryview, `keep` may be the ctypes object holding its export)
    view = values if isinstance(values, memoryview) else keep
    return sum(_readable(view) if isinstance(view, memoryview) else view)


# ---- outputs --------------------------------------------------------------------------------

# The handlers of buffer-protocol types (what the library's Python entry points can read).
BUFFER_HANDLERS = frozenset({_from_array, _from_memoryview, _from_ndarray, _from_buffer_object})

LIST, ARRAY, NUMPY, TORCH = range(4)
_KINDS = {_from_tensor: TORCH, _from_ndarray: NUMPY, _from_sequence: LIST}

# The hot host methods' lane for CPU tensors: the arrays are all of one type of
# TENSOR_TYPES (torch.Tensor types already seen, whose handler is ``_from_tensor``) and each
# is the common case — ``is_cpu``, its dtype ``is`` the elements' ``.torch``, ``stride() ==
# UNIT_STRIDE`` (1-D, contiguous), not empty — checked inline in the method, which passes
# each ``data_ptr()`` to the C call. Anything else takes the general path
# (``_from_tensor``), which names what is wrong.
TENSOR_TYPES = set()
UNIT_STRIDE = _UNIT_STRIDE


# torch.device("cpu"), made once tensors are seen (a device given by name is parsed on every
# call: ~0.8 us of a new output's cost on the development VM, against ~0.3 for the object).
_CPU = None


def new_tensor(n, elements):
    """A new CPU tensor of ``n`` elements, contiguous, of the elements' dtype (what
    ``out_buffer`` makes for tensor inputs), once tensors have been seen. On the CPU whatever
    torch's default device: under ``torch.set_default_device("cuda")`` a tensor made without
    a device is a CUDA tensor, and a host pool writes through the output's address."""
    global _CPU
    torch = sys.modules["torch"]
    if _CPU is None:
        _CPU = torch.device("cpu")
    return torch.empty(n, dtype=elements.torch, device=_CPU)


def result_kind(*inputs):
    """What a call returns when given no ``out``: a tensor if any input is a tensor, else a
    numpy array if any is one, else an ``array.array`` if any is another buffer (array,
    memoryview, ...), else a list. (A loop rather than a function per input: one Python
    call, not one per input.)"""
    kind = LIST
    for value in inputs:
        found = _HANDLERS[type(value)]
        if found is _first_seen:
            found = _handler(value)
        found = _KINDS.get(found, ARRAY)
        if found > kind:
            kind = found
    return kind


def buffer_kind(*inputs):
    """NUMPY or ARRAY, the kind ``result_kind`` gives, when every input is a buffer of a type
    already seen (the library's Python entry points can read them all); None otherwise (a
    tensor, a list, a type not seen yet: the general path decides)."""
    kind = ARRAY
    for value in inputs:
        found = _HANDLERS[type(value)]
        if found not in BUFFER_HANDLERS:
            return None
        if found is _from_ndarray:
            kind = NUMPY
    return kind


def new_output(kind, n, elements):
    """A new output of ``n`` elements of ``kind`` (NUMPY or ARRAY), as ``out_buffer`` makes
    one, without taking its address."""
    if kind == NUMPY:
        return sys.modules["numpy"].empty(n, elements.numpy_dtype())
    return elements.zero * n


def out_buffer(n, out, elements, *inputs):
    """(buffer, address, length, kind) of a host output: ``out`` if given (a tensor, or a
    writable buffer of the elements: numpy array, array.array, memoryview; written in
    place), else a new buffer of ``n`` elements of the kind ``result_kind(*inputs)``."""
    if out is not None:
        address, length, kind = given_out(out, elements)
        return out, address, length, kind
    kind = result_kind(*inputs)
    if kind == TORCH:
        buffer = new_tensor(n, elements)  # (result_kind has seen the tensor's type)
    else:
        buffer = new_output(kind, n, elements)
    if not n:
        address = EMPTY_ADDRESS  # (an empty numpy array has no buffer to take)
    elif kind == TORCH:
        address = buffer.data_ptr()
    elif kind == NUMPY:
        address = _addressof(_from_buffer(buffer))
    else:
        address = buffer.buffer_info()[0]
    return buffer, address, n, kind


def given_out(out, elements):
    """(address, length, kind) of a given ``out`` (a tensor or a writable buffer of the
    elements): what ``out_buffer`` does with one (the pool's hot methods inline it)."""
    found = _HANDLERS[type(out)]
    if found is _first_seen:
        found = _handler(out)
    address, length, _ = found(out, elements, "out", True)
    return address, length, _KINDS.get(found, ARRAY)


def result(buffer, kind, k, length):
    """What a call that wrote ``k`` elements to an output returns: a list for LIST, else
    the buffer itself when exactly filled (no view to make: a tensor slice costs ~2 us),
    else its first k elements (``buffer[:k]`` for tensors and numpy arrays, a memoryview
    for other buffers: slicing an array.array would copy)."""
    if kind == LIST:
        return (buffer if k == length else buffer[:k]).tolist()
    if k == length:
        return buffer
    if kind == ARRAY:
        return _readable(memoryview(buffer))[:k]
    return buffer[:k]
