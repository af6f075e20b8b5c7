"""One native call per batch (fastdata.datasets.batch_decode): the per-sample path's pixels and errors, 1+ threads."""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
import torch

from fastdata.datasets import batch_decode
from fastdata.datasets.shard_dataset import ShardDataset
from fastdata.decode import DecodeError, native
from fastdata.sampler.seeding import SampleIndex, sample_generator
from fastdata.transforms import RandomResizedCrop
from tests.images import encode, natural_image

pytestmark = pytest.mark.skipif(not native.available(), reason="native JPEG kernel not built")


def _records() -> list[bytes]:
    rng = np.random.default_rng(12)
    photo = natural_image(rng, 150, 203)
    jpeg = encode(photo, "JPEG", quality=90)
    records = [
        jpeg,
        encode(natural_image(rng, 97, 131), "JPEG", quality=85, progressive=True),
        encode(photo[..., 0], "JPEG", quality=90),
        encode(natural_image(rng, 61, 40), "JPEG", "CMYK", quality=90),
        encode(natural_image(rng, 33, 47), "PNG"),  # not a JPEG: the per-sample path
        jpeg[: len(jpeg) * 2 // 3],  # truncated: libjpeg warns, the per-sample path decides
        encode(natural_image(rng, 17, 17), "JPEG", quality=90, subsampling=0),
        encode(natural_image(rng, 300, 260), "JPEG", quality=90, subsampling=1),
    ]
    if shutil.which("jpegtran"):
        records.append(
            subprocess.run(
                ["jpegtran", "-optimize", "-restart", "1B"], input=jpeg, capture_output=True, check=True
            ).stdout
        )
    return records


def _per_sample(transform, datas, seeds) -> np.ndarray:
    out = np.empty((len(datas), *transform.size, 3), np.uint8)
    for i, data in enumerate(datas):
        transform.decode_into(data, out[i], rng=None if seeds is None else sample_generator(seeds[i]))
    return out


@pytest.mark.parametrize("resample", ["antialias", "fast"])
@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("size", [(48, 40), (224, 224)])
def test_batch_equals_per_sample(threads, size, resample):
    transform = RandomResizedCrop(size, resample=resample, decoder="native")
    assert batch_decode.batch_capable(transform)
    datas = _records() * 3
    seeds = [SampleIndex(i, 0, i) for i in range(len(datas))]
    expected = _per_sample(transform, datas, seeds)
    out = np.zeros_like(expected)
    with pytest.warns(UserWarning):  # the truncated file decodes with libjpeg's warning, as per sample
        batch_decode.decode_batch_into(transform, datas, out, [sample_generator(s) for s in seeds], threads=threads)
    np.testing.assert_array_equal(out, expected)


def test_torch_rng_draws_in_the_same_order():
    transform = RandomResizedCrop(32, decoder="native")
    datas = _records()[:5] + _records()[6:]  # no damaged file
    torch.manual_seed(3)
    expected = _per_sample(transform, datas, None)
    torch.manual_seed(3)
    out = np.empty_like(expected)
    batch_decode.decode_batch_into(transform, datas, out, [None] * len(datas), threads=2)
    np.testing.assert_array_equal(out, expected)


def test_errors_are_the_per_sample_errors():
    transform = RandomResizedCrop(32, decoder="native")
    good = _records()[0]
    for bad in (good[:20], good[:2] + b"\xff\xc0\x00\x11" + b"\x00" * 40, b"not an image at all"):
        out = np.empty((2, 32, 32, 3), np.uint8)
        with pytest.raises(DecodeError):
            batch_decode.decode_batch_into(transform, [good, bad], out, [sample_generator(1), sample_generator(2)])
    with pytest.raises(ValueError, match="threads"):
        batch_decode.decode_batch_into(transform, [good], np.empty((1, 32, 32, 3), np.uint8), [None], threads=0)


def test_kernel_decode_batch_arguments():
    kernel = native._jpegcrop
    data = _records()[0]
    one = kernel.Decompressor()
    out = np.empty((10, 10, 3), np.uint8)
    assert kernel.decode_batch([one, kernel.Decompressor()], [(data, 2, 0, 10, 0, 10, out)] * 3) == [(0, 0, "")] * 3
    assert kernel.decode_batch([one], [(b"", 1, 0, 1, 0, 1, out), (data, 1, 0, 200, 0, 1, out)]) == [
        (1, 0, "empty file"),
        (2, 0, "box rows [0, 200) x columns [0, 1) is empty or outside the 150 x 203 image at scale 8/8"),
    ]
    with pytest.raises(ValueError, match="own Decompressor"):
        kernel.decode_batch([one, one], [])
    with pytest.raises(TypeError, match="jobs\\[0\\]"):
        kernel.decode_batch([one], [(data, 1)])
    with pytest.raises(ValueError, match="M/8"):
        kernel.decode_batch([one], [(data, 3, 0, 1, 0, 1, out)])
    assert kernel.decode_batch([one], [(data, (5, 8), 0, 10, 0, 10, out)]) == [(0, 0, "")]


def test_batch_equals_per_sample_at_every_native_scale():
    """Crops of a 375x500 photo (and its restart transcode) decoded at 1/8, 1/4, 1/2, 5/8 and 1: the batch call and
    the per-sample path give the same pixels at each."""
    from fastdata.decode.scaling import choose_scale

    photo = encode(natural_image(np.random.default_rng(21), 375, 500), "JPEG", quality=90)
    datas = [photo] * 40
    if shutil.which("jpegtran"):
        datas += [
            subprocess.run(["jpegtran", "-restart", "1B"], input=photo, capture_output=True, check=True).stdout
        ] * 40
    transform = RandomResizedCrop(40, scale=(0.01, 1.0), decoder="native")
    seeds = [SampleIndex(i, 3, i) for i in range(len(datas))]
    picked = {
        choose_scale(native.NATIVE_SCALES, *transform._params(375, 500, sample_generator(s))[2:], 40, 40) for s in seeds
    }
    assert picked == set(native.NATIVE_SCALES), picked  # every scale the kernel ships is exercised
    expected = _per_sample(transform, datas, seeds)
    out = np.zeros_like(expected)
    batch_decode.decode_batch_into(transform, datas, out, [sample_generator(s) for s in seeds])
    np.testing.assert_array_equal(out, expected)


def test_dataset_decode_threads(tmp_path):
    from fastdata.packing.packer import pack

    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    for i, data in enumerate(_records()[:4] + _records()[6:]):  # the last: a restart transcode (jpegtran)
        suffix = "png" if data.startswith(b"\x89PNG") else "jpg"
        (src / f"{i}.{suffix}").write_bytes(data)
    pack(tmp_path / "src", tmp_path / "pack", format="tfrecord", workers=0, progress=False)
    assert batch_decode.batch_capable(RandomResizedCrop(40))  # the default decoder is the native one
    indices = [SampleIndex(i, 0, i) for i in range(7)]
    before = sum(d.spliced for d in batch_decode._decompressors(3))
    batches = [
        ShardDataset(tmp_path / "pack", transform=RandomResizedCrop(40), decode_threads=t).__getitems__(indices)
        for t in (1, 3)
    ]
    assert sum(d.spliced for d in batch_decode._decompressors(3)) > before  # the restart record was spliced
    per_sample = np.stack([ShardDataset(tmp_path / "pack", transform=RandomResizedCrop(40))[i][0] for i in indices])
    for batch in batches:
        np.testing.assert_array_equal(batch.images.numpy(), per_sample)


def test_small_chunks_give_the_same_batch(monkeypatch):
    """A batch split into several kernel calls (the scratch bound) decodes the same pixels."""
    transform = RandomResizedCrop(64, decoder="native")
    datas = _records()[:5] + _records()[6:]
    seeds = [SampleIndex(i, 1, i) for i in range(len(datas))]
    expected = _per_sample(transform, datas, seeds)
    calls = []
    real = native._jpegcrop.decode_batch
    monkeypatch.setattr(batch_decode, "CHUNK_BYTES", 1)
    monkeypatch.setattr(native._jpegcrop, "decode_batch", lambda *a: calls.append(len(a[1])) or real(*a))
    out = np.empty_like(expected)
    batch_decode.decode_batch_into(transform, datas, out, [sample_generator(s) for s in seeds], threads=2)
    np.testing.assert_array_equal(out, expected)
    assert len(calls) > 1 and max(calls) == 1


def test_the_batch_call_shares_the_per_sample_decompressor(monkeypatch):
    """decode_threads == 1 takes the batch call too (faster: bench/kernel.py per-sample), on the per-sample path's own
    decompressor, so the two paths of one thread decode with the same object."""
    transform = RandomResizedCrop(48, decoder="native")
    datas = _records()[:5] + _records()[6:]
    seeds = [SampleIndex(i, 2, i) for i in range(len(datas))]
    expected = _per_sample(transform, datas, seeds)
    calls = []
    real = native._jpegcrop.decode_batch
    monkeypatch.setattr(native._jpegcrop, "decode_batch", lambda *a: calls.append(a[0]) or real(*a))
    for threads in (1, 2):
        calls.clear()
        out = np.zeros_like(expected)
        batch_decode.decode_all_into(transform, datas, out, [sample_generator(s) for s in seeds], threads=threads)
        np.testing.assert_array_equal(out, expected)
        assert len(calls) == 1 and len(calls[0]) == threads and calls[0][0] is native._decompressor()
    with pytest.raises(ValueError, match="threads"):
        batch_decode.decode_all_into(transform, datas, out, [None] * len(datas), threads=0)


def test_philox_uniforms_are_numpys_draws():
    """The kernel's batched draws equal numpy's Generator(Philox(key, counter=[0, 0, position, index])).random(d)."""
    rng = np.random.default_rng(5)
    keys = [0, 1, 2**64 - 1, 2**63] + [int(k) for k in rng.integers(0, 2**62, 60)]
    positions = [0, 2**63 - 1, 7, 2**40] + [int(k) for k in rng.integers(0, 2**40, 60)]
    indices = [2**63 - 1, 0, 3, 1] + [int(k) for k in rng.integers(0, 2**31, 60)]
    for draws in (40, 7, 1):
        out = np.empty((len(keys), draws))
        native._jpegcrop.philox_uniforms(
            np.array(keys, np.uint64), np.array(positions, np.uint64), np.array(indices, np.uint64), out
        )
        for k, p, i, row in zip(keys, positions, indices, out, strict=False):
            np.testing.assert_array_equal(
                row, np.random.Generator(np.random.Philox(key=k, counter=[0, 0, p, i])).random(draws)
            )
    with pytest.raises(ValueError, match="n uint64"):
        native._jpegcrop.philox_uniforms(
            np.zeros(2, np.uint64), np.zeros(3, np.uint64), np.zeros(2, np.uint64), np.empty(4)
        )


def test_seeded_batch_draws_its_crops_in_one_call(monkeypatch):
    """sample_generators(indices): the batch call draws every seeded crop in one native call, makes no Generator for
    the JPEGs, and gives the per-sample path's pixels (a PNG still gets its own generator, in order)."""
    transform = RandomResizedCrop(48, decoder="native")
    datas = _records()[:5] + _records()[6:]  # a PNG among them, no damaged file
    seeds = [SampleIndex(i, 2**63 + 11, 1000 + i) for i in range(len(datas))]
    expected = _per_sample(transform, datas, seeds)
    calls, made = [], []
    real_uniforms, real_generator = native._jpegcrop.philox_uniforms, batch_decode.sample_generator
    monkeypatch.setattr(native._jpegcrop, "philox_uniforms", lambda *a: calls.append(len(a[0])) or real_uniforms(*a))
    monkeypatch.setattr(batch_decode, "sample_generator", lambda i: made.append(int(i)) or real_generator(i))
    out = np.zeros_like(expected)
    batch_decode.decode_batch_into(transform, datas, out, batch_decode.sample_generators(seeds))
    np.testing.assert_array_equal(out, expected)
    assert calls == [len(datas)] and made == [4]  # the PNG (record 4) draws from its own generator
    plain = batch_decode.sample_generators(list(range(len(datas))))  # plain ints: torch's RNG, as per sample
    assert plain.uniforms(40) is None and plain[0] is None


@pytest.mark.parametrize("mode", ["antialias", "fast"])
def test_job_is_choose_scale_and_scaled_box(mode):
    """The batch call's inline plan is exactly what decode_crop_into computes (choose_scale + scaled_box)."""
    import random

    from fastdata.decode.scaling import choose_scale, headroom, scaled_box, scaled_size

    rng = random.Random(4)
    for _ in range(3000):
        height, width = rng.randint(1, 3000), rng.randint(1, 3000)
        box_h, box_w = rng.randint(1, height), rng.randint(1, width)
        box = (rng.randint(0, height - box_h), rng.randint(0, width - box_w), box_h, box_w)
        out_h, out_w = rng.choice([(224, 224), (96, 96), (40, 64), (1, 1), (500, 300)])
        room = headroom(mode)
        scale = choose_scale(native.NATIVE_SCALES, box_h, box_w, out_h * room, out_w * room)
        region = scaled_box(box, scale, scaled_size(height, width, scale))
        job = batch_decode._job(b"", box, (height, width), out_h, out_w, mode)
        assert job[1] == scale and tuple(job[2:6]) == region, (height, width, box, out_h, out_w)
        rows, cols = region[1] - region[0], region[3] - region[2]
        direct = (rows, cols) == (out_h, out_w) and (mode == "fast" or (box_h, box_w) == (out_h, out_w))
        assert job[7] == (0 if direct else rows * cols * 3)
