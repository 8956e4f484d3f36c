"""The pretraining TFRecords: their feature spec, and reading and writing them without TensorFlow.

Each record is a serialized `tf.train.Example` with seven fixed-length features:

    input_ids, input_mask, segment_ids       int64   [max_seq_length]
    masked_lm_positions, masked_lm_ids       int64   [max_predictions_per_seq]
    masked_lm_weights                        float32 [max_predictions_per_seq]
    next_sentence_labels                     int64   [1]

A *packed* record (`cleanup_scripts.pack_pretraining_data`) holds up to K sequences in one row
of S tokens, and P masked-LM predictions in all (P: the most any row of the data set needs):

    input_ids, segment_ids                   int64   [S]  the sequences one after another
    sequence_ids                             int64   [S]  1..k for the row's k sequences, 0 padding
    position_ids                             int64   [S]  0, 1, ... restarting at each sequence
    masked_lm_positions, masked_lm_ids       int64   [P]  positions in the row; padding 0
    masked_lm_weights                        float32 [P]  1 real, 0 padding
    next_sentence_positions                  int64   [K]  where each sequence's [CLS] is
    next_sentence_labels                     int64   [K]  each sequence's label; padding 0
    next_sentence_weights                    float32 [K]  1 for each of the k sequences, 0 padding

A row's predictions come sequence by sequence, and its sequences' slots are the first k.
`RecordLayout` names which of the two a file holds and its sizes (`record_layout` reads it off
a decoded record), and `packed_row_problem` checks a packed row's structure.

`feature_spec` / `packed_feature_spec` are the one description of the two layouts;
`tf_feature_spec` turns one into the `tf.io.FixedLenFeature` dict a TensorFlow input pipeline
parses with. The writers here encode the same protos (features in the order above, packed
values) with numpy, the readers decode them with the protobuf library (`decode_example`), and
both handle the TFRecord framing (length, masked CRC-32C of the length, data, masked CRC-32C of
the data), so the data tools need neither TensorFlow nor its start-up time.

This module is the one home of the TFRecord contract for every layer: `framed_records` (the
framing reader over any binary handle, `FramingError` naming the record and the problem),
`read_records` / `count_records` (local files, `InputError`), and the feature-schema check
(`spec_problem`, `feature_problem`, `parse_pretraining_example`, `LENGTH_FLAGS`).
"""
from __future__ import annotations

import math
import os
import struct
from collections import OrderedDict
from dataclasses import dataclass
from typing import BinaryIO, Iterator, Mapping, Sequence

import google_crc32c
import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf import message as protobuf_message

from benchmark.errors import one_line
from benchmark.files import InputError

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")


@dataclass(frozen=True)
class FeatureSpec:
    """One fixed-length feature: its dtype ("int64" or "float32") and shape."""

    dtype: str
    shape: tuple[int, ...]

    @property
    def length(self) -> int:
        """Number of values in one record."""
        return math.prod(self.shape)


def feature_spec(max_seq_length: int,
                 max_predictions_per_seq: int) -> "OrderedDict[str, FeatureSpec]":
    """The features of a pretraining record, in the order they are written."""
    seq, pred = (max_seq_length,), (max_predictions_per_seq,)
    return OrderedDict([
        ("input_ids", FeatureSpec("int64", seq)),
        ("input_mask", FeatureSpec("int64", seq)),
        ("segment_ids", FeatureSpec("int64", seq)),
        ("masked_lm_positions", FeatureSpec("int64", pred)),
        ("masked_lm_ids", FeatureSpec("int64", pred)),
        ("masked_lm_weights", FeatureSpec("float32", pred)),
        ("next_sentence_labels", FeatureSpec("int64", (1,))),
    ])


PACKED_FEATURE_NAMES = ("input_ids", "segment_ids", "sequence_ids", "position_ids",
                        "masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
                        "next_sentence_positions", "next_sentence_labels",
                        "next_sentence_weights")


