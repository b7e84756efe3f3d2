"""The Transformer, and ``build_model``: the one place a model is assembled from a config.

    tokens (B, T) -> embedding (+ additive positions) -> n_layers × Block -> final norm
                  -> linear head -> logits (B, T, n_outputs)

A Block is attention then FFN, each wrapped as a residual sublayer according to the norm
placement (pre / post / sandwich, see ``norms.py``). The position module is shared by all
layers, and so is the attention pattern; the attention mask is built once per forward and
reused by every layer. With ``model.share_layers`` (ALBERT) several entries of ``blocks`` are
the same Block object: its parameters are counted once, its compute once per layer.

On CUDA a bias-type position (alibi, t5_bias, kerple) under softmax attention goes through
FlexAttention instead of a materialised (heads, T, T) mask (``Transformer.mask``;
``model.flex=off`` keeps the mask). ``model.compile=true`` compiles the model in place
(``torch.compile``), so its methods, parameter names and checkpoints stay those of the eager
model. ``model.size=3xs|2xs|xs|s|m|l`` presets d_model, n_heads and n_layers (``SIZES``) through the
``ablate_size`` resolver (``ablate.resolvers``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Literal, Mapping

import torch
import torch.nn as nn
from omegaconf import OmegaConf
from torch import Tensor

from ablate.components import Fraction, PositiveInt, resolve

from .attention import Attention, attention_mask
from .block import Block
from .seq2seq import CrossAttention, DecoderBlock, EncoderDecoder, Seq2SeqLayout, resolved_arch
from .flops import forward_flops, training_flops
from . import mup
from .init import pairing_problems
from .norms import stack_alphas
from .patterns import FlexScores, Softmax, causal_block_mask, flex_available
from .positions import Position

#: the config groups that name a model component by ``_target_``, in the order they are built (the
#: full list of config groups, these and the run's, is ``ablate.config.CONFIG_GROUPS``)
MODEL_GROUPS = ("qkv_sharing", "attention", "pos_enc", "norm", "ffn", "init")

#: ``model.size`` -> the shape it presets: about 45k, 190k, 1M, 10M, 40M and 125M parameters with the
#: byte vocabulary and the default components (pre-LN, GELU FFN of 4·d, no attention bias); the head
#: dimension is 16 for 3xs and 2xs (rungs of a scale ladder a 2-core CPU trains in minutes), 32 for
#: xs, 64 above. An explicit model.d_model / n_heads / n_layers wins.
SIZES: dict[str, dict[str, int]] = {
    "3xs": {"d_model": 32, "n_heads": 2, "n_layers": 2},
    "2xs": {"d_model": 64, "n_heads": 4, "n_layers": 3},
    "xs": {"d_model": 128, "n_heads": 4, "n_layers": 5},
    "s": {"d_model": 384, "n_heads": 6, "n_layers": 6},
    "m": {"d_model": 512, "n_heads": 8, "n_layers": 12},
    "l": {"d_model": 1024, "n_heads": 16, "n_layers": 10},
}


def size_setting(size: Any, key: str, default: int) -> int:
    """``${ablate_size:${model.size},KEY,DEFAULT}``: the preset's value of ``key`` (d_model,
    n_heads, n_layers) for ``model.size``, or ``default`` when the size is null. An unknown size
    resolves to ``default`` too: ``ModelSettings`` names it with the valid sizes, alongside every
    other problem of the config (raising here would hide them behind one resolution error)."""
    if not isinstance(size, str) or size not in SIZES:
        return default
    return SIZES[size][key]


@dataclass
class ModelSettings:
    """The ``model`` node of the config: the shape every variant shares. Each default is the value
    conf/config.yaml gives (tests/test_configs.py holds them equal); d_model, n_heads and n_layers
    come from ``model.size`` there, causal from the task."""

    d_model: PositiveInt
    n_heads: PositiveInt
    n_layers: PositiveInt
    causal: bool
    dropout: Fraction = 0.0
    bias: bool = False  # bias in the attention projections and the head
    # ALBERT's cross-layer sharing (Lan et al. 2020, §3.1): every k consecutive layers use one
    # block's weights; "all" = one block for the whole stack. Parameters shrink, FLOPs do not.
    share_layers: Literal["none", "all"] | PositiveInt = "none"
    # The factor on the token embeddings: "none" (GPT-2, BERT: as the init scheme drew them) or
    # "sqrt_d" (Vaswani et al. 2017, §3.4, meant for embeddings drawn with std d^-1/2). Fixed
    # additive positions follow the tokens' scale (pos_enc=sinusoidal, amplitude: tokens).
    embed_scale: Literal["none", "sqrt_d"] = "none"
    # The shape preset d_model, n_heads and n_layers default to (SIZES; resolved in the config).
    size: Literal["3xs", "2xs", "xs", "s", "m", "l"] | None = None
    # torch.compile the model (in place: same parameters, methods and checkpoints).
    compile: bool = False
    # FlexAttention for bias-type positions under softmax attention on CUDA ("auto"), or the
    # materialised mask everywhere ("off").
    flex: Literal["auto", "off"] = "auto"
    # "mup": the maximal update parametrization (Yang et al. 2022), equal to "standard" at d_model =
    # mup_base_width (required with mup); mup_base_head_dim defaults to mup_base_width / n_heads (mup.py)
    parametrization: Literal["standard", "mup"] = "standard"
    mup_base_width: PositiveInt | None = None
    mup_base_head_dim: PositiveInt | None = None
    # The family (Raffel et al. 2020, T5 §3.2): "auto" is the decoder when causal, else the encoder (the one
    # choice before this key); prefix_lm and encoder_decoder read a seq2seq task's source and target (seq2seq.py)
    arch: Literal["auto", "decoder", "encoder", "prefix_lm", "encoder_decoder"] = "auto"
    # the encoder's depth in an encoder–decoder (null: n_layers, which is the decoder's)
    encoder_layers: PositiveInt | None = None
    # T5's shared encoder–decoder (Raffel et al. 2020, §3.2.2, "Enc-dec, shared"): each decoder layer reuses the
    # self-attention and FFN weights of the encoder layer at its depth (its norms and cross-attention its own)
    share_stacks: bool = False
    # the head's weight is the token embedding table (Press & Wolf 2017; GPT-2, T5): a head over the
    # vocabulary only (a task whose labels are tokens: lm, the seq2seq tasks)
    tie_embeddings: bool = False

    @classmethod
    def from_node(cls, node: Mapping[str, Any]) -> ModelSettings:
        """The settings of a config's ``model`` node, a DictConfig (resolved here) or a plain
        mapping; a key that is not a field is refused (TypeError). Types and ranges are
        ``ablate.config``'s to check, before anything is built."""
        if OmegaConf.is_config(node):
            node = OmegaConf.to_container(node, resolve=True)
        return cls(**node)

    @classmethod
    def problems(cls, settings: Mapping[str, Any], context: Any) -> list[str]:
        return cls._mup_problems(settings) + cls._sharing_problems(settings) + cls._arch_problems(settings)

    @staticmethod
    def _arch_problems(settings: Mapping[str, Any]) -> list[str]:
        arch, depth = settings.get("arch", "auto"), settings.get("encoder_layers")
        if depth is not None and arch != "encoder_decoder":
            return [f"model.encoder_layers={depth} is the encoder's depth in an encoder–decoder; with "
                    f"model.arch={arch} there is one stack of model.n_layers"]
        if settings.get("share_stacks") is True:
            if arch != "encoder_decoder":
                return [f"model.share_stacks=true shares an encoder–decoder's two stacks; model.arch={arch} has one"]
            if depth is not None and depth != settings.get("n_layers"):
                return [f"model.share_stacks=true pairs each decoder layer with the encoder layer at its depth: "
                        f"model.encoder_layers={depth} must equal model.n_layers={settings.get('n_layers')} (or be null)"]
        if settings.get("tie_embeddings") is True and settings.get("parametrization") == "mup":
            return ["model.tie_embeddings=true with model.parametrization=mup: μP scales the embeddings and the head "
                    "apart (mup.py), which one shared table cannot be; valid: one of the two"]
        return []

    @staticmethod
    def _mup_problems(settings: Mapping[str, Any]) -> list[str]:
        base, heads = settings.get("mup_base_width"), settings.get("n_heads")
        if settings.get("parametrization") != "mup":
            return []
        if base is None:
            return ["model.parametrization=mup needs model.mup_base_width: the width at which μP equals the "
                    "standard parametrization (e.g. the narrowest model of the sweep, or where optim.lr was tuned)"]
        if isinstance(base, int) and isinstance(heads, int) and heads > 0 and base % heads:
            return [f"model.mup_base_width={base} is not divisible by model.n_heads={heads}: the base model is this "
                    "model at that width, with the same heads"]
        return []

    @staticmethod
    def _sharing_problems(settings: Mapping[str, Any]) -> list[str]:
        k, n = settings.get("share_layers"), settings.get("n_layers")
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


