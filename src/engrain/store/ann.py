"""The approximate vector index of a large user's working set (issue 18; docs/ann.md).

A :class:`VectorIndex` is a usearch HNSW graph (cosine, int8 vectors, connectivity 16,
expansion 128 on add and 256 on search) over the vectors of one user's memories, keyed by
:func:`memory_keys` (a 64-bit hash of the memory id, the same in every process). It is an
accelerator, never a source of truth: the working set (``store/cache.py``) asks it for
candidate keys only, maps them onto its own snapshot (a key that is not there, a forgotten
memory, is dropped), scores them exactly with the snapshot's vectors, and searches the rows
the index does not hold (new or re-embedded memories) exactly. Which rows it holds is
checked, not assumed: :meth:`VectorIndex.holds` compares the index's stored vectors with
the snapshot's, at the index's precision.

**int8.** The index's vectors are int8 (usearch: each unit vector's components times 127,
truncated): half the memory of float16 (38 against 77 MB at 100,000 × 384). Alone they
rank worse (R@50 0.927 against 0.979 for float16 on near-ties, docs/ann.md), so they only
pick candidates: every candidate is scored exactly with its float32 vector (the SQLite
store reads them from the rows; docs/scale.md, "Vectors held once"). An index saved as
float16 (or float32) by an earlier version is turned into an int8 one as it is loaded
(:func:`int8_payload`: its vectors quantized, its graph kept as it is, no rebuild) and saved
so: a large user's first search after an upgrade does not wait minutes for a new graph, and
the process does not keep float16 vectors (~38 MB more at 100,000).

An :class:`IndexSlot` is the one index of one user in one process. It outlives the
working set (which is dropped whenever another process commits), builds the index off the
request path on a daemon thread (searches stay exact until it is ready), patches it with
rows it does not hold, and keeps it between processes in a :class:`Stash` (the SQLite
store's ``derived_indexes`` table: written in one transaction, so a reader never sees a torn
copy and with several processes the last writer wins), framed with a magic, its length and
a CRC-32 so a damaged copy is rebuilt rather than loaded. A copy that loads still only
counts for the rows whose vectors it holds.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import struct
import threading
import weakref
import zlib
from collections.abc import Callable, Iterable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import numpy.typing as npt

from engrain.errors import EngrainError, StoreError
from engrain.threads import booted, started

if TYPE_CHECKING:
    from usearch.index import Index

log = logging.getLogger(__name__)

BoolArray = npt.NDArray[np.bool_]
Keys = npt.NDArray[np.uint64]
Matrix = npt.NDArray[np.float32]

#: Users with fewer vectors are searched exactly: a matrix product over 20,000 × 384 takes
#: about 1 ms and is exact; an index saves little there and costs a build (docs/scale.md).
ANN_MIN_VECTORS = 20_000
#: The vectors' type in a new index (usearch ``dtype``): "i8" needs exact re-scoring.
DTYPE = "i8"
CONNECTIVITY = 16
EXPANSION_ADD = 128
EXPANSION_SEARCH = 256
#: Rows not held by the index that trigger a patch in the background (until then they are
#: searched exactly on every call: 2,000 rows cost ~0.1 ms).
PATCH_AFTER = 2_000
#: Above this share of rows not held, a new index is built instead of patching the old one.
REBUILD_SHARE = 0.5

#: Vectors added per call while building: between calls the build checks whether the
#: interpreter is exiting (usearch's worker threads must not outlive it: the process would
#: abort with "terminate called without an active exception").
BUILD_CHUNK = 4_096
#: Rows compared at a time when checking which rows the index holds (:meth:`VectorIndex.holds`):
#: 16,384 rows' copies take ~30 MB, against ~5 GB for a million at once.
HOLDS_CHUNK = 16_384

_MAGIC = b"ENGRANN1"
_HEADER = struct.Struct("<8sQI")  # magic, payload length, CRC-32 of the payload

#: usearch 2.x's serialisation of a dense index: the vectors as a matrix (two uint32, rows
#: and bytes per row, then the rows in slot order), a 64-byte head (``usearch``, the
#: version, then one byte each: metric, scalar kind, key kind, slot kind; counts and the
#: dimension), then the graph, which holds no vector. Only the matrix and the head's scalar
#: kind depend on the vectors' type.
_MATRIX = struct.Struct("<II")
_HEAD_SIZE = 64
_HEAD_MAGIC = b"usearch"
_HEAD_SCALAR = 14
#: usearch's ``ScalarKind`` codes of the vector types an index is converted from, and int8.
_WIDE_KINDS = {12: np.float16, 11: np.float32}
_I8_KIND = 23
#: Rows quantized at a time when converting (16,384 × 384 float32: 25 MB of temporaries).
CONVERT_CHUNK = 16_384


@lru_cache(maxsize=1)
def _usearch() -> type[Index]:
    """usearch's ``Index``, imported on first use and after onnxruntime: with usearch's
    compiled module loaded first, a later ``import onnxruntime`` kills the process with a
    segmentation fault (usearch 2.26.6, onnxruntime 1.x, Linux x86-64: ``python -c "import
    usearch.index, onnxruntime"``); the other order is fine."""
    with suppress(ImportError):
        import onnxruntime  # noqa: F401

    from usearch.index import Index

    return Index


class _Exiting(Exception):
    """The interpreter is exiting: the index job stops between two usearch calls."""


_EXITING = threading.Event()
_JOBS: weakref.WeakSet[threading.Thread] = weakref.WeakSet()


def _stop_if_exiting() -> None:
    if _EXITING.is_set():
        raise _Exiting


@atexit.register
def _stop_jobs() -> None:
    """Stop running index jobs at exit and wait for them (a usearch call in flight ends
    within about a second), so no usearch thread outlives the interpreter."""
    _EXITING.set()
    for thread in list(_JOBS):
        if thread.is_alive():  # (one that never said it runs cannot be joined)
            thread.join(timeout=30.0)


def join_at_exit() -> None:
    """Have the interpreter's exit wait for the calling thread (a daemon thread building an
    index elsewhere, e.g. ``store/postgres/projected.py``'s loads): its build stops at the
    next chunk once the exit begins, so no usearch call outlives the interpreter."""
    if threading.current_thread() is not threading.main_thread():
        _JOBS.add(threading.current_thread())


def quantized(vectors: Matrix) -> npt.NDArray[np.int8]:
    """``vectors`` as a cosine int8 usearch index stores them: each normalised, times 127,
    truncated toward zero (usearch 2.x; a zero vector stays zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = np.divide(vectors, norms, out=np.zeros_like(vectors), where=norms > 0)
    out: npt.NDArray[np.int8] = np.trunc(np.clip(unit * 127.0, -127.0, 127.0)).astype(np.int8)
    return out


def dequantized(codes: npt.NDArray[np.int8]) -> Matrix:
    """Unit vectors for int8 ``codes`` (:func:`quantized` ones): each code at the middle of
    its step before normalising. Truncation put ``127 × u`` anywhere in ``[c, c + 1)`` away
    from zero for a code ``c ≠ 0`` (in ``(-1, 1)`` for 0), so the middle is unbiased where
    the code itself is short by half a step on average: on the 100,000-memory corpus the
    cosine of a query with the middle's vector is within 0.0016 of the exact one (median;
    0.0021 for the codes as they are, max 0.011 against 0.014; docs/scale.md, session 16)."""
    wide = codes.astype(np.float32)
    wide += np.float32(0.5) * np.sign(wide)
    norms = np.linalg.norm(wide, axis=1, keepdims=True)
    out: Matrix = np.divide(wide, norms, out=np.zeros_like(wide), where=norms > 0)
    return out


def int8_payload(payload: memoryview) -> bytearray | None:
    """A usearch serialisation of a cosine float16 or float32 index (``payload``) as the
    same index with int8 vectors: each vector quantized as usearch quantizes a cosine one
    (:func:`quantized`), the head's scalar kind set to int8, the graph copied unchanged (it
    refers to slots, not vectors). ``None`` if ``payload`` is not such an index in the
    layout this code knows (usearch 2.x, 32-bit matrix header, cosine, vectors included):
    the caller then loads it as it is. A converted index is what building one from the
    same vectors in the same slots would store, to within one quantization step (a float16
    component is within 1/2048 of the float32 one), which is what :meth:`VectorIndex.holds`
    allows; the graph was built with the wider vectors' distances, and only proposes
    candidates (every one is scored exactly)."""
    if len(payload) < _MATRIX.size:
        return None
    rows, width = _MATRIX.unpack_from(payload)
    head_at = _MATRIX.size + rows * width
    if head_at + _HEAD_SIZE > len(payload):
        return None
    head = payload[head_at : head_at + _HEAD_SIZE]
    wide = _WIDE_KINDS.get(head[_HEAD_SCALAR])
    if bytes(head[: len(_HEAD_MAGIC)]) != _HEAD_MAGIC or head[7] != 2 or wide is None:
        return None
    meta = _usearch().metadata(payload)
    ndim = 0 if meta is None else int(meta["dimensions"])
    if meta is None or not meta["matrix_included"] or meta["matrix_uses_64_bit_dimensions"] \
            or str(meta["kind_metric"]).rsplit(".", 1)[-1].lower() != "cos" \
            or ndim <= 0 or width != ndim * np.dtype(wide).itemsize:  # fmt: skip
        return None
    out = bytearray(len(payload) - rows * (width - ndim))
    _MATRIX.pack_into(out, 0, rows, ndim)
    source = np.frombuffer(payload, dtype=wide, count=rows * ndim, offset=_MATRIX.size)
    target = np.frombuffer(out, dtype=np.int8, count=rows * ndim, offset=_MATRIX.size)
    source, target = source.reshape(rows, ndim), target.reshape(rows, ndim)
    for start in range(0, rows, CONVERT_CHUNK):
        end = start + CONVERT_CHUNK
        target[start:end] = quantized(source[start:end].astype(np.float32))
    at = _MATRIX.size + rows * ndim
    out[at:] = payload[head_at:]
    out[at + _HEAD_SCALAR] = _I8_KIND
    return out


def memory_keys(ids: Sequence[str]) -> Keys:
    """The index key of each memory id: the first 63 bits of its BLAKE2b digest (stable
    across processes; a collision only costs recall, since every result is checked
    against the snapshot's own ids)."""
    return np.fromiter(
        (int.from_bytes(hashlib.blake2b(i.encode(), digest_size=8).digest(), "little") >> 1
         for i in ids),
        dtype=np.uint64, count=len(ids),
    )  # fmt: skip


#: Threads adding vectors to a new index. One: usearch 2.26.6's concurrent insertion left a
#: graph in which a vector's own search misses it (on this project's 2-core AMD machines,
#: 24 of 30 builds of 600 clustered vectors with every core, 2-8 vectors each; 0 of 30 on
#: one thread, ``tests/test_ann.py::test_every_vector_of_a_new_index_finds_itself``).
#: The build runs off the request path; one thread is slower, never wrong.
BUILD_THREADS = 1


class VectorIndex:
    """A usearch index of unit vectors by key. Every call holds the index's own lock: the
    graph is patched by one thread while others search it."""

    def __init__(
        self, index: Index, converted: bool = False, *, view: memoryview | None = None
    ) -> None:
        self._index = index
        self._lock = threading.Lock()
        #: The saved bytes ``index`` reads in place (:meth:`viewed`), until a patch copies
        #: them in; kept referenced so they outlive the index.
        self._view = view
        #: For a view of a mapped file: whether the file is still as it was when mapped
        #: (:meth:`viewed`'s ``intact``). Its pages are the file's, so a file changed or cut
        #: short in place by anyone else would be walked as it now is: usearch trusts its
        #: neighbour lists, and the process faults (SIGSEGV, SIGBUS: session 26's attack).
        self._intact: Callable[[], bool] | None = None
        #: Loaded from a float16 or float32 copy and turned into int8 (:func:`int8_payload`):
        #: the saved copy is still the wider one until this one is saved.
        self.converted = converted
        #: The saved copy this index is exactly (its payload's CRC-32 and length), if it
        #: is one: set when it is loaded unchanged or saved, cleared by a patch. A stamp
        #: (``store/ann_stamp.py``) names the copy it vouches for this way.
        self.saved: tuple[int, int] | None = None

    @property
    def ndim(self) -> int:
        """The dimension of the vectors it holds."""
        return int(self._index.ndim)

    @property
    def lossy(self) -> bool:
        """Whether its vectors are too coarse to score with (int8): candidates are then
        scored with vectors read elsewhere (float16 ones stay within 1e-3 of a score)."""
        return self._dtype != "f16" and self._dtype != "f32"

    @property
    def _dtype(self) -> str:
        return str(self._index.dtype).rsplit(".", 1)[-1].lower()

    def __len__(self) -> int:
        with self._lock:
            return len(self._index)

    @classmethod
    def build(cls, keys: Keys, vectors: Matrix, threads: int = BUILD_THREADS) -> VectorIndex:
        """A new index of these vectors, added by ``threads`` threads (0: every core; see
        :data:`BUILD_THREADS`)."""
        chunks = (
            (keys[start : start + BUILD_CHUNK], vectors[start : start + BUILD_CHUNK])
            for start in range(0, len(keys), BUILD_CHUNK)
        )
        return cls.built_from(int(vectors.shape[1]), chunks, threads)

    @classmethod
    def built_from(
        cls, ndim: int, chunks: Iterable[tuple[Keys, Matrix]], threads: int = BUILD_THREADS
    ) -> VectorIndex:
        """A new index of vectors of ``ndim`` dimensions added chunk by chunk as ``chunks``
        yields them (distinct keys), so a caller reading them from a database never holds
        them all at once."""
        index = _usearch()(
            ndim=ndim, metric="cos", dtype=DTYPE, connectivity=CONNECTIVITY,
            expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH,
        )  # fmt: skip
        for part, rows in chunks:
            _stop_if_exiting()
            if len(part):
                index.add(part, rows, threads=threads)
        return cls(index)

    @property
    def nbytes(self) -> int:
        """What holding the index costs (usearch's own count: vectors and graph; for a
        view, the mapped bytes it reads as well)."""
        with self._lock:
            return int(self._index.memory_usage) + (0 if self._view is None else len(self._view))

    @property
    def is_view(self) -> bool:
        """Whether it reads saved bytes in place (:meth:`viewed`) rather than its own copy."""
        with self._lock:
            return self._view is not None

    @property
    def intact(self) -> bool:
        """Whether it may be read: its own copy, or a view whose file nobody changed in
        place since it was mapped (a file moved over it is another file: the view keeps
        the old one's pages)."""
        with self._lock:
            return self._view is None or self._intact is None or self._intact()

    def _readable(self) -> None:
        """Refuse to read a view whose file changed in place (the caller holds the lock):
        the store serves the call without it, and the holder drops it."""
        if self._view is not None and self._intact is not None and not self._intact():
            raise StoreError("a held approximate index's file changed in place: not read")

    def search(self, vector: npt.NDArray[np.float32], count: int) -> Keys:
        """The keys of (about) the ``count`` nearest vectors, nearest first."""
        return self.search_similar(vector, count)[0]

    def search_similar(
        self, vector: npt.NDArray[np.float32], count: int
    ) -> tuple[Keys, npt.NDArray[np.float32]]:
        """:meth:`search`'s keys and the cosine of each one's stored vector with ``vector``
        at the index's precision (int8: within ``store/reach.py``'s bound of the exact
        cosine)."""
        with self._lock:
            self._readable()
            if count <= 0 or len(self._index) == 0:
                return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.float32)
            found = self._index.search(vector, min(count, len(self._index)))
        similar = 1.0 - np.asarray(found.distances, dtype=np.float32)
        return np.asarray(found.keys, dtype=np.uint64), similar

    def contains(self, keys: Keys) -> BoolArray:
        """For each key, whether the index holds it (whatever its vector)."""
        if not len(keys):
            return np.zeros(0, dtype=bool)
        with self._lock:
            self._readable()
            return np.asarray(self._index.contains(keys), dtype=bool)

    def holds(self, keys: Keys, vectors: Matrix) -> BoolArray:
        """For each row, whether the index holds this key with this vector (as the index
        stores it: float16, or int8 as usearch quantizes a cosine vector, to within one
        step). Compared :data:`HOLDS_CHUNK` rows at a time: at a million rows the copies
        of every vector at once took ~5 GB (docs/scale.md)."""
        held = np.zeros(len(keys), dtype=bool)
        if not len(keys) or vectors.shape[1] != self.ndim:
            return held
        for start in range(0, len(keys), HOLDS_CHUNK):
            end = start + HOLDS_CHUNK
            held[start:end] = self._holds(keys[start:end], vectors[start:end])
        return held

    def _holds(self, keys: Keys, vectors: Matrix) -> BoolArray:
        """:meth:`holds` for one chunk of rows."""
        held = np.zeros(len(keys), dtype=bool)
        dtype = "i8" if self.lossy else "f16"
        with self._lock:
            self._readable()
            present = np.asarray(self._index.contains(keys), dtype=bool)
            rows = np.flatnonzero(present)
            if rows.size == 0:
                return held
            stored: Any = self._index.get(keys[rows], dtype=dtype)
        stored_matrix = np.stack(stored) if isinstance(stored, tuple) else np.asarray(stored)
        mine = vectors[rows]
        if dtype == "i8":
            # usearch normalises in its own float arithmetic: a component a hair from a
            # step of 1/127 may truncate to the next one (2 rows of 30,000 real vectors)
            gap = np.abs(stored_matrix.astype(np.int16) - quantized(mine).astype(np.int16))
            same = (gap <= 1).all(axis=1)
        else:
            same = (stored_matrix == mine.astype(np.float16)).all(axis=1)
        held[rows[same]] = True
        return held

    def vectors(self, keys: Keys) -> Matrix:
        """The vectors the index holds for ``keys`` (widened to float32: an int8 one by
        :func:`dequantized`, a unit vector's direction to within half a step of 1/127 per
        component; zeros for a key it does not hold): what a working set scores with when
        it has no float32 copy and cannot read one (docs/scale.md)."""
        out = np.zeros((len(keys), self.ndim), dtype=np.float32)
        if not len(keys):
            return out
        lossy = self.lossy
        with self._lock:
            self._readable()
            stored: Any = self._index.get(keys, dtype="i8" if lossy else "f32")
        found = [i for i, vector in enumerate(stored) if vector is not None]
        if not found:
            return out
        block = np.stack([stored[i] for i in found])
        # int8: each code at the middle of its step, then unit length (truncation shortens
        # every component: the codes as they are lean toward zero)
        out[found] = dequantized(block) if lossy else block
        return out

    def patch(self, keys: Keys, vectors: Matrix, batch: int = 256) -> None:
        """Hold these keys with these vectors (replacing what a key held), ``batch`` at a
        time so searches are not held up for long."""
        self._own_copy()  # checks the view against its CRC (``saved``) first
        self.saved = None  # no longer the saved copy, even if a batch fails
        for start in range(0, len(keys), batch):
            _stop_if_exiting()
            part, rows = keys[start : start + batch], vectors[start : start + batch]
            with self._lock:
                present = part[np.asarray(self._index.contains(part), dtype=bool)]
                if len(present):
                    self._index.remove(present)
                self._index.add(part, rows, threads=1)

    def _own_copy(self) -> None:
        """A view's saved bytes copied in (a view cannot be changed). Checked and copied
        outside the lock (searches go on walking the view meanwhile: at a million rows
        the CRC and the copy take ~1 s), then put in its place under it: a search sees the
        view or the copy, the same graph. Two patches copying at once keep the first copy
        put in place."""
        with self._lock:
            view, saved, size = self._view, self.saved, len(self._index)
            if view is None:
                return
            self._readable()
        if saved is not None and zlib.crc32(view) != saved[0]:
            # changed in place after the check above: never copied in, nor saved again
            # under a CRC of its own as if it were a graph
            raise StoreError("a held approximate index's file changed in place: not copied")
        copy = _usearch().restore(
            view, connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD,
            expansion_search=EXPANSION_SEARCH,
        )  # fmt: skip
        if copy is None or len(copy) != size:
            raise EngrainError("a viewed approximate index could not be copied in")
        with self._lock:
            if self._view is view:
                self._index, self._view = copy, None

    def dump(self) -> bytes:
        """The index as bytes: a header (magic, payload length, CRC-32) and usearch's own
        serialisation."""
        with self._lock:
            saved = self._index.save()
        assert saved is not None  # no path given: the bytes
        payload = bytes(saved)
        return _HEADER.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload

    def write_to(self, out: BinaryIO) -> tuple[int, int]:
        """Write :meth:`dump`'s bytes to ``out`` without joining them first (one copy of
        the index in memory, not three: ~100 MB less at the peak at 100,000 rows); the
        copy's CRC-32 and length, as :attr:`saved` names a copy."""
        with self._lock:
            saved = self._index.save()
        assert saved is not None  # no path given: the bytes
        payload = memoryview(saved)
        copy = (zlib.crc32(payload), len(payload))
        out.write(_HEADER.pack(_MAGIC, copy[1], copy[0]))
        out.write(payload)
        return copy

    @classmethod
    def load(cls, data: bytes | bytearray | memoryview | None, ndim: int) -> VectorIndex | None:
        """The index :meth:`dump` made, or ``None`` if there is none, or it is torn,
        corrupted, of other parameters or of vectors of another dimension (the caller
        rebuilds). A float16 or float32 index (saved by an earlier version) comes back as
        an int8 one (:func:`int8_payload`; ``converted`` set)."""
        return cls.read(lambda: data, ndim)

    @classmethod
    def read(
        cls, source: Callable[[], bytes | bytearray | memoryview | None], ndim: int
    ) -> VectorIndex | None:
        """:meth:`load` of what ``source()`` returns. usearch copies the index in from a
        view of the saved bytes (no copy of them first: ~0.5 GB less at the peak of opening
        a million int8 vectors); a wider index's saved bytes are dropped as soon as its
        int8 copy is made, before usearch copies that in (a million float16 vectors: 0.9
        GB less)."""
        data = source()
        if data is None or len(data) < _HEADER.size:
            return None
        magic, length, crc = _HEADER.unpack_from(data)
        payload = memoryview(data)[_HEADER.size :]
        if magic != _MAGIC or length != len(payload) or zlib.crc32(payload) != crc:
            return None
        narrow = int8_payload(payload)
        buffer: memoryview | bytearray = payload
        if narrow is not None:
            buffer = narrow
            del payload, data  # the saved bytes, unless the caller still holds them
        try:
            index = _usearch().restore(
                buffer, connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD,
                expansion_search=EXPANSION_SEARCH,
            )  # fmt: skip
        except (ValueError, RuntimeError) as exc:
            log.warning("approximate index unreadable (%s): rebuilding", exc)
            return None
        if index is None or int(index.ndim) != ndim or index.connectivity != CONNECTIVITY:
            return None
        loaded = cls(index, converted=narrow is not None)
        if narrow is None:
            loaded.saved = (crc, length)
        return loaded

    @classmethod
    def viewed(
        cls, data: memoryview, ndim: int, intact: Callable[[], bool] | None = None
    ) -> VectorIndex | None:
        """The int8 index :meth:`dump` made, read in place from ``data`` rather than copied
        in: ``data`` is a view of a mapped file that is replaced, never changed in place
        (``store/postgres/graph_file.py``), so its pages are the file's, shared by every
        process that maps it, and the kernel may take clean ones back and read them again.
        The index keeps ``data`` referenced; its first :meth:`patch` copies it in. ``None``
        as for :meth:`load`, and for an index of wider vectors (:meth:`load` converts it).
        ``intact``: whether the file is still as it was when mapped, asked before every read
        of the view (:meth:`intact`); one that is not is never read again."""
        if len(data) < _HEADER.size:
            return None
        magic, length, crc = _HEADER.unpack_from(data)
        payload = data[_HEADER.size :]
        if magic != _MAGIC or length != len(payload) or zlib.crc32(payload) != crc:
            return None
        try:
            index = _usearch()(
                ndim=ndim, metric="cos", dtype=DTYPE, connectivity=CONNECTIVITY,
                expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH,
            )  # fmt: skip
            index.view(payload)
        except (ValueError, RuntimeError) as exc:
            log.warning("approximate index unreadable in place (%s)", exc)
            return None
        viewed = cls(index, view=payload)
        if int(index.ndim) != ndim or index.connectivity != CONNECTIVITY or not viewed.lossy:
            return None
        viewed.saved = (crc, length)
        viewed._intact = intact
        return viewed

    @staticmethod
    def copy_of(data: bytes) -> tuple[int, int] | None:
        """The CRC-32 and length of the copy :meth:`dump` made (``data``), as its header
        gives them (not checked here: :meth:`read` checks them)."""
        if len(data) < _HEADER.size:
            return None
        magic, length, crc = _HEADER.unpack_from(data)
        return (crc, length) if magic == _MAGIC else None


