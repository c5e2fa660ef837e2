#!/usr/bin/env python3
"""HF-transformers oracle for dsv4: load the engine's own GGUF into `DeepseekV4ForCausalLM`, add ds4's CPU numerics
with monkeypatches, and write teacher-forced logits / indexer selections / tokenizer fixtures.

    python3 scripts/oracle/oracle.py --out OUT --model tiny_f16=PATH --model tiny_q2=PATH --corpus data/tiny-corpus.txt
    python3 scripts/oracle/oracle.py --check [--model NAME=PATH]     # print the HF classes/hooks, smoke-test patches

Normally run through scripts/oracle/make_fixtures.sh. See scripts/oracle/README.md for what is patched and why.
"""

import argparse
import collections
import copy
import hashlib
import inspect
import json
import math
import os
import platform
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import gguf_read as G  # noqa: E402
import tokfix  # noqa: E402

torch = None
F = None
M = None  # transformers.models.deepseek_v4.modeling_deepseek_v4
NUM = None  # numerics module (imports torch)


class OracleError(Exception):
    pass


# ------------------------------------------------------------------------------------------------ logging
class Log:
    def __init__(self):
        self.f = None

    def open(self, path):
        self.f = open(path, "a", encoding="utf-8")

    def __call__(self, *a):
        s = " ".join(str(x) for x in a)
        line = "[%s] %s" % (time.strftime("%H:%M:%S"), s)
        print(line, flush=True)
        if self.f:
            self.f.write(line + "\n")
            self.f.flush()


log = Log()


def import_torch_hf():
    global torch, F, M, NUM
    import torch as _torch
    import torch.nn.functional as _F
    torch, F = _torch, _F
    import numerics as _num
    NUM = _num
    try:
        import transformers
        import transformers.models.deepseek_v4.modeling_deepseek_v4 as _M
    except Exception as e:
        raise OracleError("cannot import transformers' deepseek_v4 model: %r" % (e,))
    M = _M
    return transformers


# ------------------------------------------------------------------------------------------------ config
def _kv(g, key, kinds=None):
    v = g.require("deepseek4." + key)
    return v


def build_config_kwargs(g):
    """DeepseekV4Config keyword arguments from deepseek4.* metadata (+ a summary dict for the meta file)."""
    def u(key):
        v = _kv(g, key)
        if isinstance(v, (bool, float)) or not isinstance(v, (int, np.integer)):
            raise OracleError("deepseek4.%s should be an integer, got %r" % (key, v))
        return int(v)

    def fl(key):
        v = _kv(g, key)
        if isinstance(v, bool):
            raise OracleError("deepseek4.%s should be a number, got %r" % (key, v))
        return float(v)

    L = u("block_count")
    D = u("embedding_length")
    V = u("vocab_size")
    H = u("attention.head_count")
    hkv = int(g.get("deepseek4.attention.head_count_kv", 1))
    hd = u("attention.key_length")
    vd = int(g.get("deepseek4.attention.value_length", hd))
    rot = u("rope.dimension_count")
    if hkv != 1 or vd != hd:
        raise OracleError("expected one KV head with value_length == key_length, got %d / %d vs %d" % (hkv, vd, hd))
    ratios = [int(x) for x in list(_kv(g, "attention.compress_ratios"))]
    if len(ratios) < L:
        raise OracleError("attention.compress_ratios has %d entries for %d layers" % (len(ratios), L))
    ratios = ratios[:L]
    clamps = [float(x) for x in list(_kv(g, "swiglu_clamp_exp"))]
    if len(clamps) < L:
        raise OracleError("swiglu_clamp_exp has %d entries for %d layers" % (len(clamps), L))
    clamps = clamps[:L]
    if len(set(clamps)) != 1:
        raise OracleError("HF supports one swiglu_limit; swiglu_clamp_exp varies per layer: %s" % clamps)
    layer_types = []
    hca_rates = set()
    for il, r in enumerate(ratios):
        if r == 0:
            layer_types.append("sliding_attention")
        elif r == 4:
            layer_types.append("compressed_sparse_attention")
        elif r >= 2:
            layer_types.append("heavily_compressed_attention")
            hca_rates.add(r)
        else:
            raise OracleError("layer %d: compress ratio %d is not supported" % (il, r))
    if len(hca_rates) > 1:
        raise OracleError("HF supports one heavily-compressed rate; got %s" % sorted(hca_rates))
    n_hash = u("hash_layer_count")
    if "deepseek4.expert_weights_norm" in g.kv and g.kv["deepseek4.expert_weights_norm"] is not True:
        raise OracleError("expert_weights_norm is not true (HF always normalizes the routing weights)")
    for key in ("expert_group_count", "expert_group_used_count"):
        if int(g.get("deepseek4." + key, 0)) != 0:
            raise OracleError("deepseek4.%s must be 0" % key)
    factor = fl("rope.scaling.factor")
    orig = u("rope.scaling.original_context_length")
    kw = dict(
        vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=1, head_dim=hd,
        partial_rotary_factor=rot / hd, q_lora_rank=u("attention.q_lora_rank"),
        o_lora_rank=u("attention.output_lora_rank"), o_groups=u("attention.output_group_count"),
        n_routed_experts=u("expert_count"), num_experts_per_tok=u("expert_used_count"),
        moe_intermediate_size=u("expert_feed_forward_length"), n_shared_experts=u("expert_shared_count"),
        mlp_layer_types=["hash_moe" if i < n_hash else "moe" for i in range(L)],
        sliding_window=u("attention.sliding_window"), index_n_heads=u("attention.indexer.head_count"),
        index_head_dim=u("attention.indexer.key_length"), index_topk=u("attention.indexer.top_k"),
        hc_mult=u("hyper_connection.count"), hc_sinkhorn_iters=u("hyper_connection.sinkhorn_iterations"),
        hc_eps=fl("hyper_connection.epsilon"), rms_norm_eps=fl("attention.layer_norm_rms_epsilon"),
        layer_types=layer_types,
        compress_rates={"compressed_sparse_attention": 4,
                        "heavily_compressed_attention": (sorted(hca_rates)[0] if hca_rates else 128)},
        rope_theta=fl("rope.freq_base"), compress_rope_theta=fl("attention.compress_rope_freq_base"),
        rope_parameters={"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": orig,
                         "beta_fast": fl("rope.scaling.yarn_beta_fast"), "beta_slow": fl("rope.scaling.yarn_beta_slow")},
        max_position_embeddings=int(orig * factor), routed_scaling_factor=fl("expert_weights_scale"),
        swiglu_limit=clamps[0], scoring_func="sqrtsoftplus", norm_topk_prob=True, num_nextn_predict_layers=0,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=1, hidden_act="silu",
    )
    if kw["n_shared_experts"] != 1:
        raise OracleError("HF builds exactly one shared expert of width moe_intermediate_size; expert_shared_count=%d"
                          % kw["n_shared_experts"])
    return kw, ratios


