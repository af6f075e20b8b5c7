"""MixedDataset + MixedSampler: exact per-source counts per pass, world-independent order, exact (elastic) resume."""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter

import numpy as np
import pytest

from fastdata import MixedDataset, MixedSampler
from fastdata.loader.dataloader import DataLoaderX
from fastdata.sampler import adapt_loader_state

LENGTHS = [10, 7, 23]


def sources():
    return [[(k, i) for i in range(n)] for k, n in enumerate(LENGTHS)]


def mixed(**kwargs):
    a, b, c = sources()
    return MixedDataset([(a, 0.5), (b, 0.3), (c, 0.2)], samples_per_pass=48, **kwargs)


def source_of(ds, index):
    return ds[index][0]


def test_proportions_exact_every_pass():
    ds = mixed()
    assert ds.pass_counts == [24, 14, 10] and ds.samples_per_pass == 48  # 48 * (0.5, 0.3, 0.2) = 24, 14.4, 9.6
    sampler = MixedSampler(ds, num_replicas=1, rank=0, seed=3, ratio=4)
    order = list(sampler)
    assert len(order) == 4 * 48
    for p in range(4):
        counts = Counter(source_of(ds, i) for i in order[p * 48 : (p + 1) * 48])
        assert [counts[k] for k in range(3)] == ds.pass_counts
    # a source smaller than its share is read through whole permutations: source 0 (10 samples, 24 per
    # pass) gives every sample 2 or 3 times per pass and, over 5 passes (120 = 12 rounds), exactly 12 times each
    sampler.set_epoch(1)
    long = order + list(sampler)[:48]
    per_sample = Counter(ds[i] for i in long if source_of(ds, i) == 0)
    assert set(per_sample.values()) == {12} and len(per_sample) == 10


def test_repeat_mode_reads_a_half_source_without_repeats_across_passes():
    a, b, c = sources()
    ds = MixedDataset([(a, 2.0), (b, 0.5), c], mode="repeat")
    assert ds.pass_counts == [20, 3, 23]  # int(0.5 * 7) = 3, as MosaicML Streaming
    sampler = MixedSampler(ds, num_replicas=1, rank=0, seed=0, ratio=2)
    order = list(sampler)
    n = ds.samples_per_pass
    first, second = ([ds[i] for i in order[p * n : (p + 1) * n] if source_of(ds, i) == 1] for p in range(2))
    assert len(first) == len(second) == 3
    assert len(set(first) | set(second)) == 6  # 6 draws of one permutation of 7: none twice before all are read
    assert Counter(ds[i] for p in range(2) for i in order[p * n : (p + 1) * n] if source_of(ds, i) == 2) == Counter(
        {(2, i): 2 for i in range(23)}
    )


def _source_reads(ds, sampler, source, passes):
    """Per pass, a Counter of the indices (into the source) the pass reads from ``source``."""
    lo = ds.source_offsets[source]
    reads = []
    for v in range(passes):
        order = sampler.pass_order(v)
        reads.append(Counter(int(i) - lo for i in order if lo <= i < ds.source_offsets[source + 1]))
    return reads


# (source length, samples per pass): up- and down-weighted, just above and below once, several times, tiny
COVERAGE_CASES = [
    (1000, 1400),
    (1000, 2600),
    (1000, 1001),
    (1000, 999),
    (1000, 700),
    (1000, 300),
    (1000, 2000),
    (7, 3),
    (7, 11),
    (10, 24),
]


