"""fast_collate: uint8 NCHW batches with one copy, shared memory in workers, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from fastdata.loader.collate import fast_collate


def _images(n: int, h: int = 5, w: int = 7, c: int = 3, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (h, w, c), dtype=np.uint8) for _ in range(n)]


def _naive(images: list[np.ndarray]) -> torch.Tensor:
    return torch.from_numpy(np.stack(images)).permute(0, 3, 1, 2).contiguous()


def test_matches_naive_stack():
    images = _images(6)
    out, labels = fast_collate([(img, i) for i, img in enumerate(images)])
    assert out.dtype == torch.uint8 and labels.dtype == torch.int64
    assert out.shape == (6, 3, 5, 7) and out.is_contiguous()
    assert torch.equal(out, _naive(images))
    assert labels.tolist() == list(range(6))


def test_tensor_images_and_label_kinds():
    images = _images(3, seed=1)
    batch = [(torch.from_numpy(images[0]), 4), (images[1], np.int64(7)), (torch.from_numpy(images[2]), torch.tensor(9))]
    out, labels = fast_collate(batch)
    assert torch.equal(out, _naive(images))
    assert labels.tolist() == [4, 7, 9] and labels.dtype == torch.int64


def test_grayscale_becomes_one_channel():
    gray = [img[..., 0] for img in _images(2, seed=2)]
    out, _ = fast_collate([(g, 0) for g in gray])
    assert out.shape == (2, 1, 5, 7)
    assert torch.equal(out[:, 0], torch.from_numpy(np.stack(gray)))


def test_odd_layouts_are_read_correctly():
    base = _images(3, h=6, w=8, seed=3)
    flipped = base[0][:, ::-1]  # negative strides
    readonly = base[1].copy()
    readonly.flags.writeable = False
    strided = np.ascontiguousarray(np.concatenate([base[2], base[2]], axis=1))[:, ::2]  # non-contiguous view
    out, _ = fast_collate([(flipped, 0), (readonly, 1), (strided, 2)])
    assert torch.equal(out, _naive([flipped, readonly, strided]))


def test_output_does_not_alias_inputs():
    images = _images(2)
    out, _ = fast_collate([(img, 0) for img in images])
    images[0][:] = 0
    assert out[0].sum() > 0


def test_shape_mismatch_names_the_fix():
    a, b = _images(1, h=5, w=7)[0], _images(1, h=6, w=7)[0]
    with pytest.raises(ValueError, match="crop/resize") as info:
        fast_collate([(a, 0), (b, 1)])
    assert "(5, 7, 3)" in str(info.value) and "(6, 7, 3)" in str(info.value)
    assert "ResizeCenterCrop" in str(info.value)  # the transform's own name, one a user can import


def test_mixed_gray_and_rgb_is_a_shape_error():
    rgb = _images(1)[0]
    with pytest.raises(ValueError, match="grayscale"):
        fast_collate([(rgb, 0), (rgb[..., 0], 1)])


@pytest.mark.parametrize("bad", [np.zeros((5, 7, 3), np.float32), torch.zeros(5, 7, 3), np.zeros((5, 7, 3), np.int64)])
def test_non_uint8_is_rejected(bad):
    with pytest.raises(ValueError, match="uint8"):
        fast_collate([(bad, 0)])


def test_other_errors():
    with pytest.raises(ValueError, match="no samples"):
        fast_collate([])
    with pytest.raises(ValueError, match="pairs"):
        fast_collate([_images(1)[0]])
    with pytest.raises(ValueError, match="HWC"):
        fast_collate([(np.zeros((1, 2, 3, 4), np.uint8), 0)])
    with pytest.raises(TypeError, match="numpy array or tensor"):
        fast_collate([([[1, 2]], 0)])
    with pytest.raises(TypeError, match="integer labels"):
        fast_collate([(_images(1)[0], 1.5)])
    with pytest.raises(TypeError, match="bool"):
        fast_collate([(_images(1)[0], True)])


def test_main_process_batch_is_not_shared():
    out, labels = fast_collate([(img, 0) for img in _images(2)])
    assert not out.untyped_storage().is_shared()


class _Images(Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        return np.full((4, 6, 3), i, np.uint8), i


def _collate_and_report(batch):
    """Runs in the worker: report whether fast_collate allocated in shared memory there."""
    images, labels = fast_collate(batch)
    shared = images.untyped_storage().is_shared() and labels.untyped_storage().is_shared()
    return images, labels, torch.tensor(shared)


def test_worker_batch_is_allocated_in_shared_memory():
    loader = DataLoader(_Images(), batch_size=4, num_workers=1, collate_fn=_collate_and_report)
    batches = list(loader)
    assert len(batches) == 2
    for k, (images, labels, shared_in_worker) in enumerate(batches):
        assert bool(shared_in_worker)
        assert images.shape == (4, 3, 4, 6)
        assert labels.tolist() == list(range(4 * k, 4 * k + 4))
        assert torch.equal(images[:, :, 0, 0], labels.to(torch.uint8)[:, None].expand(4, 3))


# -- NormalizeCollate: the CPU float path ------------------------------------------------------------
import fastdata.loader.collate as collate_module  # noqa: E402
from fastdata.gpu_transforms import Normalize  # noqa: E402
from fastdata.loader.collate import NormalizeCollate  # noqa: E402

_MEAN, _STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _uint8_batch(n=5, h=7, w=9, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), i) for i in range(n)]


@pytest.fixture(params=[True, False], ids=["fused-C", "torch-fallback"])
def float_path(request, monkeypatch):
    """Run a test on the fused C pass and on the torch fallback."""
    if request.param and collate_module._floatbatch is None:
        pytest.skip("the native float kernel is not built")
    if not request.param:
        monkeypatch.setattr(collate_module, "_floatbatch", None)
    return request.param


def test_normalize_collate_equals_gpu_normalize(float_path):
    batch = _uint8_batch()
    images, labels = NormalizeCollate(_MEAN, _STD)(batch)
    expected, _ = Normalize(_MEAN, _STD)(*fast_collate(batch))
    assert images.dtype == torch.float32 and images.shape == (5, 3, 7, 9) and labels.tolist() == [0, 1, 2, 3, 4]
    torch.testing.assert_close(images, expected, rtol=0, atol=1e-5)


def test_normalize_collate_flips_when_asked(float_path):
    batch = _uint8_batch()
    plain, _ = NormalizeCollate(_MEAN, _STD)(batch)
    flipped, _ = NormalizeCollate(_MEAN, _STD, hflip_p=1.0)(batch)
    torch.testing.assert_close(flipped, plain.flip(3), rtol=0, atol=0)
    torch.manual_seed(0)
    some, _ = NormalizeCollate(_MEAN, _STD, hflip_p=0.5)(_uint8_batch(n=64))
    plain64, _ = NormalizeCollate(_MEAN, _STD)(_uint8_batch(n=64))
    flipped_rows = [not torch.equal(some[i], plain64[i]) for i in range(64)]
    assert 10 < sum(flipped_rows) < 54  # about half, each image either flipped or untouched
    for i, was_flipped in enumerate(flipped_rows):
        assert torch.equal(some[i], plain64[i].flip(2) if was_flipped else plain64[i])


def test_normalize_collate_rejects_bad_arguments():
    with pytest.raises(ValueError, match="std"):
        NormalizeCollate(_MEAN, (0.2, 0.0, 0.2))
    with pytest.raises(ValueError, match="hflip_p"):
        NormalizeCollate(hflip_p=1.5)
    with pytest.raises(ValueError, match="RGB"):
        NormalizeCollate()([(np.zeros((4, 4), np.uint8), 0)])
