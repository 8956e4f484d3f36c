"""MLPerf log keys the trainer writes besides the benchmark's own (through BertLogger.event).

None of them is rejected by the official checker, which skips keys it has no rule for:

  weights_initialization   one per tensor read from --init_checkpoint (metadata: tensor)
  resume                   this process continues a run from a training checkpoint
                           (metadata: checkpoint, global_step, samples)
  noncompliant             one per reason the run is not a closed-division result (value: why)
  opt_name, max_sequence_length, max_predictions_per_seq, opt_lamb_learning_rate_decay_poly_power,
  mixed_precision          informative settings the reference also logs

A run that does not evaluate the full 10,000 samples logs its true `eval_samples`.
"""

RESUME = "resume"
NONCOMPLIANT = "noncompliant"
