"""Data preparation: corpus -> tokenizer -> token shards -> character snapshot -> eval sets."""
