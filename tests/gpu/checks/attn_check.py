#!/usr/bin/env python3
"""GPU validation and timing of Ponytail's fused decode attention kernel.

Runs on the H200 test machine (python3 with torch). The kernel is reached
through the test library built by tests/gpu/checks/attn.sh (kernels/attn_launch.c +
the embedded fatbin + tests/gpu/checks/attn_testlib.c), called with ctypes on
torch's current stream.

  attn_check.py --lib libattn_test.so correctness   # exit 1 on any failure
  attn_check.py --lib libattn_test.so --head-dims 80,96 correctness  # only those head dims' cases
  attn_check.py --lib libattn_test.so --head-dims 192 correctness    # only MLA's (q/k 192, v 128)
  attn_check.py --lib libattn_test.so timing
  attn_check.py --lib libattn_test.so masked-timing  # issue 17's grid with a padding mask
  attn_check.py --lib libattn_test.so masked-heat    # diagnostics (tests/gpu/checks/attn_diag.py):
  attn_check.py --lib libattn_test.so masked-place   # what ran before; where K/V lie;
  attn_check.py --lib libattn_test.so masked-method  # what the timing's other graphs read

correctness: fresh random inputs per case, outputs poisoned with NaN, fp32
reference (torch math on upcast tensors, TF32 off); O error = max|o-ref| /
max|ref| <= 1e-2, LSE error = max|lse-ref| / max|ref| <= 1e-3; then the
same case twice back to back and inside a CUDA graph replayed several times
(self-resetting counters), and the verify-mode compare kernel.

timing: GPU time per call from CUDA-graph replay (20 calls per graph,
median of replays after warm-up), rotating input copies so small shapes are
not served from L2, against the floor (K+V bytes / 4.8 TB/s), torch flash
and cuDNN SDPA.
"""
import argparse
import contextlib
import ctypes
import math
import os
import random
import time
import sys

import torch

from gpu_clocks import Clocks

DT = {torch.float16: 0, torch.bfloat16: 1}
HBM = 4.8e12
O_TOL, LSE_TOL = 1e-2, 1e-3
# --head-dims: the correctness cases of these head dims only (None: every case). Cases of other
# head dims, and the checks tied to one head dim that is not in it, are skipped.
ONLY_D = None
# Head dims the decode kernels take; 80 and 96 run padded on the d = 128 kernel (PADDED), q/k
# 192 with v 128 (MLA) on the d = 256 one (MLA_D, MLA_DV; --head-dims names it by 192).
PADDED = (80, 96)
MLA_D, MLA_DV = 192, 128


def wanted(D):
    return ONLY_D is None or D in ONLY_D
CLUSTER_MAX = 8  # PT_ATTN_PLAN_CLUSTER in kernels/attn_kparams.h
# ATTN_REPLAY_BUSY_US=N: a timed replay starts behind N us of torch.cuda._sleep on the stream,
# so that the graph is submitted while the GPU is still busy and the time from the start event
# to the first launch holds no CPU submission latency (per call, that latency / calls).
BUSY_US = float(os.environ.get("ATTN_REPLAY_BUSY_US", "0") or 0)


def busy():
    """Queues BUSY_US of GPU spin before a timed replay (nothing when 0): ~1.98 cycles a ns at
    the H200's locked 1980 MHz; a longer spin only delays, never shortens, the timed span."""
    if BUSY_US > 0:
        torch.cuda._sleep(int(BUSY_US * 2000))


class Args(list):
    """A launch's arguments for the test library's entry points (Lib.args), and v's head size
    dv (0: q's), which each entry point takes last, so that a test library built from an older
    tree (ATTN_VARIANTS name@DIR) still gets its own arguments where it reads them."""
    dv = 0


class Lib:
    def __init__(self, path):
        self.l = ctypes.CDLL(path)
        P, I, F, U = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_uint64
        S = ctypes.POINTER(ctypes.c_int64)
        common = [P, P, P, P, P, I, I, I, I, I, I, I, S, F, I]
        self.l.pt_test_init.restype = I
        self.l.pt_test_supported.argtypes = common + [I]
        self.l.pt_test_supported.restype = ctypes.c_char_p
        self.l.pt_test_ws_bytes.argtypes = common + [I]
        self.l.pt_test_ws_bytes.restype = U
        self.l.pt_test_ws_prepare.argtypes = [P, U, P]
        self.l.pt_test_ws_prepare.restype = I
        self.l.pt_test_decode.argtypes = common + [P, U, P, I]
        self.l.pt_test_decode.restype = I
        self.l.pt_test_compare.argtypes = [P, P, P, P, I, I, I, I, I, S, P, P, I]
        self.l.pt_test_compare.restype = I
        self.l.pt_test_set_split_div.argtypes = [I]
        self.l.pt_test_set_split_div.restype = None
        self.l.pt_test_set_split_mul.argtypes = [I]
        self.l.pt_test_set_split_mul.restype = None
        self.l.pt_test_set_cluster_max.argtypes = [I]
        self.l.pt_test_set_cluster_max.restype = None
        self.l.pt_test_set_bias.argtypes = [P, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64]
        self.l.pt_test_set_bias.restype = None
        self.l.pt_test_set_pdl.argtypes = [I]
        self.l.pt_test_set_pdl.restype = None
        self.l.pt_test_plan.argtypes = common + [ctypes.POINTER(I), ctypes.POINTER(I), I]
        self.l.pt_test_plan.restype = None
        self.l.pt_test_set_masked_short.argtypes = [I]
        self.l.pt_test_set_masked_short.restype = None
        if self.l.pt_test_init() != 0:
            raise RuntimeError("pt_test_init failed (no driver?)")
        self.ws = None
        self.ws_bytes = 0

    @staticmethod
    def _strides(q, k, v, o):
        st = []
        for t in (q, k, v, o):
            assert t.stride(3) == 1, "last dim must be contiguous"
            st += [t.stride(0), t.stride(1), t.stride(2)]
        return (ctypes.c_int64 * 12)(*st)

    def args(self, q, k, v, o, lse, h, h_k, sq, scale, causal):
        """q [b, sq, h, d], k [b, sk, h_k, d], v [b, sk, h_k, dv], o [b, sq, h, dv] (views with
        strides; dv is d but for MLA's 128 under 192)."""
        b, sk, d, dv = q.shape[0], k.shape[1], q.shape[3], v.shape[3]
        a = Args([q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                  lse.data_ptr() if lse is not None else None, DT[q.dtype], b, h, h_k, sq, sk, d,
                  self._strides(q, k, v, o), float(scale), int(causal)])
        a.dv = dv if dv != d else 0
        return a

    def ensure_ws(self, nbytes):
        if nbytes <= self.ws_bytes:
            return
        nbytes = max(nbytes, 64 << 20)
        self.ws = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        self.ws_bytes = nbytes
        rc = self.l.pt_test_ws_prepare(self.ws.data_ptr(), nbytes,
                                       torch.cuda.current_stream().cuda_stream)
        if rc != 0:
            raise RuntimeError("pt_attn_workspace_prepare: CUresult %d" % rc)

    @contextlib.contextmanager
    def knobs(self, cluster_max=CLUSTER_MAX, split_mul=1, masked_short=1):
        """The planner's test knobs set for the body (a launch under another plan), then back
        to their defaults."""
        self.l.pt_test_set_cluster_max(cluster_max)
        self.l.pt_test_set_split_mul(split_mul)
        self.l.pt_test_set_masked_short(masked_short)
        try:
            yield
        finally:
            self.l.pt_test_set_cluster_max(CLUSTER_MAX)
            self.l.pt_test_set_split_mul(1)
            self.l.pt_test_set_masked_short(1)

    @contextlib.contextmanager
    def bias(self, bias):
        """The additive bias every launch of the body gets (pt_test_set_bias; None: none), unset
        again whatever happens."""
        if bias is not None:
            self.l.pt_test_set_bias(bias.data_ptr(), *bias_strides(bias))
        try:
            yield
        finally:
            self.l.pt_test_set_bias(None, 0, 0, 0)

    def launcher(self, a, **knobs):
        """fn(i) that launches `a` under the planner's test knobs (knobs()), for graph capture:
        the knobs are read when the launch is planned, so a captured launch keeps that plan."""
        def f(i):
            with self.knobs(**knobs):
                self.decode(a)
        return f

    def plan(self, a):
        """(split count, cluster size) the planner picks for these arguments (and the bias set)."""
        ns, cl = ctypes.c_int(0), ctypes.c_int(0)
        self.l.pt_test_plan(*a, ctypes.byref(ns), ctypes.byref(cl), a.dv)
        return ns.value, cl.value

    def decode(self, a):
        why = self.l.pt_test_supported(*a, a.dv).decode()
        if why:
            raise RuntimeError("unsupported: " + why)
        need = self.l.pt_test_ws_bytes(*a, a.dv)
        self.ensure_ws(need)
        rc = self.l.pt_test_decode(*a, self.ws.data_ptr() if self.ws is not None else None,
                                   self.ws_bytes, torch.cuda.current_stream().cuda_stream, a.dv)
        if rc != 0:
            raise RuntimeError("pt_attn_decode_launch: CUresult %d" % rc)
        return need


def reference(q, k, v, scale, causal, bias=None):
    """fp32 attention: q [B, sq, H, D], k [B, S, Hk, D], v [B, S, Hk, Dv] -> o [B, sq, H, Dv],
    lse [B, H, sq]. bias: additive, broadcastable to [B, H, sq, S] (its dtype's values, upcast)."""
    B, sq, H, D = q.shape
    S, Hk = k.shape[1], k.shape[2]
    G = H // Hk
    qf = q.float().reshape(B, sq, Hk, G, D)
    kf, vf = k.float(), v.float()
    s = torch.einsum("bihgd,bjhd->bhgij", qf, kf) * scale
    if bias is not None:
        s = s + bias.float().expand(B, H, sq, S).reshape(B, Hk, G, sq, S)
    if causal:
        i = torch.arange(sq, device=q.device).view(sq, 1)
        j = torch.arange(S, device=q.device).view(1, S)
        s = s.masked_fill(j > i + S - sq, float("-inf"))
    lse = torch.logsumexp(s, dim=-1)                 # [B, Hk, G, sq]
    p = torch.softmax(s, dim=-1)
    o = torch.einsum("bhgij,bjhd->bihgd", p, vf).reshape(B, sq, H, v.shape[3])
    return o, lse.reshape(B, H, sq)


def rel_err(x, ref):
    den = ref.abs().max().item()
    e = (x.float() - ref).abs().max().item()
    if math.isnan(e) or math.isnan(den):
        return float("inf")
    return e / max(den, 1e-30)