def packed_feature_spec(max_seq_length: int, max_predictions_per_row: int,
                        max_sequences_per_pack: int) -> "OrderedDict[str, FeatureSpec]":
    """The features of a packed record (module docstring), in the order they are written:
    rows of `max_seq_length` tokens, `max_predictions_per_row` masked-LM slots and
    `max_sequences_per_pack` sequence slots."""
    seq, pred, packs = (max_seq_length,), (max_predictions_per_row,), (max_sequences_per_pack,)
    kinds = {"masked_lm_weights": "float32", "next_sentence_weights": "float32"}
    shapes = {"masked_lm_positions": pred, "masked_lm_ids": pred, "masked_lm_weights": pred,
              "next_sentence_positions": packs, "next_sentence_labels": packs,
              "next_sentence_weights": packs}
    return OrderedDict((name, FeatureSpec(kinds.get(name, "int64"), shapes.get(name, seq)))
                       for name in PACKED_FEATURE_NAMES)


@dataclass(frozen=True)
class RecordLayout:
    """What the records of a file hold: unpacked (one sequence a record) or packed, with the
    tokens per record, the masked-LM slots per record and the sequence slots per record (1
    unpacked)."""

    packed: bool
    max_seq_length: int
    max_predictions: int
    max_sequences: int = 1

    @classmethod
    def unpacked(cls, max_seq_length: int, max_predictions_per_seq: int) -> "RecordLayout":
        """The layout create_pretraining_data writes with these flags."""
        return cls(False, max_seq_length, max_predictions_per_seq)

    def spec(self) -> "OrderedDict[str, FeatureSpec]":
        """The feature spec of a record of this layout."""
        if self.packed:
            return packed_feature_spec(self.max_seq_length, self.max_predictions,
                                       self.max_sequences)
        return feature_spec(self.max_seq_length, self.max_predictions)

    def describe(self) -> str:
        """E.g. "packed rows of 512 tokens, 79 predictions, up to 3 sequences"."""
        if self.packed:
            return (f"packed rows of {self.max_seq_length} tokens, {self.max_predictions} "
                    f"predictions, up to {self.max_sequences} sequences")
        return (f"unpacked records of {self.max_seq_length} tokens, {self.max_predictions} "
                "predictions")


def record_layout(decoded: Mapping[str, tuple[str, object]]) -> RecordLayout:
    """The layout of a record from `decode_example`, read off its features' lengths (packed
    when it has `sequence_ids`); DecodeError when it lacks the features that set them."""
    packed = "sequence_ids" in decoded
    sizes = []
    for name in ("input_ids", "masked_lm_positions") + (
            ("next_sentence_labels",) if packed else ()):
        kind, values = decoded.get(name, ("none", None))
        if kind != "int64":
            raise DecodeError(f"feature {name} is missing" if kind == "none" else
                              f"feature {name} holds {kind} values, expected int64")
        sizes.append(len(values))
    return RecordLayout(packed, *sizes)


def packed_row_problem(row: Mapping[str, np.ndarray]) -> str | None:
    """Why the features of one packed row do not form a packed row (None: they do).

    The row's sequence ids must be 1, 1, ..., 2, ..., k and then only 0 (padding), each
    sequence's position ids must count from 0, its [CLS] must be at next_sentence_positions,
    only the first k sequence slots may have weight, and each real prediction must point
    into a sequence, in the sequences' order.
    """
    ids = np.asarray(row["sequence_ids"])
    positions = np.asarray(row["position_ids"])
    steps = np.diff(ids)
    count = int(ids.max(initial=0))
    if ids.size == 0 or ids[0] != 1:
        return "sequence_ids must start with sequence 1"
    if ((steps != 0) & (steps != 1) & ((steps != -count) | (ids[1:] != 0))).any() or \
            ((ids[:-1] == 0) & (ids[1:] != 0)).any():
        return "sequence_ids are not contiguous (1..k in order, then 0 for padding)"
    starts = np.flatnonzero(np.diff(np.concatenate(([0], ids))) != 0)
    starts = starts[ids[starts] != 0]
    expected = np.arange(ids.size) - np.repeat(starts, np.diff(np.append(starts, ids.size)))
    real = ids != 0
    if (positions[real] != expected[real]).any():
        return "position_ids do not restart at 0 with each sequence"
    weights = np.asarray(row["next_sentence_weights"])
    slots = np.asarray(row["next_sentence_positions"])
    if weights.size < count or (weights[:count] != 1).any() or (weights[count:] != 0).any():
        return (f"next_sentence_weights must be 1 for the row's {count} sequences and 0 "
                "after them")
    if (slots[:count] != starts).any():
        return "next_sentence_positions do not point at each sequence's first token"
    masked = np.asarray(row["masked_lm_positions"])[np.asarray(row["masked_lm_weights"]) != 0]
    if ((masked < 0) | (masked >= ids.size)).any() or (ids[masked % ids.size] == 0).any():
        return "a masked position lies outside the row's sequences"
    if (np.diff(ids[masked]) < 0).any():
        return "masked positions are not in the order of their sequences"
    return None


