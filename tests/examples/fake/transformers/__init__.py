"""transformers for the fake: a model whose generate() calls the logits processors once per new
token and returns tokens derived from the prompt. FAKE_GEN_OOM_AT=k raises torch's
OutOfMemoryError at step k (0 = the prefill), FAKE_GEN_STEP_S sleeps per step."""
import os
import time

__version__ = "0.0-fake"


class LlamaConfig:
    def __init__(self, **kw):
        self.__dict__.update(kw)
        self._attn_implementation = "sdpa"


class LogitsProcessor:
    pass


class LogitsProcessorList(list):
    pass


class _Layers:
    layers = []  # no decoder layers: --tp's split has nothing to cut


class _Out:
    pass


class LlamaForCausalLM:
    def __init__(self, config):
        self.config = config
        self.model = _Layers()

    def eval(self):
        return self

    def generate(self, input_ids=None, attention_mask=None, max_new_tokens=1, logits_processor=(), **kw):
        import torch
        oom_at = int(os.environ.get("FAKE_GEN_OOM_AT", "-1"))
        step_s = float(os.environ.get("FAKE_GEN_STEP_S", "0.001"))
        for i in range(max_new_tokens):
            if i == oom_at:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            for lp in logits_processor:
                lp(input_ids, None)
            time.sleep(step_s)
        out = _Out()
        out.sequences = torch.Tensor([row + [(sum(row) + k) % 1000 for k in range(max_new_tokens)]
                                      for row in input_ids.rows])
        out.logits = []
        return out
