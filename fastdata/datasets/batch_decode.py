"""Decode a whole batch of JPEG crops with one call into the native kernel (the GIL released once).

:meth:`fastdata.ShardDataset.__getitems__` hands a batch's records here when its transform is a plain
:class:`~fastdata.transforms.RandomResizedCrop` on the native decoder. The crops are drawn exactly as the per-sample
path draws them (same generator, same order), the regions of every JPEG are decoded by
``fastdata.decode._jpegcrop.decode_batch`` (one call per :data:`CHUNK_BYTES` of regions; on ``threads`` threads
inside each call, each with its own libjpeg decompressor), then each region is resized into its slot (the
transform's ``resample``), as :func:`fastdata.decode.native.decode_crop_into` does: the pixels are the per-sample
path's. A record the batch cannot take (not a JPEG, a header libjpeg refuses, an error or a warning while
decoding) goes through the per-sample path with the same crop, which gives its exact result or error.

Example::

    images = np.empty((len(datas), 224, 224, 3), np.uint8)
    decode_batch_into(RandomResizedCrop(224), datas, images, rngs, threads=4)
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeGuard

import numpy as np

from fastdata._util.stage_clock import marker
from fastdata.decode import native
from fastdata.decode.base import DecodeError
from fastdata.decode.headers import is_jpeg
from fastdata.decode.scaling import headroom, plan_region, region_box, resize_into
from fastdata.sampler.seeding import sample_generator
from fastdata.transforms import crop_params
from fastdata.transforms.compose import DecodeCompose
from fastdata.transforms.crop import RandomResizedCrop

__all__ = [
    "SampleGenerators",
    "batch_capable",
    "decode_all_into",
    "decode_batch_into",
    "release_thread_resources",
    "sample_generators",
]

_local = threading.local()

#: Scratch bytes of decoded regions (before their resize) one kernel call may hold: a batch of large regions is
#: decoded in several calls, so the batch path needs little more memory than the per-sample one.
CHUNK_BYTES = 24 << 20


def batch_capable(transform: object) -> TypeGuard[RandomResizedCrop]:
    """True when ``transform``'s per-sample decode is the one :func:`decode_batch_into` reproduces."""
    return (
        isinstance(transform, RandomResizedCrop)
        and type(transform).decode_into is RandomResizedCrop.decode_into
        and native.available()
        and isinstance(transform.resolve_decoder(), native.NativeJpegDecoder)
    )


def _decompressors(threads: int) -> list:
    """This thread's decompressors for a call on ``threads`` threads; the first is the per-sample path's own.

    Sharing it matters beyond memory: a decompressor's speed can depend on where its buffers landed (measured once:
    of four objects in one process, one decoded 14% slower than the others, on either path), so two paths of one
    thread that used different objects could differ by that much for no other reason.
    """
    pool = getattr(_local, "decompressors", None)
    if pool is None:
        pool = _local.decompressors = [native._decompressor()]
    while len(pool) < threads:
        pool.append(native._jpegcrop.Decompressor())
    return pool[:threads]


def _executor(threads: int) -> ThreadPoolExecutor:
    executor = getattr(_local, "executor", None)
    if executor is None or executor._max_workers != threads:
        if executor is not None:
            executor.shutdown(wait=False)
        executor = _local.executor = ThreadPoolExecutor(threads, thread_name_prefix="fastdata-resize")
    return executor


def release_thread_resources() -> None:
    """Shut the calling thread's resize pool down and drop its scratch and decompressors (a loader thread's exit)."""
    executor = getattr(_local, "executor", None)
    if executor is not None:
        executor.shutdown(wait=True)
    _local.__dict__.clear()


