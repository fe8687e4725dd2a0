"""The presentation room: what ``bytecanary report``, ``probe`` and ``demo`` show of a run.

- ``analysis``: the numbers (convergence points, cross-checkpoint MCQA statistics), pure
  functions over the rows of ``metrics.jsonl`` and ``probes.jsonl``;
- ``figures``: matplotlib figures of those numbers against tokens seen;
- ``sources``, ``axis``: what a report reads (a training run, a records file, a folder of
  records) and where its checkpoints sit on the x-axis (tokens seen, or the step);
- ``writer``: ``report/`` beside the records (figures, ``report.md``) and its W&B copy;
- ``compare``: several runs side by side (``compare.png``, ``compare.md``);
- ``summary``: the probe tables printed in the terminal.

Every metric key is read through ``bytecanary.keys``. Only the command line and the demo
import this package, so the measurement code never depends on how results are shown.
"""