class Transformer(nn.Module):
    """Encoder (``causal=False``) or decoder (``causal=True``) with a per-token head.

    ``pad_id``: keys holding it are masked (encoders; right padding). A causal model ignores
    it: with right padding no real token can see a pad, and the fast causal path is kept.

    ``flex``: when a bias-type position (one with ``score_mod``) goes through FlexAttention
    instead of its materialised bias: "auto" on CUDA, "on" on every device (CPU: forward only,
    torch has no CPU backward for it; for tests), "off" never. Only where FlexAttention computes
    the same thing: a pattern that takes it (softmax), the built-in attention forward, no
    q/k-dependent ``score_bias``, no key padding or ``mask_self``, no attention dropout in training.

    ``layout``: a seq2seq task's rows (``seq2seq.py``), which a decoder reads as one sequence and a
    prefix LM (``arch="prefix_lm"``, causal) bidirectionally over their source; padded sources are
    masked in both. A prefix LM without one (fine-tuned on a downstream task) reads the whole row as
    its prefix: bidirectional, padding masked.
    """

    def __init__(self, *, vocab_size: int, n_outputs: int, d_model: int, n_heads: int, n_layers: int,
                 causal: bool, dropout: float, bias: bool, pad_id: int | None,
                 pos: Position, blocks: list[Block], final_norm: nn.Module, embed_scale: float = 1.0,
                 flex: Literal["auto", "on", "off"] = "auto", arch: str | None = None,
                 layout: Seq2SeqLayout | None = None) -> None:
        super().__init__()
        if flex not in ("auto", "on", "off"):
            raise ValueError(f"flex={flex!r}; valid: auto, on, off")
        self.arch = arch or ("decoder" if causal else "encoder")
        if self.arch == "prefix_lm" and not causal:
            raise ValueError("a prefix LM is causal after the source of a seq2seq task's rows: it needs causal=True")
        self.layout = layout
        self.d_model, self.n_heads, self.n_layers = d_model, n_heads, n_layers
        self.causal, self.pad_id, self.embed_scale = causal, pad_id, embed_scale
        self.flex, self.attn_dropout = flex, dropout
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos = pos
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(blocks)
        self.final_norm = final_norm
        self.head = nn.Linear(d_model, n_outputs, bias=bias)
        self.output_mult = 1.0  # the factor on the head's input: μP's 1/width multiplier (mup.py)
        self.mask_self = any(getattr(b.attn, "mask_self", False) for b in blocks)
        pos_cls = type(pos)
        self.flex_capable = (  # see the class docstring, ``flex``
            getattr(pos_cls, "score_mod", Position.score_mod) is not Position.score_mod
            and getattr(pos_cls, "score_bias", None) is Position.score_bias and not self.mask_self
            and all(isinstance(b.attn, Attention) and type(b.attn).forward is Attention.forward
                    and getattr(b.attn.pattern, "flex", False) for b in blocks))

    def uses_flex(self, device: torch.device) -> bool:
        """Whether a forward on ``device`` gives the position bias to FlexAttention (``flex``)."""
        if self.flex == "off" or not self.flex_capable or not flex_available():
            return False
        if self.training and self.attn_dropout > 0:  # FlexAttention has no attention dropout
            return False
        return self.flex == "on" or device.type == "cuda"

    def mask(self, tokens: Tensor) -> tuple[Tensor | FlexScores | None, bool]:
        """(attn_mask, is_causal) for this batch, shared by all layers: a materialised mask, or
        the position bias as a FlexAttention score function (``uses_flex``)."""
        T = tokens.shape[1]
        if self.arch == "prefix_lm" and self.layout is None:  # a downstream task's row: all of it is the prefix
            pad = tokens.eq(self.pad_id) if self.pad_id is not None else None
            return attention_mask(T, tokens.device, causal=False, mask_self=self.mask_self,
                                  bias=self.pos.bias(T, T), key_padding=pad)
        if self.layout is not None and (self.arch == "prefix_lm" or self.layout.padded_sources):
            pad = tokens.eq(self.pad_id) if self.pad_id is not None and self.layout.padded_sources else None
            prefix = self.layout.source_len(T) if self.arch == "prefix_lm" else 0
            return attention_mask(T, tokens.device, causal=self.causal, mask_self=self.mask_self,
                                  bias=self.pos.bias(T, T), key_padding=pad, prefix=prefix)
        pad = tokens.eq(self.pad_id) if self.pad_id is not None and not self.causal else None
        if pad is None and self.uses_flex(tokens.device):
            score_mod = self.pos.score_mod()
            if score_mod is not None:
                block_mask = causal_block_mask(T, tokens.device) if self.causal else None
                return FlexScores(score_mod, block_mask), False
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
        x = self.final_norm(x)
        return self.head(x if self.output_mult == 1.0 else x * self.output_mult)

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