def tf_feature_spec(layout: RecordLayout) -> dict:
    """The spec of `layout` as `{name: tf.io.FixedLenFeature}` for `tf.io.parse_example`."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    dtypes = {"int64": tf.int64, "float32": tf.float32}
    return {name: tf.io.FixedLenFeature(list(spec.shape), dtypes[spec.dtype])
            for name, spec in layout.spec().items()}


def tf_parse_errors() -> tuple[type[Exception], ...]:
    """What `tf.io.parse_example` (eager, in a tf.function or a tf.data stream) raises for a
    record that does not parse: InvalidArgumentError, or the UnicodeDecodeError that replaces
    it when its message quotes the record's bytes and they are not UTF-8 (random bytes)."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf.errors.InvalidArgumentError, UnicodeDecodeError


# ---- protobuf encoding --------------------------------------------------------------------------

def _varint(value: int) -> bytes:
    """Protobuf base-128 varint of a non-negative int."""
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint_rows(values: np.ndarray) -> tuple[bytes, np.ndarray]:
    """Packed varints of each row of a 2-D int array: (all rows' bytes, byte count per row).

    Negative values are written as their 64-bit two's complement (10 bytes), as protobuf does.
    """
    values = np.asarray(values)
    if values.size == 0:
        return b"", np.zeros(values.shape[0], dtype=np.int64)
    if values.min() >= 0 and values.max() < 0x80:  # one byte each: the values themselves
        return (np.ascontiguousarray(values, dtype=np.uint8).tobytes(),
                np.full(values.shape[0], values.shape[1]))
    values = np.ascontiguousarray(values, dtype=np.int64)
    flat = values.view(np.uint64).ravel()
    nbytes = np.ones(flat.shape, dtype=np.uint8)
    for shift in range(7, 64, 7):
        above = flat >= np.uint64(1 << shift)
        if not above.any():
            break
        nbytes += above.view(np.uint8)
    width = int(nbytes.max())
    small = flat.astype(np.uint32) if width <= 4 else flat
    out = np.empty((flat.size, width), dtype=np.uint8)
    for index in range(width):
        byte = (small >> small.dtype.type(7 * index)) & small.dtype.type(0x7F)
        out[:, index] = byte.astype(np.uint8) | ((nbytes > index + 1).view(np.uint8) << 7)
    keep = np.flatnonzero((np.arange(width, dtype=np.uint8) < nbytes[:, None]).ravel())
    sizes = nbytes.reshape(values.shape).sum(axis=1, dtype=np.int64)
    return out.ravel().take(keep).tobytes(), sizes


_KIND_TAGS = {"float32": b"\x12", "int64": b"\x1a"}
_HEADERS: dict[tuple[str, str, int], bytes] = {}


def _header(name: str, kind: str, size: int) -> bytes:
    """Bytes of a map entry for feature `name` up to its packed payload of `size` bytes."""
    key = (name, kind, size)
    header = _HEADERS.get(key)
    if header is None:
        values = b"\x0a" + _varint(size) if size else b""
        feature = _KIND_TAGS[kind] + _varint(len(values) + size) + values
        encoded_name = name.encode()
        entry = (b"\x0a" + _varint(len(encoded_name)) + encoded_name
                 + b"\x12" + _varint(len(feature) + size) + feature)
        header = _HEADERS[key] = b"\x0a" + _varint(len(entry) + size) + entry
    return header