def ds4_inv_freq(kw, compressed):
    """Expected per-pair angular frequency (theta_k / pos) per spec model-attention-hc.md §4.3, float64."""
    rot = int(round(kw["partial_rotary_factor"] * kw["head_dim"]))
    base = kw["compress_rope_theta"] if compressed else kw["rope_theta"]
    k = np.arange(rot // 2, dtype=np.float64)
    ext = base ** (-2.0 * k / rot)
    if not compressed:
        return ext
    rp = kw["rope_parameters"]
    factor, orig = rp["factor"], rp["original_max_position_embeddings"]

    def corr(beta):
        return rot * math.log(orig / (beta * 2 * math.pi)) / (2 * math.log(base))

    lo = max(0, math.floor(corr(rp["beta_fast"])))
    hi = min(rot - 1, math.ceil(corr(rp["beta_slow"])))
    ramp = 1.0 - np.clip((k - lo) / max(0.001, hi - lo), 0.0, 1.0)
    return (ext / factor) * (1.0 - ramp) + ext * ramp


# ------------------------------------------------------------------------------------------------ weights
LAYER_MAP = {
    "attn_hc.fn": "hc_attn_fn.weight", "attn_hc.base": "hc_attn_base.weight", "attn_hc.scale": "hc_attn_scale.weight",
    "ffn_hc.fn": "hc_ffn_fn.weight", "ffn_hc.base": "hc_ffn_base.weight", "ffn_hc.scale": "hc_ffn_scale.weight",
    "input_layernorm.weight": "attn_norm.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
    "self_attn.q_a_proj.weight": "attn_q_a.weight", "self_attn.q_a_norm.weight": "attn_q_a_norm.weight",
    "self_attn.q_b_proj.weight": "attn_q_b.weight", "self_attn.kv_proj.weight": "attn_kv.weight",
    "self_attn.kv_norm.weight": "attn_kv_a_norm.weight", "self_attn.o_a_proj.weight": "attn_output_a.weight",
    "self_attn.o_b_proj.weight": "attn_output_b.weight", "self_attn.sinks": "attn_sinks.weight",
    "self_attn.compressor.kv_proj.weight": "attn_compressor_kv.weight",
    "self_attn.compressor.gate_proj.weight": "attn_compressor_gate.weight",
    "self_attn.compressor.position_bias": "attn_compressor_ape.weight",
    "self_attn.compressor.kv_norm.weight": "attn_compressor_norm.weight",
    "self_attn.compressor.indexer.kv_proj.weight": "indexer_compressor_kv.weight",
    "self_attn.compressor.indexer.gate_proj.weight": "indexer_compressor_gate.weight",
    "self_attn.compressor.indexer.position_bias": "indexer_compressor_ape.weight",
    "self_attn.compressor.indexer.kv_norm.weight": "indexer_compressor_norm.weight",
    "self_attn.compressor.indexer.q_b_proj.weight": "indexer.attn_q_b.weight",
    "self_attn.compressor.indexer.scorer.weights_proj.weight": "indexer.proj.weight",
    "mlp.gate.weight": "ffn_gate_inp.weight", "mlp.gate.e_score_correction_bias": "exp_probs_b.bias",
    "mlp.gate.tid2eid": "ffn_gate_tid2eid.weight",
    "mlp.experts.down_proj": "ffn_down_exps.weight",
    "mlp.shared_experts.gate_proj.weight": "ffn_gate_shexp.weight",
    "mlp.shared_experts.up_proj.weight": "ffn_up_shexp.weight",
    "mlp.shared_experts.down_proj.weight": "ffn_down_shexp.weight",
}
TOP_MAP = {
    "model.embed_tokens.weight": "token_embd.weight", "lm_head.weight": "output.weight",
    "model.norm.weight": "output_norm.weight", "model.hc_head.hc_fn": "output_hc_fn.weight",
    "model.hc_head.hc_base": "output_hc_base.weight", "model.hc_head.hc_scale": "output_hc_scale.weight",
}


def gguf_sources(hf_name):
    """HF parameter/buffer name -> list of GGUF tensor names it is built from."""
    if hf_name in TOP_MAP:
        return [TOP_MAP[hf_name]]
    parts = hf_name.split(".")
    if len(parts) > 3 and parts[0] == "model" and parts[1] == "layers" and parts[2].isdigit():
        il = int(parts[2])
        rest = ".".join(parts[3:])
        if rest == "mlp.experts.gate_up_proj":
            return ["blk.%d.ffn_gate_exps.weight" % il, "blk.%d.ffn_up_exps.weight" % il]
        if rest in LAYER_MAP:
            return ["blk.%d.%s" % (il, LAYER_MAP[rest])]
    return None


def load_weights(model, g, dev):
    """Assign every HF parameter/buffer from the GGUF; return {hf module path: (weight types...)}."""
    params = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    assigned = set()
    used_gguf = set()
    types = {}
    missing_optional = []
    for name, t in list(params.items()) + list(buffers.items()):
        if name.endswith("inv_freq"):
            continue  # RoPE tables: computed from the config, checked against the spec in check_rope()
        src = gguf_sources(name)
        if src is None:
            raise OracleError("HF tensor %s %s has no GGUF mapping (update LAYER_MAP/TOP_MAP)" % (name, tuple(t.shape)))
        absent = [s for s in src if s not in g.tensors]
        if absent:
            if name.endswith("e_score_correction_bias"):
                missing_optional.append(name)
                with torch.no_grad():
                    t.zero_()
                assigned.add(name)
                continue
            raise OracleError("HF tensor %s needs GGUF tensor(s) %s, missing from %s" % (name, absent, g.path))
        if len(src) == 2:  # experts gate_up = concat(gate, up) along the output dim, per expert
            a = g.tensor(src[0])
            b = g.tensor(src[1])
            if a.shape != b.shape:
                raise OracleError("%s and %s shapes differ: %s vs %s" % (src[0], src[1], a.shape, b.shape))
            arr = np.concatenate([a, b], axis=1)
        else:
            arr = g.tensor(src[0])
        if tuple(arr.shape) != tuple(t.shape):
            raise OracleError("shape mismatch: HF %s %s vs GGUF %s -> %s (ggml ne %s)"
                              % (name, tuple(t.shape), src, arr.shape, [list(g.tensors[s].ne) for s in src]))
        with torch.no_grad():
            if t.dtype in (torch.int64, torch.int32):
                if arr.dtype.kind not in "iu":
                    raise OracleError("%s expects integers, GGUF %s is %s" % (name, src, G.type_name(g.tensors[src[0]].type)))
                t.copy_(torch.from_numpy(np.ascontiguousarray(arr)).to(t.dtype))
            else:
                t.copy_(torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float64)).to(t.dtype))
        assigned.add(name)
        used_gguf.update(src)
        mod_path = name.rsplit(".", 1)[0]
        types[mod_path if name.endswith(".weight") else name] = tuple(g.tensors[s].type for s in src)
    not_assigned = [n for n in list(params) + list(buffers) if n not in assigned and not n.endswith("inv_freq")]
    if not_assigned:
        raise OracleError("HF tensors left at init: %s" % not_assigned)
    extra = sorted(set(g.tensors) - used_gguf)
    ignorable = [n for n in extra if n.endswith("exp_probs_b.bias")]  # hash layers: ds4 ignores the bias there
    unexpected = [n for n in extra if n not in ignorable]
    if unexpected:
        raise OracleError("GGUF tensors with no HF counterpart: %s" % unexpected)
    if ignorable:
        log("note: GGUF router bias on hash layers not used (ds4 ignores it there too): %s" % ignorable)
    if missing_optional:
        log("note: no exp_probs_b.bias for %s: bias set to 0" % missing_optional)
    # hash tables in range
    for name, b in buffers.items():
        if name.endswith("tid2eid"):
            E = model.config.n_routed_experts
            if int(b.min()) < 0 or int(b.max()) >= E:
                raise OracleError("%s has expert ids outside [0, %d)" % (name, E))
    if model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr():
        raise OracleError("lm_head is tied to the embedding; the GGUF has a separate output.weight")
    log("loaded %d HF tensors from %d GGUF tensors" % (len(assigned), len(used_gguf)))
    return types


