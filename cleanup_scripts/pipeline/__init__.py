"""What `make preprocess` (`cleanup_scripts.preprocess`) orchestrates around the stages: where
every file goes (`layout`), the state files that let a re-run skip finished work (`ledger`),
worker pools, progress bars and summary lines (`runner`), and the import of the official
results/ text instead of a dump (`import_results`).
"""