def make_inputs(B, S, Hk, G, D, dtype, layout, sq=1, o_pad=0, in_pad=0, dv=None):
    """Returns q [B,sq,H,D], k [B,S,Hk,D], v [B,S,Hk,Dv] views in the given layout (Dv: dv,
    else D), o [B,sq,H,Dv] view inside a NaN-poisoned buffer (o_full), lse [B,H,sq]. in_pad > 0:
    q, k and v are the first D (v: Dv) columns of rows in_pad wider whose other columns hold NaN
    (a kernel that reads past the head dim, as a padded one could, gets NaN into O)."""
    H = Hk * G
    Dv = dv or D
    dev = "cuda"

    def rnd(*shape):
        if not in_pad:
            return torch.randn(*shape, device=dev, dtype=dtype)
        w = shape[-1]
        full = torch.full(shape[:-1] + (w + in_pad,), float("nan"), device=dev, dtype=dtype)
        full[..., :w] = torch.randn(*shape, device=dev, dtype=dtype)
        return full[..., :w]
    if layout == "hf":   # HF: q [B,H,sq,D], cache [B,Hk,S,D]
        q = rnd(B, H, sq, D).transpose(1, 2)
        k = rnd(B, Hk, S, D).transpose(1, 2)
        v = rnd(B, Hk, S, Dv).transpose(1, 2)
    elif layout == "mla":  # HF's DeepSeek-V3: q, k as "hf"; v the second half of each head's
        # [k_nope | v] row of the KV projection (split, then grown by torch.cat, which keeps that
        # layout: row stride Hk * 2 Dv, head stride 2 Dv; read from transformers 5.17's decode
        # calls on the CPU on 2026-12-07, torch.cat's layout rule being the same on CUDA). The
        # first half is NaN: a kernel that reads V from the wrong half, or past Dv, gets NaN in O.
        q = rnd(B, H, sq, D).transpose(1, 2)
        k = rnd(B, Hk, S, D).transpose(1, 2)
        kv = torch.full((B, S, Hk, 2 * Dv), float("nan"), device=dev, dtype=dtype)
        kv[..., Dv:] = torch.randn(B, S, Hk, Dv, device=dev, dtype=dtype)
        v = kv[..., Dv:]
    else:                # FA: [B,S,Hk,D]
        q = rnd(B, sq, H, D)
        k = rnd(B, S, Hk, D)
        v = rnd(B, S, Hk, Dv)
    o_full = torch.empty(B, sq, H, Dv + o_pad, device=dev, dtype=dtype)
    o = o_full[..., :Dv]
    lse = torch.empty(B, H, sq, device=dev, dtype=torch.float32)
    return q, k, v, o_full, o, lse


class Checker:
    def __init__(self, lib):
        self.lib = lib
        self.rows = []
        self.failures = 0

    def record(self, name, eo, el, extra=""):
        ok = eo <= O_TOL and el <= LSE_TOL
        if not ok:
            self.failures += 1
        self.rows.append("%-58s O %.2e  LSE %.2e  %s%s" % (name, eo, el, "ok" if ok else "FAIL",
                                                            extra))
        return ok

    def poison(self, o_full, lse):
        o_full.fill_(float("nan"))
        lse.fill_(float("nan"))

    def check_out(self, o_full, o, lse, ref_o, ref_lse, D):
        eo = rel_err(o, ref_o)
        el = rel_err(lse, ref_lse)
        if o_full.shape[-1] > D and not torch.isnan(o_full[..., D:]).all().item():
            eo = float("inf")  # wrote outside the view
        return eo, el

    def case(self, B, S, Hk, G, D, dtype, layout="hf", sq=1, causal=False, scale=None,
             o_pad=0, swapped=False, repeat=False, graph=False, in_pad=0, expect=None, dv=None):
        """One launch against the fp32 reference (then repeat / graph). expect: the plan the case
        is for ("one" split, "cluster", "ws" workspace); another plan fails it. dv: v's and O's
        head size when it is not D (MLA: 128 under 192)."""
        if not wanted(D):
            return True
        Dv = dv or D
        torch.manual_seed(hash((B, S, Hk, G, D, str(dtype), layout, sq, causal, o_pad,
                                swapped, in_pad, Dv)) & 0xffffffff)
        scale = scale if scale is not None else 1.0 / math.sqrt(D)
        q, k, v, o_full, o, lse = make_inputs(B, S, Hk, G, D, dtype, layout, sq, o_pad, in_pad, Dv)
        H = Hk * G
        ref_o, ref_lse = reference(q, k, v, scale, causal)
        if swapped:
            # torch's GQA decode: seqlen_q = G query heads of one KV head, h = Hk.
            assert sq == 1
            qd = q.reshape(B, Hk, G, D).transpose(1, 2)           # [B, G, Hk, D]
            od = o.reshape(B, Hk, G, Dv).transpose(1, 2) if o_pad == 0 else None
            assert od is not None
            a = self.lib.args(qd, k, v, od, lse, Hk, Hk, G, scale, causal)
        else:
            a = self.lib.args(q, k, v, o, lse, H, Hk, sq, scale, causal)
        name = "B%-2d S%-6d Hk%d G%d D%-3d%s %s %s%s%s%s" % (
            B, S, Hk, G, D, " v%d" % Dv if Dv != D else "", "bf16" if dtype == torch.bfloat16 else "fp16",
            layout, " sq%d" % sq if sq > 1 else "", " causal" if causal else "",
            " swapped" if swapped else "")
        if scale != 1.0 / math.sqrt(D):
            name += " scale%.2g" % scale
        if o_pad:
            name += " o_pad"
        if in_pad:
            name += " nan_pad"
        plan = self.lib.plan(a)
        got = "one" if plan[0] == 1 else "cluster" if plan[1] > 1 else "ws"
        wrong_plan = expect is not None and got != expect
        if wrong_plan:
            name += " (plan %s, expected %s)" % (got, expect)
        runs = 2 if repeat else 1
        ok = True
        for r in range(runs):
            self.poison(o_full, lse)
            ws = self.lib.decode(a)
            torch.cuda.synchronize()
            eo, el = self.check_out(o_full, o, lse, ref_o, ref_lse, Dv)
            if wrong_plan:
                eo = float("inf")  # not the plan this case is for
            ok &= self.record(name + (" run%d" % (r + 1) if repeat else ""), eo, el,
                              "  ws %d KiB, plan %d splits%s" % (
                                  ws >> 10, plan[0], " cluster" if plan[1] > 1 else "")
                              if r == 0 else "")
        if graph:
            g = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                self.lib.decode(a)  # loaded, workspace ready: nothing but a launch in capture
            torch.cuda.current_stream().wait_stream(s)
            torch.cuda.synchronize()
            with torch.cuda.graph(g):
                self.lib.decode(a)
                self.lib.decode(a)
            for r in range(3):
                self.poison(o_full, lse)
                g.replay()
                torch.cuda.synchronize()
                eo, el = self.check_out(o_full, o, lse, ref_o, ref_lse, Dv)
                ok &= self.record(name + " graph%d" % (r + 1), eo, el)
        del q, k, v, o_full, o, lse, ref_o, ref_lse
        return ok


def bias_strides(bias):
    """Element strides (batch, head, row) as the kernels take them: a dimension of size 1 is
    broadcast (stride 0), as torch expands a mask; its own stride is meaningless."""
    return tuple(bias.stride(i) if bias.size(i) > 1 else 0 for i in range(3))


def masked_case(c, B, S, Hk, G, D, dtype, sq=1, per_head=False, causal=False, pad_frac=0.75,
                right=False, graph=False, cluster_max=None, in_pad=0, dv=None, layout="hf"):
    """Additive bias through the lib (pt_test_set_bias): row b of the batch masks its first
    (or, right=True, last) round(pad_frac * b / (B - 1) * S) keys with -inf (0..75% by
    default, left padding as HF's), plus a random additive bias on the rest; broadcast over
    heads unless per_head. The bias rows are padded to a multiple of 8 keys as torch does.
    in_pad, dv, layout: as make_inputs (NaN past the head dim in q, k and v; v's head size; "mla"
    for DeepSeek-V3's v)."""
    if not wanted(D):
        return True
    Dv = dv or D
    # (the layout joins the seed only where it is not "hf": the earlier cases keep their inputs)
    torch.manual_seed(hash((B, S, Hk, G, D, str(dtype), sq, per_head, causal, right, in_pad, Dv)
                           + ((layout,) if layout != "hf" else ())) & 0xffffffff)
    scale = 1.0 / math.sqrt(D)
    q, k, v, o_full, o, lse = make_inputs(B, S, Hk, G, D, dtype, layout, sq, in_pad=in_pad, dv=Dv)
    H = Hk * G
    Sp = (S + 7) // 8 * 8
    full = torch.randn(B, H if per_head else 1, sq, Sp, device="cuda", dtype=dtype)
    bias = full[..., :S]
    for b in range(B):
        n = round(pad_frac * (b / max(B - 1, 1)) * S)
        n = min(n, S - 1)  # every row keeps a key: the reference has no empty rows
        if n:
            if right:
                bias[b, :, :, S - n:] = float("-inf")
            else:
                bias[b, :, :, :n] = float("-inf")
    ref_o, ref_lse = reference(q, k, v, scale, causal, bias)
    a = c.lib.args(q, k, v, o, lse, H, Hk, sq, scale, causal)
    name = "masked B%-2d S%-6d Hk%d G%d D%-3d%s %s%s%s%s%s%s" % (
        B, S, Hk, G, D, " v%d" % Dv if Dv != D else "", "bf16" if dtype == torch.bfloat16 else "fp16",
        " sq%d" % sq if sq > 1 else "",
        " per-head" if per_head else "", " causal" if causal else "", " right" if right else "",
        " ws" if cluster_max == 1 else "")
    if in_pad:
        name += " nan_pad"
    if layout != "hf":
        name += " " + layout
    if cluster_max is not None:
        c.lib.l.pt_test_set_cluster_max(cluster_max)
    try:
        with c.lib.bias(bias):
            c.poison(o_full, lse)
            c.lib.decode(a)
            torch.cuda.synchronize()
            eo, el = c.check_out(o_full, o, lse, ref_o, ref_lse, Dv)
            ok = c.record(name, eo, el)
            if graph:
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    c.lib.decode(a)
                c.poison(o_full, lse)
                g.replay()
                torch.cuda.synchronize()
                eo, el = c.check_out(o_full, o, lse, ref_o, ref_lse, Dv)
                ok &= c.record(name + " graph", eo, el)
    finally:
        if cluster_max is not None:
            c.lib.l.pt_test_set_cluster_max(CLUSTER_MAX)
    return ok


def decode_masked(c, a, bias, o_full, lse):
    """One eager launch of `a` with `bias` set in the lib, its outputs poisoned first; the bias is
    unset again whatever happens. Returns the plan (split count, cluster size) it was given."""
    with c.lib.bias(bias):
        plan = c.lib.plan(a)
        c.poison(o_full, lse)
        c.lib.decode(a)
        torch.cuda.synchronize()
    return plan


def row_empty(o, lse, b):
    """Batch row b of a launch whose keys were all masked: O exactly 0 and LSE -inf (no NaN)."""
    return bool((o[b] == 0).all()) and bool(torch.isinf(lse[b]).all() and (lse[b] < 0).all())


