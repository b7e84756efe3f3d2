"""Sequence-to-sequence: the layout every family reads, cross-attention, and the encoder–decoder.

A seq2seq task (``ablate.data.seq2seq``) lays each example out in one row of ``tokens`` (B, T):

    [pad … source … SEP | target … EOS pad …]        targets: -100, but at SEP and every target position
     <---- S positions --->                          the next target token (the last one: EOS)

The source is left-padded so that SEP sits at column S - 1 of every row of a batch; S depends on
the row length only (``Seq2SeqLayout.source_len``), so a model splits a batch without reading it.
The three families read the same rows and are scored on the same positions (T5, Raffel et al.
2020, §3.2, Fig. 4):

* decoder-only: one causal stack over the whole row (``Transformer``, ``model.arch=decoder``);
* prefix LM: one stack, bidirectional over the S positions of the source (SEP included), causal
  after them (``Transformer`` with ``prefix_lm``);
* encoder–decoder (Vaswani et al. 2017, §3.1): an encoder over the source, a decoder over SEP and
  the target (SEP is its start token) whose every layer attends causally to itself and, through
  cross-attention, to every encoder output (:class:`EncoderDecoder`).

Fine-tuned on a downstream task (classification or tagging: its rows have no source and target, and
its labels sit where the task puts them), the two families built for seq2seq read the whole row, so
that the pretrained body is used as it was trained and the new head reads every position:

* prefix LM: the whole row is the prefix (bidirectional, padding masked);
* encoder–decoder: BART's recipe (Lewis et al. 2020, §3.1 and §3.2): "the same input is fed into
  the encoder and decoder", the head on the decoder's top state at every position. The causal task
  layout puts a classification label at the row's last token (CLS; BART adds one "to the end so that
  representation for the token in the decoder can attend to decoder states from the complete
  input"); a tagging label sits at its token, whose decoder state reads its left context and,
  through cross-attention, the whole encoded row.

A model is built this way when it gets no :class:`Seq2SeqLayout` (``layout=None``); the config check
allows it only on a fine-tune job (pretraining these families needs a seq2seq task).

Cross-attention reuses the ``qkv_sharing`` option's own class and its fused projection: each
role of the projection (``q``, ``k``, ``v``, ``qk``, ``kv``, ``qkv``) maps the decoder's states
(a role holding q) or the encoder's outputs (a role holding k or v). So in cross-attention Q=K
and Q=K=V are tied weights (one matrix maps both sequences: parameters shared, no matmul saved),
K=V is one projected tensor as in self-attention, and MQA/GQA keep their K/V heads. Positions act
in self-attention only, as in T5 (its relative bias is in self-attention; cross-attention has
none) and the original Transformer (additive positions enter each stack at its embeddings); RoPE
is not applied across the two sequences either. Cross-attention is softmax attention over every
unpadded source position: ``attention=local|linear`` changes the self-attention of both stacks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from .attention import attention_mask
from .flops import forward_flops, linear_flops
from .patterns import Softmax
from .positions import Position
from .block import Block

#: ``model.arch``: the families (``auto``: decoder when ``model.causal``, else encoder)
ARCHS = ("auto", "decoder", "encoder", "prefix_lm", "encoder_decoder")
#: the families that read a seq2seq layout (a source and a target)
SEQ2SEQ_ARCHS = ("prefix_lm", "encoder_decoder")


@dataclass(frozen=True)
class Seq2SeqLayout:
    """What a model needs to know of a seq2seq task's rows: the SEP and EOS token ids, and for each
    row length T the source length S (SEP included; SEP at column S - 1)."""

    sep_id: int
    eos_id: int
    source_lens: Mapping[int, int] = field(default_factory=dict)
    padded_sources: bool = False  # whether a source may be shorter than S - 1 (left-padded): masked then

    def source_len(self, length: int) -> int:
        if length not in self.source_lens:
            known = ", ".join(f"{t} (source {s})" for t, s in sorted(self.source_lens.items()))
            raise ValueError(f"seq2seq: no source length for rows of length {length}; the task lays out {known}")
        return self.source_lens[length]


def resolved_arch(arch: str, causal: bool) -> str:
    """``model.arch`` with ``auto`` made explicit: today's decoder (causal) or encoder."""
    return ("decoder" if causal else "encoder") if arch == "auto" else arch


