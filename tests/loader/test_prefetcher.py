"""DataPrefetcher: CPU pass-through, dtype/layout, apex-style next(), one CUDA side stream."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from fastdata.gpu_transforms import Compose, Mixup, Normalize, RandomHorizontalFlip
from fastdata.loader.collate import fast_collate
from fastdata.loader.dataloader import DataLoaderX
from fastdata.loader.prefetcher import DataPrefetcher

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class Images(Dataset):
    """Deterministic uint8 HWC RGB images with int labels."""

    def __init__(self, n: int = 10) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        rng = np.random.default_rng(i)
        return rng.integers(0, 256, (6, 5, 3), dtype=np.uint8), i % 3


def _loader(n: int = 10, **kwargs) -> DataLoaderX:
    return DataLoaderX(Images(n), batch_size=4, collate_fn=fast_collate, **kwargs)


def test_default_is_to_float_in_unit_range():
    loader = _loader()
    got = list(DataPrefetcher(loader, device="cpu"))
    want = list(loader)
    assert len(got) == len(want) == 3
    for (images, labels), (raw, raw_labels) in zip(got, want, strict=False):
        assert images.dtype == torch.float32 and images.shape == raw.shape
        assert torch.allclose(images, raw.float() / 255)
        assert labels.dtype == torch.int64 and torch.equal(labels, raw_labels)


def test_cpu_pass_through_equals_applying_the_transform():
    transform = Compose([Normalize(MEAN, STD)])
    loader = _loader()
    got = list(DataPrefetcher(loader, device="cpu", transform=transform))
    for (images, labels), (raw, raw_labels) in zip(got, loader, strict=False):
        want_images, want_labels = transform(raw, raw_labels)
        assert torch.equal(images, want_images) and torch.equal(labels, want_labels)


def test_len_matches_the_loader():
    for n in (1, 8, 9):
        loader = _loader(n)
        assert len(DataPrefetcher(loader, device="cpu")) == len(loader) == len(list(DataPrefetcher(loader, "cpu")))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("channels_last", [False, True])
def test_dtype_and_channels_last(dtype, channels_last):
    prefetcher = DataPrefetcher(
        _loader(), device="cpu", transform=Normalize(MEAN, STD), channels_last=channels_last, dtype=dtype
    )
    for images, labels in prefetcher:
        assert images.dtype == dtype and labels.dtype == torch.int64
        assert images.shape[1] == 3
        assert images.is_contiguous(memory_format=torch.channels_last) == channels_last


def test_integer_output_of_a_transform_is_scaled():
    flip = RandomHorizontalFlip(p=1.0)  # keeps uint8
    loader = _loader()
    for (images, _), (raw, _raw_labels) in zip(DataPrefetcher(loader, "cpu", transform=flip), loader, strict=False):
        assert torch.allclose(images, raw.flip(-1).float() / 255)


def test_soft_labels_from_the_transform_are_handed_out():
    mixup = Mixup(alpha=0.4, num_classes=3, generator=torch.Generator().manual_seed(0))
    for images, labels in DataPrefetcher(_loader(), "cpu", transform=mixup):
        assert labels.shape == (images.shape[0], 3) and labels.is_floating_point()
        assert torch.allclose(labels.sum(1), torch.ones(images.shape[0]))


def test_apex_style_next_and_epochs():
    loader = _loader()
    prefetcher = DataPrefetcher(loader, device="cpu")
    for _ in range(2):  # the call after (None, None) starts the next epoch
        seen = []
        images, labels = prefetcher.next()
        while images is not None:
            seen.append(labels.tolist())
            images, labels = prefetcher.next()
        assert labels is None
        assert seen == [b[1].tolist() for b in loader]


def test_iterating_again_starts_a_new_pass():
    prefetcher = DataPrefetcher(_loader(), device="cpu")
    first = next(iter(prefetcher))
    again = [b[1].tolist() for b in prefetcher]
    assert again[0] == first[1].tolist() and len(again) == 3


def test_loader_iterator_is_closed_when_exhausted_or_closed():
    threads = threading.active_count()
    prefetcher = DataPrefetcher(_loader(40), device="cpu")
    next(iter(prefetcher))
    assert threading.active_count() > threads  # DataLoaderX's prefetch thread is running
    prefetcher.close()
    assert threading.active_count() == threads
    assert next(prefetcher, None) is None
    list(prefetcher)
    assert threading.active_count() == threads


def test_state_dict_counts_only_batches_handed_out():
    want = [b[1].tolist() for b in _loader(18)]
    prefetcher = DataPrefetcher(_loader(18), device="cpu")
    it = iter(prefetcher)
    got = [next(it)[1].tolist() for _ in range(2)]  # a third batch is already read ahead
    state = prefetcher.state_dict()
    assert state["batches_consumed"] == 2 and prefetcher.loader.state_dict()["batches_consumed"] == 3
    resumed = DataPrefetcher(_loader(18), device="cpu")
    resumed.load_state_dict(state)
    assert got + [b[1].tolist() for b in resumed] == want
    assert [b[1].tolist() for b in resumed] == want  # then full passes again
    with pytest.raises(TypeError, match="state_dict"):
        DataPrefetcher([(torch.zeros(1, 3, 2, 2), torch.zeros(1))], "cpu").state_dict()


def _seeded_pipeline(seed: int = 7):
    """A shuffled loader and a transform with seeded generators: a flip, and Mixup sharing nothing with it."""
    loader = _loader(30, shuffle=True, generator=torch.Generator().manual_seed(1))
    transform = Compose(
        [
            RandomHorizontalFlip(generator=torch.Generator().manual_seed(seed)),
            Normalize(MEAN, STD),
            Mixup(alpha=0.4, num_classes=3, generator=torch.Generator().manual_seed(seed + 1)),
        ]
    )
    return DataPrefetcher(loader, device="cpu", transform=transform)


def test_resume_restores_the_transforms_generators():
    want = [(x.clone(), y.clone()) for x, y in _seeded_pipeline()]
    first = _seeded_pipeline()
    it = iter(first)
    for _ in range(3):  # a fourth batch is already read ahead and transformed
        next(it)
    state = first.state_dict()
    resumed = _seeded_pipeline()
    resumed.load_state_dict(torch.load(_saved(state), weights_only=True))
    rest = list(resumed)
    assert len(rest) == len(want) - 3
    for (x, y), (wx, wy) in zip(rest, want[3:], strict=False):  # pixels flipped and mixed as in the uninterrupted run
        assert torch.equal(x, wx) and torch.equal(y, wy)
    assert sorted(state["transform_generators"]) == ["transforms.0.generator", "transforms.2.generator"]


def _saved(state: dict):
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


def test_generator_walk_finds_nested_and_shared_generators_once():
    from fastdata.gpu_transforms import MixupCutmix, RandAugment, RandomErasing
    from fastdata.loader.transform_rng import transform_generators

    shared = torch.Generator().manual_seed(0)
    transform = Compose(
        [
            RandAugment(generator=shared),
            RandomErasing(0.25, generator=torch.Generator()),
            MixupCutmix(num_classes=3, generator=shared),
            Normalize(MEAN, STD),
        ]
    )
    found = transform_generators(transform)
    assert list(found) == ["transforms.0.generator", "transforms.1.generator"]
    assert found["transforms.0.generator"] is shared and transform_generators(Normalize(MEAN, STD)) == {}


def test_state_of_another_transform_is_rejected():
    state = _seeded_pipeline().state_dict()
    other = DataPrefetcher(
        _loader(30, shuffle=True, generator=torch.Generator().manual_seed(1)),
        device="cpu",
        transform=RandomHorizontalFlip(generator=torch.Generator()),
    )
    with pytest.raises(ValueError, match="transform generators"):
        other.load_state_dict(state)


def test_plain_dataloader_works_too():
    loader = DataLoader(Images(), batch_size=5, collate_fn=fast_collate)
    assert [b[1].tolist() for b in DataPrefetcher(loader, "cpu")] == [b[1].tolist() for b in loader]


def test_argument_errors():
    with pytest.raises(TypeError, match="dtype"):
        DataPrefetcher(_loader(), "cpu", dtype=torch.int32)
    with pytest.raises(TypeError, match="transform"):
        DataPrefetcher(_loader(), "cpu", transform="flip")
    with pytest.raises(TypeError, match="fast_collate"):
        list(DataPrefetcher([torch.zeros(2, 3, 4, 4)], "cpu"))  # a batch that is not (images, labels)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            DataPrefetcher(_loader(), "cuda")
        assert DataPrefetcher(_loader()).device == torch.device("cpu")


# --------------------------------------------------------------------------- CUDA


@pytest.mark.cuda
def test_cuda_matches_cpu_and_reuses_one_stream(monkeypatch):
    made = []

    class CountingStream(torch.cuda.Stream):
        def __new__(cls, *args, **kwargs):
            stream = super().__new__(cls, *args, **kwargs)
            if "stream_id" not in kwargs:  # current_stream() wraps existing streams through this name too
                made.append(stream)
            return stream

    monkeypatch.setattr(torch.cuda, "Stream", CountingStream)
    transform = Compose([Normalize(MEAN, STD)])
    loader = _loader(pin_memory=True)
    prefetcher = DataPrefetcher(loader, "cuda", transform=transform)
    stream = prefetcher.stream
    cpu = list(DataPrefetcher(loader, "cpu", transform=transform))
    for _ in range(3):
        got = list(prefetcher)
        assert prefetcher.stream is stream
        assert len(got) == len(cpu)
        for (images, labels), (want_images, want_labels) in zip(got, cpu, strict=False):
            assert images.is_cuda and labels.is_cuda and labels.dtype == torch.int64
            torch.testing.assert_close(images.cpu(), want_images)
            assert torch.equal(labels.cpu(), want_labels)
    assert len(made) == 1 and made[0] is stream  # one side stream for the prefetcher's whole life


@pytest.mark.cuda
def test_cuda_records_every_handed_out_tensor_on_the_current_stream(monkeypatch):
    recorded = []
    real_record = torch.Tensor.record_stream

    def spy(self, stream):
        recorded.append((self.data_ptr(), stream))
        return real_record(self, stream)

    monkeypatch.setattr(torch.Tensor, "record_stream", spy)
    prefetcher = DataPrefetcher(_loader(pin_memory=False), "cuda", channels_last=True, dtype=torch.float16)
    current = torch.cuda.current_stream()
    for images, labels in prefetcher:
        assert images.is_contiguous(memory_format=torch.channels_last) and images.dtype == torch.float16
        assert (images.data_ptr(), current) in recorded and (labels.data_ptr(), current) in recorded
    torch.cuda.synchronize()


@pytest.mark.cuda
def test_cuda_batches_from_worker_processes_arrive_pinned_and_whole():
    """DataLoaderX's workers hand over pinned batches (the precondition of a non_blocking copy that overlaps), and the
    prefetcher's copies of them on its side stream equal the CPU batches."""
    loader = _loader(12, num_workers=2, pin_memory=True)
    batches = list(loader)
    assert all(images.is_pinned() and labels.is_pinned() for images, labels in batches)
    got = list(DataPrefetcher(loader, "cuda", dtype=torch.float32))
    torch.cuda.synchronize()
    assert [labels.cpu().tolist() for _, labels in got] == [labels.tolist() for _, labels in batches]
    for (images, _), (raw, _) in zip(got, batches, strict=True):
        torch.testing.assert_close(images.cpu(), raw.float() / 255)