def smallest_record_bytes(spec: Mapping[str, FeatureSpec]) -> int:
    """Bytes of the smallest framed TFRecord of an Example with `spec`'s features: every int64
    value 0 (one byte each), float32 values four bytes each. Computed, not encoded: no
    allocation grows with the lengths."""
    body = 0
    for name, item in spec.items():
        payload = item.length * (4 if item.dtype == "float32" else 1)
        body += len(_header(name, item.dtype, payload)) + payload
    return HEADER_BYTES + 1 + len(_varint(body)) + body + FOOTER_BYTES


def encode_examples(columns: Mapping[str, np.ndarray]) -> list[bytes]:
    """Serialized `tf.train.Example`s, one per row of the 2-D arrays in `columns`.

    Float arrays become float_list features (float32), integer arrays int64_list features;
    features are written in the mapping's order, each as one packed list.
    """
    rows = None
    encoded = []
    for name, values in columns.items():
        values = np.asarray(values)
        if values.ndim != 2:
            raise ValueError(f"{name}: expected a 2-D array, got shape {values.shape}")
        rows = values.shape[0] if rows is None else rows
        if values.shape[0] != rows:
            raise ValueError(f"{name}: {values.shape[0]} rows, expected {rows}")
        if values.dtype.kind == "f":
            data = np.ascontiguousarray(values, dtype="<f4").tobytes()
            sizes = np.full(rows, 4 * values.shape[1], dtype=np.int64)
            kind = "float32"
        else:
            data, sizes = varint_rows(values)
            kind = "int64"
        ends = np.cumsum(sizes)
        encoded.append((name, kind, data, (ends - sizes).tolist(), ends.tolist()))
    out = []
    for row in range(rows or 0):
        pieces = []
        for name, kind, data, starts, ends in encoded:
            start, end = starts[row], ends[row]
            pieces.append(_header(name, kind, end - start))
            pieces.append(data[start:end])
        body = b"".join(pieces)
        out.append(b"\x0a" + _varint(len(body)) + body)
    return out


# ---- pretraining records from fragments ---------------------------------------------------------

# Varints of PackedVarints hold at most 4 bytes: values below 2**28.
MAX_PACKED_VARINT = 1 << 28


class PackedVarints:
    """Varint bytes of the ints 0 .. count - 1 (count <= 2**28), for encoding arrays of them.

    Each varint sits in a little-endian uint32 (`words`), its used bytes flagged 1 in `used`.
    """

    def __init__(self, count: int):
        if not 0 < count <= MAX_PACKED_VARINT:
            raise ValueError(f"PackedVarints({count}): between 1 and {MAX_PACKED_VARINT}")
        values = np.arange(count, dtype=np.uint32)
        self.words = np.zeros(count, dtype="<u4")
        self.used = np.zeros(count, dtype="<u4")
        for index in range(4):
            present = (values >> np.uint32(7 * index)) > 0
            present[values == 0] = index == 0
            more = (values >> np.uint32(7 * (index + 1))) > 0
            byte = ((values >> np.uint32(7 * index)) & np.uint32(0x7F)) | (more << 7)
            self.words |= np.where(present, byte, 0).astype("<u4") << np.uint32(8 * index)
            self.used |= present.astype("<u4") << np.uint32(8 * index)
        self.longest = int(((self.used.view(np.uint8).reshape(-1, 4)).sum(axis=1)).max())

    def encode(self, values: np.ndarray, counts: np.ndarray) -> tuple[bytes, list[int]]:
        """The varints of `values`, one after another, and the byte size of each run of
        `counts[i]` values (the runs follow one another)."""
        kept = np.flatnonzero(self.used.take(values).view(np.bool_))
        data = self.words.take(values).view(np.uint8).take(kept).tobytes()
        bounds = np.searchsorted(kept, 4 * np.concatenate(([0], np.cumsum(counts))))
        return data, np.diff(bounds).tolist()


