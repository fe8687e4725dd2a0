"""The presentation room: what ``bytecanary report``, ``probe`` and ``demo`` show of a run
(``analysis``, ``figures``, ``tables``, ``writer``, ``compare``, ``summary``), composed from what
the probes' displays declare and their report sections add (``sections``); only the face imports it.
"""
