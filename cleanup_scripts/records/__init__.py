"""From sentences to pretraining TFRecords: WordPiece tokenization (`tokenization`), the
reference's random draws made in bulk (`mt_stream`), the pretraining instances those draws give
(`pretraining_instances`), the TFRecord codec and feature layout the trainer reads too
(`pretraining_features`), and the digest that compares two record files (`tfrecord_digest`).

The commands the reference names (`create_pretraining_data`, `pick_eval_samples`) stay directly
in `cleanup_scripts`.
"""