# ------------------------------------------------------------------------------------------------ patches
class State:
    """Global switches of the monkeypatches (one model is run at a time)."""

    def __init__(self):
        self.enabled = False
        self.fp8_kv = False        # FP8 E4M3 on non-RoPE dims of window KV and compressed attention rows
        self.f16_cache = False     # f16 rounding of every cached row
        self.indexer_qat = False   # Hadamard + FP4 on indexer q heads and indexer compressed keys
        self.act_quant = False     # Q8_0 / Q8_K activation quantization in front of quantized weights
        self.ds4_topk = False      # indexer selection: largest scores, ties -> lower row index
        self.record_scores = False
        self.scores = {}
        self.counts = collections.Counter()
        self.mask_seen = None

    def set(self, **kw):
        for k, v in kw.items():
            if not hasattr(self, k):
                raise KeyError(k)
            setattr(self, k, v)

    def flags(self):
        return {k: getattr(self, k) for k in ("fp8_kv", "f16_cache", "indexer_qat", "act_quant", "ds4_topk")}


ST = State()
_ORIG = {}


def _find_owner(frame, depth=5):
    f = frame
    for _ in range(depth):
        if f is None:
            return None
        s = f.f_locals.get("self")
        if s is not None and hasattr(s, "_dsv4_kind"):
            return s
        f = f.f_back
    return None


def _rope_wrapper(x, cos, sin, *args, **kwargs):
    out = _ORIG["apply_rotary_pos_emb"](x, cos, sin, *args, **kwargs)
    if not ST.enabled:
        return out
    owner = _find_owner(sys._getframe(1))
    if owner is None:
        ST.counts["rope_unknown_caller"] += 1
        return out
    kind = owner._dsv4_kind
    if kind == "attn":
        i = owner._dsv4_rope_i
        owner._dsv4_rope_i += 1
        if i == 0:
            if out.dim() != 4 or out.shape[1] != owner.num_heads:
                raise OracleError("attention layer %d: first RoPE call has shape %s, expected q [B, %d, S, D]"
                                  % (owner.layer_idx, tuple(out.shape), owner.num_heads))
            ST.counts["attn_q"] += 1
        elif i == 1:
            if out.dim() != 4 or out.shape[1] != 1:
                raise OracleError("attention layer %d: second RoPE call has shape %s, expected kv [B, 1, S, D]"
                                  % (owner.layer_idx, tuple(out.shape)))
            ST.counts["attn_kv"] += 1
            if ST.fp8_kv:
                out = NUM.kv_fp8_nope(out, owner._dsv4_rot)
            if ST.f16_cache:
                out = NUM.f16_round(out)
        elif i == 2:
            ST.counts["attn_out_inverse"] += 1
        else:
            raise OracleError("attention layer %d: unexpected 4th RoPE call" % owner.layer_idx)
    elif kind == "comp":
        if out.dim() != 4 or out.shape[1] != 1 or out.shape[-1] != owner.head_dim:
            raise OracleError("compressor: RoPE call shape %s, expected [B, 1, n_win, %d]" % (tuple(out.shape), owner.head_dim))
        ST.counts["comp_rows"] += 1
        if ST.fp8_kv:
            out = NUM.kv_fp8_nope(out, owner._dsv4_rot)
        if ST.f16_cache:
            out = NUM.f16_round(out)
    elif kind == "idx":
        if out.dim() == 4 and out.shape[1] == 1 and owner.num_heads != 1:
            ST.counts["idx_keys"] += 1
            if ST.indexer_qat:
                out = NUM.indexer_qat(out)
            if ST.f16_cache:
                out = NUM.f16_round(out)
        elif out.dim() == 4 and out.shape[1] == owner.num_heads:
            ST.counts["idx_q"] += 1
            if ST.indexer_qat:
                out = NUM.indexer_qat(out)
        else:
            raise OracleError("indexer: RoPE call shape %s is neither keys [B,1,T,D] nor q [B,%d,S,D]"
                              % (tuple(out.shape), owner.num_heads))
    return out


def _act(x, kind):
    if kind == "q8_0":
        return NUM.q8_0_act(x)
    if kind == "q8_k":
        return NUM.q8_k_act(x)
    return x


def _experts_forward(self, hidden_states, top_k_index, top_k_weights):
    if not ST.enabled:
        return _ORIG["experts_forward"](self, hidden_states, top_k_index, top_k_weights)
    ST.counts["experts"] += 1
    E = self.num_experts
    if self.gate_up_proj.dim() != 3 or self.gate_up_proj.shape[0] != E or self.gate_up_proj.shape[2] != hidden_states.shape[-1]:
        raise OracleError("experts.gate_up_proj has shape %s, expected [E, 2F, D]" % (tuple(self.gate_up_proj.shape),))
    x = hidden_states
    if ST.act_quant:
        x = _act(x, self._dsv4_act_in)
    out = torch.zeros_like(hidden_states)
    for e in range(E):
        tok, slot = torch.where(top_k_index == e)
        if tok.numel() == 0:
            continue
        gu = F.linear(x[tok], self.gate_up_proj[e])
        mid = self._apply_gate(gu) * top_k_weights[tok, slot, None].to(gu.dtype)   # engine: weight before down
        if ST.act_quant:
            mid = _act(mid, self._dsv4_act_mid)
        out.index_add_(0, tok, F.linear(mid, self.down_proj[e]).to(out.dtype))
    return out