@pytest.mark.parametrize("length,count", COVERAGE_CASES)
def test_every_pass_reads_each_sample_floor_or_ceil_times(length, count):
    # MosaicML Streaming's per-epoch counts: count // length whole repeats plus a remainder without replacement, so
    # a source read less than once per pass repeats nothing in the pass and one read at least once reads everything
    ds = MixedDataset([(list(range(length)), count / length), (list(range(5)), 1.0)], mode="repeat")
    assert ds.pass_counts == [count, 5]
    sampler = MixedSampler(ds, num_replicas=1, rank=0, seed=11)
    passes = 3 * length // math.gcd(length, count) if length < 50 else 12
    for v, reads in enumerate(_source_reads(ds, sampler, 0, passes)):
        assert sum(reads.values()) == count
        times = [reads.get(i, 0) for i in range(length)]
        assert set(times) <= {count // length, count // length + 1}, (v, Counter(times))


@pytest.mark.parametrize("length,count", COVERAGE_CASES)
def test_the_stream_is_whole_permutations_across_passes(length, count):
    # no sample is read twice before every sample has been read once in its cycle, and each pass reads its
    # stretch of that stream
    ds = MixedDataset([(list(range(length)), count / length), (list(range(3)), 1.0)], mode="repeat")
    sampler = MixedSampler(ds, num_replicas=1, rank=0, seed=4)
    passes = 12
    stream = sampler.source_stream(0, 0, passes * count)
    for cycle in range(len(stream) // length):
        assert sorted(stream[cycle * length : (cycle + 1) * length].tolist()) == list(range(length))
    for v, reads in enumerate(_source_reads(ds, sampler, 0, passes)):
        assert reads == Counter(stream[v * count : (v + 1) * count].tolist())


def test_a_fresh_sampler_computes_the_same_cycles_as_one_that_ran_through():
    # a cycle's order depends on the one before it: a sampler that starts at pass 40 (a resume) gives what one
    # that read passes 0..40 in turn gives, whatever it kept
    ds = MixedDataset([(list(range(100)), 0.37), (list(range(60)), 1.9), (list(range(9)), 1.0)], mode="repeat")
    running = MixedSampler(ds, num_replicas=1, rank=0, seed=8)
    sequential = [running.pass_order(v) for v in range(41)]
    for v in (40, 17, 3, 40):
        assert (MixedSampler(ds, num_replicas=1, rank=0, seed=8).pass_order(v) == sequential[v]).all()
        assert (running.pass_order(v) == sequential[v]).all()  # and backwards, from what it kept


@pytest.mark.parametrize("length,count", COVERAGE_CASES + [(1000, 400), (1000, 501), (1000, 650), (997, 3100)])
def test_cycles_are_the_definition_computed_from_the_first(length, count):
    # the definition, cycle after cycle from the first: a cycle that ends inside a pass begun inside an earlier
    # cycle starts with what that pass has not read; the sampler's shortcuts (the cycles it keeps, tails that
    # cannot have moved) give the same stream, from any starting pass
    from fastdata.sampler.mixture import _lead_with_unread

    ds = MixedDataset([(list(range(length)), count / length), (list(range(3)), 1.0)], mode="repeat")
    sampler = MixedSampler(ds, num_replicas=1, rank=0, seed=2)
    cycles = []
    for k in range(40 * count // length + 2):
        perm = sampler._permutation(0, k)
        begin = k * length
        start = begin // count * count
        if start != begin and start % length and start + count < begin + length:
            perm = _lead_with_unread(perm, cycles[start // length][start % length :], start + count - begin)
        cycles.append(perm)
    stream = np.concatenate(cycles)
    for v in (39, 0, 17, 18, 5):
        fresh = MixedSampler(ds, num_replicas=1, rank=0, seed=2)
        assert (fresh.source_stream(0, v * count, (v + 1) * count) == stream[v * count : (v + 1) * count]).all()
    assert (sampler.source_stream(0, 0, 40 * count) == stream[: 40 * count]).all()


def test_storage_order_without_shuffle_reads_on_in_order():
    ds = MixedDataset([(list(range(10)), 0.7), (list(range(4)), 2.5)], mode="repeat")
    sampler = MixedSampler(ds, num_replicas=1, rank=0, shuffle=False)
    assert sampler.source_stream(0, 0, 35).tolist() == [i % 10 for i in range(35)]
    assert sampler.source_stream(1, 0, 30).tolist() == [i % 4 for i in range(30)]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_order_does_not_depend_on_the_world_size(world):
    ds = mixed()
    whole = list(MixedSampler(ds, num_replicas=1, rank=0, seed=5))
    ranks = [list(MixedSampler(ds, num_replicas=world, rank=r, seed=5)) for r in range(world)]
    interleaved = [ranks[r][j] for j in range(len(ranks[0])) for r in range(world)]
    assert interleaved[:48] == whole  # 48 divides by 2, 3 and 4: no padding


def test_resume_same_world_gives_exactly_the_rest():
    ds = mixed()
    sampler = MixedSampler(ds, num_replicas=1, rank=0, seed=9, ratio=2)
    sampler.set_epoch(3)
    state = sampler.state_dict()
    full = list(sampler)
    state["start_index"] += 37
    state = json.loads(json.dumps(state))
    again = MixedSampler(ds, num_replicas=1, rank=0, seed=9, ratio=2)
    again.load_state_dict(state)
    again.set_epoch(3)
    assert list(again) == full[37:]


@pytest.mark.parametrize("old_world,new_world", [(4, 3), (3, 2), (2, 4)])
def test_resume_on_another_world_size(old_world, new_world):
    ds = mixed()
    consumed = 12  # global positions per rank taken: old_world * 12 is a multiple of every new world here
    old = [MixedSampler(ds, num_replicas=old_world, rank=r, seed=1) for r in range(old_world)]
    took = []
    for s in old:
        state = s.state_dict()
        took.append(list(itertools.islice(iter(s), consumed // old_world)))
    state["start_index"] += len(took[0])
    rest = []
    for r in range(new_world):
        s = MixedSampler(ds, num_replicas=new_world, rank=r, seed=1)
        s.load_state_dict(s.adapt_state(json.loads(json.dumps(state))))
        rest.append(list(s))
    whole = list(MixedSampler(ds, num_replicas=1, rank=0, seed=1))
    done = Counter(i for part in took for i in part)
    left = Counter(i for part in rest for i in part)
    assert done + left == Counter(whole)  # every remaining sample of the pass exactly once
    interleaved = [rest[r][j] for j in range(len(rest[0])) for r in range(new_world)]
    assert interleaved == whole[len(took[0]) * old_world :]  # in the uninterrupted order


def test_loader_resume_on_another_world_size():
    ds = mixed()

    def loader(world, rank):
        sampler = MixedSampler(ds, num_replicas=world, rank=rank, seed=2)
        return DataLoaderX(ds, batch_size=12 // world, sampler=sampler, collate_fn=list, pin_memory=False)

    old = [loader(4, r) for r in range(4)]
    took, state = [], None
    for ld in old:
        it = iter(ld)
        took += [x for _ in range(2) for x in next(it)]
        state = ld.state_dict()
        it.close()
    rest = []
    for r in range(3):
        ld = loader(3, r)
        ld.load_state_dict(adapt_loader_state(state, ld))
        rest += [x for batch in ld for x in batch]
    whole = [ds[i] for i in MixedSampler(ds, num_replicas=1, rank=0, seed=2)]
    assert Counter(took) + Counter(rest) == Counter(whole)
    assert len(took) == 24 and len(rest) == 24


def test_mixture_is_checked_on_load():
    ds = mixed()
    state = MixedSampler(ds, num_replicas=1, rank=0).state_dict()
    a, b, c = sources()
    other = MixedSampler(MixedDataset([(a, 0.4), (b, 0.4), (c, 0.2)], samples_per_pass=48), num_replicas=1, rank=0)
    with pytest.raises(ValueError, match="mixture"):
        other.load_state_dict(state)


def test_bad_sources():
    with pytest.raises(ValueError, match="at least one"):
        MixedDataset([])
    with pytest.raises(ValueError, match="empty"):
        MixedDataset([([], 1.0)])
    with pytest.raises(ValueError, match="weight"):
        MixedDataset([([1], 0.0)])
    with pytest.raises(TypeError, match="MixedDataset"):
        MixedSampler(list(range(5)))


@pytest.fixture(scope="module")
def two_packs(tmp_path_factory):
    from tests.packs import make_distinct_folder, pack_quietly

    roots = []
    for seed in (1, 2):
        src = tmp_path_factory.mktemp(f"mix_src{seed}")
        make_distinct_folder(src, per_class=4, seed=seed)
        out = tmp_path_factory.mktemp(f"mix_pack{seed}")
        pack_quietly(src, out, "lmdb")
        roots.append(out)
    return roots


def test_batch_decoded_in_place_equals_per_sample(two_packs):
    import numpy as np

    from fastdata import ShardDataset
    from fastdata.decode.batch import DecodedBatch
    from fastdata.sampler.seeding import SampleIndex
    from fastdata.transforms import RandomResizedCrop

    ds = MixedDataset(
        [(ShardDataset(r, transform=RandomResizedCrop(16)), w) for r, w in zip(two_packs, (1.0, 3.0), strict=False)]
    )
    order = list(MixedSampler(ds, num_replicas=1, rank=0, seed=4))
    indices = [SampleIndex(i, pass_key=77, position=p) for p, i in enumerate(order[:10])]
    batch = ds.__getitems__(indices)
    assert isinstance(batch, DecodedBatch) and tuple(batch.images.shape) == (10, 16, 16, 3)
    for (image, label), index in zip(batch, indices, strict=False):
        expected, expected_label = ds[index]
        assert label == expected_label and np.array_equal(image, expected)


def test_mixed_batches_follow_the_loader_resolution(two_packs):
    from fastdata import ShardDataset, fast_collate
    from fastdata.transforms import RandomResizedCrop

    ds = MixedDataset([(ShardDataset(r, transform=RandomResizedCrop(16)), 1.0) for r in two_packs])
    loader = DataLoaderX(
        ds,
        batch_size=4,
        sampler=MixedSampler(ds, num_replicas=1, rank=0, seed=1),
        collate_fn=fast_collate,
        pin_memory=False,
    )
    loader.set_resolution((24, 20))
    images, labels = next(iter(loader))
    assert tuple(images.shape) == (4, 3, 24, 20) and labels.shape == (4,)


@pytest.mark.parametrize(
    ("length", "weight", "count"),
    [(7, 0.5, 3), (5, 0.5, 2), (9, 1.5, 13), (100, 0.29, 29), (3, 0.1, 0), (10, 2.0, 20), (1000, 0.0015, 1)],
)
def test_repeat_counts_are_streamings_rounded_down(length, weight, count):
    """``mode="repeat"`` reads ``int(weight * length)`` samples of a source per pass, as MosaicML Streaming's
    ``repeat`` (it rounded to nearest before: 7 x 0.5 read 4); a float product just below a whole number is it."""
    ds = MixedDataset([(list(range(length)), weight), (list(range(4)), 1.0)], mode="repeat")
    assert list(ds.pass_counts) == [count, 4]
    assert ds.samples_per_pass == count + 4
    order = list(MixedSampler(ds, num_replicas=1, rank=0, seed=0))
    assert sum(1 for i in order if i < length) == count and len(order) == count + 4