def masked_empty_row(c, D=128, dv=None):
    """A row whose keys are all masked: O = 0 and LSE = -inf (no NaN), the other rows exact."""
    if not wanted(D):
        return
    B, S, Hk, G, dtype = 2, 1000, 2, 2, torch.bfloat16
    q, k, v, o_full, o, lse = make_inputs(B, S, Hk, G, D, dtype, "hf", 1, dv=dv)
    H = Hk * G
    bias = torch.zeros(B, 1, 1, S + 8, device="cuda", dtype=dtype)[..., :S]
    bias[0] = float("-inf")
    a = c.lib.args(q, k, v, o, lse, H, Hk, 1, 1.0 / math.sqrt(D), False)
    decode_masked(c, a, bias, o_full, lse)
    ref_o, ref_lse = reference(q[1:], k[1:], v[1:], 1.0 / math.sqrt(D), False)
    ok = row_empty(o, lse, 0)
    eo, el = rel_err(o[1:], ref_o), rel_err(lse[1:], ref_lse)
    ok = ok and eo <= O_TOL and el <= LSE_TOL
    c.rows.append("masked: a fully masked row%s%s -> O 0, LSE -inf; other row O %.2e LSE %.2e  %s" % (
        "" if D == 128 else " D%d" % D, " v%d" % dv if dv and dv != D else "", eo, el, "ok" if ok else "FAIL"))
    c.failures += not ok


def mask_with_nan(bias, k, v, spans):
    """Masks keys (batch row b, key slice sl) for each (b, sl) in spans: bias -inf there, and K/V
    NaN, which a kernel must never read; returns the reference's K/V, with those keys zero."""
    kz, vz = k.clone(), v.clone()
    for b, sl in spans:
        bias[b, ..., sl] = float("-inf")
        k[b, sl] = float("nan")
        v[b, sl] = float("nan")
        kz[b, sl] = 0
        vz[b, sl] = 0
    return kz, vz


def masked_nan_edges(c):
    """Keys the mask narrows away are never used: K/V hold NaN there (left padding of row 0,
    right padding of row 1, ends that fall inside a 64-key tile and past a split's end), and O
    and LSE must equal the reference with those keys dropped. The edges are multiples of 8
    keys, the scan's grain (keys it lets back in are computed with P = 0, so a NaN there would
    reach O, as in torch's kernels). d 80, 96 (padded), 128, 256 and MLA's 192 / 128, cluster and
    workspace plans. A kernel that reads whole tiles, as a TMA form did, must zero what it read
    past the visible keys (bench/records/2026-12-02-decode-tma.md)."""
    for D, Dv in ((80, 80), (96, 96), (128, 128), (256, 256), (MLA_D, MLA_DV)):
        if not wanted(D):
            continue
        for cm in (1, CLUSTER_MAX):
            B, S, Hk, G, dtype = 2, 4000, 8, 1, torch.bfloat16
            torch.manual_seed(7 + D + cm)
            q, k, v, o_full, o, lse = make_inputs(B, S, Hk, G, D, dtype, "hf", 1, dv=Dv)
            H = Hk * G
            bias = torch.randn(B, 1, 1, S + 8, device="cuda", dtype=dtype)[..., :S]
            kz, vz = mask_with_nan(bias, k, v, ((0, slice(0, 200)), (1, slice(3304, S))))
            ref_o, ref_lse = reference(q, kz, vz, 1.0 / math.sqrt(D), False, bias)
            a = c.lib.args(q, k, v, o, lse, H, Hk, 1, 1.0 / math.sqrt(D), False)
            # 16 units of 63 tiles: a cluster of 8-tile splits, which the masked short-split
            # rule would send to the workspace; off here so the cluster merge is the one tested
            with c.lib.knobs(cluster_max=cm, masked_short=0):
                plan = decode_masked(c, a, bias, o_full, lse)
            eo, el = c.check_out(o_full, o, lse, ref_o, ref_lse, Dv)
            extra = "  plan %d splits, %s" % (plan[0], "cluster" if plan[1] > 1 else "workspace")
            if (plan[1] > 1) != (cm > 1):
                eo = float("inf")  # not the plan this case is for
                extra += " (expected the %s)" % ("cluster" if cm > 1 else "workspace")
            c.record("masked: NaN K/V in the narrowed-away keys D%d%s%s" % (
                D, " v%d" % Dv if Dv != D else "", " ws" if cm == 1 else ""), eo, el, extra)


def pair_edges(c, dtype, S, D=128, dv=None):
    """A launch planned as a pair (B 8 x Hk 8 units, d 128 or a head dim padded onto it, or
    MLA's 192 / 128 with dv): row 0
    left-padded by 200 keys, row 1 right-padded from key 3304, row 2 fully masked, the rest with
    a random bias. K/V hold NaN where masked (narrowed away, never read); row 2 must get O = 0
    and LSE = -inf, the others the reference with the masked keys dropped. Reports the plan, and
    fails when it is not a cluster of two (the shapes this group is for)."""
    if not wanted(D):
        return
    B, Hk, G = 8, 8, 2
    torch.manual_seed(11 + S + D)
    q, k, v, o_full, o, lse = make_inputs(B, S, Hk, G, D, dtype, "hf", 1, dv=dv)
    H = Hk * G
    bias = torch.randn(B, 1, 1, S + 8, device="cuda", dtype=dtype)[..., :S]
    kz, vz = mask_with_nan(bias, k, v, ((0, slice(0, 200)), (1, slice(3304, S)), (2, slice(0, S))))
    keep = [b for b in range(B) if b != 2]
    ref_o, ref_lse = reference(q[keep], kz[keep], vz[keep], 1.0 / math.sqrt(D), False, bias[keep])
    a = c.lib.args(q, k, v, o, lse, H, Hk, 1, 1.0 / math.sqrt(D), False)
    plan = decode_masked(c, a, bias, o_full, lse)
    eo, el = rel_err(o[keep], ref_o), rel_err(lse[keep], ref_lse)
    empty = row_empty(o, lse, 2)
    if not empty or plan[1] != 2:
        eo = float("inf")  # wrong output, or not the plan this case is for
    c.record("pair: NaN K/V where masked, a fully masked row, S%d %s%s%s" % (
        S, "bf16" if dtype == torch.bfloat16 else "fp16", "" if D == 128 else " D%d" % D,
        " v%d" % dv if dv and dv != D else ""), eo, el,
        "  plan %d splits, cluster %d%s" % (plan[0], plan[1], "" if empty else ", row 2 not O 0 / LSE -inf"))


def pair_cases(c):
    """Launches the planner gives clusters of two (64 units of d 128: B 8 x Hk 8, B 16 x Hk 4,
    B 64 x Hk 1; issue 17's B8 KV4k points), which no other case planned: odd and even tile
    counts (3, 65), every query-row count up to 16, masks (left, right, per head, NaN where
    masked, a fully masked row), causal rows, graph replay and bitwise repeats. They served the
    D-split pair experiment (bench/records/2026-12-03-decode-dsplit.md) and stay for the cluster
    merge."""
    for dtype in (torch.bfloat16, torch.float16):
        for S in (130, 1000, 4100):
            for G in (1, 8):
                c.case(8, S, 8, G, 128, dtype)
                masked_case(c, 8, S, 8, G, 128, dtype)
        pair_edges(c, dtype, 4000)
    c.case(8, 4096, 8, 16, 128, torch.bfloat16)
    c.case(16, 4100, 4, 8, 128, torch.bfloat16, layout="fa")
    c.case(64, 2000, 1, 8, 128, torch.float16)
    c.case(8, 1000, 8, 2, 128, torch.bfloat16, sq=4, causal=True)
    c.case(8, 4100, 8, 4, 128, torch.bfloat16, repeat=True, graph=True)
    masked_case(c, 8, 4100, 8, 4, 128, torch.bfloat16, per_head=True)
    masked_case(c, 8, 4100, 8, 4, 128, torch.bfloat16, right=True)
    masked_case(c, 8, 4100, 8, 2, 128, torch.bfloat16, sq=4, causal=True)
    masked_case(c, 8, 4100, 8, 4, 128, torch.float16, pad_frac=0.9, graph=True)


def kt_cases(c):
    """The keys-as-M layout (launches with at most 8 query rows per KV head,
    bench/records/2026-12-03-decode-kt.md): each thread holds two query rows (2t, 2t + 1), so
    odd row counts leave a lane's second row past the real ones; rows are (query position,
    head) pairs, so G and sq mix in them; every head_dim; per-head and broadcast biases (their
    staged row per query row differs); causal rows that see different key counts; 8 rows
    exactly, and 9 (the 16-row layout) beside it."""
    for D in (64, 80, 96, 128, 256):
        for G, sq, causal in ((3, 1, False), (5, 1, False), (7, 1, False), (8, 1, False),
                              (1, 3, True), (2, 3, True), (3, 2, True), (2, 4, False)):
            c.case(2, 1000, 2, G, D, torch.bfloat16, sq=sq, causal=causal)
            masked_case(c, 2, 1000, 2, G, D, torch.float16, sq=sq, causal=causal,
                        per_head=G % 2 == 1)
    c.case(2, 1000, 2, 9, 128, torch.bfloat16)
    c.case(1, 4100, 1, 3, 128, torch.float16, sq=3, causal=True)
    masked_case(c, 4, 4100, 2, 3, 128, torch.bfloat16, sq=3, causal=True, per_head=True)


def padded_cases(lib, c):
    """Head dims 80 (Phi-1.5/2: 32 heads of 80) and 96 (Phi-3-mini: 32 of 96), which run on the
    d = 128 kernel padded (issue 51): it copies only the real 16-byte chunks of each K/V row
    into tiles 128 wide whose padding columns each CTA zeroes once, and writes O, the
    workspace and the cluster partials DR wide. The cases look for what that could get wrong:
    - NaN past the head dim in q, k and v (nan_pad: a padding chunk read from global memory
      reaches O), on every plan (one split, a cluster, the workspace with its staged and its
      batched merge) and both loops (keys as M for <= 8 rows, rows as M past that), masked
      and not;
    - O inside a wider NaN-poisoned buffer (o_pad: a store of P V's padding columns shows);
    - many splits (the workspace partials are DR floats a row, the plan's size), graph replay
      and back-to-back launches (the zeroed padding must hold in every CTA of every launch);
    - the models' shapes without GQA (h = h_k = 32, HF's repeat_kv under a mask), GQA, swapped
      GQA decode, causal query rows, a fully masked row, the pair plan."""
    for D in PADDED:
        if not wanted(D):
            continue
        for dtype in (torch.bfloat16, torch.float16):
            for G in (1, 4, 8, 16):
                c.case(32, 1000, 8, G, D, dtype, in_pad=24, expect="one")
                c.case(2, 1000, 4, G, D, dtype, in_pad=24, layout="fa", expect="cluster")
                c.case(1, 32768, 2, G, D, dtype, in_pad=24, expect="ws")
                masked_case(c, 4, 4100, 2, G, D, dtype, in_pad=24, per_head=G == 4)
            c.case(3, 4100, 4, 4, D, dtype, layout="fa", o_pad=48)
            c.case(3, 4100, 4, 16, D, dtype, layout="fa", o_pad=48)
            c.case(1, 32768, 2, 8, D, dtype, o_pad=32, in_pad=8)
            c.case(2, 4100, 2, 8, D, dtype, scale=1.0)
            for B in (1, 8):
                c.case(B, 4100, 32, 1, D, dtype)                       # the models: 32 heads, no GQA
            masked_case(c, 8, 4100, 32, 1, D, dtype, in_pad=24)       # HF: K/V expanded by repeat_kv
            pair_edges(c, dtype, 4000, D)
        c.case(1, 131072, 2, 8, D, torch.bfloat16)
        for G in (4, 8, 16):
            c.case(8, 4100, 2, G, D, torch.bfloat16, swapped=True)
        c.case(2, 1000, 2, 4, D, torch.bfloat16, sq=4, causal=True)
        c.case(2, 17, 2, 1, D, torch.float16, sq=16, causal=True)
        c.case(2, 140, 2, 1, D, torch.bfloat16, sq=16, causal=True)  # row 0 sees no key of split 1
        c.case(8, 4100, 4, 8, D, torch.bfloat16, repeat=True, graph=True)
        c.case(2, 1000, 4, 4, D, torch.float16, repeat=True, graph=True, in_pad=24, expect="cluster")
        masked_case(c, 8, 4100, 8, 4, D, torch.bfloat16, right=True, in_pad=24)
        masked_case(c, 2, 1000, 2, 4, D, torch.bfloat16, sq=4, causal=True, per_head=True)
        masked_case(c, 8, 4100, 8, 4, D, torch.float16, pad_frac=0.9, graph=True)
        masked_empty_row(c, D)
        # Every merge through the workspace, with many splits: the staged merge (the partials in
        # the K/V ring) while they fit, the batched one past that; masked too.
        lib.l.pt_test_set_cluster_max(1)
        try:
            c.case(2, 1000, 4, 4, D, torch.bfloat16, layout="fa", in_pad=24, repeat=True, graph=True)
            for mul in (2, 4, 8):
                lib.l.pt_test_set_split_mul(mul)
                c.case(1, 32768, 2, 8, D, torch.bfloat16, in_pad=24, expect="ws")
                c.case(1, 131072, 1, 16, D, torch.float16, expect="ws")
                c.case(2, 70000, 1, 1, D, torch.bfloat16, expect="ws")
                masked_case(c, 2, 32768, 2, 8, D, torch.bfloat16, pad_frac=0.9, in_pad=24)
        finally:
            lib.l.pt_test_set_split_mul(1)
            lib.l.pt_test_set_cluster_max(CLUSTER_MAX)


