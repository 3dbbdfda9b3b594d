"""Tensor parallelism for examples/generate.py --tp (one process per GPU, started by torchrun).

Megatron-style split of a Hugging Face Llama: q/k/v and gate/up projections keep a contiguous
1/world of their output rows (whole heads), o and down projections the matching 1/world of their
input columns, and an NCCL all-reduce after each o and down projection sums the partial outputs.
Embeddings, norms and the LM head stay whole, so every rank computes the same logits and picks the
same tokens. Each rank's KV cache holds its share of the KV heads, which is what a TP server's
ranks hold.

Every rank builds the same full model from the same seed and keeps its slice, so no weights are
sent between ranks. NVLink multicast stays off (NCCL_NVLS_ENABLE=0).
"""
import os

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")


def env_rank():
    """(rank, world, local rank) from torchrun's environment, or None outside torchrun."""
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    except (KeyError, ValueError):
        return None


def init(torch, local):
    """Binds this process to GPU `local` and joins the NCCL group."""
    import torch.distributed as dist
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    return dist


def check_divisible(s, world):
    """A message saying why the model cannot be split `world` ways, or None."""
    for key in ("heads", "kv_heads", "intermediate"):
        if s[key] % world:
            return "--tp: %s (%d) is not divisible by the %d ranks" % (key, s[key], world)
    return None


def _keep_rows(torch, linear, rank, world):
    """Keeps this rank's share of the output features (column-parallel)."""
    rows = linear.out_features // world
    w = linear.weight.data[rank * rows:(rank + 1) * rows].clone()
    linear.weight = torch.nn.Parameter(w, requires_grad=False)
    if linear.bias is not None:
        linear.bias = torch.nn.Parameter(linear.bias.data[rank * rows:(rank + 1) * rows].clone(),
                                         requires_grad=False)
    linear.out_features = rows


def _keep_cols(torch, dist, linear, rank, world):
    """Keeps this rank's share of the input features (row-parallel) and sums the ranks' partial
    outputs in place after the layer runs; a bias is added once, after the sum."""
    cols = linear.in_features // world
    w = linear.weight.data[:, rank * cols:(rank + 1) * cols].clone()
    linear.weight = torch.nn.Parameter(w, requires_grad=False)
    linear.in_features = cols
    bias = linear.bias
    linear.bias = None

    def all_reduce(module, inputs, output):
        dist.all_reduce(output)
        return output if bias is None else output + bias

    linear.register_forward_hook(all_reduce)


def shard_llama(torch, dist, model, rank, world):
    """Splits every decoder layer of a LlamaForCausalLM across `world` ranks (see the module doc)."""
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        for lin in (attn.q_proj, attn.k_proj, attn.v_proj, mlp.gate_proj, mlp.up_proj):
            _keep_rows(torch, lin, rank, world)
        for lin in (attn.o_proj, mlp.down_proj):
            _keep_cols(torch, dist, lin, rank, world)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()  # the full model's weights: not part of what a TP rank holds