class PretrainingEncoder:
    """Framed TFRecords of pretraining Examples, assembled from precomputed byte fragments.

    The bytes are those of `frame_record(encode_examples(columns))` for the same features: the
    seven of `feature_spec` in order, each one packed list, varints minimal. Only three parts
    vary freely (the varints of input_ids, masked_lm_positions and masked_lm_ids); input_mask,
    segment_ids, masked_lm_weights and next_sentence_labels depend on a few lengths and are
    sliced or looked up from fixed fragments; the feature headers depend on payload sizes and
    are precomputed.
    """

    def __init__(self, max_seq_length: int, max_predictions_per_seq: int, id_count: int):
        seq, pred = max_seq_length, max_predictions_per_seq
        self.seq, self.pred = seq, pred
        self.ids = PackedVarints(id_count)
        self.positions = PackedVarints(seq)
        # Feature headers by payload size (padding zeros included).
        self._id_headers = [_header("input_ids", "int64", size)
                            for size in range(seq * self.ids.longest + 1)]
        self._position_headers = [_header("masked_lm_positions", "int64", size)
                                  for size in range(pred * self.positions.longest + 1)]
        self._label_headers = [_header("masked_lm_ids", "int64", size)
                               for size in range(pred * self.ids.longest + 1)]
        self._zeros = bytes(max(seq, pred))
        self._ones = b"\x01" * seq
        # By token count: the whole input_mask feature, then the head of segment_ids.
        segment_header = _header("segment_ids", "int64", seq)
        self._mask_then_segment = [_header("input_mask", "int64", seq) + self._ones[:count]
                                   + self._zeros[:seq - count] + segment_header
                                   for count in range(seq + 1)]
        self._weights = [_header("masked_lm_weights", "float32", 4 * pred)
                         + (np.arange(pred) < count).astype("<f4").tobytes()
                         for count in range(pred + 1)]
        self._next_sentence = [_header("next_sentence_labels", "int64", 1) + bytes([label])
                               for label in (0, 1)]
        # Bytes of a body besides the three variable payloads and their headers.
        self._fixed_size = (len(self._mask_then_segment[0]) + seq + len(self._weights[0])
                            + len(self._next_sentence[0]))
        largest_body = (self._fixed_size + len(self._id_headers[-1]) + len(self._id_headers) - 1
                        + len(self._position_headers[-1]) + len(self._position_headers) - 1
                        + len(self._label_headers[-1]) + len(self._label_headers) - 1)
        # Example heads by body size, and TFRecord heads (length, its masked CRC) by record size.
        self._example_heads = [b"\x0a" + _varint(size) for size in range(largest_body + 1)]
        largest_record = len(self._example_heads[-1]) + largest_body
        self._frame_heads = [_frame_head(size) for size in range(largest_record + 1)]

    def records(self, tokens: np.ndarray, token_counts: np.ndarray, a_lengths: np.ndarray,
                positions: np.ndarray, labels: np.ndarray, mask_counts: np.ndarray,
                next_sentence: np.ndarray) -> list[bytes]:
        """Framed records, one per instance.

        Instance r has `token_counts[r]` ids in `tokens` ([CLS] A [SEP] B [SEP], unpadded, the
        A segment `a_lengths[r]` long) and `mask_counts[r]` masked positions (increasing) with
        their original ids in `positions` and `labels`; `next_sentence[r]` is 0 or 1. The
        instances' values follow one another in each array.
        """
        seq, pred, zeros, ones = self.seq, self.pred, self._zeros, self._ones
        id_bytes, id_sizes = self.ids.encode(tokens, token_counts)
        position_bytes, position_sizes = self.positions.encode(positions, mask_counts)
        label_bytes, label_sizes = self.ids.encode(labels, mask_counts)
        mask_then_segment, weights = self._mask_then_segment, self._weights
        next_label, id_headers = self._next_sentence, self._id_headers
        position_headers, label_headers = self._position_headers, self._label_headers
        example_heads, frame_heads = self._example_heads, self._frame_heads
        fixed_size, pack = self._fixed_size, struct.pack
        out = []
        id_at = position_at = label_at = 0
        for count, a_length, id_size, masks, position_size, label_size, label in zip(
                token_counts.tolist(), a_lengths.tolist(), id_sizes, mask_counts.tolist(),
                position_sizes, label_sizes, next_sentence.tolist()):
            pad, mask_pad = seq - count, pred - masks
            pad_zeros, mask_zeros = zeros[:pad], zeros[:mask_pad]
            id_header = id_headers[id_size + pad]
            position_header = position_headers[position_size + mask_pad]
            label_header = label_headers[label_size + mask_pad]
            body_size = (fixed_size + len(id_header) + id_size + pad + len(position_header)
                         + position_size + len(label_header) + label_size + 2 * mask_pad)
            record = b"".join((
                example_heads[body_size],
                id_header, id_bytes[id_at:id_at + id_size], pad_zeros,
                mask_then_segment[count], zeros[:a_length + 2], ones[:count - a_length - 2],
                pad_zeros,
                position_header, position_bytes[position_at:position_at + position_size],
                mask_zeros,
                label_header, label_bytes[label_at:label_at + label_size], mask_zeros,
                weights[masks], next_label[label]))
            out.append(b"".join((frame_heads[len(record)], record,
                                 pack("<I", masked_crc32c(record)))))
            id_at += id_size
            position_at += position_size
            label_at += label_size
        return out