def mla_cases(lib, c):
    """q/k head 192 with v head 128 (MLA: DeepSeek-V3 under Hugging Face's SDPA, 128 heads of
    their own), which runs on the d = 256 kernel padded (issue 51): K rows copy their 24 real
    16-byte chunks, V rows their 16, each tile kind's padding columns are zeroed once per CTA,
    and O, LSE, the workspace and the cluster partials are 128 wide. The reference takes v 128
    wide. Besides the main matrix (B x S x G, masked and not), the cases look for what separate
    K and V widths could get wrong:
    - one width taken for the other: NaN past 192 in q and k and past 128 in v (nan_pad), on
      every plan (one split, a cluster, the workspace with its staged and its batched merge)
      and both loops (keys as M for <= 8 rows, rows as M past that), masked and not;
    - O past 128 (o_pad: a store of P V's padding columns shows), the partials at the wrong
      width (many splits), graph replay and back-to-back launches (the zeroed padding must hold
      in every CTA of every launch);
    - the model's shapes (h = h_k = 128, its padding mask through SDPA, speculative rows with
      causal), GQA and swapped GQA (not DeepSeek's, but the kernel takes them), odd row counts
      of the keys-as-M loop, a fully masked row, NaN K/V in narrowed-away keys (in
      masked_nan_edges), the pair plan."""
    D, DV = MLA_D, MLA_DV
    if not wanted(D):
        return
    bf, fp = torch.bfloat16, torch.float16
    for dtype in (bf, fp):
        for B in (1, 8, 32):
            for S in (1, 17, 1000, 4100, 32768):
                for G in (1, 4, 8):
                    Hk = 2 if B * S >= 8 * 32768 else 4
                    c.case(B, S, Hk, G, D, dtype, dv=DV)
                    if S > 1:
                        masked_case(c, B, S, Hk, G, D, dtype, dv=DV)
    for dtype in (bf, fp):
        for G in (1, 4, 8, 16):
            c.case(32, 1000, 8, G, D, dtype, in_pad=24, expect="one", dv=DV)
            c.case(2, 1000, 4, G, D, dtype, in_pad=24, layout="fa", expect="cluster", dv=DV)
            c.case(1, 32768, 2, G, D, dtype, in_pad=24, expect="ws", dv=DV)
            masked_case(c, 4, 4100, 2, G, D, dtype, in_pad=24, per_head=G == 4, dv=DV)
        c.case(3, 4100, 4, 4, D, dtype, layout="fa", o_pad=64, dv=DV)
        c.case(3, 4100, 4, 16, D, dtype, layout="fa", o_pad=64, dv=DV)
        c.case(1, 32768, 2, 8, D, dtype, o_pad=32, in_pad=8, dv=DV)
        c.case(2, 4100, 2, 8, D, dtype, scale=1.0, dv=DV)
        for B in (1, 8):
            c.case(B, 4100, 128, 1, D, dtype, in_pad=24, dv=DV)       # the model: 128 heads, no GQA
        c.case(2, 4100, 128, 1, D, dtype, sq=2, causal=True, dv=DV)  # a speculative token
        masked_case(c, 8, 4100, 128, 1, D, dtype, in_pad=24, dv=DV)   # HF SDPA's padding mask
        # The model's own V (the second half of each [k_nope | v] row, NaN in the first), at the
        # family check's geometry (B 4, 16 heads, 513-543 keys, the padded batch's mask) and at
        # the real model's 128 heads.
        for S in (513, 543):
            c.case(4, S, 16, 1, D, dtype, layout="mla", dv=DV)
            masked_case(c, 4, S, 16, 1, D, dtype, pad_frac=192 / S, layout="mla", dv=DV)
        c.case(8, 4100, 128, 1, D, dtype, layout="mla", dv=DV)
        pair_edges(c, dtype, 4000, D, DV)
    c.case(1, 131072, 2, 8, D, bf, dv=DV)
    for G in (4, 8, 16):
        c.case(8, 4100, 2, G, D, bf, swapped=True, dv=DV)
    c.case(2, 1000, 2, 4, D, bf, sq=4, causal=True, dv=DV)
    c.case(2, 17, 2, 1, D, fp, sq=16, causal=True, dv=DV)
    c.case(2, 140, 2, 1, D, bf, sq=16, causal=True, dv=DV)  # row 0 sees no key of split 1
    c.case(8, 4100, 4, 8, D, bf, repeat=True, graph=True, dv=DV)
    c.case(2, 1000, 4, 4, D, fp, repeat=True, graph=True, in_pad=24, expect="cluster", dv=DV)
    masked_case(c, 8, 4100, 8, 4, D, bf, right=True, in_pad=24, dv=DV)
    masked_case(c, 2, 1000, 2, 4, D, bf, sq=4, causal=True, per_head=True, dv=DV)
    masked_case(c, 8, 4100, 8, 4, D, fp, pad_frac=0.9, graph=True, dv=DV)
    masked_empty_row(c, D, DV)
    # The keys-as-M loop's odd row counts and (query position, head) rows, 9 rows beside them.
    for G, sq, causal in ((3, 1, False), (5, 1, False), (7, 1, False), (8, 1, False),
                          (1, 3, True), (2, 3, True), (3, 2, True), (2, 4, False)):
        c.case(2, 1000, 2, G, D, bf, sq=sq, causal=causal, dv=DV)
        masked_case(c, 2, 1000, 2, G, D, fp, sq=sq, causal=causal, per_head=G % 2 == 1, dv=DV)
    c.case(2, 1000, 2, 9, D, bf, dv=DV)
    # Every merge through the workspace: the cluster shapes without clusters, then many splits
    # (the staged merge while the partials fit the K/V ring, the batched one past that).
    lib.l.pt_test_set_cluster_max(1)
    try:
        for dtype in (bf, fp):
            c.case(1, 1000, 4, 4, D, dtype, layout="fa", expect="ws", dv=DV)
            c.case(8, 4100, 4, 8, D, dtype, dv=DV)
        c.case(2, 1000, 4, 4, D, bf, layout="fa", in_pad=24, repeat=True, graph=True, dv=DV)
        masked_case(c, 2, 4100, 2, 8, D, bf, pad_frac=0.9, dv=DV)
        for mul in (2, 4, 8):
            lib.l.pt_test_set_split_mul(mul)
            c.case(1, 32768, 2, 8, D, bf, in_pad=24, expect="ws", dv=DV)
            c.case(1, 131072, 1, 16, D, fp, expect="ws", dv=DV)
            c.case(2, 70000, 1, 1, D, bf, expect="ws", dv=DV)
            masked_case(c, 2, 32768, 2, 8, D, bf, pad_frac=0.9, in_pad=24, dv=DV)
    finally:
        lib.l.pt_test_set_split_mul(1)
        lib.l.pt_test_set_cluster_max(CLUSTER_MAX)


def masked_correctness(c):
    """Issue 17's grid for the masked kernel: left padding 0-75% of the keys per row, random
    additive bias, broadcast and per head, GQA, several query rows, causal, splits through the
    cluster and the workspace, right padding, graph replay, an empty row."""
    for dtype in (torch.bfloat16, torch.float16):
        for D in (64, 80, 96, 128):
            for B in (1, 8, 32):
                for S in (17, 1000, 4100, 32768):
                    for G in (1, 4, 8):
                        Hk = 2 if B * S >= 8 * 32768 else 4
                        masked_case(c, B, S, Hk, G, D, dtype)
    masked_case(c, 8, 4100, 4, 4, 128, torch.bfloat16, per_head=True)
    masked_case(c, 8, 4100, 32, 1, 128, torch.bfloat16)  # HF: K/V expanded by repeat_kv
    masked_case(c, 4, 2048, 2, 4, 128, torch.bfloat16, sq=4)
    masked_case(c, 2, 1000, 2, 4, 128, torch.bfloat16, sq=4, causal=True)
    masked_case(c, 8, 4100, 4, 8, 128, torch.bfloat16, right=True)
    masked_case(c, 8, 32768, 2, 8, 128, torch.float16, graph=True)
    masked_case(c, 1, 32768, 4, 4, 256, torch.bfloat16)
    # head_dim 256 (Gemma) with several padded rows, short and long: on 2026-12-07 a Gemma-shaped
    # model's padded batch (B 4, ~520 keys, 8 heads, no grouping) parted from stock at its first
    # decode step under the shim, where only B = 1 had been checked at d = 256.
    for dtype in (torch.bfloat16, torch.float16):
        for B in (4, 8):
            for S in (17, 520, 4100):
                for G in (1, 4):
                    masked_case(c, B, S, 8 if G == 1 else 2, G, 256, dtype)
    for S in (513, 514, 543):  # the family check's Gemma exactly: row b padded by 64 b keys of 512 + steps
        masked_case(c, 4, S, 8, 1, 256, torch.bfloat16, pad_frac=192 / S)
    masked_case(c, 4, 520, 4, 2, 256, torch.bfloat16)  # gemma2 / gemma3_text: 8 heads on 4 KV heads
    masked_case(c, 4, 520, 4, 2, 256, torch.float16)
    masked_case(c, 4, 520, 8, 1, 256, torch.bfloat16, per_head=True)
    masked_case(c, 4, 520, 8, 1, 256, torch.bfloat16, graph=True)
    for cm in (1, CLUSTER_MAX):  # workspace merge, then cluster merge
        masked_case(c, 2, 4100, 2, 8, 128, torch.bfloat16, cluster_max=cm, pad_frac=0.9)
        masked_case(c, 1, 1000, 4, 4, 64, torch.float16, cluster_max=cm, pad_frac=0.9)
    masked_empty_row(c)
    masked_nan_edges(c)
    pair_cases(c)
    kt_cases(c)


