"""MCQA probes: the registered ``mcqa`` probe (``probe``) and its parts: benchmark items
(``tasks``), prompts and wrappers (``prompts``, ``wrappers``), how prompts and answers
are tokenised (``encoding``, ``views``), batched likelihood scoring (``scoring``),
generation and grading (``generation``, ``dashed``), metrics (``metrics``, ``aggregate``)
and per-item lines (``item_records``)."""
