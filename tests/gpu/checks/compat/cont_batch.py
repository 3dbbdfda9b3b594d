#!/usr/bin/env python3
"""transformers' continuous batching (generate_batch: paged KV cache,
scheduler, CUDA graphs in torch's private pools) on a random-weight Llama."""
import sys
import time

import torch
import transformers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from common import memory, result

if not hasattr(LlamaForCausalLM, "generate_batch"):
    print("SKIP: transformers %s has no generate_batch" % transformers.__version__)
    sys.exit(77)
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                  num_attention_heads=16, num_key_value_heads=4, head_dim=128,
                  max_position_embeddings=4096, pad_token_id=0, bos_token_id=1, eos_token_id=2)
torch.set_default_dtype(torch.bfloat16)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg)
model.eval()
g = torch.Generator().manual_seed(1)
prompts = [torch.randint(3, 32000, (int(n),), generator=g).tolist()
           for n in torch.randint(64, 1024, (16,), generator=g)]
gc = GenerationConfig(max_new_tokens=64, do_sample=False, eos_token_id=-1, pad_token_id=0)
t0 = time.perf_counter()
out = model.generate_batch(inputs=prompts, generation_config=gc, progress_bar=False)
torch.cuda.synchronize()
secs = time.perf_counter() - t0
toks = [list(out[k].generated_tokens) for k in sorted(out, key=lambda r: int("".join(c for c in str(r) if c.isdigit()) or 0))]
import hashlib, json
d = hashlib.sha256(json.dumps(toks).encode()).hexdigest()
ok = len(toks) == len(prompts) and all(len(t) == 64 for t in toks)
result(ok, digest=d, requests=len(toks), seconds=secs,
       attn=getattr(model.config, "_attn_implementation", None), **memory(torch))
