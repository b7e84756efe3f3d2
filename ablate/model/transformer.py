"""The Transformer, and ``build_model``: the one place a model is assembled from a config.

    tokens (B, T) -> embedding (+ additive positions) -> n_layers × Block -> final norm
                  -> linear head -> logits (B, T, n_outputs)

A Block is attention then FFN, each wrapped as a residual sublayer according to the norm
placement (pre / post / sandwich, see ``norms.py``). The position module is shared by all
layers, and so is the attention pattern; the attention mask is built once per forward and
reused by every layer. With ``model.share_layers`` (ALBERT) several entries of ``blocks`` are
the same Block object: its parameters are counted once, its compute once per layer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

import torch
import torch.nn as nn
from omegaconf import OmegaConf
from torch import Tensor

from ablate.components import Fraction, PositiveInt, resolve

from .attention import attention_mask
from .flops import forward_flops, training_flops
from .init import pairing_problems
from .norms import PLACEMENTS, residual_alpha
from .patterns import Softmax
from .positions import Position

#: the config groups that name a model component by ``_target_``, in the order they are built
MODEL_GROUPS = ("qkv_sharing", "attention", "pos_enc", "norm", "ffn", "init")


@dataclass
class ModelSettings:
    """The ``model`` node of the config: the shape every variant shares."""

    d_model: PositiveInt
    n_heads: PositiveInt
    n_layers: PositiveInt
    causal: bool
    dropout: Fraction = 0.0
    bias: bool = True   # bias in the attention projections and the head
    # ALBERT's cross-layer sharing (Lan et al. 2020, §3.1): every k consecutive layers use one
    # block's weights; "all" = one block for the whole stack. Parameters shrink, FLOPs do not.
    share_layers: Literal["none", "all"] | PositiveInt = "none"
    # The factor on the token embeddings: "none" (GPT-2, BERT: as the init scheme drew them) or
    # "sqrt_d" (Vaswani et al. 2017, §3.4, meant for embeddings drawn with std d^-1/2). Fixed
    # additive positions follow the tokens' scale (pos_enc=sinusoidal, amplitude: tokens).
    embed_scale: Literal["none", "sqrt_d"] = "none"

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Any) -> list[str]:
        k, n = settings.get("share_layers", "none"), settings.get("n_layers")
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            return []
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            return [f"model.share_layers={k} layers per block cannot be checked against "
                    f"model.n_layers={n!r} (not a positive integer)"]
        if k > n:
            return [f"model.share_layers={k} is more than model.n_layers={n}; "
                    "model.share_layers=all shares one block across every layer"]
        return []


#: ``model.embed_scale`` -> the factor on the token embeddings of a d_model-wide model
EMBED_SCALES: dict[str, Callable[[int], float]] = {"none": lambda d: 1.0, "sqrt_d": lambda d: d ** 0.5}


def layers_per_block(share_layers: Any, n_layers: int) -> int:
    """k: how many consecutive layers share one block (``model.share_layers``)."""
    if share_layers in (None, "none"):
        return 1
    return n_layers if share_layers == "all" else int(share_layers)


class Block(nn.Module):
    """One layer: x -> sublayer(attention) -> sublayer(FFN), wired by ``placement``:
    pre x + f(N(x)); post N(α·x + f(x)); sandwich x + N'(f(N(x)))."""

    def __init__(self, attn: nn.Module, ffn: nn.Module, norm: Callable[[], nn.Module],
                 placement: str, alpha: float = 1.0, dropout: float = 0.0) -> None:
        super().__init__()
        if placement not in PLACEMENTS:
            raise ValueError(f"norm.placement={placement!r}; valid choices: {', '.join(PLACEMENTS)}")
        self.attn, self.ffn = attn, ffn
        self.attn_norm, self.ffn_norm = norm(), norm()
        if placement == "sandwich":
            self.attn_out_norm, self.ffn_out_norm = norm(), norm()
        self.placement, self.alpha = placement, alpha
        self.drop = nn.Dropout(dropout)

    def sublayer(self, x: Tensor, f: Callable[[Tensor], Tensor], norm: nn.Module,
                 out_norm: nn.Module | None = None) -> Tensor:
        if self.placement == "pre":
            return x + self.drop(f(norm(x)))
        if self.placement == "post":
            return norm((x if self.alpha == 1.0 else self.alpha * x) + self.drop(f(x)))
        return x + self.drop(out_norm(f(norm(x))))  # sandwich

    def forward(self, x: Tensor, pos: Position, attn_mask: Tensor | None = None,
                is_causal: bool = False) -> Tensor:
        x = self.sublayer(x, lambda h: self.attn(h, pos, attn_mask, is_causal),
                          self.attn_norm, getattr(self, "attn_out_norm", None))
        return self.sublayer(x, self.ffn, self.ffn_norm, getattr(self, "ffn_out_norm", None))


