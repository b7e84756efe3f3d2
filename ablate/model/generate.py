"""Greedy decoding of seq2seq rows (``seq2seq.py``), for the decoder-only, prefix-LM and
encoder–decoder families alike: the model reads the source (and SEP), then writes the target one
token at a time, each token its own argmax, until every row has written EOS.

``greedy(model, tokens)`` decodes with a key/value cache where the model allows it: the prompt
(the source; an encoder–decoder's decoder gets SEP) in one forward, then one forward step of one
position per output token, each layer's new query attending to its cached keys and values (an
encoder–decoder's cross-attention keys and values are projected once). Positions are applied at
the step's absolute position: additive tables and rotations (learned, sinusoidal, rope, xpos) are
position-wise, biases (alibi, t5_bias, kerple) are the row of the full bias at that position.

Decoding is uncached (``decodes_cached`` says why) where one step cannot reproduce the forward:
a ``qkv_sharing`` class with its own ``forward`` or ``project`` it does not describe, ``mask_self``,
``attention=local|linear`` (a window or a running state over the row), and ``pos_enc=deberta``
(its score term needs the queries of every position). Uncached decoding runs the whole row once
per output token: exact by construction (every family is causal after the source), one forward of
T positions per token instead of one position.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn as nn
from torch import Tensor

from .attention import Attention, attention_mask
from .patterns import Softmax
from .positions import Position
from .seq2seq import EncoderDecoder, memory_padding_mask


def decodes_cached(model: nn.Module) -> str | None:
    """None when ``model`` decodes with a key/value cache; otherwise why it decodes uncached."""
    for block in model.blocks:
        attn = block.attn
        if not isinstance(attn, Attention) or type(attn).forward is not Attention.forward:
            return f"qkv_sharing={type(attn).__name__} has a forward of its own"
        if attn.mask_self:
            return "mask_self hides each token's own key, which a one-position step cannot see"
        if type(attn.pattern) is not Softmax:
            return f"attention={type(attn.pattern).__name__.lower()} is not softmax over the cached keys"
    if type(model.pos).score_bias is not Position.score_bias:
        return f"pos_enc={type(model.pos).__name__.lower()} scores keys with every position's query"
    return None


def greedy(model: nn.Module, tokens: Tensor, max_new: int | None = None, cache: bool | None = None) -> Tensor:
    """The target each row of ``tokens`` (B, T: seq2seq rows, whose target region is ignored) gets by
    greedy decoding: (B, n) token ids, token j the prediction at column S - 1 + j; ``n = max_new``
    (default, and at most, T - S + 1: the most target tokens, EOS included, a row holds); after a
    row's EOS, EOS again. ``cache``: None where the model allows it
    (``decodes_cached``), True to insist (ValueError naming the reason), False never."""
    layout = model.layout
    T = tokens.shape[1]
    S = layout.source_len(T)
    n = T - S + 1 if max_new is None else min(int(max_new), T - S + 1)
    reason = decodes_cached(model)
    if cache and reason:
        raise ValueError(f"no cached decoding: {reason}")
    use_cache = reason is None if cache is None else bool(cache)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            step = _cached_steps(model, tokens, S, T) if use_cache else _uncached_steps(model, tokens, S)
            return _decode(step, n, tokens.shape[0], layout.eos_id, tokens.device)
    finally:
        model.train(was_training)


def _decode(step: Callable[[Tensor | None], Tensor], n: int, B: int, eos: int, device: torch.device) -> Tensor:
    out = torch.full((B, n), eos, dtype=torch.long, device=device)
    done = torch.zeros(B, dtype=torch.bool, device=device)
    last = None
    for j in range(n):
        logits = step(last)  # (B, V): the prediction for column S + j
        last = torch.where(done, torch.full_like(done, eos, dtype=torch.long), logits.argmax(-1))
        out[:, j] = last
        done |= last.eq(eos)
        if bool(done.all()):
            break
    return out


def _uncached_steps(model: nn.Module, tokens: Tensor, S: int) -> Callable[[Tensor | None], Tensor]:
    row = tokens.clone()
    fill = model.pad_id if model.pad_id is not None else model.layout.eos_id
    row[:, S:] = fill
    column = [S - 1]

    def step(last: Tensor | None) -> Tensor:
        if last is not None:
            row[:, column[0] + 1] = last
            column[0] += 1
        return model(row)[:, column[0]]

    return step


def _at_position(pos: Position, t: int) -> tuple[Callable[[Tensor], Tensor], Callable[[Tensor, Tensor], tuple]]:
    """``embed`` and ``rotate`` of ``pos`` for one position ``t``: the hooks are position-wise, so the
    position is placed last in a zero row of length t + 1 and read back."""
    def embed(x: Tensor) -> Tensor:
        if type(pos).embed is Position.embed:
            return x
        z = x.new_zeros(x.shape[0], t + 1, x.shape[2])
        z[:, -1:] = x
        return pos.embed(z)[:, -1:]

    def rotate(q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        if type(pos).rotate is Position.rotate:
            return q, k
        zq, zk = q.new_zeros(*q.shape[:2], t + 1, q.shape[3]), k.new_zeros(*k.shape[:2], t + 1, k.shape[3])
        zq[..., -1:, :], zk[..., -1:, :] = q, k
        rq, rk = pos.rotate(zq, zk)
        return rq[..., -1:, :], rk[..., -1:, :]

    return embed, rotate


def _self_attention(attn: Attention, h: Tensor, rotate: Callable, mask: Any, is_causal: bool, kv: dict) -> Tensor:
    """``Attention.forward`` (no score term) that appends this call's keys and values to ``kv``."""
    B, T, _ = h.shape
    q, k, v = attn.project(h)
    q, k = rotate(q, k)
    kv["k"] = k if "k" not in kv else torch.cat([kv["k"], k], 2)
    kv["v"] = v if "v" not in kv else torch.cat([kv["v"], v], 2)
    if isinstance(mask, Tensor) and mask.dtype != torch.bool and mask.dtype != q.dtype:
        mask = mask.to(q.dtype)
    y = attn.pattern(q, kv["k"], kv["v"], mask, is_causal, 0.0)
    return attn.out_proj(y.transpose(1, 2).reshape(B, T, attn.d_model))