def _scratch(nbytes: int) -> np.ndarray:
    buffer = getattr(_local, "scratch", None)
    if buffer is None or buffer.size < nbytes:
        buffer = _local.scratch = np.empty(max(nbytes + nbytes // 4, 1 << 20), np.uint8)
    return buffer


def decode_batch_into(
    transform: RandomResizedCrop,
    datas: Sequence[bytes],
    out: np.ndarray,
    rngs: Sequence[np.random.Generator | None],
    *,
    threads: int = 1,
) -> None:
    """Decode every record's random crop into ``out[i]``, like ``transform.decode_into(datas[i], out[i], rng=rngs[i])``.

    Args:
        transform: a :class:`~fastdata.transforms.RandomResizedCrop` (see :func:`batch_capable`).
        datas: the encoded records.
        out: C-contiguous uint8 ``(N, H, W, 3)`` with ``(H, W) == transform.size``.
        rngs: one generator (or None: torch's RNG) per record, drawn from in order.
        threads: decoding threads inside the one kernel call (and resizing threads after it).

    Raises:
        DecodeError: a record cannot be decoded (the per-sample path's error).
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    mark = marker()  # per-stage CPU time for `fastdata bench --breakdown`; a no-op otherwise
    decoder = transform.resolve_decoder()
    out_h, out_w = out.shape[1], out.shape[2]
    mark("header")
    sizes = [_jpeg_size(data) for data in datas]
    mark("sample_rng")
    uniforms = _uniforms(transform, rngs)  # every seeded sample's draws in one call, or None
    mark("crop")
    jobs, plans = [], []
    for i, (data, size) in enumerate(zip(datas, sizes, strict=False)):
        if size is None:  # the per-sample path, in order (it draws the crop itself)
            mark("fallback")
            transform.decode_into(data, out[i], rng=rngs[i])
            mark("crop")
            continue
        if uniforms is None:
            plans.append((i, size, transform._params(size[0], size[1], rngs[i])))
        else:  # what the sample's generator would draw (transforms.crop_params.sample_crop with rng)
            draws = uniforms[i].tolist()
            plans.append(
                (i, size, crop_params._params_from_uniforms(size[0], size[1], transform.scale, transform.ratio, draws))
            )
    mark("setup")
    mode = transform.resample
    jobs = [_job(datas[i], box, size, out_h, out_w, mode) for i, size, box in plans]
    start = 0
    while start < len(jobs):  # chunks of regions up to CHUNK_BYTES of scratch: one kernel call each
        end, total = start + 1, jobs[start][7]
        while end < len(jobs) and total + jobs[end][7] <= CHUNK_BYTES:
            total += jobs[end][7]
            end += 1
        _decode_chunk(transform, decoder, jobs[start:end], plans[start:end], out, threads, mark, total)
        mark("setup")
        start = end


def _job(data, box: tuple[int, int, int, int], size: tuple[int, int], out_h: int, out_w: int, mode: str) -> list:
    """The decode plan of one record for the batch call.

    ``[data, scale, y0, y1, x0, x1, region or None, scratch bytes, box in the region]``: what
    ``native.decode_crop_into`` would decode for ``box`` with resample ``mode`` (the smallest of
    :data:`~fastdata.decode.native.NATIVE_SCALES` that keeps the box at least the output's size, times
    :func:`~fastdata.decode.scaling.headroom`, the box mapped into it: :func:`~fastdata.decode.scaling.plan_region`).
    """
    room = headroom(mode)
    scale, y0, y1, x0, x1 = plan_region(box, size[0], size[1], out_h * room, out_w * room, native.NATIVE_SCALES)
    rows, cols = y1 - y0, x1 - x0
    direct = (rows, cols) == (out_h, out_w) and (mode != "antialias" or tuple(box[2:]) == (out_h, out_w))
    return [data, scale, y0, y1, x0, x1, None, 0 if direct else rows * cols * 3, region_box(box, scale, y0, x0)]


class SampleGenerators(Sequence):
    """The per-sample generators of a batch's indices, made only when asked for.

    The per-sample generators of a batch's indices (:func:`fastdata.sampler.seeding.sample_generator`), each made
    only when asked for: the batch call draws the crops of all seeded samples in one native call instead
    (:meth:`uniforms`), the same numbers, without a ``numpy.random.Generator`` per sample (9 us each).
    """

    def __init__(self, indices: Sequence[Any]) -> None:
        self.indices = list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> np.random.Generator | None:  # type: ignore[override]
        return sample_generator(self.indices[i])

    def uniforms(self, draws: int) -> np.ndarray | None:
        """All seeded samples' uniform draws in one array, or None.

        ``[n, draws]``: row i is ``self[i].random(draws)``; None unless every index carries its pass (and its
        position and index are below 2**63, as numpy takes them).
        """
        keys = [getattr(index, "pass_key", None) for index in self.indices]
        if not self.indices or None in keys or native._jpegcrop is None:
            return None
        positions = [index.position for index in self.indices]
        values = [int(index) for index in self.indices]
        if min(positions + values) < 0 or max(positions + values) >= 1 << 63:
            return None
        out = np.empty((len(keys), draws), np.float64)
        native._jpegcrop.philox_uniforms(
            np.array(keys, np.uint64), np.array(positions, np.uint64), np.array(values, np.uint64), out
        )
        return out


def sample_generators(indices: Sequence[Any]) -> SampleGenerators:
    """The generators of a batch's samples, made lazily.

    The generators of a batch's samples, made lazily (:class:`SampleGenerators`); what ``ShardDataset`` hands
    :func:`decode_all_into`.
    """
    return SampleGenerators(indices)


def _uniforms(transform: RandomResizedCrop, rngs: Sequence[Any]) -> np.ndarray | None:
    """The crop draws of every sample in one call, where the transform samples its crop the stock way."""
    stock = (
        type(transform)._params is RandomResizedCrop._params
        and type(transform).get_params is RandomResizedCrop.get_params
    )
    return rngs.uniforms(4 * crop_params._TRIES) if stock and isinstance(rngs, SampleGenerators) else None


def _jpeg_size(data) -> tuple[int, int] | None:
    """A JPEG's ``(height, width)`` from its header; None for anything the kernel does not take."""
    if not is_jpeg(data):
        return None
    try:
        return native.read_header(data)[:2]
    except DecodeError:
        return None


def _decode_chunk(
    transform: RandomResizedCrop,
    decoder,
    jobs: list[list],
    plans: list[tuple],
    out: np.ndarray,
    threads: int,
    mark: Callable[[str], None],
    nbytes: int,
) -> None:
    scratch = _scratch(nbytes)
    offset = 0
    for job, (i, _, _) in zip(jobs, plans, strict=False):
        size = job[7]
        job[6] = out[i] if size == 0 else scratch[offset : offset + size].reshape(job[3] - job[2], job[5] - job[4], 3)
        offset += size
    calls = [tuple(job[:7]) for job in jobs]
    mark("kernel")
    results = native._jpegcrop.decode_batch(_decompressors(threads), calls)
    mark("resize")
    mode = transform.resample

    def finish(k: int) -> None:
        job, (status, warnings, _) = jobs[k], results[k]
        i = plans[k][0]
        if status != 0 or warnings:  # errors and damage: the per-sample path decides, with the same crop
            decoder.decode_crop_into(job[0], plans[k][2], out[i], resample=mode)
        elif job[7]:  # decoded into the scratch: resize into the slot, as decode_crop_into does
            resize_into(job[6], out[i], mode, job[8])

    if threads == 1 or len(jobs) < 2:
        for k in range(len(jobs)):
            finish(k)
    else:
        for _ in _executor(threads).map(finish, range(len(jobs))):  # the resizes release the GIL
            pass


def decode_all_into(
    transform: Any, datas: Sequence[bytes], slots: np.ndarray, rngs: Sequence[Any], *, threads: int = 1
) -> None:
    """Decode a batch's records into ``slots``.

    In one native call when the transform allows it
    (:func:`batch_capable`), else one ``transform.decode_into`` per record.

    A :class:`~fastdata.transforms.DecodeCompose` whose crop is batch-capable has its crops decoded in one call, then
    its augmentations applied slot by slot (on ``threads`` threads), when every record has its own generator: each
    generator then sees the draws of the per-sample path in the same order (crop first, augmentations after), so
    the pixels are ``ds[i]``'s. Without generators (torch's RNG, shared by the records) it goes record by record.

    Also on one thread: measured by ``bench/kernel.py per-sample`` (CPU time, one core, same decompressor),
    ``__getitems__`` through the batch call was about 4% faster than record by record (under load).
    """
    if batch_capable(transform):
        decode_batch_into(transform, datas, slots, rngs, threads=threads)
    elif (
        isinstance(transform, DecodeCompose)
        and batch_capable(transform.crop)
        # One generator per sample, made once, for crop and augmentations alike: the augmentations draw after the
        # crop from the same stream, as the per-sample path does (SampleGenerators makes a fresh one per access).
        and None not in (rngs := list(rngs))
    ):
        decode_batch_into(transform.crop, datas, slots, rngs, threads=threads)
        if threads == 1 or len(datas) < 2:
            for slot, rng in enumerate(rngs):
                transform.augment_into(slots[slot], rng)
        else:  # OpenCV releases the GIL
            for _ in _executor(threads).map(lambda k: transform.augment_into(slots[k], rngs[k]), range(len(rngs))):
                pass
    else:
        marker()("kernel")  # record by record: decode and crop are one call each
        for slot, (data, rng) in enumerate(zip(datas, rngs, strict=False)):
            transform.decode_into(data, slots[slot], rng=rng)
