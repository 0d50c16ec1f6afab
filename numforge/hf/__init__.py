"""Hugging Face model directories in and out (GPT-2, Llama, Mistral, Qwen2, Qwen3): load_pretrained, save_pretrained.

A directory as ``transformers`` saves it (the ``snapshots/<hash>`` folder of
a downloaded ``gpt2`` or ``SmolLM2-135M`` is one)::

    config.json                      model_type and the shape             config.py: gpt2.py, llama.py
    model.safetensors                the tensors (or shards listed in      weights.py
      (model.safetensors.index.json)   model.safetensors.index.json)
    tokenizer.json                   and/or vocab.json + merges.txt       numforge.tokenizer.hf_json, .interop
    tokenizer_config.json, generation_config.json   checked and read for the BOS and end ids: numforge.tokenizer.hf_dir
    special_tokens_map.json                                               (written for transformers; not read)

Only local files are read, and never a pickle: a directory that holds only
``pytorch_model.bin`` (or any ``.bin``/``.pt``/``.pth``/``.ckpt``) is refused
with a note on converting it to safetensors. ``GPT`` and ``BPETokenizer``
know nothing of this format; this package maps it onto them.
"""

from .directory import load_pretrained, pretrained_config, save_pretrained

__all__ = ["load_pretrained", "pretrained_config", "save_pretrained"]
