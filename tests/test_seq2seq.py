"""Sequence-to-sequence: the rows of the seq2seq tasks, the three families that read them (decoder,
prefix LM, encoder–decoder), cross-attention, greedy decoding with and without a key/value cache,
exact match, and what each existing option does in the new families. All in process."""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from conftest import builtin_options, script_module
from test_model import make_cfg

from ablate.compose import compose
from ablate.config import config_problems
from ablate.data import build_task
from ablate.data.base import IGNORE
from ablate.data.seq2seq import Add, Dedup
from ablate.lit import AblateModule
from ablate.model import build_model
from ablate.model.attention import attention_mask
from ablate.model.generate import _cached_steps, decodes_cached, greedy
from ablate.model.norms import deepnet_betas, stack_alphas
from ablate.model.seq2seq import EncoderDecoder

pytestmark = pytest.mark.usefixtures("one_thread")

ARCHS = ("decoder", "prefix_lm", "encoder_decoder")


def seq2seq_model(arch: str, task=None, **groups):
    task = task or Add(seq_len=16, eval_lengths=[22])
    cfg = make_cfg(d_model=32, n_heads=4, n_layers=2, **groups)
    cfg["model"]["arch"] = arch
    torch.manual_seed(0)
    return build_model(cfg, task.vocab_size, task.n_classes, task.max_len, task.pad_id, task.layout).eval(), task


def rows(task, n: int = 6, length: int = 16, seed: int = 0):
    return task.make_batch(torch.Generator().manual_seed(seed), n, length)


# ------------------------------------------------------------------------------ the tasks' rows

def _number(digits: list[int]) -> int:
    return int("".join(map(str, digits)))


@pytest.mark.parametrize("length", [16, 22])
def test_add_rows_hold_two_numbers_and_their_sum_least_significant_first(length):
    task = Add(seq_len=16, eval_lengths=[22])
    tokens, targets = rows(task, 32, length)
    S, n = task.source_len(length), Add.n_digits(length)
    assert (tokens[:, S - 1] == task.sep_id).all() and S == 2 * n + 2
    for row, target in zip(tokens.tolist(), targets.tolist()):
        a, b = row[:n], row[n + 1:2 * n + 1]
        assert row[n] == task.plus_id
        labelled = [t for t in target if t != IGNORE]
        assert labelled[-1] == task.eos_id and target[:S - 1] == [IGNORE] * (S - 1)
        assert _number(labelled[:-1][::-1]) == _number(a) + _number(b)
        assert labelled[:-1][-1] != 0 or len(labelled) == 2  # no leading zero
        # teacher forcing: the row holds the target shifted by one, SEP first
        assert row[S - 1:S - 1 + len(labelled)] == [task.sep_id] + labelled[:-1]


def test_dedup_rows_collapse_each_run_and_targets_vary_in_length():
    task = Dedup(seq_len=16)
    tokens, targets = rows(task, 64)
    S = task.source_len(16)
    lengths = set()
    for row, target in zip(tokens.tolist(), targets.tolist()):
        source = row[:S - 1]
        labelled = [t for t in target if t != IGNORE]
        expected = [d for i, d in enumerate(source) if i == 0 or d != source[i - 1]]
        assert labelled == expected + [task.eos_id]
        lengths.add(len(expected))
    assert len(lengths) >= 3


def test_the_held_out_rows_are_the_same_for_every_seed_and_differ_from_training():
    task = Add(seq_len=16, n_test=40, batch_size=8)
    first, again = task.eval_batches(16), Add(seq_len=16, n_test=40, batch_size=8).eval_batches(16)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, again))
    train = next(task.train_batches(seed=0))[0]
    assert not torch.equal(train, first[0][0])


