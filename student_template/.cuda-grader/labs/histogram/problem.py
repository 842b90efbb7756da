"""Inputs and the exact oracle for histogram (xp is numpy in the grader, cupy in the worker).

params: n (bytes) and text, one of
  random      uniform bytes 0..255 (bytes >= 128 catch kernels that read them as signed char)
  english     English-like: lowercase letters at English frequencies, spaces, punctuation,
              digits, newlines and some uppercase (no '^', '_', '`' or '{'..'~')
  one_letter  every byte 'e': all threads hit one bin (maximum contention)
  below_a     every byte '`' (96), just below 'a': counted by a kernel that checks the letter
              range only from above
  no_letters  tabs, newlines and every printable ASCII byte except 'a'..'z' (uppercase included)
  uppercase   mostly uppercase letters, some lowercase ones and spaces
"""

import numpy as np

NUM_BINS = 7

# English letter frequencies in percent, 'a'..'z'
_FREQ = [8.167, 1.492, 2.782, 4.253, 12.702, 2.228, 2.015, 6.094, 6.966, 0.153, 0.772, 4.025, 2.406,
         6.749, 7.507, 1.929, 0.095, 5.987, 6.327, 9.056, 2.758, 0.978, 2.360, 0.150, 1.974, 0.074]
_LOWER = [97 + i for i in range(26)]
_UPPER = [65 + i for i in range(26)]
_PUNCT = [ord(ch) for ch in ".,;:'\"!?-()0123456789\n"]


#: Bytes of a mixed text are drawn as ``table[draw]``, draw uniform in 0 .. 2**16 - 1: each byte
#: value fills its share of the table, to within one entry (1 in 65,536). For the 16 MB of English
#: of the largest correctness case this takes 0.05 s, where a binary search per byte took 0.9 s.
_TABLE_BITS = 16


def _table(groups):
    """The byte table of a mixture of (weight, bytes, per-byte weights)."""
    values, probs = [], []
    for weight, chars, within in groups:
        within = np.asarray(within if within is not None else [1.0] * len(chars), dtype=np.float64)
        values += chars
        probs += list(weight * within / within.sum())
    size = 1 << _TABLE_BITS
    ends = np.rint(np.cumsum(probs) / np.sum(probs) * size).astype(np.int64)
    ends[-1] = size  # every entry holds a byte
    return np.repeat(np.asarray(values, dtype=np.uint8), np.diff(ends, prepend=0))


_TABLES = {
    "english": _table([(0.78, _LOWER, _FREQ), (0.16, [32], None), (0.02, _UPPER, _FREQ), (0.04, _PUNCT, None)]),
    "uppercase": _table([(0.85, _UPPER, _FREQ), (0.10, _LOWER, _FREQ), (0.05, [32], None)]),
    "no_letters": _table([(1.0, [9, 10] + list(range(32, 97)) + list(range(123, 127)), None)]),
}


_FILL = {"one_letter": ord("e"), "below_a": ord("`")}


def generate(params, seed, xp):
    n, kind = int(params["n"]), str(params.get("text", "random"))
    rs = xp.random.RandomState(seed)
    if kind == "random":
        text = rs.randint(0, 256, size=n, dtype=xp.uint8)
    elif kind in _FILL:
        text = xp.full(n, _FILL[kind], dtype=xp.uint8)
    elif kind in _TABLES:
        text = xp.asarray(_TABLES[kind])[rs.randint(0, 1 << _TABLE_BITS, size=n, dtype=xp.uint16)]
    else:
        raise ValueError(f"unknown text kind {kind!r} (known: random, {', '.join([*_FILL, *_TABLES])})")
    return {"text": text}


def expected(inputs, params, chunk=1 << 20):
    """Counts of every byte value, a chunk at a time (no 64-bit copy of a 64 MB text), then the
    letters a-z in bins of four."""
    text = np.asarray(inputs["text"], dtype=np.uint8).ravel()
    counts = np.zeros(256, dtype=np.int64)
    for start in range(0, len(text), chunk):
        counts += np.bincount(text[start : start + chunk], minlength=256)
    letters = counts[ord("a") : ord("z") + 1]
    return {"bins": np.add.reduceat(letters, np.arange(NUM_BINS) * 4).astype(np.uint32)}