def _frame_head(size: int) -> bytes:
    """The start of a TFRecord of `size` bytes: the length, then its masked CRC-32C."""
    length = struct.pack("<Q", size)
    return length + struct.pack("<I", masked_crc32c(length))


# ---- protobuf decoding --------------------------------------------------------------------------

class DecodeError(ValueError):
    """Bytes that are not a well-formed `tf.train.Example`."""


def _example_class() -> type:
    """The message class of `tf.train.Example` (tensorflow/core/example/example.proto and
    feature.proto, the fields the records use), built in a pool of its own with the protobuf
    library, so that decoding needs neither TensorFlow nor a generated module."""
    field = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="pretraining_features/example.proto",
                                              package="tensorflow", syntax="proto3")

    def message(name: str, *fields: tuple[str, int, int, int, str]):
        proto = file.message_type.add(name=name)
        for field_name, number, kind, label, type_name in fields:
            added = proto.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:  # a message field's type
                added.type_name = type_name
        return proto

    repeated, optional = field.LABEL_REPEATED, field.LABEL_OPTIONAL
    for _, list_name, value_type, _ in _FEATURE_LISTS:
        message(list_name, ("value", 1, value_type, repeated, ""))
    feature = message("Feature", *((name, number, field.TYPE_MESSAGE, optional,
                                    f".tensorflow.{list_name}")
                                   for number, (name, list_name, _, _) in
                                   enumerate(_FEATURE_LISTS, 1)))
    feature.oneof_decl.add(name="kind")
    for item in feature.field:
        item.oneof_index = 0
    features = message("Features", ("feature", 1, field.TYPE_MESSAGE, repeated,
                                    ".tensorflow.Features.FeatureEntry"))
    entry = features.nested_type.add(name="FeatureEntry")  # map<string, Feature>
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=field.TYPE_STRING, label=optional)
    entry.field.add(name="value", number=2, type=field.TYPE_MESSAGE, label=optional,
                    type_name=".tensorflow.Feature")
    message("Example", ("features", 1, field.TYPE_MESSAGE, optional, ".tensorflow.Features"))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.Example"))


# Feature's oneof `kind`, in field-number order: (field, its message, the message's value
# type, the kind decode_example names).
_FEATURE_LISTS = (
    ("bytes_list", "BytesList", descriptor_pb2.FieldDescriptorProto.TYPE_BYTES, "bytes"),
    ("float_list", "FloatList", descriptor_pb2.FieldDescriptorProto.TYPE_FLOAT, "float32"),
    ("int64_list", "Int64List", descriptor_pb2.FieldDescriptorProto.TYPE_INT64, "int64"))
_KINDS = {name: kind for name, _, _, kind in _FEATURE_LISTS}
_EXAMPLE = _example_class()


def _reason(err: protobuf_message.DecodeError) -> str:
    """The protobuf library's reason for a parse failure, without its "Error parsing message
    with type ...: " lead: "wire format was corrupt", "string field had bad UTF-8"."""
    reason = str(err).rpartition("': ")[2] or str(err)
    return reason[:1].lower() + reason[1:]


