# The python side of `ponytail doctor` (tools/commands/doctor_python.c embeds this file
# and runs it as `PY -c SCRIPT ARGS`). Prints one line
# "PONYTAIL_DOCTOR_JSON {...}" with what it found; never raises.
#   ARGS: [--gpu] [--config FILE] [--batch N] [--prompt N]
# Without --gpu: python, torch, torch's CUDA, whether the shim is mapped.
# With --gpu (run under the shim, PONYTAIL_ATTN=verify): a tiny CUDA op,
# the SDPA path of the decode shape (unmasked and padded), and a self-test of
# each swappable attention family against an fp32 reference.
import json
import os
import sys

out = {"python": sys.version.split()[0], "executable": sys.executable}


def mapped(part):
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                p = line.split()
                if len(p) >= 6 and part in p[5].rsplit("/", 1)[-1]:
                    return p[5]
    except OSError:
        pass
    return None


def arg(name, dflt):
    a = sys.argv[1:]
    return a[a.index(name) + 1] if name in a and a.index(name) + 1 < len(a) else dflt


def classify(names):
    if any("pt_attn_decode" in n for n in names):
        return "ponytail"
    for n in names:
        if "flash_fwd_splitkv" in n:
            return "flash-decode"
    for n in names:
        if "cudnn" in n and "sdpa" in n:
            return "cudnn"
        if "fmha_cutlass" in n or "MemEff" in n:
            return "mem-efficient"
    for n in names:
        if "flash_fwd" in n:
            return "flash"
    return "math" if names else None


def predict(torch, q, k, v, mask):
    b = torch.backends.cuda
    res = {}
    P = getattr(b, "SDPAParams", None)
    p = None
    if P is not None:
        for args in ((q, k, v, mask, 0.0, False, False), (q, k, v, mask, 0.0, False)):
            try:
                p = P(*args)
                break
            except Exception:
                p = None
    if p is not None:
        for name, fn in (("flash", "can_use_flash_attention"), ("mem-efficient", "can_use_efficient_attention"),
                         ("cudnn", "can_use_cudnn_attention")):
            f = getattr(b, fn, None)
            if f is not None:
                try:
                    res[name] = bool(f(p, False))
                except Exception:
                    res[name] = None
    order = None
    try:
        ids = {0: "math", 1: "flash", 2: "mem-efficient", 3: "cudnn"}
        order = [ids.get(int(x), str(x)) for x in torch._C._get_sdp_priority_order()]
    except Exception:
        pass
    pick = None
    for be in (order or ["flash", "mem-efficient", "cudnn"]):
        if res.get(be):
            pick = be
            break
    return {"can_use": res, "order": order, "predicted": pick}


def observe(torch, F, q, k, v, mask):
    try:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            torch.cuda.synchronize()
        names = [e.key for e in prof.key_averages()]
        keep = [n for n in names if any(s in n for s in ("attn", "flash", "fmha", "cudnn", "sdpa", "softmax"))]
        return keep, None
    except Exception as e:
        return [], "%s: %s" % (type(e).__name__, e)


