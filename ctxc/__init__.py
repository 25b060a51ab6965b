"""ctxc: read, measure and compact LLM agent transcripts.

The library API is importable without the CLI; heavy modules (tokenizer encodings, the Anthropic SDK)
load only when a call needs them.
"""

from __future__ import annotations

__version__ = "0.1.0"