def assemble(cfg: Any, vocab_size: int, n_outputs: int, max_len: int, pad_id: int | None = None,
             layout: Seq2SeqLayout | None = None) -> Transformer | EncoderDecoder:
    """The model described by the root config ``cfg``, with each module's own initialisation.

    Reads the ``model`` node (``ModelSettings``) and the groups ``qkv_sharing``, ``attention``
    (softmax when absent), ``pos_enc``, ``norm`` (+ ``placement``) and ``ffn``: each a ``_target_``
    plus its settings (``ablate.components``). ``max_len``: the longest sequence the model is
    expected to see; positions use it unless ``pos_enc`` sets its own ``max_len``. ``layout``: a seq2seq
    task's rows (``seq2seq.py``), which ``model.arch=prefix_lm|encoder_decoder`` split into a source and
    a target; without one they read the whole row (a fine-tune on a downstream task: ``seq2seq.py``).
    """
    return _assemble(ModelSettings.from_node(cfg["model"]), cfg, vocab_size, n_outputs, max_len, pad_id, layout)


def _assemble(model: ModelSettings, cfg: Any, vocab_size: int, n_outputs: int, max_len: int,
              pad_id: int | None, layout: Seq2SeqLayout | None = None) -> Transformer | EncoderDecoder:
    d, H, L = model.d_model, model.n_heads, model.n_layers
    dropout, bias = model.dropout, model.bias
    arch = resolved_arch(model.arch, model.causal)

    attn_cls, attn_kw = option(cfg, "qkv_sharing")
    pos_cls, pos_kw = option(cfg, "pos_enc")
    norm_cls, norm_kw = option(cfg, "norm")
    ffn_cls, ffn_kw = option(cfg, "ffn")
    placement = norm_kw.pop("placement", "pre")
    L_enc = (model.encoder_layers or L) if arch == "encoder_decoder" else 0
    alphas = stack_alphas(norm_cls, L, L_enc)
    if alphas["decoder"] != 1.0 and placement != "post":
        raise ValueError(f"norm={norm_cls.__name__.lower()} scales the residual of a post-LN block "
                         f"(Wang et al. 2022); it needs norm.placement=post, got {placement!r}")
    pattern_cls, pattern_kw = option(cfg, "attention") if "attention" in cfg else (Softmax, {})

    def norm() -> nn.Module:
        return norm_cls(d, **norm_kw)

    def stack(causal: bool, n_layers: int, alpha: float, cross: bool = False) -> tuple[Position, list[Block]]:
        """One stack's position module and layers; the pattern is one module per stack, like the
        position module (built-ins hold no parameters)."""
        pos = pos_cls(**{"d_model": d, "n_heads": H, "causal": causal, "max_len": max_len, **pos_kw})
        pattern = pattern_cls(d, H, causal, **pattern_kw)

        def attention() -> nn.Module:
            attn = attn_cls(d, H, dropout=dropout, bias=bias, **attn_kw)
            if not hasattr(attn, "pattern") and pattern_cls is not Softmax:
                raise ValueError(f"qkv_sharing: {type(attn).__name__} has no `pattern` attribute, so it cannot "
                                 f"use attention={type(pattern).__name__.lower()}; subclass ablate.model.attention."
                                 "Attention (docs/extending.md)")
            attn.pattern = pattern
            return attn

        def block(i: int) -> Block:
            if cross:
                shared = share_with[i] if share_with else None  # model.share_stacks: the encoder layer's weights
                return DecoderBlock(shared.attn if shared else attention(),
                                    CrossAttention(attn_cls(d, H, dropout=dropout, bias=bias, **attn_kw)),
                                    shared.ffn if shared else ffn_cls(d, **ffn_kw), norm, placement, alpha, dropout)
            return Block(attention(), ffn_cls(d, **ffn_kw), norm, placement, alpha, dropout)

        k = layers_per_block(model.share_layers, n_layers)
        unique = [block(i * k) for i in range(-(-n_layers // k))]
        return pos, [unique[i // k] for i in range(n_layers)]  # the same module object: shared weights

    def final_norm() -> nn.Module:
        return nn.Identity() if placement == "post" else norm()

    scale = EMBED_SCALES[model.embed_scale](d)
    share_with: list[Block] = []
    if arch == "encoder_decoder":
        enc_pos, encoder = stack(False, L_enc, alphas["encoder"])
        if model.share_stacks:
            if pattern_cls is not Softmax:  # a local or linear pattern is built for one direction
                raise ValueError(f"model.share_stacks=true: attention={pattern_cls.__name__.lower()} is built causal or "
                                 "bidirectional, so one module cannot serve both stacks; valid: attention=softmax")
            share_with = encoder
        pos, blocks = stack(True, L, alphas["decoder"], cross=True)
        return EncoderDecoder(vocab_size=vocab_size, n_outputs=n_outputs, d_model=d, n_heads=H, bias=bias,
                              dropout=dropout, pad_id=pad_id, layout=layout, enc_pos=enc_pos, pos=pos,
                              encoder=encoder, blocks=blocks, enc_norm=final_norm(), final_norm=final_norm(),
                              embed_scale=scale)
    causal = arch in ("decoder", "prefix_lm")
    pos, blocks = stack(arch == "decoder", L, alphas["decoder"])  # a prefix LM's positions look both ways
    return Transformer(vocab_size=vocab_size, n_outputs=n_outputs, d_model=d, n_heads=H, n_layers=L,
                       causal=causal, dropout=dropout, bias=bias, pad_id=pad_id, pos=pos,
                       blocks=blocks, final_norm=final_norm(), embed_scale=scale,
                       flex=model.flex if arch != "prefix_lm" else "off", arch=arch, layout=layout)


def parametrize_mup(model: Transformer, settings: ModelSettings, cfg: Any, scheme: Any, max_len: int,
                    pad_id: int | None = None) -> None:
    """``model.parametrization=mup`` on the initialised ``model``, in place (``mup.py``), against the
    same model at ``model.mup_base_width`` (built on the meta device). Raises ValueError naming what
    does not compose with μP."""
    problems = mup.problems(model, scheme, getattr(scheme, "__name__", type(scheme).__name__), settings.embed_scale)
    if problems:
        raise ValueError("; ".join(problems))
    n_outputs = model.head.out_features
    with torch.device("meta"):
        base = _assemble(replace(settings, d_model=settings.mup_base_width), cfg, model.tok_emb.num_embeddings,
                         n_outputs, max_len, pad_id, model.layout)
    head_dim = mup.base_head_dim(settings.mup_base_width, settings.n_heads, settings.mup_base_head_dim)
    mup.apply(model, base, scheme, head_dim)


def tie_embeddings(model: Transformer | EncoderDecoder) -> None:
    """The head's weight becomes the token embedding table, as the init scheme drew it (one tensor:
    parameters count it once). Raises ValueError where the head does not predict tokens."""
    vocab, outputs = model.tok_emb.num_embeddings, model.head.out_features
    if vocab != outputs:
        raise ValueError(f"model.tie_embeddings=true: the head predicts the task's {outputs} classes, not its {vocab} "
                         "tokens, so it cannot be the embedding table; valid: a task whose labels are tokens (lm, "
                         "add, dedup, seq2seq_file), or model.tie_embeddings=false")
    model.head.weight = model.tok_emb.weight


def build_model(cfg: Any, vocab_size: int, n_outputs: int, max_len: int,
                pad_id: int | None = None, layout: Seq2SeqLayout | None = None) -> Transformer | EncoderDecoder:
    """Assemble the model described by ``cfg``, apply its ``init`` scheme and, with
    ``model.compile``, compile it: the one place a model is made from a config."""
    settings = ModelSettings.from_node(cfg["model"])
    model = _assemble(settings, cfg, vocab_size, n_outputs, max_len, pad_id, layout)
    init, init_settings = option(cfg, "init")
    problems = pairing_problems(init, init_settings, model)
    if problems:
        raise ValueError("; ".join(problems))
    init(model, **init_settings)
    if settings.parametrization == "mup":
        parametrize_mup(model, settings, cfg, init, max_len, pad_id)
    if settings.tie_embeddings:
        tie_embeddings(model)
    for pos in (model.pos, getattr(model, "enc_pos", None)):
        if hasattr(pos, "match_tokens"):  # a fixed position table takes the tokens' scale
            with torch.no_grad():
                pos.match_tokens(model.token_rms())
    if settings.compile:
        # in place (nn.Module.compile): the model keeps its type, methods (num_params,
        # flops_per_token) and state_dict keys, so checkpoints load with or without it
        model.compile()
    return model
