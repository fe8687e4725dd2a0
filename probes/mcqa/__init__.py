"""MCQA scoring probes (seeds/000-002). Groundwork so far: benchmark items (``tasks``),
how prompts and answers are tokenised (``encoding``), batched likelihood scoring of
several continuations that share one prompt (``scoring``) and the per-protocol metrics
(``metrics``); the probe itself is not registered yet."""