def _scorer_hook(mod, inputs, output):
    if not ST.enabled:
        return None
    ST.counts["scorer"] += 1
    if ST.record_scores:
        ST.scores[mod._dsv4_layer] = output.detach().to(torch.float64).cpu()
    if not ST.ds4_topk:
        return None
    # Replace scores by -rank (rank 0 = largest score, equal scores ranked by lower row index) so HF's
    # topk picks exactly ds4's selection; the scores are only used by that topk.
    T = output.shape[-1]
    order = torch.sort(output, dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, torch.arange(T, device=order.device).expand_as(order).contiguous())
    return (-rank).to(output.dtype)


def _act_pre_hook(mod, args):
    if not (ST.enabled and ST.act_quant) or mod._dsv4_act is None:
        return None
    ST.counts["act_" + mod._dsv4_act] += 1
    return (_act(args[0], mod._dsv4_act),) + tuple(args[1:])


def _attn_pre_hook(mod, args, kwargs):
    mod._dsv4_rope_i = 0
    if ST.enabled and mod.layer_idx == 0:
        ST.mask_seen = kwargs.get("attention_mask", None)
    return None


def install_class_patches():
    """Patch the modeling module once (affects every model built afterwards)."""
    if _ORIG:
        return
    for name in ("apply_rotary_pos_emb", "DeepseekV4Attention", "DeepseekV4HCACompressor", "DeepseekV4CSACompressor",
                 "DeepseekV4Indexer", "DeepseekV4IndexerScorer", "DeepseekV4Experts", "DeepseekV4ForCausalLM"):
        if not hasattr(M, name):
            raise OracleError("transformers deepseek_v4 has no %s: the hooks need updating (run --check)" % name)
    if not hasattr(M.DeepseekV4Experts, "_apply_gate"):
        raise OracleError("DeepseekV4Experts has no _apply_gate (clamped SwiGLU); the experts patch needs updating")
    src = inspect.getsource(M)
    for cls in ("DeepseekV4Attention", "DeepseekV4HCACompressor", "DeepseekV4CSACompressor", "DeepseekV4Indexer"):
        s = inspect.getsource(getattr(M, cls).forward)
        if "apply_rotary_pos_emb(" not in s:
            raise OracleError("%s.forward does not call apply_rotary_pos_emb: the RoPE-site hooks need updating" % cls)
    if "index_scores = self.scorer(" not in src and "self.scorer(" not in src:
        raise OracleError("the indexer does not call self.scorer(...): the selection hook needs updating")
    _ORIG["apply_rotary_pos_emb"] = M.apply_rotary_pos_emb
    M.apply_rotary_pos_emb = _rope_wrapper
    _ORIG["experts_forward"] = M.DeepseekV4Experts.forward
    M.DeepseekV4Experts.forward = _experts_forward
    log("patched: %s.apply_rotary_pos_emb (module global), DeepseekV4Experts.forward" % M.__name__)


def instrument_model(model, types, rot):
    """Per-instance attributes and hooks; types: {module path: (GGUF type, ...)} from load_weights."""
    n = collections.Counter()
    for name, mod in model.named_modules():
        if isinstance(mod, M.DeepseekV4Attention):
            mod._dsv4_kind, mod._dsv4_rot, mod._dsv4_rope_i = "attn", rot, 0
            mod.register_forward_pre_hook(_attn_pre_hook, with_kwargs=True)
            n["attention"] += 1
        elif isinstance(mod, (M.DeepseekV4HCACompressor, M.DeepseekV4CSACompressor)):
            mod._dsv4_kind, mod._dsv4_rot = "comp", rot
            n["compressor"] += 1
        elif isinstance(mod, M.DeepseekV4Indexer):
            mod._dsv4_kind = "idx"
            n["indexer"] += 1
        elif isinstance(mod, M.DeepseekV4IndexerScorer):
            mod._dsv4_layer = int(name.split(".")[2])
            mod.register_forward_hook(_scorer_hook)
            n["scorer"] += 1
        elif isinstance(mod, M.DeepseekV4Experts):
            gu_t, up_t = types[name + ".gate_up_proj"]
            dn_t = types[name + ".down_proj"][0]
            if gu_t != up_t:
                raise OracleError("%s: gate and up expert types differ (%s, %s)" % (name, G.type_name(gu_t), G.type_name(up_t)))
            mod._dsv4_act_in = _act_kind(gu_t)
            mod._dsv4_act_mid = _act_kind(dn_t)
            n["experts"] += 1
        elif isinstance(mod, torch.nn.Linear):
            t = types.get(name)
            if t is None:
                raise OracleError("linear module %s has no recorded GGUF type" % name)
            mod._dsv4_act = _act_kind(t[0])
            if mod._dsv4_act:
                mod.register_forward_pre_hook(_act_pre_hook)
                n["act_" + mod._dsv4_act] += 1
    log("instrumented modules: %s" % dict(n))
    return n


def _act_kind(t):
    if t in G.ACT_Q8_0_TYPES:
        return "q8_0"
    if t in G.ACT_Q8_K_TYPES:
        return "q8_k"
    return None


def check_rope(model, kw, override):
    """Compare HF's inv_freq tables with the ds4 formula; optionally overwrite them with it."""
    worst = 0.0
    n = 0
    for name, mod in model.named_modules():
        if not isinstance(mod, M.DeepseekV4RotaryEmbedding):
            continue
        for lt in ("main", "compress"):
            buf = getattr(mod, "%s_inv_freq" % lt, None)
            if buf is None:
                raise OracleError("%s has no %s_inv_freq buffer" % (name or "rotary", lt))
            exp = torch.from_numpy(ds4_inv_freq(kw, lt == "compress")).to(buf.device)
            if buf.shape != exp.shape:
                raise OracleError("%s %s_inv_freq shape %s, expected %s" % (name, lt, tuple(buf.shape), tuple(exp.shape)))
            rel = float(((buf.double() - exp).abs() / exp.abs()).max())
            worst = max(worst, rel)
            sc = getattr(mod, "%s_attention_scaling" % lt, 1.0)
            if float(sc) != 1.0:
                raise OracleError("%s %s_attention_scaling = %r, ds4 applies no YaRN magnitude scaling" % (name, lt, sc))
            if rel > 1e-6 and override:
                with torch.no_grad():
                    buf.copy_(exp.to(buf.dtype))
                    orig = getattr(mod, "%s_original_inv_freq" % lt, None)
                    if orig is not None:
                        orig.copy_(exp.to(orig.dtype))
            n += 1
    if n == 0:
        raise OracleError("no DeepseekV4RotaryEmbedding found")
    if worst > 1e-6:
        msg = "HF RoPE inv_freq differs from the ds4 formula (max rel %.3g)" % worst
        if not override:
            raise OracleError(msg + "; rerun without --no-rope-override to use the ds4 values")
        log("WARNING: " + msg + "; overwritten with the ds4 values in %d tables" % n)
    else:
        log("RoPE tables match the ds4 formula (max rel diff %.3g over %d tables)" % (worst, n))
    return worst