def decode_example(data: bytes) -> dict[str, tuple[str, object]]:
    """{feature name: (kind, values)} of a serialized `tf.train.Example`: kind "int64" (an
    int64 array), "float32" (a float32 array), "bytes" (a list of bytes) or "none" (a feature
    with no list set, values None). DecodeError for bytes that do not parse as an Example (a
    name that is no UTF-8 too)."""
    example = _EXAMPLE()
    try:
        example.ParseFromString(data)
    except protobuf_message.DecodeError as err:
        raise DecodeError(_reason(err)) from err
    features: dict[str, tuple[str, object]] = {}
    for name, feature in example.features.feature.items():
        which = feature.WhichOneof("kind")
        if which is None:
            features[name] = ("none", None)
        elif which == "bytes_list":
            features[name] = ("bytes", list(feature.bytes_list.value))
        else:
            kind = _KINDS[which]
            features[name] = (kind, np.array(getattr(feature, which).value, dtype=kind))
    return features


# The flag that sets each feature's length (next_sentence_labels always holds one value).
LENGTH_FLAGS = {"input_ids": "--max_seq_length", "input_mask": "--max_seq_length",
                "segment_ids": "--max_seq_length",
                "masked_lm_positions": "--max_predictions_per_seq",
                "masked_lm_ids": "--max_predictions_per_seq",
                "masked_lm_weights": "--max_predictions_per_seq"}


def spec_problem(decoded: Mapping[str, tuple[str, object]], spec: Mapping[str, FeatureSpec],
                 length_flags: Mapping[str, str] | None = None) -> str | None:
    """Why features from `decode_example` do not fit `spec` (None: they fit): the first
    feature, in spec order, that is missing, of another dtype or of another length.

    With `length_flags` ({feature: flag}, e.g. LENGTH_FLAGS) a wrong length names the flag
    that sets it: "feature input_ids has 384 values, expected --max_seq_length=512".
    """
    for name, item in spec.items():
        kind, values = decoded.get(name, ("none", None))
        if kind == "none":
            return f"feature {name} is missing"
        if kind != item.dtype:
            return f"feature {name} holds {kind} values, expected {item.dtype}"
        if len(values) != item.length:
            flag = (length_flags or {}).get(name)
            expected = f"{flag}={item.length}" if flag else str(item.length)
            return f"feature {name} has {len(values)} values, expected {expected}"
    return None


def feature_problem(data: bytes, max_seq_length: int,
                    max_predictions_per_seq: int) -> str | None:
    """Why one serialized record does not fit the pretraining feature spec (None: it fits).

    The answer names the feature and, for a wrong length, the flag that sets the length, e.g.
    "feature input_ids has 384 values, expected --max_seq_length=512"; bytes that are no
    Example give "not a tf.train.Example (...)".
    """
    try:
        decoded = decode_example(data)
    except DecodeError as err:
        return f"not a tf.train.Example ({err})"
    return spec_problem(decoded, feature_spec(max_seq_length, max_predictions_per_seq),
                        LENGTH_FLAGS)


def parse_pretraining_example(data: bytes,
                              spec: Mapping[str, FeatureSpec]) -> dict[str, np.ndarray]:
    """The features of `spec` from one serialized Example, checked against their dtype and length.

    DecodeError (`spec_problem`'s message) when a feature is missing, of another type or of
    another length.
    """
    decoded = decode_example(data)
    problem = spec_problem(decoded, spec)
    if problem:
        raise DecodeError(problem)
    return {name: decoded[name][1].reshape(item.shape) for name, item in spec.items()}


# ---- TFRecord framing ---------------------------------------------------------------------------

HEADER_BYTES = 12  # a TFRecord's uint64 length and the length's masked CRC-32C
FOOTER_BYTES = 4  # the data's masked CRC-32C


def masked_crc32c(data: bytes) -> int:
    """The TFRecord checksum: CRC-32C, rotated right by 15 bits, plus 0xa282ead8."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_record(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the data, the data's masked CRC."""
    return _frame_head(len(data)) + data + struct.pack("<I", masked_crc32c(data))


def write_records(handle: BinaryIO, records: Sequence[bytes]) -> None:
    """Append `records` to an open binary file as TFRecords."""
    handle.write(b"".join(frame_record(record) for record in records))


class FramingError(ValueError):
    """A record whose TFRecord framing is damaged or unreadable: its 0-based `index` in the
    file and the `problem` (e.g. "CRC mismatch (data corrupted)")."""

    def __init__(self, index: int, problem: str):
        super().__init__(problem)
        self.index = index
        self.problem = problem


