"""The MLPerf BERT benchmark's rules: constants, eval cadence, logging and checks."""