def check_mask(mask, S, W):
    if mask is None:
        raise OracleError("HF passed no attention mask to layer 0: the sliding window would not be applied")
    m = mask
    if isinstance(m, dict):
        m = next(iter(m.values()))
    if not torch.is_tensor(m):
        raise OracleError("attention mask is a %s, not a tensor; cannot verify the sliding window" % type(m))
    m = m[0, 0, :S, :S]
    allowed = m if m.dtype == torch.bool else (m > torch.finfo(m.dtype).min / 2)
    q = torch.arange(S, device=m.device)[:, None]
    k = torch.arange(S, device=m.device)[None, :]
    exp = (k <= q) & (k > q - W)
    if not torch.equal(allowed.cpu(), exp.cpu()):
        bad = int((allowed.cpu() != exp.cpu()).sum())
        raise OracleError("HF sliding-window mask differs from ds4's window of %d (current token included): %d entries"
                          % (W, bad))


# ------------------------------------------------------------------------------------------------ model
def build_model(g, dev, rope_override=True):
    kw, ratios = build_config_kwargs(g)
    cfg = M.DeepseekV4Config(**kw) if hasattr(M, "DeepseekV4Config") else None
    if cfg is None:
        from transformers import DeepseekV4Config
        cfg = DeepseekV4Config(**kw)
    for attr, want in (("layer_types", kw["layer_types"]), ("mlp_layer_types", kw["mlp_layer_types"])):
        if list(getattr(cfg, attr)) != want:
            raise OracleError("config.%s = %s, wanted %s" % (attr, getattr(cfg, attr), want))
    try:
        cfg._attn_implementation = "eager"
    except Exception as e:  # noqa: BLE001
        log("note: could not set _attn_implementation: %r" % (e,))
    torch.manual_seed(0)
    model = M.DeepseekV4ForCausalLM(cfg)
    try:
        if hasattr(model, "set_experts_implementation"):
            model.set_experts_implementation("eager")
        else:
            model.config._experts_implementation = "eager"
    except Exception as e:  # noqa: BLE001
        log("note: could not select eager experts: %r" % (e,))
    model = model.to(torch.float64).eval()
    log("HF config: attn=%s experts=%s qk_rope_head_dim=%s compress_rates=%s rope_parameters=%s"
        % (getattr(model.config, "_attn_implementation", "?"), getattr(model.config, "_experts_implementation", "?"),
           getattr(model.config, "qk_rope_head_dim", "?"), model.config.compress_rates, model.config.rope_parameters))
    types = load_weights(model, g, dev)
    model = model.to(dev)
    rot = int(round(kw["partial_rotary_factor"] * kw["head_dim"]))
    worst = check_rope(model, kw, rope_override)
    return model, kw, ratios, types, rot, worst


def forward_logits(model, ids, dev):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids], dtype=torch.long, device=dev), use_cache=False)
    lg = out.logits[0].to(torch.float64)
    if not torch.isfinite(lg).all():
        raise OracleError("non-finite logits")
    return lg


def set_index_topk(model, k):
    old = []
    for mod in model.modules():
        if isinstance(mod, M.DeepseekV4Indexer):
            old.append(mod.index_topk)
            mod.index_topk = k
    return old


def expected_counts(kw, ratios, S, types_n):
    L = kw["num_hidden_layers"]
    n_comp = sum(1 for r in ratios if r != 0 and S >= r)
    n_csa = sum(1 for r in ratios if r == 4)
    return {"attn_q": L, "attn_kv": L, "attn_out_inverse": L, "comp_rows": n_comp, "idx_keys": n_csa if S >= 4 else 0,
            "idx_q": n_csa, "scorer": n_csa, "experts": L}


def verify_counts(kw, ratios, S, act_expected=None):
    exp = expected_counts(kw, ratios, S, None)
    bad = {k: (ST.counts.get(k, 0), v) for k, v in exp.items() if ST.counts.get(k, 0) != v}
    if ST.counts.get("rope_unknown_caller"):
        bad["rope_unknown_caller"] = (ST.counts["rope_unknown_caller"], 0)
    if act_expected is not None:
        for k, v in act_expected.items():
            if ST.counts.get(k, 0) != v:
                bad[k] = (ST.counts.get(k, 0), v)
    if bad:
        raise OracleError("patch sites fired unexpectedly (got, expected): %s" % bad)