class Transformer(nn.Module):
    """Encoder (``causal=False``) or decoder (``causal=True``) with a per-token head.

    ``pad_id``: keys holding it are masked (encoders; right padding). A causal model ignores
    it: with right padding no real token can see a pad, and the fast causal path is kept.
    """

    def __init__(self, *, vocab_size: int, n_outputs: int, d_model: int, n_heads: int, n_layers: int,
                 causal: bool, dropout: float, bias: bool, pad_id: int | None,
                 pos: Position, blocks: list[Block], final_norm: nn.Module, embed_scale: float = 1.0) -> None:
        super().__init__()
        self.d_model, self.n_heads, self.n_layers = d_model, n_heads, n_layers
        self.causal, self.pad_id, self.embed_scale = causal, pad_id, embed_scale
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos = pos
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = final_norm
        self.head = nn.Linear(d_model, n_outputs, bias=bias)
        self.mask_self = any(getattr(b.attn, "mask_self", False) for b in blocks)

    def mask(self, tokens: Tensor) -> tuple[Tensor | None, bool]:
        """(attn_mask, is_causal) for this batch, shared by all layers."""
        T = tokens.shape[1]
        pad = tokens.eq(self.pad_id) if self.pad_id is not None and not self.causal else None
        return attention_mask(T, tokens.device, causal=self.causal, mask_self=self.mask_self,
                              bias=self.pos.bias(T, T), key_padding=pad)

    def embed(self, tokens: Tensor) -> Tensor:
        """The token embeddings as the model adds positions to them (``model.embed_scale``)."""
        x = self.tok_emb(tokens)
        return x if self.embed_scale == 1.0 else x * self.embed_scale

    def token_rms(self) -> float:
        """The RMS of the token embedding table as ``embed`` scales it."""
        return float(self.tok_emb.weight.detach().float().pow(2).mean().sqrt()) * self.embed_scale

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.drop(self.pos.embed(self.embed(tokens)))
        attn_mask, is_causal = self.mask(tokens)
        for block in self.blocks:
            x = block(x, self.pos, attn_mask, is_causal)
        return self.head(self.final_norm(x))

    def num_params(self) -> int:
        """Trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def ffn_param_mismatch(self) -> int:
        """Parameters of the model's FFNs above (+) or below (-) plain FFNs of the same d_model, mult
        and bias: what ``ffn.match_params`` could not match with an integer width (``ffn.py``; 0 for
        plain FFNs and for FFNs that do not report it). Shared layers count once, as parameters do."""
        unique = {id(b): b for b in self.blocks}.values()
        return sum(int(b.ffn.param_mismatch()) for b in unique if callable(getattr(b.ffn, "param_mismatch", None)))

    def flops_by_component(self, seq_len: int, batch_size: int = 1) -> dict[str, float]:
        """Forward FLOPs per token at length ``seq_len`` and ``batch_size`` sequences per batch, by
        component (attention, ffn, position, norm, head), each as the component counts itself
        (``flops.py``; docs/measurements.md)."""
        return forward_flops(self, seq_len, batch_size)

    def flops_per_token(self, seq_len: int, batch_size: int = 1) -> float:
        """Training FLOPs per input token (forward + backward: 3 × the forward's matmuls, plus what
        a checkpointed pattern recomputes) at length ``seq_len``, ``batch_size`` sequences per
        batch. Pass the run's batch size: it matters only for work done once per batch (DeBERTa's
        relative projections), which the default of 1 charges to every sequence. Shared layers
        (``model.share_layers``) cost what unshared ones do: each layer still computes."""
        return training_flops(self, seq_len, batch_size)


def option(cfg: Any, group: str) -> tuple[Any, dict[str, Any]]:
    """(target, settings) of a config group, from a DictConfig or a plain mapping: its
    ``_target_`` imported, its other keys (but the label ``name``) as keyword arguments."""
    node = cfg[group]
    if OmegaConf.is_config(node):
        node = OmegaConf.to_container(node, resolve=True)
    return resolve(group, node)


def assemble(cfg: Any, vocab_size: int, n_outputs: int, max_len: int, pad_id: int | None = None) -> Transformer:
    """The model described by the root config ``cfg``, with each module's own initialisation.

    Reads ``model.{d_model, n_heads, n_layers, causal, dropout, bias, share_layers, embed_scale}`` and the
    groups ``qkv_sharing``, ``attention`` (softmax when absent), ``pos_enc``, ``norm``
    (+ ``placement``) and ``ffn``: each a ``_target_``
    plus its settings (``ablate.components``). ``max_len``: the longest sequence the model is
    expected to see; positions use it unless ``pos_enc`` sets its own ``max_len``.
    """
    m = cfg["model"]
    d, H, L = int(m["d_model"]), int(m["n_heads"]), int(m["n_layers"])
    causal, dropout, bias = bool(m["causal"]), float(m.get("dropout", 0.0)), bool(m.get("bias", True))

    attn_cls, attn_kw = option(cfg, "qkv_sharing")
    pos_cls, pos_kw = option(cfg, "pos_enc")
    norm_cls, norm_kw = option(cfg, "norm")
    ffn_cls, ffn_kw = option(cfg, "ffn")
    placement = norm_kw.pop("placement", "pre")
    alpha = residual_alpha(norm_cls, L)
    if alpha != 1.0 and placement != "post":
        raise ValueError(f"norm={norm_cls.__name__.lower()} scales the residual of a post-LN block "
                         f"(Wang et al. 2022); it needs norm.placement=post, got {placement!r}")

    pos = pos_cls(**{"d_model": d, "n_heads": H, "causal": causal, "max_len": max_len, **pos_kw})
    # one pattern for the whole model, like the position module (built-ins hold no parameters)
    pattern_cls, pattern_kw = option(cfg, "attention") if "attention" in cfg else (Softmax, {})
    pattern = pattern_cls(d, H, causal, **pattern_kw)

    def norm() -> nn.Module:
        return norm_cls(d, **norm_kw)

    def block() -> Block:
        attn = attn_cls(d, H, dropout=dropout, bias=bias, **attn_kw)
        if not hasattr(attn, "pattern") and pattern_cls is not Softmax:
            raise ValueError(f"qkv_sharing: {type(attn).__name__} has no `pattern` attribute, so it cannot "
                             f"use attention={type(pattern).__name__.lower()}; subclass ablate.model.attention."
                             "Attention (docs/extending.md)")
        attn.pattern = pattern
        return Block(attn, ffn_cls(d, **ffn_kw), norm, placement, alpha, dropout)

    k = layers_per_block(m.get("share_layers", "none"), L)
    unique = [block() for _ in range(-(-L // k))]
    blocks = [unique[i // k] for i in range(L)]  # the same module object: shared weights
    return Transformer(vocab_size=vocab_size, n_outputs=n_outputs, d_model=d, n_heads=H, n_layers=L,
                       causal=causal, dropout=dropout, bias=bias, pad_id=pad_id, pos=pos,
                       blocks=blocks, final_norm=nn.Identity() if placement == "post" else norm(),
                       embed_scale=EMBED_SCALES[m.get("embed_scale", "none")](d))


def build_model(cfg: Any, vocab_size: int, n_outputs: int, max_len: int,
                pad_id: int | None = None) -> Transformer:
    """Assemble the model described by ``cfg`` and apply its ``init`` scheme: the one place a
    model is made from a config."""
    model = assemble(cfg, vocab_size, n_outputs, max_len, pad_id)
    init, settings = option(cfg, "init")
    problems = pairing_problems(init, settings, model)
    if problems:
        raise ValueError("; ".join(problems))
    init(model, **settings)
    if hasattr(model.pos, "match_tokens"):  # a fixed position table takes the tokens' scale
        with torch.no_grad():
            model.pos.match_tokens(model.token_rms())
    return model