def correctness(lib):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    c = Checker(lib)
    # The brief's matrix: B x KV x G x D x dtype, HF layout (80 and 96: issue 51's padded kernels).
    for dtype in (torch.bfloat16, torch.float16):
        for D in (64, 80, 96, 128):
            for B in (1, 8, 32):
                for S in (1, 17, 1000, 4100, 32768):
                    for G in (1, 4, 8):
                        Hk = 2 if B * S >= 8 * 32768 else 4
                        c.case(B, S, Hk, G, D, dtype)
    # head_dim 256, FA layout, strided O, scales that stress the running max; no grouping (one
    # row per KV head, Gemma's 8 heads) too.
    for dtype in (torch.bfloat16, torch.float16):
        c.case(4, 520, 8, 1, 256, dtype)
        c.case(4, 520, 4, 2, 256, dtype)
        c.case(1, 4100, 2, 8, 256, dtype)
        c.case(8, 1000, 4, 4, 256, dtype, layout="fa")
        c.case(2, 32768, 1, 16, 256, dtype)
        c.case(3, 4100, 4, 4, 128, dtype, layout="fa", o_pad=64)
        c.case(2, 4100, 2, 8, 128, dtype, scale=1.0)
        c.case(2, 70000, 1, 1, 64, dtype, scale=0.5)
    # seqlen_k up to 131072, G=16, h_k 8 as in the timing shapes.
    c.case(1, 131072, 2, 8, 128, torch.bfloat16)
    c.case(4, 4096, 8, 16, 128, torch.bfloat16)
    # ngroups-swapped layout (seqlen_q = G, h = h_k) as torch's flash GQA decode.
    for G in (4, 8, 16):
        for S in (17, 4100, 32768):
            c.case(8, S, 2, G, 128, torch.bfloat16, swapped=True)
    c.case(4, 1000, 4, 8, 64, torch.float16, swapped=True)
    # causal (bottom-right aligned), seqlen_q > 1.
    c.case(2, 1000, 2, 4, 128, torch.bfloat16, sq=4, causal=True)
    c.case(2, 17, 2, 1, 128, torch.float16, sq=16, causal=True)
    c.case(1, 4100, 1, 2, 64, torch.bfloat16, sq=8, causal=True)
    c.case(3, 65, 2, 1, 128, torch.bfloat16, sq=16, causal=True, layout="fa")
    c.case(1, 16, 1, 1, 128, torch.float16, sq=16, causal=True)
    # Every rows-as-M kernel (more than 8 rows a KV head) gets a case: fp16 at d = 64 had none.
    c.case(2, 1000, 2, 1, 64, torch.float16, sq=16, causal=True)
    c.case(2, 4100, 2, 16, 64, torch.float16)
    c.case(2, 1000, 2, 4, 128, torch.bfloat16, sq=4)
    # Self-resetting counters: back to back, and inside a replayed graph.
    c.case(8, 4100, 4, 8, 128, torch.bfloat16, repeat=True, graph=True)
    c.case(1, 32768, 2, 4, 128, torch.float16, repeat=True, graph=True)
    c.case(32, 1000, 8, 1, 64, torch.bfloat16, repeat=True, graph=True)
    # Shapes of 2..8 splits merge in a cluster by default; the same shapes
    # through the workspace path (cluster merge off) must agree too.
    lib.l.pt_test_set_cluster_max(1)
    try:
        for dtype in (torch.bfloat16, torch.float16):
            for D in (64, 80, 96, 128, 256):
                c.case(1, 1000, 4, 4, D, dtype, layout="fa")
                c.case(8, 4100, 4, 8, D, dtype)
        c.case(8, 4100, 4, 8, 128, torch.bfloat16, repeat=True, graph=True)
        c.case(2, 1000, 2, 4, 128, torch.bfloat16, sq=4, causal=True)
    finally:
        lib.l.pt_test_set_cluster_max(CLUSTER_MAX)
    # Cluster path with every head_dim, causal rows that see no key in some
    # splits, and graph replay.
    for D in (64, 80, 96, 128, 256):
        c.case(1, 1000, 4, 4, D, torch.float16, layout="fa")
    c.case(2, 140, 2, 1, 128, torch.bfloat16, sq=16, causal=True)  # row 0 sees no key of split 1
    c.case(8, 4100, 4, 4, 128, torch.bfloat16, repeat=True, graph=True)
    # The workspace merge with many splits: several rounds of loads per thread and several
    # item passes (up to PT_ATTN_MAX_SPLITS splits and 16 rows), masked too.
    lib.l.pt_test_set_cluster_max(1)
    try:
        for mul in (2, 4, 8):
            lib.l.pt_test_set_split_mul(mul)
            c.case(1, 32768, 2, 8, 128, torch.bfloat16)
            c.case(1, 131072, 1, 16, 128, torch.float16)
            c.case(2, 70000, 1, 1, 64, torch.bfloat16)
            c.case(1, 32768, 2, 4, 256, torch.bfloat16)
            masked_case(c, 2, 32768, 2, 8, 128, torch.bfloat16, pad_frac=0.9)
            masked_case(c, 1, 32768, 1, 16, 128, torch.float16, per_head=True)
    finally:
        lib.l.pt_test_set_split_mul(1)
        lib.l.pt_test_set_cluster_max(CLUSTER_MAX)
    masked_correctness(c)
    padded_cases(lib, c)
    mla_cases(lib, c)
    compare_tests(lib, c)
    return c


def compare_tests(lib, c):
    """Verify-mode compare kernel: equal -> 0, planted differences found, NaN -> inf; at d 128,
    and with MLA's head sizes (q/k 192, O 128 wide: a compare that took q/k's width would read
    the reference's columns past 128, random here, and find the equal O unequal)."""
    torch.manual_seed(7)
    B, H, D = 4, 16, 128
    stream = torch.cuda.current_stream().cuda_stream
    for dtype in (torch.bfloat16, torch.float16):
        for hd, dv in ((D, 0), (MLA_D, MLA_DV)):
            if not wanted(hd):
                continue
            ref_full = torch.randn(B, 1, H, D + 64, device="cuda", dtype=dtype)
            ref = ref_full[..., :D]
            ref_lse = torch.randn(B, H, 1, device="cuda") + 5
            st = (ctypes.c_int64 * 3)(ref.stride(0), ref.stride(1), ref.stride(2))
            res = torch.empty(4, device="cuda")

            def run(test, test_lse):
                res.fill_(-1.0)
                rc = lib.l.pt_test_compare(ref.data_ptr(), ref_lse.data_ptr(), test.data_ptr(),
                                           test_lse.data_ptr(), DT[dtype], B, H, 1, hd, st,
                                           res.data_ptr(), stream, dv)
                torch.cuda.synchronize()
                if rc != 0:
                    raise RuntimeError("compare launch: CUresult %d" % rc)
                return res.tolist()

            tag = ("bf16" if dtype == torch.bfloat16 else "fp16") + (" d%d v%d" % (hd, dv) if dv else "")
            t, tl = ref.contiguous(), ref_lse.clone()
            r = run(t, tl)
            ok = r[0] == 0 and r[2] == 0 and abs(r[1] - ref.float().abs().max().item()) < 1e-6 \
                and abs(r[3] - ref_lse.abs().max().item()) < 1e-6
            c.rows.append("compare %-13s equal        -> %s  %s" % (tag, r, "ok" if ok else "FAIL"))
            c.failures += not ok
            t2 = t.clone()
            t2[2, 0, 7, 33] += 0.75
            tl2 = tl.clone()
            tl2[1, 3, 0] += 0.125
            r = run(t2, tl2)
            ok = 0.5 < r[0] < 1.0 and abs(r[2] - 0.125) < 1e-3
            c.rows.append("compare %-13s planted diff -> %s  %s" % (tag, r, "ok" if ok else "FAIL"))
            c.failures += not ok
            t3 = t.clone()
            t3[3, 0, 15, 127] = float("nan")
            tl3 = tl.clone()
            tl3[0, 0, 0] = float("nan")
            r = run(t3, tl3)
            ok = math.isinf(r[0]) and math.isinf(r[2])
            c.rows.append("compare %-13s NaN          -> %s  %s" % (tag, r, "ok" if ok else "FAIL"))
            c.failures += not ok

def sync(what, timeout=30.0):
    """Waits for the current stream without hanging the check: a kernel that deadlocks (a test
    build's watchdog traps after seconds, but a launch could still spin) ends the process with
    "HANG" and a message instead of running into the device call's limit. Shared by
    prefill_check.py and prefill_swap.py."""
    ev = torch.cuda.Event()
    ev.record()
    t0 = time.time()
    while not ev.query():
        if time.time() - t0 > timeout:
            print("HANG: %s did not finish in %.0f s; stopping" % (what, timeout), flush=True)
            os._exit(3)
        time.sleep(0.001)
    torch.cuda.synchronize()  # raises the launch's error, if any (e.g. the watchdog's trap)


