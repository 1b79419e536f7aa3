"""A character-level tokenizer built in code: printable ASCII and newline, one token per character."""

from __future__ import annotations

from typing import Any

PAD, EOS, UNK = "<pad>", "<eos>", "<unk>"
CHARACTERS = [chr(code) for code in range(32, 127)] + ["\n"]


def build_char_tokenizer() -> Any:
    """A ``PreTrainedTokenizerFast`` that keeps every space and newline (decoding fuses tokens back verbatim).

    Reload a saved copy with ``PreTrainedTokenizerFast.from_pretrained`` (or ``load_char_tokenizer``): loading it
    through a model-specific tokenizer class would normalise whitespace away.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate([PAD, EOS, UNK, *CHARACTERS])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=PAD, eos_token=EOS, unk_token=UNK, padding_side="left"
    )


def load_char_tokenizer(path: str) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast.from_pretrained(path, padding_side="left")