SPIN_CYCLES = 1_000_000_000  # torch.cuda._sleep: about half a second of GPU time at 2 GHz


def _pinned_batches(count: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Distinct pinned uint8 batches, as DataLoaderX's pin_memory hands them over."""
    gen = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randint(0, 256, (8, 3, 64, 64), dtype=torch.uint8, generator=gen).pin_memory(),
            torch.arange(8).pin_memory(),
        )
        for _ in range(count)
    ]


@pytest.mark.cuda
def test_cuda_copy_of_the_next_batch_overlaps_the_training_step():
    """While the current stream still runs the step on batch i, batch i + 1 is copied (and converted) on the side
    stream: the side stream never waits for the training step."""
    batches = _pinned_batches(3)
    prefetcher = DataPrefetcher(batches, "cuda")
    list(prefetcher)  # warm-up: the caching allocator holds the blocks, so no cudaMalloc below
    it = iter(prefetcher)  # batch 0 is copied
    torch.cuda.synchronize()
    torch.cuda._sleep(SPIN_CYCLES)  # the training step, on the current stream
    images, _ = next(it)  # hands out batch 0 and queues batch 1's copy on the side stream
    prefetcher.stream.synchronize()
    step_still_running = not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    assert step_still_running, "batch 1's copy on the side stream waited for the step on the current stream"
    torch.testing.assert_close(images.cpu(), batches[0][0].float() / 255)


