"""Sequence packing: the plan of which sequences share a row (`plan`), made from the length
histogram alone. `cleanup_scripts.pack_pretraining_data` (the command) writes the packed
TFRecords it plans.
"""