def run_model(name, g, args, seqs, dev, out_dir, meta_common):
    model, kw, ratios, types, rot, rope_worst = build_model(g, dev, not args.no_rope_override)
    inst = instrument_model(model, types, rot)
    quantized = any(_act_kind(t[0]) for t in types.values())
    L = kw["num_hidden_layers"]
    topk = kw["index_topk"]
    # float32 copy of the same model: how much does float32 rounding alone (and the quantization flips it causes)
    # move the ds4-numerics logits? A noise floor for the engine (float32) vs oracle comparison.
    m32 = copy.deepcopy(model).to(torch.float32)
    status = {}
    for sname, ids in seqs.items():
        S = len(ids)
        base = os.path.join(out_dir, "oracle_%s_%s" % (name, sname))
        t0 = time.time()
        # 1. no selection (index_topk >= entries): pure HF vs patched-with-numerics-off must agree
        set_index_topk(model, 1 << 30)
        ST.set(enabled=False)
        hf_nosel = forward_logits(model, ids, dev)
        ST.set(enabled=True, fp8_kv=False, f16_cache=False, indexer_qat=False, act_quant=False, ds4_topk=False,
               record_scores=False)
        ST.counts.clear()
        ST.mask_seen = None
        mine_nosel = forward_logits(model, ids, dev)
        verify_counts(kw, ratios, S)
        check_mask(ST.mask_seen, S, kw["sliding_window"])
        scale = max(1.0, float(hf_nosel.abs().max()))
        d_nosel = float((hf_nosel - mine_nosel).abs().max())
        log("%s/%s: HF vs patched (numerics off, no selection): max |dlogit| %.3g (logit scale %.3g)"
            % (name, sname, d_nosel, scale))
        if d_nosel > 1e-4 * scale and not args.allow_mismatch:
            raise OracleError("patched model (numerics off) differs from HF by %.3g: the patches change the math" % d_nosel)
        set_index_topk(model, topk)
        # 2. pure HF with its own top-k (ties broken by torch.topk)
        ST.set(enabled=False)
        hf = forward_logits(model, ids, dev)
        # 3. ds4 selection, numerics off (the reference for an engine's exact-numerics mode)
        ST.set(enabled=True, ds4_topk=True, record_scores=True)
        ST.scores = {}
        ST.counts.clear()
        plain = forward_logits(model, ids, dev)
        verify_counts(kw, ratios, S)
        plain_scores = ST.scores
        # 4. ds4 numerics (the fixture)
        ST.set(enabled=True, fp8_kv=True, f16_cache=True, indexer_qat=True, act_quant=quantized, ds4_topk=True,
               record_scores=True)
        ST.scores = {}
        ST.counts.clear()
        lg = forward_logits(model, ids, dev)
        act_exp = {k: v for k, v in inst.items() if k.startswith("act_")} if quantized else None
        if act_exp is not None:
            # each instrumented linear runs once per forward
            verify_counts(kw, ratios, S, act_exp)
        else:
            verify_counts(kw, ratios, S)
        counts = dict(ST.counts)
        ST.set(record_scores=False)
        f32_stats = probe_f32(m32, ids, dev, lg, "%s/%s: float32 copy vs float64, ds4 numerics" % (name, sname))
        ST.set(fp8_kv=False, f16_cache=False, indexer_qat=False, act_quant=False)
        f32_plain = probe_f32(m32, ids, dev, plain, "%s/%s: float32 copy vs float64, numerics off" % (name, sname))
        if args.sensitivity:
            for fl in (("fp8_kv", "f16_cache"), ("f16_cache",), ("indexer_qat",), ("act_quant",)):
                if fl == ("act_quant",) and not quantized:
                    continue
                ST.set(fp8_kv=False, f16_cache=False, indexer_qat=False, act_quant=False)
                ST.set(**{k: True for k in fl})
                ref = forward_logits(model, ids, dev)
                probe_f32(m32, ids, dev, ref, "%s/%s: sensitivity, only %s" % (name, sname, "+".join(fl)))
        ST.set(enabled=False)
        d_hf_plain = float((hf - plain).abs().max())
        d_plain_ds4 = float((plain - lg).abs().max())
        top1_plain = int((plain.argmax(-1) == lg.argmax(-1)).sum())
        top1_hf = int((hf.argmax(-1) == plain.argmax(-1)).sum())
        log("%s/%s: S=%d  HF(topk) vs ds4-selection %.3g (top-1 agree %d/%d)  plain vs ds4-numerics %.3g (top-1 agree %d/%d)"
            "  [%.1fs]" % (name, sname, S, d_hf_plain, top1_hf, S, d_plain_ds4, top1_plain, S, time.time() - t0))
        # ---- outputs ----
        lg32 = lg.to(torch.float32).cpu().numpy()
        if lg32.shape != (S, kw["vocab_size"]):
            raise OracleError("logits shape %s, expected (%d, %d)" % (lg32.shape, S, kw["vocab_size"]))
        with open(base + ".tokens", "w") as f:
            f.write("".join("%d\n" % t for t in ids))
        lg32.astype("<f4").tofile(base + ".logits.f32")
        plain.to(torch.float32).cpu().numpy().astype("<f4").tofile(base + ".plain.logits.f32")
        n_idx = write_indexer(base + ".indexer", ST.scores, ratios, kw, S)
        n_idx_plain = write_indexer(base + ".plain.indexer", plain_scores, ratios, kw, S)
        if n_idx_plain != n_idx:
            raise OracleError("plain run: %d indexer lines, ds4-numerics run: %d" % (n_idx_plain, n_idx))
        srt = torch.sort(lg, dim=-1, descending=True)
        top1 = srt.indices[:, 0].cpu().numpy()
        margin = (srt.values[:, 0] - srt.values[:, 1]).cpu().numpy()
        with open(base + ".meta", "w") as f:
            for k, v in meta_common.items():
                f.write("%s %s\n" % (k, v))
            f.write("model %s\n" % name)
            f.write("gguf %s\n" % os.path.basename(g.path))
            f.write("gguf_sha256 %s\n" % sha256(g.path))
            f.write("synth_command %s\n" % (args.synth_cmd.get(name, "unknown")))
            f.write("sequence %s\n" % sname)
            f.write("n_pos %d\n" % S)
            f.write("n_vocab %d\n" % kw["vocab_size"])
            f.write("logits_dtype float32-le\n")
            f.write("compute_dtype float64 (HF casts HC mixing, RMSNorm statistics, RoPE and compressor softmax to float32)\n")
            f.write("numerics fp8_kv=1 f16_cache=1 indexer_qat=1 act_quant=%d ds4_topk=1 router_weight_before_down=1\n"
                    % int(quantized))
            f.write("act_quant_rule Q8_0 weights -> Q8_0 activations (per 32, f32 scale); Q2_K/Q4_K/IQ2_XXS -> Q8_K "
                    "(per 256); F16/F32/BF16 -> none\n")
            f.write("weight_types %s\n" % json.dumps(type_summary(types), sort_keys=True))
            f.write("layer_ratios %s\n" % " ".join(str(r) for r in ratios))
            f.write("index_topk %d\n" % topk)
            f.write("indexer_lines %d\n" % n_idx)
            f.write("rope_inv_freq_max_rel_diff_vs_ds4 %.3g\n" % rope_worst)
            f.write("check_hf_vs_patched_noselect_max_abs %.6g\n" % d_nosel)
            f.write("check_hf_topk_vs_ds4_topk_max_abs %.6g\n" % d_hf_plain)
            f.write("check_plain_vs_ds4_numerics_max_abs %.6g\n" % d_plain_ds4)
            f.write("check_plain_vs_ds4_numerics_top1_agree %d\n" % top1_plain)
            f.write("check_f32_model_vs_f64_max_abs %.6g\n" % f32_stats[0])
            f.write("check_f32_model_vs_f64_median_pos_max_abs %.6g\n" % f32_stats[1])
            f.write("check_f32_model_vs_f64_p99_pos_max_abs %.6g\n" % f32_stats[2])
            f.write("check_f32_model_vs_f64_top1_agree %d\n" % f32_stats[3])
            f.write("check_f32_model_vs_f64_numerics_off_max_abs %.6g\n" % f32_plain[0])
            f.write("check_f32_model_vs_f64_numerics_off_median_pos_max_abs %.6g\n" % f32_plain[1])
            f.write("check_f32_model_vs_f64_numerics_off_top1_agree %d\n" % f32_plain[3])
            f.write("patch_counts %s\n" % json.dumps(counts, sort_keys=True))
            f.write("# pos_top1 <pos> <top-1 id> <top-1 minus top-2 logit>\n")
            for p in range(S):
                f.write("pos_top1 %d %d %.6g\n" % (p, int(top1[p]), float(margin[p])))
        status[sname] = "ok"
        log("%s/%s: wrote %s.{tokens,logits.f32,meta,indexer,plain.logits.f32,plain.indexer}" % (name, sname, base))
    del model, m32
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return status


def probe_f32(m32, ids, dev, ref, what):
    lg = forward_logits(m32, ids, dev)
    pp = (ref - lg).abs().max(dim=-1).values
    st = (float(pp.max()), float(pp.median()), float(torch.quantile(pp, 0.99)), int((ref.argmax(-1) == lg.argmax(-1)).sum()))
    log("%s: per-position max|dlogit| max %.3g median %.3g p99 %.3g, top-1 agree %d/%d"
        % (what, st[0], st[1], st[2], st[3], len(ids)))
    return st


