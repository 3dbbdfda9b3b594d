import torch, vllm, glob, os
from vllm.v1.engine.core import EngineCore
d = os.path.dirname(vllm.__file__)
for f in ('_moe_C_stable_libtorch', '_flashmla_C', '_flashmla_extension_C'):
    torch.ops.load_library(glob.glob(d + '/' + f + '*.so')[0])
import vllm.vllm_flash_attn
