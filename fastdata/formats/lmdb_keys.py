"""The keys of a fastdata LMDB shard, and which record each one is.

Sample ``j`` is stored under :func:`sample_key` ``(j)`` (``f"{j:08d}"``), its fields (a serialized
``tf.train.Example``) under ``sample_key(j) + FIELDS_SUFFIX``, and the shard's ``__meta__`` record under
:data:`META_KEY`. :func:`classify` maps the keys a walk of the shard's tree found to (kind, number), all at once
for the writer's 8-digit keys, so that locating a shard's values costs no Python call per record.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FIELDS", "FIELDS_SUFFIX", "META", "META_KEY", "RECORD", "classify", "sample_key"]

META_KEY = b"__meta__"
FIELDS_SUFFIX = b".fields"  # sample j's fields (a serialized tf.train.Example) are under sample_key(j) + this
RECORD, FIELDS, META = 0, 1, 2  # the kinds of key a shard holds (lmdb_pages locates each kind's values by number)
_MAX_DIGITS = 18  # a key number that fits an int64


def sample_key(j: int) -> bytes:
    """The key of sample ``j`` within its shard."""
    return f"{j:08d}".encode()


def classify(keys: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """The kind and number of each of a shard's keys.

    ``sample_key(j)`` → (RECORD, j), its fields' key → (FIELDS, j),
    ``__meta__`` → (META, 0); any other key, or a number not spelled as the writer spells it, → (-1, 0).

    The writer's keys below 10**8 (8 digits, with FIELDS_SUFFIX for fields) are read all at once; others one by one.
    """
    kinds, numbers = np.full(len(keys), -1, np.int8), np.zeros(len(keys), np.int64)
    lengths = np.fromiter(map(len, keys), np.int64, len(keys))
    rest = np.ones(len(keys), bool)
    for kind, size in ((RECORD, 8), (FIELDS, 8 + len(FIELDS_SUFFIX))):
        at = np.flatnonzero(lengths == size)
        if not len(at):
            continue
        raw = np.frombuffer(b"".join([keys[i] for i in at]), np.uint8).reshape(-1, size)
        digits = raw[:, :8] - np.uint8(48)  # a byte below "0" wraps around above 9
        ok = (digits < 10).all(axis=1)
        if kind == FIELDS:
            ok &= (raw[:, 8:] == np.frombuffer(FIELDS_SUFFIX, np.uint8)).all(axis=1)
        kinds[at[ok]] = kind
        numbers[at[ok]] = digits[ok].astype(np.int64) @ 10 ** np.arange(7, -1, -1, dtype=np.int64)
        rest[at[ok]] = False
    for i in np.flatnonzero(rest).tolist():  # __meta__, numbers of 9 digits and more, foreign keys
        kinds[i], numbers[i] = _classify_one(keys[i])
    return kinds, numbers


def _classify_one(key: bytes) -> tuple[int, int]:
    digits, kind = key, RECORD
    if key.endswith(FIELDS_SUFFIX):
        digits, kind = key[: -len(FIELDS_SUFFIX)], FIELDS
    if digits.isdigit() and len(digits) <= _MAX_DIGITS:
        number = int(digits)
        return (kind, number) if digits == b"%08d" % number else (-1, 0)
    return (META, 0) if key == META_KEY else (-1, 0)