def _next_length(handle: BinaryIO, index: int, offset: int) -> int | None:
    """The data length of record `index` (its header at byte `offset`); None at a clean end."""
    header = handle.read(HEADER_BYTES)
    if not header:
        return None
    if len(header) < HEADER_BYTES:
        raise FramingError(index, f"truncated at byte {offset + len(header)} "
                                  f"(inside the record's {HEADER_BYTES}-byte header)")
    if masked_crc32c(header[:8]) != struct.unpack("<I", header[8:])[0]:
        raise FramingError(index, "length CRC mismatch (data corrupted" + (
            ", or not a TFRecord file)" if index == 0 else ")"))
    return struct.unpack("<Q", header[:8])[0]


def _truncated(index: int, offset: int, length: int, at: int) -> FramingError:
    """Record `index` (header at `offset`, `length` data bytes) ends early, at byte `at`."""
    end = offset + HEADER_BYTES + length + FOOTER_BYTES
    return FramingError(index, f"truncated at byte {at} (the record starts at byte {offset} "
                               f"and ends at byte {end})")


READ_BLOCK = 16 << 20  # bytes read at once: a length field cannot make a read allocate more


def _read_up_to(handle: BinaryIO, size: int) -> bytes:
    """Up to `size` bytes from `handle`, fewer at its end; read READ_BLOCK at a time, so that a
    damaged or hostile length field costs memory only for the bytes really there."""
    if size <= READ_BLOCK:
        return handle.read(size)
    blocks = []
    while size > 0:
        block = handle.read(min(size, READ_BLOCK))
        if not block:
            break
        blocks.append(block)
        size -= len(block)
    return b"".join(blocks)


def framed_records(handle: BinaryIO,
                   read_errors: tuple[type[BaseException], ...] = (OSError,)) -> Iterator[bytes]:
    """The data of each TFRecord read from `handle` (anything with `read(n)`: an open file, a
    `tf.io.gfile.GFile`), both checksums verified.

    Raises FramingError at the first record that is truncated or fails a CRC, and for an
    exception of `read_errors` raised by a read ("cannot read (...)").
    """
    index = offset = 0
    try:
        while True:
            length = _next_length(handle, index, offset)
            if length is None:
                return
            body = _read_up_to(handle, length + FOOTER_BYTES)
            if len(body) < length + FOOTER_BYTES:
                raise _truncated(index, offset, length, offset + HEADER_BYTES + len(body))
            if masked_crc32c(body[:length]) != struct.unpack("<I", body[length:])[0]:
                raise FramingError(index, "CRC mismatch (data corrupted)")
            yield body[:length]
            index, offset = index + 1, offset + HEADER_BYTES + length + FOOTER_BYTES
    except read_errors as err:
        raise FramingError(index, f"cannot read ({one_line(err)})") from err


def _open_tfrecord(path: str) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as err:
        raise InputError(f"{path}: cannot read TFRecord file ({err.strerror})") from err


def _damaged(path: str, err: FramingError) -> InputError:
    """The one-line InputError for a damaged local TFRecord file."""
    return InputError(f"{path}: record {err.index}: {err.problem}")


def read_records(path: str | os.PathLike) -> Iterator[bytes]:
    """Each record of a local TFRecord file, checksums verified (`framed_records`); InputError
    "PATH: record I: PROBLEM" if it is damaged or unreadable."""
    path = str(path)
    with _open_tfrecord(path) as handle:
        try:
            yield from framed_records(handle)
        except FramingError as err:
            raise _damaged(path, err) from err


def count_records(path: str | os.PathLike) -> int:
    """Number of records in a local TFRecord file, reading only the headers (their length
    checksums verified); InputError as `read_records` gives."""
    path = str(path)
    with _open_tfrecord(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        count = offset = 0
        try:
            while True:
                length = _next_length(handle, count, offset)
                if length is None:
                    return count
                end = offset + HEADER_BYTES + length + FOOTER_BYTES
                if end > size:
                    raise _truncated(count, offset, length, size)
                handle.seek(end)
                count, offset = count + 1, end
        except FramingError as err:
            raise _damaged(path, err) from err
        except OSError as err:
            raise _damaged(path, FramingError(count, f"cannot read ({one_line(err)})")) from err
