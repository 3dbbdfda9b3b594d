#!/usr/bin/env python3
"""Random-weight Llama models for the serving-engine check, saved locally (no download).

  mkmodels.py OUTDIR  ->  OUTDIR/tiny     (2 layers, hidden 512: the smoke)
                          OUTDIR/llama1b  (examples/llama-1b-config.json: 16 layers, hidden 2048,
                                           16 heads, 4 KV heads, head_dim 128: speed and memory)

Both carry the same tokenizer: byte-level BPE without merges (every byte is a token, so any text
encodes), the specials <unk>=0, <s>=1, </s>=2, and filler tokens up to the models' 32000 ids so
that every id a random-weight model emits decodes to text (an engine's detokenizer sees no
unknown id). A chat template makes the chat endpoint usable. Weights are bf16, seeded: the same
files on every run.
"""
import json
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB = 32000
HERE = os.path.dirname(os.path.abspath(__file__))
CONFIG_1B = os.path.join(HERE, "..", "..", "..", "examples", "llama-1b-config.json")


def tokenizer():
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    i = 0
    while len(vocab) < VOCAB:  # never produced by encoding (no merges); decodes as "t<i>"
        vocab["t%d" % i] = len(vocab)
        i += 1
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                 unk_token="<unk>", pad_token="<unk>")
    hf.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                        "{% if add_generation_prompt %}assistant: {% endif %}")
    return hf


def save(out, cfg, tok, seed=0):
    if os.path.exists(os.path.join(out, "config.json")):
        print("exists", out)
        return
    torch.manual_seed(seed)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(dev):
            model = LlamaForCausalLM(cfg)
    finally:
        torch.set_default_dtype(old)
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    n = sum(p.numel() for p in model.parameters())
    print("saved %s: %.0f M parameters" % (out, n / 1e6))
    del model


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/serving-models"
    tok = tokenizer()
    common = dict(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                  tie_word_embeddings=False, torch_dtype="bfloat16")
    tiny = LlamaConfig(hidden_size=512, intermediate_size=1024, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=128,
                       max_position_embeddings=4096, **common)
    save(os.path.join(out, "tiny"), tiny, tok)
    with open(CONFIG_1B) as f:
        c = json.load(f)
    c = {k: v for k, v in c.items() if k not in ("architectures", "model_type", "torch_dtype")}
    c.update(common)
    c["max_position_embeddings"] = 8192
    save(os.path.join(out, "llama1b"), LlamaConfig(**c), tok)


if __name__ == "__main__":
    main()
