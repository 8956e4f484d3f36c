"""BERT for pre-training (masked LM + next sentence) in TF2 Keras.

The computation follows the MLCommons reference's TF1 graph operation by operation, so that the
same weights give the same numbers (to float32 rounding):

- embeddings: word (gather) + token type (one-hot matmul) + position (first `seq_length` rows),
  summed in that order, then LayerNorm (epsilon 1e-12) and dropout;
- each transformer layer: query/key/value as 2-D products of the [batch * seq, hidden] rows with
  the [hidden, hidden] kernels, viewed [batch, heads, seq, head_size]; scores scaled by
  1/sqrt(head_size) after the product; padded *keys* get -10000 added before the softmax (padded
  query rows are computed and left as is); in mixed precision the scale, mask and softmax run
  in float32 over the product's bf16/fp16 scores;
  attention dropout; output projection + dropout + residual + LayerNorm; intermediate dense with
  the tanh form of GELU; output dense + dropout + residual + LayerNorm (post-LN);
- pooler: tanh dense on the [CLS] (first) position;
- packed rows (features `sequence_ids`, `position_ids`, `next_sentence_positions`; see
  `cleanup_scripts.records.pretraining_features`): each token attends only to the tokens of its own
  sequence (a block-diagonal mask of -10000 elsewhere, the reference's value for padding), the
  position embeddings are looked up by position_ids (restarting at 0 with each sequence), and
  the pooler and next-sentence head run on every sequence's [CLS], so a sequence's outputs are
  those of the same sequence alone in an unpacked row (to float rounding);
- masked-LM head: dense + GELU + LayerNorm on the gathered positions, logits = product with the
  word-embedding table (tied) + output bias;
- next-sentence head: dense with 2 outputs on the pooled output.

Pieces from `official.nlp.modeling` are used where their operations are the MLCommons reference's
(`OnDeviceEmbedding`, `PositionEmbedding`, `MaskedLM`); the attention and the transformer layer
are our own because the library's scale the query before the product and mask with -1e9.

Variables carry the MLCommons reference's structure in their names (e.g.
`bert_pretraining/bert/encoder/layer_0/attention/self/query/kernel`); `reference.checkpoint`
maps TF1 and TF2 checkpoint names onto them. Operations are named by the part of the model they
belong to, backward ops too (`in_forward_scope`): inside `layer_N`, `heads_first`,
`qk_product`, `mask_softmax`, `attention/self/dropout` and `pv_product`; `attention_mask` and
`cls_rows` in `bert`. A profile of a compiled step maps its kernels to model parts by these
names.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, Mapping

import tensorflow as tf
import tf_keras
from official.nlp.modeling import layers as nlp_layers

from reference.bert_config import BertConfig

LAYER_NORM_EPSILON = 1e-12
# Added to the attention scores of padded key positions (the MLCommons reference's value, not -inf).
MASKED_SCORE_ADDER = -10000.0

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")


def in_forward_scope(grad_fn: Callable) -> Callable:
    """`grad_fn`, the backward function of a `tf.custom_gradient`, made to run in the name scope
    current when this is called (the forward pass's), so that its ops are named after the part
    of the model they belong to rather than the top of the graph. Values are unchanged."""
    scope = tf.get_current_name_scope()

    def grad(*upstream):
        if not scope:
            return grad_fn(*upstream)
        with tf.name_scope(scope + "/"):  # a trailing "/" re-enters the scope as it is
            return grad_fn(*upstream)

    return grad


def _gelu_terms(x: tf.Tensor) -> tf.Tensor:
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * tf.pow(x, 3))
    return x * (0.5 * (1.0 + tf.tanh(inner)))


@tf.function(jit_compile=True, autograph=False)  # straight-line code: nothing to convert
def _fused_gelu(x: tf.Tensor) -> tf.Tensor:
    return _gelu_terms(x)


@tf.function(jit_compile=True, autograph=False)  # straight-line code: nothing to convert
def _fused_gelu_gradient(x: tf.Tensor, upstream: tf.Tensor) -> tf.Tensor:
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = _gelu_terms(x)
    return tape.gradient(y, x, output_gradients=upstream)


@tf.custom_gradient
def gelu(x: tf.Tensor):
    """GELU in its tanh approximation, evaluated in the MLCommons reference's operation order.

    The forward and the backward pass are each one XLA-compiled function (TensorFlow's kernels
    make about eight passes over the [tokens, intermediate] activations forward and a dozen
    backward; fused, a BERT-base step on 2 CPU cores takes 7% less time). The backward pass
    differentiates the same expression from `x` (the only tensor kept), so the gradient is
    TensorFlow's own, to XLA's rounding of tanh.

    Args:
      x: float tensor, any shape.

    Returns:
      x * 0.5 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), same shape and dtype.
    """
    return _fused_gelu(x), in_forward_scope(lambda upstream: _fused_gelu_gradient(x, upstream))


def get_activation(name: str) -> Callable[[tf.Tensor], tf.Tensor] | None:
    """The activation function for a `hidden_act` name ("gelu", "relu", "tanh", "linear").

    Returns None for "linear" (no activation). Raises ValueError for other names.
    """
    table = {"gelu": gelu, "relu": tf.nn.relu, "tanh": tf.tanh, "linear": None}
    key = name.lower()
    if key not in table:
        raise ValueError(f"unsupported activation {name!r}")
    return table[key]


def _initializers(config: BertConfig, draw_weights: bool
                  ) -> Callable[[], tf_keras.initializers.Initializer]:
    """A maker of the initializer of each kernel or embedding table: the MLCommons reference's
    truncated normal, or zeros when `draw_weights` is False (see BertPretrainingModel). A fresh
    instance per weight: tf_keras repeats the values of a reused unseeded initializer."""
    if not draw_weights:
        return tf_keras.initializers.Zeros
    return functools.partial(tf_keras.initializers.TruncatedNormal,
                             stddev=config.initializer_range)


def _layer_norm(name: str) -> tf_keras.layers.LayerNormalization:
    # With epsilon < 1.001e-5 tf_keras computes moments + batch_normalization, as the MLCommons
    # reference does.
    return tf_keras.layers.LayerNormalization(axis=-1, epsilon=LAYER_NORM_EPSILON, name=name)


def _batch_dims(inputs: tf.Tensor) -> list:
    """The leading [B, S] sizes of a [B, S, ...] tensor (static where known)."""
    dynamic = tf.shape(inputs)
    return [inputs.shape[i] if inputs.shape[i] is not None else dynamic[i] for i in range(2)]


def _dense_2d(inputs: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """[B, S, C] x [C, U] kernel + [U] bias -> [B, S, U] as one 2-D matrix product over the
    B * S rows, the reference's form (its `reshape_to_matrix`). A 3-D einsum computes the same
    numbers, but oneDNN ran it at half the speed of the 2-D product for [1024, 768] x
    [768, 3072] (182 vs 388 GFLOP/s, measured on an AVX-512 Xeon), in both passes."""
    rows = tf.reshape(inputs, [-1, inputs.shape[-1]])
    output = tf.nn.bias_add(tf.matmul(rows, kernel), bias)
    return tf.reshape(output, _batch_dims(inputs) + [kernel.shape[-1]])


class DenseReadEmbedding(nlp_layers.OnDeviceEmbedding):
    """`OnDeviceEmbedding` whose look-up gathers rows from a dense read of the table.

    The word-embedding table is also the masked-LM output layer, which reads it whole. A
    variable that has been gathered from directly (a sparse read) makes every later whole read
    copy it (TensorFlow's copy-on-read mode for resource variables): 94 MB per read at BERT-base.
    Gathering from the tensor of one whole read gives the same values and the same gradient
    (tf.IndexedSlices of the looked-up rows) without those copies.
    """

    def call(self, inputs):
        flat = tf.reshape(inputs, [-1])
        rows = tf.gather(tf.convert_to_tensor(self.embeddings), flat)
        return tf.reshape(rows, _batch_dims(inputs) + [self._embedding_width])


class RowPositionEmbedding(nlp_layers.PositionEmbedding):
    """`PositionEmbedding` that also looks rows up by explicit position ids (packed rows).

    Call: (inputs [B, S, width], position_ids [B, S] int32 or None) -> [B, S, width]: the
    table's first S rows broadcast over the batch (None), or the rows at position_ids.
    """

    def call(self, inputs, position_ids=None):  # pylint: disable=arguments-differ
        if position_ids is None:
            return super().call(inputs)
        return tf.gather(tf.convert_to_tensor(self._position_embeddings), position_ids)


class BertEmbeddings(tf_keras.layers.Layer):
    """Word + token-type + position embeddings, LayerNorm and dropout (`draw_weights`: see
    BertPretrainingModel).

    Call: (input_ids [B, S] int32, segment_ids [B, S] int32, training, position_ids [B, S] int32
    or None: positions 0..S-1) -> [B, S, hidden] float32.
    """

    def __init__(self, config: BertConfig, draw_weights: bool = True, **kwargs):
        super().__init__(**kwargs)
        initializer = _initializers(config, draw_weights)
        self._max_positions = config.max_position_embeddings
        self.word_embeddings = DenseReadEmbedding(
            config.vocab_size, config.hidden_size, initializer=initializer(),
            name="word_embeddings")
        self.token_type_embeddings = nlp_layers.OnDeviceEmbedding(
            config.type_vocab_size, config.hidden_size, initializer=initializer(),
            use_one_hot=True, name="token_type_embeddings")
        self.position_embeddings = RowPositionEmbedding(
            max_length=config.max_position_embeddings, initializer=initializer(),
            name="position_embeddings")
        self.layer_norm = _layer_norm("LayerNorm")
        self.dropout = tf_keras.layers.Dropout(config.hidden_dropout_prob, name="dropout")

    def call(self, input_ids, segment_ids, training=None, position_ids=None):
        seq_length = input_ids.shape[1]
        if seq_length is not None and seq_length > self._max_positions:
            raise ValueError(f"sequence length {seq_length} exceeds max_position_embeddings "
                             f"{self._max_positions}")
        output = self.word_embeddings(input_ids)
        output = output + self.token_type_embeddings(segment_ids)
        output = output + self.position_embeddings(output, position_ids)
        output = self.layer_norm(output)
        return self.dropout(output, training=training)


class HeadsProjection(tf_keras.layers.Layer):
    """Dense projection [B, S, D] -> [B, S, heads, head_size] (query, key or value).

    The kernel is stored [D, heads * head_size] and the bias [heads * head_size], the TF1
    checkpoint's shapes; the call views them as [D, heads, head_size] and [heads, head_size].
    """

    def __init__(self, num_heads: int, head_size: int, initializer, **kwargs):
        super().__init__(**kwargs)
        self._num_heads = num_heads
        self._head_size = head_size
        self._initializer = initializer

    def build(self, input_shape):
        width = int(input_shape[-1])
        units = self._num_heads * self._head_size
        self.kernel = self.add_weight("kernel", shape=[width, units],
                                      initializer=self._initializer)
        self.bias = self.add_weight("bias", shape=[units], initializer="zeros")
        super().build(input_shape)

    def call(self, inputs):
        output = _dense_2d(inputs, self.kernel, self.bias)
        return tf.reshape(output, _batch_dims(inputs) + [self._num_heads, self._head_size])


class HeadsMerge(tf_keras.layers.Layer):
    """Dense projection [B, S, heads, head_size] -> [B, S, D] (the attention output).

    The kernel is stored [heads * head_size, D] (TF1 shape) and viewed as [heads, head_size, D].
    """

    def __init__(self, output_size: int, initializer, **kwargs):
        super().__init__(**kwargs)
        self._output_size = output_size
        self._initializer = initializer

    def build(self, input_shape):
        num_heads, head_size = int(input_shape[-2]), int(input_shape[-1])
        self.kernel = self.add_weight("kernel", shape=[num_heads * head_size, self._output_size],
                                      initializer=self._initializer)
        self.bias = self.add_weight("bias", shape=[self._output_size], initializer="zeros")
        super().build(input_shape)

    def call(self, inputs):
        num_heads, head_size = inputs.shape[-2], inputs.shape[-1]
        merged = tf.reshape(inputs, _batch_dims(inputs) + [num_heads * head_size])
        return _dense_2d(merged, self.kernel, self.bias)


class SequenceDense(tf_keras.layers.Layer):
    """Dense layer on [B, S, C] with a [C, units] kernel (one 2-D product), bias, activation."""

    def __init__(self, units: int, initializer, activation=None, **kwargs):
        super().__init__(**kwargs)
        self._units = units
        self._initializer = initializer
        self._activation = activation

    def build(self, input_shape):
        self.kernel = self.add_weight("kernel", shape=[int(input_shape[-1]), self._units],
                                      initializer=self._initializer)
        self.bias = self.add_weight("bias", shape=[self._units], initializer="zeros")
        super().build(input_shape)

    def call(self, inputs):
        output = _dense_2d(inputs, self.kernel, self.bias)
        return output if self._activation is None else self._activation(output)


class TransformerLayer(tf_keras.layers.Layer):
    """One post-LayerNorm transformer block, as the MLCommons reference's `layer_N` scope
    (`draw_weights`: see BertPretrainingModel).

    Call: (x [B, S, hidden], score_adder [B, 1, 1, S] float32, training) -> [B, S, hidden].
    `score_adder` is 0 for real key positions and -10000 for padding (see `attention_adder`).
    """

    def __init__(self, config: BertConfig, draw_weights: bool = True, **kwargs):
        super().__init__(**kwargs)
        initializer = _initializers(config, draw_weights)
        heads, size = config.num_attention_heads, config.attention_head_size
        self._head_size = size
        self.query = HeadsProjection(heads, size, initializer(), name="attention/self/query")
        self.key = HeadsProjection(heads, size, initializer(), name="attention/self/key")
        self.value = HeadsProjection(heads, size, initializer(), name="attention/self/value")
        self.attention_probs_dropout = tf_keras.layers.Dropout(
            config.attention_probs_dropout_prob, name="attention/self/dropout")
        self.attention_output = HeadsMerge(config.hidden_size, initializer(),
                                           name="attention/output/dense")
        self.attention_dropout = tf_keras.layers.Dropout(config.hidden_dropout_prob,
                                                         name="attention/output/dropout")
        self.attention_layer_norm = _layer_norm("attention/output/LayerNorm")
        self.intermediate = SequenceDense(config.intermediate_size, initializer(),
                                          activation=get_activation(config.hidden_act),
                                          name="intermediate/dense")
        self.output_dense = SequenceDense(config.hidden_size, initializer(),
                                          name="output/dense")
        self.output_dropout = tf_keras.layers.Dropout(config.hidden_dropout_prob,
                                                      name="output/dropout")
        self.output_layer_norm = _layer_norm("output/LayerNorm")

    def call(self, inputs, score_adder, training=None):
        query = self.query(inputs)  # [B, F, N, H]
        key = self.key(inputs)  # [B, T, N, H]
        value = self.value(inputs)  # [B, T, N, H]
        # Heads first ([B, N, S, H]) for batched products over (batch, head), as the reference.
        with tf.name_scope("heads_first"):
            query, key, value = (tf.transpose(t, [0, 2, 1, 3]) for t in (query, key, value))
        # Mixed precision: the product in the compute dtype, its scale, mask and softmax
        # statistics in float32 (one fused pass under XLA), the probabilities back in the
        # compute dtype for dropout and the product with the values. Float32: the reference's
        # operations as they are.
        with tf.name_scope("qk_product"):
            scores = tf.cast(tf.matmul(query, key, transpose_b=True), tf.float32)  # [B, N, F, T]
        with tf.name_scope("mask_softmax"):
            scores = tf.multiply(scores, 1.0 / math.sqrt(float(self._head_size)))
            scores += score_adder
            probs = tf.cast(tf.nn.softmax(scores), query.dtype)
        probs = self.attention_probs_dropout(probs, training=training)
        with tf.name_scope("pv_product"):
            context = tf.transpose(tf.matmul(probs, value), [0, 2, 1, 3])  # [B, F, N, H]

        attention = self.attention_output(context)
        attention = self.attention_dropout(attention, training=training)
        attention = self.attention_layer_norm(attention + inputs)

        output = self.output_dense(self.intermediate(attention))
        output = self.output_dropout(output, training=training)
        return self.output_layer_norm(output + attention)


def attention_adder(input_mask: tf.Tensor) -> tf.Tensor:
    """Additive attention mask from the [B, S] input mask: [B, 1, 1, S], 0 or -10000.

    Only key positions are masked; every query row attends to the real tokens.
    """
    to_mask = tf.cast(input_mask, tf.float32)[:, tf.newaxis, tf.newaxis, :]
    return (1.0 - to_mask) * MASKED_SCORE_ADDER


def packed_attention_adder(sequence_ids: tf.Tensor) -> tf.Tensor:
    """Additive attention mask of packed rows from [B, S] sequence ids (0 padding): [B, 1, S, S],
    0 where the key is a token of the query's own sequence, -10000 elsewhere."""
    same = tf.equal(sequence_ids[:, :, tf.newaxis], sequence_ids[:, tf.newaxis, :]) & \
        (sequence_ids[:, tf.newaxis, :] > 0)
    return (1.0 - tf.cast(same, tf.float32))[:, tf.newaxis] * MASKED_SCORE_ADDER


def _recomputed(layer: TransformerLayer, inputs: tf.Tensor, score_adder: tf.Tensor) -> tf.Tensor:
    """`layer(inputs, score_adder, training=True)` under tf.recompute_grad: the backward pass
    runs the layer again from `inputs` instead of keeping its activations (attention scores,
    GELU terms) from the forward pass. A dropout mask is drawn again from the same key, so the
    recomputation repeats the forward pass exactly (the caller differentiates inside the same
    `DropoutKeys.using` block)."""
    return tf.recompute_grad(lambda x: layer(x, score_adder, training=True))(inputs)


class BertEncoder(tf_keras.layers.Layer):
    """Embeddings, the transformer stack and the pooler (the MLCommons reference's `bert` scope;
    `draw_weights`: see BertPretrainingModel).

    Call: (input_ids, input_mask, segment_ids: [B, S] int32; training; packed rows instead of
      input_mask (None) sequence_ids, position_ids [B, S] and cls_positions [B, K] int32)
      -> (sequence_output [B, S, hidden], pooled_output [B, hidden]; packed rows: the pooled
      output of each [CLS], [B, K, hidden]).
    """

    def __init__(self, config: BertConfig, recompute_layers: bool = False,
                 draw_weights: bool = True, **kwargs):
        super().__init__(**kwargs)
        initializer = _initializers(config, draw_weights)
        self._recompute_layers = recompute_layers
        self.embeddings = BertEmbeddings(config, draw_weights, name="embeddings")
        self.transformer_layers = [TransformerLayer(config, draw_weights,
                                                    name=f"encoder/layer_{i}")
                                   for i in range(config.num_hidden_layers)]
        self.pooler = tf_keras.layers.Dense(config.hidden_size, activation="tanh",
                                            kernel_initializer=initializer(),
                                            name="pooler/dense")

    def call(self, input_ids, input_mask, segment_ids, training=None, sequence_ids=None,
             position_ids=None, cls_positions=None):
        output = self.embeddings(input_ids, segment_ids, training=training,
                                 position_ids=position_ids)
        with tf.name_scope("attention_mask"):
            adder = attention_adder(input_mask) if sequence_ids is None else \
                packed_attention_adder(sequence_ids)
        for layer in self.transformer_layers:
            if self._recompute_layers and training is True:
                output = _recomputed(layer, output, adder)
            else:
                output = layer(output, adder, training=training)
        with tf.name_scope("cls_rows"):
            cls_rows = tf.squeeze(output[:, 0:1, :], axis=1) if cls_positions is None else \
                tf.gather(output, cls_positions, batch_dims=1)
        return output, self.pooler(cls_rows)


class TiedMaskedLM(nlp_layers.MaskedLM):
    """`official.nlp` MaskedLM whose output weights are the word-embedding table of a layer.

    The table is looked up when the head is built, so the head can be created before the
    embedding layer has its weights. Call: (sequence_output [B, S, hidden], positions [B, P])
    -> (rows [B * P, hidden] after the transform dense, activation and LayerNorm, the output
    weights [vocab, hidden] (the table), the output bias [vocab]), all in the compute dtype;
    `masked_lm_logits` turns them into logits.
    """

    def __init__(self, embedding_layer: nlp_layers.OnDeviceEmbedding, **kwargs):
        super().__init__(embedding_table=None, **kwargs)
        self._embedding_layer = embedding_layer

    def build(self, input_shape):
        self.embedding_table = self._embedding_layer.embeddings
        super().build(input_shape)

    def call(self, sequence_data, masked_positions):
        rows = self.layer_norm(self.dense(self._gather_indexes(sequence_data, masked_positions)))
        # Inside a layer's call the variables read in the compute dtype (mixed precision).
        return (rows, tf.convert_to_tensor(self.embedding_table),
                tf.convert_to_tensor(self.bias))


def head_logits(rows: tf.Tensor, table: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """[N, vocab] logits rows @ table^T + bias of the head's outputs (`TiedMaskedLM`) for
    rows [N, hidden], in their dtype (the reference's product and bias_add)."""
    return tf.nn.bias_add(tf.matmul(rows, table, transpose_b=True), bias)


def masked_lm_logits(rows: tf.Tensor, table: tf.Tensor, bias: tf.Tensor,
                     positions: tf.Tensor) -> tf.Tensor:
    """`head_logits` viewed [B, P, vocab], for positions [B, P]."""
    return tf.reshape(head_logits(rows, table, bias), _batch_dims(positions) + [table.shape[0]])


class BertPretrainingModel(tf_keras.Model):
    """BERT with the masked-LM and next-sentence heads; weights exist after construction.

    Call: features -> outputs.
      features: mapping with the TFRecord feature names (`FEATURE_NAMES`); int tensors (int32 or
        int64, cast to int32) input_ids, input_mask, segment_ids [B, S]; masked_lm_positions,
        masked_lm_ids [B, P]; next_sentence_labels [B, 1]; float masked_lm_weights [B, P]. Only
        the first four are read here (labels are for `reference.losses`). Packed rows
        (`cleanup_scripts.records.pretraining_features`) carry sequence_ids, position_ids [B, S] and
        next_sentence_positions [B, K] instead of input_mask.
      outputs: dict with "masked_lm_logits" [B, P, vocab], "next_sentence_logits" [B, 2]
        (packed: [B, K, 2]),
        "sequence_output" [B, S, hidden], "pooled_output" [B, hidden], and the masked-LM head's
        inputs to its logits, from which `reference.losses` forms the logits a block at a time:
        "masked_lm_hidden" [B * P, hidden], "masked_lm_output_weights" [vocab, hidden] (the
        word-embedding table), "masked_lm_output_bias" [vocab]. In the compute dtype (float32
        unless mixed precision). Inside a tf.function the whole logits are computed only where
        "masked_lm_logits" is used.
    Dropout is active only when called with training=True.

    recompute_layers: with training=True, keep only each transformer layer's input for the
    backward pass and recompute the layer there (gradient checkpointing: about a third more
    encoder compute, the encoder's activations not held; the CPU demo's memory).

    draw_weights: draw each kernel and embedding table from the MLCommons reference's truncated
    normal; False leaves them zero, for a caller that sets every weight next (the Trainer:
    `initialize_weights` or a checkpoint), which so skips drawing what it overwrites (BERT-large:
    336 M values, about 11 of its 14 s of construction on one CPU thread).
    """

    def __init__(self, config: BertConfig, name: str = "bert_pretraining",
                 recompute_layers: bool = False, draw_weights: bool = True, **kwargs):
        super().__init__(name=name, **kwargs)
        initializer = _initializers(config, draw_weights)
        self.config = config
        self.recompute_layers = recompute_layers
        self.bert = BertEncoder(config, recompute_layers=recompute_layers,
                                draw_weights=draw_weights, name="bert")
        self.masked_lm = TiedMaskedLM(self.bert.embeddings.word_embeddings,
                                      activation=get_activation(config.hidden_act),
                                      initializer=initializer(), output="logits",
                                      name="cls/predictions")
        self.next_sentence = tf_keras.layers.Dense(2, kernel_initializer=initializer(),
                                                   name="cls/seq_relationship")
        # Create every variable now (a one-token batch is enough), so that checkpoints can be
        # loaded and optimizers built before the first real step.
        self(dummy_features(), training=False)

    def call(self, features: Mapping[str, tf.Tensor], training=None) -> dict[str, tf.Tensor]:
        input_ids = tf.cast(features["input_ids"], tf.int32)
        segment_ids = tf.cast(features["segment_ids"], tf.int32)
        positions = tf.cast(features["masked_lm_positions"], tf.int32)
        if "sequence_ids" in features:  # packed rows
            sequence_ids = tf.cast(features["sequence_ids"], tf.int32)
            sequence_output, pooled_output = self.bert(
                input_ids, None, segment_ids, training=training, sequence_ids=sequence_ids,
                position_ids=tf.cast(features["position_ids"], tf.int32),
                cls_positions=tf.cast(features["next_sentence_positions"], tf.int32))
        else:
            sequence_output, pooled_output = self.bert(
                input_ids, tf.cast(features["input_mask"], tf.int32), segment_ids,
                training=training)
        rows, table, bias = self.masked_lm(sequence_output, masked_positions=positions)
        return {
            "masked_lm_logits": masked_lm_logits(rows, table, bias, positions),
            "masked_lm_hidden": rows,
            "masked_lm_output_weights": table,
            "masked_lm_output_bias": bias,
            "next_sentence_logits": self.next_sentence(pooled_output),
            "sequence_output": sequence_output,
            "pooled_output": pooled_output,
        }

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name,
                "recompute_layers": self.recompute_layers}


def dummy_features(batch_size: int = 1, seq_length: int = 1,
                   max_predictions: int = 1) -> dict[str, tf.Tensor]:
    """An all-zero feature batch of the given sizes (for building and tracing)."""
    def zeros(width, dtype=tf.int32):
        return tf.zeros([batch_size, width], dtype)

    return {
        "input_ids": zeros(seq_length),
        "input_mask": tf.ones([batch_size, seq_length], tf.int32),
        "segment_ids": zeros(seq_length),
        "masked_lm_positions": zeros(max_predictions),
        "masked_lm_ids": zeros(max_predictions),
        "masked_lm_weights": zeros(max_predictions, tf.float32),
        "next_sentence_labels": zeros(1),
    }
