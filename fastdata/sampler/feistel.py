"""A keyed bijection of ``[0, n)`` computed one value at a time: the heart of ``shuffle="index"``.

:func:`permute` maps positions to values of a pseudo-random permutation of ``[0, n)`` without ever
materializing it, in O(1) memory per value and vectorised over numpy arrays. It is a Feistel network
over the smallest power-of-two domain ``2**b >= n`` (``b >= 2``), with *cycle walking* to stay inside
``[0, n)``: a value that lands at or past ``n`` is put through the network again until it falls inside.
Because the network is a bijection of the whole domain, the values inside ``[0, n)`` are visited in the
order of that bijection's cycles, so the walked map is itself a bijection of ``[0, n)``; as
``2**b < 2 * n`` (for ``n > 2``), a value needs fewer than two rounds of walking on average.

The ``b`` bits are split into halves of ``b // 2`` and ``b - b // 2`` bits, and the halves swap widths
every round as in NIST's FF1 (so an odd ``b`` is no harder than an even one). Each round xors one half
with a keyed hash of the other, the 64-bit SplitMix64 finaliser of ``half * golden ^ round_key``;
:data:`ROUNDS` rounds, each with its own 64-bit key. Keys come from :func:`round_keys`, a
``numpy.random.SeedSequence`` of the words that name the permutation (seed, order, virtual pass, ...).
This is the construction of Grain's ``index_shuffle`` (itself TensorFlow's random index shuffle), written
here with numpy: it is not a cipher, only a well-mixed permutation.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ROUNDS", "domain_bits", "mix", "permute", "round_keys"]

#: Feistel rounds: four make a pseudo-random permutation of a random round function (Luby-Rackoff); two more
#: cover the round function being a fixed hash.
ROUNDS = 6
_MASK64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_ONE = np.uint64(1)
# the powers of two, for an exact bit length of uint64 arrays
_POWERS = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))


def round_keys(*words: int) -> np.ndarray:
    """:data:`ROUNDS` uint64 round keys named by ``words`` (ints, any sign; taken modulo 2**64)."""
    return np.random.SeedSequence([int(w) & _MASK64 for w in words]).generate_state(ROUNDS, np.uint64)


def domain_bits(n: np.ndarray | int) -> np.ndarray | int:
    """Bits ``b`` of the Feistel domain ``[0, 2**b)`` for ``n`` values: the smallest ``b >= 2`` with ``2**b >= n``."""
    if isinstance(n, (int, np.integer)):
        return max(2, (int(n) - 1).bit_length())
    counts = np.asarray(n, dtype=np.uint64)
    below = np.where(counts > 0, counts - _ONE, 0).astype(np.uint64)
    return np.maximum(np.searchsorted(_POWERS, below, side="right"), 2).astype(np.uint64)


def mix(h: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser over uint64 values (wrapping arithmetic): every input bit moves every output bit."""
    h = (h ^ (h >> np.uint64(30))) * _MIX1
    h = (h ^ (h >> np.uint64(27))) * _MIX2
    return h ^ (h >> np.uint64(31))


def _network(x: np.ndarray, bits: np.ndarray | np.uint64, keys: np.ndarray) -> np.ndarray:
    """One pass of ``x`` (uint64, in ``[0, 2**bits)``) through the Feistel network keyed by ``keys``.

    ``bits`` is one width or one per value; ``keys`` is ``(ROUNDS,)`` or ``(ROUNDS, len(x))``.
    """
    narrow = bits >> _ONE
    wide = bits - narrow
    for i in range(ROUNDS):
        low, high = (wide, narrow) if i % 2 == 0 else (narrow, wide)
        right = x & ((_ONE << low) - _ONE)
        hashed = mix((right * _GOLDEN) ^ keys[i])
        x = (right << high) | (((x >> low) ^ hashed) & ((_ONE << high) - _ONE))
    return x


def permute(
    positions: np.ndarray, n: np.ndarray | int, keys: np.ndarray, bits: np.ndarray | int | None = None
) -> np.ndarray:
    """The values at ``positions`` of the keyed permutation of ``[0, n)`` (see the module docstring).

    Args:
        positions: integer array of positions, each in ``[0, n)``.
        n: the permutation's size, one for all positions or one per position (each its own permutation).
        keys: round keys from :func:`round_keys`, ``(ROUNDS,)``, or ``(ROUNDS, len(positions))`` (one
            permutation per position).
        bits: :func:`domain_bits` of ``n`` when the caller has it already.

    Returns:
        An int64 array of the same shape as ``positions``: distinct positions of one permutation give
        distinct values in ``[0, n)``.
    """
    x = np.asarray(positions).astype(np.uint64)
    scalar = isinstance(n, (int, np.integer))
    if bits is None:
        bits = domain_bits(n)
    bits = np.uint64(bits) if scalar else np.asarray(bits, dtype=np.uint64)
    size = np.uint64(n) if scalar else np.asarray(n, dtype=np.uint64)
    keys = np.asarray(keys, dtype=np.uint64)
    x = _network(x, bits, keys)
    todo = np.flatnonzero(x >= size)
    while todo.size:  # cycle walking: each value's cycle returns to [0, n) within a few steps
        if scalar:
            x[todo] = _network(x[todo], bits, keys)
            todo = todo[x[todo] >= size]
        else:
            sub_keys = keys[:, todo] if keys.ndim == 2 else keys
            x[todo] = _network(x[todo], bits[todo], sub_keys)
            todo = todo[x[todo] >= size[todo]]
    return x.astype(np.int64)