def type_summary(types):
    out = collections.Counter()
    for path, ts in types.items():
        key = path.split(".")[-1] if not path.startswith("model.layers.") else ".".join(path.split(".")[3:])
        out["%s=%s" % (key, "+".join(G.type_name(t) for t in ts))] += 1
    return dict(out)


def write_indexer(path, scores, ratios, kw, S):
    k = kw["index_topk"]
    n = 0
    with open(path, "w") as f:
        f.write("# layer pos id_1 .. id_%d (selected compressed rows, ascending) score_k score_k+1\n" % k)
        f.write("# a line for every ratio-4 layer and position with more than top_k=%d visible compressed rows;\n" % k)
        f.write("# ties: rows with equal scores are selected by lower row index (ds4); compare sets with a tolerance\n")
        for il, r in enumerate(ratios):
            if r != 4:
                continue
            if il not in scores:
                raise OracleError("no indexer scores recorded for layer %d" % il)
            sc = scores[il][0]  # [S, T]
            if sc.shape[0] != S:
                raise OracleError("indexer scores of layer %d have shape %s" % (il, tuple(sc.shape)))
            for p in range(S):
                vis = (p + 1) // 4
                if vis <= k:
                    continue
                row = sc[p, :vis]
                order = torch.sort(row, descending=True, stable=True).indices
                sel = sorted(int(i) for i in order[:k])
                f.write("%d %d %s %.9g %.9g\n" % (il, p, " ".join(str(i) for i in sel), float(row[order[k - 1]]),
                                                  float(row[order[k]])))
                n += 1
    return n


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------ check mode
def check_mode(args, transformers, dev):
    log("transformers %s from %s" % (transformers.__version__, os.path.dirname(transformers.__file__)))
    log("torch %s, cuda %s" % (torch.__version__, torch.cuda.is_available()))
    log("modeling module: %s" % M.__file__)
    names = sorted(n for n in dir(M) if "DeepseekV4" in n or n in ("apply_rotary_pos_emb", "eager_attention_forward",
                                                                    "rotate_half", "repeat_kv"))
    log("module names: %s" % names)
    for cls in ("DeepseekV4Attention", "DeepseekV4HCACompressor", "DeepseekV4CSACompressor", "DeepseekV4Indexer",
                "DeepseekV4IndexerScorer", "DeepseekV4Experts", "DeepseekV4HyperConnection", "DeepseekV4HyperHead",
                "DeepseekV4TopKRouter", "DeepseekV4HashRouter", "DeepseekV4RotaryEmbedding"):
        c = getattr(M, cls, None)
        if c is None:
            log("MISSING class %s" % cls)
            continue
        log("%s.forward%s" % (cls, inspect.signature(c.forward)))
    src = inspect.getsource(M).split("\n")
    for i, line in enumerate(src):
        if any(s in line for s in ("apply_rotary_pos_emb(", ".topk(", "self.scorer(", "_apply_gate(", "def forward",
                                   "^class ", "softmax(", ".float()")):
            log("  %5d: %s" % (i + 1, line.rstrip()))
        elif line.startswith("class "):
            log("  %5d: %s" % (i + 1, line.rstrip()))
    log("--- DeepseekV4Experts.forward source (before patch) ---")
    for line in inspect.getsource(M.DeepseekV4Experts.forward).split("\n"):
        log("    " + line)
    if hasattr(M.DeepseekV4Experts, "_apply_gate"):
        for line in inspect.getsource(M.DeepseekV4Experts._apply_gate).split("\n"):
            log("    " + line)
    install_class_patches()
    if args.model:
        name, path = args.model[0]
        g = G.GGUFFile(path)
        model, kw, ratios, types, rot, _ = build_model(g, dev, True)
    else:
        log("no --model: building a random tiny model (spec preset shape) with all-Q8_0 linears for the smoke test")
        model, kw, ratios, types, rot = random_tiny_model(dev)
    for n, p in list(model.named_parameters()) + list(model.named_buffers()):
        log("  %-70s %-22s %s" % (n, tuple(p.shape), str(p.dtype).replace("torch.", "")))
    inst = instrument_model(model, types, rot)
    S = 64
    rng = np.random.default_rng(0)
    ids = [int(x) for x in rng.integers(2, kw["vocab_size"] - 10, size=S)]
    ST.set(enabled=False)
    ref = forward_logits(model, ids, dev)
    ST.set(enabled=True, fp8_kv=True, f16_cache=True, indexer_qat=True, act_quant=True, ds4_topk=True, record_scores=True)
    ST.counts.clear()
    lg = forward_logits(model, ids, dev)
    log("smoke test S=%d: patch counts %s" % (S, dict(ST.counts)))
    log("smoke test: instrumented %s" % dict(inst))
    verify_counts(kw, ratios, S)
    check_mask(ST.mask_seen, S, kw["sliding_window"])
    log("smoke test: sliding-window mask OK; max |dlogit| HF vs ds4-numerics %.3g; top-1 agree %d/%d"
        % (float((ref - lg).abs().max()), int((ref.argmax(-1) == lg.argmax(-1)).sum()), S))
    ST.set(enabled=False)
    log("check: OK")


def random_tiny_model(dev):
    kw = dict(vocab_size=1024, hidden_size=256, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=1,
              head_dim=128, partial_rotary_factor=0.5, q_lora_rank=64, o_lora_rank=64, o_groups=2,
              n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=256, n_shared_experts=1,
              mlp_layer_types=["hash_moe"] * 3 + ["moe"] * 3, sliding_window=16, index_n_heads=4, index_head_dim=128,
              index_topk=8, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6, rms_norm_eps=1e-6,
              layer_types=["sliding_attention"] * 2 + ["compressed_sparse_attention", "heavily_compressed_attention"] * 2,
              compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
              rope_theta=10000.0, compress_rope_theta=160000.0,
              rope_parameters={"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 65536,
                               "beta_fast": 32.0, "beta_slow": 1.0},
              max_position_embeddings=65536 * 16, routed_scaling_factor=1.5, swiglu_limit=10.0,
              scoring_func="sqrtsoftplus", norm_topk_prob=True, num_nextn_predict_layers=0, tie_word_embeddings=False)
    cfg = M.DeepseekV4Config(**kw)
    cfg._attn_implementation = "eager"
    torch.manual_seed(1)
    model = M.DeepseekV4ForCausalLM(cfg).to(torch.float64).eval()
    types = {}
    with torch.no_grad():
        for n, p in list(model.named_parameters()) + list(model.named_buffers()):
            if n.endswith("tid2eid"):
                p.copy_(torch.stack([torch.randperm(8)[:2] for _ in range(p.shape[0])]))
            elif n.endswith("inv_freq"):
                continue
            elif p.dim() >= 2:
                p.normal_(0, 1.0 / math.sqrt(p.shape[-1]))
            else:
                p.copy_(1.0 + 0.1 * torch.randn_like(p) if n.endswith("weight") else 0.1 * torch.randn_like(p))
            mp = n.rsplit(".", 1)[0]
            if n.endswith(".weight") and p.dim() == 2 and "embed" not in n and "hc" not in n:
                types[mp] = (G.T_Q8_0,)
            elif n.endswith(".weight"):
                types[mp] = (G.T_F16,)
            else:
                types[n] = (G.T_IQ2_XXS, G.T_IQ2_XXS) if n.endswith("gate_up_proj") else (G.T_Q2_K,)
    model = model.to(dev)
    check_rope(model, kw, True)
    return model, kw, [0, 0, 4, 16, 4, 16], types, 64


