"""TF2 BERT pretraining for MLPerf: model, LAMB, input pipeline and run_pretraining."""
