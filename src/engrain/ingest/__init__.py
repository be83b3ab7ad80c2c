"""Ingestion, one module per step: clean → chunk → embed → importance → route → dedup."""

from engrain.ingest.chunk import chunk_text, chunk_turns
from engrain.ingest.clean import clean_text
from engrain.ingest.dedup import dice_coefficient
from engrain.ingest.importance import novelty, salience
from engrain.ingest.route import route

__all__ = [
    "chunk_text",
    "chunk_turns",
    "clean_text",
    "dice_coefficient",
    "novelty",
    "route",
    "salience",
]