@pytest.mark.parametrize("overrides, fragment", [
    (["task.seq_len=5"], "task.seq_len/eval_lengths 5 is too short for add"),
    (["task.max_decode=3"], "task.max_decode=3 is below the longest target of add (6 tokens"),
    (["task=span_corruption", "task.max_decode=5"], "task.max_decode=5 is below the longest target of span_corruption "
                                                     "(12 tokens"),
    (["task=dedup", "task.eval_lengths=[30]", "task.max_decode=10"], "longest target of dedup (15 tokens"),
    (["model.arch=encoder"], "model.arch=encoder on task=add: an encoder sees the target token"),
    (["task.causal=false"], "model.arch=auto with model.causal=false on task=add"),
    (["task=lm", "model.arch=encoder_decoder"], "model.arch=encoder_decoder reads a source and a target"),
    (["model.arch=prefix_lm", "attention=linear"], "attention=linear has no such mask; valid: attention=softmax"),
    (["model.encoder_layers=3"], "model.encoder_layers=3 is the encoder's depth in an encoder–decoder"),
    (["model.arch=encoder_decoder", "pos_enc=xpos"], "pos_enc=xpos needs a decoder"),
    (["task=lm", "model.arch=encoder"], "model.arch=encoder on task=lm (causal LM): an encoder sees the next token"),
    (["task=mlm", "model.arch=decoder"], "model.arch=decoder on task=mlm (masked LM): a masked token is predicted"),
    (["model.arch=seq2seq"], "model.arch='seq2seq' must be one of 'auto', 'decoder', 'encoder', 'prefix_lm', "
                             "'encoder_decoder'"),
])
def test_bad_seq2seq_input_is_named_before_training(overrides, fragment):
    problems = config_problems(compose(["task=add", *overrides]))
    assert any(fragment in p for p in problems), problems


def test_the_seq2seq_tasks_validate_in_every_family_and_build():
    for name in ("add", "dedup"):
        for arch in ("auto", *ARCHS):
            assert config_problems(compose([f"task={name}", f"model.arch={arch}"])) == []
    assert config_problems(compose(["task=span_corruption", "task.max_decode=12"])) == []  # 8 bytes, 3 sentinels, EOS
    task = build_task(compose(["task=dedup"]).task)
    assert task.layout.source_len(16) == 8 and task.vocab_size == task.n_classes == 14


# ------------------------------------------------------------------------------ the families

def test_an_encoder_token_reaches_the_decoder_and_a_later_target_token_does_not_reach_earlier_ones():
    model, task = seq2seq_model("encoder_decoder")
    tokens, _ = rows(task, 4)
    S = task.source_len(16)
    base = model(tokens)
    source_changed = tokens.clone()
    source_changed[:, 0] = (source_changed[:, 0] + 1) % 10
    assert (model(source_changed)[:, S - 1:] - base[:, S - 1:]).abs().amax() > 1e-4
    later = tokens.clone()
    later[:, S + 2] = (later[:, S + 2] + 1) % 10
    out = model(later)
    torch.testing.assert_close(out[:, :S + 2], base[:, :S + 2])
    assert (out[:, S + 2:] - base[:, S + 2:]).abs().amax() > 1e-4
    assert (base[:, :S - 1] == 0).all()  # no prediction at the source's columns


