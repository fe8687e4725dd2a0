"""MCQA probes: the registered ``mcqa`` probe (``probe``) and its parts (items, prompts and wrappers,
encoding, scoring, generation and grading, metrics, per-item records); docs/mcqa-probes.md.
"""