# ------------------------------------------------------------------------------------------------ main
def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="output directory")
    ap.add_argument("--model", action="append", default=[], help="NAME=PATH.gguf (repeatable; order kept)")
    ap.add_argument("--synth-cmd", action="append", default=[], help="NAME=command line that made the GGUF (for .meta)")
    ap.add_argument("--corpus", help="text corpus for the tokenizer fixture and sequence A")
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda if available)")
    ap.add_argument("--seq-a-tokens", type=int, default=400, help="corpus tokens after BOS in sequence A")
    ap.add_argument("--seq-b-tokens", type=int, default=320, help="random tokens in sequence B")
    ap.add_argument("--min-positions", type=int, default=300)
    ap.add_argument("--seed", type=int, default=20240502)
    ap.add_argument("--no-rope-override", action="store_true", help="fail instead of using ds4's RoPE tables")
    ap.add_argument("--allow-mismatch", action="store_true", help="continue when patched-off != HF (debugging)")
    ap.add_argument("--check", action="store_true", help="print HF hooks/params and smoke-test the patches, then exit")
    ap.add_argument("--skip-selftest", action="store_true")
    ap.add_argument("--sensitivity", action="store_true",
                    help="also log float32-vs-float64 logit differences with each numerics switch alone")
    a = ap.parse_args(argv)

    def pairs(lst, what):
        out = []
        for s in lst:
            if "=" not in s:
                ap.error("%s %r is not NAME=VALUE" % (what, s))
            k, v = s.split("=", 1)
            out.append((k, v))
        return out

    a.model = pairs(a.model, "--model")
    a.synth_cmd = dict(pairs(a.synth_cmd, "--synth-cmd"))
    if not a.check and (not a.out or not a.model or not a.corpus):
        ap.error("--out, --model and --corpus are required (or use --check)")
    return a


def selftests(dev):
    import selftest_gguf
    log("running GGUF reader self-test")
    if selftest_gguf.main() != 0:
        raise OracleError("GGUF reader self-test failed")
    n, fails = NUM.selftest("cpu")
    if fails:
        raise OracleError("numerics self-test failed on CPU: %s" % fails)
    log("numerics self-test (cpu): %d passed" % n)
    if dev.type == "cuda":
        n, fails = NUM.selftest("cuda")
        if fails:
            raise OracleError("numerics self-test failed on CUDA: %s" % fails)
        log("numerics self-test (cuda): %d passed" % n)


def main(argv=None):
    args = parse_args(argv if argv is not None else sys.argv[1:])
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        log.open(os.path.join(args.out, "oracle.log"))
    log("oracle.py %s" % " ".join(sys.argv[1:]))
    transformers = import_torch_hf()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    log("python %s, torch %s, transformers %s, numpy %s, device %s%s"
        % (platform.python_version(), torch.__version__, transformers.__version__, np.__version__, dev,
           (" (%s)" % torch.cuda.get_device_name(dev)) if dev.type == "cuda" else ""))
    if args.check:
        check_mode(args, transformers, dev)
        return 0
    status = {}
    t_start = time.time()
    try:
        if not args.skip_selftest:
            selftests(dev)
        install_class_patches()
        import tokenizers
        files = {name: G.GGUFFile(path) for name, path in args.model}
        first_name, first = args.model[0][0], files[args.model[0][0]]
        tokens, merges = tokfix.vocab_from_gguf(first)
        for name, g in files.items():
            t2, m2 = tokfix.vocab_from_gguf(g)
            if t2 != tokens or m2 != merges:
                raise OracleError("models %s and %s have different vocabularies" % (first_name, name))
        tok = tokfix.build_tokenizer(tokens, merges, log)
        corpus = open(args.corpus, encoding="utf-8").read()
        n_bad = tokfix.write_tokenizer_fixture(tok, tokfix.make_samples(corpus), os.path.join(args.out, "tokenizer_tiny.jsonl"), log)
        specials = tokfix.special_ids(first, tokens)
        bos = tokfix.bos_id(first, tokens)
        seqs = collections.OrderedDict()
        seqs["A"] = tokfix.sequence_a(tok, corpus, bos, args.seq_a_tokens, args.min_positions)
        seqs["B"] = tokfix.sequence_b(len(tokens), specials, args.seq_b_tokens, args.seed)
        if len(seqs["B"]) < args.min_positions:
            raise OracleError("sequence B has %d positions < %d" % (len(seqs["B"]), args.min_positions))
        log("sequences: A %d positions (BOS %d + corpus), B %d random ids (seed %d, %d specials excluded)"
            % (len(seqs["A"]), bos, len(seqs["B"]), args.seed, len(specials)))
        meta_common = collections.OrderedDict([
            ("generator", "scripts/oracle/oracle.py"), ("torch", torch.__version__),
            ("transformers", transformers.__version__), ("tokenizers", tokenizers.__version__),
            ("numpy", np.__version__), ("python", platform.python_version()), ("device", str(dev)),
            ("corpus", os.path.basename(args.corpus)), ("corpus_sha256", sha256(args.corpus)),
            ("seed_B", args.seed), ("tokenizer_roundtrip_mismatches", n_bad),
        ])
    except Exception as e:  # noqa: BLE001
        log("FATAL before any model ran: %s" % e)
        log(traceback.format_exc())
        write_status(args.out, {"setup": "failed: %s" % e})
        return 2
    for name, g in files.items():
        try:
            log("=== model %s (%s) ===" % (name, g.path))
            st = run_model(name, g, args, seqs, dev, args.out, meta_common)
            status.update({"%s/%s" % (name, s): v for s, v in st.items()})
        except Exception as e:  # noqa: BLE001
            log("ERROR in model %s: %s" % (name, e))
            log(traceback.format_exc())
            status[name] = "failed: %s" % e
        write_status(args.out, status)
    ok = all(v == "ok" for v in status.values()) and len(status) == len(files) * len(seqs)
    log("done in %.1fs: %s" % (time.time() - t_start, "OK" if ok else "FAILURES %s" % status))
    return 0 if ok else 1


def write_status(out, status):
    if not out:
        return
    with open(os.path.join(out, "STATUS"), "w") as f:
        for k, v in status.items():
            f.write("%s %s\n" % (k, v))


if __name__ == "__main__":
    sys.exit(main())