def _cached_steps(model: nn.Module, tokens: Tensor, S: int, T: int) -> Callable[[Tensor | None], Tensor]:
    encoder_decoder = isinstance(model, EncoderDecoder)
    cross: list[tuple[Tensor, Tensor]] | None = None
    memory_mask = None
    if encoder_decoder:  # the decoder's row starts at SEP; the source is encoded once
        source, prompt = tokens[:, :S - 1], tokens[:, S - 1:S]
        memory = model.encode(source)
        memory_mask = memory_padding_mask(source, model.pad_id if model.source_padded else None)
        cross = [block.cross.project_memory(memory) for block in model.blocks]
        length, key_pad, bidirectional = T - S + 1, None, False
    else:
        prompt, length = tokens[:, :S], T
        key_pad = prompt.eq(model.pad_id) if model.pad_id is not None and model.layout.padded_sources else None
        bidirectional = getattr(model, "arch", "decoder") == "prefix_lm"
    bias = model.pos.bias(length, length)
    caches: list[dict] = [{} for _ in model.blocks]
    P = prompt.shape[1]

    def layers(x: Tensor, rotate: Callable, mask: Any, is_causal: bool) -> Tensor:
        for i, block in enumerate(model.blocks):
            x = block.sublayer(x, lambda h: _self_attention(block.attn, h, rotate, mask, is_causal, caches[i]),
                               block.attn_norm, getattr(block, "attn_out_norm", None))
            if cross is not None:
                k, v = cross[i]
                x = block.sublayer(x, lambda h: block.cross.attend(block.cross.project_queries(h), k, v, memory_mask),
                                   block.cross_norm, getattr(block, "cross_out_norm", None))
            x = block.sublayer(x, block.ffn, block.ffn_norm, getattr(block, "ffn_out_norm", None))
        h = model.final_norm(x[:, -1])
        return model.head(h if model.output_mult == 1.0 else h * model.output_mult)

    position = [P - 1]

    def step(last: Tensor | None) -> Tensor:
        if last is None:  # the prompt, in one forward
            x = model.pos.embed(model.embed(prompt))
            mask, is_causal = attention_mask(P, tokens.device, causal=not bidirectional, key_padding=key_pad,
                                              bias=None if bias is None else bias[:, :P, :P])
            return layers(x, model.pos.rotate, mask, is_causal)
        t = position[0] = position[0] + 1
        embed, rotate = _at_position(model.pos, t)
        mask = None if bias is None else bias[:, t:t + 1, :t + 1]
        if key_pad is not None and bool(key_pad.any()):
            allowed = torch.cat([~key_pad, key_pad.new_ones(key_pad.shape[0], t + 1 - P)], 1)[:, None, None, :]
            mask = allowed if mask is None else mask.masked_fill(~allowed, float("-inf"))
        return layers(embed(model.embed(last[:, None])), rotate, mask, False)

    return step