@dataclass(frozen=True)
class Stash:
    """Where one derived index of one user is kept between processes: ``read()`` returns
    the bytes last written (or ``None``), ``write(data)`` replaces them atomically;
    ``later(job)`` runs a job that saves one off the caller's thread (by default on a
    thread of its own that the interpreter waits for at exit)."""

    read: Callable[[], bytes | None]
    write: Callable[[bytes], None]
    later: Callable[[Callable[[], None]], None] = field(default=lambda job: _thread(job))


def _thread(job: Callable[[], None]) -> None:
    """Run ``job`` on a new thread, not a daemon: a process exiting at once still saves."""
    started(threading.Thread(target=job, daemon=False, name="engrain-save"))


class IndexSlot:
    """One user's index in this process: ready or not, built or patched off the request
    path, kept between processes in ``stash`` (``None``: in this process only). ``part``:
    the slot of the user's second index, over the typed learnings alone
    (``store/ann_kinds.py``), if it gets one."""

    def __init__(
        self,
        stash: Stash | None,
        min_vectors: int,
        background: bool = True,
        part: IndexSlot | None = None,
    ) -> None:
        self.stash = stash
        self.min_vectors = min_vectors
        self.background = background
        self.part = part
        self._index: VectorIndex | None = None
        self._lock = threading.Lock()
        self._job: threading.Thread | None = None  # started, not yet running its job
        self._idle = threading.Event()
        self._idle.set()
        self._closed = False

    @property
    def index(self) -> VectorIndex | None:
        """The index, once built or loaded."""
        return self._index

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a running build or patch; whether an index is ready."""
        self._idle.wait(timeout)
        return self._index is not None

    def close(self) -> None:
        """Stop saving (the store is closing); a running job finishes in memory."""
        self._closed = True
        if self.part is not None:
            self.part.close()

    def start(self, job: Callable[[], None]) -> None:
        """Run ``job`` on a daemon thread (inline without background) unless one runs."""
        with self._lock:
            if not self._idle.is_set():
                return
            self._idle.clear()
        if not self.background:
            self._run(job)
            return
        thread = threading.Thread(target=self._run_as_job, args=(job,), daemon=True,
                                  name="engrain-ann")  # fmt: skip
        with self._lock:
            self._job = thread
        _JOBS.add(thread)
        if booted(thread) is True:
            return
        with self._lock:  # idle again: searches stay exact, the next call retries
            if self._job is thread:  # (unless it claimed the job since: then it runs it)
                _JOBS.discard(thread)
                self._job = None
                self._idle.set()

    def _run_as_job(self, job: Callable[[], None]) -> None:
        """:meth:`_run` on the job's thread, unless the slot went on without it (it did not
        say it runs within ``threads.BOOT_WAIT``: the slot is idle again, and another job
        may run)."""
        with self._lock:
            if self._job is not threading.current_thread():
                return
            self._job = None  # claimed: the job is this thread's
        self._run(job)

    def _run(self, job: Callable[[], None]) -> None:
        try:
            job()
        except _Exiting:
            pass
        except Exception:  # a failed build leaves exact search in place
            if self._closed:  # the store closed under it (its reads fail): nothing lost
                log.debug("approximate index job stopped by the store's close", exc_info=True)
            else:
                log.exception("approximate index job failed; searches stay exact")
        finally:
            self._idle.set()

    def prepare(self, keys: Keys, vectors: Matrix) -> tuple[VectorIndex, BoolArray]:
        """Load the saved index, or build one, for these rows; patch it with the rows it
        does not hold; publish and save it. Returns the index and, per row, whether it
        holds that row's vector (all of them, unless a row's vector cannot be held): the
        caller takes this mask instead of checking every row again (at a million rows a
        check reads every vector back from the index, ~1 min). Runs on the job thread."""
        index = None if self.stash is None else VectorIndex.read(self._read, vectors.shape[1])
        save = False
        if index is not None:
            held = index.holds(keys, vectors)
            missing = np.flatnonzero(~held)
            if missing.size > REBUILD_SHARE * len(keys):
                index = None
            elif missing.size:
                index.patch(keys[missing], vectors[missing])
                # what was patched in is checked like the rest (a zero vector is not held)
                held[missing] = index.holds(keys[missing], vectors[missing])
            save = index is not None and (missing.size > 0 or index.converted)
        if index is None:
            index = self.rebuild(keys, vectors)
            return index, index.holds(keys, vectors)
        self._publish(index)
        if save:  # patched, or converted to int8: saved so once
            self._save(index)
        return index, held

    def rebuild(self, keys: Keys, vectors: Matrix) -> VectorIndex:
        """A new index of exactly these rows, published and saved. Runs on the job
        thread."""
        index = VectorIndex.build(keys, vectors)
        self._publish(index)
        self._save(index)
        return index

    def update(self, keys: Keys, vectors: Matrix) -> None:
        """Patch the index with rows it does not hold, then save it. Runs on the job
        thread."""
        index = self._index
        if index is None:
            return
        index.patch(keys, vectors)
        self._save(index)

    def adopt(self, index: VectorIndex) -> bool:
        """Take ``index``, a saved copy the store loaded because its stamp vouches that it
        holds every row the working set loaded (``store/ann_stamp.py``), unless the slot
        already has one or a job runs; whether it did."""
        with self._lock:
            if self._index is not None or not self._idle.is_set():
                return False
            self._index = index
            return True

    def _publish(self, index: VectorIndex) -> None:
        with self._lock:
            self._index = index

    def _read(self) -> bytes | None:
        if self.stash is None:
            return None
        try:
            return self.stash.read()
        except EngrainError as exc:  # as if there were none: rebuilt
            log.warning("cannot read the saved approximate index: %s", exc)
            return None

    def _save(self, index: VectorIndex) -> None:
        if self.stash is None or self._closed:
            return
        data = index.dump()
        try:
            self.stash.write(data)
        except EngrainError as exc:  # the index still serves this process; the next rebuilds
            if self._closed:  # the store closed while it was built: nothing failed
                log.info("the approximate index was not saved: the store closed first (the "
                         "next process builds it again)")  # fmt: skip
            else:
                log.warning("cannot save the approximate index: %s", exc)
            return
        index.converted = False
        index.saved = VectorIndex.copy_of(data)  # the job thread alone patches it
