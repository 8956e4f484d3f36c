"""The MLPerf BERT data pipeline: Wikipedia dump to the benchmark's text parts and TFRecords."""
from pathlib import Path

import benchmark  # noqa: F401  (TensorFlow's Keras, before anything imports it)

DATA_DIR = Path(__file__).resolve().parent / "data"
VOCAB_FILE = DATA_DIR / "bert" / "vocab.txt"
BERT_CONFIG_FILE = DATA_DIR / "bert" / "bert_config.json"
PUNKT_ENGLISH_DIR = DATA_DIR / "punkt_tab" / "english"
SAMPLE_DUMP = DATA_DIR / "enwiki-sample" / (
    "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2")