@pytest.mark.parametrize("arch, source_sees_ahead", [("prefix_lm", True), ("decoder", False)])
def test_a_prefix_lm_reads_its_source_both_ways_and_its_target_causally(arch, source_sees_ahead):
    model, task = seq2seq_model(arch)
    tokens, _ = rows(task, 4)
    S = task.source_len(16)
    base = model(tokens)
    last_source = tokens.clone()
    last_source[:, S - 2] = (last_source[:, S - 2] + 1) % 10
    moved = (model(last_source)[:, 0] - base[:, 0]).abs().amax() > 1e-4
    assert moved == source_sees_ahead
    later = tokens.clone()
    later[:, S + 1] = (later[:, S + 1] + 1) % 10
    torch.testing.assert_close(model(later)[:, :S + 1], base[:, :S + 1])


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
def test_the_encoder_decoder_computes_what_torch_nn_transformer_computes_with_the_same_weights():
    """Vaswani et al.'s encoder–decoder as PyTorch builds it (pre-LN, GELU): its weights copied into
    ablate's, the decoder's outputs agree. Positions none: both add nothing to the embeddings."""
    model, task = seq2seq_model("encoder_decoder", pos_enc="none", ffn="gelu")
    reference = torch.nn.Transformer(32, 4, 2, 2, 128, 0.0, activation="gelu", batch_first=True,
                                     norm_first=True).eval()

    def copy(mine: torch.nn.Module, theirs: torch.nn.Module) -> None:
        mine.weight.data.copy_(theirs.weight)
        mine.bias.data.copy_(theirs.bias)

    def attention(mine, theirs) -> None:
        mine.qkv.weight.data.copy_(theirs.in_proj_weight)
        mine.qkv.bias.data.copy_(theirs.in_proj_bias)
        copy(mine.out_proj, theirs.out_proj)

    for block, layer in zip(model.encoder, reference.encoder.layers):
        attention(block.attn, layer.self_attn)
        for mine, theirs in ((block.attn_norm, layer.norm1), (block.ffn_norm, layer.norm2),
                             (block.ffn.fc, layer.linear1), (block.ffn.out_proj, layer.linear2)):
            copy(mine, theirs)
    for block, layer in zip(model.blocks, reference.decoder.layers):
        attention(block.attn, layer.self_attn)
        attention(block.cross.attn, layer.multihead_attn)
        for mine, theirs in ((block.attn_norm, layer.norm1), (block.cross_norm, layer.norm2),
                             (block.ffn_norm, layer.norm3), (block.ffn.fc, layer.linear1),
                             (block.ffn.out_proj, layer.linear2)):
            copy(mine, theirs)
    copy(model.enc_norm, reference.encoder.norm)
    copy(model.final_norm, reference.decoder.norm)
    tokens, _ = rows(task, 4)
    source, target = model.split(tokens)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(target.shape[1])
    with torch.no_grad():
        theirs = model.head(reference(model.embed(source), model.embed(target), tgt_mask=mask, tgt_is_causal=True))
        torch.testing.assert_close(model(tokens)[:, source.shape[1]:], theirs, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ["prefix_lm", "encoder_decoder"])
def test_mask_self_hides_each_tokens_own_key_in_the_self_attention_of_the_new_families(arch):
    model, task = seq2seq_model(arch, qkv_sharing={"name": "qk_shared", "mask_self": True})
    tokens, _ = rows(task, 2)
    if arch == "prefix_lm":
        mask, _ = model.mask(tokens)
    else:
        mask, _ = attention_mask(7, tokens.device, causal=True, mask_self=model.mask_self)
    assert model.mask_self and not mask.diagonal(dim1=-2, dim2=-1)[..., 1:].any()


def test_cross_attention_ties_shared_roles_and_keeps_kv_heads():
    shapes = {}
    for sharing in ("independent", "qk_shared", "qkv_shared", "kv_shared", "mqa"):
        model, _ = seq2seq_model("encoder_decoder", qkv_sharing=sharing)
        cross = model.blocks[0].cross
        memory = torch.randn(2, 5, 32)
        q, k, v = cross.project(torch.randn(2, 3, 32), memory)
        shapes[sharing] = (tuple(q.shape), tuple(k.shape), k is v)
        if sharing == "qkv_shared":  # Q=K=V: one matrix maps both sequences
            (w,) = [cross.attn.qkv.weight]
            torch.testing.assert_close(k, cross.attn.heads(memory @ w.T + cross.attn.qkv.bias))
    assert shapes["independent"] == ((2, 4, 3, 8), (2, 4, 5, 8), False)
    assert shapes["kv_shared"][2] and shapes["qkv_shared"][2]
    assert shapes["mqa"][1] == (2, 1, 5, 8)


def test_a_user_attention_without_roles_is_refused_in_cross_attention_with_the_reason():
    from ablate.model.seq2seq import CrossAttention

    class Mine(torch.nn.Module):
        d_model, n_heads = 32, 4

    with pytest.raises(ValueError, match="has no fused projection `qkv` with `roles`, so it cannot serve cross-attention"):
        CrossAttention(Mine())


def test_an_encoder_decoder_counts_its_cross_attention_flops_and_parameters():
    model, task = seq2seq_model("encoder_decoder", pos_enc="learned")
    tokens, _ = rows(task, 4)
    model(tokens)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(tokens)
    measured = counter.get_total_flops() / tokens.numel()
    analytic = sum(model.flops_by_component(16, 4).values())
    assert abs(analytic - measured) <= 0.02 * measured, (analytic, measured)
    assert model.flops_by_component(16)["cross_attention"] > 0
    decoder, _ = seq2seq_model("decoder", pos_enc="learned")
    cross = sum(p.numel() for b in model.blocks for p in b.cross.parameters())
    assert cross > 0 and model.num_params() > 2 * decoder.num_params() - 64 * 32  # a second stack and cross-attention