def graph_time(fn, calls=20, replays=9, warm=3, eager=2):
    """Median GPU time per call (µs) of `calls` launches of fn(i) captured in one graph, after
    `eager` calls on a side stream (torch's warm-up before a capture) and `warm` replays.
    Also used by prefill_check.py."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(eager):
            fn(i)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(i)
    for _ in range(warm):
        g.replay()
    times = []
    for _ in range(replays):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        busy()
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1000.0 / calls)
    times.sort()
    return times[len(times) // 2]


def graph_times(fns, calls=20, replays=9, warm=3, eager=2):
    """graph_time for several implementations at once, their replays interleaved: round r
    times each graph once, in an order shuffled for r (seeded: the same orders in every run).
    Timed one after the other, a later implementation runs on a card that has heated up (a 10 %
    spread between two timings of one build was seen on long prefill launches); interleaved,
    every implementation sees the same conditions. The order is shuffled, not rotated: a
    rotation keeps each graph's predecessor, and what ran just before matters on long launches
    (two timings of one build, the second always right after the first, differed by up to 6 %
    on prefill launches of over 10 ms: bench/records/2026-12-02-prefill-default.md).
    fns: {name: fn(i)}; returns {name: median µs per call}."""
    graphs = capture_graphs(fns, calls, eager)
    try:
        return replay_times(graphs, calls, replays, warm)
    finally:
        del graphs


def capture_graphs(fns, calls=20, eager=2):
    """{name: a CUDA graph of `calls` launches of fn(i)}, each after `eager` calls on a side
    stream (torch's warm-up before a capture)."""
    graphs = {}
    for name, fn in fns.items():
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for i in range(eager):
                fn(i)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(calls):
                fn(i)
        graphs[name] = g
    return graphs


def replay_times(graphs, calls=20, replays=9, warm=3):
    """graph_times' timing of captured graphs: `warm` replays of each, then `replays` rounds in
    seeded shuffled orders; {name: median µs per call}."""
    names = list(graphs)
    for _ in range(warm):
        for name in names:
            graphs[name].replay()
    times = {name: [] for name in names}
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for r in range(replays):
        order = list(names)
        random.Random(r).shuffle(order)
        for name in order:
            busy()
            e0.record()
            graphs[name].replay()
            e1.record()
            e1.synchronize()
            times[name].append(e0.elapsed_time(e1) * 1000.0 / calls)
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def bandwidth(out_rows):
    """The memory ceilings of this card as torch reaches them: a copy (bytes
    read + written) and a read-only reduction, 4 GiB each, graph replay."""
    x = torch.randn(1 << 31, device="cuda", dtype=torch.bfloat16)
    x_bytes = x.numel() * 2
    y = torch.empty_like(x)
    t_copy = graph_time(lambda i: y.copy_(x), calls=5)
    t_sum = graph_time(lambda i: x.sum(dtype=torch.float32), calls=5)
    out_rows.append("device copy %.2f TB/s (read+write), read-only sum %.2f TB/s" % (
        2 * x.numel() * 2 / t_copy / 1e6, x.numel() * 2 / t_sum / 1e6))
    print(out_rows[-1], flush=True)
    del x, y
    torch.cuda.empty_cache()
    return x_bytes / t_sum * 1e6


def read_time(nbytes, nsets):
    """One torch kernel reading nbytes (a read-only sum, bf16 into fp32), rotated over nsets
    buffers like the attention inputs, by graph replay: what this card takes to read that
    many bytes in one launch, launch and ramp included. Beside the floor (bytes at the peak
    read bandwidth) it tells how much of a kernel's distance to the floor no kernel of that
    size avoids."""
    n = max(1, nbytes // 2)
    bufs = torch.randn(nsets, n, device="cuda", dtype=torch.bfloat16)
    t = graph_time(lambda i: bufs[i % nsets].sum(dtype=torch.float32))
    del bufs
    return t


def decode_sets(lib, nsets, B, H, Hk, S, D, DV, dtype):
    """nsets copies of random decode inputs for the timing tables (one query position; q/k D
    wide, v and O DV), each as (q, k, v, the test library's args, o, lse): o and lse ride along
    because args holds only their addresses, and freed they would be torch's to hand out again
    (the timed launches would write into other tensors)."""
    sets = []
    for _ in range(nsets):
        q = torch.randn(B, H, 1, D, device="cuda", dtype=dtype)
        k = torch.randn(B, Hk, S, D, device="cuda", dtype=dtype)
        v = torch.randn(B, Hk, S, DV, device="cuda", dtype=dtype)
        o = torch.empty(B, 1, H, DV, device="cuda", dtype=dtype)
        lse = torch.empty(B, H, 1, device="cuda")
        sets.append((q, k, v, padded_args(lib, q, k, v, o, lse), o, lse))
    return sets


def timing(lib, out_rows):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    bandwidth(out_rows)
    D, dtype = 128, torch.bfloat16
    hdr = "%3s %6s %2s %9s | %9s %6s | %9s %6s | %9s %6s | %3s | %7s %7s" % (
        "B", "KV", "G", "floor us", "ponytail", "xfl", "flash", "xfl", "cudnn", "xfl", "win",
        "ns/2", "c16") + " %7s %7s %7s" % ("noclu", "pdl", "read")
    out_rows.append(hdr)
    worst = []
    points = [(B, S, G, 8) for B in (1, 8, 32) for S in (1024, 4096, 32768) for G in (1, 4, 8)]
    # Extra rows: the launch floor (64 keys) and workload W's shape (B=8,
    # KV 4100, 4 KV heads, G=4, the in-model layer of FACTS.md).
    points += [(1, 64, 1, 8), (1, 64, 8, 8), (8, 4100, 4, 4)]
    for n, (B, S, G, Hk) in enumerate(points):
        if n == 27:
            out_rows.append("extra (not in the goal table): B KV G with Hk 8, 8, 4")
        H = Hk * G
        kv_bytes = 2 * B * Hk * S * D * 2
        floor = kv_bytes / HBM * 1e6
        nsets = max(1, min(20, math.ceil((256 << 20) / kv_bytes)))
        torch.manual_seed(B * 1000 + S + G)
        sets = decode_sets(lib, nsets, B, H, Hk, S, D, D, dtype)
        lib.decode(sets[0][3])
        res = {}
        res["pt"] = graph_time(lambda i: lib.decode(sets[i % nsets][3]))
        lib.l.pt_test_set_split_div(2)  # half the planned splits
        res["w2"] = graph_time(lambda i: lib.decode(sets[i % nsets][3]))
        lib.l.pt_test_set_split_div(1)
        lib.l.pt_test_set_cluster_max(16)  # clusters of up to 16 (non-portable size)
        res["c16"] = graph_time(lambda i: lib.decode(sets[i % nsets][3]))
        lib.l.pt_test_set_cluster_max(1)  # no cluster: the workspace path's plan
        res["noclu"] = graph_time(lambda i: lib.decode(sets[i % nsets][3]))
        lib.l.pt_test_set_cluster_max(CLUSTER_MAX)
        lib.l.pt_test_set_pdl(1)  # programmatic dependent launch: the planned launch, overlapped
        res["pdl"] = graph_time(lambda i: lib.decode(sets[i % nsets][3]))
        lib.l.pt_test_set_pdl(0)
        res["read"] = read_time(kv_bytes, nsets)
        for name, be in (("flash", SDPBackend.FLASH_ATTENTION),
                         ("cudnn", SDPBackend.CUDNN_ATTENTION)):
            try:
                def f(i, be=be):
                    q, k, v = sets[i % nsets][:3]
                    with sdpa_kernel(be):
                        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
                res[name] = graph_time(f)
            except Exception as e:  # a peer that cannot run this shape
                res[name] = float("nan")
                print("  %s failed at B%d S%d G%d: %s" % (name, B, S, G,
                                                         str(e).splitlines()[0]))
        peers = [x for x in (res["flash"], res["cudnn"]) if not math.isnan(x)]
        win = all(res["pt"] < x for x in peers)
        row = "%3d %6d %2d %9.1f | %9.1f %6.2f | %9.1f %6.2f | %9.1f %6.2f | %3s | %7.1f %7.1f" % (
            B, S, G, floor, res["pt"], res["pt"] / floor, res["flash"],
            res["flash"] / floor, res["cudnn"], res["cudnn"] / floor,
            "yes" if win else "NO", res["w2"], res["c16"]) + " %7.1f %7.1f %7.1f" % (
                res["noclu"], res["pdl"], res["read"])
        if floor >= 25 and res["pt"] / floor > 1.15:
            row += "  >1.15x floor"
        out_rows.append(row)
        print(row, flush=True)
        worst.append(res["pt"] / floor if floor >= 25 else 0)
        del sets
        torch.cuda.empty_cache()
    return worst


def dims_timing(lib, out_rows):
    """Issue 51's head sizes by graph replay (bf16, unmasked, one query position): head_dim 80
    and 96 on the d = 128 kernel, q/k 192 with v 128 (MLA) on the d = 256 one, against torch's
    flash (equal sizes only), cuDNN and mem-efficient kernels on the same inputs (mem-efficient
    with K/V repeated to the query heads, as HF's repeat_kv hands them over: it takes no GQA);
    the floor is the K and V bytes at HBM bandwidth. A peer that refuses a shape reads nan.
    The grid is issue 51's: B in {1, 8, 32} x KV in {1k, 8k, 32k} for each shape, with the heads
    of the families that run it: 32 KV heads without grouping at d 80 and 96 (Phi-2, Phi-3 mini,
    StableLM: multi-head), 16 at q/k 192 v 128 (the family check's DeepSeek-V3; the real model's
    128 heads would need 85 GB of K/V at B 32 x 32k)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    bandwidth(out_rows)
    out_rows.append("%7s %3s %6s %2s %2s %9s | %9s %6s | %9s %9s %9s | %s" % (
        "d", "B", "KV", "Hk", "G", "floor us", "ponytail", "xfl", "flash", "cudnn", "mem-eff", "best peer/pt"))
    dtype = torch.bfloat16
    for D, DV, Hk in ((80, 80, 32), (96, 96, 32), (MLA_D, MLA_DV, 16)):
        for B, S, G in [(B, S, 1) for B in (1, 8, 32) for S in (1024, 8192, 32768)]:
            H = Hk * G
            kv_bytes = B * Hk * S * (D + DV) * 2
            floor = kv_bytes / HBM * 1e6
            nsets = max(1, min(20, math.ceil((256 << 20) / kv_bytes)))
            torch.manual_seed(B * 1000 + S + G + D)
            sets = decode_sets(lib, nsets, B, H, Hk, S, D, DV, dtype)
            lib.decode(sets[0][3])
            res = {"pt": graph_time(lambda i: lib.decode(sets[i % nsets][3]))}
            peers = [("flash", SDPBackend.FLASH_ATTENTION, True), ("cudnn", SDPBackend.CUDNN_ATTENTION, True),
                     ("mem-eff", SDPBackend.EFFICIENT_ATTENTION, False)]
            for name, be, gqa in peers:
                if name == "flash" and D != DV:
                    res[name] = float("nan")
                    continue
                try:
                    if gqa or G == 1:
                        kv = [(s[1], s[2]) for s in sets]
                    else:  # expanded once, outside the timed graph
                        kv = [(s[1].repeat_interleave(G, 1), s[2].repeat_interleave(G, 1)) for s in sets]

                    def f(i, be=be, gqa=gqa, kv=kv):
                        q = sets[i % nsets][0]
                        k, v = kv[i % nsets]
                        with sdpa_kernel(be):
                            return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
                    res[name] = graph_time(f)
                    del kv
                except Exception as e:  # a peer that cannot run this shape
                    res[name] = float("nan")
                    print("  %s refused d %d/%d B%d S%d G%d: %s" % (name, D, DV, B, S, G,
                                                                  str(e).splitlines()[0]))
            best = min((x for n, x in res.items() if n != "pt" and not math.isnan(x)), default=float("nan"))
            row = "%7s %3d %6d %2d %2d %9.1f | %9.1f %6.2f | %9.1f %9.1f %9.1f | %s" % (
                "%d/%d" % (D, DV) if D != DV else str(D), B, S, Hk, G, floor, res["pt"], res["pt"] / floor,
                res["flash"], res["cudnn"], res["mem-eff"],
                "%.2f" % (best / res["pt"]) if not math.isnan(best) else "-")
            out_rows.append(row)
            print(row, flush=True)
            del sets
            torch.cuda.empty_cache()


def padded_inputs(B, S, G, Hk, D, dtype, masked):
    """The masked grid's decode inputs: q [B, H, 1, D], k/v [B, Hk, S, D] (the kernel sees them
    transposed, HF layout), o [B, 1, H, D], lse [B, H, 1]; with masked, half the rows (the odd
    ones) left-padded by 25% of the keys, as a bool mask `keep` [B, 1, 1, S] for torch's SDPA and
    the same as an additive bias (rows padded to a multiple of 8 keys, as torch pads them).
    Returns (q, k, v, o, lse, keep, bias, keys): keep and bias None unmasked; keys the K/V rows
    that must be read."""
    H = Hk * G
    pad = [S // 4 if (b % 2 and masked) else 0 for b in range(B)]
    torch.manual_seed(B * 1000 + S + G)
    q = torch.randn(B, H, 1, D, device="cuda", dtype=dtype)
    k = torch.randn(B, Hk, S, D, device="cuda", dtype=dtype)
    v = torch.randn(B, Hk, S, D, device="cuda", dtype=dtype)
    o = torch.empty(B, 1, H, D, device="cuda", dtype=dtype)
    lse = torch.empty(B, H, 1, device="cuda")
    keep = bias = None
    if masked:
        keep = torch.ones(B, 1, 1, S, dtype=torch.bool, device="cuda")
        for b, n in enumerate(pad):
            keep[b, ..., :n] = False
        bias = torch.zeros(B, 1, 1, (S + 7) // 8 * 8, device="cuda", dtype=dtype)[..., :S]
        bias.masked_fill_(keep.logical_not(), float("-inf"))
    return q, k, v, o, lse, keep, bias, sum(S - n for n in pad)


def padded_args(lb, q, k, v, o, lse):
    """lb.args for q [B, H, 1, D], k/v [B, Hk, S, D], o [B, 1, H, D] as padded_inputs and timing()
    make them (HF layout, seen through transposes): one query
    position, GQA from the head counts, scale 1/sqrt(d), not causal."""
    H, Hk, D = q.shape[1], k.shape[1], q.shape[3]
    return lb.args(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), o, lse, H, Hk, 1,
                   1.0 / math.sqrt(D), False)


def torch_masked(name, q, k, v, keep):
    """fn(i) running torch's SDPA on q [B, H, 1, D], k/v [B, Hk, S, D] and the bool mask keep, as
    the masked grid times torch: name "mem_eff" (the mem-efficient kernel, K/V expanded to the
    query heads, as HF's repeat_kv gives it; the expanded copies are made here, once) or "cudnn"
    (cuDNN's masked path, GQA)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    import torch.nn.functional as F
    gqa = name == "cudnn"
    be = SDPBackend.CUDNN_ATTENTION if gqa else SDPBackend.EFFICIENT_ATTENTION
    if not gqa:
        G = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)

    def f(i):
        with sdpa_kernel(be):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=gqa)
    return f


def masked_timing(lib, out_rows):
    """Issue 17's speed grid: B in {1, 8, 32} x KV in {1k, 4k, 32k} x G in {1, 4, 8}, 8 KV heads,
    d 128, bf16, half the rows left-padded by 25% of the keys (a bool mask broadcast over heads).
    Ponytail's kernel (additive bias, K/V unexpanded) against torch's mem-efficient kernel
    (K/V expanded to the query heads, as HF's repeat_kv gives it) and cuDNN (GQA) on the same
    mask, by graph replay. Floor: the K/V bytes that must be read (unmasked keys, each KV head
    once) at the read bandwidth measured in the same run (the issue's definition). Goals: faster
    than both at every point; <= 1.2x the floor where the floor is >= 25 us.
    Ponytail's figure (column ponytail) is timed as torch's two are: its graph replayed alone
    (graph_time's method), right after the plan columns. Those are timed interleaved, for their
    comparison with each other: the planned launch (intl), the workspace plan (noclu) and 2x / 4x
    its splits. Interleaved with the workspace plans the planned launch read 0.2-0.3 us more than
    alone at B8 KV4k, every G (bench/records/2026-12-03-masked-places.md); until then the
    headline was the interleaved figure, a method torch's kernels were not timed by."""
    D, dtype, Hk = 128, torch.bfloat16, 8
    # ATTN_GRID_PLACES=N (default 1): Ponytail's planned launch also on N - 1 copies of K/V, each
    # in an allocation of its own, timed interleaved with the rest; the row then ends with the
    # min / median / max over the N places and the median's ratio to the floor. Where K/V lie
    # moved one launch by 0.3-0.6 us (bench/records/2026-12-03-decode-clocks.md, masked-place); in
    # the grid five places agreed within 0.1 us at the latency-bound points
    # (bench/records/2026-12-03-masked-places.md).
    # Then "after": the planned launch alone once more, after the point's mem-efficient and cuDNN
    # runs (whether what those leave behind moves it). A second line per point gives
    # each place's time and torch's read-only sum of that place's whole K and V (timed
    # interleaved with the rest): if the launch is slow where torch's read is slow, the place,
    # not the kernel, costs the time.
    places = max(1, int(os.environ.get("ATTN_GRID_PLACES", "1")))
    read_bw = bandwidth(out_rows)
    hdr = "%3s %6s %2s %9s | %9s %6s | %9s %6s | %9s %6s | %3s | %7s %7s %7s" % (
        "B", "KV", "G", "floor us", "ponytail", "xfl", "mem-eff", "xfl", "cudnn", "xfl", "win", "intl",
        "noclu", "read") + " %7s %7s" % ("ws x2", "ws x4")
    if places > 1:
        hdr += " | %d places min/med/max  xfl |   after" % places
    out_rows.append(hdr)
    print(hdr, flush=True)
    for B in (1, 8, 32):
        for S in (1024, 4096, 32768):
            for G in (1, 4, 8):
                q, k, v, o, lse, keep, bias, keys = padded_inputs(B, S, G, Hk, D, dtype, True)
                floor = 2 * Hk * keys * D * 2 / read_bw * 1e6
                a = padded_args(lib, q, k, v, o, lse)
                # the planned launch and, captured as planned, the same launch under other plans
                fns = {"pt": lib.launcher(a), "noclu": lib.launcher(a, cluster_max=1),
                       "ws2": lib.launcher(a, cluster_max=1, split_mul=2),
                       "ws4": lib.launcher(a, cluster_max=1, split_mul=4)}
                kv_copies = [(k.clone(), v.clone()) for _ in range(places - 1)]
                for j, (k2, v2) in enumerate(kv_copies):
                    fns["place%d" % (j + 1)] = lib.launcher(padded_args(lib, q, k2, v2, o, lse))
                if places > 1:
                    for j, (k2, v2) in enumerate([(k, v)] + kv_copies):
                        fns["kvread%d" % j] = (lambda k2, v2: lambda i: (
                            k2.sum(dtype=torch.float32), v2.sum(dtype=torch.float32)))(k2, v2)
                with lib.bias(bias):
                    for f in fns.values():  # eager first: the workspace reaches its largest size
                        f(0)                    # before any graph captures its address
                    # interleaved: every plan sees the same card (clocks, heat)
                    with Clocks() as ck:
                        res = graph_times(fns)
                        res["intl"] = res["pt"]
                        res["pt"] = graph_time(fns["pt"])  # alone, as torch's are timed
                res["read"] = read_time(2 * Hk * keys * D * 2, 1)
                torch_fns = {name: torch_masked(name, q, k, v, keep) for name in ("mem_eff", "cudnn")}
                for name, f in torch_fns.items():
                    try:
                        res[name] = graph_time(f)
                    except Exception as e:
                        res[name] = float("nan")
                        print("  %s failed at B%d S%d G%d: %s" % (name, B, S, G, str(e).splitlines()[0]))
                if places > 1:  # the planned launch again, after this point's mem-efficient and cuDNN runs
                    with lib.bias(bias):
                        res["after"] = graph_time(fns["pt"])
                peers = [x for x in (res["mem_eff"], res["cudnn"]) if not math.isnan(x)]
                win = all(res["pt"] < x for x in peers)
                row = "%3d %6d %2d %9.1f | %9.1f %6.2f | %9.1f %6.2f | %9.1f %6.2f | %3s | %7.1f %7.1f %7.1f" % (
                    B, S, G, floor, res["pt"], res["pt"] / floor, res["mem_eff"], res["mem_eff"] / floor,
                    res["cudnn"], res["cudnn"] / floor, "yes" if win else "NO", res["intl"], res["noclu"],
                    res["read"]) + " %7.1f %7.1f" % (res["ws2"], res["ws4"])
                if places > 1:  # the places' figures are interleaved ones, as intl
                    pl = sorted([res["intl"]] + [res["place%d" % (j + 1)] for j in range(places - 1)])
                    med = pl[len(pl) // 2] if len(pl) % 2 else (pl[len(pl) // 2 - 1] + pl[len(pl) // 2]) / 2
                    row += " | %7.1f %7.1f %7.1f %5.2f | %7.1f" % (pl[0], med, pl[-1], med / floor, res["after"])
                row += "  " + ck.columns()
                if floor >= 25 and res["pt"] / floor > 1.2:
                    row += "  >1.2x floor"
                out_rows.append(row)
                print(row, flush=True)
                if places > 1:
                    names = ["intl"] + ["place%d" % (j + 1) for j in range(places - 1)]
                    row = "      per place: ponytail %s | K+V read %s" % (
                        " ".join("%.1f" % res[n] for n in names),
                        " ".join("%.1f" % res["kvread%d" % j] for j in range(places)))
                    out_rows.append(row)
                    print(row, flush=True)
                del q, k, v, torch_fns, keep, bias, kv_copies
                torch.cuda.empty_cache()
    # The read rate again after the grid's heavy kernels (mem-efficient runs of up to 15 ms): does
    # the card read slower late in the grid than when the floor was measured at its start?
    out_rows.append("the read rate again, at the grid's end:")
    print(out_rows[-1], flush=True)
    bandwidth(out_rows)


def masked_plans(lib, out_rows):
    """Masked launches on the plan the planner picks (pt), on the plan it picks without the
    masked short-split rule (old: pt_test_set_masked_short(0)) and on the workspace plan (noclu),
    interleaved by graph replay, at shapes around the masked grid's B = 1, 4k keys (where the
    grid showed the cluster plan 2 us behind the workspace one): batch 1-8, 1k-16k keys, 2-8 KV
    heads, G 1/4/8, d 128, bf16, a bias on every launch (padding as masked_timing: odd rows
    left-padded by 25 %; B = 1 has none padded). plans: split count and cluster (c) or workspace
    (w) of pt / old / noclu, from pt_test_plan."""
    D, dtype = 128, torch.bfloat16
    read_bw = bandwidth(out_rows)
    hdr = "%3s %6s %3s %2s %8s | %7s %7s %7s | %s" % ("B", "KV", "Hk", "G", "floor", "pt", "old", "noclu",
                                                      "plans pt / old / noclu")
    out_rows.append(hdr)
    print(hdr, flush=True)
    points = [(1, S, 8, G) for S in (1024, 2048, 4096, 8192, 16384) for G in (1, 4, 8)]
    points += [(1, 4096, 4, 1), (1, 4096, 2, 1), (1, 8192, 4, 1), (2, 4096, 8, 1), (2, 2048, 8, 1),
               (1, 3072, 8, 1), (2, 3072, 8, 4), (4, 2048, 8, 1), (4, 1536, 8, 8), (8, 1024, 8, 1),
               (8, 4096, 8, 1)]
    for B, S, Hk, G in points:
        q, k, v, o, lse, keep, bias, keys = padded_inputs(B, S, G, Hk, D, dtype, True)
        floor = 2 * Hk * keys * D * 2 / read_bw * 1e6
        a = padded_args(lib, q, k, v, o, lse)

        settings = {"pt": (CLUSTER_MAX, 1), "old": (CLUSTER_MAX, 0), "noclu": (1, 1)}
        fns = {name: lib.launcher(a, cluster_max=cm, masked_short=rule)
               for name, (cm, rule) in settings.items()}
        with lib.bias(bias):
            for f in fns.values():
                f(0)
            res = graph_times(fns)
            plans = []
            for cm, rule in settings.values():
                with lib.knobs(cluster_max=cm, masked_short=rule):
                    ns, cl = lib.plan(a)
                plans.append("%d%s" % (ns, "c" if cl > 1 else "w"))
        row = "%3d %6d %3d %2d %8.1f | %7.1f %7.1f %7.1f | %s" % (
            B, S, Hk, G, floor, res["pt"], res["old"], res["noclu"], " / ".join(plans))
        out_rows.append(row)
        print(row, flush=True)
        del q, k, v, o, lse, keep, bias
        torch.cuda.empty_cache()


def bitwise_same(fns, o, lse, reps=3):
    """Runs each launch reps times into poisoned O and LSE and compares every output, bit for bit,
    with base's first: "=" when all are the same, else the names whose outputs differ (a variant
    meant to change no arithmetic, such as who merges the splits, must print "=")."""
    ref, bad = None, []
    for name, f in fns.items():
        for _ in range(reps):
            o.fill_(float("nan"))
            lse.fill_(float("nan"))
            f(0)
            torch.cuda.synchronize()
            if ref is None:
                ref = (o.clone(), lse.clone())
            elif not (torch.equal(o, ref[0]) and torch.equal(lse, ref[1])):
                if name not in bad:
                    bad.append(name)
    return "=" if not bad else "differ: " + " ".join(bad)


def experiments(lib, variants, out_rows):
    """Compile-time variants of the kernel (tests/gpu/checks/attn.sh ATTN_VARIANTS: each its own
    test library, e.g. -DPT_ATTN_EXP=1, kernels/attn_kparams.h) against the default build (base)
    at issue 17's latency-bound points and two bandwidth-bound ones, masked as in masked_timing
    (half the rows left-padded by 25 % of the keys) and unmasked, all timed interleaved by graph
    replay in one process. read: torch's read-only sum of the same bytes.
    ATTN_EXP_COLD=N (MiB): a second table, each launch timed right after torch's read of N MiB of
    other memory (in the same graph, as a model runs attention after its projections): the
    column is (read + launch) - read, both timed interleaved; back-to-back launches keep the
    kernel's code, Q and the mask in L2, which a model's other kernels push out
    (bench/records/2026-12-03-decode-clocks.md)."""
    libs = {"base": lib}
    for spec in variants:
        name, path = spec.split("=", 1)
        libs[name] = Lib(path)
    # ATTN_EXP_SPLIT_MUL="name:k ...": that variant plans with k times the workspace splits for the
    # whole stage (the planner's test knob), e.g. a 4-stage build at the splits of the default.
    for spec in os.environ.get("ATTN_EXP_SPLIT_MUL", "").split():
        name, k = spec.split(":")
        libs[name].l.pt_test_set_split_mul(int(k))
        print("variant %s: split_mul %s" % (name, k), flush=True)
    read_bw = bandwidth(out_rows)
    prime(os.environ.get("ATTN_EXP_PRIME", ""), out_rows)
    cold_mib = int(os.environ.get("ATTN_EXP_COLD", "0") or 0)
    for cold in ([False, True] if cold_mib else [False]):
        experiments_table(libs, read_bw, cold_mib if cold else 0, out_rows)


def prime(what, out_rows):
    """ATTN_EXP_PRIME="memeff cudnn alloc": before the experiments tables, what the masked grid's
    process has done and this one has not (each stage is its own process): torch's mem-efficient
    and cuDNN SDPA on a masked decode (B8 KV4k G 8, eager and by graph replay, as the grid runs
    them), or 32 GiB allocated and freed (the grid's largest expanded K/V). Whether one of them
    leaves the process slower for the launches after it."""
    for step in what.split():
        if step == "alloc":
            x = torch.empty(32 << 30, dtype=torch.uint8, device="cuda")
            x.fill_(1)
            del x
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        elif step in ("memeff", "cudnn"):
            q, k, v, o, lse, keep, bias, keys = padded_inputs(8, 4096, 8, 8, 128, torch.bfloat16, True)
            graph_time(torch_masked("mem_eff" if step == "memeff" else "cudnn", q, k, v, keep))
            del q, k, v, o, lse, keep, bias
            torch.cuda.empty_cache()
        else:
            raise SystemExit("ATTN_EXP_PRIME: unknown step %r (memeff, cudnn, alloc)" % step)
        out_rows.append("primed: %s" % step)
        print(out_rows[-1], flush=True)


def experiments_table(libs, read_bw, cold_mib, out_rows):
    """One table of experiments(): back to back (cold_mib 0) or each launch after a read of
    cold_mib MiB of other memory."""
    D, dtype, Hk = 128, torch.bfloat16, 8
    other = torch.randn(max(1, cold_mib * (1 << 19)), device="cuda", dtype=dtype) if cold_mib else None
    if cold_mib:
        out_rows.append("each launch after a read of %d MiB of other memory: (read + launch) - read, us" % cold_mib)
        print(out_rows[-1], flush=True)
    hdr = "%3s %6s %2s %6s %8s |" % ("B", "KV", "G", "mask", "floor") + "".join(
        " %8s" % n[:8] for n in libs) + " %7s" % ("other" if cold_mib else "read") + "  bitwise"
    out_rows.append(hdr)
    print(hdr, flush=True)
    points = [(1, 32768, 1, 1), (1, 32768, 8, 1), (8, 4096, 1, 1), (8, 4096, 4, 1), (8, 4096, 8, 1),
              (32, 1024, 1, 1),
              (32, 1024, 8, 1), (8, 32768, 1, 1), (32, 4096, 1, 1), (1, 32768, 1, 0), (8, 4096, 1, 0),
              (32, 1024, 1, 0), (1, 1024, 1, 1), (8, 4096, 8, 0), (8, 32768, 1, 0), (8, 1024, 8, 1)]
    for B, S, G, masked in points:
        q, k, v, o, lse, keep, bias, keys = padded_inputs(B, S, G, Hk, D, dtype, masked)
        floor = 2 * Hk * keys * D * 2 / read_bw * 1e6
        fns = {}
        with contextlib.ExitStack() as biased:
            for name, lb in libs.items():
                biased.enter_context(lb.bias(bias))
                a = padded_args(lb, q, k, v, o, lse)
                fns[name] = (lambda lb, a: lambda i: lb.decode(a))(lb, a)
            same = bitwise_same(fns, o, lse)
            if cold_mib:  # each launch after the other read, in the same graph
                fns = {name: (lambda f: lambda i: (other.sum(dtype=torch.float32), f(i)))(f)
                       for name, f in fns.items()}
                fns["read"] = lambda i: other.sum(dtype=torch.float32)
            with Clocks() as ck:
                res = graph_times(fns)
        if cold_mib:
            for name in libs:
                res[name] -= res["read"]
        else:
            res["read"] = read_time(2 * Hk * keys * D * 2, 1)
        row = "%3d %6d %2d %6s %8.1f |" % (B, S, G, "pad" if masked else "none", floor) + "".join(
            " %8.1f" % res[n] for n in libs) + " %7.1f" % res["read"] + "  " + same + "  " + ck.columns()
        out_rows.append(row)
        print(row, flush=True)
        del q, k, v, o, lse, keep, bias
        torch.cuda.empty_cache()


def timeline(lib, out_rows):
    """Where one launch's time goes (a library built with -DPT_ATTN_TIMELINE: the kernel prints
    the phases of its first CTA and of the CTA that finishes last, and the launch's span from the
    first CTA start to the last CTA end). HF decode layout, bf16, d 128, 8 KV heads; by default
    G = 1 at the latency-bound shapes and a small one, unmasked and masked as the grid; three
    eager launches each, synchronised, the last one counts (the first loads the module).
    ATTN_TIMELINE_SHAPES="B:KV:G:masked ..." picks other shapes (G query heads per KV head;
    masked 0 or 1)."""
    D, dtype, Hk = 128, torch.bfloat16, 8
    shapes = [(1, 1024, 1, False), (32, 1024, 1, False), (8, 4096, 1, False), (1, 32768, 1, False),
              (1, 1024, 1, True), (8, 4096, 1, True), (32, 1024, 1, True)]
    if os.environ.get("ATTN_TIMELINE_SHAPES"):
        shapes = [tuple(int(x) for x in t.split(":")) for t in os.environ["ATTN_TIMELINE_SHAPES"].split()]
        shapes = [(b, s, g, bool(m)) for b, s, g, m in shapes]
    # ATTN_TIMELINE_COLD=1: three more launches per shape, each right after torch's read of
    # 256 MiB of other memory (what a launch after other work pays: its code, Q, the mask and O
    # come from DRAM again; bench/records/2026-12-03-decode-clocks.md).
    flush = torch.randn(1 << 27, device="cuda", dtype=dtype) if os.environ.get("ATTN_TIMELINE_COLD") else None
    for B, S, G, masked in shapes:
        q, k, v, o, lse, _, bias, _ = padded_inputs(B, S, G, Hk, D, dtype, masked)
        a = padded_args(lib, q, k, v, o, lse)
        # masked: the masked grid's mask, half the rows left-padded by 25% of the keys (else None)
        with lib.bias(bias):
            for rep in range(3 if flush is None else 6):
                cold = rep >= 3
                if cold:
                    flush.sum(dtype=torch.float32)
                    torch.cuda.synchronize()
                line = "TL shape B=%d KV=%d G=%d%s launch %d%s" % (B, S, G, " masked" if masked else "", rep,
                                                             " cold" if cold else "")
                out_rows.append(line)
                print(line, flush=True)
                lib.decode(a)
                torch.cuda.synchronize()
                sys.stdout.flush()


def main():
    global ONLY_D
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", ""))
    ap.add_argument("--variants", default="",
                    help="experiments: name=libpath,... (variant builds of the test library)")
    ap.add_argument("--head-dims", default="",
                    help="correctness: only the cases of these head dims, e.g. 80,96 (default: all)")
    ap.add_argument("what", choices=["correctness", "timing", "dims-timing", "masked-timing", "timeline", "experiments",
                                     "masked-plans", "masked-heat", "masked-place",
                                     "masked-method"])
    args = ap.parse_args()
    if args.head_dims:
        ONLY_D = {int(x) for x in args.head_dims.split(",")}
    lib = Lib(args.lib)
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    if args.what == "correctness":
        c = correctness(lib)
        text = "\n".join(c.rows) + "\n%d cases, %d failures\n" % (len(c.rows), c.failures)
        if args.out:
            with open(os.path.join(args.out, "attn_correctness.txt"), "w") as f:
                f.write(text)
        bad = [r for r in c.rows if "FAIL" in r]
        print("\n".join(bad[:40]) if bad else "all correctness cases ok")
        print("correctness: %d checks, %d failures" % (len(c.rows), c.failures), flush=True)
        return 1 if c.failures else 0
    rows = []
    if args.what == "masked-timing":
        masked_timing(lib, rows)
    elif args.what == "dims-timing":
        dims_timing(lib, rows)
    elif args.what == "timeline":
        timeline(lib, rows)
        return 0
    elif args.what == "experiments":
        experiments(lib, [v for v in args.variants.split(",") if v], rows)
    elif args.what == "masked-plans":
        masked_plans(lib, rows)
    elif args.what in ("masked-heat", "masked-place", "masked-method"):
        import attn_diag  # diagnostics of the timing itself (imports this module)
        getattr(attn_diag, args.what.replace("-", "_"))(lib, rows)
    else:
        timing(lib, rows)
    text = "\n".join(rows) + "\n"
    if args.out:
        with open(os.path.join(args.out, "attn_%s.txt" % args.what.replace("-", "_")), "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
