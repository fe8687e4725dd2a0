"""MCQA scoring probes (seeds/000-002). Groundwork so far: benchmark items (``tasks``), how prompts and answers are
tokenised (``encoding``) and batched likelihood scoring of several continuations that
share one prompt (``scoring``); the probe itself is not registered yet."""