@pytest.mark.cuda
def test_cuda_step_waits_for_a_slow_transform_on_the_side_stream():
    """A batch's copy and transform are queued, not done, when it is handed out: the current stream waits for the
    side stream, so the step reads the transformed batch, never memory the side stream is still writing."""

    def slow(images, labels):
        torch.cuda._sleep(SPIN_CYCLES // 10)  # the transform's kernels, still running when the batch is handed out
        return images.float().div_(255), labels

    batches = _pinned_batches(4, seed=1)
    got = [(images.cpu(), labels.cpu()) for images, labels in DataPrefetcher(batches, "cuda", transform=slow)]
    assert len(got) == len(batches)
    for (images, labels), (raw, raw_labels) in zip(got, batches, strict=True):
        torch.testing.assert_close(images, raw.float() / 255)
        assert torch.equal(labels, raw_labels)


def test_iter_of_the_pass_iterator_continues_the_pass():
    loader = [(torch.full((2, 3, 4, 4), k, dtype=torch.uint8), torch.tensor([k, k])) for k in range(4)]
    prefetcher = DataPrefetcher(loader, device="cpu")
    it = iter(prefetcher)
    first = next(it)
    rest = [labels[0].item() for _, labels in it]  # iter(it) must not restart the pass
    assert first[1][0].item() == 0 and rest == [1, 2, 3]
    assert [labels[0].item() for _, labels in prefetcher] == [0, 1, 2, 3]  # a new pass starts from the top