def test_separate_depths_and_deepnets_encoder_decoder_constants():
    task = Add(seq_len=16)
    cfg = make_cfg(norm={"name": "deepnorm", "placement": "post"}, init="deepnet")
    cfg["model"].update(arch="encoder_decoder", encoder_layers=3)
    model = build_model(cfg, task.vocab_size, task.n_classes, 16, task.pad_id, task.layout)
    assert isinstance(model, EncoderDecoder) and len(model.encoder) == 3 and len(model.blocks) == 2
    alphas, betas = stack_alphas(type(model.blocks[0].attn_norm), 2, 3), deepnet_betas(2, 3)
    assert model.encoder[0].alpha == pytest.approx(0.81 * (3 ** 4 * 2) ** (1 / 16))
    assert model.blocks[0].alpha == pytest.approx((3 * 2) ** 0.25) == pytest.approx(alphas["decoder"])
    assert betas["decoder"] == pytest.approx((12 * 2) ** -0.25)
    assert betas["encoder"] == pytest.approx(0.87 * (3 ** 4 * 2) ** (-1 / 16))


# ------------------------------------------------------------------------------ decoding

CACHED = [(arch, pos, sharing) for arch in ARCHS
          for pos in ("learned", "sinusoidal", "rope", "alibi", "t5_bias", "kerple", "none", "xpos")
          for sharing in ("independent", "qkv_shared", "gqa")
          if not (pos == "xpos" and arch != "decoder")]


