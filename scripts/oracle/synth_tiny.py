#!/usr/bin/env python3
"""Write a random tiny DeepSeek-V4-family GGUF in the engine's layout (spec model-attention-hc.md §8) with numpy.

Only a stand-in for smoke-testing the oracle when the engine's `dsv4-gguf synth` is not built; the fixtures are made
from the engine's own files. Tiny shape = the `--preset tiny` of dsv4-gguf (6 layers, ratios 0,0,4,16,4,16, ...).

    python3 synth_tiny.py OUT.gguf --quant f16|q2 --seed N --corpus data/tiny-corpus.txt
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gguf_read as G  # noqa: E402
import gguf_write as W  # noqa: E402

TINY = dict(n_layer=6, ratios=[0, 0, 4, 16, 4, 16], n_hash=3, D=256, H=8, hd=128, rot=64, q_lora=64, o_lora=64,
            groups=2, E=8, K=2, F=256, swa=16, ih=4, ihd=128, topk=8, hc=4, iters=20, V=1024)


def byte_map():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def make_vocab(V, text):
    """BOS, EOS, 256 byte tokens, greedy BPE merges learned on text, then the other ds4 specials."""
    bm = byte_map()
    specials_tail = ["<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "｜DSML｜"]
    tokens = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"] + [bm[b] for b in range(256)]
    n_merge = V - len(tokens) - len(specials_tail)
    words = {}
    for w in text.replace("\n", " \n ").split(" "):
        w = " " + w
        enc = tuple(bm[b] for b in w.encode("utf-8"))
        words[enc] = words.get(enc, 0) + 1
    merges = []
    have = set(tokens)
    while len(merges) < n_merge:
        counts = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + c
        best = None
        for pair, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            if pair[0] + pair[1] not in have:
                best = pair
                break
        if best is None:
            break
        merges.append(best)
        have.add(best[0] + best[1])
        tokens.append(best[0] + best[1])
        nw = {}
        for w, c in words.items():
            out = []
            i = 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nw[tuple(out)] = nw.get(tuple(out), 0) + c
        words = nw
    i = 0
    while len(tokens) < V - len(specials_tail):  # pad with unused filler tokens if the text ran out of pairs
        tokens.append("<filler%d>" % i)
        i += 1
    tokens += specials_tail
    return tokens, ["%s %s" % m for m in merges]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--quant", choices=["f16", "q2"], default="f16")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--corpus", required=True)
    a = ap.parse_args()
    c = TINY
    rng = np.random.default_rng(a.seed)
    w = W.Writer()
    P = "deepseek4."
    U32, F32, ARR = G.VT_U32, G.VT_F32, G.VT_ARR
    w.add("general.architecture", G.VT_STR, "deepseek4")
    w.add("general.name", G.VT_STR, "synth_tiny.py %s seed %d" % (a.quant, a.seed))
    for k, v in (("block_count", c["n_layer"]), ("embedding_length", c["D"]), ("vocab_size", c["V"]),
                 ("attention.head_count", c["H"]), ("attention.head_count_kv", 1), ("attention.key_length", c["hd"]),
                 ("attention.value_length", c["hd"]), ("rope.dimension_count", c["rot"]),
                 ("attention.q_lora_rank", c["q_lora"]), ("attention.output_lora_rank", c["o_lora"]),
                 ("attention.output_group_count", c["groups"]), ("expert_count", c["E"]),
                 ("expert_used_count", c["K"]), ("expert_feed_forward_length", c["F"]), ("expert_shared_count", 1),
                 ("hash_layer_count", c["n_hash"]), ("attention.sliding_window", c["swa"]),
                 ("attention.indexer.head_count", c["ih"]), ("attention.indexer.key_length", c["ihd"]),
                 ("attention.indexer.top_k", c["topk"]), ("hyper_connection.count", c["hc"]),
                 ("hyper_connection.sinkhorn_iterations", c["iters"])):
        w.add(P + k, U32, v)
    w.add(P + "attention.compress_ratios", ARR, c["ratios"], U32)
    w.add(P + "swiglu_clamp_exp", ARR, [10.0] * c["n_layer"], F32)
    w.add(P + "rope.scaling.original_context_length", U32, 65536)
    for k, v in (("rope.freq_base", 10000.0), ("rope.scaling.factor", 16.0), ("rope.scaling.yarn_beta_fast", 32.0),
                 ("rope.scaling.yarn_beta_slow", 1.0), ("attention.compress_rope_freq_base", 160000.0),
                 ("expert_weights_scale", 1.5), ("attention.layer_norm_rms_epsilon", 1e-6),
                 ("hyper_connection.epsilon", 1e-6)):
        w.add(P + k, F32, v)
    w.add(P + "expert_weights_norm", G.VT_BOOL, 1)
    tokens, merges = make_vocab(c["V"], open(a.corpus, encoding="utf-8").read())
    w.add("tokenizer.ggml.model", G.VT_STR, "gpt2")
    w.add("tokenizer.ggml.tokens", ARR, tokens, G.VT_STR)
    w.add("tokenizer.ggml.merges", ARR, merges, G.VT_STR)

    D, HC = c["D"], c["hc"]
    mix = 2 * HC + HC * HC

    def f16(name, ne, std):
        w.add_tensor(name, ne, G.T_F16, W.enc_f16(rng.standard_normal(int(np.prod(ne))) * std))

    def f32(name, ne, vals):
        w.add_tensor(name, ne, G.T_F32, W.enc_f32(np.asarray(vals, np.float32).reshape(-1)))

    def dense(name, ne):  # attention projections, shared expert, output
        if a.quant == "f16":
            f16(name, ne, 1.0 / np.sqrt(ne[0]))
        else:
            w.add_tensor(name, ne, G.T_Q8_0, W.random_blocks(rng, G.T_Q8_0, int(np.prod(ne)), 1.0 / (73 * np.sqrt(ne[0]))))

    def routed(name, ne, down):
        n = int(np.prod(ne))
        if a.quant == "f16":
            f16(name, ne, 1.0 / np.sqrt(ne[0]))
        elif down:
            w.add_tensor(name, ne, G.T_Q2_K, W.random_blocks(rng, G.T_Q2_K, n, 1.0 / (12 * np.sqrt(ne[0]))))
        else:
            w.add_tensor(name, ne, G.T_IQ2_XXS, W.random_blocks(rng, G.T_IQ2_XXS, n, 1.0 / (40 * np.sqrt(ne[0]))))

    def norm(name, n):
        f32(name, (n,), 1.0 + rng.uniform(-0.05, 0.05, n))

    f16("token_embd.weight", (D, c["V"]), 1.0)
    f16("output_hc_fn.weight", (HC * D, HC), 1.0 / np.sqrt(HC * D))
    f32("output_hc_scale.weight", (1,), [0.5])
    f32("output_hc_base.weight", (HC,), rng.normal(0, 0.1, HC))
    norm("output_norm.weight", D)
    dense("output.weight", (D, c["V"]))
    for il in range(c["n_layer"]):
        b = "blk.%d." % il
        r = c["ratios"][il]
        for part in ("attn", "ffn"):
            f16(b + "hc_%s_fn.weight" % part, (HC * D, mix), 1.0 / np.sqrt(HC * D))
            f32(b + "hc_%s_scale.weight" % part, (3,), rng.uniform(0.2, 0.6, 3))
            f32(b + "hc_%s_base.weight" % part, (mix,), rng.normal(0, 0.2, mix))
        norm(b + "attn_norm.weight", D)
        dense(b + "attn_q_a.weight", (D, c["q_lora"]))
        norm(b + "attn_q_a_norm.weight", c["q_lora"])
        dense(b + "attn_q_b.weight", (c["q_lora"], c["H"] * c["hd"]))
        dense(b + "attn_kv.weight", (D, c["hd"]))
        norm(b + "attn_kv_a_norm.weight", c["hd"])
        f32(b + "attn_sinks.weight", (c["H"],), rng.normal(0, 0.5, c["H"]))
        dense(b + "attn_output_a.weight", (c["H"] * c["hd"] // c["groups"], c["groups"] * c["o_lora"]))
        dense(b + "attn_output_b.weight", (c["groups"] * c["o_lora"], D))
        if r:
            wc = (2 if r == 4 else 1) * c["hd"]
            f16(b + "attn_compressor_ape.weight", (wc, r), 0.3)
            f16(b + "attn_compressor_kv.weight", (D, wc), 1.0 / np.sqrt(D))
            f16(b + "attn_compressor_gate.weight", (D, wc), 1.0 / np.sqrt(D))
            norm(b + "attn_compressor_norm.weight", c["hd"])
        if r == 4:
            f16(b + "indexer.attn_q_b.weight", (c["q_lora"], c["ih"] * c["ihd"]), 1.0 / np.sqrt(c["q_lora"]))
            f16(b + "indexer.proj.weight", (D, c["ih"]), 1.0 / np.sqrt(D))
            f16(b + "indexer_compressor_ape.weight", (2 * c["ihd"], 4), 0.3)
            f16(b + "indexer_compressor_kv.weight", (D, 2 * c["ihd"]), 1.0 / np.sqrt(D))
            f16(b + "indexer_compressor_gate.weight", (D, 2 * c["ihd"]), 1.0 / np.sqrt(D))
            norm(b + "indexer_compressor_norm.weight", c["ihd"])
        norm(b + "ffn_norm.weight", D)
        f16(b + "ffn_gate_inp.weight", (D, c["E"]), 1.0 / np.sqrt(D))
        if il < c["n_hash"]:
            t2e = np.stack([rng.permutation(c["E"])[:c["K"]] for _ in range(c["V"])])
            w.add_tensor(b + "ffn_gate_tid2eid.weight", (c["K"], c["V"]), G.T_I32, W.enc_i32(t2e))
        else:
            f32(b + "exp_probs_b.bias", (c["E"],), rng.normal(0, 0.1, c["E"]))
        routed(b + "ffn_gate_exps.weight", (D, c["F"], c["E"]), False)
        routed(b + "ffn_up_exps.weight", (D, c["F"], c["E"]), False)
        routed(b + "ffn_down_exps.weight", (c["F"], D, c["E"]), True)
        dense(b + "ffn_gate_shexp.weight", (D, c["F"]))
        dense(b + "ffn_up_shexp.weight", (D, c["F"]))
        dense(b + "ffn_down_shexp.weight", (c["F"], D))
    w.write(a.out)
    g = G.GGUFFile(a.out)
    print("wrote %s: %d tensors, %d bytes, vocab %d, %d merges" % (a.out, len(g.tensors), g.size, len(tokens), len(merges)))


if __name__ == "__main__":
    main()
