"""The lab as data: its records (spec), the loader of lab.yaml, the labs folder found, and each lab's documentation."""