@pytest.mark.parametrize("arch, pos, sharing", CACHED)
def test_a_cached_step_gives_the_logits_of_the_whole_forward(arch, pos, sharing):
    model, task = seq2seq_model(arch, pos_enc=pos, qkv_sharing=sharing)
    assert decodes_cached(model) is None
    tokens, _ = rows(task, 3, 22)
    S, T = task.source_len(22), 22
    full = model(tokens)
    with torch.no_grad():
        step = _cached_steps(model, tokens, S, T)
        for column in range(S - 1, T):  # teacher-forced: the row's own next token fed to each step
            got = step(None if column == S - 1 else tokens[:, column])
            torch.testing.assert_close(got, full[:, column], atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_cached_and_uncached_greedy_decoding_write_the_same_tokens(arch):
    model, task = seq2seq_model(arch, pos_enc="rope")
    with torch.no_grad():
        for p in model.head.parameters():
            p.mul_(30)  # confident predictions: no near-ties between the two paths' rounding
    tokens, _ = rows(task, 8)
    cached, uncached = greedy(model, tokens, cache=True), greedy(model, tokens, cache=False)
    assert torch.equal(cached, uncached)
    assert cached.shape == (8, 16 - task.source_len(16) + 1)
    assert len(set(cached.flatten().tolist())) > 1


@pytest.mark.parametrize("groups, reason", [
    ({"pos_enc": "deberta"}, "pos_enc=deberta scores keys"),
    ({"attention": "local"}, "attention=local is not softmax"),
    ({"attention": "linear"}, "attention=linear is not softmax"),
    ({"qkv_sharing": {"name": "qk_shared", "mask_self": True}}, "mask_self hides"),
])
def test_what_cannot_step_decodes_uncached_and_says_why(groups, reason):
    model, task = seq2seq_model("decoder", **groups)
    assert reason in decodes_cached(model)
    tokens, _ = rows(task, 4)
    with pytest.raises(ValueError, match="no cached decoding"):
        greedy(model, tokens, cache=True)
    assert greedy(model, tokens).shape == (4, 7)  # uncached, by the whole row per token


def test_exact_match_is_the_share_of_rows_decoded_to_the_target_with_its_eos():
    model, task = seq2seq_model("encoder_decoder")
    tokens, targets = rows(task, 16)
    S = task.source_len(16)
    generated = greedy(model, tokens)
    rigged = targets.clone()  # the first 5 rows' targets made what the model writes
    for r in range(5):
        eos = (generated[r] == task.eos_id).nonzero()
        end = int(eos[0]) + 1 if len(eos) else generated.shape[1]
        rigged[r, S - 1:] = IGNORE
        rigged[r, S - 1:S - 1 + end] = generated[r, :end]
    module = AblateModule(model, {}, 1, [16], task.metric, task.n_classes)
    module.on_validation_epoch_start()
    module.validation_step((tokens, rigged), 0)
    result = module.eval_results()["16"]
    truth = [bool(((generated[r, :len(ref)] == ref)).all())
             for r, ref in enumerate([rigged[r, S - 1:][rigged[r, S - 1:] != IGNORE] for r in range(16)])]
    assert result["accuracy"] == pytest.approx(sum(truth) / 16) and sum(truth) >= 5
    assert 0 <= result["token_accuracy"] <= 1


@pytest.mark.slow  # ~80 configs composed, checked and built on the meta device: ~20 s
@pytest.mark.parametrize("group", ["qkv_sharing", "attention", "pos_enc", "norm", "ffn", "init"])
def test_every_option_builds_in_the_new_families_or_is_refused_with_its_reason(group):
    refused = {("attention", "linear", "prefix_lm"): "has no such mask", ("attention", "local", "prefix_lm"): "has no such mask",
               ("pos_enc", "xpos", "prefix_lm"): "needs a decoder", ("pos_enc", "xpos", "encoder_decoder"): "needs a decoder"}
    partners = {("norm", "deepnorm"): ["norm.placement=post", "init=deepnet"],
                ("init", "deepnet"): ["norm=deepnorm", "norm.placement=post"]}
    for option in builtin_options(group):
        for arch in ("prefix_lm", "encoder_decoder"):
            problems = config_problems(compose(["task=dedup", "task.seq_len=12", "model.d_model=16", "model.n_heads=2",
                                                f"model.arch={arch}", f"{group}={option}",
                                                *partners.get((group, option), [])]))
            expected = refused.get((group, option, arch))
            if expected:
                assert any(expected in p for p in problems), (option, arch, problems)
            else:
                assert problems == [], (option, arch, problems)


# ------------------------------------------------------------------------------ your own parallel text

def _tsv(tmp_path, train: list[str], dev: list[str]):
    (tmp_path / "train.tsv").write_text("\n".join(train) + "\n", encoding="utf-8")
    (tmp_path / "dev.tsv").write_text("\n".join(dev) + "\n", encoding="utf-8")
    return tmp_path


def test_a_tsv_of_pairs_becomes_rows_with_padded_sources_and_cut_targets(tmp_path):
    from ablate.data.seq2seq import Seq2SeqFile

    path = _tsv(tmp_path, [f"ab{'c' * (i % 5)}\tx{i}y" for i in range(40)] + ["a very long source line\tshort",
                                                                             "s\ta target much too long"],
                ["héllo\twörld"])
    task = Seq2SeqFile(seq_len=16, path=str(path), source_len=6, n_val=4, batch_size=8)
    task.setup()
    (tokens, targets), = task.eval_batches(16)
    assert task.layout.source_len(16) == 7 and task.layout.padded_sources
    row = tokens[0].tolist()
    source = "héllo".encode()
    assert row[:6] == list(source)[:6] and row[6] == task.sep_id
    assert task.detokenize([t for t in targets[0].tolist() if t != IGNORE]) == "wörld"
    assert sum(len(b[0]) for b in task.eval_batches(16, "validation")) == 4  # carved out of train.tsv
    train = task.encoded("train", 16).tokens
    short = next(r for r in train if r[5] == ord("s") and r[4] == task.pad_id)  # the source "s"
    assert short[:5].tolist() == [task.pad_id] * 5 and short[6] == task.sep_id  # left-padded to SEP
    cut = task.encoded("train", 16)
    labelled = (cut.targets != IGNORE).sum(1)
    assert int(labelled.max()) == 16 - 7 + 1  # a too long target fills the row, without EOS


@pytest.mark.parametrize("content, fragment", [
    (["a\tb\tc"], "train.tsv:1: a line must be source<TAB>target (one tab), got 2 tabs"),
    ([], "train.tsv: no source<TAB>target line"),
])
def test_a_bad_tsv_is_named_by_file_and_line(tmp_path, content, fragment):
    from ablate.data.seq2seq import Seq2SeqFile

    path = _tsv(tmp_path, content, ["a\tb"])
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        Seq2SeqFile(seq_len=16, path=str(path)).setup()


def test_seq2seq_file_settings_are_checked_before_training(tmp_path):
    assert any("task.path is required" in p for p in config_problems(compose(["task=seq2seq_file"])))
    path = _tsv(tmp_path, ["a\tb", "c\td"], ["a\tb"])
    problems = config_problems(compose(["task=seq2seq_file", f"task.path={path}", "task.source_len=63"]))
    assert any("task.source_len=63 must leave room for SEP and a target in task.seq_len=64: valid 1 to 62" in p
               for p in problems), problems
    assert config_problems(compose(["task=seq2seq_file", f"task.path={path}", "model.arch=encoder_decoder"])) == []


def test_bleu_and_chrf_score_the_decoded_text_as_sacrebleu_does(tmp_path):
    import sacrebleu

    from ablate.data.seq2seq import Seq2SeqFile

    pairs = ["the cat sat\tsat cat the", "a red tree\ttree red a", "big dog ran\tran dog big"] * 4
    task = Seq2SeqFile(seq_len=24, path=str(_tsv(tmp_path, pairs, pairs)), batch_size=12)
    task.setup()
    (tokens, targets), = task.eval_batches(24)
    model, _ = seq2seq_model("encoder_decoder", task=task)
    S = task.layout.source_len(24)
    decoded = greedy(model, tokens)
    rigged = targets.clone()  # half the rows' references made what the model writes
    for r in range(6):
        end = next((j + 1 for j, t in enumerate(decoded[r].tolist()) if t == task.eos_id), decoded.shape[1])
        rigged[r, S - 1:] = IGNORE
        rigged[r, S - 1:S - 1 + end] = decoded[r, :end]
    module = AblateModule(model, {}, 1, [24], task.metric, task.n_classes, None, task.detokenize)
    module.on_validation_epoch_start()
    module.validation_step((tokens, rigged), 0)
    result = module.eval_results()["24"]
    hypotheses = [task.detokenize(d) for d in decoded.tolist()]
    references = [task.detokenize([t for t in r[S - 1:].tolist() if t != IGNORE]) for r in rigged]
    assert result["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score)
    assert result["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hypotheses, [references]).score)
    filled = AblateModule(model, {}, 1, [24], task.metric, task.n_classes, None, task.detokenize)
    filled.on_validation_epoch_start()  # a DDP rank's filler row (every label ignored) changes nothing
    filled.validation_step((tokens, rigged), 0)
    filled.validation_step((tokens[:1], torch.full_like(rigged[:1], IGNORE)), 0)
    assert filled.eval_results()["24"] == result
    perfect = AblateModule(model, {}, 1, [24], task.metric, task.n_classes, None, task.detokenize)
    perfect.on_validation_epoch_start()
    perfect._texts[24] = [("the quick brown fox jumps over the lazy dog",) * 2]
    perfect._eval_sums[24] = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0])
    assert perfect.eval_results()["24"]["bleu"] == pytest.approx(100.0)


@pytest.mark.filterwarnings("ignore:enable_nested_tensor")
def test_the_reference_script_trains_pytorchs_encoder_decoder_under_both_inits():
    """scripts/encdec_reference.py (docs/seq2seq.md cites its figures), a few steps."""
    script = script_module("encdec_reference")
    losses = {init: script.validation_loss(init, steps=3) for init in ("default", "normal")}
    assert all(0 < loss < 10 for loss in losses.values()) and losses["default"] != losses["normal"]


# ------------------------------------------------------------------------------ tied embeddings

@pytest.mark.parametrize("arch", ["decoder", "encoder_decoder"])
def test_tied_embeddings_make_the_head_the_token_table(arch):
    task = Add(seq_len=16)
    untied, _ = seq2seq_model(arch, task=task)
    cfg = make_cfg(d_model=32, n_heads=4, n_layers=2)
    cfg["model"].update(arch=arch, tie_embeddings=True)
    tied = build_model(cfg, task.vocab_size, task.n_classes, task.max_len, task.pad_id, task.layout)
    assert tied.head.weight is tied.tok_emb.weight
    assert untied.num_params() - tied.num_params() == task.vocab_size * 32
    tokens, targets = rows(task, 4)
    from ablate.lit import masked_loss
    masked_loss(tied(tokens), targets).backward()  # one tensor, one gradient from both uses
    assert tied.tok_emb.weight.grad is not None and tied.head.weight.grad is tied.tok_emb.weight.grad


def test_tied_embeddings_are_refused_where_the_head_does_not_predict_tokens():
    from ablate.model import ModelSettings

    cfg = make_cfg(d_model=32, n_heads=4, n_layers=2)
    cfg["model"]["tie_embeddings"] = True
    with pytest.raises(ValueError, match="the head predicts the task's 3 classes, not its 14 tokens"):
        build_model(cfg, 14, 3, 16)
    problems = ModelSettings.problems({"tie_embeddings": True, "parametrization": "mup", "mup_base_width": 32,
                                       "n_heads": 4}, None)
    assert any("model.tie_embeddings=true with model.parametrization=mup" in p for p in problems)


# ------------------------------------------------------------------------------ T5's shared encoder–decoder

def test_a_shared_encoder_decoder_reuses_each_encoder_layers_attention_and_ffn():
    task = Add(seq_len=16)
    separate, _ = seq2seq_model("encoder_decoder", task=task)
    cfg = make_cfg(d_model=32, n_heads=4, n_layers=2)
    cfg["model"].update(arch="encoder_decoder", share_stacks=True)
    shared = build_model(cfg, task.vocab_size, task.n_classes, task.max_len, task.pad_id, task.layout)
    for enc, dec in zip(shared.encoder, shared.blocks):
        assert dec.attn is enc.attn and dec.ffn is enc.ffn and dec.cross is not None and dec.attn_norm is not enc.attn_norm
    own = sum(p.numel() for b in separate.encoder for m in (b.attn, b.ffn) for p in m.parameters())
    assert separate.num_params() - shared.num_params() == own
    assert shared.flops_per_token(16) == pytest.approx(separate.flops_per_token(16))  # both stacks still compute
    tokens, targets = rows(task, 4)
    from ablate.lit import masked_loss
    masked_loss(shared(tokens), targets).backward()


@pytest.mark.parametrize("overrides, fragment", [
    (["model.share_stacks=true"], "model.share_stacks=true shares an encoder–decoder's two stacks; model.arch=auto"),
    (["model.arch=encoder_decoder", "model.share_stacks=true", "model.encoder_layers=3"],
     "model.encoder_layers=3 must equal model.n_layers=2"),
    (["model.arch=encoder_decoder", "model.share_stacks=true", "attention=local"],
     "attention=local is built causal or bidirectional, so one module cannot serve both stacks"),
])
def test_a_shared_encoder_decoder_that_cannot_be_is_refused(overrides, fragment):
    problems = config_problems(compose(["task=add", *overrides]))
    assert any(fragment in p for p in problems), problems


def test_the_families_plan_as_every_variant_does_lr_tuning_and_a_flops_budget():
    """The planner knows no family: each is a variant with its own cost (its two stacks on the meta
    device) and its own tuning runs."""
    from test_planner import _value, planner

    from ablate.compose import TINY

    plan = planner(["task=add", "model.arch=decoder,encoder_decoder", "budget.match=flops", "tune.lr=[1e-3,3e-3]",
                    *TINY, "model.n_layers=2", "trainer.max_steps=100"]).plan()
    assert len(plan.jobs) == 4 and {_value(j, "optim.lr") for j in plan.jobs} == {"0.001", "0.003"}
    steps = plan.budget.steps
    assert steps["model.arch=decoder"] == 100 and 50 < steps["model.arch=encoder_decoder"] < 100, steps


@pytest.mark.parametrize("arch", ARCHS)
def test_padded_sources_are_masked_alike_in_the_cached_steps_and_the_whole_forward(tmp_path, arch):
    from ablate.data.seq2seq import Seq2SeqFile

    pairs = ["a\tb", "the cat\ttac eht", "dog sat on\tno tas god", "x\tyy"] * 3
    task = Seq2SeqFile(seq_len=24, path=str(_tsv(tmp_path, pairs, pairs)), source_len=10, batch_size=12)
    task.setup()
    (tokens, targets), = task.eval_batches(24)
    assert (tokens[:, :9] == task.pad_id).any()  # short sources: left-padded
    model, _ = seq2seq_model(arch, task=task, pos_enc="alibi")
    S = task.layout.source_len(24)
    labelled = targets != IGNORE  # the columns up to each row's EOS: what decoding reads
    full = model(tokens)
    with torch.no_grad():
        step = _cached_steps(model, tokens, S, 24)
        for column in range(S - 1, 24):
            got = step(None if column == S - 1 else tokens[:, column])
            rows_in = labelled[:, column]
            torch.testing.assert_close(got[rows_in], full[rows_in, column], atol=2e-5, rtol=1e-4)
    with torch.no_grad():  # a pad is never read: whatever its embedding, the scored outputs stay
        model.tok_emb.weight[task.pad_id] += 3.0
    torch.testing.assert_close(model(tokens)[labelled], full[labelled], atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------------------ T5's span corruption

def test_span_corruption_replaces_spans_by_sentinels_and_the_target_gives_them_back(tmp_path):
    from ablate.data.seq2seq import SpanCorruption

    text = "".join(f"line {i}: the quick brown fox jumps over the lazy dog\n" for i in range(400))
    (tmp_path / "corpus.txt").write_text(text)
    task = SpanCorruption(seq_len=64, path=str(tmp_path / "corpus.txt"), n_test=16, n_val=8, batch_size=8)
    S, w = task.source_len(64), task.window(64)
    noise, k = task.spans(w)
    assert noise == round(0.15 * w) and k == round(noise / 3)
    splits = {"train": text.encode()[:int(len(text) * 0.9)], "test": text.encode()[int(len(text) * 0.95):],
              "validation": text.encode()[int(len(text) * 0.9):int(len(text) * 0.95)]}
    batches = {"train": [next(task.train_batches(0))], "test": task.eval_batches(64),
               "validation": task.eval_batches(64, "validation")}
    for split, rows_of_split in batches.items():
        for tokens, targets in rows_of_split:
            for row, target in zip(tokens.tolist(), targets.tolist()):
                source = row[:S - 1]
                spans = [t for t in target if t != IGNORE][:-1]  # without EOS
                assert [t for t in source if t >= task.sentinel_id] == list(range(task.sentinel_id, task.sentinel_id + k))
                assert [t for t in spans if t >= task.sentinel_id] == list(range(task.sentinel_id, task.sentinel_id + k))
                assert len(spans) - k == noise and all(t >= task.sentinel_id or t < 256 for t in source)
                pieces, i = {}, 0
                for t in spans:  # sentinel -> the bytes it replaced
                    if t >= task.sentinel_id:
                        i = t
                        pieces[i] = []
                    else:
                        pieces[i].append(t)
                window = [b for t in source for b in (pieces[t] if t >= task.sentinel_id else [t])]
                assert len(window) == w and bytes(window) in splits[split]  # its own split's text, restored
    again = SpanCorruption(seq_len=64, path=str(tmp_path / "corpus.txt"), n_test=16, n_val=8, batch_size=8)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(again.eval_batches(64), batches["test"]))


def test_an_encoder_decoder_ladder_gives_each_rung_tokens_in_proportion_to_its_parameters():
    """A scale ladder of encoder–decoders (Hoffmann et al.'s tokens per parameter): each rung's own
    parameters, both stacks and the cross-attention counted, set its steps."""
    from test_planner import planner

    from ablate.compose import tiny_overrides
    from ablate.model import assemble

    p = planner(["task=add", "model.arch=encoder_decoder", "model.size=3xs,2xs", "budget.match=tokens_per_param",
                 "budget.tokens_per_param=2", *tiny_overrides(without=["model.d_model", "model.n_heads", "model.n_layers"])])
    plan = p.plan()
    steps = plan.budget.steps
    for job in plan.definition:
        cost = p.cost(job)
        assert int(p.compose(job).trainer.max_steps) == max(1, round(2 * cost["params"] / cost["tokens_per_step"]))
        cfg = p.compose(job)
        task = build_task(cfg.task)
        with torch.device("meta"):
            model = assemble(cfg, task.vocab_size, task.n_classes, task.max_len, task.pad_id, task.layout)
        assert isinstance(model, EncoderDecoder) and cost["params"] == model.num_params()
    assert steps["model.size=2xs"] > 3 * steps["model.size=3xs"]
