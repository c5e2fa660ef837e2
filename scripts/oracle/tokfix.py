"""HF `tokenizers` tokenizer built from a GGUF vocabulary (tokenizer.ggml.tokens + merges) with the official DeepSeek
V4 pre-tokenizer (shared/spec/model-moe-gguf-tokenizer.md §5.2b), the tokenizer fixture samples, and the teacher-forced
token sequences used by the oracle."""

import json

import numpy as np

BOS_STR = "<｜begin▁of▁sentence｜>"
EOS_STR = "<｜end▁of▁sentence｜>"
KNOWN_SPECIALS = {BOS_STR, EOS_STR, "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>", "｜DSML｜"}

# §5.2b: three Split(Isolated) passes, then ByteLevel without its own regex.
PRE_REGEXES = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
]


def vocab_from_gguf(g):
    tokens = g.require("tokenizer.ggml.tokens")
    merges = g.require("tokenizer.ggml.merges")
    if not isinstance(tokens, list) or not tokens:
        raise ValueError("tokenizer.ggml.tokens is not a non-empty string array")
    if not isinstance(merges, list):
        raise ValueError("tokenizer.ggml.merges is not a string array")
    return tokens, merges


def special_ids(g, tokens):
    """Ids that are not ordinary BPE text tokens: the ds4 special strings, anything with U+FF5C, control/user types."""
    sp = set()
    tt = g.get("tokenizer.ggml.token_type")
    for i, s in enumerate(tokens):
        if s in KNOWN_SPECIALS or "｜" in s:
            sp.add(i)
        elif tt is not None and i < len(tt) and int(tt[i]) not in (1, 6):  # 1 normal, 6 byte
            sp.add(i)
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        if key in g.kv:
            sp.add(int(g.kv[key]))
    return sp


def bos_id(g, tokens):
    if "tokenizer.ggml.bos_token_id" in g.kv:
        b = int(g.kv["tokenizer.ggml.bos_token_id"])
        if tokens[b] != BOS_STR:
            raise ValueError("tokenizer.ggml.bos_token_id %d is %r, not %r" % (b, tokens[b], BOS_STR))
        return b
    if BOS_STR not in tokens:
        raise ValueError("vocabulary has no %r" % BOS_STR)
    return tokens.index(BOS_STR)


def build_tokenizer(tokens, merges, log=print):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {}
    dups = 0
    for i, s in enumerate(tokens):
        if s in vocab:
            dups += 1  # ds4: the later entry wins
        vocab[s] = i
    if dups:
        log("WARNING: %d duplicate token strings in the vocabulary (later id wins, as in ds4)" % dups)
    pairs = []
    for r, m in enumerate(merges):
        parts = m.split(" ")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise ValueError("merge #%d %r is not of the form 'A B'" % (r, m))
        pairs.append((parts[0], parts[1]))
    bpe = models.BPE(vocab=vocab, merges=pairs, unk_token=None, fuse_unk=False, byte_fallback=False,
                     ignore_merges=False)
    tok = Tokenizer(bpe)
    splits = [pre_tokenizers.Split(Regex(rx), behavior="isolated", invert=False) for rx in PRE_REGEXES]
    tok.pre_tokenizer = pre_tokenizers.Sequence(splits + [pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                   use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


HAND_SAMPLES = [
    "Hello, world!",
    "def add(a, b):\n    return a + b\n",
    "#include <stdio.h>\nint main(void) { printf(\"%d\\n\", 42); return 0; }\n",
    "for (int i = 0; i < n; ++i) x[i] += y[i] * 2.5f;",
    "日本語のテキストと中文混合。",
    "汉字テスト カタカナ ひらがな",
    "I ❤️ 🍕 and 👨‍👩‍👧‍👦 family 👍🏽!",
    "1234567 and 3.14159, 2024-05-02, 1,000,000 and 0000000000123",
    "a  b   c    d\t\te",
    "   leading and trailing   ",
    "\n\n\nnewlines\n\n",
    "tabs\tand\r\nCRLF\r\nlines\r\n",
    "mixed\u00a0nbsp\u2003em-space",
    "Привет мир, γειά σου κόσμε, مرحبا بالعالم, שלום",
    "naïve café résumé Ünïcödé",
    "e\u0301 a\u0308 combining",
    "Hello, world! What's up? (yes) [no] {maybe} <tag/>",
    "a.b.c --x=1 ~home `code` $var @user #tag 50% a&b",
    "https://example.com/path?q=1&r=2#frag",
    "'s 're 've 'll 'd n't I'm",
    "안녕하세요 세계",
    "สวัสดีชาวโลก",
    "   ",
    " ",
    "x",
    "“Smart quotes” — and ‘dashes’… «guillemets»",
    "math: ∑ x² ≤ ∞, α→β, ½",
]


def make_samples(corpus_text, n_lines=10, n_par=4):
    lines = [ln for ln in corpus_text.split("\n") if ln.strip()]
    out = []
    for ln in lines[:n_lines]:
        out.append(ln)
    pars = [p for p in corpus_text.split("\n\n") if p.strip()]
    for p in pars[:n_par]:
        if p not in out:
            out.append(p)
    out += HAND_SAMPLES
    return out


def write_tokenizer_fixture(tok, samples, path, log=print):
    n_bad = 0
    with open(path, "w", encoding="utf-8") as f:
        for s in samples:
            ids = tok.encode(s, add_special_tokens=False).ids
            back = tok.decode(ids, skip_special_tokens=False)
            if back != s:
                n_bad += 1
                log("WARNING: tokenizer round trip differs for %r -> %r" % (s[:40], back[:40]))
            f.write(json.dumps({"text": s, "ids": ids}, ensure_ascii=False) + "\n")
    log("tokenizer fixture: %d samples -> %s (%d round-trip mismatches)" % (len(samples), path, n_bad))
    return n_bad


def sequence_a(tok, corpus_text, bos, n_tokens, min_pos):
    ids = tok.encode(corpus_text, add_special_tokens=False).ids
    if len(ids) + 1 < min_pos:
        raise ValueError("the corpus gives only %d tokens; sequence A needs at least %d positions" % (len(ids), min_pos))
    return [bos] + ids[:n_tokens]


def sequence_b(n_vocab, specials, n, seed):
    rng = np.random.default_rng(seed)
    allowed = np.array([i for i in range(n_vocab) if i not in specials], dtype=np.int64)
    return [int(x) for x in rng.choice(allowed, size=n, replace=True)]