def attention(torch, F, cfg, batch, prompt):
    hq = int(cfg.get("num_attention_heads", 32))
    hkv = int(cfg.get("num_key_value_heads") or hq)
    d = int(cfg.get("head_dim") or int(cfg.get("hidden_size", 4096)) // hq)
    dt = {"float16": torch.float16}.get(cfg.get("torch_dtype"), torch.bfloat16)
    L = prompt + 1
    q = torch.randn(batch, hq, 1, d, device="cuda", dtype=dt)
    k = torch.randn(batch, hkv, L, d, device="cuda", dtype=dt).repeat_interleave(hq // hkv, dim=1)
    v = torch.randn(batch, hkv, L, d, device="cuda", dtype=dt).repeat_interleave(hq // hkv, dim=1)
    mask = torch.ones(batch, 1, 1, L, device="cuda", dtype=torch.bool)
    mask[0, :, :, : L // 2] = False  # a left-padded sequence
    res = {"shape": "q [%d,%d,1,%d] kv [%d,%d,%d,%d] %s" % (batch, hq, d, batch, hq, L, d, str(dt).split(".")[-1])}
    for case, m in (("unmasked", None), ("padded", mask)):
        r = predict(torch, q, k, v, m)
        r["kernels"], r["profiler_error"] = observe(torch, F, q, k, v, m)
        r["observed"] = classify(r["kernels"])
        res[case] = r
    return res


def family(torch, F, name, dt, d, masked):
    """One self-test family: decode SDPA (batch 4, 8 heads, 300 keys) against an fp32 reference;
    masked: a left-padding mask of 0-180 keys per row, so SDPA takes the mem-efficient kernel."""
    try:
        q = torch.randn(4, 8, 1, d, device="cuda", dtype=dt)
        k = torch.randn(4, 8, 300, d, device="cuda", dtype=dt)
        v = torch.randn(4, 8, 300, d, device="cuda", dtype=dt)
        keep = None
        if masked:
            keep = torch.ones(4, 1, 1, 300, device="cuda", dtype=torch.bool)
            for b in range(4):
                keep[b, :, :, : 60 * b] = False
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=keep)
        torch.cuda.synchronize()
        s = (q.float() @ k.float().transpose(-1, -2)) * d ** -0.5
        if masked:
            s = s.masked_fill(~keep, float("-inf"))
        ref = torch.softmax(s, dim=-1) @ v.float()
        rel = ((o.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-6)).item()
        return {"family": name, "rel_err": rel, "ok": rel <= 1e-2}
    except Exception as e:
        return {"family": name, "error": "%s: %s" % (type(e).__name__, e), "ok": False}


def selftest(torch, F):
    fams = []
    for dt in (torch.bfloat16, torch.float16):
        for d in (64, 128):
            fams.append(family(torch, F, "decode %s d%d" % (str(dt).split(".")[-1], d), dt, d, False))
    # Masked decode (torch's mem-efficient kernel with a padding mask) is Ponytail's unless
    # PONYTAIL_ATTN_MASKED is off, read as the shim reads a boolean (common/options.c): on by
    # default, off only for an exact 0/off/false/no in any case; empty or anything else keeps
    # the default. Off, it is torch's own path.
    if os.environ.get("PONYTAIL_ATTN_MASKED", "").lower() not in ("0", "off", "false", "no"):
        for dt in (torch.bfloat16, torch.float16):
            fams.append(family(torch, F, "masked decode %s d128" % str(dt).split(".")[-1], dt, 128, True))
    return fams


def main():
    try:
        import torch
    except Exception as e:
        out["torch_error"] = "%s: %s" % (type(e).__name__, e)
        return
    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
    except Exception as e:
        out["cuda_available"] = False
        out["cuda_error"] = str(e)
    if out["cuda_available"]:
        try:
            out["device"] = torch.cuda.get_device_name(0)
            out["cc"] = list(torch.cuda.get_device_capability(0))
        except Exception as e:
            out["cuda_error"] = str(e)
    if "--gpu" not in sys.argv or not out["cuda_available"]:
        return
    import torch.nn.functional as F
    try:
        x = torch.ones(1024, device="cuda") * 2
        out["tiny_op"] = float(x.sum().item()) == 2048.0
    except Exception as e:
        out["tiny_op"] = False
        out["tiny_op_error"] = str(e)
    out["libcudart"] = mapped("libcudart.so")
    out["libcuda"] = mapped("libcuda.so")
    try:
        with open(arg("--config", "")) as f:
            cfg = json.load(f)
        out["attention"] = attention(torch, F, cfg, int(arg("--batch", "8")), int(arg("--prompt", "512")))
    except Exception as e:
        out["attention_error"] = "%s: %s" % (type(e).__name__, e)
    try:
        out["selftest"] = selftest(torch, F)
    except Exception as e:
        out["selftest_error"] = "%s: %s" % (type(e).__name__, e)


try:
    main()
except BaseException as e:  # report, never a traceback instead of the JSON line
    out["error"] = "%s: %s" % (type(e).__name__, e)
out["shim_mapped"] = mapped("libponytail_shim")
sys.stdout.write("PONYTAIL_DOCTOR_JSON " + json.dumps(out) + "\n")
sys.stdout.flush()
