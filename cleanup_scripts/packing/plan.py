"""Sequence packing: which sequences share a row, planned from the length histogram alone.

`pack_plan` turns a histogram of sequence lengths into a list of pack *strategies* (a tuple
of lengths that fit one row together) with how many rows use each. It is best-fit
decreasing on the histogram, the idea of Krell et al.'s shortest-pack-first histogram packing
(SPFHP): lengths are taken from the longest down, and all sequences of one length are placed
at once, each group into the open packs with the least room left that still fits them, so
the work is linear in the histogram's size and the number of distinct open packs, not in the
number of sequences. A pack closes when it holds `max_sequences` sequences or has no room.

`assign_sequences` realises a plan for concrete sequences: the sequences of each length fill
that length's slots in input order, so the same lengths give the same rows (`pack_lengths`
does both). `PackStats` counts what packing saves.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Strategy = tuple[int, ...]


def length_histogram(lengths: np.ndarray, max_seq_length: int) -> np.ndarray:
    """counts[L] = number of sequences of length L, for L in 0..max_seq_length."""
    return np.bincount(np.asarray(lengths, dtype=np.int64), minlength=max_seq_length + 1)


def pack_plan(histogram: np.ndarray, max_seq_length: int,
              max_sequences: int) -> list[tuple[Strategy, int]]:
    """The packs for sequences of the length histogram `histogram` (index: length in tokens).

    Returns (strategy, rows) pairs: `rows` rows each holding sequences of the lengths in
    `strategy` (longest first), every sequence counted once, each row's lengths summing to at
    most `max_seq_length`. Deterministic: the same histogram gives the same plan.
    """
    histogram = np.asarray(histogram, dtype=np.int64)
    if histogram.size > max_seq_length + 1 and histogram[max_seq_length + 1:].any():
        raise ValueError(f"sequences longer than {max_seq_length} tokens cannot be packed")
    # open_packs[room] = {strategy: rows}; only packs that can still take a sequence.
    open_packs: list[dict[Strategy, int]] = [{} for _ in range(max_seq_length + 1)]
    closed: dict[Strategy, int] = {}

    def place(strategy: Strategy, rows: int) -> None:
        if not rows:
            return
        room = max_seq_length - sum(strategy)
        target = closed if room == 0 or len(strategy) == max_sequences else open_packs[room]
        target[strategy] = target.get(strategy, 0) + rows

    for length in range(min(max_seq_length, histogram.size - 1), 0, -1):
        remaining = int(histogram[length])
        while remaining:
            room = length  # best fit: the least room that takes this length
            while room <= max_seq_length and not open_packs[room]:
                room += 1
            if room > max_seq_length:
                # No open pack fits: new ones, each filled with this length as far as it goes
                # (what placing the sequences one at a time would do).
                per_pack = min(max_sequences, max_seq_length // length)
                place((length,) * per_pack, remaining // per_pack)
                if remaining % per_pack:
                    place((length,) * (remaining % per_pack), 1)
                break
            strategy, rows = next(iter(open_packs[room].items()))
            taken = min(rows, remaining)
            if taken == rows:
                del open_packs[room][strategy]
            else:
                open_packs[room][strategy] = rows - taken
            place(strategy + (length,), taken)
            remaining -= taken
    for packs in open_packs:
        for strategy, rows in packs.items():
            closed[strategy] = closed.get(strategy, 0) + rows
    return sorted(closed.items(), key=lambda item: (-len(item[0]), item[0]))


@dataclass(frozen=True)
class Rows:
    """Concrete packed rows: `sequence[i]` (an input index) goes to row `row[i]` as its
    `slot[i]`-th sequence; `count` rows in all."""

    row: np.ndarray
    slot: np.ndarray
    sequence: np.ndarray
    count: int


def assign_sequences(lengths: np.ndarray, plan: list[tuple[Strategy, int]]) -> Rows:
    """Rows realising `plan` for sequences of `lengths` (input order).

    The plan's rows come in plan order; the slots of one length, in row and slot order, take
    that length's sequences in input order. ValueError if the plan's lengths are not exactly
    those of `lengths`.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    slot_lengths, slot_rows, slot_index = [], [], []
    first_row = 0
    for strategy, rows in plan:
        width = len(strategy)
        slot_lengths.append(np.tile(np.asarray(strategy, dtype=np.int64), rows))
        slot_rows.append(np.repeat(np.arange(first_row, first_row + rows), width))
        slot_index.append(np.tile(np.arange(width), rows))
        first_row += rows
    if not plan:
        empty = np.zeros(0, dtype=np.int64)
        return Rows(empty, empty, empty, 0)
    slot_length = np.concatenate(slot_lengths)
    row, slot = np.concatenate(slot_rows), np.concatenate(slot_index)
    if slot_length.size != lengths.size or not np.array_equal(
            np.sort(slot_length), np.sort(lengths)):
        raise ValueError("the plan does not hold exactly the given sequences")
    by_length = np.argsort(lengths, kind="stable")
    slots_by_length = np.lexsort((slot, row, slot_length))
    sequence = np.empty(lengths.size, dtype=np.int64)
    sequence[slots_by_length] = by_length
    return Rows(row, slot, sequence, first_row)


def pack_lengths(lengths: np.ndarray, max_seq_length: int, max_sequences: int) -> Rows:
    """The rows of sequences of `lengths` (input order): `pack_plan` of their histogram,
    realised by `assign_sequences`."""
    plan = pack_plan(length_histogram(lengths, max_seq_length), max_seq_length, max_sequences)
    return assign_sequences(lengths, plan)


def most_per_row(rows: Rows, per_sequence: np.ndarray) -> int:
    """The largest sum of `per_sequence` (a count per input sequence) over any row."""
    sums = np.bincount(rows.row, weights=np.asarray(per_sequence)[rows.sequence],
                       minlength=rows.count)
    return int(sums.max(initial=0))


@dataclass
class PackStats:
    """What packing did: sequences in, rows out, and their tokens and padding."""

    sequences: int = 0
    rows: int = 0
    tokens: int = 0  # real tokens
    max_seq_length: int = 0

    def add(self, other: "PackStats") -> None:
        """Add another file's counts (same max_seq_length)."""
        self.sequences += other.sequences
        self.rows += other.rows
        self.tokens += other.tokens
        self.max_seq_length = max(self.max_seq_length, other.max_seq_length)

    @property
    def padding_before(self) -> float:
        """Fraction of padding tokens when every sequence has a row of its own."""
        total = self.sequences * self.max_seq_length
        return 1.0 - self.tokens / total if total else 0.0

    @property
    def padding_after(self) -> float:
        """Fraction of padding tokens in the packed rows."""
        total = self.rows * self.max_seq_length
        return 1.0 - self.tokens / total if total else 0.0

    @property
    def speedup(self) -> float:
        """Rows before over rows after: the expected speed-up of a trainer whose step time is
        set by rows of max_seq_length tokens."""
        return self.sequences / self.rows if self.rows else 1.0

    def line(self) -> str:
        """The one-line summary."""
        return (f"{self.sequences:,} sequences -> {self.rows:,} rows "
                f"({self.sequences / max(self.rows, 1):.3f} sequences per row), padding "
                f"{100 * self.padding_before:.1f}% -> {100 * self.padding_after:.1f}%, "
                f"expected speed-up {self.speedup:.3f}x")