# ---------------------------------------------------------------------------------------------
# cross-attention

def has_roles(attn: nn.Module) -> bool:
    """Whether ``attn`` has a fused input projection whose ``roles`` say what each row block is."""
    return isinstance(getattr(getattr(attn, "qkv", None), "roles", None), tuple)


class CrossAttention(nn.Module):
    """Decoder states attend to the encoder's outputs through the projections of ``attn`` (an
    instance of the ``qkv_sharing`` option, with its own weights): roles holding q map the decoder's
    states, roles holding k or v map the encoder's outputs (module docstring)."""

    def __init__(self, attn: nn.Module) -> None:
        super().__init__()
        if not has_roles(attn):
            raise ValueError(
                f"qkv_sharing: {type(attn).__name__} has no fused projection `qkv` with `roles`, so it cannot "
                "serve cross-attention, where the queries come from the decoder and the keys and values from "
                "the encoder; subclass ablate.model.attention.Attention and build the projection with "
                "self._projection(...) (docs/extending.md)")
        self.attn = attn
        self.pattern = Softmax(attn.d_model, attn.n_heads, False)

    def project(self, x: Tensor, memory: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """q (B, H, T, hd) from the decoder's ``x``; k, v (B, H_kv, S, hd) from ``memory``."""
        q, kv = self.project_queries(x), self.project_memory(memory)
        return q, kv[0], kv[1]

    def _blocks(self) -> list[tuple[str, Tensor, Tensor | None]]:
        proj = self.attn.qkv
        sizes = [size for _, size in proj.roles]
        biases = proj.bias.split(sizes) if proj.bias is not None else [None] * len(sizes)
        return [(role, w, b) for (role, _), w, b in zip(proj.roles, proj.weight.split(sizes), biases)]

    def project_queries(self, x: Tensor) -> Tensor:
        (w, b), = [(w, b) for role, w, b in self._blocks() if "q" in role]
        return self.attn.heads(F.linear(x, w, b))

    def project_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """(k, v) of the encoder's outputs: computed once per generated sequence when decoding."""
        out: dict[str, Tensor] = {}
        for role, w, b in self._blocks():
            kv_role = role.replace("q", "")
            if kv_role:
                t = self.attn.heads(F.linear(memory, w, b))
                out.update({r: t for r in kv_role})  # K=V: one tensor in both roles
        return out["k"], out["v"]

    def attend(self, q: Tensor, k: Tensor, v: Tensor, memory_mask: Tensor | None) -> Tensor:
        B, _, T, _ = q.shape
        y = self.pattern(q, k, v, memory_mask, False, self.attn.dropout if self.training else 0.0)
        return self.attn.out_proj(y.transpose(1, 2).reshape(B, T, self.attn.d_model))

    def forward(self, x: Tensor, memory: Tensor, memory_mask: Tensor | None = None) -> Tensor:
        return self.attend(*self.project(x, memory), memory_mask)

    def flops(self, seq_len: int, batch_size: int, memory_len: int = 0) -> float:
        """Forward FLOPs per decoder token: the query rows and ``out_proj`` once per decoder token, the
        key/value rows once per source token (``memory_len`` per ``seq_len`` decoder tokens), the
        scores and the weighted sum over ``memory_len`` keys."""
        d = self.attn.d_model
        q_rows = sum(size for role, size in self.attn.qkv.roles if "q" in role)
        kv_rows = sum(size for role, size in self.attn.qkv.roles if role.replace("q", ""))
        per_source_token = 2 * d * kv_rows
        return (2 * d * q_rows + linear_flops(self.attn.out_proj)
                + per_source_token * memory_len / max(seq_len, 1) + 4.0 * memory_len * d)


def memory_padding_mask(source: Tensor, pad_id: int | None) -> Tensor | None:
    """(B, 1, 1, S) bool, True where a decoder position may attend (an unpadded source token)."""
    if pad_id is None:
        return None
    allowed = source.ne(pad_id)
    allowed = allowed | ~allowed.any(-1, keepdim=True)  # an all-pad source: attend to every key
    return allowed[:, None, None, :]


class DecoderBlock(Block):
    """A decoder layer of an encoder–decoder: self-attention, cross-attention, FFN, each a residual
    sublayer wired by the norm placement (Vaswani et al. 2017, §3.1, Fig. 1)."""

    def __init__(self, attn: nn.Module, cross: CrossAttention, ffn: nn.Module, norm: Callable[[], nn.Module],
                 placement: str, alpha: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__(attn, ffn, norm, placement, alpha, dropout)
        self.cross, self.cross_norm = cross, norm()
        if placement == "sandwich":
            self.cross_out_norm = norm()

    def forward(self, x: Tensor, pos: Position, attn_mask: Tensor | None = None, is_causal: bool = False,
                memory: Tensor | None = None, memory_mask: Tensor | None = None) -> Tensor:
        x = self.sublayer(x, lambda h: self.attn(h, pos, attn_mask, is_causal),
                          self.attn_norm, getattr(self, "attn_out_norm", None))
        x = self.sublayer(x, lambda h: self.cross(h, memory, memory_mask),
                          self.cross_norm, getattr(self, "cross_out_norm", None))
        return self.sublayer(x, self.ffn, self.ffn_norm, getattr(self, "ffn_out_norm", None))


# ---------------------------------------------------------------------------------------------
# the encoder–decoder

class EncoderDecoder(nn.Module):
    """An encoder stack over the source and a decoder stack over SEP + target, one token embedding
    table for both (Vaswani et al. 2017, §3.4; T5), a per-token head on the decoder. ``forward``
    takes a seq2seq row (module docstring) and returns (B, T, n_outputs) logits aligned with it: the
    decoder's at columns S - 1 … T - 1, zeros at the source's (which no target labels). Without a
    ``layout`` (a downstream task) the whole row goes to both stacks and every column's logits are the
    decoder's (BART, Lewis et al. 2020, §3.1-3.2: module docstring).

    ``blocks`` are the decoder's layers (``n_layers``), ``encoder`` the encoder's; ``pos`` and
    ``enc_pos`` the two stacks' position modules (one per stack: a decoder's is causal)."""

    arch = "encoder_decoder"
    causal = True  # the decoder's self-attention

    def __init__(self, *, vocab_size: int, n_outputs: int, d_model: int, n_heads: int, bias: bool, dropout: float,
                 pad_id: int | None, layout: Seq2SeqLayout | None, enc_pos: Position, pos: Position,
                 encoder: list[Block], blocks: list[DecoderBlock], enc_norm: nn.Module, final_norm: nn.Module,
                 embed_scale: float = 1.0) -> None:
        super().__init__()
        self.d_model, self.n_heads = d_model, n_heads
        self.n_layers, self.encoder_layers = len(blocks), len(encoder)
        self.pad_id, self.layout, self.embed_scale = pad_id, layout, embed_scale
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.enc_pos, self.pos = enc_pos, pos
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.ModuleList(encoder)
        self.blocks = nn.ModuleList(blocks)
        self.enc_norm, self.final_norm = enc_norm, final_norm
        self.head = nn.Linear(d_model, n_outputs, bias=bias)
        self.output_mult = 1.0
        self.flex = "off"
        self.mask_self = any(getattr(b.attn, "mask_self", False) for b in [*encoder, *blocks])  # self-attention only

    def embed(self, tokens: Tensor) -> Tensor:
        x = self.tok_emb(tokens)
        return x if self.embed_scale == 1.0 else x * self.embed_scale

    def token_rms(self) -> float:
        return float(self.tok_emb.weight.detach().float().pow(2).mean().sqrt()) * self.embed_scale

    def split(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """(the encoder's input, the decoder's input) of a batch of rows: a seq2seq row's source
        without SEP and SEP + target; without a layout, the whole row to both."""
        if self.layout is None:
            return tokens, tokens
        S = self.layout.source_len(tokens.shape[1])
        return tokens[:, :S - 1], tokens[:, S - 1:]

    @property
    def source_padded(self) -> bool:
        """Whether the encoder's input may hold padding (masked then): a seq2seq task's left-padded
        sources, or a downstream task's right-padded row."""
        return self.pad_id is not None and (self.layout is None or self.layout.padded_sources)

    def encode(self, source: Tensor) -> Tensor:
        """The encoder's outputs (B, S - 1, d) for ``source`` (B, S - 1)."""
        x = self.drop(self.enc_pos.embed(self.embed(source)))
        T = source.shape[1]
        pad = source.eq(self.pad_id) if self.source_padded else None
        attn_mask, is_causal = attention_mask(T, source.device, causal=False, mask_self=self.mask_self,
                                              bias=self.enc_pos.bias(T, T), key_padding=pad)
        for block in self.encoder:
            x = block(x, self.enc_pos, attn_mask, is_causal)
        return self.enc_norm(x)

    def decode(self, target: Tensor, memory: Tensor, memory_mask: Tensor | None) -> Tensor:
        """The decoder's logits (B, T_dec, n_outputs) for ``target`` (SEP + target tokens)."""
        x = self.drop(self.pos.embed(self.embed(target)))
        T = target.shape[1]
        attn_mask, is_causal = attention_mask(T, target.device, causal=True, mask_self=self.mask_self,
                                              bias=self.pos.bias(T, T))
        for block in self.blocks:
            x = block(x, self.pos, attn_mask, is_causal, memory, memory_mask)
        return self.logits(self.final_norm(x))

    def logits(self, x: Tensor) -> Tensor:
        return self.head(x if self.output_mult == 1.0 else x * self.output_mult)

    def forward(self, tokens: Tensor) -> Tensor:
        source, target = self.split(tokens)
        logits = self.decode(target, self.encode(source), memory_padding_mask(source, self.pad_id if self.source_padded else None))
        if self.layout is None:  # the decoder read the whole row: its logits are every column's
            return logits
        return torch.cat([logits.new_zeros(logits.shape[0], source.shape[1], logits.shape[2]), logits], 1)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def ffn_param_mismatch(self) -> int:
        unique = {id(b): b for b in [*self.encoder, *self.blocks]}.values()
        return sum(int(b.ffn.param_mismatch()) for b in unique if callable(getattr(b.ffn, "param_mismatch", None)))

    def stacks(self) -> list[tuple[str, nn.Module]]:
        """(name, view) of the two stacks as ``flops.forward_flops`` reads a model."""
        encoder = _StackView(self.d_model, self.n_heads, False, self.enc_pos, self.encoder, self.enc_norm)
        decoder = _StackView(self.d_model, self.n_heads, True, self.pos, self.blocks, self.final_norm)
        return [("encoder", encoder), ("decoder", decoder)]

    def flops_by_component(self, seq_len: int, batch_size: int = 1) -> dict[str, float]:
        """Forward FLOPs per token of a row of ``seq_len``: the encoder at its source length, the decoder
        (self-attention, FFN, norms, head) and its cross-attention at the target's, each weighted by
        its share of the row (docs/measurements.md). Without a layout both stacks read the whole row:
        each token costs an encoder token and a decoder token."""
        if self.layout is None:
            n_src = n_dec = seq_len
        else:
            S = self.layout.source_len(seq_len)
            n_src, n_dec = S - 1, seq_len - S + 1
        out = {"attention": 0.0, "ffn": 0.0, "position": 0.0, "norm": 0.0, "cross_attention": 0.0, "head": 0.0}
        for (name, stack), length in zip(self.stacks(), (n_src, n_dec)):
            for key, value in forward_flops(stack, length, batch_size).items():
                out[key] += value * length / seq_len
        unique = {id(b): b for b in self.blocks}
        per_block = {i: b.cross.flops(n_dec, batch_size, n_src) for i, b in unique.items()}
        out["cross_attention"] = sum(per_block[id(b)] for b in self.blocks) * n_dec / seq_len
        out["head"] = linear_flops(self.head) * n_dec / seq_len
        return out

    def flops_per_token(self, seq_len: int, batch_size: int = 1) -> float:
        """Training FLOPs per row token: 3 × the forward (``Transformer.flops_per_token``)."""
        return 3 * sum(self.flops_by_component(seq_len, batch_size).values())


class _StackView(nn.Module):
    """One stack of an encoder–decoder as ``flops.forward_flops`` reads a ``Transformer`` (no head)."""

    def __init__(self, d_model: int, n_heads: int, causal: bool, pos: Position, blocks: Any, final_norm: nn.Module):
        super().__init__()
        self.d_model, self.n_heads, self.causal = d_model, n_heads, causal
        self.pos, self.blocks, self.final_norm = pos, blocks, final_norm
        self.head = nn.Identity()
